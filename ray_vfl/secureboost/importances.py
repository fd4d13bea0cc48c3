"""The label party's report of the model: feature importances and its own dump of the trees.

The active party chose every split, so each :class:`~ray_vfl.secureboost.tree.Tree` it holds keeps, per
internal node, the owner's feature index, the split's gain and its node's hessian sum (cover). From these it
reports XGBoost's importances (:mod:`ray_vfl.trees.importance`) of its own features and one total per party:
a passive party's per-feature figures never leave it. Its dump of the trees (:meth:`ImportanceReport.own_trees`)
is written on its own machine.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..trees.importance import IMPORTANCE_TYPES, importance_scores, split_stats
from .tree import Tree

__all__ = ["ImportanceReport"]


class ImportanceReport:
    """Mixin of :class:`~ray_vfl.secureboost.active.ActiveParty`: importances and the tree dump."""

    def importance_stats(self) -> dict[str, Any]:
        """What this party reports of feature importances (:mod:`ray_vfl.trees.importance`): the
        ``(features, 3)`` split statistics (total gain, total cover, splits) of its own features, and per
        party (itself included) the same three summed over that party's features: a passive party's
        per-feature figures stay here (this party chose those splits, by feature index), it reports
        only their totals."""
        own = self.order.index(self.name)
        stats: dict[int, list] = {}
        for tree in self.trees:
            internal = np.flatnonzero(tree.left >= 0)
            for node in internal.tolist():
                stats.setdefault(int(tree.owner[node]), []).append((int(tree.feature[node]), tree.gain[node], tree.cover[node]))
        per_party, mine = {}, np.zeros((self.n_features, 3))
        for i, party in enumerate(self.order):
            rows = np.asarray(stats.get(i, []), dtype=np.float64).reshape(-1, 3)
            width = self.n_features if i == own else int(rows[:, 0].max(initial=-1)) + 1
            table = split_stats(rows[:, 0], rows[:, 1], rows[:, 2], width)
            if i == own:
                mine = table
            per_party[party] = {t: float(importance_scores(table, t).sum()) for t in IMPORTANCE_TYPES}
        return {"own": mine, "parties": per_party}

    def own_trees(self) -> dict[str, Any]:
        """The label party's view (see :meth:`Party.own_trees`), plus every tree: its own splits with
        their feature names and thresholds, the other parties' as ``(party, record)`` only, each split's
        gain and cover, the leaf weights; and its own features' gain, cover and weight importances."""
        view = super().own_trees()
        names, rows = list(self.binner.feature_names), self.lookup.to_dict()["rows"]

        def node(tree: Tree, i: int) -> dict[str, Any]:
            if tree.left[i] < 0:
                w = tree.weight[i]  # K weights at a leaf of a multi-output tree
                return {"leaf": w.tolist() if np.ndim(w) else float(w)}
            party = self.order[int(tree.owner[i])]
            out: dict[str, Any] = {"party": party, "record": int(tree.record[i]), "gain": float(tree.gain[i]),
                                   "cover": float(tree.cover[i])}
            if party == self.name:
                f, b, t, dl, *cats = rows[int(tree.record[i])]
                split = {"threshold": t} if not cats else {"categories_left": self.binner.split_categories(f, cats[0])}
                out.update(feature=names[f], bin=b, **split, default_left=dl)
            out.update(yes=node(tree, int(tree.left[i])), no=node(tree, int(tree.right[i])))
            return out

        view["trees"] = [node(t, 0) for t in self.trees]
        view["base_margin"] = self.base_margin
        own = self.importance_stats()["own"]
        view["importance"] = {kind: dict(zip(names, importance_scores(own, kind).tolist())) for kind in IMPORTANCE_TYPES}
        return view

