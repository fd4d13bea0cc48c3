"""Sample weights and ``scale_pos_weight`` in tree boosting, as XGBoost applies them.

Every row's gradient and hessian are multiplied by its weight before any party sums them
(``g_i = w_i * dl/dm``, ``h_i = w_i * d2l/dm2``), so histograms, gains, leaf weights and
``min_child_weight`` (a hessian sum) are the weighted ones; ``scale_pos_weight`` multiplies the
weight of every row labelled 1. The default base score is the weighted label mean, and the metrics
the label party reports are weighted (logloss, AUC, RMSE; mlogloss and merror for multi-class, whose
K pairs per row are each multiplied by the row's weight). All of it happens where the labels are:
only the label party ever holds a weight, and what it encrypts for the others is the weighted pair.

Example
-------
>>> w = row_weights(np.array([0.0, 1.0, 1.0]), None, scale_pos_weight=3.0)
>>> w.tolist()
[1.0, 3.0, 3.0]
>>> g, h = weighted_pairs(np.array([0.5, -0.5, -0.25]), np.array([0.25, 0.25, 0.1875]), w)
>>> g.tolist(), h.tolist()
([0.5, -1.5, -0.75], [0.25, 0.75, 0.5625])
"""

from __future__ import annotations

import math

import numpy as np

from ..crypto.he.fixed_point import FixedPoint
from ..errors import ConfigError
from ..metrics import auc, logloss
from .kernels import GRADIENT_FRAC_BITS, base_score_of, evaluate_margin, transform_margin
from .multiclass import is_multiclass, multiclass_metrics

__all__ = ["row_weights", "weighted_pairs", "weighted_base_score", "evaluate_weighted", "check_weighted_bound"]


def row_weights(y: np.ndarray, weight: np.ndarray | None, scale_pos_weight: float = 1.0) -> np.ndarray | None:
    """Each training row's weight: its sample weight (1 if none) times ``scale_pos_weight`` where its
    label is 1; None when neither is given (the unweighted protocol, unchanged)."""
    if weight is None and scale_pos_weight == 1.0:
        return None
    w = np.ones(len(y)) if weight is None else np.asarray(weight, dtype=np.float64).copy()
    if scale_pos_weight != 1.0:
        w[np.asarray(y) == 1] *= scale_pos_weight
    return w


def weighted_pairs(g: np.ndarray, h: np.ndarray, weight: np.ndarray | None,
                   frac_bits: int = GRADIENT_FRAC_BITS) -> tuple[np.ndarray, np.ndarray]:
    """Encoded gradient pairs times the rows' weights, rounded to the same grid again
    (:func:`~ray_vfl.trees.kernels.encoded_gradients`), so every party and the centralized reference
    sum the same values. A row of weight 0 adds nothing (its hessian is 0, not the grid's floor);
    a positive weight keeps the hessian at least ``2**-frac_bits``."""
    if weight is None:
        return g, h
    grid = FixedPoint(frac_bits)
    w = np.asarray(weight, dtype=np.float64).reshape(-1, *([1] * (np.ndim(g) - 1)))  # (n, K) pairs: per row
    return grid.rounded(g * w), np.where(w > 0, np.maximum(grid.rounded(h * w), 2.0**-frac_bits), 0.0)


def weighted_base_score(objective: str, y: np.ndarray, weight: np.ndarray | None, base_score: float | None) -> float:
    """``base_score`` if given, else the weighted label mean (kept inside (0, 1) for logistic).

    >>> weighted_base_score("reg:squarederror", np.array([1.0, 4.0]), np.array([2.0, 1.0]), None)
    2.0
    """
    if weight is None or base_score is not None:
        return base_score_of(objective, y, base_score)
    return base_score_of(objective, np.array([np.average(y, weights=weight)]), None)


def evaluate_weighted(objective: str, y: np.ndarray, margin: np.ndarray, weight: np.ndarray | None,
                      with_auc: bool = True) -> dict[str, float]:
    """:func:`~ray_vfl.trees.kernels.evaluate_margin` with every row counted by its weight (XGBoost's
    weighted ``logloss``, ``auc`` and ``rmse``); the unweighted metrics for ``weight=None``.

    >>> evaluate_weighted("reg:squarederror", np.array([1.0, 3.0]), np.array([1.0, 1.0]), np.array([3.0, 1.0]))
    {'rmse': 1.0}
    """
    if weight is None:
        return evaluate_margin(objective, y, margin, with_auc)
    if is_multiclass(objective):
        return multiclass_metrics(y, margin, weight)
    pred = transform_margin(objective, margin)
    if objective == "binary:logistic":
        metrics = {"logloss": logloss(y, pred, weight)}
        if with_auc:
            metrics["auc"] = auc(y, pred, weight)
        return metrics
    return {"rmse": float(np.sqrt(np.average((pred - y) ** 2, weights=weight)))}


def check_weighted_bound(objective: str, y: np.ndarray, weight: np.ndarray | None, gradient_bound: float,
                         base_score: float, encrypted: bool = True) -> None:
    """Weighted gradients must fit the shared encoding: ``|w * (p - y)| <= gradient_bound`` for logistic,
    twice the labels' spread from the base score times the largest weight for squared error. Raises
    :class:`~ray_vfl.errors.ConfigError` naming the bound to set (every party sees it)."""
    if weight is None or not encrypted or not len(y):
        return
    w_max = float(np.max(weight))
    reach = w_max if objective == "binary:logistic" or is_multiclass(objective) else 2.0 * w_max * float(np.max(np.abs(np.asarray(y) - base_score)))
    if reach > gradient_bound:
        needed = 2.0 ** math.ceil(math.log2(reach))
        raise ConfigError(f"sample weights up to {w_max:.6g} make encrypted gradients reach {reach:.6g}, past "
                          f"gradient_bound={gradient_bound:g}: set gradient_bound={needed:g} (every party sees it; "
                          "fit(sample_weight=...) sets it for you when you leave it None) or scale the weights down")
