"""Private set intersection (ECDH-PSI) among N parties, and row alignment by it.

Protocol: Diffie-Hellman PSI (Meadows 1986; Huberman, Franklin and Hogg 1999),
in a star around a *leader* (the label party when there is one). Every party
``P`` draws a secret scalar ``k_P`` from OS entropy and hashes each of its IDs
to the prime-order group ristretto255, ``H(id)`` (see :mod:`ray_vfl.psi.party`);
``[k]P`` is scalar multiplication and every point travels as its 32-byte
canonical encoding. Blinding commutes, ``[a][f]H(x) == [f][a]H(x)``, so the
double-blinded values of the leader's and a follower's IDs are equal exactly
on their common IDs. Each follower ``F`` (all in parallel) runs with the leader ``L``:

=====  ===============  =====================================  ==============================================
round  sender -> recv.  payload (bytes per ID)                 what the receiver learns
=====  ===============  =====================================  ==============================================
1      L -> F           ``[a]H(x)`` for x in L, L's order      ``|L|``; nothing about any ID (DDH: each value
                        (32)                                   is a uniform non-identity group element)
2      F -> L           ``[f]H(y)`` for y in F, shuffled       ``|F|``; nothing about any ID (DDH)
                        (32)
3      F -> L           ``[f][a]H(x)`` for x in L, L's         which of L's own rows F also holds: the
                        order, truncated (16)                  pairwise intersection ``L ∩ F`` (L compares
                                                               it with ``[a][f]H(y)``, computed locally)
4      L -> F           positions, in F's shuffled list, of    ``I`` = L ∩ F_1 ∩ ... ∩ F_{N-1}, as F's own
                        the rows of ``I`` in the common order  rows, in the common order; nothing about
                        (8 per row of ``I``)                   other followers or about ``L ∩ F`` beyond I
=====  ===============  =====================================  ==============================================

A point that is not the canonical encoding of a non-identity group element
is refused by its receiver (rounds 1 and 2) with a
:class:`~ray_vfl.errors.CryptoError` naming the sender; at the driver this
surfaces as the receiving party's :class:`~ray_vfl.errors.PartyFailedError`.

Who learns what, in sum: every party learns the final intersection ``I``
(that is the point of alignment) and the set sizes of the parties it talks
to. The leader also learns, for each follower, which of its own IDs that
follower holds (the pairwise intersections ``L ∩ F``, hence their sizes).
A follower learns nothing about another follower, and no party learns any
ID outside its own set. Security is against semi-honest parties.

The common order is ascending ID (numeric for integer IDs, by Unicode code
point for strings): it depends on neither the input row order nor the keys,
so it is deterministic, and every party could check it on its own rows.
The leader sorts once and the followers follow its positions.

Each party's rows outside ``I`` are kept, not dropped: :class:`PsiResult`
lists them, and :class:`ray_vfl.data.dataset.AlignedDataset` exposes them as frames (the label
party's unaligned rows can still train a local or split model).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np

from ..errors import ConfigError, DataError
from ..runtime.actors import Runtime
from ..runtime.comm import CommStats
from .party import PsiParty, normalize_ids

__all__ = ["PsiResult", "private_set_intersection"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PsiResult:
    """What PSI hands back to each party (collected at the driver in a simulation).

    Attributes
    ----------
    leader : str
        The party that coordinated the intersection.
    rows : dict[str, numpy.ndarray]
        Per party, positions of its input rows in the common aligned order:
        ``ids[p][rows[p][i]]`` is the same ID for every party ``p``. With ``keep_rows`` the parties
        keep these themselves and ``rows`` / ``unaligned_rows`` hold their counts.
    unaligned_rows : dict[str, numpy.ndarray]
        Per party, positions (ascending) of its rows outside the intersection.
    comm_stats : CommStats
        Every message of the run, as the metered send path recorded it.

    Example
    -------
    >>> result = PsiResult("bank", {"bank": np.array([2, 0]), "shop": np.array([0, 1])},
    ...                    {"bank": np.array([1]), "shop": np.array([], dtype=np.int64)})
    >>> result.n_aligned, result.rows["shop"].tolist()
    (2, [0, 1])
    """

    leader: str
    rows: dict[str, np.ndarray]
    unaligned_rows: dict[str, np.ndarray]
    comm_stats: CommStats = field(default_factory=CommStats)

    @property
    def n_aligned(self) -> int:
        first = next(iter(self.rows.values()))
        return int(first) if np.ndim(first) == 0 else len(first)


def private_set_intersection(
    runtime: Runtime,
    ids: Mapping[str, Any],
    leader: str | None = None,
    workers: int | None = None,
    audit: bool = False,
    timeout_s: float | None = None,
    keep_rows: bool = False,
) -> PsiResult:
    """Intersect the parties' ID sets by ECDH-PSI, one actor per party.

    Parameters
    ----------
    runtime : Runtime
        Owns the Ray connection and the actors (one :class:`PsiParty` per party).
    ids : mapping of str to array-like
        Each party's IDs (all integers or all strings, the same kind for every party).
    leader : str, optional
        The coordinating party (default: the first). See the module docstring for what it learns.
    workers : int, optional
        Pool tasks per party (default: all CPUs).
    audit : bool
        Have every party keep the messages it receives and their payloads (``runtime.actor(p).received``;
        tests only: the payloads then go to the driver).
    timeout_s : float, optional
        Longest wait for the whole protocol (default: the runtime's).
    keep_rows : bool
        Each party keeps its aligned rows for its own store (``runtime.actor(p).result()``), and
        :attr:`PsiResult.rows` / ``unaligned_rows`` hold only their counts: the driver learns sizes.
        ``ids`` may then be references each party reads in its own actor (``fetch_ids()``).

    Returns
    -------
    PsiResult
        Raises :class:`DataError` on bad IDs or an empty intersection and
        :class:`~ray_vfl.errors.PartyFailedError` if a party fails.

    Example
    -------
    >>> res = private_set_intersection(Runtime(), {"bank": [3, 1, 2], "shop": [2, 3, 4]})  # doctest: +SKIP
    >>> res.rows, res.unaligned_rows                                                     # doctest: +SKIP
    ({'bank': array([2, 0]), 'shop': array([0, 1])}, {'bank': array([1]), 'shop': array([2])})
    """
    if len(ids) < 2:
        raise ConfigError(f"PSI needs at least two parties, got {list(ids)}")
    # A party's IDs are an array here, or a reference its own actor reads (then checked there).
    checked = {str(p): (v, None) if hasattr(v, "fetch_ids") else normalize_ids(v, str(p), str(getattr(v, "name", None) or "id"))
               for p, v in ids.items()}
    names = list(checked)
    leader = names[0] if leader is None else leader
    if leader not in checked:
        raise ConfigError(f"leader {leader!r} is not one of the parties {names}")
    runtime.connect(names)
    handles = {p: runtime.spawn(p, PsiParty, p, arr, kind, runtime.pool(p, workers), audit, keep_rows)
               for p, (arr, kind) in checked.items()}
    runtime.introduce(names, timeout_s)  # the parties' public keys, before the first sealed message
    kinds = dict(zip(names, runtime.get([(p, handles[p].id_kind.remote()) for p in names], "psi id kinds", timeout_s)))
    if len(set(kinds.values())) > 1:
        raise DataError(f"parties use different ID kinds {kinds}; convert the ID columns to one kind "
                        "(for example frame[id_column].astype(str)) so equal customers get equal IDs")
    followers = [p for p in names if p != leader]
    lead = handles[leader]

    # The protocol of the module docstring, submitted without waiting: Ray chains the calls by reference.
    # The driver waits on the small results only; the point matrices go party to party.
    points = lead.blind_own.remote(followers, False)                               # round 1
    watch = []
    for f in followers:
        theirs = handles[f].blind_own.remote([leader], True)                       # round 2
        double = handles[f].reblind.remote(points)                                 # round 3
        watch += [(leader, lead.blind_theirs.remote(theirs)), (leader, lead.match.remote(double))]
    finished = lead.finish.options(num_returns=2 + len(followers)).remote(followers)   # round 4
    results = [(f, handles[f].apply_result.remote(m)) for f, m in zip(followers, finished[2:])]
    got = runtime.get(watch + [(leader, finished[0]), (leader, finished[1])] + results, "psi", timeout_s)
    got = got[len(watch):]
    rows = {leader: got[0]} | {f: r[0] for (f, _), r in zip(results, got[2:])}
    unaligned = {leader: got[1]} | {f: r[1] for (f, _), r in zip(results, got[2:])}
    records = runtime.get([(p, handles[p].comm_records.remote()) for p in names], "psi statistics", timeout_s)
    stats = CommStats(r for party_records in records for r in party_records)
    n_common = rows[leader] if keep_rows else len(rows[leader])
    if n_common == 0:
        sizes = {p: (rows[p] + unaligned[p]) if keep_rows else len(checked[p][0]) for p in names}
        raise DataError(f"the parties' ID sets have no common ID (sizes {sizes}); check that every party's ID "
                        "column holds the same customer IDs in the same format")
    log.info("PSI: %d common rows; %.3f MB exchanged", n_common, stats.total_mb)
    return PsiResult(leader, {p: rows[p] for p in names}, {p: unaligned[p] for p in names}, stats)
