"""An SSXGB participant: its own features (binned on its own node), its user key, its private lookup
table, and -- at the label-bearing participant (LBP) only -- the labels and the first tree.

A participant sees the encrypted gradients of each tree, the node membership of the training rows
(C broadcasts it), and, per level, its own ``Enc_pk_i(winner's index)``, which it decrypts: the owner
learns which of its candidates won; the others learn a record number outside their own range (which
participant won, not which feature or threshold). Thresholds never leave their owner.
"""

from __future__ import annotations

import secrets
from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np
import ray
from gmpy2 import mpz

from ..crypto.he.ciphertexts import CipherArray
from ..crypto.two_server.bcp import BCPParams, BCPPublicKey, BCPSecretKey, keygen
from ..crypto.two_server.bcp_arrays import BCP, unwrap, wrap
from ..data.binning import PartyBinner, check_encodable
from ..errors import DataError
from ..runtime.comm import Message
from ..runtime.party import PartyActor, resolve_rows
from ..trees.kernels import evaluate_margin
from ..trees.sampling import FeatureSampler
from .config import SSXGBConfig
from .costs import CostCounters
from .first_tree import FirstTree, fit_first_tree
from .reference import candidate_list, top_bins

__all__ = ["Participant", "fetch"]


def fetch(messages: Sequence[Any]) -> list[Message]:
    """Messages handed over as Ray references (resolved here, in the receiving actor) or as values, in
    a list or in one-element lists (a reference at the top level of a call's arguments would be
    resolved by Ray before the call), without the ``None`` of senders that had nothing to send."""
    items = [m for item in messages for m in (item if isinstance(item, (list, tuple)) else [item]) if m is not None]
    refs = [m for m in items if isinstance(m, ray.ObjectRef)]
    got = dict(zip(map(id, refs), ray.get(refs))) if refs else {}
    values = [got[id(m)] if isinstance(m, ray.ObjectRef) else m for m in items]
    return [m for m in values if m is not None]


def prefix_sums(pk: BCPPublicKey, c: CipherArray, pos: np.ndarray, bins: np.ndarray, top: int,
                zeros: CipherArray) -> CipherArray:
    """``Enc(sum of c[pos] with bin <= b)`` for ``b < top``, re-randomised by ``zeros`` (fresh
    encryptions of 0: a bare product would show C which candidates share a row set)."""
    big_a, big_b = unwrap(pk, c)
    za, zb = unwrap(pk, zeros)
    n2 = mpz(pk.params.nsquare)
    bucket_a, bucket_b = [mpz(1)] * top, [mpz(1)] * top
    for i, b in zip(pos.tolist(), bins.tolist()):
        if b < top:
            bucket_a[b] = bucket_a[b] * big_a[i] % n2
            bucket_b[b] = bucket_b[b] * big_b[i] % n2
    out_a, out_b, a, b = [], [], mpz(1), mpz(1)
    for j in range(top):
        a, b = a * bucket_a[j] % n2, b * bucket_b[j] % n2
        out_a.append(a * za[j] % n2)
        out_b.append(b * zb[j] % n2)
    return wrap(pk, out_a, out_b, int(c.tag[5:]))


class Participant(PartyActor, CostCounters):
    """One participant (see the module docstring). Built by :func:`ray_vfl.ssxgb.protocol.train`."""

    def __init__(self, name: str, table: Any, categorical: list[str], config: SSXGBConfig, lbp: str,
                 server_c: str) -> None:
        self.reset(name, table, categorical, config, lbp, server_c)

    def reset(self, name: str, table: Any, categorical: list[str], config: SSXGBConfig, lbp: str,
              server_c: str) -> None:
        self._start_party(name)
        self.config, self.lbp, self.server_c = config, lbp, server_c
        self.is_lbp = name == lbp
        self.bcp = BCP(config.frac_bits)
        self.ops: Counter[str] = Counter()
        # Which features a tree samples is this participant's own business: its own OS entropy.
        self.features = FeatureSampler(config.feature_subsample, np.random.Generator(np.random.PCG64DXSM(secrets.randbits(128))))
        self.binner = PartyBinner(config.max_bin)
        self.lookup: list[tuple[int, int, float]] = []  # record -> (feature, bin, threshold)
        self.owned: list[tuple[int, int, int]] = []  # (tree, node, record) of the splits this participant owns
        self.n_trees = 0
        self.first: FirstTree | None = None
        frame, label = resolve_rows(table)
        if frame is None:
            return
        check_encodable(frame, categorical, name)
        self.rows["train"] = self.binner.fit_transform(frame, categorical, party=name)
        self.n_rows = len(frame)
        self.top = top_bins(self.rows["train"], config.max_bin)
        self.y = None
        if self.is_lbp:
            if label is None:
                raise DataError(f"participant {name!r} is the LBP but holds no labels")
            y = np.asarray(label, dtype=np.float64)
            if not np.isin(y, (0.0, 1.0)).all():
                raise DataError(f"participant {name!r}: SSXGB's logistic loss needs labels 0 or 1, found "
                                f"{y[~np.isin(y, (0.0, 1.0))][0]!r}; map the labels first")
            self.y = y

    def encode_rows(self, frame: Any) -> np.ndarray:
        return self.binner.transform(frame, party=self.name)

    # -- set-up ---------------------------------------------------------------------------------------
    def make_key(self, message: Any) -> tuple:
        """The public parameters (from S, through C); a user key pair; the public key to C."""
        (msg,) = fetch([message])
        p = self.mailbox.open(msg, "ssxgb_public_params", None, [self.server_c])
        self.params = BCPParams(p["n"], p["g"])
        self.pk, self.sk = keygen(self.params)
        return None, self.mailbox.send("ssxgb_user_key", [self.server_c], int(self.pk.h))

    def take_joint_key(self, message: Any) -> None:
        (msg,) = fetch([message])
        h = self.mailbox.open(msg, "ssxgb_joint_key", {"n_square": self.params.nsquare}, [self.server_c])
        self.joint = BCPPublicKey(self.params, h)

    def lbp_init(self) -> tuple:
        """LBP only (LBPXGBTRAIN): the first tree on its own features, in plaintext; then
        ``Enc_pk_LBP(base + first-tree margins)`` and ``Enc_pk_LBP(labels)`` (scale ``2^F``) to C."""
        if not self.is_lbp:
            return None, None
        f = self.config.frac_bits
        self.first = fit_first_tree(self.rows["train"], self.y, self.config)
        margin = np.rint(np.ldexp(self.first.margins(self.rows["train"]), f)).astype(np.int64)
        payload = {"margin": self.bcp.encrypt_ints(self.pk, margin, f),
                   "label": self.bcp.encrypt_ints(self.pk, [int(v) << f for v in self.y], f)}
        self.ops["encrypt"] += 2 * self.n_rows
        return None, self.mailbox.send("ssxgb_lbp_init", [self.server_c], payload)

    # -- one tree -------------------------------------------------------------------------------------
    def take_gradients(self, message: Any) -> None:
        """The tree's sampled rows and their encrypted g, h; this participant's feature sample."""
        (msg,) = fetch([message])
        ctx = {"n_rows": self.n_rows, "key": self.joint, "frac_bits": self.config.frac_bits}
        p = self.mailbox.open(msg, "ssxgb_gradients", ctx, [self.server_c])
        self.g, self.h = p["g"], p["h"]
        self._start_tree(p["rows"])

    def _start_tree(self, rows: np.ndarray) -> None:
        """A new tree over the sampled ``rows``: every row at the root, a fresh feature sample."""
        p = {"rows": rows}
        self.pos_of_row = np.full(self.n_rows, -1, dtype=np.int64)
        self.pos_of_row[p["rows"]] = np.arange(len(p["rows"]))
        self.node_of_row = np.zeros(self.n_rows, dtype=np.int64)
        self.open_nodes = [0]
        self.candidates = candidate_list(self.top, self.features.features(len(self.top)))
        self.tree = self.n_trees
        self.n_trees += 1

    def left_sums(self, depth: int) -> tuple:
        """Per open node, ``Enc(sum of g)`` and ``Enc(sum of h)`` over the sampled rows left of each of
        this participant's candidates (cumulative over bins), to C."""
        bins = self.rows["train"]
        feats = sorted({f for f, _ in self.candidates})
        k = len(self.candidates)
        parts_g, parts_h = [], []
        for node in self.open_nodes:
            rows = np.flatnonzero((self.node_of_row == node) & (self.pos_of_row >= 0))
            pos = self.pos_of_row[rows]
            for f in feats:
                top = int(self.top[f])
                zeros = [self.bcp.encrypt_zeros(self.joint, top, self.config.frac_bits) for _ in range(2)]
                parts_g.append(prefix_sums(self.joint, self.g, pos, bins[rows, f], top, zeros[0]))
                parts_h.append(prefix_sums(self.joint, self.h, pos, bins[rows, f], top, zeros[1]))
                self.ops["encrypt"] += 2 * top
        empty = self.bcp.encrypt_zeros(self.joint, 0, self.config.frac_bits)
        payload = {"node": np.asarray(self.open_nodes, dtype=np.int64), "k": k,
                   "gl": self.bcp.concat(parts_g) if parts_g else empty,
                   "hl": self.bcp.concat(parts_h) if parts_h else empty}
        return None, self.mailbox.send("ssxgb_left_sums", [self.server_c], payload, self.tree, depth)

    def take_win(self, depth: int, message: Any) -> tuple:
        """Decrypt each node's note: the local index of the winning candidate where this participant
        owns it, a uniform value of ``Z_N`` (outside ``[0, k)``) where another does; for the nodes this
        participant won, keep the split in its lookup table and tell C the node's left branch (every
        training row of the node)."""
        (msg,) = fetch([message])
        ctx = {"open_nodes": set(self.open_nodes), "key": self.pk}
        p = self.mailbox.open(msg, "ssxgb_win", ctx, [self.server_c])
        notes = self.bcp.decrypt_residues(self.sk, p["idx"])
        self.ops["decrypt"] += len(notes)
        return self._claim(depth, p, notes)

    def _claim(self, depth: int, p: dict, notes: list[int]) -> tuple:
        """The nodes whose note is a local index of this participant's: their left branches, to C."""
        if p["count"] != len(self.candidates):
            raise DataError(f"C counts {p['count']} candidates for {self.name!r}, which sent {len(self.candidates)}")
        bins = self.rows["train"]
        nodes, records, lefts = [], [], []
        for node, j in zip(p["node"].tolist(), notes):
            if not 0 <= j < len(self.candidates):  # another participant's split: a uniform value mod N
                continue
            f, b = self.candidates[j]
            self.lookup.append((f, b, float(self.binner.threshold(f, b))))
            rows = np.flatnonzero(self.node_of_row == node)
            nodes.append(node)
            records.append(len(self.lookup) - 1)
            self.owned.append((self.tree, node, len(self.lookup) - 1))
            lefts.append(bins[rows, f] <= b)
        if not nodes:
            return None, None
        payload = {"node": np.asarray(nodes, dtype=np.int64), "record": np.asarray(records, dtype=np.int64),
                   "bits": np.packbits(np.concatenate(lefts))}
        return None, self.mailbox.send("ssxgb_left_branch", [self.server_c], payload, self.tree, depth)

    def take_partition(self, message: Any) -> None:
        """Where the rows of every split node went (from C); the splits this participant owns."""
        (msg,) = fetch([message])
        node_rows = {n: int((self.node_of_row == n).sum()) for n in self.open_nodes}
        p = self.mailbox.open(msg, "ssxgb_partition", {"open_nodes": set(self.open_nodes), "node_rows": node_rows},
                              [self.server_c])
        counts = [node_rows[n] for n in p["node"].tolist()]
        bits = np.unpackbits(p["bits"], count=sum(counts)).astype(bool)
        moves = zip(p["node"].tolist(), p["left"].tolist(), p["right"].tolist(), np.split(bits, np.cumsum(counts)[:-1]))
        for node, left, right, go in moves:
            rows = np.flatnonzero(self.node_of_row == node)
            self.node_of_row[rows[go]] = left
            self.node_of_row[rows[~go]] = right
        self.open_nodes = [c for pair in zip(p["left"].tolist(), p["right"].tolist()) for c in pair]

    # -- prediction -----------------------------------------------------------------------------------
    def route(self, key: str, n_trees: int) -> tuple:
        """Left/right of every row of data set ``key`` at each split node this participant owns."""
        bins = self.rows[key]
        trees, nodes, bits = [], [], []
        for t, node, record in self.owned:
            if t < n_trees:
                f, b, _ = self.lookup[record]
                trees.append(t)
                nodes.append(node)
                bits.append(bins[:, f] <= b)
        payload = {"tree": np.asarray(trees, dtype=np.int64), "node": np.asarray(nodes, dtype=np.int64),
                   "bits": np.packbits(np.concatenate(bits)) if bits else np.zeros(0, dtype=np.uint8)}
        return None, self.mailbox.send("ssxgb_route", [self.server_c], payload)

    def open_prediction(self, key: str, message: Any, caller_key: bytes) -> Message:
        """LBP only: the margins (:meth:`_margins`), sealed to the caller: the key it made for this call."""
        return self.mailbox.send_to_caller("ssxgb_margins", caller_key, self._margins(key, message))

    def _margins(self, key: str, message: Any) -> np.ndarray:
        """LBP only: decrypt the summed leaf weights and add the base margin and the first tree."""
        if not self.is_lbp:
            raise DataError(f"only the LBP decrypts predictions, not {self.name!r}")
        (msg,) = fetch([message])
        bins = self.rows[key]
        ctx = {"key": self.pk, "frac_bits": self.config.frac_bits, "n_rows": len(bins)}
        c = self.mailbox.open(msg, "ssxgb_prediction", ctx, [self.server_c])
        self.ops["decrypt_prediction"] += len(c)
        return self.first.margins(bins) + self.bcp.decrypt(self.sk, c)

    def score_prediction(self, key: str, message: Any) -> dict[str, float]:
        """LBP only: open the prediction of eval set ``key`` and score it against its own labels of
        those rows; only the metrics (logloss, AUC) leave this participant, never a margin."""
        if key not in self.labels:
            raise DataError(f"participant {self.name!r} holds no labels of eval set {key!r}: the LBP must hold them")
        margins = self._margins(key, message)
        return evaluate_margin("binary:logistic", np.asarray(self.labels[key], dtype=np.float64), margins)

    # -- saved part (on this participant's own machine) -------------------------------------------------
    def model_part(self) -> dict[str, Any]:
        """Binner, lookup table, owned splits, key pair; at the LBP also the first tree (all its own)."""
        return {"party": self.name, "binner": self.binner.to_dict(), "lookup": [list(r) for r in self.lookup],
                "owned": [list(o) for o in self.owned], "n_trees": self.n_trees,
                "first": self.first.to_dict() if self.first is not None else None,
                "params": [str(self.params.n), str(self.params.g)], "a": str(self.sk.a), "joint": str(self.joint.h)}

    def restore(self, part: dict[str, Any]) -> None:
        self.binner = PartyBinner.from_dict(part["binner"])
        self.lookup = [(int(f), int(b), float(t)) for f, b, t in part["lookup"]]
        self.owned = [(int(t), int(n), int(r)) for t, n, r in part["owned"]]
        self.n_trees = int(part["n_trees"])
        self.first = FirstTree.from_dict(part["first"]) if part["first"] is not None else None
        if self.is_lbp and self.first is None:
            raise DataError(f"{self.name!r} is the LBP but its saved part holds no first tree")
        self.params = BCPParams(int(part["params"][0]), int(part["params"][1]))
        a = int(part["a"])
        self.pk = BCPPublicKey(self.params, int(pow(self.params.g, a, self.params.nsquare)))
        self.sk = BCPSecretKey(self.pk, a)
        self.joint = BCPPublicKey(self.params, int(part["joint"]))

    def resume_training(self, state: dict[str, Any]) -> None:
        """Take up a checkpoint: the saved part (this participant's rows are binned again from its data)."""
        self.restore(state)

    def lookup_part(self) -> list[tuple[int, int]]:
        """Diagnostic only (tests): ``(feature, bin)`` of every record of the lookup table."""
        return [(f, b) for f, b, _ in self.lookup]

    def op_counts(self) -> dict[str, int]:
        return dict(self.ops)
