"""Server C as a Ray actor: it talks to every participant and to S, and computes on ciphertexts only.

C holds the public parameters, every user key and the joint key, the encrypted margins and labels,
the encrypted gradients of the current tree, the tree structure (which participant owns each split,
by record number; never a feature or a threshold) and the encrypted leaf weights. Everything it
cannot do with additions alone it does with S through :class:`~ray_vfl.ssxgb.server_s.ActorLink`
(Mult, LGT, Trunc, KeyProd, TransDec, and the reciprocal built on them), always on masked values. The
rounds are in :mod:`ray_vfl.ssxgb.protocol`; the approximations in :mod:`ray_vfl.ssxgb.approx`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np
from gmpy2 import mpz

from ..crypto.he.ciphertexts import CipherArray
from ..crypto.two_server.bcp import BCPParams, BCPPublicKey
from ..crypto.two_server.bcp_arrays import check, unwrap, wrap
from ..crypto.two_server.server_s import TwoServerConfig
from ..crypto.two_server.server_c import ServerC
from ..errors import ConfigError, DataError, ProtocolError
from ..runtime.party import PartyActor
from ..trees.sampling import RowSampler
from .approx import FixedPointPlan
from .config import SSXGBConfig
from .costs import CostCounters
from .participant import fetch
from .secure_math import clamped_gradients, leaf_weights
from .server_s import ActorLink
from .splits import best_candidates, gain_fractions, winner_notes

__all__ = ["ServerCRole", "sum_rows"]


def sum_rows(pk: BCPPublicKey, c: CipherArray, groups: Sequence[np.ndarray]) -> CipherArray:
    """``Enc(sum of c[rows])`` for each group of positions (an empty group sums to ``Enc(0)`` = ``(1, 1)``,
    a public constant: only used on C's own values, never sent to a participant as a secret)."""
    big_a, big_b = unwrap(pk, c)
    n2 = mpz(pk.params.nsquare)
    out_a, out_b = [], []
    for rows in groups:
        a, b = mpz(1), mpz(1)
        for i in rows.tolist():
            a, b = a * big_a[i] % n2, b * big_b[i] % n2
        out_a.append(a)
        out_b.append(b)
    return wrap(pk, out_a, out_b, int(c.tag[5:]))


class ServerCRole(PartyActor, CostCounters):
    """Server C (see the module docstring). Built by :func:`ray_vfl.ssxgb.protocol.train`."""

    def __init__(self, name: str, config: SSXGBConfig, order: list[str], lbp: str, server_s: str, s_handle: Any,
                 timeout_s: float, pool: Any = None, record_view: bool = False) -> None:
        self.reset(name, config, order, lbp, server_s, s_handle, timeout_s, pool, record_view)

    def reset(self, name: str, config: SSXGBConfig, order: list[str], lbp: str, server_s: str, s_handle: Any,
              timeout_s: float, pool: Any = None, record_view: bool = False) -> None:
        self._start_party(name)
        self.config, self.order, self.lbp, self.server_s, self.pool = config, list(order), lbp, server_s, pool
        self.link = ActorLink(self.mailbox, server_s, s_handle, timeout_s, record_view)
        self.record_view = record_view
        # record_view: the ciphertexts C received (and sent every participant), each tree's instance spaces
        self.seen: dict[str, list[Any]] = {"lbp_init": [], "gradients": [], "leaves": []}
        self.ops: Counter[str] = Counter()
        self.trees: list[dict[int, tuple]] = []  # per federated tree: node -> ("split", owner, record, left, right)
        self.leaves: list[tuple[np.ndarray, CipherArray]] = []  # per federated tree: leaf ids, Enc(weights)

    # -- set-up ------------------------------------------------------------------------------------
    def take_params(self, message: Any) -> tuple:
        """S's public parameters; C forwards them to every participant."""
        (msg,) = fetch([message])
        p = self.mailbox.open(msg, "ssxgb_params", None, [self.server_s])
        self.params = BCPParams(p["n"], p["g"])
        cfg = self.config
        self.two = ServerC(self.params, self.link, TwoServerConfig(cfg.value_bits, cfg.kappa), frac_bits=cfg.frac_bits,
                           pool=self.pool)
        return None, self.mailbox.send("ssxgb_public_params", self.order, p)

    def register(self, keys: list) -> tuple:
        """Every participant's user key; KeyProd's key part (one round with S): the joint key, sent to all."""
        ctx = {"n_square": self.params.nsquare}
        got = {m.sender: self.mailbox.open(m, "ssxgb_user_key", ctx, self.order) for m in fetch(keys)}
        missing = [p for p in self.order if p not in got]
        if missing:
            raise ProtocolError(missing[0], "ssxgb_user_key", "no user key arrived", self.name)
        self.user_keys = {p: BCPPublicKey(self.params, got[p]) for p in self.order}
        self.joint = self.two.register([self.user_keys[p] for p in self.order])
        return None, self.mailbox.send("ssxgb_joint_key", self.order, int(self.joint.h))

    def take_init(self, message: Any) -> None:
        """The LBP's encrypted first margins and labels, moved to the joint key (KeyProd, one round)."""
        (msg,) = fetch([message])
        ctx = {"key": self.user_keys[self.lbp], "frac_bits": self.config.frac_bits}
        p = self.mailbox.open(msg, "ssxgb_lbp_init", ctx, [self.lbp])
        if self.record_view:
            self.seen["lbp_init"] += [p["margin"], p["label"]]
        self.margin, self.label = self.two.key_prod([p["margin"], p["label"]])
        self.n_rows = len(self.margin)
        self.plan = FixedPointPlan.of(self.config, self.n_rows)
        need = self.plan.value_bits_needed()
        if need > self.config.value_bits:
            raise ConfigError(f"the gain comparisons and leaf weights of {self.n_rows} rows at frac_bits="
                              f"{self.config.frac_bits} need value_bits >= {need}, got {self.config.value_bits}: "
                              "raise value_bits (at most key_bits - kappa - 6) or lower frac_bits")
        self.index_bits = self.config.value_bits - self.plan.comparison_bits()

    # -- one tree --------------------------------------------------------------------------------------
    def begin_tree(self, tree: int) -> tuple:
        """Encrypted g, h of this tree's sampled rows (the margins clamped into the cubic's range, then
        the cubic; 9 rounds with S), sent to every participant."""
        self.link.tree, self.link.depth = tree, -1
        bcp = self.two.bcp
        self.rows = RowSampler(self.config.row_subsample, self.config.seed).rows(self.n_rows, tree)
        x, y = bcp.take(self.margin, self.rows), bcp.take(self.label, self.rows)
        m = len(self.rows)
        self.g, self.h = clamped_gradients(self.two, self.plan, x, y)
        self.pos_of_row = np.full(self.n_rows, -1, dtype=np.int64)
        self.pos_of_row[self.rows] = np.arange(m)
        self.node_of_row = np.zeros(self.n_rows, dtype=np.int64)
        self.open_nodes, self.next_id = [0], 1
        self.trees.append({})
        payload = {"rows": self.rows.astype(np.int64), "g": self.g, "h": self.h}
        if self.record_view:
            self.seen["gradients"] += [self.g, self.h]
        return None, self.mailbox.send("ssxgb_gradients", self.order, payload, len(self.trees), -1)

    def _node_sums(self, nodes: Sequence[int]) -> tuple[CipherArray, CipherArray]:
        groups = [self.pos_of_row[(self.node_of_row == n) & (self.pos_of_row >= 0)] for n in nodes]
        return sum_rows(self.joint, self.g, groups), sum_rows(self.joint, self.h, groups)

    def find_splits(self, depth: int, sums: list) -> tuple:
        """Every participant's encrypted left sums; the best candidate of every open node, found with S
        without decrypting a gain; each participant gets, under its own key, the winner's local index
        if it owns the winner and a uniform value of ``Z_N`` if not
        (:func:`~ray_vfl.ssxgb.splits.winner_notes`)."""
        self.link.depth = depth
        two, bcp, nodes = self.two, self.two.bcp, self.open_nodes
        ctx = {"nodes": np.asarray(nodes), "key": self.joint, "frac_bits": self.config.frac_bits,
               "max_candidates": 1 << 20}
        got = {m.sender: self.mailbox.open(m, "ssxgb_left_sums", ctx, self.order) for m in fetch(sums)}
        if self.record_view:
            for p in self.order:
                if p in got and got[p]["k"]:
                    self.seen.setdefault(f"left_sums/{p}", []).extend([got[p]["gl"], got[p]["hl"]])
        counts = [int(got[p]["k"]) if p in got else 0 for p in self.order]
        k = sum(counts)
        if k == 0:
            raise DataError("no participant has a split candidate (every feature holds one bin): nothing to split on")
        if k > self.config.max_candidates or k > 1 << self.index_bits:
            raise ConfigError(f"{k} split candidates per node exceed the comparison's budget (max_candidates = "
                              f"{self.config.max_candidates}, index bits left by value_bits: {self.index_bits}): "
                              "lower max_bin or feature_subsample, or raise max_candidates")
        parts_g = [got[p]["gl"] for p in self.order if p in got and got[p]["k"]]
        parts_h = [got[p]["hl"] for p in self.order if p in got and got[p]["k"]]
        gl_all, hl_all = bcp.concat(parts_g), bcp.concat(parts_h)
        # node-major order: node i's candidates of participant 0, then of participant 1, ...
        starts = np.cumsum([0] + [len(nodes) * c for c in counts])
        perm = np.concatenate([starts[j] + i * counts[j] + np.arange(counts[j])
                               for i in range(len(nodes)) for j in range(len(self.order)) if counts[j]])
        gl, hl = bcp.take(gl_all, perm), bcp.take(hl_all, perm)
        g_node, h_node = self._node_sums(nodes)
        rep = np.repeat(np.arange(len(nodes)), k)
        sb = self.plan.sum_bits
        num, den = gain_fractions(two, gl, hl, bcp.take(g_node, rep), bcp.take(h_node, rep), self.plan.lam, sb)
        # the owner of each of a node's candidates (node-major: the same in every node)
        owner = [j for j in range(len(self.order)) for _ in range(counts[j])]
        idx, who = best_candidates(two, num, den, len(nodes), k, sb, owner, len(self.order))
        offsets = np.cumsum([0] + counts)[:-1]
        told = winner_notes(two, idx, who, offsets.tolist(), [self.user_keys[p] for p in self.order])
        out = []
        for j, p in enumerate(self.order):
            payload = {"node": np.asarray(nodes, dtype=np.int64), "idx": told[j], "count": int(counts[j])}
            out.append(self.mailbox.send("ssxgb_win", [p], payload, len(self.trees), depth))
        self.ops["candidates"] += k * len(nodes)
        return (None, *out)

    def apply_branches(self, depth: int, branches: list) -> tuple:
        """The owners' left branches: children ids, the rows' new nodes, sent to every participant."""
        nodes = self.open_nodes
        node_rows = {n: int((self.node_of_row == n).sum()) for n in nodes}
        ctx = {"open_nodes": set(nodes), "node_rows": node_rows}
        claims: dict[int, tuple[str, int, np.ndarray]] = {}
        for msg in fetch(branches):
            p = self.mailbox.open(msg, "ssxgb_left_branch", ctx, self.order)
            bits = np.unpackbits(p["bits"], count=sum(node_rows[n] for n in p["node"].tolist())).astype(bool)
            cuts = np.cumsum([node_rows[n] for n in p["node"].tolist()])[:-1]
            for node, record, left in zip(p["node"].tolist(), p["record"].tolist(), np.split(bits, cuts)):
                if node in claims:
                    raise ProtocolError(msg.sender, "ssxgb_left_branch", f"node {node} was already claimed by "
                                        f"{claims[node][0]!r}", self.name)
                claims[node] = (msg.sender, record, left)
        unclaimed = [n for n in nodes if n not in claims]
        if unclaimed:
            raise ProtocolError("?", "ssxgb_left_branch", f"no participant claimed node {unclaimed[0]}", self.name)
        tree = self.trees[-1]
        lefts, rights, all_bits = [], [], []
        for i, node in enumerate(sorted(nodes)):
            owner, record, left = claims[node]
            l_child, r_child = self.next_id + 2 * i, self.next_id + 2 * i + 1
            rows = np.flatnonzero(self.node_of_row == node)
            self.node_of_row[rows[left]] = l_child
            self.node_of_row[rows[~left]] = r_child
            tree[node] = ("split", owner, int(record), l_child, r_child)
            lefts.append(l_child)
            rights.append(r_child)
            all_bits.append(left)
        self.next_id += 2 * len(nodes)
        payload = {"node": np.asarray(sorted(nodes), dtype=np.int64), "left": np.asarray(lefts, dtype=np.int64),
                   "right": np.asarray(rights, dtype=np.int64), "bits": np.packbits(np.concatenate(all_bits))}
        self.open_nodes = [c for pair in zip(lefts, rights) for c in pair]
        return None, self.mailbox.send("ssxgb_partition", self.order, payload, len(self.trees), depth)

    def finish_tree(self) -> None:
        """Leaf weights by the secure division (Newton's iteration on masked values, ``3 k + 2`` rounds
        with S), kept encrypted; every row's encrypted margin moves by its leaf's weight."""
        bcp = self.two.bcp
        self.link.depth = self.config.max_depth  # the leaves' depth: the division's requests say so
        leaves = np.asarray(sorted(self.open_nodes), dtype=np.int64)
        if self.record_view:
            self.seen["leaves"].append(self.node_of_row.copy())
        G, H = self._node_sums(leaves.tolist())
        sampled = self.node_of_row[self.pos_of_row >= 0]
        w = leaf_weights(self.two, self.plan, G, H, [int((sampled == leaf).sum()) for leaf in leaves.tolist()])
        self.leaves.append((leaves, w))
        slot = np.searchsorted(leaves, self.node_of_row)
        self.margin = bcp.add(self.joint, self.margin, bcp.take(w, slot))

    # -- prediction ----------------------------------------------------------------------------------
    def predict(self, routes: list, n_rows: int, n_trees: int) -> tuple:
        """Route the rows through the first ``n_trees`` federated trees by the owners' decisions, sum the
        encrypted leaf weights per row and move the sums to the LBP's key (TransDec, one round)."""
        if n_trees > len(self.trees):
            raise DataError(f"server C holds {len(self.trees)} federated trees, the model {n_trees}: a later fit "
                            "re-used these actors; predict with the model of the last fit, or fit again")
        bcp, total = self.two.bcp, None
        for t, node in enumerate(self._route_leaves(routes, n_rows, n_trees)):
            leaves, w = self.leaves[t]
            part = bcp.take(w, np.searchsorted(leaves, node))
            total = part if total is None else bcp.add(self.joint, total, part)
        if total is None:
            total = self.two.encrypt_ints(self.joint, [0] * n_rows, self.config.frac_bits)
        out = self.two.trans_dec(total, self.user_keys[self.lbp])
        return None, self.mailbox.send("ssxgb_prediction", [self.lbp], out)

    def _route_leaves(self, routes: list, n_rows: int, n_trees: int) -> list[np.ndarray]:
        """Every row's leaf in each of the first ``n_trees`` trees, by the owners' routes (each owner's decision
        bits for the splits it owns; a route for a split it does not own is refused)."""
        ctx = {"n_trees": n_trees, "n_rows": n_rows}
        bits: dict[tuple[int, int], np.ndarray] = {}
        for msg in fetch(routes):
            p = self.mailbox.open(msg, "ssxgb_route", ctx, self.order)
            flat = np.unpackbits(p["bits"], count=len(p["tree"]) * n_rows).astype(bool).reshape(len(p["tree"]), n_rows)
            for t, node, b in zip(p["tree"].tolist(), p["node"].tolist(), flat):
                if self.trees[t].get(node, ("",))[0] != "split" or self.trees[t][node][1] != msg.sender:
                    raise ProtocolError(msg.sender, "ssxgb_route", f"tree {t} node {node} is not its split", self.name)
                bits[(t, node)] = b
        rows, out = np.arange(n_rows), []
        for t in range(n_trees):
            node = np.zeros(n_rows, dtype=np.int64)
            for _ in range(self.config.max_depth):
                nxt = node.copy()
                for nd in np.unique(node).tolist():
                    kind = self.trees[t][nd]
                    if (t, nd) not in bits:
                        raise ProtocolError(kind[1], "ssxgb_route", f"no decisions for tree {t} node {nd}", self.name)
                    at = rows[node == nd]
                    nxt[at] = np.where(bits[(t, nd)][at], kind[3], kind[4])
                node = nxt
            out.append(node)
        return out

    # -- saved part (on C's own machine: public keys, structure, encrypted leaves) ----------------------
    def model_part(self) -> dict[str, Any]:
        return {"party": self.name, "params": [str(self.params.n), str(self.params.g)],
                "user_keys": {p: str(k.h) for p, k in self.user_keys.items()}, "joint": str(self.joint.h),
                "trees": [[[n, *kind[1:]] for n, kind in sorted(t.items())] for t in self.trees],
                "leaves": [[ids.tolist(), w.data.tobytes().hex(), w.tag] for ids, w in self.leaves]}

    def restore(self, part: dict[str, Any]) -> None:
        self.params = BCPParams(int(part["params"][0]), int(part["params"][1]))
        cfg = self.config
        self.two = ServerC(self.params, self.link, TwoServerConfig(cfg.value_bits, cfg.kappa), frac_bits=cfg.frac_bits,
                           pool=self.pool)
        self.user_keys = {p: BCPPublicKey(self.params, int(h)) for p, h in part["user_keys"].items()}
        self.joint = BCPPublicKey(self.params, int(part["joint"]))
        for k in (*self.user_keys.values(), self.joint):  # S restores its own copy of the same keys
            self.two.keys[k.key_id] = k
        self.two.joint = self.joint
        self.trees = [{int(n): ("split", owner, int(r), int(left), int(right)) for n, owner, r, left, right in t}
                      for t in part["trees"]]
        width = 2 * self.params.width
        self.leaves = []
        for ids, data, tag in part["leaves"]:
            raw = np.frombuffer(bytes.fromhex(data), dtype=np.uint8).reshape(len(ids), width)
            w = CipherArray(raw.copy(), self.joint.key_id, tag)
            check(self.joint, w)
            self.leaves.append((np.asarray(ids, dtype=np.int64), w))

    def training_state(self) -> dict[str, Any]:
        """The saved part plus the encrypted training margins and labels (all ciphertexts)."""
        return {**self.model_part(), "margin": [self.margin.data.tobytes().hex(), self.margin.tag],
                "label": [self.label.data.tobytes().hex(), self.label.tag]}

    def resume_training(self, state: dict[str, Any]) -> None:
        self.restore(state)
        width = 2 * self.params.width
        arrays = []
        for data, tag in (state["margin"], state["label"]):
            raw = bytes.fromhex(data)
            c = CipherArray(np.frombuffer(raw, dtype=np.uint8).reshape(len(raw) // width, width).copy(),
                            self.joint.key_id, tag)
            check(self.joint, c)
            arrays.append(c)
        self.margin, self.label = arrays
        self.n_rows = len(self.margin)
        self.plan = FixedPointPlan.of(self.config, self.n_rows)
        self.index_bits = self.config.value_bits - self.plan.comparison_bits()

    def view(self) -> dict[str, Any]:
        """What C recorded (``record_view``): ciphertexts as ``(A, B)`` integer pairs, per kind: the LBP's
        ``lbp_init``, each participant's ``left_sums/<name>``, the ``gradients`` C sent every participant, S's
        ``s_reply`` (key ids of ``register_step`` left out); ``leaves``: each federated tree's node of
        every training row (the instance spaces the partitions told C); ``n_square``."""
        keys = {k.key_id: k for k in (*self.user_keys.values(), self.joint)}

        def ints(arrays):
            out = []
            for c in arrays:
                big_a, big_b = unwrap(keys[c.key_id], c)
                out += [(int(a), int(b)) for a, b in zip(big_a, big_b)]
            return out
        out = {kind: ints(arrays) for kind, arrays in self.seen.items() if kind != "leaves"}
        out["s_reply"] = ints([c for reply in self.link.replies for c in reply if isinstance(c, CipherArray)])
        out["leaves"] = [v.tolist() for v in self.seen["leaves"]]
        out["n_square"] = int(self.params.nsquare)
        return out

    def structure(self) -> list[dict[int, tuple]]:
        """The federated trees as C knows them (owner and record number of every split)."""
        return [dict(t) for t in self.trees]

    def round_trips(self) -> int:
        return self.link.round_trips

    def truncate(self, n_trees: int) -> None:
        del self.trees[n_trees:], self.leaves[n_trees:]

