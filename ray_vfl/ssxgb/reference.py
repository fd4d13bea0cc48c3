"""Centralized plain-numpy reference of SSXGB: the same first tree, bins, candidates, row samples,
clamp of the margins and fixed-point approximations, every value in Python integers (units of ``2^-F``).

It differs from the federated run only where the two-server protocols add noise C cannot remove:
the truncations' carries (``{0, 1}`` unit each; :func:`~ray_vfl.ssxgb.approx.gradient_error_units`)
and the secure division's rounding (:func:`~ray_vfl.ssxgb.approx.leaf_error_units`). The split
comparisons are exact in both. ``tests/test_ssxgb.py`` compares the two split for split.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..trees.sampling import RowSampler
from .approx import FixedPointPlan, gradient_ints, leaf_ints
from .first_tree import FirstTree, fit_first_tree

__all__ = ["ReferenceModel", "candidate_list", "fit_ssxgb_reference", "top_bins"]


def top_bins(bins: np.ndarray, missing_bin: int) -> np.ndarray:
    """Per feature, the highest non-missing bin present (0 if none): candidates are ``bin <= b`` for
    ``b < top``."""
    masked = np.where(bins == missing_bin, -1, bins.astype(np.int64))
    return np.maximum(masked.max(axis=0, initial=-1), 0) if bins.shape[0] else np.zeros(bins.shape[1], dtype=np.int64)


def candidate_list(top: np.ndarray, features: np.ndarray) -> list[tuple[int, int]]:
    """``(feature, bin)`` of a participant's candidates over its sampled ``features``, in order."""
    return [(int(f), b) for f in features for b in range(int(top[f]))]


@dataclass
class ReferenceModel:
    """Per federated tree: ``splits`` node -> ``(participant, feature, bin, left, right)`` and
    ``leaves`` node -> weight in units of ``2^-F``; the first tree and the final margins."""

    first: FirstTree
    plan: FixedPointPlan
    splits: list[dict[int, tuple]] = field(default_factory=list)
    leaves: list[dict[int, int]] = field(default_factory=list)
    sums: list[dict[int, tuple[int, int, int]]] = field(default_factory=list)  # leaf -> (G, H, sampled rows)
    margins: list[int] = field(default_factory=list)

    def leaf_of_rows(self, bins: list[np.ndarray], tree: int) -> np.ndarray:
        """The leaf of every row in federated tree ``tree`` (0-based)."""
        node = np.zeros(len(bins[0]), dtype=np.int64)
        for _ in range(len(self.splits[tree]) + 1):
            for nd, (p, f, b, left, right) in self.splits[tree].items():
                at = node == nd
                node[at] = np.where(bins[p][at, f] <= b, left, right)
        return node

    def predict_margin(self, bins: list[np.ndarray], lbp: int) -> np.ndarray:
        out = self.first.margins(bins[lbp])
        for t, leaves in enumerate(self.leaves):
            node = self.leaf_of_rows(bins, t)
            out = out + np.ldexp(np.array([leaves[int(v)] for v in node], dtype=np.float64), -self.plan.frac_bits)
        return out


def fit_ssxgb_reference(bins: list[np.ndarray], lbp: int, y: np.ndarray, config) -> ReferenceModel:
    """SSXGB on all participants' ``bins`` in one place (every feature sampled: feature subsampling
    draws from each participant's own entropy and cannot be replayed)."""
    n = len(y)
    plan = FixedPointPlan.of(config, n)
    first = fit_first_tree(bins[lbp], y, config)
    model = ReferenceModel(first, plan)
    margin = plan.encode(first.margins(bins[lbp]))
    y_int = [int(v) << plan.frac_bits for v in y]
    tops = [top_bins(b, config.max_bin) for b in bins]
    cands = [(p, f, b) for p, top in enumerate(tops) for f, b in candidate_list(top, np.arange(len(top)))]
    sampler = RowSampler(config.row_subsample, config.seed)
    for t in range(1, config.n_trees):
        rows = sampler.rows(n, t)
        g, h = gradient_ints(plan, [margin[i] for i in rows], [y_int[i] for i in rows])
        g_row = np.zeros(n, dtype=object)
        h_row = np.zeros(n, dtype=object)
        g_row[rows], h_row[rows] = g, h
        sampled = np.zeros(n, dtype=bool)
        sampled[rows] = True
        node_of_row = np.zeros(n, dtype=np.int64)
        splits, open_nodes, next_id = {}, [0], 1
        for _ in range(config.max_depth):
            children = []
            for node in sorted(open_nodes):
                in_node = node_of_row == node
                s = in_node & sampled
                G, H = int(g_row[s].sum()), int(h_row[s].sum())
                best, best_num, best_den = 0, None, None
                for i, (p, f, b) in enumerate(cands):
                    left = s & (bins[p][:, f] <= b)
                    gl, hl = int(g_row[left].sum()), int(h_row[left].sum())
                    gr, hr = G - gl, H - hl
                    num = gl * gl * (hr + plan.lam) + gr * gr * (hl + plan.lam)
                    den = (hl + plan.lam) * (hr + plan.lam)
                    if best_num is None or best_num * den < num * best_den:
                        best, best_num, best_den = i, num, den
                p, f, b = cands[best]
                left_id, right_id = next_id, next_id + 1
                next_id += 2
                go = bins[p][:, f] <= b
                node_of_row[in_node & go] = left_id
                node_of_row[in_node & ~go] = right_id
                splits[node] = (p, f, b, left_id, right_id)
                children += [left_id, right_id]
            open_nodes = children
        leaf_ids = sorted(open_nodes)
        G = [int(g_row[(node_of_row == lf) & sampled].sum()) for lf in leaf_ids]
        H = [int(h_row[(node_of_row == lf) & sampled].sum()) for lf in leaf_ids]
        w = dict(zip(leaf_ids, leaf_ints(plan, G, H)))
        model.sums.append({lf: (a, b, int(((node_of_row == lf) & sampled).sum())) for lf, a, b in zip(leaf_ids, G, H)})
        margin = [m + w[int(nd)] for m, nd in zip(margin, node_of_row)]
        model.splits.append(splits)
        model.leaves.append(w)
    model.margins = margin
    return model
