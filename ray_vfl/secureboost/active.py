"""The active party: labels, the private key, the tree structure and split finding."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from ..crypto import get_backend
from ..crypto.he.mask_reserve import MaskSupply
from ..errors import DataError, SecurityWarning
from ..runtime.actors import gather
from ..runtime.comm import Message
from ..runtime.party import resolve_weights
from ..runtime.task_pool import TaskPool
from ..runtime.timeline import timed
from ..trees.config import BoostConfig
from ..trees.kernels import (
    base_margin,
    build_histograms,
)
from ..trees.multiclass import is_multiclass, pairs_per_row, trees_per_round
from . import rounds
from .label_crypto import (
    backend_options,
    check_gradient_bound,
    encrypt_task,
    encryption_pieces,
    repeated_pairs,
)
from ..trees.weights import check_weighted_bound, evaluate_weighted, row_weights, weighted_base_score
from .importances import ImportanceReport
from .levels import RowLevels, unpack_partition
from .multiclass_state import MultiClassState, node_sums
from .party import Party
from .router import PredictionRouter
from .split_finder import SplitFinder
from .training_state import TrainingState
from .tree import Tree, TreeBuilder

__all__ = ["ActiveParty"]


class ActiveParty(SplitFinder, MultiClassState, ImportanceReport, TrainingState, PredictionRouter, Party):
    """The label owner. Decrypts histograms, finds every split, holds the trees.

    It learns the passive parties' histograms (sums over bins, not rows) and
    the (feature index, bin index) of each split they win, never a threshold.
    """

    def __init__(self, name, table, categorical, config: BoostConfig, pool: TaskPool, party_order, init_part=None) -> None:
        self.reset(name, table, categorical, config, pool, party_order, init_part)

    def reset(self, name, table, categorical, config: BoostConfig, pool: TaskPool, party_order, init_part=None) -> None:
        super().reset(name, table, categorical, config, pool, init_part)
        label = self.own_label
        if table is not None:  # train() had the labels' classes checked; their spread is checked here, where they are
            check_gradient_bound(label, config)
        self.order = list(party_order)
        self.me = self.order.index(name)
        self.passives = [p for p in self.order if p != name]
        self.outputs = (pairs_per_row(config),) if pairs_per_row(config) > 1 else ()  # a leaf's weights: () = one
        self.backend_spec = (config.backend, backend_options(config.gradient_bound,
                                                             None if label is None else len(label),
                                                             pairs_per_row(config)))
        self.backend = get_backend(self.backend_spec[0], **self.backend_spec[1])
        with warnings.catch_warnings():  # the driver warned of a weak key when the config was made
            warnings.simplefilter("ignore", SecurityWarning)
            self.public_key, self._secret_key = self.backend.generate_keys(config.key_bits, config.allow_weak_keys)
        self._check_packing()
        self.plain = get_backend("plain", pairs=pairs_per_row(config))
        self._plain_pk, self._plain_sk = self.plain.generate_keys()
        self.peers: dict[str, Any] = {}
        self.masks: MaskSupply | None = None
        self._repeats: tuple | None = None  # this tree's (g, h, pieces) in encryption order, until counted
        self.layouts: dict[str, tuple[int, np.ndarray]] = {}
        # per party, each feature's categories where it is split natively (0: at thresholds)
        self.n_categories: dict[str, np.ndarray] = {name: self.binner.n_categories()}
        self.trees: list[Tree] = []
        self.record_count = {p: 0 for p in self.passives}
        self.routes: dict[str, dict[str, Any]] = {}
        self.eval: dict[str, dict[str, Any]] = {}
        self.history: dict[str, list[dict[str, float]]] = {}
        self.multi = is_multiclass(config.objective)
        self.per_round = trees_per_round(config.objective, config.num_class, config.multi_strategy)
        self.classes = None
        if label is None:
            self.y = None
            self.base_margin = 0.0
            return
        self.y = self._class_labels(label, "the training labels") if self.multi else np.asarray(label, dtype=np.float64)
        # Sample weights come with the labels, from this party's own block; scale_pos_weight multiplies them.
        self.sample_weight = resolve_weights(table)
        self.w = row_weights(self.y, self.sample_weight, config.scale_pos_weight)
        base = weighted_base_score(config.objective, self.y, self.sample_weight, config.base_score)
        check_weighted_bound(config.objective, self.y, self.w, config.gradient_bound, base,
                             get_backend(config.backend).is_encrypted)
        self.base_score = base
        self.base_margin = base_margin(config.objective, base)
        self.margin = np.full(self._margin_shape(len(self.y)), self.base_margin)
        if self.init_part is not None:
            self.continue_from(self.init_part)

    # setup ---------------------------------------------------------------
    def public_key_message(self):
        return self.mailbox.send("public_key", self.passives, (self.backend_spec, self.public_key))

    def prepare_tables(self) -> None:
        """Build the encryption tables of this party's workers now, during set-up."""
        if self.backend.is_encrypted:
            self.prepare_pool(self.backend_spec, self._secret_key)

    def set_mask_reserve(self, reserve) -> None:
        """Hand the key to this party's :class:`~ray_vfl.crypto.he.mask_reserve.MaskReserve` and order the first tree's masks."""
        reserve.set_key.remote(self.backend_spec, self._secret_key)
        self.masks = MaskSupply(reserve)
        if self.y is not None:
            self.masks.order(len(self.y))

    def set_peers(self, handles: dict[str, Any]) -> None:
        """The passive parties' actor handles: this party runs each tree's rounds with them."""
        self.peers = {p: handles[p] for p in self.passives}

    def collect_layouts(self) -> None:
        """Ask each passive party which of its histogram cells its histograms carry (see
        :meth:`PassiveParty.histogram_layout`)."""
        calls = [(p, h.histogram_layout.remote(self.name)) for p, h in self.peers.items()]
        for message in gather(calls, "histogram layouts", self.config.timeout_s):
            layout = self.mailbox.open(message, "histogram_layout", {"n_bins": self.n_bins,
                                                                     "encrypted": self.backend.is_encrypted})
            self.layouts[message.sender] = (int(layout["n_features"]), np.asarray(layout["cells"], dtype=np.int64),
                                            np.asarray(layout["derived"], dtype=np.int64))
            self.n_categories[message.sender] = np.asarray(layout["n_categories"], dtype=np.int64)

    def set_eval_labels(self, key: str) -> None:
        """Evaluate every tree on data set ``key`` (loaded with its labels from this party's store)."""
        label = self.labels[key]
        y = self._class_labels(label, f"the labels of eval set {key!r}") if self.multi else np.asarray(label, dtype=np.float64)
        self.eval[key] = {"y": y, "margin": np.full(self._margin_shape(len(label)), self.base_margin),
                          "w": self.weights.get(key)}
        self.history[key] = []

    # one tree --------------------------------------------------------------
    def grow_tree(self, tree: int, eval_keys: tuple[str, ...] = ()) -> dict[str, dict[str, float]]:
        """Grow boosting round ``tree`` with the passive parties (one tree, or one per class with
        ``one_output_per_tree``: every class's gradients from the round's margins); metrics on
        training and eval sets."""
        self.round_gh = None
        for k in range(self.per_round):
            rounds.grow_tree(self, tree * self.per_round + k)
            metrics = self.finish_tree()
        logs = {"train": metrics}
        for key in eval_keys:
            logs[key] = self.record_eval(key, self.predict_margin(key, tree, tree + 1))
        return logs

    def predict_margin(self, key: str, first_tree: int, end_tree: int) -> np.ndarray:
        """Federated margins of data set ``key`` over rounds ``[first_tree, end_tree)`` (no base margin;
        ``(n, K)`` for multi-class)."""
        return rounds.route(self, key, first_tree * self.per_round, end_tree * self.per_round)

    def margins_for_caller(self, key: str, end_tree: int, caller_key: bytes) -> Message:
        """The model's margins of data set ``key`` with its first ``end_tree`` rounds, base margin included,
        sealed to the caller (the key it made for this call)."""
        margins = self.predict_margin(key, 0, end_tree) + self.base_margin
        return self.mailbox.send_to_caller("margins", caller_key, np.asarray(margins, dtype=np.float64))

    def start_tree(self, tree: int):
        """Gradients of the current model, encrypted for the passive parties.

        The pairs are rounded to the encoding once (:func:`~ray_vfl.trees.kernels.encoded_gradients`):
        this party's own histograms, the passive parties' (encrypted or plain), the derived cells and
        the leaf weights all sum these values, as the centralized reference does.
        """
        self.tree = tree
        g, h = self._tree_gradients(tree)  # weighted by self.w (every class's pair of a row alike)
        self.g, self.h = g, h
        gh = self._encrypted_gh(tree, g, h)
        self.own_gh = self.plain.encrypt_gh(self._plain_pk, g, h)
        self.builder = TreeBuilder(self.outputs[0] if self.outputs else None)
        self.levels = RowLevels(len(g))
        self.own_hists: dict[int, Any] = {}
        self.prebuilt: dict[int, Any] = {}
        self.peer_hists: dict[str, dict[int, tuple[np.ndarray, np.ndarray]]] = {}
        self.children: list[tuple[int, int, int]] = []
        self.lefts: dict[int, np.ndarray] = {}
        return self.mailbox.send("encrypted_gh", self.passives, gh, tree, 0)

    @timed("crypto", when=lambda self: self.backend.is_encrypted)
    def _encrypted_gh(self, tree: int, g: np.ndarray, h: np.ndarray):
        """Enc(g, h) of every row, on the task pool when it has workers (premasked rows first)."""
        n = len(g)
        if self.backend.is_encrypted and self.pool.resource is not None and self.pool.workers > 1:
            chunks, covered = self.masks.take(n) if self.masks is not None else ([], 0)
            pieces = encryption_pieces(n, chunks, covered)
            # OU: rows in (g, h) order, so equal pairs share a piece whose task computes their message
            # part once (credit, 10 trees: 25,500 message parts instead of 86,200 with pieces in row
            # order); the ciphertexts go back to row order, and the masks are any rows'.
            sort = self.backend.reuses_message_powers and g.ndim == 1
            order = np.lexsort((h, g)) if sort else None
            eg, eh = (g[order], h[order]) if sort else (g, h)
            gh = self.backend.concat(self._encrypt_on_tasks(eg, eh, pieces))
            if sort:
                back = np.empty(n, dtype=np.int64)
                back[order] = np.arange(n)  # the inverse permutation, without a second sort
                gh = self.backend.take(gh, back)
            self.ops["encrypt_premasked"] += covered
            if self.masks is not None:
                if tree + 1 < self.config.n_trees * self.per_round:
                    self.masks.order(n)  # the next tree's, made while this one is built
                else:
                    self.masks.drop()  # the last tree: masks still to make would never be used
        else:
            eg, eh, pieces = g, h, [(0, n, None)]
            gh = self.backend.encrypt_gh(self._secret_key, g, h)
        self._repeats = (eg, eh, pieces)  # the pairs as encrypted, for count_repeated_pairs
        self.ops["encrypt"] += len(gh)
        return gh

    def count_repeated_pairs(self) -> None:
        """Count the rows whose message part the encryption reused (an operation count for the
        benchmark's floor); the rounds call it while the passive parties sum, off the critical path."""
        if self.backend.reuses_message_powers and self._repeats is not None and self._repeats[0].ndim == 1:
            self.ops["encrypt_repeated"] += repeated_pairs(*self._repeats)
        self._repeats = None

    def _encrypt_on_tasks(self, g: np.ndarray, h: np.ndarray, pieces: list) -> list:
        """The pieces encrypted by one task per worker, given longest first by cost (a row with its
        mask ready costs about a third); the encrypted pieces in row order."""
        assigned = self.pool.balance([(b - a) * (0.3 if ref is not None else 1.0) for a, b, ref in pieces])
        jobs = [[(g[pieces[i][0]:pieces[i][1]], h[pieces[i][0]:pieces[i][1]], pieces[i][2]) for i in a] for a in assigned]
        out: list = [None] * len(pieces)
        for a, arrays in zip(assigned, self.pool.map(encrypt_task, jobs, self.backend_spec, self._secret_key)):
            for i, arr in zip(a, arrays):
                out[i] = arr
        return out

    def receive(self, replies: list) -> list[tuple[str, list]]:
        """File the partitions among passive replies; return their histograms as ``(sender, ciphertexts)``."""
        hists = []
        for message in (m for reply in replies for m in reply):
            if message.kind == "partition":  # of the nodes its sender won at this level
                won = [order[0] for order in self.orders.get(message.sender, [])]
                self.lefts.update(unpack_partition(self.mailbox.open(
                    message, "partition", {"node_rows": {n: len(self.levels.rows_of(n)) for n in won}})))
            else:  # one built node per split of the level (the root before any), not yet advanced to
                hists.append((message.sender, self.mailbox.open(message, "encrypted_histograms", {
                    "backend": self.backend, "public_key": self.public_key,
                    "n_nodes": len(self.children) or len(self.levels.build),
                    "n_cells": len(self.layouts.get(message.sender, (0, ()))[1])}, senders=self.layouts)))
        return hists

    def advance(self) -> None:
        """Move rows to the children of the level's splits (every partition is in by now)."""
        if self.children:
            self.levels.advance(np.asarray(self.children), self.lefts)
            self.children, self.lefts = [], {}

    def prebuild_own_histograms(self) -> None:
        """While the passive parties work on the next level: this party's own histograms of the
        children it will build (the smaller) of the splits it made itself, whose rows it knows.

        The rows are the ones :class:`RowLevels` will give those children, in the same order,
        so :meth:`own_histograms` takes the very same sums.
        """
        mine = [self.levels.built_child(node, l_child, r_child, self.lefts[node])
                for node, l_child, r_child in self.children if self.owner_of[node] == self.name]
        built = build_histograms(self.plain, self._plain_pk, self.own_gh, self.fkeys, [rows for _, rows in mine], self.n_bins)
        self.prebuilt = {child: hist for (child, _), hist in zip(mine, built)}

    def own_histograms(self) -> None:
        """This party's own plaintext histograms, by the same kernel as the encrypted ones."""
        levels = self.levels
        if len(levels.open) == 0:
            return
        hists, self.prebuilt = self.prebuilt, {}
        todo = [n for n in levels.build.tolist() if n not in hists]
        hists.update(zip(todo, build_histograms(self.plain, self._plain_pk, self.own_gh, self.fkeys,
                                                [levels.rows_of(n) for n in todo], self.n_bins)))
        for node, parent, sibling in levels.derive.tolist():
            hists[node] = self.plain.sub(self._plain_pk, self.own_hists[parent], hists[sibling])
        self.own_hists = hists

    def builder_size(self) -> int:
        return len(self.builder.left)

    def finish_tree(self) -> dict[str, Any]:
        """Close the open nodes as leaves, update the margins, report training metrics."""
        size = self.builder_size()
        totals_g = node_sums(self.levels.node_of_row, self.g, size)
        totals_h = node_sums(self.levels.node_of_row, self.h, size)
        for node in self.levels.open.tolist():
            self._make_leaf(node, totals_g[node], totals_h[node])
        tree = self.builder.finish()
        self.trees.append(tree)
        if self.per_round > 1:  # one tree per class: it moves its class's margins
            self.margin[:, self.tree % self.per_round] += tree.weight[self.levels.node_of_row]
        else:
            self.margin = self.margin + tree.weight[self.levels.node_of_row]
        # AUC is left to the eval sets: ranking every training row after each tree costs more than the tree
        metrics = evaluate_weighted(self.config.objective, self.y, self.margin, self.sample_weight, with_auc=False)
        self.history.setdefault("train", []).append(metrics)
        return metrics

    def record_eval(self, key: str, margin_delta: np.ndarray) -> dict[str, float]:
        """Add one tree's margins to an eval set's and report its metrics."""
        state = self.eval[key]
        state["margin"] = state["margin"] + margin_delta
        metrics = evaluate_weighted(self.config.objective, state["y"], state["margin"], state["w"])
        self.history[key].append(metrics)
        return metrics

    def evaluate(self, key: str, n_trees: int) -> dict[str, float]:
        """Metrics of the first ``n_trees`` trees on data set ``key``, from this party's own labels."""
        if key not in self.labels:
            raise DataError("the evaluation data holds no labels at the label party; build it with label=")
        y = self._class_labels(self.labels[key], f"the labels of {key!r}") if self.multi else self.labels[key]
        margin = self.predict_margin(key, 0, n_trees) + self.base_margin
        return evaluate_weighted(self.config.objective, y, margin, self.weights.get(key))

    # model ----------------------------------------------------------------------
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
            classes=self.label_classes(),
        )
        return part

    def restore(self, part: dict[str, Any]) -> None:
        super().restore(part)
        self.order = list(part["order"])
        self.me = self.order.index(self.name)
        self.passives = [p for p in self.order if p != self.name]
        self.base_margin = float(part["base_margin"])
        self.trees = [Tree.from_dict(t) for t in part["trees"]]
        self.classes = np.asarray(part["classes"], dtype=np.float64) if part.get("classes") else None

    def truncate(self, n_trees: int) -> None:
        """Keep the first ``n_trees`` rounds' trees (early stopping's best iteration)."""
        self.trees = self.trees[:n_trees * self.per_round]
