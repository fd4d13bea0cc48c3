"""A source client's split candidates.

Pure numpy, no parties. A *candidate* is ``(feature, bin, default_left)``: rows whose bin is at most
``bin`` go left, rows with a missing value go left iff ``default_left``. The candidates of a source
client's features are listed in the centralized reference's order (:func:`~ray_vfl.trees.kernels.best_splits`:
feature by feature, missing-left before missing-right, thresholds ascending), leaving out only
those that cannot change the outcome: a threshold at or above the feature's highest training bin
with missing values sent left (every row goes left: never valid), and the missing-right copy of
every threshold of a feature without missing values (the same partition as its missing-left
twin, which comes first and wins the tie). The first candidate within the tie margin of the best
gain is therefore the reference's choice.

Native categorical features (``enable_categorical``, one bin per category,
:mod:`ray_vfl.trees.categorical`): a feature of fewer than ``max_cat_to_onehot`` categories lists one
candidate per category and missing direction (kind :data:`ONEHOT`: category ``bin`` alone left, missing
values left iff ``default_left``), as the reference's one-against-the-rest candidates; a feature of more
lists one *category record* per category (kind :data:`CATEGORY`: the rows of category ``bin``, missing
values never), not a candidate itself: the split client sorts a feature's category records by their leaf
weight at the node and scores the prefixes of that order (:mod:`ray_vfl.pivodl.partition`).

Example
-------
>>> spec = FeatureSpec(np.array([2, 0]), np.array([False, True]))
>>> table = candidate_table(spec)
>>> table.feature.tolist(), table.bin.tolist(), table.default_left.tolist()
([0, 0, 1], [0, 1, 0], [True, True, False])
>>> cats = candidate_table(spec, n_categories=np.array([3, 0]), max_cat_to_onehot=4)  # feature 0: 3 categories
>>> cats.feature.tolist(), cats.bin.tolist(), cats.kind.tolist()
([0, 0, 0, 1], [0, 1, 2, 0], [1, 1, 1, 0])
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["FeatureSpec", "CandidateTable", "candidate_table", "feature_spec", "THRESHOLD", "ONEHOT", "CATEGORY"]

THRESHOLD, ONEHOT, CATEGORY = 0, 1, 2  # a candidate's kind: bins <= bin left; bin alone left; a category record


@dataclass(frozen=True)
class FeatureSpec:
    """What lists a client's candidates: per feature, the highest bin of a present value in training
    (-1 if none) and whether any value is missing. It stays with the client (and with the centralized
    reference, :mod:`ray_vfl.pivodl.reference`)."""

    top_bin: np.ndarray  # int (F,)
    has_missing: np.ndarray  # bool (F,)


@dataclass(frozen=True)
class CandidateTable:
    """Candidates in the reference order: arrays of equal length."""

    feature: np.ndarray
    bin: np.ndarray
    default_left: np.ndarray
    kind: np.ndarray | None = None  # THRESHOLD, ONEHOT or CATEGORY per candidate (None: all THRESHOLD)

    def __post_init__(self) -> None:
        if self.kind is None:
            object.__setattr__(self, "kind", np.zeros(len(self.feature), dtype=np.int64))

    def __len__(self) -> int:
        return len(self.feature)

    def take(self, index: np.ndarray) -> "CandidateTable":
        """The candidates at ``index``, in that order."""
        return CandidateTable(self.feature[index], self.bin[index], self.default_left[index], self.kind[index])

    def left_bins(self, width: int) -> np.ndarray:
        """``(candidates, width)`` bool: which bins of its feature each candidate sends left (the last one,
        ``width - 1``, holds missing values)."""
        values = np.arange(width)[None, :]
        present = np.where((self.kind == THRESHOLD)[:, None], values <= self.bin[:, None], values == self.bin[:, None])
        # missing values: a category record never holds them (the missing-rows atom of the instance threshold,
        # a CATEGORY entry of bin width - 1, holds only them)
        missing = np.where(self.kind == CATEGORY, self.bin == width - 1, self.default_left)[:, None]
        return np.where(values == width - 1, missing, present)


def feature_spec(bins: np.ndarray, missing_bin: int) -> FeatureSpec:
    """The :class:`FeatureSpec` of a client's training bins ``(n, F)``."""
    present = bins != missing_bin
    top = np.where(present.any(axis=0), np.where(present, bins, 0).max(axis=0, initial=0), -1)
    return FeatureSpec(top.astype(np.int64), (~present).any(axis=0))


def candidate_table(spec: FeatureSpec, n_categories: np.ndarray | None = None,
                    max_cat_to_onehot: int = 4) -> CandidateTable:
    """Every candidate of the features in ``spec``, in the reference order (see the module docstring);
    ``n_categories[f]`` > 0 lists feature ``f``'s categorical candidates (one against the rest below
    ``max_cat_to_onehot`` categories, else one category record per category)."""
    feature, bins, left, kinds = [], [], [], []
    k_of = np.zeros(len(spec.top_bin), dtype=np.int64) if n_categories is None else np.asarray(n_categories)
    for f, (top, missing) in enumerate(zip(spec.top_bin.tolist(), spec.has_missing.tolist())):
        k = int(k_of[f])
        if k > 0:
            onehot = k < max_cat_to_onehot
            directions = ([True, False] if missing else [True]) if onehot else [False]
            for dl in directions:
                feature.append(np.full(k, f))
                bins.append(np.arange(k))
                left.append(np.full(k, dl))
                kinds.append(np.full(k, ONEHOT if onehot else CATEGORY))
            continue
        if top < 0:  # no present value: nothing to split on
            continue
        ml = np.arange(top)  # missing (if any) left: thresholds below the top bin
        feature.append(np.full(len(ml), f))
        bins.append(ml)
        left.append(np.ones(len(ml), dtype=bool))
        kinds.append(np.full(len(ml), THRESHOLD))
        if missing:  # missing right: up to the top bin (then only the missing rows go right)
            mr = np.arange(top + 1)
            feature.append(np.full(len(mr), f))
            bins.append(mr)
            left.append(np.zeros(len(mr), dtype=bool))
            kinds.append(np.full(len(mr), THRESHOLD))
    if not feature:
        empty = np.zeros(0, dtype=np.int64)
        return CandidateTable(empty, empty, np.zeros(0, dtype=bool), empty)
    return CandidateTable(np.concatenate(feature).astype(np.int64), np.concatenate(bins).astype(np.int64),
                          np.concatenate(left).astype(bool), np.concatenate(kinds).astype(np.int64))
