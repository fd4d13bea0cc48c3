"""Feature importances of boosted trees, as XGBoost defines them (``importance_type``).

Per feature, from every split on it: ``weight`` (how many splits), ``gain`` (their mean loss
reduction, the split score ``GL^2/(HL+lambda) + GR^2/(HR+lambda) - G^2/(H+lambda)``), ``cover`` (their
mean hessian sum, the weighted rows they split), ``total_gain`` and ``total_cover`` (the sums).
``feature_importances_`` is the chosen score normalised to sum to 1, as XGBoost's scikit-learn wrapper.

Example
-------
>>> stats = np.array([[6.0, 40.0, 2.0], [0.0, 0.0, 0.0], [1.0, 10.0, 1.0]])  # total gain, total cover, splits
>>> importance_scores(stats, "gain").tolist(), importance_scores(stats, "weight").tolist()
([3.0, 0.0, 1.0], [2.0, 0.0, 1.0])
"""

from __future__ import annotations

import numpy as np

from ..errors import ConfigError

__all__ = ["IMPORTANCE_TYPES", "check_importance_type", "importance_scores", "split_stats"]

IMPORTANCE_TYPES = ("gain", "weight", "cover", "total_gain", "total_cover")


def check_importance_type(importance_type: str) -> str:
    """``importance_type`` if it is one of :data:`IMPORTANCE_TYPES`, else :class:`ConfigError`."""
    if importance_type not in IMPORTANCE_TYPES:
        raise ConfigError(f"importance_type must be one of {IMPORTANCE_TYPES}, got {importance_type!r}")
    return importance_type


def split_stats(features: np.ndarray, gains: np.ndarray, covers: np.ndarray, n_features: int) -> np.ndarray:
    """``(n_features, 3)``: per feature the total gain, total cover and number of its splits, from one
    entry per split (its feature index, gain and cover).

    >>> split_stats(np.array([0, 2, 0]), np.array([1.0, 2.0, 3.0]), np.array([5.0, 6.0, 7.0]), 3).tolist()
    [[4.0, 12.0, 2.0], [0.0, 0.0, 0.0], [2.0, 6.0, 1.0]]
    """
    features = np.asarray(features, dtype=np.int64)
    return np.column_stack([np.bincount(features, weights=np.asarray(v, dtype=np.float64), minlength=n_features)
                            for v in (gains, covers, np.ones(len(features)))]) if n_features else np.zeros((0, 3))


def importance_scores(stats: np.ndarray, importance_type: str) -> np.ndarray:
    """Each feature's score of ``importance_type`` from its :func:`split_stats` row (0 where it never splits)."""
    check_importance_type(importance_type)
    stats = np.asarray(stats, dtype=np.float64).reshape(-1, 3)
    total_gain, total_cover, count = stats[:, 0], stats[:, 1], stats[:, 2]
    if importance_type == "weight":
        return count
    if importance_type.startswith("total_"):
        return total_gain if importance_type == "total_gain" else total_cover
    total = total_gain if importance_type == "gain" else total_cover
    return np.divide(total, count, out=np.zeros_like(total), where=count > 0)
