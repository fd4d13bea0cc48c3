"""Native categorical splits (XGBoost's ``enable_categorical``), scored from the per-bin sums every
threshold split is scored from.

A categorical column is binned one category per bin (:class:`~ray_vfl.data.binning.PartyBinner`);
a categorical split sends a *set* of its bins left, missing values to a learned side. As in
XGBoost's ``hist`` method:

* a feature of fewer than ``max_cat_to_onehot`` categories is split **one category against the
  rest**: candidate ``j`` sends bin ``j`` alone left;
* a feature of more is split by **partition**: at each node its categories are sorted by their
  optimal leaf weight ``-G / (H + lambda)`` and candidate ``j`` sends the first ``j + 1`` of that
  order left (the split of ``k`` sorted categories in two that ``hist`` scans), each side holding
  at most ``max_cat_threshold`` categories or the other side at most that many.

Each candidate's left and right sums are sums of whole bins (no subtraction from a total), so an
empty child sums to exactly 0 and is refused, as :func:`~ray_vfl.trees.kernels.best_splits` does
for thresholds. Candidates keep the ``(2, n_bins - 1)`` layout of a threshold feature (missing
left, then right), so one argmax orders every feature's candidates the same way.

Example
-------
>>> G = np.array([[[-3.0, 1.0, 2.0, 0.0]]]); H = np.ones_like(G)  # 3 categories, then missing
>>> gl, gr, hl, hr, valid, order = categorical_children(G, H, np.array([3]), onehot=np.array([False]),
...                                                     reg_lambda=1.0, max_cat_threshold=64)
>>> order[0, 0].tolist(), gl[0, 0, 1, :2].tolist(), valid[0, 0, :].tolist()  # weights 1.5, -0.5, -1
([2, 1, 0], [2.0, 3.0], [True, True, False])
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["CategoricalFeatures", "categorical_children", "left_sets", "goes_left_of_set", "uses_onehot"]


@dataclass(frozen=True)
class CategoricalFeatures:
    """Which features of a histogram split natively: ``n_categories[f]`` categories (0: a numeric or
    ordinal feature, split at thresholds), with XGBoost's ``max_cat_to_onehot`` and
    ``max_cat_threshold``.

    >>> CategoricalFeatures(np.array([0, 3, 12])).columns().tolist()
    [1, 2]
    """

    n_categories: np.ndarray
    max_cat_to_onehot: int = 4
    max_cat_threshold: int = 64

    def columns(self) -> np.ndarray:
        return np.flatnonzero(np.asarray(self.n_categories) > 0)

    def onehot(self) -> np.ndarray:
        return uses_onehot(self.n_categories, self.max_cat_to_onehot)


def uses_onehot(n_categories: np.ndarray, max_cat_to_onehot: int) -> np.ndarray:
    """Where a feature of ``n_categories`` is split one category against the rest (XGBoost: fewer
    categories than ``max_cat_to_onehot``).

    >>> uses_onehot(np.array([2, 4, 9]), 4).tolist()
    [True, False, False]
    """
    return np.asarray(n_categories) < max_cat_to_onehot


def categorical_children(G: np.ndarray, H: np.ndarray, n_categories: np.ndarray, onehot: np.ndarray,
                         reg_lambda: float, max_cat_threshold: int):
    """Left and right sums of every categorical candidate of ``(slots, Fc, n_bins)`` histograms (the
    last bin is missing values): ``gl, gr, hl, hr`` of shape ``(slots, Fc, 2, n_bins - 1)`` (missing
    [left, right]), ``valid`` ``(slots, Fc, n_bins - 1)`` (candidates that exist) and ``order``
    ``(slots, Fc, n_bins - 1)``, the bins in candidate order (see :func:`left_sets`).
    ``n_categories`` and ``onehot`` are per feature, ``(Fc,)``."""
    slots, n_feat, n_bins = G.shape
    m = n_bins - 1
    cats = np.arange(m)
    k = np.asarray(n_categories)[None, :, None]
    is_cat = cats[None, None, :] < k  # (1, Fc, m): bins holding a category
    one = np.asarray(onehot, dtype=bool)[None, :, None]
    with np.errstate(divide="ignore", invalid="ignore"):
        weight = np.where(H[..., :m] + reg_lambda > 0, -G[..., :m] / (H[..., :m] + reg_lambda), 0.0)
    # bins past the feature's categories are empty: sorted last, never a candidate
    order = np.argsort(np.where(is_cat, weight, np.inf), axis=-1, kind="stable")
    order = np.where(one, np.broadcast_to(cats, order.shape), order)
    out = []
    for X in (G, H):
        Xs = np.take_along_axis(X[..., :m], order, axis=-1)
        below = np.cumsum(Xs, axis=-1)  # prefix j: bins order[:j + 1]
        above = np.zeros_like(below)  # bins order[j + 1:], summed from the top (an empty side is exactly 0)
        above[..., :-1] = np.cumsum(Xs[..., :0:-1], axis=-1)[..., ::-1]
        before = np.zeros_like(below)  # bins order[:j]
        before[..., 1:] = below[..., :-1]
        left = np.where(one, Xs, below)  # one-hot: bin j alone; partition: the prefix
        rest = np.where(one, before + above, above)
        missing = X[..., m:]
        out.append((np.stack([left + missing, left], axis=2), np.stack([rest, rest + missing], axis=2)))
    (gl, gr), (hl, hr) = out
    size = cats[None, None, :] + 1  # categories on the left of partition candidate j
    partition_ok = (size < k) & ((size <= max_cat_threshold) | (k - size <= max_cat_threshold))
    valid = np.broadcast_to(np.where(one, is_cat, partition_ok), (slots, n_feat, m))
    return gl, gr, hl, hr, valid, order


def left_sets(order: np.ndarray, candidate: np.ndarray, onehot: np.ndarray) -> np.ndarray:
    """``(len(candidate), n_bins - 1)`` bool: the bins each chosen candidate sends left. ``order`` is
    each chosen feature's candidate order ``(len, n_bins - 1)`` (from :func:`categorical_children`).

    >>> left_sets(np.array([[2, 0, 1], [0, 1, 2]]), np.array([1, 2]), np.array([False, True])).astype(int).tolist()
    [[1, 0, 1], [0, 0, 1]]
    """
    n, m = order.shape
    prefix = np.arange(m)[None, :] <= np.asarray(candidate)[:, None]
    chosen = np.where(np.asarray(onehot)[:, None], np.arange(m)[None, :] == np.asarray(candidate)[:, None], prefix)
    out = np.zeros((n, m), dtype=bool)
    np.put_along_axis(out, order, chosen, axis=1)
    return out


def goes_left_of_set(bins: np.ndarray, left_set: np.ndarray, default_left, missing_bin: int) -> np.ndarray:
    """Does a categorical split send each row left? ``left_set`` is ``(n_bins - 1,)`` bool (one split)
    or ``(len(bins), n_bins - 1)`` (one per row); missing rows follow ``default_left``.

    >>> goes_left_of_set(np.array([0, 1, 2, 3]), np.array([False, True, False]), True, missing_bin=3).tolist()
    [False, True, False, True]
    """
    bins = np.asarray(bins)
    safe = np.minimum(bins, missing_bin - 1)
    inside = left_set[safe] if left_set.ndim == 1 else left_set[np.arange(len(bins)), safe]
    return np.where(bins == missing_bin, default_left, inside)
