"""Multi-class boosting (XGBoost's ``multi:softprob`` / ``multi:softmax``): softmax gradients, metrics,
class mapping and the two tree strategies.

``K`` classes give every row ``K`` margins; each round computes every class's gradient pair from the
same margins (the softmax of the row's margins ``p``: ``g_k = p_k - [y = k]``,
``h_k = max(2 p_k (1 - p_k), 1e-16)``, XGBoost's), then grows either

- ``"one_output_per_tree"`` (XGBoost's default): one tree per class, tree ``k`` fitted to class ``k``'s
  pairs, its leaves moving class ``k``'s margins; or
- ``"multi_output_tree"`` (XGBoost's option of that name, FATE's SBT-MO): one tree per round whose
  split gain is the sum of the classes' gains and whose leaves hold ``K`` weights.

Labels are any ``K`` distinct numbers; the label party maps them to ``0 .. K-1`` in ascending order
(:func:`class_index`), which is the order of ``predict_proba``'s columns and of ``classes_``.

Example
-------
>>> g, h = softmax_gradients(np.array([2]), np.zeros((1, 3)))
>>> np.round(g, 3).tolist(), np.round(h, 3).tolist()
([[0.333, 0.333, -0.667]], [[0.444, 0.444, 0.444]])
>>> class_index(np.array([7.0, 3.0, 7.0]), np.array([3.0, 7.0])).tolist()
[1, 0, 1]
"""

from __future__ import annotations

import numpy as np

from ..errors import DataError

__all__ = ["as_labels", "MULTI_OBJECTIVES", "MULTI_STRATEGIES", "is_multiclass", "softmax", "softmax_gradients",
           "multiclass_metrics", "class_index", "check_class_indices", "trees_per_round", "pairs_per_row"]

MULTI_OBJECTIVES = ("multi:softprob", "multi:softmax")
MULTI_STRATEGIES = ("one_output_per_tree", "multi_output_tree")


def is_multiclass(objective: str) -> bool:
    """Is ``objective`` one of :data:`MULTI_OBJECTIVES`?"""
    return objective in MULTI_OBJECTIVES


def trees_per_round(objective: str, num_class: int | None, multi_strategy: str) -> int:
    """Trees grown per boosting round: ``K`` for one tree per class, else 1.

    Example
    -------
    >>> trees_per_round("multi:softprob", 3, "one_output_per_tree"), trees_per_round("multi:softprob", 3, "multi_output_tree")
    (3, 1)
    """
    return int(num_class) if is_multiclass(objective) and multi_strategy == "one_output_per_tree" else 1


def pairs_per_row(config) -> int:
    """Gradient pairs each row's ciphertext packs: ``K`` for multi-output trees, else 1."""
    return int(config.num_class) if is_multiclass(config.objective) and config.multi_strategy == "multi_output_tree" else 1


def softmax(margin: np.ndarray) -> np.ndarray:
    """Row-wise softmax of ``(n, K)`` margins (shifted by the row maximum: no overflow)."""
    z = np.exp(margin - margin.max(axis=1, keepdims=True))
    return z / z.sum(axis=1, keepdims=True)


def softmax_gradients(y: np.ndarray, margin: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(n, K)`` gradients and hessians of the softmax cross-entropy at ``margin`` for class
    indices ``y`` (XGBoost's: the hessian is ``2 p (1 - p)``, floored at ``1e-16``)."""
    p = softmax(margin)
    onehot = np.zeros_like(p)
    onehot[np.arange(len(y)), np.asarray(y, dtype=np.int64)] = 1.0
    return p - onehot, np.maximum(2.0 * p * (1.0 - p), 1e-16)


def multiclass_metrics(y: np.ndarray, margin: np.ndarray, weight: np.ndarray | None = None) -> dict[str, float]:
    """``mlogloss`` and ``merror`` (XGBoost's multi-class metrics) of ``(n, K)`` margins, each row
    counted by its ``weight`` if given.

    Example
    -------
    >>> multiclass_metrics(np.array([0, 1]), np.array([[2.0, 0.0], [0.0, -1.0]]))["merror"]
    0.5
    """
    y = np.asarray(y, dtype=np.int64)
    p = np.clip(softmax(margin)[np.arange(len(y)), y], 1e-15, 1.0)
    return {"mlogloss": float(-np.average(np.log(p), weights=weight)),
            "merror": float(np.average(margin.argmax(axis=1) != y, weights=weight))}


def as_labels(classes: np.ndarray) -> np.ndarray:
    """Class values as integers when they all are (labels travel as floats): an estimator's ``classes_``.

    >>> as_labels(np.array([10.0, 20.0])).tolist(), as_labels(np.array([0.5, 1.0])).tolist()
    ([10, 20], [0.5, 1.0])
    """
    classes = np.asarray(classes, dtype=np.float64)
    return classes.astype(np.int64) if np.all(classes == np.round(classes)) else classes


def class_index(y: np.ndarray, classes: np.ndarray, role: str = "the labels") -> np.ndarray:
    """Each label's position in ``classes`` (ascending); :class:`~ray_vfl.errors.DataError` for a
    label that is not one of them (an eval set's class the training labels never had)."""
    y = np.asarray(y, dtype=np.float64)
    at = np.clip(np.searchsorted(classes, y), 0, len(classes) - 1)
    bad = classes[at] != y
    if bad.any():
        raise DataError(f"{role} hold {int(bad.sum())} row(s) of classes the training labels do not have, e.g. "
                        f"{np.unique(y[bad])[:5].tolist()} (training classes: {classes.tolist()}); drop those rows "
                        "or train on data with every class")
    return at.astype(np.int64)


def check_class_indices(y: np.ndarray, num_class: int, who: str) -> None:
    """Multi-class labels must be class indices ``0 .. num_class - 1``: a client cannot map classes
    it does not see (another client may hold classes it has none of), so they are mapped before the
    data is split (:class:`~ray_vfl.pivodl.estimator.PIVODLClassifier` does it for in-process data).

    Example
    -------
    >>> check_class_indices(np.array([0.0, 2.0]), 3, "client 'a'")
    >>> check_class_indices(np.array([1.0, 3.0]), 3, "client 'a'")
    Traceback (most recent call last):
    ...
    ray_vfl.errors.DataError: client 'a': multi-class labels must be class indices 0 .. 2 (num_class=3); found [3.0]: map the classes to 0 .. K-1 in one order for every client before splitting the data (PIVODLClassifier does it for in-process data), or set num_class to the number of classes
    """
    y = np.asarray(y, dtype=np.float64)
    bad = ~np.isin(y, np.arange(num_class, dtype=np.float64))
    if bad.any():
        raise DataError(f"{who}: multi-class labels must be class indices 0 .. {num_class - 1} (num_class={num_class}); "
                        f"found {np.unique(y[bad])[:5].tolist()}: map the classes to 0 .. K-1 in one order for every "
                        "client before splitting the data (PIVODLClassifier does it for in-process data), or set "
                        "num_class to the number of classes")

