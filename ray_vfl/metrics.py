"""Evaluation metrics reported by the label owner (vectorised numpy, no per-call validation cost)."""

from __future__ import annotations

import numpy as np
from scipy.stats import rankdata

from .kernels import transform_margin

__all__ = ["evaluate_margin", "auc", "logloss"]


def auc(y: np.ndarray, score: np.ndarray) -> float:
    """ROC AUC by the rank-sum (Mann-Whitney) formula, ties averaged; NaN for one class.

    Example
    -------
    >>> auc(np.array([0, 0, 1, 1]), np.array([0.1, 0.4, 0.35, 0.8]))
    0.75
    """
    pos = y == 1
    n_pos = int(pos.sum())
    n_neg = len(y) - n_pos
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    ranks = rankdata(score)
    return float((ranks[pos].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def logloss(y: np.ndarray, p: np.ndarray) -> float:
    p = np.clip(p, 1e-15, 1 - 1e-15)
    return float(-np.mean(y * np.log(p) + (1 - y) * np.log1p(-p)))


def evaluate_margin(objective: str, y: np.ndarray, margin: np.ndarray, with_auc: bool = True) -> dict[str, float]:
    """Metrics of raw margins: logloss and AUC for logistic, RMSE for regression.

    Example
    -------
    >>> evaluate_margin("reg:squarederror", np.array([1.0, 3.0]), np.array([1.0, 1.0]))
    {'rmse': 1.4142135623730951}
    """
    pred = transform_margin(objective, margin)
    if objective == "binary:logistic":
        metrics = {"logloss": logloss(y, pred)}
        if with_auc:
            metrics["auc"] = auc(y, pred)
        return metrics
    return {"rmse": float(np.sqrt(np.mean((pred - y) ** 2)))}
