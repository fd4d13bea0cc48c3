"""Server C on the lattice engine (``SSXGBConfig(engine="lattice")``): the rounds of
:class:`~ray_vfl.ssxgb.server_c.ServerCRole` with BFV SIMD arrays
(:class:`~ray_vfl.crypto.lattice.two_server.LatticeServerC`) in place of BCP, slot sums and spreads
through S (:mod:`ray_vfl.crypto.lattice.slot_sums`) and notes switched to each participant's own BFV
key. The message rounds and what each receiver learns: :mod:`ray_vfl.ssxgb.lattice_roles`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..crypto.lattice.arrays import FRESH_NOISE, PLAIN_NOISE, LatticeArray, Term, dense_term
from ..crypto.lattice.keys import LatticePublic, load_ct, save_ct
from ..crypto.lattice.ring import RingParams, uniform_residues
from ..crypto.lattice.server_s import LatticeServerS
from ..crypto.lattice.slot_sums import load_blocks, masked_tile_products, row_block, spread, tiled_layout
from ..crypto.lattice.two_server import LatticeServerC
from ..crypto.two_server.server_s import TwoServerConfig
from ..errors import ConfigError, DataError, ProtocolError
from ..trees.sampling import RowSampler
from .approx import FixedPointPlan
from .participant import fetch
from .secure_math import clamped_gradients, leaf_weights
from .server_c import ServerCRole
from .splits import best_candidates, gain_fractions
from . import lattice_messages  # noqa: F401  (registers the lattice message kinds)

__all__ = ["LatticeServerCRole"]


class LatticeServerCRole(ServerCRole):
    """Server C on the lattice engine (module docstring). Built by :func:`ray_vfl.ssxgb.protocol.train`."""

    # -- set-up ------------------------------------------------------------------------------------
    def take_params(self, message: Any) -> tuple:
        """S's ring and public keys; C forwards them to every participant."""
        (msg,) = fetch([message])
        p = self.mailbox.open(msg, "ssxgb_lattice_params", None, [self.server_s])
        ring = RingParams(int(p["n_primes"]))
        self.pub = LatticePublic(ring, [bytes(b) for b in p["public_keys"]])
        cfg = self.config
        self.two = LatticeServerC(self.pub, self.link, TwoServerConfig(cfg.value_bits, cfg.kappa))
        self.ctx = {"n_primes": ring.n_primes, "slots": ring.slots}
        return None, self.mailbox.send("ssxgb_lattice_public_params", self.order, dict(p))

    def register(self, keys: list) -> tuple:
        """Every participant's own public keys, registered at S for the notes and predictions (1 round)."""
        got = {m.sender: self.mailbox.open(m, "ssxgb_lattice_user_key", self.ctx, self.order) for m in fetch(keys)}
        missing = [p for p in self.order if p not in got]
        if missing:
            raise ProtocolError(missing[0], "ssxgb_lattice_user_key", "no user key arrived", self.name)
        self.user_keys = {p: [bytes(b) for b in got[p]] for p in self.order}
        self.link.ask(LatticeServerS.user_keys_step, self.user_keys)
        return None, None

    def _array(self, blocks: list, m: int, frac: int, noise: int = FRESH_NOISE) -> LatticeArray:
        return LatticeArray([dense_term(load_blocks(self.pub, blocks), m, self.pub.ring.slots, noise)], m, frac,
                            self.two.key_id)

    def take_init(self, message: Any) -> None:
        """The LBP's first margins and labels, encrypted under S's keys by the LBP (no KeyProd needed)."""
        (msg,) = fetch([message])
        p = self.mailbox.open(msg, "ssxgb_lattice_init", self.ctx, [self.lbp])
        f = self.config.frac_bits
        self.n_rows = int(p["n_rows"])
        self.margin = self._array(p["margin"], self.n_rows, f)
        self.label = self._array(p["label"], self.n_rows, f)
        self.plan = FixedPointPlan.of(self.config, self.n_rows)
        need = self.plan.value_bits_needed()
        if need > self.config.value_bits:
            raise ConfigError(f"the gain comparisons and leaf weights of {self.n_rows} rows at frac_bits="
                              f"{self.config.frac_bits} need value_bits >= {need}, got {self.config.value_bits}: "
                              "raise value_bits or lower frac_bits")
        self.index_bits = self.config.value_bits - self.plan.comparison_bits()

    # -- one tree --------------------------------------------------------------------------------------
    def begin_tree(self, tree: int) -> tuple:
        """Encrypted g, h of the sampled rows (9 rounds with S), tiled by S (1 round), to every participant."""
        self.link.tree, self.link.depth = tree, -1
        bcp = self.two.bcp
        self.rows = RowSampler(self.config.row_subsample, self.config.seed).rows(self.n_rows, tree)
        m = len(self.rows)
        ring, ev = self.pub.ring, self.pub.evaluators
        self.tiles = ring.slots // row_block(m, ring.slots)  # sums per block of the tile-sum step
        x, y = bcp.take(self.margin, self.rows), bcp.take(self.label, self.rows)
        self.g, self.h = clamped_gradients(self.two, self.plan, x, y)
        masks = [uniform_residues(ring, m) for _ in range(2)]
        blocks = self.link.ask(LatticeServerS.tile_step, self.two._send_many([self.g, self.h], masks), [m, m])
        n_blocks = -(-m // row_block(m, ring.slots))
        if len(blocks) != 2 * n_blocks:
            raise ProtocolError(self.server_s, "ssxgb_s_reply", f"{len(blocks)} tiled blocks, {2 * n_blocks} expected",
                                self.name)
        self.tiled = []  # the tiles hold g + r: C takes r off every slot (a plaintext addition)
        for j, r in enumerate(masks):
            parts = []
            for blk, neg in zip(load_blocks(self.pub, blocks[j * n_blocks:(j + 1) * n_blocks]),
                                tiled_layout(ring.neg(r), ring.slots)):
                for i, ct in enumerate(blk):
                    ev[i].add_plain_inplace(ct, self.pub.plaintext(i, neg[i]))
                parts.append(blk)
            self.tiled.append(parts)
        self.pos_of_row = np.full(self.n_rows, -1, dtype=np.int64)
        self.pos_of_row[self.rows] = np.arange(m)
        self.node_of_row = np.zeros(self.n_rows, dtype=np.int64)
        self.open_nodes, self.next_id = [0], 1
        self.trees.append({})
        payload = {"rows": self.rows.astype(np.int64), "g": [[save_ct(c) for c in b] for b in self.tiled[0]],
                   "h": [[save_ct(c) for c in b] for b in self.tiled[1]]}
        return None, self.mailbox.send("ssxgb_lattice_gradients", self.order, payload, len(self.trees), -1)

    def _node_groups(self, nodes: list[int], index: np.ndarray | None) -> tuple[list, list[np.ndarray]]:
        """Tile-sum groups of C's own node sums of g and h (and the negated masks' sums)."""
        sets = np.stack([(self.node_of_row[self.rows] == n) for n in nodes])
        groups, negs = [], []
        for tiled in self.tiled:
            blocks, neg = masked_tile_products(self.pub, tiled, sets)
            groups.append((blocks, len(self.rows), len(nodes), index))
            negs.append(neg if index is None else neg[:, index])
        return groups, negs

    def _summed(self, reply_terms: list[Term], negs: list[np.ndarray], frac: int) -> list[LatticeArray]:
        out = []
        for t, neg in zip(reply_terms, negs):
            out.append(LatticeArray([self.two._add_plain(t, neg)], neg.shape[1], frac, self.two.key_id))
        return out

    def find_splits(self, depth: int, sums: list) -> tuple:
        """Every participant's left sums and C's node sums (one tile-sum round), then gains, tournament
        and notes as on the BCP engine; each note switched to its participant's own key (1 round)."""
        self.link.depth = depth
        two, bcp, nodes, f = self.two, self.two.bcp, self.open_nodes, self.config.frac_bits
        ctx = {**self.ctx, "nodes": list(nodes), "tiles": self.tiles, "max_candidates": 1 << 20}
        got = {m.sender: self.mailbox.open(m, "ssxgb_lattice_left_sums", ctx, self.order) for m in fetch(sums)}
        counts = [int(got[p]["k"]) if p in got else 0 for p in self.order]
        k = sum(counts)
        if k == 0:
            raise DataError("no participant has a split candidate (every feature holds one bin): nothing to split on")
        if k > self.config.max_candidates or k > 1 << self.index_bits:
            raise ConfigError(f"{k} split candidates per node exceed the comparison's budget (max_candidates = "
                              f"{self.config.max_candidates}, index bits left by value_bits: {self.index_bits})")
        m, has = len(self.rows), [p for p in self.order if p in got and got[p]["k"]]
        groups, negs = [], []
        for p in has:
            n_sums = len(nodes) * int(got[p]["k"])
            for part in ("g", "h"):
                groups.append(([list(map(bytes, b)) for b in got[p][part]], m, n_sums, None))
                negs.append(None)
        rep = np.repeat(np.arange(len(nodes)), k)
        node_groups, node_negs = self._node_groups(list(nodes), rep)
        reply = self.link.ask(LatticeServerS.tile_sum_step, groups + node_groups)
        lengths = [g[2] for g in groups] + [len(rep)] * 2
        terms = two._unpack(reply, lengths, FRESH_NOISE)
        arrays = []
        for j, p in enumerate(has):
            for part, t in zip(("g", "h"), terms[2 * j:2 * j + 2]):
                mask = self._array(got[p][part + "_mask"], t.block.size, f)
                arrays.append(bcp.add(self.pub, LatticeArray([t], t.block.size, f, two.key_id), mask))
        g_node, h_node = self._summed(terms[-2:], node_negs, f)
        gl_all, hl_all = bcp.concat(arrays[0::2]), bcp.concat(arrays[1::2])
        starts = np.cumsum([0] + [len(nodes) * c for c in counts])
        perm = np.concatenate([starts[j] + i * counts[j] + np.arange(counts[j])
                               for i in range(len(nodes)) for j in range(len(self.order)) if counts[j]])
        gl, hl = bcp.take(gl_all, perm), bcp.take(hl_all, perm)
        sb = self.plan.sum_bits
        num, den = gain_fractions(two, gl, hl, g_node, h_node, self.plan.lam, sb)
        owner = [j for j in range(len(self.order)) for _ in range(counts[j])]
        idx, who = best_candidates(two, num, den, len(nodes), k, sb, owner, len(self.order))
        offsets = np.cumsum([0] + counts)[:-1]
        notes = [self._note(idx, who, int(o), i) for i, o in enumerate(offsets.tolist())]
        told = self._switch(notes, self.order)
        out = []
        for j, p in enumerate(self.order):
            payload = {"node": np.asarray(nodes, dtype=np.int64), "idx": told[j], "count": int(counts[j])}
            out.append(self.mailbox.send("ssxgb_lattice_win", [p], payload, len(self.trees), depth))
        self.ops["candidates"] += k * len(nodes)
        return (None, *out)

    def _note(self, idx: LatticeArray, who: LatticeArray, offset: int, i: int) -> LatticeArray:
        """``Enc((idx - offset) + rho (w - i))``, ``rho`` uniform in ``Z_T``: the winner's local index at
        its owner, uniform elsewhere (``w - i`` is a unit mod every prime: ``0 < |w - i| < P``)."""
        two, bcp, ring, m = self.two, self.two.bcp, self.pub.ring, len(idx)
        local = bcp.add(self.pub, idx, two.encrypt_ints(self.pub, [-offset] * m))
        away = bcp.add(self.pub, who, two.encrypt_ints(self.pub, [-i] * m))
        if away.noise + PLAIN_NOISE + 2 > self.pub.hide_limit:
            away = two.regroup(away)
        rho = uniform_residues(ring, m)
        scaled = LatticeArray([bcp.mul_plain(t, rho) for t in away.terms], m, 0, two.key_id)
        return bcp.add(self.pub, bcp.with_scale(local, 0), scaled)

    def _switch(self, arrays: list[LatticeArray], targets: list[str]) -> list[list[list[bytes]]]:
        """Each array under its target participant's own keys (1 round: S opens ``x + r``, C subtracts ``r``)."""
        ring = self.pub.ring
        masks = [uniform_residues(ring, len(a)) for a in arrays]
        reply = self.link.ask(LatticeServerS.switch_step, self.two._send_many(arrays, masks), [len(a) for a in arrays],
                              list(targets))
        out, at, n = [], 0, ring.slots
        for a, r in zip(arrays, masks):
            size = max(-(-len(a) // n), 1)
            cts = [[load_ct(self.pub.contexts[i], b) for i, b in enumerate(row)] for row in reply[at:at + size]]
            at += size
            t = self.two._add_plain(dense_term(cts, len(a), n, FRESH_NOISE), ring.neg(r))
            out.append([[save_ct(c) for c in row] for row in t.cts])
        return out

    def _spread(self, weights: list[LatticeArray], assign: np.ndarray) -> LatticeArray:
        """Dense ``Enc(w[assign[j]])`` (``w`` the concatenated weights; 1 broadcast round)."""
        w = self.two.bcp.concat(weights) if len(weights) > 1 else weights[0]
        r = uniform_residues(self.pub.ring, len(w))
        reply = self.link.ask(LatticeServerS.broadcast_step, self.two._send(w, r), len(w))
        cts = spread(self.pub, load_blocks(self.pub, reply), assign, r)
        noise = FRESH_NOISE + PLAIN_NOISE + int(len(w)).bit_length() + 1
        return LatticeArray([dense_term(cts, len(assign), self.pub.ring.slots, noise)], len(assign), w.frac,
                            self.two.key_id)

    def finish_tree(self) -> None:
        """Leaf weights by the secure division; every row's margin moves by its leaf's weight (a spread)."""
        self.link.depth = self.config.max_depth
        leaves = np.asarray(sorted(self.open_nodes), dtype=np.int64)
        groups, negs = self._node_groups(leaves.tolist(), None)
        terms = self.two._unpack(self.link.ask(LatticeServerS.tile_sum_step, groups), [len(leaves)] * 2, FRESH_NOISE)
        G, H = self._summed(terms, negs, self.config.frac_bits)
        sampled = self.node_of_row[self.pos_of_row >= 0]
        w = leaf_weights(self.two, self.plan, G, H, [int((sampled == leaf).sum()) for leaf in leaves.tolist()])
        w = self.two.regroup(w) if len(w.terms) > 1 else w
        self.leaves.append((leaves, w))
        step = self._spread([w], np.searchsorted(leaves, self.node_of_row))
        margin = self.two.bcp.add(self.pub, self.margin, step)
        self.margin = self.two.regroup(margin) if len(margin.terms) > 1 else margin

    # -- prediction ----------------------------------------------------------------------------------
    def predict(self, routes: list, n_rows: int, n_trees: int) -> tuple:
        """Every row's leaf in each tree (the owners' routes), then the summed weights of all rows in one
        spread and one switch to the LBP's key: prediction in bulk."""
        if n_trees > len(self.trees):
            raise DataError(f"server C holds {len(self.trees)} federated trees, the model {n_trees}: fit again")
        leaf_of = self._route_leaves(routes, n_rows, n_trees)
        if n_trees == 0:
            total = self.two.encrypt_ints(self.pub, [0] * n_rows, self.config.frac_bits)
        else:
            weights, assigns, off = [], [], 0
            for t in range(n_trees):
                leaves, w = self.leaves[t]
                weights.append(w)
                assigns.append(off + np.searchsorted(leaves, leaf_of[t]))
                off += len(leaves)
            total = None  # one broadcast of every tree's leaves, then a spread per tree
            w_all = self.two.bcp.concat(weights)
            r = uniform_residues(self.pub.ring, len(w_all))
            reply = load_blocks(self.pub, self.link.ask(LatticeServerS.broadcast_step, self.two._send(w_all, r),
                                                        len(w_all)))
            for a in assigns:
                cts = spread(self.pub, reply, a, r)
                part = LatticeArray([dense_term(cts, n_rows, self.pub.ring.slots, FRESH_NOISE + PLAIN_NOISE + 8)],
                                    n_rows, w_all.frac, self.two.key_id)
                total = part if total is None else self.two.bcp.add(self.pub, total, part)
        out = self._switch([total], [self.lbp])[0]
        return None, self.mailbox.send("ssxgb_lattice_prediction", [self.lbp], out)

    # -- saved parts: not on this engine yet ----------------------------------------------------------
    def model_part(self) -> dict[str, Any]:
        raise ConfigError("saving an SSXGB model trained with engine='lattice' is not supported yet: use engine='bcp'")

    def training_state(self) -> dict[str, Any]:
        raise ConfigError("checkpoints of SSXGB with engine='lattice' are not supported yet: use engine='bcp'")

    def view(self) -> dict[str, Any]:
        return {"leaves": [v.tolist() for v in self.seen["leaves"]]}
