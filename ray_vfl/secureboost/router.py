"""The active party's side of federated prediction: rows walk the trees, asking owners at their nodes.

The active party holds every tree's structure; a row at one of its own nodes
moves on locally (its lookup table), a row at a passive party's node waits
for that party's answer (one bit per (row, record id) query). Rounds are run
by :func:`ray_vfl.secureboost.rounds.route`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import DataError
from .messages import RouteAnswer, RouteQuery

__all__ = ["PredictionRouter"]


class PredictionRouter:
    """Routing state and steps; mixed into :class:`~ray_vfl.secureboost.active.ActiveParty`,
    whose trees, lookup table, bins, mailbox and party order it reads."""

    routes: dict[str, dict[str, Any]]

    def route_start(self, key: str, first_tree: int, end_tree: int):
        """Start routing the rows of data set ``key`` through trees ``[first_tree, end_tree)``.

        Rows advance through this party's own nodes locally; rows waiting at a
        passive party's node are sent to that party as (row, record) queries.
        """
        trees = self.trees[first_tree:end_tree]
        n = len(self.bins[key])
        offsets = np.cumsum([0] + [t.n_nodes for t in trees]).astype(np.int64)

        def stack(field: str, shift: bool) -> np.ndarray:
            parts = [getattr(t, field) for t in trees]
            if shift:  # child ids become ids in the stacked node array; -1 stays a leaf mark
                parts = [np.where(p >= 0, p + off, -1) for p, off in zip(parts, offsets)]
            return np.concatenate(parts) if parts else np.zeros(0, dtype=np.float64 if field == "weight" else np.int64)

        # multi-class: each tree's output column (its class, or every class for K-weight leaves)
        k = self.config.num_class if getattr(self, "multi", False) else None
        route = {
            "n": n,
            "outputs": k,
            "classes": None if k is None or self.per_round == 1 else np.arange(first_tree, end_tree) % self.per_round,
            "left": stack("left", True),
            "right": stack("right", True),
            "owner": stack("owner", False),
            "record": stack("record", False),
            "weight": stack("weight", False),
            "pos": np.repeat(offsets[:-1], n),
            "waiting": {},
        }
        self.routes[key] = route
        return self._route_queries(key, 0)

    def _advance_own(self, key: str) -> None:
        r = self.routes[key]
        pos, bins = r["pos"], self.bins[key]
        while True:
            idx = np.flatnonzero((r["left"][pos] >= 0) & (r["owner"][pos] == self.me))
            if len(idx) == 0:
                return
            left = self.lookup.route(bins, idx % r["n"], r["record"][pos[idx]], self.missing_bin)
            pos[idx] = np.where(left, r["left"][pos[idx]], r["right"][pos[idx]])

    def _route_queries(self, key: str, depth: int) -> dict[str, Any]:
        """Queries for the passive parties at whose nodes rows now wait (none once all reached leaves)."""
        self._advance_own(key)
        r = self.routes[key]
        pos = r["pos"]
        internal = r["left"][pos] >= 0
        r["waiting"] = {}
        queries = {}
        for party in self.passives:
            idx = np.flatnonzero(internal & (r["owner"][pos] == self.order.index(party)))
            if len(idx):
                r["waiting"][party] = idx
                queries[party] = self.mailbox.send("route_query", [party], RouteQuery(idx % r["n"], r["record"][pos[idx]]), -1, depth)
        return queries

    def route_step(self, key: str, depth: int, answers: list) -> dict[str, Any]:
        """Move the waiting rows by the passive parties' answers; the next round's queries."""
        r = self.routes[key]
        for message in answers:
            answer: RouteAnswer = self.mailbox.open(message, "route_answer",
                                                    {"n_queries": len(r["waiting"].get(message.sender, ()))},
                                                    senders=r["waiting"])
            idx = r["waiting"][message.sender]
            left = np.unpackbits(answer.bits, count=answer.count).astype(bool)
            r["pos"][idx] = np.where(left, r["left"][r["pos"][idx]], r["right"][r["pos"][idx]])
        return self._route_queries(key, depth)

    def route_finish(self, key: str) -> np.ndarray:
        """Sum of the leaf weights each row reached (without the base margin)."""
        r = self.routes.pop(key)
        n, k = r["n"], r["outputs"]
        if len(r["weight"]) == 0:
            return np.zeros(n if k is None else (n, k))
        if np.any(r["left"][r["pos"]] >= 0):
            raise DataError("routing ended before every row reached a leaf; the model's depth is inconsistent")
        reached = r["weight"][r["pos"]]
        if k is None:
            return reached.reshape(-1, n).sum(axis=0)
        if r["classes"] is None:  # K weights per leaf
            return reached.reshape(-1, n, k).sum(axis=0)
        out = np.zeros((n, k))  # one tree per class: tree t's weights move class classes[t]
        np.add.at(out.T, r["classes"], reached.reshape(-1, n))
        return out

