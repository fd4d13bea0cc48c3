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

Example
-------
>>> spec = FeatureSpec(np.array([2, 0]), np.array([False, True]))
>>> table = candidate_table(spec)
>>> table.feature.tolist(), table.bin.tolist(), table.default_left.tolist()
([0, 0, 1], [0, 1, 0], [True, True, False])
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["FeatureSpec", "CandidateTable", "candidate_table", "feature_spec"]


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

    def __len__(self) -> int:
        return len(self.feature)

    def take(self, index: np.ndarray) -> "CandidateTable":
        """The candidates at ``index``, in that order."""
        return CandidateTable(self.feature[index], self.bin[index], self.default_left[index])


def feature_spec(bins: np.ndarray, missing_bin: int) -> FeatureSpec:
    """The :class:`FeatureSpec` of a client's training bins ``(n, F)``."""
    present = bins != missing_bin
    top = np.where(present.any(axis=0), np.where(present, bins, 0).max(axis=0, initial=0), -1)
    return FeatureSpec(top.astype(np.int64), (~present).any(axis=0))


def candidate_table(spec: FeatureSpec) -> CandidateTable:
    """Every candidate of the features in ``spec``, in the reference order (see the module docstring)."""
    feature, bins, left = [], [], []
    for f, (top, missing) in enumerate(zip(spec.top_bin.tolist(), spec.has_missing.tolist())):
        if top < 0:  # no present value: nothing to split on
            continue
        ml = np.arange(top)  # missing (if any) left: thresholds below the top bin
        feature.append(np.full(len(ml), f))
        bins.append(ml)
        left.append(np.ones(len(ml), dtype=bool))
        if missing:  # missing right: up to the top bin (then only the missing rows go right)
            mr = np.arange(top + 1)
            feature.append(np.full(len(mr), f))
            bins.append(mr)
            left.append(np.zeros(len(mr), dtype=bool))
    if not feature:
        empty = np.zeros(0, dtype=np.int64)
        return CandidateTable(empty, empty, np.zeros(0, dtype=bool))
    return CandidateTable(np.concatenate(feature).astype(np.int64), np.concatenate(bins).astype(np.int64),
                          np.concatenate(left))
