"""Centralized reference of PIVODL's trees: every client's features and labels in one place, the same
candidates, the same instance threshold, the same kernels.

The federated trees equal these split for split and leaf for leaf (without partial DP): per node every
client's candidates are listed in the reference order (:mod:`ray_vfl.pivodl.candidates`), the instance
threshold keeps the same ones (:func:`~ray_vfl.pivodl.threshold.admissible`, which needs who labels each
row), and the first candidate tied with the best gain wins. With threshold 1 every candidate is kept and
the trees are also those of :func:`ray_vfl.trees.reference.fit_reference` on the clients' bins side by side,
native categorical splits included (``n_categories``): a partition feature's prefixes are scored by the
trees' own kernel (:func:`~ray_vfl.trees.categorical.categorical_children`) on the node's histogram, where
the federated split client sorts decrypted category sums (:mod:`ray_vfl.pivodl.partition`).

Example
-------
>>> rng = np.random.default_rng(0)
>>> bins = [rng.integers(0, 4, (40, 2)), rng.integers(0, 4, (40, 1))]
>>> y = (bins[0][:, 0] + rng.integers(0, 2, 40) > 2).astype(float)
>>> config = PIVODLConfig(backend="plain", n_trees=1, max_depth=2, max_bin=4, instance_threshold=5)
>>> tree = fit_reference(bins, np.arange(40) % 2, y, config, float(y.mean()))[0]
>>> int(tree.feature[0]), int(tree.bin[0])
(0, 1)
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from ..trees.categorical import categorical_children, goes_left_of_set, left_sets
from ..trees.kernels import base_margin, encoded_gradients, goes_left, is_splittable, leaf_weights, split_gains, ties_with
from ..trees.reference import ReferenceTree
from .candidates import CATEGORY, ONEHOT, candidate_table, feature_spec
from .config import PIVODLConfig
from .threshold import left_members, offered

__all__ = ["fit_reference"]


def _best(bins: Sequence[np.ndarray], tables: list, rows: np.ndarray, client_of_row: np.ndarray, g: np.ndarray,
          h: np.ndarray, config: PIVODLConfig) -> tuple[float, int, tuple]:
    """Best gain at a node and its ``(client, (feature, bin, default_left, left set or None))`` among the
    candidates the threshold keeps: every client's candidates and partition prefixes ordered by
    ``(client, feature, missing right, threshold / category / prefix)``, the first tied wins."""
    G, H = g[rows].sum(), h[rows].sum()
    n_bins = config.max_bin + 1
    gains, keys, what = [], [], []
    for k, (b, table) in enumerate(zip(bins, tables)):
        kept, pool = offered(b[rows], table, config.max_bin, client_of_row[rows], len(bins), config.instance_threshold)
        kept = np.flatnonzero(kept)
        plain = kept[table.kind[kept] != CATEGORY]
        left = left_members(b[rows], table.take(plain), config.max_bin).astype(np.float64)
        GL, HL = left @ g[rows], left @ h[rows]
        gains.append(split_gains(GL, HL, G - GL, H - HL, G, H, config.reg_lambda, config.min_child_weight))
        for c in plain.tolist():
            f, pos, dl = int(table.feature[c]), int(table.bin[c]), bool(table.default_left[c])
            keys.append((k, f, 0 if dl else 1, pos))
            left_set = None
            if table.kind[c] == ONEHOT:
                left_set = np.zeros(n_bins - 1, dtype=bool)
                left_set[pos] = True
            what.append((f, pos, dl, left_set))
        for f in np.unique(table.feature[kept[table.kind[kept] == CATEGORY]]).tolist():
            # the trees' partition kernel on the feature's histogram at the node, a pool of small categories
            # as one bin (at its first category's place)
            entries = np.flatnonzero(table.feature == f)
            heads = entries[pool[entries] == entries]
            merged = np.full(n_bins, n_bins - 1)
            merged[table.bin[entries]] = np.searchsorted(heads, pool[entries])
            hist_g = np.bincount(merged[b[rows, f]], weights=g[rows], minlength=n_bins)[None, None]
            hist_h = np.bincount(merged[b[rows, f]], weights=h[rows], minlength=n_bins)[None, None]
            n_cat = np.array([len(heads)])
            gl, gr, hl, hr, valid, order = categorical_children(hist_g, hist_h, n_cat, np.array([False]),
                                                                config.reg_lambda, config.max_cat_threshold)
            gain = split_gains(gl[0, 0], hl[0, 0], gr[0, 0], hr[0, 0], G, H, config.reg_lambda, config.min_child_weight)
            gain = np.where(valid[0, 0][None, :], gain, -np.inf)
            for direction in (0, 1):
                for j in range(n_cat[0] - 1):
                    gains.append(gain[direction, j:j + 1])
                    keys.append((k, f, direction, j))
                    chosen = left_sets(order[0], np.array([j]), np.array([False]))[0]
                    what.append((f, j, direction == 0, np.append(chosen, False)[merged[:n_bins - 1]]))
    gain = np.concatenate(gains) if gains else np.zeros(0)
    ranked = sorted(range(len(keys)), key=keys.__getitem__)
    gain = gain[ranked]
    top = gain.max(initial=-np.inf)
    if not is_splittable(top, config.gamma):
        return top, -1, ()
    first = ranked[int(np.argmax(ties_with(gain, top)))]
    return top, keys[first][0], what[first]


def _grow(bins: Sequence[np.ndarray], tables: list, client_of_row: np.ndarray, g: np.ndarray, h: np.ndarray,
          config: PIVODLConfig) -> tuple[ReferenceTree, np.ndarray]:
    offset = np.cumsum([0] + [b.shape[1] for b in bins])
    left, right, feature, split_bin, dleft = [-1], [-1], [-1], [-1], [False]
    sets: dict[int, np.ndarray] = {}
    node_of_row = np.zeros(len(g), dtype=np.int64)
    open_nodes = [0]
    for _ in range(config.max_depth):
        next_open = []
        for node in open_nodes:
            rows = np.flatnonzero(node_of_row == node)
            _, k, chosen = _best(bins, tables, rows, client_of_row, g, h, config)
            if k < 0:
                continue
            f, b, dl, left_set = chosen
            l_child, r_child = len(left), len(left) + 1
            for arr, v in ((left, -1), (right, -1), (feature, -1), (split_bin, -1), (dleft, False)):
                arr.extend([v, v])
            left[node], right[node], feature[node], split_bin[node], dleft[node] = (l_child, r_child, offset[k] + f,
                                                                                   b, dl)
            if left_set is None:
                go = goes_left(bins[k][rows, f], b, dl, config.max_bin)
            else:
                sets[node] = left_set
                go = goes_left_of_set(bins[k][rows, f], left_set, dl, config.max_bin)
            node_of_row[rows[go]], node_of_row[rows[~go]] = l_child, r_child
            next_open += [l_child, r_child]
        open_nodes = next_open
    size = len(left)
    is_leaf = np.asarray(left) < 0
    weight = np.zeros(size)
    G = np.bincount(node_of_row, weights=g, minlength=size)
    H = np.bincount(node_of_row, weights=h, minlength=size)
    weight[is_leaf] = leaf_weights(G[is_leaf], H[is_leaf], config.reg_lambda, config.learning_rate)
    left_set = None
    if sets:
        left_set = np.zeros((size, config.max_bin), dtype=bool)
        for node, chosen in sets.items():
            left_set[node] = chosen
    tree = ReferenceTree(np.asarray(left), np.asarray(right), np.asarray(feature), np.asarray(split_bin),
                         np.asarray(dleft), weight, left_set)
    return tree, node_of_row


def fit_reference(bins: Sequence[np.ndarray], client_of_row: np.ndarray, y: np.ndarray, config: PIVODLConfig,
                  base_score: float, n_categories: Sequence[np.ndarray] | None = None) -> list[ReferenceTree]:
    """``config.n_trees`` trees on every client's binned features (``bins``, one ``(rows, F_k)`` array per
    client, in client order, missing bin = ``config.max_bin``), the labels ``y`` and the index of the
    client that labels each row; split features are global indices (the clients' features side by side).
    ``n_categories``: per client, each feature's categories where it is split natively
    (``config.enable_categorical``; :meth:`~ray_vfl.data.binning.PartyBinner.n_categories`)."""
    if not config.enable_categorical or n_categories is None:
        n_categories = [None] * len(bins)
    tables = [candidate_table(feature_spec(b, config.max_bin), n, config.max_cat_to_onehot)
              for b, n in zip(bins, n_categories)]
    client_of_row = np.asarray(client_of_row, dtype=np.int64)
    margin = np.full(len(y), base_margin(config.objective, base_score))
    trees = []
    for _ in range(config.n_trees):
        g, h = encoded_gradients(config.objective, y, margin)
        tree, node_of_row = _grow(bins, tables, client_of_row, g, h, config)
        trees.append(tree)
        margin = margin + tree.weight[node_of_row]
    return trees
