"""Secure prediction (step 7) and the label-guess view of a PIVODL client.

Rows move down every tree at once, one level per round: each source client decides left or right
for the rows waiting at its own split nodes, from its private lookup table (a threshold, or for a native
categorical split the set of its categories that goes left: the values stay at the source), and tells every client
(as in training, where partitions are public among clients). When every row has reached a leaf,
each client sums the weights it *kept* for the leaves it holds (exact, or clipped under partial DP;
never the noisy released copies) over the rows in them, and sends the
output client a share masked by pairwise masks (:mod:`ray_vfl.crypto.privacy.secure_sum`): one share alone
is uniformly distributed, the shares sum to the score. No client learns another's leaf values.
With ``K`` classes every row has ``K`` scores (tree ``t`` adds to class ``t % K``): the shares are
``(rows, K)`` and summed per class; evaluation reports ``mlogloss`` and ``merror``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..runtime.comm import Message
from ..crypto.privacy.secure_sum import combine
from ..trees.categorical import goes_left_of_set
from ..trees.kernels import base_margin, goes_left
from ..trees.multiclass import check_class_indices, is_multiclass, multiclass_metrics
from .messages import fetch

__all__ = ["PredictionRole"]


class PredictionRole:
    """Routing rows through the trees, masked shares of their scores, and the label-guess view."""

    def route_start(self, key: str, n_rounds: int) -> None:
        """Every row of data set ``key`` at the root of the trees of rounds ``0 .. n_rounds - 1``."""
        self.routes = getattr(self, "routes", {})
        self.routes[key] = np.zeros((n_rounds * self.per_round, len(self.rows[key])), dtype=np.int64)

    def _share_shape(self, n_rows: int) -> tuple[int, ...]:
        """``(n_rows,)``, or ``(n_rows, K)`` scores with ``K`` classes."""
        return (n_rows,) if self.per_round == 1 else (n_rows, self.per_round)

    def _waiting(self, pos: np.ndarray, trees: np.ndarray, nodes: np.ndarray) -> np.ndarray:
        """How many rows wait at each (tree, node)."""
        if not len(trees):
            return np.zeros(0, dtype=np.int64)
        counts = {t: np.bincount(pos[t]) for t in np.unique(trees).tolist()}
        return np.array([counts[t][n] if n < len(counts[t]) else 0 for t, n in zip(trees.tolist(), nodes.tolist())],
                        dtype=np.int64)

    def route_step(self, key: str, decisions: list, depth: int, send: bool = True) -> tuple:
        """Apply every source's decisions of the last round (the others' and this client's own, all
        counted on the state before the round), then decide for the rows now waiting at this client's
        own split nodes and tell every other client."""
        pos = self.routes[key]
        ctx = {"n_trees": len(pos), "waiting": lambda t, n: int(self._waiting(pos, t, n).sum())}
        rounds = [self.mailbox.open(msg, "pivodl_route_decisions", ctx, self.others) for msg in fetch(decisions)]
        rounds += [self._pending_route.pop(key)] if key in getattr(self, "_pending_route", {}) else []
        self._move(pos, rounds)
        if not send:
            return None, None
        trees, nodes, lefts = [], [], []
        bins = self.rows[key]
        for t in range(len(pos)):
            for node in np.unique(pos[t]).tolist():
                kind = self.trees[t].get(node)
                if kind is None or kind[0] != "split" or kind[1] != self.name:
                    continue
                entry = self.lookup[kind[2]]
                f, b, dl = entry[:3]
                rows = np.flatnonzero(pos[t] == node)
                trees.append(t)
                nodes.append(node)
                if len(entry) > 4:  # a categorical split: its set of categories (bins) goes left
                    left_set = np.zeros(self.missing_bin, dtype=bool)
                    left_set[entry[4]] = True
                    lefts.append(goes_left_of_set(bins[rows, f], left_set, dl, self.missing_bin))
                else:
                    lefts.append(goes_left(bins[rows, f], b, dl, self.missing_bin))
        payload = {"tree": np.asarray(trees, dtype=np.int64), "node": np.asarray(nodes, dtype=np.int64),
                   "bits": np.packbits(np.concatenate(lefts)) if lefts else np.zeros(0, dtype=np.uint8)}
        self._pending_route = getattr(self, "_pending_route", {})
        self._pending_route[key] = payload
        return None, self.mailbox.send("pivodl_route_decisions", self.others, payload, -1, depth)

    def _move(self, pos: np.ndarray, payloads: list[dict]) -> None:
        """Move rows by one round's decisions, every count taken before any row moves."""
        moves = []
        for p in payloads:
            counts = self._waiting(pos, p["tree"], p["node"])
            bits = np.unpackbits(p["bits"], count=int(counts.sum())).astype(bool)
            for t, node, left in zip(p["tree"].tolist(), p["node"].tolist(), np.split(bits, np.cumsum(counts)[:-1])):
                kind = self.trees[t][node]
                moves.append((t, np.flatnonzero(pos[t] == node), np.where(left, kind[3], kind[4])))
        for t, rows, to in moves:
            pos[t, rows] = to

    def _score_share(self, key: str, nonce: bytes) -> np.ndarray:
        """This client's masked share of every row's score: the kept weights of the leaves it holds (with
        ``K`` classes, ``(rows, K)``: tree ``t``'s weights in column ``t % K``)."""
        pos = self.routes[key]
        score = np.zeros(self._share_shape(pos.shape[1]))
        for t in range(len(pos)):
            held = {n: w for (tt, n), w in self.held.items() if tt == t}
            if held:
                lookup = np.zeros(int(max(pos[t].max(), max(held))) + 1)
                lookup[list(held)] = list(held.values())
                if self.per_round == 1:
                    score += lookup[pos[t]]
                else:
                    score[:, t % self.per_round] += lookup[pos[t]]
        return self.masker.share(score, nonce, self.order)

    def prediction_share(self, key: str, nonce: bytes, output: str) -> tuple:
        """This client's masked share of every row's score, for the output client."""
        share = self._score_share(key, nonce)
        if output == self.name:
            self._own_share = share
            return None, None
        return None, self.mailbox.send("pivodl_prediction_share", [output], share, -1, -1)

    def combine_shares(self, key: str, shares: list, caller_key: bytes) -> Message:
        """At the output client: the sum of every client's share plus the base margin, the model's margins,
        sealed to the caller (the key it made for this prediction)."""
        ctx = {"shape": self._share_shape(len(self.rows[key]))}
        all_shares = [self._own_share] + [self.mailbox.open(m, "pivodl_prediction_share", ctx, self.others) for m in fetch(shares)]
        self.routes.pop(key, None)
        margins = combine(all_shares) + base_margin(self.config.objective, self.base_score)
        return self.mailbox.send_to_caller("pivodl_margins", caller_key, margins)

    # -- evaluation: margins reach only each row's label owner; the metrics' sums are masked too ----------
    def eval_labelled(self, key: str) -> tuple:
        """Tell every other client which rows of eval set ``key`` this client labels (as at set-up)."""
        label = self.labels.get(key)
        n = len(self.rows[key])
        mine = np.zeros(n, dtype=bool) if label is None else ~np.isnan(label)
        self.eval_owned = getattr(self, "eval_owned", {})
        self.eval_owned[key] = {self.name: np.flatnonzero(mine)}
        return None, self.mailbox.send("pivodl_labelled_rows", self.others, np.packbits(mine))

    def take_eval_labelled(self, key: str, messages: list) -> None:
        n = len(self.rows[key])
        for msg in fetch(messages):
            bits = self.mailbox.open(msg, "pivodl_labelled_rows", {"n_rows": n}, self.others)
            self.eval_owned[key][msg.sender] = np.flatnonzero(np.unpackbits(bits, count=n))

    def eval_shares(self, key: str, nonce: bytes) -> tuple:
        """The masked share of every eval row's score, each label owner sent the entries of its own rows."""
        share = self._score_share(key, nonce)
        owned = self.eval_owned[key]
        self._own_share = share[owned[self.name]]
        return (None, *[self.mailbox.send("pivodl_prediction_share", [p], share[owned[p]], -1, -1) for p in self.others])

    def eval_sums(self, key: str, shares: list, nonce: bytes, output: str) -> tuple:
        """Margins of this client's own eval rows (its shares summed), their loss sums, masked for ``output``."""
        from ..trees.kernels import transform_margin

        own = self.eval_owned[key][self.name]
        ctx = {"shape": self._share_shape(len(own))}
        margin = combine([self._own_share] + [self.mailbox.open(m, "pivodl_prediction_share", ctx, self.others)
                                              for m in fetch(shares)]) + base_margin(self.config.objective, self.base_score)
        y = self.labels[key][own] if len(own) else np.zeros(0)
        weight = self.weights.get(key)  # sample weights of its own eval rows, if the eval set is weighted
        w = np.ones(len(own)) if weight is None else np.asarray(weight, dtype=np.float64)[own]
        if is_multiclass(self.config.objective):
            check_class_indices(y, self.config.num_class, f"client {self.name!r}, eval set {key!r}")
            total = float(w.sum())
            m = multiclass_metrics(y, margin, w) if total > 0 else {"mlogloss": 0.0, "merror": 0.0}  # the weighted means times the weight sum: the weighted sums
            sums = np.array([m["mlogloss"] * total, m["merror"] * total, total])
        elif self.config.objective == "binary:logistic":
            p = np.clip(transform_margin(self.config.objective, margin), 1e-15, 1 - 1e-15)
            sums = np.array([-(w * (y * np.log(p) + (1 - y) * np.log(1 - p))).sum(),
                             float((w * ((p > 0.5) != (y == 1))).sum()), float(w.sum())])
        else:
            sums = np.array([(w * (margin - y) ** 2).sum(), float((w * np.abs(margin - y)).sum()), float(w.sum())])
        share = self.masker.share(sums, nonce, self.order)
        if output == self.name:
            self._metric_share = share
            return None, None
        return None, self.mailbox.send("pivodl_metric_share", [output], share, -1, -1)

    def eval_metrics(self, messages: list) -> dict[str, float]:
        """At the output client: the metrics from every client's masked sums (nothing per client)."""
        total = combine([self._metric_share] + [self.mailbox.open(m, "pivodl_metric_share", None, self.others)
                                                for m in fetch(messages)])
        count = max(total[2], 1.0)
        if is_multiclass(self.config.objective):
            return {"mlogloss": float(total[0] / count), "merror": float(total[1] / count)}
        if self.config.objective == "binary:logistic":
            return {"logloss": float(total[0] / count), "error": float(total[1] / count)}
        return {"rmse": float(np.sqrt(max(total[0], 0.0) / count)), "mae": float(total[1] / count)}

    def drop_rows(self, key: str) -> None:
        super().drop_rows(key)
        getattr(self, "routes", {}).pop(key, None)
        getattr(self, "eval_owned", {}).pop(key, None)

    # -- the label-guess attack's view (the paper's Table III) ----------------------------------------------
    def guess_scores(self) -> dict[str, Any]:
        """What this client, honest but curious, can say of every training row's label from its own view.

        ``score``, the paper's attack: the sum over trees of the leaf weight it received (released) for
        the leaf each row fell in (the partitions are public among clients). ``partition``, going beyond
        the paper: the sum over trees of the mean of this client's *own* labels in the row's leaf (one
        pseudo-row at its own base rate smooths small leaves), centred on that base rate. The splits were
        chosen on every client's labels, so a leaf's own-label rate predicts the rate of the other
        clients' rows in it, and no noise on the leaf weights touches it. A high score means label 1 (or
        a high target). Rows it labels itself are marked, so the attack is scored on the others' rows
        only."""
        n_rows = len(self.rows["train"])
        score, partition = np.zeros(n_rows), np.zeros(n_rows)
        base = float(self.y_own.mean()) if len(self.own) else 0.0
        for t, leaf in enumerate(self.leaf_of_row):
            weights = self.released[t]
            lookup = np.zeros(max(weights) + 1)
            lookup[list(weights)] = list(weights.values())
            score += lookup[leaf]
            if len(self.own):
                size = int(leaf.max()) + 1
                count = np.bincount(leaf[self.own], minlength=size)
                total = np.bincount(leaf[self.own], weights=self.y_own, minlength=size)
                partition += ((total + base) / (count + 1.0) - base)[leaf]
        own = np.zeros(n_rows, dtype=bool)
        own[self.own] = True
        return {"score": score, "partition": partition, "own": own}
