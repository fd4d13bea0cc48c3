"""Evaluation metrics reported by a label owner, and attacks' success against chance (numpy only)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["auc", "logloss", "average_ranks", "auc_both_ways", "AttackResult"]


def average_ranks(x: np.ndarray) -> np.ndarray:
    """1-based ranks of ``x``, ties given their average rank (what ``scipy.stats.rankdata`` does by
    default; numpy alone, so a party's process need not import ``scipy.stats``, 1 s per process).

    Example
    -------
    >>> average_ranks(np.array([0.5, 0.1, 0.5, 0.3])).tolist()
    [3.5, 1.0, 3.5, 2.0]
    """
    x = np.asarray(x)
    order = np.argsort(x, kind="mergesort")
    xs = x[order]
    edges = np.flatnonzero(np.concatenate(([True], xs[1:] != xs[:-1], [True])))  # where tie groups start, and the end
    ranks = np.empty(len(x), dtype=np.float64)
    ranks[order] = np.repeat((edges[:-1] + edges[1:] + 1) / 2.0, np.diff(edges))
    return ranks


def auc(y: np.ndarray, score: np.ndarray, sample_weight: np.ndarray | None = None) -> float:
    """ROC AUC by the rank-sum (Mann-Whitney) formula, ties averaged; NaN for one class. With
    ``sample_weight``, every (positive, negative) pair counts by the product of their weights
    (scikit-learn's ``roc_auc_score(..., sample_weight=)``).

    Example
    -------
    >>> auc(np.array([0, 0, 1, 1]), np.array([0.1, 0.4, 0.35, 0.8]))
    0.75
    >>> auc(np.array([0, 0, 1, 1]), np.array([0.1, 0.4, 0.35, 0.8]), np.array([1.0, 3.0, 1.0, 1.0]))
    0.625
    """
    pos = y == 1
    if sample_weight is not None:
        w = np.asarray(sample_weight, dtype=np.float64)
        w_pos, w_neg = float(w[pos].sum()), float(w[~pos].sum())
        if w_pos <= 0 or w_neg <= 0:
            return float("nan")
        order = np.argsort(score, kind="mergesort")
        s, wp, wn = np.asarray(score)[order], np.where(pos, w, 0.0)[order], np.where(pos, 0.0, w)[order]
        starts = np.flatnonzero(np.concatenate(([True], s[1:] != s[:-1])))
        group_pos, group_neg = np.add.reduceat(wp, starts), np.add.reduceat(wn, starts)
        below = np.concatenate(([0.0], np.cumsum(group_neg)[:-1]))  # negative weight under each tie group
        return float((group_pos * (below + 0.5 * group_neg)).sum() / (w_pos * w_neg))
    n_pos = int(pos.sum())
    n_neg = len(y) - n_pos
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    ranks = average_ranks(score)
    return float((ranks[pos].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def logloss(y: np.ndarray, p: np.ndarray, sample_weight: np.ndarray | None = None) -> float:
    """Mean binary log loss (weighted by ``sample_weight`` if given).

    >>> round(logloss(np.array([1, 0]), np.array([0.8, 0.4]), np.array([3.0, 1.0])), 6)
    0.295064
    """
    p = np.clip(p, 1e-15, 1 - 1e-15)
    return float(-np.average(y * np.log(p) + (1 - y) * np.log1p(-p), weights=sample_weight))


def auc_both_ways(y: np.ndarray, score: np.ndarray) -> tuple[float, float]:
    """An attack's AUC one-sided (its scores as they are) and two-sided (``max(a, 1 - a)``: either way round).

    >>> auc_both_ways(np.array([0, 1, 0, 1]), np.array([0.9, 0.1, 0.8, 0.2]))
    (0.0, 1.0)
    """
    one = auc(np.asarray(y), np.asarray(score))
    return one, max(one, 1.0 - one)


@dataclass(frozen=True)
class AttackResult:
    """One attack run on a recorded view: who attacks, what it recovers, and the level that means no leak.

    ``success`` is one-sided (the attack's guesses as they are) and ``two_sided`` the same read either way
    round where that applies (an AUC's ``max(a, 1 - a)``; ``None`` for a count), ``chance`` what guessing
    without the view achieves under the same metric. ``setting`` says what ran (data, options), ``command``
    the command that reproduces the row.

    >>> AttackResult("PIVODL", "split client", "differential", "labels read", 0.0, 0.0).leaks
    False
    """

    protocol: str
    role: str
    attack: str
    metric: str
    success: float
    chance: float
    two_sided: float | None = None
    setting: str = ""
    command: str = ""
    margin: float = 0.0

    @property
    def leaks(self) -> bool:
        """Success (either way round) above chance by more than ``margin``."""
        best = self.success if self.two_sided is None else max(self.success, self.two_sided)
        return best > self.chance + self.margin
