"""The passive party: features only; sums encrypted gradients into its own bins."""

from __future__ import annotations

import numpy as np
import ray

from ..crypto import get_backend
from ..kernels import build_histograms, slot_of_rows
from ..runtime import TaskPool
from .messages import LevelPlan, Partition, RouteAnswer, RouteQuery, SplitOrders
from .party import Party
from .tree import goes_left

__all__ = ["PassiveParty"]


def _histogram_task(rows: np.ndarray, backend_name: str, public_key, gh, fkeys: np.ndarray, slot_of_row: np.ndarray, n_slots: int, n_bins: int):
    """One chunk of rows summed into encrypted histograms (runs as a pinned Ray task)."""
    mask = np.full(len(slot_of_row), -1, dtype=np.int64)
    mask[rows] = slot_of_row[rows]
    return build_histograms(get_backend(backend_name), public_key, gh, fkeys, mask, n_slots, n_bins)


class PassiveParty(Party):
    """A feature holder: never sees labels, plaintext gradients or other parties' splits.

    What it receives (the protocol's view table): the active party's public
    key, encrypted gradient pairs, the instance space of each open node, the
    splits it won (its own feature and bin) and, at prediction, which of its
    records each row reaches.
    """

    def set_public_key(self, message) -> None:
        self.backend_name, self.public_key = self.mailbox.open(message, "public_key")
        self.backend = get_backend(self.backend_name)

    def receive_gradients(self, message) -> None:
        self.tree = message.tree
        gh = self.mailbox.open(message, "encrypted_gh")
        self.gh = gh
        # Put once per tree: every histogram task reads it from the object store, zero-copy.
        self.gh_ref = ray.put(gh) if self._parallel(len(gh)) else gh
        self.hists: dict[int, object] = {}

    def _parallel(self, n_rows: int) -> bool:
        return self.backend.is_encrypted and self.pool.resource is not None and self.pool.workers > 1 and n_rows > 512

    def histograms(self, message):
        """Encrypted G/H histograms of every open node of this level."""
        plan: LevelPlan = self.mailbox.open(message, "level_plan")
        self.node_of_row = plan.node_of_row
        slot = slot_of_rows(plan.node_of_row, plan.build)
        n_slots = len(plan.build)
        rows = np.flatnonzero(slot >= 0)
        self.ops["add"] += len(rows) * self.n_features  # one ciphertext product per (row, feature)
        width = self.n_features * self.n_bins
        if n_slots and self._parallel(len(rows)):
            parts = self.pool.map(
                _histogram_task,
                [rows[s] for s in self.pool.chunks(len(rows), 2048)],
                self.backend_name, self.public_key, self.gh_ref, self.fkeys, slot, n_slots, self.n_bins,
            )
            built_hist = parts[0]
            for part in parts[1:]:
                built_hist = self.backend.add(self.public_key, built_hist, part)
        elif n_slots:
            built_hist = build_histograms(self.backend, self.public_key, self.gh, self.fkeys, slot, n_slots, self.n_bins)
        level_hist = {}
        for i, node in enumerate(plan.build.tolist()):
            level_hist[node] = self.backend.take(built_hist, np.arange(i * width, (i + 1) * width))
        for node, parent, sibling in plan.derive.tolist():
            level_hist[node] = self.backend.sub(self.public_key, self.hists[parent], level_hist[sibling])
        self.hists = level_hist  # parents of the next level
        self.ops["sub"] += len(plan.derive) * width
        out = self.backend.concat([level_hist[n] for n in plan.level.tolist()])
        out = self.backend.rerandomize(self.public_key, out)
        self.ops["rerandomize"] += len(out)
        return self.mailbox.send("encrypted_histograms", [message.sender], out, self.tree, message.depth)

    def apply_splits(self, message):
        """File the splits this party won; tell the active party which rows go left."""
        orders: SplitOrders = self.mailbox.open(message, "split_orders")
        bins = self.bins["train"]
        bits, counts = [], []
        for node, f, b, dl, rec in zip(orders.node, orders.feature, orders.bin, orders.default_left, orders.record):
            self.lookup.add(int(rec), int(f), int(b), self.binner.threshold(int(f), int(b)), bool(dl))
            rows = np.flatnonzero(self.node_of_row == node)
            bits.append(goes_left(bins[rows, f], None, b, dl, self.missing_bin))
            counts.append(len(rows))
        packed = np.packbits(np.concatenate(bits)) if bits else np.zeros(0, dtype=np.uint8)
        reply = Partition(orders.node, packed, np.asarray(counts, dtype=np.int64))
        return self.mailbox.send("partition", [message.sender], reply, self.tree, message.depth)

    def route(self, key: str, message):
        """Prediction: which way each queried row goes at this party's records."""
        query: RouteQuery = self.mailbox.open(message, "route_query")
        left = self.lookup.route(self.bins[key], query.row, query.record, self.missing_bin)
        return self.mailbox.send("route_answer", [message.sender], RouteAnswer(np.packbits(left), len(left)), message.tree, message.depth)
