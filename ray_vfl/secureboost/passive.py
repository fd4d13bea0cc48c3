"""The passive party: features only; sums encrypted gradients into its own bins."""

from __future__ import annotations

import numpy as np
import ray

from ..crypto import get_backend
from ..kernels import build_histograms, goes_left, slot_of_rows
from .messages import LevelPlan, Partition, RouteAnswer, RouteQuery, SplitOrders
from .party import Party

__all__ = ["PassiveParty"]


def _histogram_task(rows: np.ndarray, spec: tuple, public_key, gh, fkeys: np.ndarray, slot_of_row: np.ndarray, n_slots: int, n_bins: int):
    """One chunk of rows summed into encrypted histograms (runs as a pinned Ray task)."""
    mask = np.full(len(slot_of_row), -1, dtype=np.int64)
    mask[rows] = slot_of_row[rows]
    return build_histograms(get_backend(spec[0], **spec[1]), public_key, gh, fkeys, mask, n_slots, n_bins)


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
        self.backend_spec, self.public_key = self.mailbox.open(message, "public_key")
        self.backend = get_backend(self.backend_spec[0], **self.backend_spec[1])

    def receive_gradients(self, message) -> None:
        self.tree = message.tree
        gh = self.mailbox.open(message, "encrypted_gh")
        self.gh = gh
        # Put once per tree: every histogram task reads it from the object store, zero-copy.
        self.gh_ref = ray.put(gh) if self._parallel(len(gh)) else gh
        self.hists: dict[int, object] = {}

    def _parallel(self, n_items: int, min_items: int = 512) -> bool:
        """Fan out over the task pool only for real crypto on enough items to pay a task's start."""
        return self.backend.is_encrypted and self.pool.resource is not None and self.pool.workers > 1 and n_items > min_items

    def _fan_out(self, fn, items: list, *shared) -> list:
        """``fn`` over groups of ``items`` on the task pool (or in-process), results in order."""
        if not items:
            return []
        groups = [items[s] for s in self.pool.chunks(len(items), 1)]
        if len(groups) > 1 and self._parallel(len(items), 1):
            return [r for part in self.pool.map(fn, groups, *shared) for r in part]
        return fn(items, *shared)

    def histograms(self, message):
        """Encrypted, compressed, re-randomised G/H histograms of every open node of this level.

        Built nodes are summed from rows and compressed (many bin sums per
        ciphertext); each sibling is derived by subtracting compressed
        histograms (``parent - built``), which needs no compression of its own.
        """
        plan: LevelPlan = self.mailbox.open(message, "level_plan")
        self.node_of_row = plan.node_of_row
        slot = slot_of_rows(plan.node_of_row, plan.build)
        n_slots = len(plan.build)
        rows = np.flatnonzero(slot >= 0)
        width = self.n_features * self.n_bins
        self.ops["add"] += len(rows) * self.n_features  # one ciphertext product per (row, feature)
        built = []
        if n_slots and self._parallel(len(rows)):
            parts = self.pool.map(
                _histogram_task, [rows[s] for s in self.pool.chunks(len(rows), 2048)],
                self.backend_spec, self.public_key, self.gh_ref, self.fkeys, slot, n_slots, self.n_bins,
            )
            total = parts[0]
            for part in parts[1:]:
                total = self.backend.add(self.public_key, total, part)
        elif n_slots:
            total = build_histograms(self.backend, self.public_key, self.gh, self.fkeys, slot, n_slots, self.n_bins)
        if n_slots:
            built = [self.backend.take(total, np.arange(i * width, (i + 1) * width)) for i in range(n_slots)]
            if self.backend.slots_per_ciphertext(self.public_key) > 1:
                self.ops["compress"] += n_slots * width
            built = self._fan_out(_compress_task, built, self.backend_spec, self.public_key)
        level = dict(zip(plan.build.tolist(), built))
        for node, parent, sibling in plan.derive.tolist():
            level[node] = self.backend.sub(self.public_key, self.hists[parent], level[sibling])
            self.ops["sub"] += len(level[node])
        self.hists = level  # parents of the next level
        sealed = self._fan_out(_rerandomize_task, [level[n] for n in plan.level.tolist()], self.backend_spec, self.public_key)
        self.ops["rerandomize"] += sum(len(c) for c in sealed)
        return self.mailbox.send("encrypted_histograms", [message.sender], sealed, self.tree, message.depth)

    def apply_splits(self, message):
        """File the splits this party won; tell the active party which rows go left."""
        orders: SplitOrders = self.mailbox.open(message, "split_orders")
        bins = self.bins["train"]
        bits, counts = [], []
        for node, f, b, dl, rec in zip(orders.node, orders.feature, orders.bin, orders.default_left, orders.record):
            self.lookup.add(int(rec), int(f), int(b), self.binner.threshold(int(f), int(b)), bool(dl))
            rows = np.flatnonzero(self.node_of_row == node)
            bits.append(goes_left(bins[rows, f], b, dl, self.missing_bin))
            counts.append(len(rows))
        packed = np.packbits(np.concatenate(bits)) if bits else np.zeros(0, dtype=np.uint8)
        reply = Partition(orders.node, packed, np.asarray(counts, dtype=np.int64))
        return self.mailbox.send("partition", [message.sender], reply, self.tree, message.depth)

    def route(self, key: str, message):
        """Prediction: which way each queried row goes at this party's records."""
        query: RouteQuery = self.mailbox.open(message, "route_query")
        left = self.lookup.route(self.bins[key], query.row, query.record, self.missing_bin)
        return self.mailbox.send("route_answer", [message.sender], RouteAnswer(np.packbits(left), len(left)), message.tree, message.depth)
