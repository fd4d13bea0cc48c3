"""SSXGB on the lattice engine (``SSXGBConfig(engine="lattice")``): the participants' and server S's
side (server C: :mod:`ray_vfl.ssxgb.lattice_server_c`). The tree, the approximations and the
algorithms are the BCP engine's (:mod:`ray_vfl.ssxgb.protocol`); what changes is the arithmetic
(BFV with SIMD slots, :mod:`ray_vfl.crypto.lattice`) and these messages.

Keys. S generates one BFV key pair per plaintext prime (ring degree 8192, SEAL's 218-bit
coefficient modulus: 128-bit security by the HE standard's table) and publishes the public keys; it is
the only one that can decrypt what C holds, as BCP's master key is. So the LBP encrypts its first
margins and labels under S's keys directly (no KeyProd). Every participant makes its own BFV key pair
(same parameters) for the two things only it may read: its winner notes and, at the LBP, the
predictions; S re-encrypts masked values to those keys (``switch_step``), as BCP's TransDec does.

What S sees (every ciphertext it decrypts was masked by a fresh public-key encryption of a uniform
value and flooded by whoever made it, :mod:`ray_vfl.crypto.lattice.keys`: the decryption noise is
within ``2^-40`` per ciphertext of noise independent of how it was computed): Mult and Regroup
operands ``x + r`` with ``r`` uniform in ``Z_T`` (exactly uniform); Trunc values ``x + r`` with ``r``
uniform in ``[0, 2^(l + kappa))`` (statistical distance ``2^-kappa`` per value, ``kappa = 80`` at the
defaults); LGT's ``s (r d + r')`` per slot (not shuffled: the magnitude of each ``|y - x|``, see
:mod:`ray_vfl.crypto.lattice.two_server`); in the slot sums, tiles and spreads
(:mod:`ray_vfl.crypto.lattice.slot_sums`) uniform values in every slot; and public sizes.

=========  ==============================  ===========================================  ==============================================
when       sender -> receiver              payload                                      what the receiver learns
=========  ==============================  ===========================================  ==============================================
once       S -> C                          the number of primes and S's BFV public      nothing (public keys, drawn before S sees
           (ssxgb_lattice_params)          keys                                         any message)
once       C -> LBP, i                     the same, forwarded                          nothing (public keys)
           (ssxgb_lattice_public_params)
once       i -> C                          its own BFV public keys                      nothing (public keys, drawn before any data
           (ssxgb_lattice_user_key)                                                     is read)
once       LBP -> C                        the LBP's own BFV public keys                nothing (public keys)
           (ssxgb_lattice_user_key)
once       LBP -> C                        ``Enc_S(base + first-tree margin)``,         nothing (ciphertexts)
           (ssxgb_lattice_init)            ``Enc_S(label)``, dense
every      C -> S                          the steps of :mod:`ray_vfl.ssxgb.protocol`   Mult, Regroup, tiles, tile sums, broadcast,
           (ssxgb_s_request)               (Mult, Trunc, LGT, Regroup) and the slot     switch: nothing (uniform in ``Z_T`` per
                                           steps (tile, tile sums, broadcast, switch)   slot); Trunc: nothing (statistical,
                                           on masked, flooded ciphertexts; the          ``2^-kappa``); LGT: each slot's ``|y - x|``
                                           participants' public keys (once)             magnitude (not shuffled on this engine)
                                                                                        [attack: ssxgb.attack_views.lgt_magnitudes]
every      S -> C                          fresh encryptions by S                       nothing (ciphertexts under S's keys, or a
           (ssxgb_s_reply)                                                              participant's)
tree       C -> LBP, i                     sampled rows (public), ``Enc(g)`` and        nothing (ciphertexts under S's keys)
           (ssxgb_lattice_gradients)       ``Enc(h)`` tiled, ``m / B`` blocks each
level      i -> C                          masked tile products of its candidates'      nothing (ciphertexts) but how many
           (ssxgb_lattice_left_sums)       row sets (every slot masked, flooded),       candidates i has
                                           ``Enc(-mask sums)``
level      LBP -> C                        the same, of the LBP's candidates            nothing (ciphertexts) but how many
           (ssxgb_lattice_left_sums)                                                    candidates the LBP has
level      C -> LBP, i                     per node ``Enc_i(v_i)`` under i's own        owner: which of its candidates won; others:
           (ssxgb_lattice_win)             key: the winner's local index at its         only that the node is not theirs (``v_i``
                                           owner, uniform in ``Z_T`` elsewhere          uniform)
                                                                                        [attack: ssxgb.attack.winner_notes_attack]
                                                                                        [attack: ssxgb.attack_views.partition_labels]
level      i -> C                          the won node's left branch, the owner's      C: the partition and the owner of the split
           (ssxgb_left_branch)             record number                                [attack: ssxgb.attack_views.partition_labels]
level      LBP -> C                        the same, of the nodes the LBP won           C: as from i
           (ssxgb_left_branch)                                                          [attack: ssxgb.attack_views.partition_labels]
level      C -> LBP, i                     children ids and where each node's rows go   the instance space of every node
           (ssxgb_partition)                                                            [attack: ssxgb.attack_views.partition_labels]
predict    i -> C                          left/right of every prediction row at        C: each row's leaf in every federated tree
           (ssxgb_route)                   each split i owns                            [attack: ssxgb.attack_views.partition_labels]
predict    LBP -> C                        the same, at the LBP's splits                C: as from i
           (ssxgb_route)                                                                [attack: ssxgb.attack_views.partition_labels]
predict    C -> LBP                        ``Enc_LBP(sum of leaf weights)`` of every    the margins (it adds its first tree)
           (ssxgb_lattice_prediction)      row, a few dense blocks                      [attack: ssxgb.attack_views.margin_features]
predict    LBP -> caller                   the margins, sealed to the caller's key      the predictions it asked for
           (ssxgb_margins)
=========  ==============================  ===========================================  ==============================================

Left branches, partitions, routes and the margins to the caller are those of
:mod:`ray_vfl.ssxgb.protocol`; S's steps here add ``tile_step``, ``tile_sum_step``, ``broadcast_step``, ``switch_step`` and ``user_keys_step``.
Not on this engine yet: saving a model and checkpoints (refused with a ConfigError).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..crypto.lattice.keys import LatticeKeys, LatticePublic, load_ct
from ..crypto.lattice.ring import RingParams
from ..crypto.lattice.server_s import LatticeServerS, ring_for
from ..crypto.lattice.slot_sums import encrypt_blocks, masked_tile_products
from ..crypto.two_server.server_s import TwoServerConfig
from ..errors import ConfigError, DataError
from ..runtime.comm import Message
from ..runtime.payload_shapes import describe
from .participant import Participant, fetch
from .server_s import ServerSRole
from . import lattice_messages  # noqa: F401  (registers the lattice message kinds)

__all__ = ["LatticeParticipant", "LatticeServerSRole"]


class LatticeServerSRole(ServerSRole):
    """Server S on the lattice engine: the BFV secret keys and the answers to C's masked requests."""

    def setup(self) -> tuple:
        ring = ring_for(TwoServerConfig(self.config.value_bits, self.config.kappa))
        keys = LatticeKeys(ring)
        self.server = LatticeServerS(keys, TwoServerConfig(self.config.value_bits, self.config.kappa),
                                     record_view=self.record_view)
        payload = {"n_primes": ring.n_primes, "public_keys": list(keys.exported)}
        return None, self.mailbox.send("ssxgb_lattice_params", [self.server_c], payload)

    def answer(self, message: Message) -> Message:
        p = self.mailbox.open(message, "ssxgb_s_request", None, [self.server_c])
        if self.record_view:
            self.received.append((p["step"], describe(p["args"])))
        reply = getattr(LatticeServerS, p["step"])(self.server, *p["args"])
        return self.mailbox.send("ssxgb_s_reply", [self.server_c], reply, message.tree, message.depth)

    def model_part(self) -> dict[str, Any]:
        raise ConfigError("saving an SSXGB model trained with engine='lattice' is not supported yet: use engine='bcp'")

    def view(self) -> dict[str, Any]:
        return {"received": list(self.received), "decrypted": list(self.server.view) if self.server else []}


class LatticeParticipant(Participant):
    """A participant on the lattice engine: its own BFV keys; left sums as masked tile products."""

    def make_key(self, message: Any) -> tuple:
        (msg,) = fetch([message])
        p = self.mailbox.open(msg, "ssxgb_lattice_public_params", None, [self.server_c])
        ring = RingParams(int(p["n_primes"]))
        self.pub = LatticePublic(ring, [bytes(b) for b in p["public_keys"]])
        self.own = LatticeKeys(ring)  # this participant's key pair: its notes and (LBP) predictions
        self.ctx = {"n_primes": ring.n_primes, "slots": ring.slots}
        return None, self.mailbox.send("ssxgb_lattice_user_key", [self.server_c], list(self.own.exported))

    def take_joint_key(self, message: Any) -> None:
        """Nothing to take: S's public keys serve as the joint key on this engine."""

    def lbp_init(self) -> tuple:
        if not self.is_lbp:
            return None, None
        from .first_tree import fit_first_tree
        f, ring = self.config.frac_bits, self.pub.ring
        self.first = fit_first_tree(self.rows["train"], self.y, self.config)
        margin = np.rint(np.ldexp(self.first.margins(self.rows["train"]), f)).astype(np.int64)
        payload = {"n_rows": int(self.n_rows), "margin": encrypt_blocks(self.pub, ring.to_residues(margin)),
                   "label": encrypt_blocks(self.pub, ring.to_residues([int(v) << f for v in self.y]))}
        self.ops["encrypt"] += 2 * self.n_rows
        return None, self.mailbox.send("ssxgb_lattice_init", [self.server_c], payload)

    def take_gradients(self, message: Any) -> None:
        """The tree's sampled rows and ``Enc(g)``, ``Enc(h)`` tiled (``ceil(m / B)`` blocks each)."""
        (msg,) = fetch([message])
        ctx = {**self.ctx, "n_rows": self.n_rows}
        p = self.mailbox.open(msg, "ssxgb_lattice_gradients", ctx, [self.server_c])
        self.tiled = [[[load_ct(self.pub.contexts[i], bytes(b)) for i, b in enumerate(row)] for row in p[part]]
                      for part in ("g", "h")]
        self.n_sampled = len(p["rows"])
        self._start_tree(p["rows"])

    def left_sums(self, depth: int) -> tuple:
        """Per open node and candidate, the 0/1 set of sampled rows left of it, multiplied into the tiled
        ``Enc(g)``, ``Enc(h)``, masked in every slot and flooded (:func:`masked_tile_products`), with
        ``Enc(-mask sums)``: S sums the tiles for C."""
        bins, ring = self.rows["train"], self.pub.ring
        order = np.argsort(self.pos_of_row)[self.n_rows - self.n_sampled:]  # the sampled rows by position
        sets = []
        for node in self.open_nodes:
            here = self.node_of_row[order] == node
            for f, b in self.candidates:
                sets.append(here & (bins[order, f] <= b))
        k = len(self.candidates)
        sets = np.stack(sets) if sets else np.zeros((0, self.n_sampled), dtype=bool)
        payload = {"node": np.asarray(self.open_nodes, dtype=np.int64), "k": k}
        for part, tiled in zip(("g", "h"), self.tiled):
            blocks, neg = masked_tile_products(self.pub, tiled, sets) if k else ([], np.zeros((ring.n_primes, 0), np.uint64))
            payload[part], payload[part + "_mask"] = blocks, encrypt_blocks(self.pub, neg)
        self.ops["encrypt"] += 2 * len(sets)
        return None, self.mailbox.send("ssxgb_lattice_left_sums", [self.server_c], payload, self.tree, depth)

    def take_win(self, depth: int, message: Any) -> tuple:
        (msg,) = fetch([message])
        p = self.mailbox.open(msg, "ssxgb_lattice_win", {**self.ctx, "open_nodes": set(self.open_nodes)},
                              [self.server_c])
        notes = self._decrypt(p["idx"], len(p["node"]))
        return self._claim(depth, p, notes)

    def _decrypt(self, blocks: list, m: int) -> list[int]:
        ring, n = self.own.ring, self.own.ring.slots
        res = np.zeros((ring.n_primes, m), dtype=np.uint64)
        for b, row in enumerate(blocks):
            hi = min(n, m - b * n)
            for i, blob in enumerate(row):
                res[i, b * n:b * n + hi] = self.own.decrypt(i, load_ct(self.own.contexts[i], bytes(blob)))[:hi]
        self.ops["decrypt"] += m
        return ring.from_residues(res)

    def model_part(self) -> dict[str, Any]:
        raise ConfigError("saving an SSXGB model trained with engine='lattice' is not supported yet: use engine='bcp'")

    def _margins(self, key: str, message: Any) -> np.ndarray:
        if not self.is_lbp:
            raise DataError(f"only the LBP decrypts predictions, not {self.name!r}")
        (msg,) = fetch([message])
        bins = self.rows[key]
        out = self.mailbox.open(msg, "ssxgb_lattice_prediction", {**self.ctx, "n_rows": len(bins)}, [self.server_c])
        vals = np.asarray(self._decrypt(out, len(bins)), dtype=np.float64)
        return self.first.margins(bins) + np.ldexp(vals, -self.config.frac_bits)
