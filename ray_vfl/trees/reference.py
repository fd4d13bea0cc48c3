"""Centralized reference: the same histogram boosting on all features in one place.

Used to prove SecureBoost lossless (federated == centralized on the same bins,
split for split) and as the in-process baseline of the benchmarks. It shares
only the pure kernels with the protocol: histograms here are plain
``np.bincount`` over every row of a node, without subtraction or crypto, of
the same encoded gradient pairs (:func:`~ray_vfl.trees.kernels.encoded_gradients`)
every party sums, so its bin sums are the federated ones bit for bit.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from .categorical import CategoricalFeatures, goes_left_of_set
from .config import BoostConfig
from .kernels import (
    base_margin,
    best_splits,
    bucket_sum,
    encoded_gradients,
    feature_keys,
    goes_left,
    histogram_keys,
    leaf_weights,
)
from .weights import row_weights, weighted_pairs

__all__ = ["ReferenceTree", "fit_reference", "predict_reference"]


@dataclass
class ReferenceTree:
    """Node arrays in creation order (level by level, left before right)."""

    left: np.ndarray
    right: np.ndarray
    feature: np.ndarray  # global feature index (parties concatenated in order), -1 at leaves
    bin: np.ndarray
    default_left: np.ndarray
    weight: np.ndarray
    left_set: np.ndarray | None = None  # (n_nodes, n_bins - 1): a categorical split's left bins, else False


def _grow(bins: np.ndarray, g: np.ndarray, h: np.ndarray, config: BoostConfig, n_bins: int,
          categorical: CategoricalFeatures | None = None) -> tuple[ReferenceTree, np.ndarray]:
    """One tree, and the node every row ends in."""
    n, n_features = bins.shape
    sets: dict[int, np.ndarray] = {}
    fkeys = feature_keys(bins, n_bins)
    left, right, feature, split_bin, dleft, weight = [-1], [-1], [-1], [-1], [False], [0.0]
    node_of_row = np.zeros(n, dtype=np.int64)
    open_nodes = [0]
    for _ in range(config.max_depth):
        if not open_nodes:
            break
        slot = np.full(len(left) + 1, -1, dtype=np.int64)
        slot[open_nodes] = np.arange(len(open_nodes))
        row_slot = slot[node_of_row]
        rows = np.flatnonzero(row_slot >= 0)
        keys = histogram_keys(fkeys[rows], row_slot[rows], n_bins)
        hist = bucket_sum(np.column_stack([g[rows], h[rows]]), keys, len(open_nodes) * n_features * n_bins)
        G = hist[:, 0].reshape(len(open_nodes), n_features, n_bins)
        H = hist[:, 1].reshape(len(open_nodes), n_features, n_bins)
        choice = best_splits(G, H, config.reg_lambda, config.min_child_weight, categorical)
        ok = choice.splittable(config.gamma)
        next_open = []
        for i, node in enumerate(open_nodes):
            if not ok[i]:
                continue
            f, b, dl = int(choice.feature[i]), int(choice.bin[i]), bool(choice.default_left[i])
            l_child, r_child = len(left), len(left) + 1
            for arr, v in ((left, -1), (right, -1), (feature, -1), (split_bin, -1), (dleft, False), (weight, 0.0)):
                arr.extend([v, v])
            left[node], right[node], feature[node], split_bin[node], dleft[node] = l_child, r_child, f, b, dl
            in_node = np.flatnonzero(node_of_row == node)
            col = bins[in_node, f]
            if choice.is_categorical(i):
                sets[node] = choice.left_set[i]
                go_left = goes_left_of_set(col, sets[node], dl, n_bins - 1)
            else:
                go_left = goes_left(col, b, dl, n_bins - 1)
            node_of_row[in_node[go_left]] = l_child
            node_of_row[in_node[~go_left]] = r_child
            next_open += [l_child, r_child]
        open_nodes = next_open
    size = len(left)
    totals_g = np.bincount(node_of_row, weights=g, minlength=size)
    totals_h = np.bincount(node_of_row, weights=h, minlength=size)
    is_leaf = np.asarray(left) < 0
    w = np.zeros(size)  # internal nodes hold no rows: their 0 / (0 + lambda) is never computed
    w[is_leaf] = leaf_weights(totals_g[is_leaf], totals_h[is_leaf], config.reg_lambda, config.learning_rate)
    left_set = None
    if sets:
        left_set = np.zeros((size, n_bins - 1), dtype=bool)
        for node, chosen in sets.items():
            left_set[node] = chosen
    tree = ReferenceTree(np.asarray(left), np.asarray(right), np.asarray(feature), np.asarray(split_bin),
                         np.asarray(dleft), w, left_set)
    return tree, node_of_row


def fit_reference(bins: np.ndarray, y: np.ndarray, config: BoostConfig, base_score: float,
                  released: Callable[[ReferenceTree], np.ndarray] | None = None,
                  weight: np.ndarray | None = None, n_categories: np.ndarray | None = None) -> list[ReferenceTree]:
    """Boost ``config.n_trees`` trees on binned features (missing bin = ``config.max_bin``).

    ``weight``: sample weights (with ``config.scale_pos_weight``, :mod:`ray_vfl.trees.weights`).
    ``n_categories``: each feature's categories where it is split natively (``config.enable_categorical``;
    0 for the others, see :meth:`~ray_vfl.data.binning.PartyBinner.n_categories`).

    ``released`` maps a grown tree to the node weights the training margins move by (default: its own
    weights); a centralized model of protocols that release noisy leaf weights (PIVODL's partial DP).
    """
    margin = np.full(len(y), base_margin(config.objective, base_score))
    w = row_weights(y, weight, getattr(config, "scale_pos_weight", 1.0))
    categorical = None
    if config.enable_categorical and n_categories is not None:
        categorical = CategoricalFeatures(np.asarray(n_categories), config.max_cat_to_onehot, config.max_cat_threshold)
    trees = []
    for _ in range(config.n_trees):
        g, h = weighted_pairs(*encoded_gradients(config.objective, y, margin), w)
        tree, node_of_row = _grow(bins, g, h, config, config.max_bin + 1, categorical)
        trees.append(tree)
        weights = tree.weight if released is None else released(tree)
        margin = margin + weights[node_of_row]
    return trees


def predict_reference(trees: list[ReferenceTree], bins: np.ndarray, base: float, missing_bin: int) -> np.ndarray:
    """Margins of the reference model on binned rows (``base`` is the base margin)."""
    margin = np.full(len(bins), base)
    rows = np.arange(len(bins))
    for tree in trees:
        pos = np.zeros(len(bins), dtype=np.int64)
        while True:
            internal = tree.left[pos] >= 0
            if not internal.any():
                break
            idx = rows[internal]
            f = tree.feature[pos[idx]]
            col = bins[idx, f]
            go_left = goes_left(col, tree.bin[pos[idx]], tree.default_left[pos[idx]], missing_bin)
            if tree.left_set is not None:
                cat = tree.left_set[pos[idx]].any(axis=1)
                go_left[cat] = goes_left_of_set(col[cat], tree.left_set[pos[idx[cat]]], tree.default_left[pos[idx[cat]]],
                                                missing_bin)
            pos[idx] = np.where(go_left, tree.left[pos[idx]], tree.right[pos[idx]])
        margin = margin + tree.weight[pos]
    return margin
