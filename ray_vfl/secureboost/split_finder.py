"""The label party's split finding: it decrypts each level's histograms, puts every party's cells
back in place (derived cells and siblings computed from sums it holds), scores every candidate of
every party's features (:func:`~ray_vfl.trees.kernels.best_splits`, native categorical splits
included) and turns the winners into its own splits or orders for their owners (:class:`LevelStep`).
A mixin of :class:`~ray_vfl.secureboost.active.ActiveParty`, whose state it reads."""

from __future__ import annotations

import numpy as np

from ..errors import VFLError
from ..runtime.timeline import span_if
from ..trees.categorical import CategoricalFeatures, goes_left_of_set
from ..trees.kernels import best_splits, goes_left, leaf_weights
from .label_crypto import decrypt_sealed
from .levels import pack_partition
from .messages import LevelStep, SplitOrders
from .multiclass_state import node_sums

__all__ = ["SplitFinder"]


class SplitFinder:
    """Choosing a level's splits at the label party (see the module docstring)."""

    def _built_totals(self) -> tuple[np.ndarray, np.ndarray]:
        """The gradient and hessian sums of each node built at this level. The pairs are the encoded
        ones, so a derived cell is the very sum its decryption would give: float sums of such values
        are exact while they stay below ``2**21`` (credit: below 24,000)."""
        build = self.levels.build
        return tuple(node_sums(self.levels.node_of_row, v, int(build.max()) + 1)[build] for v in (self.g, self.h))

    def _peer_level(self, sender: str, occupied: np.ndarray, G: np.ndarray, H: np.ndarray,
                    totals: tuple[np.ndarray, np.ndarray] | None) -> dict[int, tuple[np.ndarray, np.ndarray]]:
        """A passive party's histograms of every open node: the built ones as decrypted (their occupied
        cells put back in place, each feature's derived cell as the node's sum minus the feature's other
        cells), each sibling as its parent's (kept from one level up) minus the built one."""
        n_features, cells, derived = self.layouts[sender]
        build = self.levels.build.tolist()
        if occupied.shape != (len(build), len(cells)) or int(occupied.sum()) != len(G):
            raise VFLError(f"party {sender!r} sent histograms of {occupied.shape[0]} nodes over {int(occupied.sum())} "
                                f"cells and {len(G)} entries; expected {len(build)} nodes")
        shape = (len(build), n_features * self.n_bins, *self.outputs)  # multi-output trees: K sums per cell
        full_g, full_h = np.zeros(shape), np.zeros(shape)
        if occupied.all():
            full_g[:, cells], full_h[:, cells] = G.reshape(len(build), -1, *self.outputs), H.reshape(len(build), -1, *self.outputs)
        else:
            node_of_entry, cell_of_entry = np.nonzero(occupied)
            full_g[node_of_entry, cells[cell_of_entry]] = G
            full_h[node_of_entry, cells[cell_of_entry]] = H
        if len(derived) and len(build):
            for full, total in zip((full_g, full_h), totals):  # derived cells hold 0 until here
                full[:, derived] = total[:, None] - full.reshape(len(build), n_features, self.n_bins, *self.outputs).sum(axis=2)
        level = {node: (full_g[i], full_h[i]) for i, node in enumerate(build)}
        parents = self.peer_hists.get(sender, {})
        for node, parent, sibling in self.levels.derive.tolist():
            level[node] = (parents[parent][0] - level[sibling][0], parents[parent][1] - level[sibling][1])
        self.peer_hists[sender] = level
        return level

    def choose_splits(self, depth: int, passive_hists: list[tuple[str, list]]) -> bool:
        """Decrypt, pick the best split of every open node over all parties' features.

        Splits on this party's own features are applied at once (their rows'
        directions go into the next :class:`LevelStep`); the others become
        orders for their owners. Returns whether any node was split.
        """
        open_nodes = self.levels.open
        n_open = len(open_nodes)
        self.orders: dict[str, list[tuple]] = {p: [] for p in self.passives}
        self.owner_of: dict[int, str] = {}
        self.orders_sent: set[str] = set()
        if n_open == 0:
            return False
        blocks: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        own = self.plain.concat([self.own_hists[n] for n in open_nodes.tolist()])
        G, H = self.plain.decrypt_gh(self._plain_sk, own)
        blocks[self.name] = (G.reshape(n_open, -1, self.n_bins, *G.shape[1:]), H.reshape(n_open, -1, self.n_bins, *H.shape[1:]))
        # every passive party's ciphertexts of the level in one round of decryption tasks
        by_sender = [hists.ciphers for _, hists in passive_hists]
        self.ops["decrypt"] += sum(len(c) for cs in by_sender for c in cs)
        with span_if("crypto", self.backend.is_encrypted):
            decrypted = decrypt_sealed(self.backend, self.pool, self.backend_spec, self._secret_key, by_sender)
        derives = any(len(self.layouts[sender][2]) for sender, _ in passive_hists) and len(self.levels.build)
        totals = self._built_totals() if derives else None
        for (sender, hists), (g_sums, h_sums) in zip(passive_hists, decrypted):
            level = self._peer_level(sender, hists.occupied_cells(len(self.layouts[sender][1])), g_sums, h_sums, totals)
            nodes = open_nodes.tolist()
            blocks[sender] = tuple(np.stack([level[n][i] for n in nodes]).reshape(n_open, -1, self.n_bins, *self.outputs)
                                   for i in (0, 1))
        # a node's gradient sums: any one feature's bins of this party's own (plaintext) histogram
        totals_g, totals_h = (b[:, 0, :].sum(axis=1) for b in blocks[self.name])
        G = np.concatenate([blocks[p][0] for p in self.order], axis=1)
        H = np.concatenate([blocks[p][1] for p in self.order], axis=1)
        offsets = np.cumsum([0] + [blocks[p][0].shape[1] for p in self.order])
        choice = best_splits(G, H, self.config.reg_lambda, self.config.min_child_weight, self._categorical())
        split = choice.splittable(self.config.gamma)
        for i, node in enumerate(open_nodes.tolist()):
            if not split[i]:
                self._make_leaf(node, totals_g[i], totals_h[i])
                continue
            owner = int(np.searchsorted(offsets, choice.feature[i], side="right") - 1)
            feature = int(choice.feature[i] - offsets[owner])
            bin_index, default_left = int(choice.bin[i]), bool(choice.default_left[i])
            left_set = choice.left_set[i] if choice.is_categorical(i) else None
            party = self.order[owner]
            if owner == self.me:
                record = len(self.lookup)
                column = self.bins["train"][self.levels.rows_of(node), feature]
                if left_set is None:
                    self.lookup.add(record, feature, bin_index, self.binner.threshold(feature, bin_index), default_left)
                    self.lefts[node] = goes_left(column, bin_index, default_left, self.missing_bin)
                else:
                    self.lookup.add(record, feature, bin_index, np.nan, default_left, np.flatnonzero(left_set))
                    self.lefts[node] = goes_left_of_set(column, left_set, default_left, self.missing_bin)
            else:
                record = self.record_count[party]
                self.record_count[party] += 1
                no_set = np.zeros(self.n_bins - 1, dtype=bool)
                self.orders[party].append((node, feature, bin_index, default_left, record,
                                           no_set if left_set is None else left_set))
            self.owner_of[node] = party
            self.children.append((node, *self.builder.split(node, owner, record, feature, float(np.sum(choice.gain[i])),
                                                                   float(np.sum(totals_h[i])))))
        return bool(self.children)

    def _categorical(self) -> CategoricalFeatures | None:
        """The features of every party, in histogram order, split by category sets (None: none is)."""
        if not self.config.enable_categorical:
            return None
        n_categories = np.concatenate([self.n_categories[p] for p in self.order])
        return CategoricalFeatures(n_categories, self.config.max_cat_to_onehot, self.config.max_cat_threshold)

    def winners(self) -> list[str]:
        """Passive parties that won a split of this level."""
        return [p for p in self.passives if self.orders[p]]

    def level_step(self, party: str, depth: int, advance: bool):
        """The :class:`LevelStep` for ``party``: its orders (once), the children and
        (when it is to advance) the partitions of the nodes other parties split."""
        rows = [] if party in self.orders_sent else self.orders[party]
        self.orders_sent.add(party)
        cols = list(zip(*rows)) or [[], [], [], [], [], np.zeros((0, self.n_bins - 1), dtype=bool)]
        orders = SplitOrders(
            np.asarray(cols[0], dtype=np.int32), np.asarray(cols[1], dtype=np.int32), np.asarray(cols[2], dtype=np.int32),
            np.asarray(cols[3], dtype=bool), np.asarray(cols[4], dtype=np.int32),
            np.packbits(np.asarray(cols[5], dtype=bool).reshape(len(rows), self.n_bins - 1), axis=1),
        )
        others = [n for n in sorted(self.lefts) if self.owner_of[n] != party] if advance else []
        step = LevelStep(orders, np.asarray(self.children, dtype=np.int32).reshape(-1, 3),
                         pack_partition(others, [self.lefts[n] for n in others]), advance)
        return self.mailbox.send("level_step", [party], step, self.tree, depth)

    def _make_leaf(self, node: int, g_sum: float, h_sum: float) -> None:
        w = leaf_weights(g_sum, h_sum, self.config.reg_lambda, self.config.learning_rate)
        self.builder.set_leaf(node, w)

