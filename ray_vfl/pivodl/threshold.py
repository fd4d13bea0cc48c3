"""The instance threshold: which of its candidates a source may offer a split client at a node.

Pure numpy, no parties. A split client decrypts, for every candidate a source offers at a node, the
summed gradients of the candidate's left branch over every client's labelled rows, and the node's
totals; it derives each right branch (total minus left), it holds its own rows' part of every sum,
and it can subtract any two sums of the node. Every client can compute every row's margin (base
score, released leaf weights, public partitions), so a sum over a *single* row of another client,
found by its hessian, reads that row's label as ``y = p - g``. With adjacent thresholds, a
difference of two left branches is one bin's sum: the differential attack
(:func:`~ray_vfl.pivodl.attack.differential_guesses`).

Rule, for threshold ``t``: a candidate is offered only if, for *every* client ``k`` (the split
client included: who scores a node does not change the tree), its left branch and its right branch
each hold 0 or at least ``t`` of ``k``'s labelled rows of the node, and, against every candidate
offered before it (in the reference order: feature by feature, missing-left before missing-right,
thresholds ascending), the rows where the two differ (left at one, right at the other) and the rows
where they agree each hold 0 or at least ``t`` of ``k``'s rows. Then every sum the split client
decrypts or derives for the node -- a left branch, a right branch, the node's totals (the children
of offered candidates, so by induction from the root) -- and every difference of two of them sums 0
or at least ``t`` rows of each client, its own part removed or not. Adjacent thresholds with fewer
than ``t`` of some client's rows between them are merged (the first is kept); a candidate that cuts
the node almost as an offered one does is dropped, which costs little: its split was nearly on offer.

:func:`admissible` states the rule on row sets; :func:`admissible_bins`, which the sources and the
centralized reference run, computes the same from each client's co-occurrence counts of bins.

Category records (:data:`~ray_vfl.pivodl.candidates.CATEGORY`: a feature split by partition) are offered
all or none per feature and node: the split client adds them up in any combination (every prefix of its
order, either missing side), so the rule is stated on the feature's *atoms* -- each category's rows of the
node and its missing rows, which part the node, the categories holding 1 to ``t - 1`` rows of some client
pooled into one atom (one record) -- : every atom holds 0 or at least ``t`` of each client's rows (so does
every union of atoms: each category, each prefix, the missing rows, a complement); every union differs
from every candidate offered before it (and every later candidate offered differs from every union) in 0
or at least ``t`` rows of each client, and the rows where they agree too (checked over all unions at once:
the sums of one part per atom below ``t`` are reachable or not); and the atoms of two partition features of
one source meet in 0 or at least ``t`` rows.

Not covered: sums of different nodes (a parent's and a child's, say) combined, the tracker problem
of statistical databases, which no bound on set sizes closes. (The driver deals each node's split
clients so that no client scores two sources' candidates at one node.)

Example
-------
>>> members = np.array([[1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0]], dtype=bool)  # three nested left branches
>>> admissible(members, np.zeros(4, dtype=np.int64), 1, 2).tolist()  # 1 row left; 2 and 2; 1 row right
[False, True, False]
"""

from __future__ import annotations

import numpy as np

from .candidates import CATEGORY, CandidateTable

__all__ = ["left_members", "admissible", "admissible_bins", "offered"]


def left_members(bins: np.ndarray, table: CandidateTable, missing_bin: int) -> np.ndarray:
    """``(candidates, rows)``: does each row (binned ``(rows, F)``) go left at each candidate.

    Example
    -------
    >>> from ray_vfl.pivodl.candidates import FeatureSpec, candidate_table
    >>> table = candidate_table(FeatureSpec(np.array([1]), np.array([True])))  # 2 bins and missing values
    >>> left_members(np.array([[0], [1], [9]]), table, missing_bin=9).astype(int).tolist()
    [[1, 0, 1], [1, 0, 0], [1, 1, 0]]
    """
    col = bins[:, table.feature].T
    present = np.where((table.kind == 0)[:, None], col <= table.bin[:, None], col == table.bin[:, None])
    missing = np.where(table.kind == CATEGORY, table.bin == missing_bin, table.default_left)
    return np.where(col == missing_bin, missing[:, None], present)


def _fine(count: np.ndarray, threshold: int) -> np.ndarray:
    return (count == 0) | (count >= threshold)


def _mixes_fine(inside: np.ndarray, outside: np.ndarray, threshold: int) -> np.ndarray:
    """``inside``/``outside`` ``(atoms, clients, C)``: each atom's rows inside and outside candidate ``c``'s left
    branch. Whether, for every client and candidate, every union ``U`` of the atoms differs from the left
    branch in 0 or at least ``threshold`` rows (``|U \\ L| + |L \\ U|`` takes, per atom, its rows outside
    ``L`` if in ``U``, else its rows inside ``L``; the complement of ``U`` is also a union): ``(C,)``."""
    n_atoms, n_clients, n = inside.shape
    reach = np.zeros((n_clients, n, threshold), dtype=bool)  # sums below threshold reachable so far
    reach[..., 0] = True
    steps = np.arange(threshold)
    for a in range(n_atoms):
        new = np.zeros_like(reach)
        for part in (inside[a], outside[a]):
            src = steps[None, None, :] - part[:, :, None]
            ok = src >= 0
            new |= np.where(ok, np.take_along_axis(reach, np.maximum(src, 0), axis=2), False)
        reach = new
    return ~reach[..., 1:].any(axis=(0, 2))


def _keep(left: np.ndarray, both: np.ndarray, size: np.ndarray, threshold: int,
          group: np.ndarray | None = None) -> np.ndarray:
    """The greedy of the module docstring from per-client counts: ``left`` ``(clients, C)`` rows left at each
    candidate, ``both`` ``(clients, C, C)`` rows left at both of two, ``size`` ``(clients,)`` rows in all.
    ``group[i]`` >= 0 makes entry ``i`` an atom of partition feature ``group[i]`` (its category records, then
    its missing rows), taken or left as a whole where its first entry comes; -1 a candidate."""
    n = left.shape[1]
    group = np.full(n, -1) if group is None else np.asarray(group)
    size = size[:, None]
    single = (_fine(left, threshold) & _fine(size - left, threshold)).all(axis=0)
    differ = left[:, :, None] + left[:, None, :] - 2 * both
    pair = (_fine(differ, threshold) & _fine(size[:, :, None] - differ, threshold)).all(axis=0)
    meet = _fine(both, threshold).all(axis=0)  # two atoms' common rows
    atoms_of = {int(g): np.flatnonzero(group == g) for g in np.unique(group[group >= 0])}

    def mixes(atoms: np.ndarray, cands: np.ndarray) -> bool:  # every union of ``atoms`` against each candidate
        if not len(cands) or not len(atoms):
            return True
        inside = np.transpose(both[:, atoms][:, :, cands], (1, 0, 2))  # (atoms, clients, candidates)
        outside = np.transpose(left[:, atoms], (1, 0))[:, :, None] - inside
        return bool(_mixes_fine(inside, outside, threshold).all())

    kept = np.zeros(n, dtype=bool)
    seen = set()
    for i in range(n):
        plain = np.flatnonzero(kept & (group < 0))
        if group[i] < 0:
            if single[i] and pair[i, plain].all() and all(mixes(atoms_of[g], np.array([i])) for g in seen
                                                          if kept[atoms_of[g]].all()):
                kept[i] = True
            continue
        if group[i] in seen:
            continue
        seen.add(int(group[i]))
        mine = atoms_of[int(group[i])]
        others = np.flatnonzero(kept & (group >= 0))
        if _fine(left[:, mine], threshold).all() and meet[np.ix_(mine, others)].all() and mixes(mine, plain):
            kept[mine] = True
    return kept


def _atoms(table: CandidateTable, missing_bin: int) -> tuple[CandidateTable, np.ndarray, int]:
    """``table`` followed by one missing-rows atom per partition feature, and each entry's group (-1: a
    candidate; else its partition feature's index); returns the number of ``table``'s own entries too."""
    n = len(table)
    cat = table.kind == CATEGORY
    features = np.unique(table.feature[cat])
    group = np.where(cat, np.searchsorted(features, table.feature), -1)
    extra = CandidateTable(features, np.full(len(features), missing_bin), np.zeros(len(features), dtype=bool),
                           np.full(len(features), CATEGORY))
    joined = CandidateTable(*(np.concatenate([getattr(table, k), getattr(extra, k)])
                              for k in ("feature", "bin", "default_left", "kind")))
    return joined, np.concatenate([group, np.arange(len(features))]), n


def admissible(members: np.ndarray, client_of_row: np.ndarray, n_clients: int, threshold: int,
               group: np.ndarray | None = None) -> np.ndarray:
    """Which candidates (rows of ``members``, each a left branch as a row mask, in the reference order) the
    rule of the module docstring offers; ``client_of_row`` is the index of the client that labels each of the
    node's rows; ``group`` marks the atoms of partition features (see :func:`_keep`). Threshold 1 offers
    every candidate."""
    n = len(members)
    if threshold <= 1 or n == 0:
        return np.ones(n, dtype=bool)
    left, both, size = [], [], []
    for k in range(n_clients):
        m = members[:, client_of_row == k].astype(np.float64)  # integer counts stay exact
        left.append(m.sum(axis=1))
        both.append(m @ m.T)
        size.append(m.shape[1])
    return _keep(np.rint(left).astype(np.int64), np.rint(both).astype(np.int64), np.asarray(size), threshold, group)


def admissible_bins(bins: np.ndarray, table: CandidateTable, missing_bin: int, client_of_row: np.ndarray,
                    n_clients: int, threshold: int) -> np.ndarray:
    """:func:`admissible` for the candidates of ``table`` at rows binned ``(rows, F)``, from each client's
    co-occurrence counts of bins (feature by feature) instead of row masks: its cost does not grow with
    the rows beyond one count per row and feature pair. A partition feature's category records are kept
    or dropped together, with its missing rows as one more atom, its small categories pooled
    (:func:`offered`).

    Example
    -------
    >>> from ray_vfl.pivodl.candidates import FeatureSpec, candidate_table
    >>> table = candidate_table(FeatureSpec(np.array([3]), np.array([False])))
    >>> bins = np.array([[0], [1], [1], [2], [2], [3]])
    >>> admissible_bins(bins, table, 9, np.zeros(6, dtype=np.int64), 1, 2).tolist()
    [False, True, False]
    """
    return offered(bins, table, missing_bin, client_of_row, n_clients, threshold)[0]


def offered(bins: np.ndarray, table: CandidateTable, missing_bin: int, client_of_row: np.ndarray,
            n_clients: int, threshold: int) -> tuple[np.ndarray, np.ndarray]:
    """Which entries of ``table`` a source offers at rows binned ``(rows, F)``, and the record each is in
    (``pool[i]``: the entry whose record holds entry ``i``, ``i`` itself but for a pooled category). A
    partition feature's categories that hold 1 to ``threshold - 1`` rows of some client at the node are
    *pooled* into one record (the record of the first of them), which then must hold 0 or at least
    ``threshold`` of each client's rows as any atom; the feature is offered with its pool or not at all.

    Example
    -------
    >>> from ray_vfl.pivodl.candidates import FeatureSpec, candidate_table
    >>> cats = candidate_table(FeatureSpec(np.array([3]), np.array([False])), np.array([4]))  # one record per category
    >>> bins = np.array([[0], [1], [1], [2], [2], [3]])
    >>> kept, pool = offered(bins, cats, 9, np.zeros(6, dtype=np.int64), 1, 2)  # categories 0 and 3 hold 1 row
    >>> kept.tolist(), pool.tolist()
    ([True, True, True, True], [0, 1, 2, 0])
    """
    n = len(table)
    pool = np.arange(n)
    if threshold <= 1 or n == 0:
        return np.ones(n, dtype=bool), pool
    table, group, n = _atoms(table, missing_bin)
    width = missing_bin + 1
    goes = table.left_bins(width).astype(np.float64)  # which bins of its feature go left at each entry
    features = np.unique(table.feature)
    of = {f: np.flatnonzero(table.feature == f) for f in features.tolist()}
    total = len(table)
    left = np.zeros((n_clients, total), dtype=np.int64)
    both = np.zeros((n_clients, total, total), dtype=np.int64)
    size = np.bincount(client_of_row, minlength=n_clients)
    for k in range(n_clients):
        b = bins[client_of_row == k].astype(np.int64)
        for i, f in enumerate(features.tolist()):
            cf = of[f]
            for g in features[i:].tolist():
                cg = of[g]
                counts = np.bincount(b[:, f] * width + b[:, g], minlength=width * width).reshape(width, width)
                block = np.rint(goes[cf] @ counts @ goes[cg].T).astype(np.int64)
                both[k][np.ix_(cf, cg)] = block
                both[k][np.ix_(cg, cf)] = block.T
            left[k, cf] = np.diagonal(both[k])[cf]
    # pool each partition feature's small categories into the record of the first of them
    small = ((left > 0) & (left < threshold)).any(axis=0) & (np.arange(total) < n) & (group >= 0)
    head = np.arange(total)
    for g in np.unique(group[small]).tolist():
        members = np.flatnonzero(small & (group == g))
        head[members] = members[0]
    entries = np.flatnonzero(head == np.arange(total))
    if len(entries) == total:  # nothing pooled
        return _keep(left, both, size, threshold, group)[:n], head[:n]
    merge = (head[None, :] == entries[:, None]).astype(np.int64)  # (entries, total) 0/1: a pool sums its members
    kept2 = _keep(left @ merge.T, merge @ both @ merge.T, size, threshold, group[entries])
    return kept2[np.searchsorted(entries, head)][:n], head[:n]
