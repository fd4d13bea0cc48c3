"""The active party: labels, the private key, the tree structure and split finding."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..config import BoostConfig
from ..crypto import get_backend
from ..errors import DataError
from ..kernels import base_margin, best_splits, build_histograms, goes_left, gradients, leaf_weights, slot_of_rows, smaller_children
from ..metrics import evaluate_margin
from ..runtime import TaskPool
from .messages import LevelPlan, Partition, RouteAnswer, RouteQuery, SplitOrders
from .party import Party
from .tree import Tree, TreeBuilder

__all__ = ["ActiveParty"]


def _encrypt_task(gh: tuple[np.ndarray, np.ndarray], spec: tuple, key):
    # ``key`` is the private key: the key owner encrypts with CRT, faster than with the public key.
    return get_backend(spec[0], **spec[1]).encrypt_gh(key, gh[0], gh[1])


def _decrypt_task(ciphers: list, spec: tuple, secret_key) -> list:
    backend = get_backend(spec[0], **spec[1])
    return [backend.decrypt_gh(secret_key, c) for c in ciphers]


def backend_options(objective: str) -> dict:
    """Encoding options every party must share: logistic gradients are bounded by 1,
    which leaves room for more bin sums per compressed ciphertext."""
    return {"gh_max_abs": 1.0} if objective == "binary:logistic" else {}


def _one_or_tuple(items: list) -> Any:
    """Ray's ``num_returns=k`` wants a bare value for k == 1, a tuple otherwise."""
    return items[0] if len(items) == 1 else tuple(items)


class ActiveParty(Party):
    """The label owner. Decrypts histograms, finds every split, holds the trees.

    It learns the passive parties' histograms (sums over bins, not rows) and
    the (feature index, bin index) of each split they win, never a threshold.
    """

    def __init__(self, name, frame, categorical, config: BoostConfig, pool: TaskPool, label, party_order) -> None:
        self.reset(name, frame, categorical, config, pool, label, party_order)

    def reset(self, name, frame, categorical, config: BoostConfig, pool: TaskPool, label, party_order) -> None:
        super().reset(name, frame, categorical, config, pool)
        self.order = list(party_order)
        self.me = self.order.index(name)
        self.passives = [p for p in self.order if p != name]
        self.backend_spec = (config.backend, backend_options(config.objective))
        self.backend = get_backend(self.backend_spec[0], **self.backend_spec[1])
        self.public_key, self._secret_key = self.backend.generate_keys(config.key_bits)
        self.plain = get_backend("plain")
        self._plain_pk, self._plain_sk = self.plain.generate_keys(config.key_bits)
        self.trees: list[Tree] = []
        self.record_count = {p: 0 for p in self.passives}
        self.routes: dict[str, dict[str, Any]] = {}
        self.eval: dict[str, dict[str, Any]] = {}
        self.history: dict[str, list[dict[str, float]]] = {}
        if label is None:
            self.y = None
            self.base_margin = 0.0
            return
        self.y = np.asarray(label, dtype=np.float64)
        base = config.base_score
        if base is None:
            base = float(np.clip(self.y.mean(), 1e-6, 1 - 1e-6)) if config.objective == "binary:logistic" else float(self.y.mean())
        self.base_score = base
        self.base_margin = base_margin(config.objective, base)
        self.margin = np.full(len(self.y), self.base_margin)

    # setup ---------------------------------------------------------------
    def public_key_message(self):
        return self.mailbox.send("public_key", self.passives, (self.backend_spec, self.public_key))

    def set_eval_labels(self, key: str, label: np.ndarray) -> None:
        self.eval[key] = {"y": np.asarray(label, dtype=np.float64), "margin": np.full(len(label), self.base_margin)}
        self.history[key] = []

    # one tree --------------------------------------------------------------
    def start_tree(self, tree: int):
        """Gradients of the current model, encrypted for the passive parties."""
        self.tree = tree
        g, h = gradients(self.config.objective, self.y, self.margin)
        self.g, self.h = g, h
        n = len(g)
        if self.backend.is_encrypted and self.pool.resource is not None and self.pool.workers > 1:
            parts = self.pool.map(_encrypt_task, [(g[s], h[s]) for s in self.pool.chunks(n, 1024)], self.backend_spec, self._secret_key)
            gh = self.backend.concat(parts)
        else:
            gh = self.backend.encrypt_gh(self._secret_key, g, h)
        self.ops["encrypt"] += len(gh)
        self.own_gh = self.plain.encrypt_gh(self._plain_pk, g, h)
        self.builder = TreeBuilder()
        self.node_of_row = np.zeros(n, dtype=np.int32)
        self.open = np.array([0], dtype=np.int32)
        self.build, self.derive = self.open, np.zeros((0, 3), dtype=np.int32)
        self.own_hists: dict[int, Any] = {}
        return self.mailbox.send("encrypted_gh", self.passives, gh, tree, 0), self._plan_level(0)

    def _plan_level(self, depth: int):
        masked = np.where(np.isin(self.node_of_row, self.open), self.node_of_row, -1).astype(np.int32)
        plan = LevelPlan(masked, self.open, self.build, self.derive)
        self.masked_nodes = masked
        return self.mailbox.send("level_plan", self.passives, plan, self.tree, depth)

    def own_histograms(self) -> None:
        """This party's own plaintext histograms, by the same kernel as the encrypted ones."""
        if len(self.open) == 0:
            return
        slot = slot_of_rows(self.masked_nodes, self.build)
        built = build_histograms(self.plain, self._plain_pk, self.own_gh, self.fkeys, slot, len(self.build), self.n_bins)
        width = self.n_features * self.n_bins
        hists = {n: self.plain.take(built, np.arange(i * width, (i + 1) * width)) for i, n in enumerate(self.build.tolist())}
        for node, parent, sibling in self.derive.tolist():
            hists[node] = self.plain.sub(self._plain_pk, self.own_hists[parent], hists[sibling])
        self.own_hists = hists

    def _decrypt(self, ciphers: list) -> tuple[np.ndarray, np.ndarray]:
        """Decrypt a passive party's sealed node histograms, in parallel tasks when worth it."""
        self.ops["decrypt"] += sum(len(c) for c in ciphers)
        if not ciphers:
            return np.zeros(0), np.zeros(0)
        groups = [ciphers[s] for s in self.pool.chunks(len(ciphers), 1)]
        parallel = self.backend.is_encrypted and self.pool.resource is not None and len(groups) > 1
        if parallel:
            parts = [r for part in self.pool.map(_decrypt_task, groups, self.backend_spec, self._secret_key) for r in part]
        else:
            parts = _decrypt_task(ciphers, self.backend_spec, self._secret_key)
        return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])

    def find_splits(self, depth: int, *hist_messages):
        """Decrypt, pick the best split of every open node over all parties' features."""
        n_open = len(self.open)
        blocks: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        if n_open:
            own = self.plain.concat([self.own_hists[n] for n in self.open.tolist()])
            G, H = self.plain.decrypt_gh(self._plain_sk, own)
            blocks[self.name] = (G.reshape(n_open, -1, self.n_bins), H.reshape(n_open, -1, self.n_bins))
            for message in hist_messages:
                G, H = self._decrypt(self.mailbox.open(message, "encrypted_histograms"))
                blocks[message.sender] = (G.reshape(n_open, -1, self.n_bins), H.reshape(n_open, -1, self.n_bins))
        orders: dict[str, list[tuple]] = {p: [] for p in self.passives}
        self.pending: list[tuple[int, int, int, int, np.ndarray | None]] = []
        totals_g = np.bincount(self.node_of_row, weights=self.g, minlength=self.builder_size())
        totals_h = np.bincount(self.node_of_row, weights=self.h, minlength=self.builder_size())
        if n_open:
            G = np.concatenate([blocks[p][0] for p in self.order], axis=1)
            H = np.concatenate([blocks[p][1] for p in self.order], axis=1)
            offsets = np.cumsum([0] + [blocks[p][0].shape[1] for p in self.order])
            choice = best_splits(G, H, self.config.reg_lambda, self.config.min_child_weight)
            split = choice.splittable(self.config.gamma)
            for i, node in enumerate(self.open.tolist()):
                if not split[i]:
                    self._make_leaf(node, totals_g, totals_h)
                    continue
                owner = int(np.searchsorted(offsets, choice.feature[i], side="right") - 1)
                feature = int(choice.feature[i] - offsets[owner])
                bin_index, default_left = int(choice.bin[i]), bool(choice.default_left[i])
                party = self.order[owner]
                if owner == self.me:
                    record = len(self.lookup)
                    self.lookup.add(record, feature, bin_index, self.binner.threshold(feature, bin_index), default_left)
                    rows = np.flatnonzero(self.node_of_row == node)
                    left = goes_left(self.bins["train"][rows, feature], bin_index, default_left, self.missing_bin)
                else:
                    record = self.record_count[party]
                    self.record_count[party] += 1
                    orders[party].append((node, feature, bin_index, default_left, record))
                    left = None
                l_child, r_child = self.builder.split(node, owner, record)
                self.pending.append((node, l_child, r_child, owner, left))
        messages = []
        for party in self.passives:
            cols = list(zip(*orders[party])) or [[], [], [], [], []]
            payload = SplitOrders(
                np.asarray(cols[0], dtype=np.int32), np.asarray(cols[1], dtype=np.int32), np.asarray(cols[2], dtype=np.int32),
                np.asarray(cols[3], dtype=bool), np.asarray(cols[4], dtype=np.int32),
            )
            messages.append(self.mailbox.send("split_orders", [party], payload, self.tree, depth))
        return _one_or_tuple(messages)

    def builder_size(self) -> int:
        return len(self.builder.left)

    def _make_leaf(self, node: int, totals_g: np.ndarray, totals_h: np.ndarray) -> None:
        w = leaf_weights(totals_g[node], totals_h[node], self.config.reg_lambda, self.config.learning_rate)
        self.builder.set_leaf(node, w)

    def apply_partitions(self, depth: int, *partition_messages):
        """Move every row of a split node to its child; send the next level's plan (if any)."""
        lefts: dict[int, np.ndarray] = {}
        for message in partition_messages:
            part: Partition = self.mailbox.open(message, "partition")
            bits = np.unpackbits(part.bits, count=int(part.counts.sum())).astype(bool)
            for node, chunk in zip(part.node.tolist(), np.split(bits, np.cumsum(part.counts)[:-1])):
                lefts[node] = chunk
        children, build, derive = [], [], []
        for node, l_child, r_child, owner, left in self.pending:
            left = lefts[node] if left is None else left
            rows = np.flatnonzero(self.node_of_row == node)
            self.node_of_row[rows[left]] = l_child
            self.node_of_row[rows[~left]] = r_child
            children += [l_child, r_child]
            small, big = (l_child, r_child) if smaller_children(left.sum(), (~left).sum()) else (r_child, l_child)
            build.append(small)
            derive.append((big, node, small))
        self.open = np.asarray(children, dtype=np.int32)
        self.build = np.asarray(build, dtype=np.int32)
        self.derive = np.asarray(derive, dtype=np.int32).reshape(-1, 3)
        return self._plan_level(depth + 1) if depth + 1 < self.config.max_depth else None

    def finish_tree(self) -> dict[str, Any]:
        """Close the open nodes as leaves, update the margins, report training metrics."""
        size = self.builder_size()
        totals_g = np.bincount(self.node_of_row, weights=self.g, minlength=size)
        totals_h = np.bincount(self.node_of_row, weights=self.h, minlength=size)
        for node in self.open.tolist():
            self._make_leaf(node, totals_g, totals_h)
        tree = self.builder.finish()
        self.trees.append(tree)
        self.margin = self.margin + tree.weight[self.node_of_row]
        # AUC is left to the eval sets: ranking every training row after each tree costs more than the tree
        metrics = evaluate_margin(self.config.objective, self.y, self.margin, with_auc=False)
        self.history.setdefault("train", []).append(metrics)
        return metrics

    # federated prediction -----------------------------------------------------
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

        route = {
            "n": n,
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

    def _route_queries(self, key: str, depth: int):
        self._advance_own(key)
        r = self.routes[key]
        pos = r["pos"]
        internal = r["left"][pos] >= 0
        messages = []
        for party in self.passives:
            idx = np.flatnonzero(internal & (r["owner"][pos] == self.order.index(party)))
            r["waiting"][party] = idx
            query = RouteQuery(idx % r["n"], r["record"][pos[idx]])
            messages.append(self.mailbox.send("route_query", [party], query, -1, depth))
        return _one_or_tuple(messages)

    def _apply_answers(self, key: str, answers) -> None:
        r = self.routes[key]
        for message in answers:
            answer: RouteAnswer = self.mailbox.open(message, "route_answer")
            idx = r["waiting"][message.sender]
            left = np.unpackbits(answer.bits, count=answer.count).astype(bool)
            r["pos"][idx] = np.where(left, r["left"][r["pos"][idx]], r["right"][r["pos"][idx]])

    def route_step(self, key: str, depth: int, *answers):
        self._apply_answers(key, answers)
        return self._route_queries(key, depth)

    def route_finish(self, key: str, *answers) -> np.ndarray:
        """Sum of the leaf weights each row reached (without the base margin)."""
        self._apply_answers(key, answers)
        self._advance_own(key)
        r = self.routes.pop(key)
        if len(r["weight"]) == 0:
            return np.zeros(r["n"])
        if np.any(r["left"][r["pos"]] >= 0):
            raise DataError("routing ended before every row reached a leaf; the model's depth is inconsistent")
        return r["weight"][r["pos"]].reshape(-1, r["n"]).sum(axis=0)

    def record_eval(self, key: str, margin_delta: np.ndarray) -> dict[str, float]:
        """Add one tree's margins to an eval set's and report its metrics."""
        state = self.eval[key]
        state["margin"] = state["margin"] + margin_delta
        metrics = evaluate_margin(self.config.objective, state["y"], state["margin"])
        self.history[key].append(metrics)
        return metrics

    # model ----------------------------------------------------------------------
    def get_base_margin(self) -> float:
        return self.base_margin

    def history_snapshot(self) -> dict[str, list[dict[str, float]]]:
        return {k: list(v) for k, v in self.history.items()}

    def trees_snapshot(self) -> list[Tree]:
        return list(self.trees)

    def model_part(self) -> dict[str, Any]:
        part = super().model_part()
        part.update(
            role="active",
            order=self.order,
            objective=self.config.objective,
            base_margin=self.base_margin,
            trees=[t.to_dict() for t in self.trees],
        )
        return part

    def restore(self, part: dict[str, Any]) -> None:
        super().restore(part)
        self.order = list(part["order"])
        self.me = self.order.index(self.name)
        self.passives = [p for p in self.order if p != self.name]
        self.base_margin = float(part["base_margin"])
        self.trees = [Tree.from_dict(t) for t in part["trees"]]

    def truncate(self, n_trees: int) -> None:
        """Keep the first ``n_trees`` trees (early stopping's best iteration)."""
        self.trees = self.trees[:n_trees]
