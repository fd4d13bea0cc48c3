"""Server C's split finding on ciphertexts: gains as fractions, compared without decrypting any.

For a candidate with left sums ``GL``, ``HL`` of a node with sums ``G``, ``H`` (integers in units of
``2^-F``, ``L = round(lambda 2^F)``, ``GR = G - GL``, ``DL = HL + L``, ``DR = HR + L``, ``T = DL + DR =
H + 2L > 0``), XGBoost's gain is, up to terms equal for every candidate of the node,
``GL^2 / DL + GR^2 / DR``. The parent's share of it is the same for every candidate and drops out:

    GL^2 / DL + GR^2 / DR = G^2 / T + d^2 / (T DL DR),   d = GL DR - GR DL

(multiply out: ``T (GL^2 DR + GR^2 DL) - G^2 DL DR = (GL DR - GR DL)^2`` with ``G = GL + GR``,
``T = DL + DR``).
``G^2 / T`` and ``T > 0`` are the node's, so candidates rank by the fraction

    num / den,   num = d^2,   den = DL DR > 0

exactly as by their gains, ties included (scales ``2^4F`` and ``2^2F``). Two Mult rounds give every
candidate's ``Enc(num)``, ``Enc(den)``: ``GL DR``, ``GR DL`` and ``DL DR``, then ``d d`` (4 products, 5
masked operands: ``GL``, ``GR``, ``DL``, ``DR``, ``d``; the form ``GL^2 DR + GR^2 DL`` took 5 products and 6).
A tournament then finds each node's best candidate: at every level the candidates are paired, one
Mult round gives ``num_a den_b`` and ``num_b den_a``, one LGT round ``b = [num_a den_b < num_b den_a]``
(``b`` is ``1`` iff the right one is strictly better), one Mult round selects ``num``, ``den``, the
encrypted index ``idx`` of the winner and the encrypted number ``w`` of the participant that owns it
(``x_a + b (x_b - x_a)``). Ties go to the lower index, as ``numpy.argmax`` and the reference's strict
``<``; all nodes of a level run in the same rounds (at most ``3 ceil(log2 k) + 2`` rounds for ``k``
candidates per node). Selections whose difference is public to C are not Mults:

* the index at the first level: the pairs are neighbours, ``idx_b - idx_a = 1``, so the winner's index
  is ``idx_a + b``;
* the owner wherever both entries stand for candidates of one participant each (C knows every
  candidate's owner): ``w_a + b (w_b - w_a)`` is an Exp of ``b`` by the public ``w_b - w_a``, or ``w_a``.
  The other pairs (at most ``P - 1`` per node and level for node-major owners, ``P`` participants) get a
  Mult, padded with public pairs to ``min(P - 1, pairs)`` per node so the round's size depends only on
  ``k``, the nodes and ``P``, which S knows (its array lengths, the user keys it registered);
* ``num`` and ``den`` at the last level, whose winner is not compared again.

Per node of ``k`` candidates: ``4 k`` products for the gains, ``2 (k - 1)`` for the comparisons,
``2 (k - 2)`` for ``num``/``den``, ``k - 1 - floor(k / 2)`` for the index and the owners' few; at ``k = 30``,
``P = 2``: 252 products (8.4 per candidate) where the form above and four selections per comparison took
324 (10.8), and ``k - 1`` LGT values as before (``benchmarks/ssxgb_split_ops.py`` counts them).
No gain, sum or comparison result is ever decrypted: S sees only masked values
(:mod:`ray_vfl.crypto.two_server.server_s`), C only ciphertexts. Exact: no approximation.

Not skipped: candidates whose left sums equal their neighbour's (an empty bin at that node). Their
gains tie, and the tournament already gives the tie to the lower index, but only the participant
knows which bins of a node are empty; telling C (or sending fewer candidates) would show C and S how
many distinct values each feature takes in each node, which neither view table admits.

Telling the winners (:func:`winner_notes`). Participant ``i`` gets, per node, under its own key,
``v_i = (idx - o_i) + rho_i (w - i) mod N`` (``o_i``: the global index of its first candidate, ``rho_i``
uniform in ``Z_N``, fresh per node and participant). The owner (``w = i``) decrypts its local index
``idx - o_i``, in ``[0, k_i)``; any other participant decrypts a value uniform in ``Z_N`` whatever the
winner and wherever it sits: it learns only that the node is not its own.

Mask sizes. With ``|G|, |GL| + |GR|, H + 2L < 2^s`` (``s`` = ``sum_bits`` of the fixed-point plan),
every Mult operand has a known bound: ``GL``, ``GR``, ``DL``, ``DR`` ``2^s``, ``|d| < 2^(2s)``, ``num``
``2^(4s)``, ``den`` ``2^(2s)``, their differences one bit more, the comparison bit 1 bit, the index
difference the bits of ``k``, the owner difference the bits of ``P``; the comparisons' cross products
stay below ``2^l`` (:meth:`~ray_vfl.ssxgb.approx.FixedPointPlan.comparison_bits`, checked by C). Each
Mult masks an operand with that bound plus ``kappa`` bits
(:meth:`~ray_vfl.crypto.two_server.server_c.ServerC.mult_many`), which hides it as well as a mask of
``l + kappa`` bits and makes C's exponentiations by the masks cheaper. The bounds hold by construction:
C clamps every margin into ``[-R, R]`` before the gradients (:mod:`ray_vfl.ssxgb.approx`), so
``|g| < 2^F`` and ``0 < h <= 2^(F-2) + 1`` per row; S is told each bound and refuses an opened value
far past it. An operand used twice in one round is masked and opened once: ``DL`` and ``DR`` in the
gains' first round, ``d`` in its square, the comparison bit in the selections.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence

import numpy as np

from ..crypto.he.ciphertexts import CipherArray
from ..crypto.two_server.bcp import BCPPublicKey
from ..crypto.two_server.server_c import ServerC
from ..errors import CryptoError

__all__ = ["best_candidates", "gain_fractions", "winner_notes"]


def _capped(c: ServerC, *bits: int) -> tuple[int, ...]:
    return tuple(min(int(b), c.config.value_bits) for b in bits)


def gain_fractions(c: ServerC, gl: CipherArray, hl: CipherArray, g_node: CipherArray, h_node: CipherArray,
                   lam: int, sum_bits: int) -> tuple[CipherArray, CipherArray]:
    """``(Enc(num), Enc(den))`` per candidate, ``num = (GL (HR + L) - GR (HL + L))^2`` and
    ``den = (HL + L) (HR + L)`` (the module docstring: their order is the gains' order, ties
    included); ``g_node``/``h_node`` hold each candidate's node sums (every sum, ``lambda`` added,
    below ``2^sum_bits`` in absolute value). 4 products in 2 rounds; 5 masked operands."""
    bcp, pk = c.bcp, c.key_of(gl)
    n, s = len(gl), sum_bits
    lam_c = c.encrypt_ints(pk, [lam] * n, int(gl.tag[5:]))
    gr, hr = bcp.sub(pk, g_node, gl), bcp.sub(pk, h_node, hl)
    hl_l, hr_l = bcp.add(pk, hl, lam_c), bcp.add(pk, hr, lam_c)
    # HL + L and HR + L are masked and opened once for their three products
    u, v, den = c.mult_many([(gl, hr_l), (gr, hl_l), (hl_l, hr_l)], [_capped(c, s, s)] * 3)
    d = bcp.sub(pk, u, v)  # |d| <= (|GL| + |GR|) max(HL + L, HR + L) < 2^(2s)
    (num,) = c.mult_many([(d, d)], [_capped(c, 2 * s, 2 * s)])
    return num, den


def _merge_level(single: np.ndarray, owned: np.ndarray, m: int) -> tuple[np.ndarray, np.ndarray]:
    """Entries of the next level (winners of the pairs, then the odd one out): whether each stands
    for one candidate, and its owner where every candidate it stands for has the same one (else -1)."""
    a, b = owned[0:m:2], owned[1:m:2]
    single2 = np.zeros(m // 2, dtype=bool)
    owned2 = np.where((a == b) & (a >= 0), a, -1)
    if m < len(single):
        single2, owned2 = np.append(single2, single[m:]), np.append(owned2, owned[m:])
    return single2, owned2


def best_candidates(c: ServerC, num: CipherArray, den: CipherArray, n_nodes: int, k: int, sum_bits: int,
                    owner: Sequence[int], participants: int | None = None) -> tuple[CipherArray, CipherArray]:
    """``(Enc(index of the best candidate), Enc(number of its owner))`` of each node; ``num``/``den`` hold
    ``n_nodes`` blocks of ``k`` (from :func:`gain_fractions` with the same ``sum_bits``); ``owner[j]`` is
    the participant (a number in ``[0, participants)``) of a node's ``j``-th candidate, the same in every
    node; ``participants`` (default ``max(owner) + 1``) sets how many owner selections a level makes
    (the module docstring)."""
    s = sum_bits
    owner = [int(v) for v in owner]
    if len(owner) != k or min(owner) < 0:
        raise CryptoError(f"owner must hold one participant number >= 0 per candidate ({k}), got {len(owner)}")
    n_parties = max(owner) + 1 if participants is None else int(participants)
    if n_parties <= max(owner):
        raise CryptoError(f"owner numbers must be below participants ({n_parties}), got {max(owner)}")
    compare = [_capped(c, 4 * s, 2 * s)] * 2
    select = [_capped(c, 1, 4 * s + 1), _capped(c, 1, 2 * s + 1)]
    idx_bound, who_bound = _capped(c, 1, k.bit_length() + 1), _capped(c, 1, n_parties.bit_length() + 1)
    bcp, pk = c.bcp, c.key_of(num)
    idx = c.encrypt_ints(pk, list(range(k)) * n_nodes)
    who = c.encrypt_ints(pk, owner * n_nodes)
    cols = np.arange(n_nodes * k).reshape(n_nodes, k)  # positions of each node's remaining candidates
    single = np.ones(k, dtype=bool)  # per entry of a node (the same in every node): one candidate?
    owned = np.asarray(owner, dtype=np.int64)  # ... and its owner, if all it stands for have one (else -1)
    while cols.shape[1] > 1:
        width = cols.shape[1]
        m = width // 2 * 2
        half, last = m // 2, width == 2
        left, right = cols[:, 0:m:2].ravel(), cols[:, 1:m:2].ravel()
        na, nb, da, db = (bcp.take(num, left), bcp.take(num, right), bcp.take(den, left), bcp.take(den, right))
        ia, ib, wa, wb = bcp.take(idx, left), bcp.take(idx, right), bcp.take(who, left), bcp.take(who, right)
        x, y = c.mult_many([(na, db), (nb, da)], compare)
        bit = c.lgt(x, y)
        pairs, bounds = [], []
        if not last:  # the last level's winner needs only its index and owner
            pairs += [(bit, bcp.sub(pk, nb, na)), (bit, bcp.sub(pk, db, da))]
            bounds += select
        # the index: a public difference (+1) where both entries stand for one candidate (the first level)
        idx_public = bool(single[0:m].all())
        if not idx_public:
            pairs.append((bit, bcp.sub(pk, ib, ia)))
            bounds.append(idx_bound)
        # the owner: a public difference where each entry has one owner (every pair of the first level);
        # a product for the others, made for min(participants - 1, half) pairs of every node from the
        # second level on (padded with public ones: S sees a count that depends only on P and k)
        oa, ob = owned[0:m:2], owned[1:m:2]
        public = (oa >= 0) & (ob >= 0)
        target = max(int((~public).sum()), 0 if idx_public else min(n_parties - 1, half))
        chosen = np.flatnonzero(~public).tolist()
        chosen += [p for p in range(half) if public[p]][:target - len(chosen)]
        rows = (np.arange(n_nodes)[:, None] * half + np.asarray(sorted(chosen), dtype=np.int64)[None, :]).ravel()
        whole = len(chosen) == half
        if chosen:
            b_who = bit if whole else bcp.take(bit, rows)
            dw_in = bcp.sub(pk, wb, wa) if whole else bcp.sub(pk, bcp.take(wb, rows), bcp.take(wa, rows))
            pairs.append((b_who, dw_in))
            bounds.append(who_bound)
        got = iter(c.mult_many(pairs, bounds)) if pairs else iter(())
        won_num = won_den = None
        if not last:
            dn, dd = next(got), next(got)
            won_num, won_den = bcp.add(pk, na, dn), bcp.add(pk, da, dd)
        won_idx = bcp.add(pk, ia, bit if idx_public else next(got))
        won_who = _owner_select(c, pk, bit, wa, ob - oa, public, rows, next(got) if chosen else None, whole,
                                n_nodes, half)
        base = np.arange(n_nodes * half).reshape(n_nodes, half)
        if last:
            idx, who = won_idx, won_who
        else:
            parts = [[w] for w in (won_num, won_den, won_idx, won_who)]
            if m < width:  # each node's odd one out goes up unchanged, after the winners
                odd = cols[:, m]
                for part, arr in zip(parts, (num, den, idx, who)):
                    part.append(bcp.take(arr, odd))
                base = np.column_stack([base, n_nodes * half + np.arange(n_nodes)])
            num, den, idx, who = (bcp.concat(part) for part in parts)
        single, owned = _merge_level(single, owned, m)
        cols = base
    return bcp.take(idx, cols[:, 0]), bcp.take(who, cols[:, 0])


def _owner_select(c: ServerC, pk, bit: CipherArray, wa: CipherArray, diff: np.ndarray, public: np.ndarray,
                  rows: np.ndarray, product: CipherArray | None, whole: bool, n_nodes: int,
                  half: int) -> CipherArray:
    """``wa + bit (wb - wa)`` per pair: the Mult's ``product`` at ``rows`` (all pairs if ``whole``), an
    Exp of ``bit`` by the public difference at the other pairs whose owners differ, ``wa`` where equal."""
    bcp = c.bcp
    if whole:
        return bcp.add(pk, wa, product)
    flat_diff = np.tile(diff, n_nodes)
    flat_public = np.tile(public, n_nodes)
    done = np.zeros(n_nodes * half, dtype=bool)
    done[rows] = True
    moved = np.flatnonzero(flat_public & ~done & (flat_diff != 0))
    still = np.flatnonzero(~done & ~np.isin(np.arange(n_nodes * half), moved))
    pieces, order = [], []
    if len(rows):
        pieces.append(bcp.add(pk, bcp.take(wa, rows), product))
        order.append(rows)
    if len(moved):
        step = c.exp(bcp.take(bit, moved), flat_diff[moved].tolist())
        pieces.append(bcp.add(pk, bcp.take(wa, moved), step))
        order.append(moved)
    if len(still):
        pieces.append(bcp.take(wa, still))
        order.append(still)
    return bcp.take(bcp.concat(pieces), np.argsort(np.concatenate(order)))


def winner_notes(c: ServerC, idx: CipherArray, who: CipherArray, offsets: Sequence[int],
                 keys: Sequence[BCPPublicKey]) -> list[CipherArray]:
    """Per participant ``i`` (``keys[i]`` its user key, ``offsets[i]`` the global index of its first
    candidate), ``Enc_pk_i(v_i)`` per node with ``v_i = (idx - offsets[i]) + rho_i (w - i) mod N``:
    the local index of the winner at its owner ``w``, a uniform value of ``Z_N`` at everyone else
    (one TransDec round for all).

    Why a non-owner learns nothing: for ``w != i``, ``0 < |w - i| < P``, far below the primes of ``N``,
    so ``w - i`` is a unit of ``Z_N`` and ``rho_i (w - i)`` is uniform in ``Z_N`` for ``rho_i`` uniform;
    ``v_i`` is then uniform whatever ``idx`` and ``w`` are (exactly, not statistically), and independent
    of every other participant's value (independent ``rho``). The chance that it falls in ``[0, k_i)``,
    which the participant would take for a win, is ``k_i / N`` (below ``2^-1000`` at 1024 bits). S sees
    ``v_i + tau`` in TransDec, uniform as well; C sees ciphertexts.
    """
    if len(offsets) != len(keys):
        raise CryptoError(f"{len(offsets)} offsets for {len(keys)} participants")
    bcp, pk = c.bcp, c.key_of(idx)
    n, m = pk.params.n, len(idx)
    notes = []
    for i, o in enumerate(offsets):
        local = bcp.add(pk, idx, c.encrypt_ints(pk, [-int(o)] * m))
        away = bcp.add(pk, who, c.encrypt_ints(pk, [-i] * m))  # Enc(w - i): 0 only at the owner
        notes.append(bcp.add(pk, local, bcp.mul_const(pk, away, [secrets.randbelow(n) for _ in range(m)])))
    return c.trans_dec_many(notes, list(keys))
