"""A PIVODL client: its features, the labels of its own rows, its keys, and its share of the model.

Every client plays every role of the protocol (:mod:`ray_vfl.pivodl.protocol`): it is a *member*
that sums the gradients of its own labelled rows, a *source* of its own features
(:class:`~ray_vfl.pivodl.roles.SourceRole`), a *split client* of other sources' candidates
(:class:`~ray_vfl.pivodl.roles.SplitRole`), and a router of prediction rows
(:class:`~ray_vfl.pivodl.prediction.PredictionRole`). This module holds what all roles share:
the data (binned on the client's own node), the keys, the set-up exchanges, the secure totals of
step 2, and the tree skeleton every client keeps.

Multi-class (``num_class`` = ``K``): a client's labels are class indices ``0 .. K-1`` (it cannot learn
the classes the others hold, so the mapping happens before the data is split), its margins are
``(own rows, K)``, and every round it takes the softmax gradient pairs of its own rows at the round's
start; tree ``t`` fits column ``t % K`` of them and its released leaf weights move margin column ``t % K``.
"""

from __future__ import annotations

import secrets
from collections import Counter
from typing import Any

import numpy as np
import pandas as pd

from ..crypto import get_backend
from ..crypto.privacy.gaussian_dp import GaussianNoise
from ..crypto.privacy.secure_sum import PairwiseMasker
from ..data.binning import PartyBinner, check_encodable
from ..errors import DataError
from ..runtime.comm import Mailbox
from ..runtime.task_pool import TaskPool
from ..runtime.party import PartyActor, resolve_rows, resolve_weights
from ..trees.encoding import backend_options
from ..trees.kernels import base_margin, base_score_of, encoded_gradients
from ..trees.multiclass import check_class_indices, is_multiclass
from ..trees.weights import check_weighted_bound, row_weights, weighted_pairs
from .candidates import candidate_table, feature_spec
from .config import PIVODLConfig
from .messages import fetch
from .prediction import PredictionRole
from .roles import SourceRole, SplitRole

__all__ = ["Client"]


class KeepingMailbox(Mailbox):
    """A mailbox that also keeps every payload it opened, with its sender, kind, tree and depth: a client's
    received view, for audits (``record_view``; :meth:`Client.recorded_view`)."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.opened: list[dict[str, Any]] = []

    def open(self, message, kind, context=None, senders=None):
        payload = super().open(message, kind, context, senders)
        self.opened.append({"sender": message.sender, "kind": kind, "tree": message.tree, "depth": message.depth,
                            "payload": payload})
        return payload


class Client(PredictionRole, SplitRole, SourceRole, PartyActor):
    """One PIVODL client (see the module docstring). Built by :func:`ray_vfl.pivodl.protocol.train`."""

    def __init__(self, name: str, table: Any, categorical: list[str], config: PIVODLConfig, pool: TaskPool,
                 order: list[str], record_view: bool = False) -> None:
        self.reset(name, table, categorical, config, pool, order, record_view)

    def reset(self, name: str, table: Any, categorical: list[str], config: PIVODLConfig, pool: TaskPool,
              order: list[str], record_view: bool = False) -> None:
        self._start_party(name)
        self.config, self.pool, self.order = config, pool, list(order)
        # For audits: keep what this client received and decrypted (:meth:`recorded_view`).
        self.record_view, self.view_sums, self.totals_seen = record_view, [], []
        if record_view:
            self.mailbox = KeepingMailbox(name)
        self.others = [p for p in self.order if p != name]
        self.missing_bin, self.n_bins = config.max_bin, config.max_bin + 1
        self.binner = PartyBinner(config.max_bin, native_categorical=config.enable_categorical)
        self.ops: Counter[str] = Counter()
        # Randomness that hides something from other clients (candidate order, split clients, DP noise)
        # comes from this client's own OS entropy.
        self.rng = np.random.Generator(np.random.PCG64DXSM(secrets.randbits(128)))
        self.noise = GaussianNoise()
        self.masker = PairwiseMasker(name)
        self.trees: list[dict[int, tuple]] = []  # per tree: node -> ("split", source, record, left, right) / ("leaf", holder)
        self.released: list[dict[int, float]] = []  # per tree: leaf -> the weight its holder released
        self.leaf_of_row: list[np.ndarray] = []  # per tree: the leaf of every training row (partitions are public)
        self.held: dict[tuple[int, int], float] = {}  # (tree, leaf) -> kept weight, leaves this client holds
        # record -> (feature, bin, default_left, threshold), or (feature, bin, default_left, NaN, left bins) for a
        # native categorical split (its categories stay here)
        self.lookup: list[tuple] = []
        self.node_gains: dict[tuple[int, int], float] = {}  # (tree, split node) -> its gain, as every client learns it
        self.base_score: float | None = None
        self.per_round = config.trees_per_round  # trees per round: K for K classes, else 1
        self.round_gh: tuple[np.ndarray, np.ndarray] | None = None  # (own rows, K) pairs of the round (multi-class)
        frame, label = resolve_rows(table)
        if frame is None:  # a client loaded from a saved model: restore() fills it
            return
        check_encodable(frame, categorical, name)
        self.rows["train"] = self.binner.fit_transform(frame, categorical, party=name)
        self.n_rows = len(frame)
        label = np.full(self.n_rows, np.nan) if label is None else np.asarray(label, dtype=np.float64)
        self.own = np.flatnonzero(~np.isnan(label))
        self.y_own = label[self.own]
        weight = resolve_weights(table)  # sample weights of the rows it labels, held with its labels
        self.sw_own = None if weight is None else np.asarray(weight, dtype=np.float64)[self.own]
        self.w_own = row_weights(self.y_own, self.sw_own, config.scale_pos_weight)
        if config.objective == "binary:logistic" and not np.isin(self.y_own, (0.0, 1.0)).all():
            bad = self.y_own[~np.isin(self.y_own, (0.0, 1.0))][0]
            raise DataError(f"client {name!r}: binary:logistic needs labels 0 or 1, found {bad!r}; map the labels first "
                            "(for K classes labelled 0 .. K-1 at every client: objective='multi:softprob', num_class=K)")
        if is_multiclass(config.objective):
            check_class_indices(self.y_own, config.num_class, f"client {name!r}")
        self.backend_spec = (config.backend, backend_options(config.gradient_bound, self.n_rows))
        self.backend = get_backend(config.backend, **self.backend_spec[1])
        self.spec = feature_spec(self.rows["train"], self.missing_bin)
        self.candidates = candidate_table(self.spec, self.binner.n_categories(), config.max_cat_to_onehot)

    # set-up ---------------------------------------------------------------------------------------
    def make_keys(self) -> tuple:
        """Step 1: a key pair of the configured backend and a key-agreement key (for the masks of
        secure prediction); both public keys and the set of rows this client labels go to every other
        client."""
        self.pk, self.sk = self.backend.generate_keys(self.config.key_bits, allow_weak=self.config.allow_weak_keys)
        self.peer_pk = {self.name: self.pk}
        key = self.mailbox.send("pivodl_public_key", self.others, (self.backend_spec, self.pk))
        mask = self.mailbox.send("pivodl_mask_key", self.others, self.masker.public_key())
        labelled = np.zeros(self.n_rows, dtype=bool)
        labelled[self.own] = True
        rows = self.mailbox.send("pivodl_labelled_rows", self.others, np.packbits(labelled))
        return None, key, mask, rows

    def meet(self, keys: list, masks: list, labelled: list) -> None:
        """Take the others' public keys and labelled rows; refuse a row labelled twice or nowhere, and a
        client that labels between 1 and ``instance_threshold - 1`` rows (the root's totals would sum
        that few of its rows)."""
        ctx = {"backend_spec": self.backend_spec, "backend": self.backend,
               "key_bits": self.config.key_bits if self.backend.is_encrypted else 0}
        for msg in fetch(keys):
            self.peer_pk[msg.sender] = self.mailbox.open(msg, "pivodl_public_key", ctx, self.others)[1]
        self.masker.agree({m.sender: self.mailbox.open(m, "pivodl_mask_key", None, self.others) for m in fetch(masks)})
        owner = np.full(self.n_rows, -1)
        owner[self.own] = self.order.index(self.name)
        self.labelled_by: dict[str, np.ndarray] = {self.name: self.own}
        for msg in fetch(labelled):
            bits = self.mailbox.open(msg, "pivodl_labelled_rows", {"n_rows": self.n_rows}, self.others)
            rows = np.flatnonzero(np.unpackbits(bits, count=self.n_rows))
            twice = rows[owner[rows] >= 0]
            if twice.size:
                raise DataError(f"row {int(twice[0])} (and {twice.size - 1} more) is labelled at both "
                                f"{self.order[owner[twice[0]]]!r} and {msg.sender!r}; each row's label must be at "
                                "exactly one client")
            owner[rows] = self.order.index(msg.sender)
            self.labelled_by[msg.sender] = rows
        nowhere = np.flatnonzero(owner < 0)
        if nowhere.size:
            raise DataError(f"{nowhere.size} training row(s) (row {int(nowhere[0])} first) are labelled at no client; "
                            "drop them or give their labels to one client")
        thr = self.config.instance_threshold
        for p in self.order:
            if 0 < len(self.labelled_by[p]) < thr:
                raise DataError(f"client {p!r} labels {len(self.labelled_by[p])} row(s), fewer than instance_threshold "
                                f"{thr}: every tree's root totals would sum that few of its rows; give it no labels or "
                                f"at least {thr}, or lower instance_threshold")
        self.client_of_row = owner

    # step 2: sums of all clients, decrypted by a random encryption client --------------------------
    def total_share(self, what: str, encryptor: str, aggregator: str) -> tuple:
        """This client's sums for ``what`` (``"base"``: label sum and count; ``"root"``: the gradient
        sums of its labelled rows), encrypted under the encryption client's key, for the aggregator."""
        if what == "base":  # weighted: the weights' sum, and the labels' sum weighted by them
            sw = np.ones(len(self.y_own)) if self.sw_own is None else self.sw_own
            g, h = np.array([float((sw * self.y_own).sum())]), np.array([float(sw.sum())])
        else:
            g, h = np.array([self.g.sum()]), np.array([self.h.sum()])
        c = self.backend.encrypt_gh_sums(self.peer_pk[encryptor], g, h)
        self.ops["encrypt"] += len(c)
        if aggregator == self.name:
            self._share = c
            return None, None
        return None, self.mailbox.send("pivodl_total_share", [aggregator], c, len(self.trees), 0)

    def aggregate(self, shares: list, encryptor: str) -> tuple:
        """The aggregation client adds every client's ciphertexts (its own included) for the encryption client."""
        ctx = {"backend": self.backend, "public_key": self.peer_pk[encryptor]}
        total = self._share
        for msg in fetch(shares):
            total = self.backend.add(ctx["public_key"], total, self.mailbox.open(msg, "pivodl_total_share", ctx, self.others))
            self.ops["add"] += len(total)
        return None, self.mailbox.send("pivodl_total_sum", [encryptor], total, len(self.trees), 0)

    def open_total(self, message: Any, what: str) -> tuple:
        """The encryption client decrypts the sum and broadcasts it (``what``: base score or root totals)."""
        (msg,) = fetch([message])
        c = self.mailbox.open(msg, "pivodl_total_sum", {"backend": self.backend, "public_key": self.pk}, self.others)
        G, H = self.backend.decrypt_gh(self.sk, c)
        self.ops["decrypt"] += len(c)
        payload = np.array([G[0], H[0]])
        self._take_total(what, payload)
        return None, self.mailbox.send("pivodl_totals", self.others, payload, len(self.trees), 0)

    def take_total(self, message: Any, what: str) -> None:
        (msg,) = fetch([message])
        self._take_total(what, self.mailbox.open(msg, "pivodl_totals", None, self.others))

    def _take_total(self, what: str, values: np.ndarray) -> None:
        if self.record_view:
            self.totals_seen.append((what, float(values[0]), float(values[1])))
        if what == "base":
            self.start_margins(base_score_of(self.config.objective, np.array([values[0] / values[1]]),
                                             self.config.base_score))
        else:
            self.root_totals = (float(values[0]), float(values[1]))

    def start_margins(self, base_score: float | None = None) -> None:
        """Margins of this client's own rows at the base score: the label mean of step 2, or (multi-class,
        called by the driver with no exchange) ``base_score`` if set, else 0.5 for every class (XGBoost's)."""
        if base_score is None:
            base_score = base_score_of(self.config.objective, np.zeros(0), self.config.base_score)
        self.base_score = float(base_score)
        check_weighted_bound(self.config.objective, self.y_own, self.w_own, self.config.gradient_bound,
                             self.base_score, self.backend.is_encrypted)
        shape = (len(self.own), self.config.num_class) if is_multiclass(self.config.objective) else (len(self.own),)
        self.margin_own = np.full(shape, base_margin(self.config.objective, self.base_score))

    # trees --------------------------------------------------------------------------------------------
    def begin_tree(self) -> None:
        """Gradients of this client's own labelled rows at the current (released) margins; multi-class:
        column ``t % K`` of the softmax pairs taken at the round's start, for tree ``t``."""
        k = len(self.trees) % self.per_round
        if self.per_round == 1:
            self.g, self.h = weighted_pairs(*encoded_gradients(self.config.objective, self.y_own, self.margin_own),
                                            self.w_own)
        else:
            if k == 0 or self.round_gh is None:
                self.round_gh = weighted_pairs(*encoded_gradients(self.config.objective, self.y_own, self.margin_own),
                                               self.w_own)
            self.g = np.ascontiguousarray(self.round_gh[0][:, k])
            self.h = np.ascontiguousarray(self.round_gh[1][:, k])
        self.node_of_row = np.zeros(self.n_rows, dtype=np.int64)
        self.trees.append({})
        self.released.append({})
        self.scored: dict[tuple[str, int], tuple] = {}
        self._cut_sums: dict[tuple[str, int], list] = {}  # the partition cuts told to a source, their left sums
        self._pending: dict[int, tuple] = {}

    def finish_tree(self, leaf_messages: list) -> int:
        """Take the released leaf weights; move this client's margins by them (the partial-DP weights
        when DP is on: they are all a client ever learns of another's leaves)."""
        tree = len(self.trees) - 1
        for msg in fetch(leaf_messages):
            if msg.sender == self.name:  # its own leaves, taken when it released them
                continue
            p = self.mailbox.open(msg, "pivodl_leaf_weights", None, self.others)
            self._take_leaves(tree, msg.sender, p["node"], p["weight"])
        weights = self.released[tree]
        missing = set(np.unique(self.node_of_row).tolist()) - set(weights)
        if missing:
            raise DataError(f"client {self.name!r}: no leaf weight for node(s) {sorted(missing)} of tree {tree + 1}")
        self.leaf_of_row.append(self.node_of_row.copy())
        lookup = np.zeros(max(weights) + 1)
        lookup[list(weights)] = list(weights.values())
        self.margin_own = self.margin_own.copy()
        if self.per_round == 1:
            self.margin_own += lookup[self.node_of_row[self.own]]
        else:  # one tree per class: it moves its class's margins
            self.margin_own[:, tree % self.per_round] += lookup[self.node_of_row[self.own]]
        return len(self.trees[tree])

    def _take_leaves(self, tree: int, holder: str, nodes: np.ndarray, weights: np.ndarray) -> None:
        for node, w in zip(nodes.tolist(), weights.tolist()):
            self.trees[tree][node] = ("leaf", holder)
            self.released[tree][node] = float(w)

    # reporting ----------------------------------------------------------------------------------------
    def op_counts(self) -> dict[str, int]:
        return dict(self.ops)

    def base(self) -> float:
        """The base score (public among clients: the encryption client broadcast the label mean)."""
        return float(self.base_score)

    def released_weights(self) -> list[dict[int, float]]:
        """The leaf weights this client received (or released), per tree: its view of the leaves."""
        return [dict(t) for t in self.released]

    def recorded_view(self) -> dict[str, Any]:
        """What this client holds after training, for the attacks of :mod:`ray_vfl.pivodl.attack`: its own
        labelled rows, who labels which rows, the base score, the released leaf weights and every training
        row's leaf per tree (the public partitions), and -- with ``record_view`` -- every sum it decrypted
        as a split client, beside its own part of that sum (``sums``), the totals of step 2 it learnt
        (``totals``: ``(what, G, H)``, ``what`` being ``"base"`` or ``"root"``), and every payload it opened
        (``received``: sender, kind, tree, depth, payload)."""
        return {"party": self.name, "objective": self.config.objective, "n_rows": self.n_rows,
                "base_score": self.base_score, "own": self.own.copy(), "y_own": self.y_own.copy(), "labelled_by": dict(self.labelled_by),
                "released": self.released_weights(), "leaf_of_row": [leaf.copy() for leaf in self.leaf_of_row],
                "sums": list(self.view_sums), "totals": list(self.totals_seen),
                "received": list(getattr(self.mailbox, "opened", []))}

    def skeleton(self) -> list[dict[int, tuple]]:
        """The tree shapes as every client knows them (who owns each split, who holds each leaf)."""
        return [dict(t) for t in self.trees]

    def encode_rows(self, frame: pd.DataFrame) -> np.ndarray:
        return self.binner.transform(frame, party=self.name)

    def unseen_categories(self) -> dict[str, int]:
        return {c: n for c, n in self.binner.unseen_counts.items() if n}

    def truncate(self, n_rounds: int) -> None:
        """Keep the trees of the first ``n_rounds`` rounds (early stopping's best iteration; a round is
        one tree, or ``K`` with ``K`` classes)."""
        n_trees = n_rounds * self.per_round
        self.round_gh = None
        del self.trees[n_trees:], self.released[n_trees:], self.leaf_of_row[n_trees:]
        self.held = {k: v for k, v in self.held.items() if k[0] < n_trees}
        self.node_gains = {k: v for k, v in self.node_gains.items() if k[0] < n_trees}

    def importance_stats(self) -> dict[str, Any]:
        """Feature importances from what this client already knows (no message of its own): every split's
        gain (the best gains every client is told) and source (the tree skeleton), and, for its own splits,
        the feature (its lookup table). Returns the ``(features, 3)`` split statistics of its own features
        (total gain, total cover, splits; the cover is NaN: a node's hessian sum is known to its split
        client only) and per client its splits' ``total_gain`` and ``weight`` (their gain and number: the
        other clients' features are unknown here, so no per-feature mean)."""
        from ..trees.importance import split_stats

        n_features = len(self.binner.feature_names)
        own_rows, parties = [], {p: {"total_gain": 0.0, "weight": 0.0} for p in self.order}
        for t, tree in enumerate(self.trees):
            for node, entry in tree.items():
                if entry[0] == "split":
                    gain = self.node_gains.get((t, node), 0.0)
                    parties[entry[1]]["total_gain"] += gain
                    parties[entry[1]]["weight"] += 1.0
                    if entry[1] == self.name:
                        own_rows.append((self.lookup[int(entry[2])][0], gain))
        rows = np.asarray(own_rows, dtype=np.float64).reshape(-1, 2)
        own = split_stats(rows[:, 0], rows[:, 1], np.zeros(len(rows)), n_features)
        own[:, 1] = np.nan
        return {"own": own, "parties": parties}

    def model_part(self) -> dict[str, Any]:
        return {"party": self.name, "binner": self.binner.to_dict(), "lookup": [list(r) for r in self.lookup],
                "trees": [{str(k): list(v) for k, v in t.items()} for t in self.trees],
                "held": [[t, n, w] for (t, n), w in self.held.items()], "base_score": self.base_score,
                "node_gains": [[t, n, g] for (t, n), g in self.node_gains.items()]}

    def training_state(self) -> dict[str, Any]:
        """The model part plus what continuing needs: released weights, leaf of every training row, margins."""
        return {**self.model_part(), "released": [{str(k): v for k, v in t.items()} for t in self.released],
                "leaf_of_row": [leaf.tolist() for leaf in self.leaf_of_row], "margin_own": self.margin_own.tolist()}

    def resume_training(self, state: dict[str, Any]) -> None:
        """Take up a checkpoint after checking that the training data bin as then."""
        import json

        if json.loads(json.dumps(self.binner.to_dict())) != state["binner"]:
            raise DataError(f"client {self.name!r}: its training data bin differently from the checkpoint's; resume "
                            "with the same data, or start with a new checkpoint_dir")
        if len(state["margin_own"]) != len(self.own):
            raise DataError(f"client {self.name!r} labels {len(self.own)} rows, the checkpoint {len(state['margin_own'])}; "
                            "resume with the same data")
        rows = self.rows
        self.restore(state)
        self.rows = rows
        self.released = [{int(k): float(v) for k, v in t.items()} for t in state["released"]]
        self.leaf_of_row = [np.asarray(leaf, dtype=np.int64) for leaf in state["leaf_of_row"]]
        self.margin_own = np.asarray(state["margin_own"], dtype=np.float64)
        self.round_gh = None

    def mask_key(self) -> tuple:
        """A fresh key-agreement key for every other client (a loaded model's clients agree anew)."""
        return None, self.mailbox.send("pivodl_mask_key", self.others, self.masker.public_key())

    def agree(self, messages: list) -> None:
        self.masker.agree({m.sender: self.mailbox.open(m, "pivodl_mask_key", None, self.others) for m in fetch(messages)})

    def restore(self, part: dict[str, Any]) -> None:
        self.binner = PartyBinner.from_dict(part["binner"])
        self.missing_bin, self.n_bins = self.binner.max_bin, self.binner.max_bin + 1
        self.lookup = [(int(r[0]), int(r[1]), bool(r[2]), float(r[3]), *([[int(c) for c in r[4]]] if len(r) > 4 else []))
                       for r in part["lookup"]]
        self.trees = [{int(k): tuple(v) for k, v in t.items()} for t in part["trees"]]
        self.held = {(int(t), int(n)): float(w) for t, n, w in part["held"]}
        self.node_gains = {(int(t), int(n)): float(g) for t, n, g in part.get("node_gains", [])}
        self.base_score = None if part["base_score"] is None else float(part["base_score"])
        self.rows = {}
