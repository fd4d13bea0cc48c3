"""A split client's partition splits of a categorical feature: the prefixes of its category records
sorted by leaf weight, scored from the decrypted sums alone; and the source's reading of a winner.

Pure numpy, no parties. A source offers a feature of at least ``max_cat_to_onehot`` categories as one
*category record* per category (the rows of that category at the node, :mod:`ray_vfl.pivodl.candidates`;
with an instance threshold, its categories of 1 to ``t - 1`` rows of a client pooled into one record,
:func:`~ray_vfl.pivodl.threshold.offered`, which then counts as one category here)
and tells the split client which of its records form the feature (a group of record numbers, no
category value, no bin). The split client, which decrypts every record's left sums and the node's
totals, does what :func:`~ray_vfl.trees.categorical.categorical_children` does on a histogram:

* sorts the group's records by their leaf weight ``-G / (H + lambda)`` (records of exactly equal sums
  next to each other: a *run*);
* scores the split of every prefix of that order (1 to ``k - 1`` categories, at most
  ``max_cat_threshold`` on one side), missing values (the node total minus every category) left, then
  right;
* for a winning prefix, tells the source the records it holds for sure (``1``) and, when the cut falls
  inside a run, the run's records (``2``) and how many of them to take: the source takes those of the
  lowest bins, as the reference's stable sort by bin does. Records of a run have equal sums, so the
  children's sums do not depend on which are taken.

Where two categories of a feature have exactly equal leaf weights but different sums at a node, the
reference orders them by bin, which the split client does not know: it orders them by ``(H, G)``, and the
trees may then differ from the reference's at that node (records of equal sums -- empty categories,
categories of the same rows' labels -- are exact).

Example
-------
>>> GL = np.array([1.0, -3.0, 0.0, 2.0, 9.0]); HL = np.array([1.0, 1.0, 0.0, 1.0, 9.0])  # records 0-3: one feature
>>> cuts = prefix_cuts(GL, HL, 0.0, 3.0, np.array([0, 1, 2, 3]), 1.0, 0.0, 64)
>>> cuts.order.tolist(), [round(float(g), 3) for g in cuts.gain[0]]  # weights -0.5, 1.5, 0, -1
([3, 0, 2, 1], [3.333, 7.5, 7.5])
>>> codes, take = cuts.codes(1, 5); codes.tolist(), take  # prefix of 2: records 3 and 0
([1, 0, 0, 1, 0], 0)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..trees.kernels import split_gains
from .candidates import ONEHOT, CandidateTable

__all__ = ["PrefixCuts", "prefix_cuts", "categories_left", "first_tied"]


@dataclass(frozen=True)
class PrefixCuts:
    """The prefix splits of one group of category records: ``order`` (record numbers by leaf weight),
    ``gl``/``hl``/``gain`` ``(2, k - 1)`` (missing values left, then right; ``-inf``: not a candidate)
    and ``run`` ``(k,)``, the first position of each sorted record's run of equal sums."""

    order: np.ndarray
    gl: np.ndarray
    hl: np.ndarray
    gain: np.ndarray
    run: np.ndarray

    def codes(self, j: int, n_records: int) -> tuple[np.ndarray, int]:
        """The split of prefix ``j`` (``j + 1`` categories) as the source is told it: per record of the
        node ``1`` (left), ``2`` (in the run the cut falls in) or ``0``, and how many of the run go left."""
        codes = np.zeros(n_records, dtype=np.uint8)
        size = j + 1
        start = int(self.run[j])
        end = size
        while end < len(self.order) and self.run[end] == start:
            end += 1
        if end == size:  # the cut ends a run: every record before it, no choice
            codes[self.order[:size]] = 1
            return codes, 0
        codes[self.order[:start]] = 1
        codes[self.order[start:end]] = 2
        return codes, size - start


def prefix_cuts(GL: np.ndarray, HL: np.ndarray, G: float, H: float, records: np.ndarray, reg_lambda: float,
                min_child_weight: float, max_cat_threshold: int) -> PrefixCuts:
    """Score every prefix split of the category records ``records`` (numbers into ``GL``/``HL``, one
    feature's categories) at a node of totals ``G``, ``H`` (see the module docstring)."""
    records = np.asarray(records, dtype=np.int64)
    k = len(records)
    g, h = GL[records], HL[records]
    with np.errstate(divide="ignore", invalid="ignore"):
        weight = np.where(h + reg_lambda > 0, -g / (h + reg_lambda), 0.0)
    sort = np.lexsort((g, h, weight))
    order = records[sort]
    gs, hs, ws = g[sort], h[sort], weight[sort]
    new = np.ones(k, dtype=bool)
    new[1:] = (ws[1:] != ws[:-1]) | (hs[1:] != hs[:-1]) | (gs[1:] != gs[:-1])
    run = np.maximum.accumulate(np.where(new, np.arange(k), 0))
    below_g, below_h = np.cumsum(gs)[:-1], np.cumsum(hs)[:-1]  # prefixes of 1 .. k - 1 categories
    missing_g, missing_h = G - g.sum(), H - h.sum()
    gl = np.stack([below_g + missing_g, below_g])
    hl = np.stack([below_h + missing_h, below_h])
    gain = split_gains(gl, hl, G - gl, H - hl, G, H, reg_lambda, min_child_weight)
    size = np.arange(1, k)
    ok = (size <= max_cat_threshold) | (k - size <= max_cat_threshold)
    gain = np.where(ok[None, :], gain, -np.inf)
    return PrefixCuts(order, gl, hl, gain, run)


def categories_left(codes: np.ndarray, take: int, category_of_record: np.ndarray) -> np.ndarray:
    """At the source: the categories (bins) a told split sends left, ascending: those of the records coded
    ``1``, and the ``take`` lowest of those coded ``2``.

    >>> categories_left(np.array([1, 2, 0, 2]), 1, np.array([4, 7, 0, 2])).tolist()
    [2, 4]
    """
    sure = category_of_record[codes == 1]
    run = np.sort(category_of_record[codes == 2])[:take]
    return np.sort(np.concatenate([sure, run])).astype(np.int64)


def first_tied(cand: CandidateTable, order: np.ndarray, tied: np.ndarray, cuts: np.ndarray, n_cats: int,
               pools: dict | None = None) -> tuple:
    """At the source: the first of the tied candidates a split client told, in the reference order -- records
    (``order[r]`` is record ``r``'s candidate) and partition cuts (rows of per-record codes, how many of the
    run, missing left; checked by the message's schema) -- by ``(feature, missing right, threshold /
    category / prefix size - 1)``. Returns ``(feature, bin, default_left, left set or None, choice)``: the
    left set ``(n_cats,)`` of a categorical split, ``choice`` the record number or ``len(order)`` plus the
    cut's index (what the split client is told it chose). ``pools``: the candidates of each pooled record
    (by its first, :func:`~ray_vfl.pivodl.threshold.offered`), whose categories go together.

    >>> from ray_vfl.pivodl.candidates import FeatureSpec, candidate_table
    >>> table = candidate_table(FeatureSpec(np.array([0, 2]), np.array([False, False])), np.array([3, 0]), 2)
    >>> order = np.array([3, 0, 1, 2])  # record 0: a threshold of feature 1; records 1-3: categories 0-2
    >>> f, b, dl, left, choice = first_tied(table, order, np.array([0]), np.array([[0, 2, 1, 2, 1, 1]]), 4)
    >>> f, b, dl, left.tolist(), choice  # the cut (feature 0) comes first: category 1 and the lower of 0, 2
    (0, 1, True, [True, True, False, False], 4)
    """
    best = None
    for r in tied.tolist():
        c = int(order[r])
        key = (int(cand.feature[c]), 0 if cand.default_left[c] else 1, int(cand.bin[c]))
        if best is None or key < best[0]:
            left_set = None
            if cand.kind[c] == ONEHOT:
                left_set = np.zeros(n_cats, dtype=bool)
                left_set[cand.bin[c]] = True
            best = (key, bool(cand.default_left[c]), left_set, r)
    for i, row in enumerate(cuts):
        codes, take, dl = row[:-2], int(row[-2]), bool(row[-1])
        feature = int(cand.feature[order[np.flatnonzero(codes)[0]]])
        key = (feature, 0 if dl else 1, int((codes == 1).sum()) + take - 1)
        if best is None or key < best[0]:
            left_set = np.zeros(n_cats, dtype=bool)
            for c in categories_left(codes, take, cand.bin[order]).tolist():  # a pool's first category: all of it
                head = int(order[np.flatnonzero((cand.bin[order] == c) & (cand.feature[order] == feature))[0]])
                left_set[cand.bin[(pools or {}).get(head, [head])]] = True
            best = (key, dl, left_set, len(order) + i)
    (f, _, b), dl, left_set, choice = best
    return f, b, dl, left_set, choice
