"""The passive party: features only; sums encrypted gradients into its own bins."""

from __future__ import annotations

import uuid

import numpy as np
import ray

from ..crypto import get_backend
from ..runtime.timeline import timed
from ..trees.categorical import goes_left_of_set
from ..trees.feature_groups import FeatureGroups, plan_feature_groups
from ..trees.kernels import build_histograms, goes_left
from ..trees.multiclass import pairs_per_row
from .label_crypto import backend_options
from .levels import RowLevels, pack_partition, unpack_partition
from .messages import LevelStep, NodeHistograms, RouteAnswer, RouteQuery, SplitOrders
from .party import Party

__all__ = ["PassiveParty"]


def _histogram_task(rows_of_nodes: list, spec: tuple, public_key, gh, fkeys: np.ndarray, n_bins: int,
                    groups: FeatureGroups | None, share: tuple | None = None) -> tuple[list, int]:
    """A share of every node's rows summed into encrypted histograms, and the ciphertext products
    spent (runs as a pinned Ray task, or in-process). ``share`` names the tree's gradient pairs, so
    that the tasks a worker runs in one tree decode each row's ciphertext once."""
    backend = get_backend(spec[0], **spec[1])
    gh = backend.read_lazily(public_key, gh, share)
    if groups is not None:
        return groups.histograms(backend, public_key, gh, fkeys, rows_of_nodes, n_bins)
    products = sum(int(np.count_nonzero(fkeys[r] >= 0)) for r in rows_of_nodes)  # one per summed (row, feature)
    return build_histograms(backend, public_key, gh, fkeys, rows_of_nodes, n_bins), products


def _nodes_task(job: list, spec: tuple, public_key, gh, fkeys: np.ndarray, n_bins: int, groups: FeatureGroups | None,
                per: int, share: tuple | None = None) -> tuple[list, int]:
    """Whole nodes ``(rows, occupied layout cells)`` summed, cut to their cells and compressed in one
    pinned task; returns the arrays and the ciphertext products spent."""
    backend = get_backend(spec[0], **spec[1])
    hists, products = _histogram_task([rows for rows, _ in job], spec, public_key, gh, fkeys, n_bins, groups, share)
    kept = [backend.take(h, cells) for h, (_, cells) in zip(hists, job)]
    return ([backend.compress_gh(public_key, h) for h in kept] if per > 1 else kept), products


def _compress_task(hists: list, spec: tuple, public_key) -> list:
    """Pack each node histogram's bin sums into few ciphertexts (pinned task)."""
    backend = get_backend(spec[0], **spec[1])
    return [backend.compress_gh(public_key, h) for h in hists]


def _rerandomize_task(hists: list, spec: tuple, public_key) -> list:
    backend = get_backend(spec[0], **spec[1])
    return [backend.rerandomize(public_key, h) for h in hists]


class PassiveParty(Party):
    """A feature holder: never sees labels, plaintext gradients or other parties' splits.

    What it receives (the protocol's view table): the active party's public
    key, encrypted gradient pairs, the instance space of each open node, the
    splits it won (its own feature and bin) and, at prediction, which of its
    records each row reaches.
    """

    def set_public_key(self, message) -> None:
        # the options are the ones this party's own config gives for its rows: it checks them, not trusts them
        spec = (self.config.backend, backend_options(self.config.gradient_bound,
                                                     None if self.fkeys is None else len(self.fkeys),
                                                     pairs_per_row(self.config)))
        self.backend_spec, self.public_key = self.mailbox.open(message, "public_key", {
            "backend_spec": spec, "backend": get_backend(spec[0], **spec[1]), "key_bits": self.config.key_bits})
        self.backend = get_backend(self.backend_spec[0], **self.backend_spec[1])
        self.groups = None
        if self.backend.is_encrypted:  # re-randomisation tables of this actor and its workers, during set-up
            self.backend.prepare(self.public_key, encrypt=False)
            self.prepare_pool(self.backend_spec, self.public_key, encrypt=False)
        if self.backend.is_encrypted and self.config.group_features and self.fkeys is not None and self.n_features > 1:
            # this party's own choice, from its own bins; the histograms it sends are the same sums
            self.groups = plan_feature_groups(self.bins["train"], self.n_bins, self.config.max_depth,
                                              skip_bins=self.derived % self.n_bins)
            if not self.groups.multi:
                self.groups = None

    def reset(self, name, table, categorical, config, pool, init_part=None) -> None:
        super().reset(name, table, categorical, config, pool, init_part)
        width = self.n_features * self.n_bins
        self.fkeys_ref = None
        self.groups_ref = None
        self.groups: FeatureGroups | None = None
        self.cells = None
        self.derived = np.zeros(0, dtype=np.int64)
        self.sum_keys = self.fkeys  # the keys this party sums: fkeys without the derived cells
        if self.fkeys is None:
            return
        counts = np.bincount(self.fkeys.ravel(), minlength=width)
        self.cells = np.flatnonzero(counts > 0)
        if get_backend(config.backend).is_encrypted:
            modal = counts.reshape(self.n_features, self.n_bins).argmax(axis=1)
            self.derived = np.arange(self.n_features, dtype=np.int64) * self.n_bins + modal
            self.sum_keys = np.where(self.bins["train"] == modal, -1, self.fkeys)
            self.cells = np.setdiff1d(self.cells, self.derived)

    def histogram_layout(self, active: str):
        """Tell the active party which histogram cells (feature, bin) hold any training row, and
        which cell of each feature it derives itself (with ciphertexts).

        Empty cells are empty in every node of every tree, so they are never
        compressed, re-randomised, sent or decrypted. The derived cell of a
        feature is its bin holding the most training rows: in every node the
        active party computes its sums as the node's gradient sums (it knows
        the node's rows and their gradients) minus the feature's other cells,
        so that cell is never summed either, nor its rows added into it.

        The active party learns nothing new. The root histogram shows the
        same empty cells (their hessian sums are zero), and in the first
        tree every row has the same hessian (the base score's), so the root's
        hessian sums are the bins' row counts, whose largest is the derived
        cell. The derived sums are the ones decryption would have given.
        """
        layout = {"n_features": self.n_features, "cells": self.cells.astype(np.int32),
                  "derived": self.derived.astype(np.int32), "n_categories": self.binner.n_categories().astype(np.int32)}
        return self.mailbox.send("histogram_layout", [active], layout)

    def begin_tree(self, message) -> list:
        """Take a tree's encrypted gradient pairs; reply with the root's encrypted histograms."""
        self.tree = message.tree
        gh = self.mailbox.open(message, "encrypted_gh", {"backend": self.backend, "public_key": self.public_key,
                                                          "n_rows": len(self.fkeys)})
        self.gh = self.backend.read_lazily(self.public_key, gh)  # each row decoded once per tree, when first summed
        self.gh_share = (self.name, uuid.uuid4().hex)  # the same for this tree's pinned tasks
        # Put once per tree: every histogram task reads it from the object store, zero-copy.
        self.gh_ref = ray.put(gh) if self._parallel(len(gh)) else gh
        self.levels = RowLevels(len(gh))
        self.depth = 0
        self.lefts: dict[int, np.ndarray] = {}
        self.reply_to = message.sender
        return [self._histograms()]

    def next_level(self, message) -> list:
        """File the splits this party won and (when told to advance) move rows to the children.

        Replies with the partition of the nodes this party split (if it won
        any) and, after advancing, the next level's encrypted histograms.
        """
        levels = self.levels
        step: LevelStep = self.mailbox.open(message, "level_step", {
            "open_nodes": levels.open, "node_rows": {n: len(levels.rows_of(n)) for n in levels.open.tolist()},
            "n_features": self.n_features, "n_bins": self.n_bins, "next_record": len(self.lookup),
            "max_nodes": 2 ** (self.config.max_depth + 1) - 1, "known": list(self.lefts),
            "n_categories": self.binner.n_categories()})
        replies = []
        if len(step.orders.node):
            own = self._apply_orders(step.orders)
            self.lefts.update(own)
            replies.append(self.mailbox.send("partition", [message.sender], pack_partition(list(own), list(own.values())),
                                             self.tree, message.depth))
        self.lefts.update(unpack_partition(step.partition))
        if step.advance:
            self.levels.advance(step.children, self.lefts)
            self.lefts = {}
            self.depth = message.depth + 1
            replies.append(self._histograms())
        return replies

    def _parallel(self, n_items: int, min_items: int = 512) -> bool:
        """Fan out over the task pool only for real crypto on enough items to pay a task's start."""
        return self.backend.is_encrypted and self.pool.resource is not None and self.pool.workers > 1 and n_items > min_items

    def _fan_out(self, fn, items: list, *shared, min_work: int = 128) -> list:
        """``fn`` over groups of ``items`` (arrays) on the task pool, or in-process when they hold
        fewer than ``min_work`` entries (a task's start would cost more); results in order."""
        if not items:
            return []
        groups = [items[s] for s in self.pool.chunks(len(items), 1)]
        if len(groups) > 1 and self._parallel(sum(len(i) for i in items), min_work):
            return [r for part in self.pool.map(fn, groups, *shared) for r in part]
        return fn(items, *shared)

    def _histograms(self):
        """Encrypted, compressed, re-randomised G/H histograms of the nodes built from rows at this level.

        Those are the root, then the smaller child of every split; the
        active party derives each sibling from the parent histogram it
        decrypted one level up (``parent - built``), so siblings are never
        summed, compressed, sent or decrypted.
        """
        return self.mailbox.send("encrypted_histograms", [self.reply_to], self._sealed_histograms(), self.tree, self.depth)

    @timed("crypto", when=lambda self: self.backend.is_encrypted)
    def _sealed_histograms(self) -> NodeHistograms:
        """The histograms of :meth:`_histograms`, summed, compressed and re-randomised."""
        levels = self.levels
        rows_of_nodes = [levels.rows_of(n) for n in levels.build.tolist()]
        occupied = self._occupied_cells(rows_of_nodes)
        per = self.backend.slots_per_ciphertext(self.public_key)
        if len(rows_of_nodes) > 1 and self._parallel(sum(len(r) for r in rows_of_nodes)):
            built = self._nodes_on_tasks(rows_of_nodes, occupied, per)
        else:
            built = self._compress(self._summed(rows_of_nodes, occupied), per)
        if per > 1:
            self.ops["compress"] += int(occupied.sum())
        sealed = self._seal(built)
        self.ops["rerandomize"] += sum(len(c) for c in sealed)
        return NodeHistograms(np.packbits(occupied), sealed)

    def _shared_refs(self) -> tuple:
        """Bins and feature groups in the object store (once per fit: they never change) and this tree's Enc(gh)."""
        if self.fkeys_ref is None:
            self.fkeys_ref = ray.put(self.sum_keys)
            self.groups_ref = None if self.groups is None else ray.put(self.groups)
        return self.gh_ref, self.fkeys_ref, self.groups_ref

    def _summed(self, rows_of_nodes: list, occupied: np.ndarray) -> list:
        """Every node's histogram over its occupied cells, not yet compressed. With enough rows, task
        ``i`` of the pool sums the ``i``-th share of every node's rows and the shares are then added."""
        n_rows = sum(len(r) for r in rows_of_nodes)
        if not self._parallel(n_rows):
            built, products = _histogram_task(rows_of_nodes, self.backend_spec, self.public_key, self.gh, self.sum_keys,
                                              self.n_bins, self.groups)
            self.ops["add"] += products
            return self._keep(built, occupied)
        shares = self.pool.chunks(n_rows, 2048)
        tasks = [[r[round(i * len(r) / len(shares)):round((i + 1) * len(r) / len(shares))] for r in rows_of_nodes]
                 for i in range(len(shares))]
        gh_ref, fkeys_ref, groups_ref = self._shared_refs()
        parts = self.pool.map(_histogram_task, tasks, self.backend_spec, self.public_key, gh_ref, fkeys_ref, self.n_bins,
                              groups_ref, self.gh_share)
        shares_built = [self._keep(part, occupied) for part, _ in parts]
        built = shares_built[0]
        for part in shares_built[1:]:  # the shares' sums added, cell by cell
            built = [self.backend.add(self.public_key, a, b) for a, b in zip(built, part)]
        self.ops["add"] += sum(p for _, p in parts) + (len(parts) - 1) * int(occupied.sum())
        return built

    def _nodes_on_tasks(self, rows_of_nodes: list, occupied: np.ndarray, per: int) -> list:
        """Levels with several built nodes: each task sums and compresses whole nodes, so no shares
        are added and a level takes one round of tasks. Nodes go to tasks longest first, by their
        estimated cost (compressing a cell costs about 60 products)."""
        per_row = len(self.groups.groups) if self.groups is not None else self.n_features
        cost = occupied.sum(axis=1) * 60.0 + np.array([len(r) for r in rows_of_nodes]) * per_row
        assigned = self.pool.balance(cost.tolist())
        jobs = [[(rows_of_nodes[i], self.cells[occupied[i]]) for i in a] for a in assigned]
        gh_ref, fkeys_ref, groups_ref = self._shared_refs()
        results = self.pool.map(_nodes_task, jobs, self.backend_spec, self.public_key, gh_ref, fkeys_ref, self.n_bins,
                                groups_ref, per, self.gh_share)
        built: list = [None] * len(rows_of_nodes)
        for a, (arrays, products) in zip(assigned, results):
            for i, arr in zip(a, arrays):
                built[i] = arr
            self.ops["add"] += products
        return built

    def _occupied_cells(self, rows_of_nodes: list) -> np.ndarray:
        """``(nodes, layout cells)`` bool: which cells of the layout any of each node's rows fall in.

        Only those are compressed, sent and decrypted. The active party learns
        nothing new: the other cells' hessian sums are zero, which it would
        read from their decryption.
        """
        if not self.backend.is_encrypted:  # plaintext cells cost nothing to send: skip the count
            return np.ones((len(rows_of_nodes), len(self.cells)), dtype=bool)
        width = self.n_features * self.n_bins
        out = np.empty((len(rows_of_nodes), len(self.cells)), dtype=bool)
        for i, rows in enumerate(rows_of_nodes):
            out[i] = (np.bincount(self.fkeys[rows].ravel(), minlength=width) > 0)[self.cells]
        return out

    def _keep(self, hists: list, occupied: np.ndarray) -> list:
        """Each node's histogram reduced to its occupied layout cells."""
        return [self.backend.take(h, self.cells[occ]) for h, occ in zip(hists, occupied)]

    def _seal(self, arrays: list) -> list:
        """Re-randomise what leaves this party, with fresh randomness, on the task pool when worth it.

        A passive party seals a few dozen to a few hundred ciphertexts per level.
        Making their masks ahead of time in a reserve actor (as the label party
        does for its encryptions) was measured slower: with 3 passive parties on
        2 cores, 10 OU trees took 22.3-23.4 s without the passive reserves against
        23.1-24.2 s with them (their chunk orders and idle processes cost more CPU
        than the masks save)."""
        return self._fan_out(_rerandomize_task, arrays, self.backend_spec, self.public_key, min_work=256)

    def _compress(self, hists: list, per: int) -> list:
        """Compress every node's histogram; long ones are cut into pieces of whole ciphertexts
        (multiples of ``per`` entries) so that even the root's single histogram uses every worker."""
        total = sum(len(h) for h in hists)
        if not self._parallel(total, 128) or self.pool.workers <= 1:
            return self._fan_out(_compress_task, hists, self.backend_spec, self.public_key)
        step = per * max(1, -(-total // (self.pool.workers * per)))
        cuts = [self.backend.chunk(h, step) for h in hists]
        done = self._fan_out(_compress_task, [piece for cut in cuts for piece in cut], self.backend_spec, self.public_key)
        out, at = [], 0
        for cut in cuts:
            out.append(self.backend.concat(done[at:at + len(cut)]))
            at += len(cut)
        return out

    def _apply_orders(self, orders: SplitOrders) -> dict[int, np.ndarray]:
        """File the won splits in the lookup table; which rows of each node go left."""
        bins = self.bins["train"]
        lefts = {}
        sets = np.unpackbits(orders.left_bins, axis=1, count=self.n_bins - 1).astype(bool)
        for node, f, b, dl, rec, left_set in zip(orders.node.tolist(), orders.feature.tolist(), orders.bin.tolist(),
                                                 orders.default_left.tolist(), orders.record.tolist(), sets):
            column = bins[self.levels.rows_of(node), f]
            if left_set.any():  # a categorical split: the set is the split, the categories stay here
                self.lookup.add(rec, f, b, np.nan, dl, np.flatnonzero(left_set))
                lefts[node] = goes_left_of_set(column, left_set, dl, self.missing_bin)
            else:
                self.lookup.add(rec, f, b, self.binner.threshold(f, b), dl)
                lefts[node] = goes_left(column, b, dl, self.missing_bin)
        return lefts

    def route(self, key: str, message):
        """Prediction: which way each queried row goes at this party's records."""
        query: RouteQuery = self.mailbox.open(message, "route_query", {"n_rows": len(self.bins[key]),
                                                                       "n_records": len(self.lookup)})
        left = self.lookup.route(self.bins[key], query.row, query.record, self.missing_bin)
        return self.mailbox.send("route_answer", [message.sender], RouteAnswer(np.packbits(left), len(left)), message.tree, message.depth)
