"""Row and feature subsampling of a boosting round, shared by every tree protocol.

*Rows*: every party must sum over the same rows, so the sample of a round is a public function of
a seed all parties share and the round's number (it hides nothing: which rows a tree is fitted on
is no secret of any party). *Features*: each party samples its own features with its own
generator (its features are its business), and only the candidates of the sampled ones take part.

Example
-------
>>> rows = RowSampler(0.8, seed=7)
>>> len(rows.rows(10, round_=0)), bool((rows.rows(10, 0) == rows.rows(10, 0)).all())
(8, True)
>>> FeatureSampler(0.5, np.random.default_rng(0)).features(4).tolist()
[2, 3]
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..config import check_float, check_int

__all__ = ["RowSampler", "FeatureSampler"]


@dataclass(frozen=True)
class RowSampler:
    """The rows of each round: ``round(rate * n)`` of them (at least one), ascending, drawn from
    ``(seed, round)``; ``rate = 1`` takes every row."""

    rate: float = 1.0
    seed: int = 0

    def __post_init__(self) -> None:
        check_float("row subsample rate", self.rate, 0.0, 1.0, lo_open=True)
        check_int("row subsample seed", self.seed, 0, 2**63 - 1)

    def rows(self, n_rows: int, round_: int) -> np.ndarray:
        if self.rate >= 1.0:
            return np.arange(n_rows)
        take = max(1, int(round(self.rate * n_rows)))
        rng = np.random.default_rng([self.seed, round_])
        return np.sort(rng.choice(n_rows, take, replace=False))


@dataclass
class FeatureSampler:
    """A party's own feature sample per round: ``round(rate * F)`` of its ``F`` features (at least one),
    ascending, from the party's own generator."""

    rate: float
    rng: np.random.Generator

    def __post_init__(self) -> None:
        check_float("feature subsample rate", self.rate, 0.0, 1.0, lo_open=True)

    def features(self, n_features: int) -> np.ndarray:
        if self.rate >= 1.0 or n_features <= 1:
            return np.arange(n_features)
        take = max(1, int(round(self.rate * n_features)))
        return np.sort(self.rng.choice(n_features, take, replace=False))
