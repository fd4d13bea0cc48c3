"""Server S of the lattice engine: it holds the BFV secret keys and answers server C's masked,
flooded requests (what it sees is argued in :mod:`ray_vfl.crypto.lattice.two_server`).
"""

from __future__ import annotations

import numpy as np

from ray_vfl.crypto.lattice.arrays import LatticeArray
from ray_vfl.crypto.lattice.keys import LatticeKeys, LatticePublic, load_ct, save_ct
from ray_vfl.crypto.lattice.ring import RingParams
from ray_vfl.crypto.lattice.slot_sums import row_block, tiled_layout
from ray_vfl.crypto.two_server.server_s import TwoServerConfig
from ray_vfl.errors import ConfigError, CryptoError

__all__ = ["LatticeServerS", "decrypt_ints", "ring_for"]


def ring_for(config: TwoServerConfig) -> RingParams:
    """The least ring whose ``T`` holds LGT's and Trunc's masked values: ``l + kappa + 3`` signed bits."""
    if not isinstance(config, TwoServerConfig):
        raise ConfigError(f"config must be a TwoServerConfig, got {type(config).__name__}")
    return RingParams.for_bits(config.value_bits + config.kappa + 3)



# -- server S ---------------------------------------------------------------------------------------
class LatticeServerS:
    """Server S: the secret keys; answers C's steps on masked, flooded ciphertexts.
    ``record_view=True`` keeps what S opened, ``(step, list of centered ints)``, in :attr:`view`, and
    the noise budget left in each ciphertext it decrypted in :attr:`budgets` (tests audit both)."""

    def __init__(self, keys: LatticeKeys, config: TwoServerConfig = TwoServerConfig(), record_view: bool = False) -> None:
        if not isinstance(keys, LatticeKeys):
            raise CryptoError(f"server S needs LatticeKeys, got {type(keys).__name__}")
        if keys.ring.plain_bits < config.value_bits + config.kappa + 3:
            raise ConfigError("the ring's plaintext modulus is too small for value_bits + kappa: use ring_for(config)")
        self.keys, self.config = keys, config
        self.record_view = record_view
        self.view: list[tuple[str, list[int]]] = []
        self.budgets: list[int] = []  # record_view: SEAL's noise budget of every ciphertext opened

    def _open(self, operand: list[tuple[list[list[bytes]], np.ndarray, np.ndarray]], m: int,
              cache: dict | None = None) -> np.ndarray:
        """``(k, m)`` residues of an operand: the sum of its opened terms. ``cache``: the decrypted
        blocks of this request (C sends one block holding several operands' slots once)."""
        ring, keys = self.keys.ring, self.keys
        cache = {} if cache is None else cache
        acc = np.zeros((ring.n_primes, m), dtype=np.uint64)
        for blobs, block, slot in operand:
            block, slot = np.asarray(block, dtype=np.int64), np.asarray(slot, dtype=np.int64)
            if block.shape != (m,) or slot.shape != (m,) or slot.min(initial=0) < 0 or slot.max(initial=0) >= ring.slots:
                raise CryptoError("a term's slot map does not fit the operand")
            for b, row in enumerate(blobs):
                sel = block == b
                if len(row) != ring.n_primes:
                    raise CryptoError(f"a block must hold {ring.n_primes} ciphertexts, one per prime")
                for i, blob in enumerate(row):
                    vals = cache.get(blob)
                    if vals is None:
                        ct = load_ct(keys.contexts[i], blob)
                        if self.record_view:
                            self.budgets.append(keys.noise_budget(i, ct))
                        vals = cache[blob] = keys.decrypt(i, ct)
                    acc[i, sel] = (acc[i, sel] + vals[slot[sel]]) % np.uint64(ring.primes[i])
        return acc

    def _dense(self, res: np.ndarray) -> list[list[bytes]]:
        ring, n = self.keys.ring, self.keys.ring.slots
        m = res.shape[1]
        out = []
        for start in range(0, max(m, 1), n):
            part = np.zeros((ring.n_primes, n), dtype=np.uint64)
            part[:, :min(n, m - start)] = res[:, start:start + n]
            out.append([save_ct(self.keys.encrypt(i, part[i])) for i in range(ring.n_primes)])
        return out

    def _listed(self, arrays: list[np.ndarray]) -> list[list[bytes]]:
        """The arrays' blocks one after another, each array starting a block (element ``j`` at slot
        ``j mod N``, as a fresh encryption: C's sums of replies stay slot-aligned, one SIMD addition)."""
        return [row for res in arrays for row in self._dense(res)]

    def _record(self, step: str, res: np.ndarray) -> None:
        if self.record_view:
            self.view.append((step, self.keys.ring.from_residues(res)))

    def mult_step(self, operands: list, lengths: list[int], pairs: list[tuple[int, int]],
                  back: list[bool] | None = None) -> tuple[list, list]:
        """Open each operand ``X``; return (``Enc(X)`` of the operands ``back`` flags, their blocks in one
        list in operand order; ``Enc(X_i X_j)`` of the pairs, in pair order), each dense."""
        ring, cache = self.keys.ring, {}
        opened = [self._open(op, int(m), cache) for op, m in zip(operands, lengths)]
        back = [True] * len(opened) if back is None else list(back)
        for res in opened:
            self._record("mult", res)
        if len(back) != len(opened) or not all(isinstance(p, (tuple, list)) and len(p) == 2 and all(
                type(i) is int and 0 <= i < len(opened) and opened[i].shape[1] == opened[p[0]].shape[1] for i in p)
                for p in pairs):
            raise CryptoError("mult_step: pairs must index operands of equal length (and back flag each operand)")
        return (self._listed([x for x, b in zip(opened, back) if b]),
                self._listed([ring.mul(opened[i], opened[j]) for i, j in pairs]))

    def trunc_step(self, operands: list, lengths: list[int], shift: int) -> list:
        """Open ``X = x + r``; return ``Enc(floor(X / 2^k))`` of every operand, dense, blocks in one list
        (refused past ``x``'s range)."""
        ring, cfg, cache = self.keys.ring, self.config, {}
        lo, hi = -(1 << cfg.value_bits), (1 << cfg.mask_bits) + (1 << cfg.value_bits)
        if type(shift) is not int or not 0 < shift <= cfg.value_bits:
            raise CryptoError(f"trunc_step: shift must be an int in [1, {cfg.value_bits}], got {shift!r}")
        out = []
        for op, m in zip(operands, lengths):
            vals = ring.from_residues(self._open(op, int(m), cache))
            if self.record_view:
                self.view.append(("trunc", vals))
            if any(not lo < v < hi for v in vals):
                raise CryptoError(f"Trunc input outside |x| < 2^{cfg.value_bits} (value_bits): refused")
            out.append(ring.to_residues([v >> shift for v in vals]))
        return self._listed(out)

    def lgt_step(self, operand: list, length: int) -> list:
        """Open ``v``; return ``Enc([v > 0])`` dense (refused for ``|v| >= 2^(l + kappa + 2)``)."""
        ring = self.keys.ring
        vals = ring.from_residues(self._open(operand, int(length)))
        if self.record_view:
            self.view.append(("lgt", vals))
        if any(abs(v) >= self.config.lgt_bound for v in vals):
            raise CryptoError(f"LGT input outside |x|, |y| < 2^{self.config.value_bits} (value_bits): refused")
        return self._dense(ring.to_residues([int(v > 0) for v in vals]))

    # -- slot steps (:mod:`ray_vfl.crypto.lattice.slot_sums`): what S opens is uniform in every slot --------
    def user_keys_step(self, keys: dict) -> list:
        """Register each participant's public keys (one per prime) for :meth:`switch_step`."""
        if not isinstance(keys, dict) or not all(isinstance(v, (list, tuple)) for v in keys.values()):
            raise CryptoError("user_keys_step needs a dict of name -> public keys (one per prime)")
        self.users = {str(name): LatticePublic(self.keys.ring, list(blobs)) for name, blobs in keys.items()}
        return []

    def tile_step(self, operands: list, lengths: list[int]) -> list:
        """Open each ``X = x + r`` and return it tiled (:func:`~ray_vfl.crypto.lattice.slot_sums.tiled_layout`:
        block ``t`` holds ``X[t B + j]`` in ``N / B`` slots each), the operands' blocks one after another."""
        ring, cache, out = self.keys.ring, {}, []
        for op, m in zip(operands, lengths):
            res = self._open(op, int(m), cache)
            self._record("tile", res)
            for part in tiled_layout(res, ring.slots):
                out.append([save_ct(self.keys.encrypt(i, part[i])) for i in range(ring.n_primes)])
        return out

    def tile_sum_step(self, groups: list) -> list:
        """Per group ``(blocks, m, count, index)``: open each block (masked in every slot), sum each of its
        ``N / B`` columns over the ``B`` row positions (``B``: :func:`~ray_vfl.crypto.lattice.slot_sums.row_block`
        of ``m``), keep the first ``count`` sums (in block order) and, if ``index`` is not None, list them as
        ``sums[index]``; reply every group's sums dense, one array after another."""
        ring, keys, out = self.keys.ring, self.keys, []
        for blocks, m, count, index in groups:
            m, count = int(m), int(count)
            b = row_block(m, ring.slots) if m > 0 else 0
            w = ring.slots // b if b else 0
            if not b or count < 0 or count > len(blocks) * w:
                raise CryptoError("tile_sum_step: the blocks sent do not hold count sums of m rows")
            sums = np.zeros((ring.n_primes, len(blocks) * w), dtype=np.uint64)
            for o, row in enumerate(blocks):
                if len(row) != ring.n_primes:
                    raise CryptoError(f"a block must hold {ring.n_primes} ciphertexts, one per prime")
                for i, blob in enumerate(row):
                    vals = keys.decrypt(i, load_ct(keys.contexts[i], blob))
                    if self.record_view:
                        self.view.append(("tile_sum", vals.tolist()))
                    p = np.uint64(ring.primes[i])
                    sums[i, o * w:(o + 1) * w] = np.sum(vals.reshape(b, w) % p, axis=0) % p
            sums = sums[:, :count]
            if index is not None:
                index = np.asarray(index, dtype=np.int64)
                if index.ndim != 1 or (index.size and (index.min() < 0 or index.max() >= count)):
                    raise CryptoError("tile_sum_step: index must name sums of the group")
                sums = sums[:, index]
            out.append(sums)
        return self._listed(out)

    def broadcast_step(self, operand: list, length: int) -> list:
        """Open ``X = x + r`` (uniform) and return, per element ``X_l``, one block holding it in every slot."""
        ring = self.keys.ring
        res = self._open(operand, int(length))
        self._record("broadcast", res)
        return [[save_ct(self.keys.encrypt(i, np.full(ring.slots, res[i, j], np.uint64))) for i in range(ring.n_primes)]
                for j in range(res.shape[1])]

    def switch_step(self, operands: list, lengths: list[int], targets: list[str]) -> list:
        """Open each ``X = x + r`` (uniform) and return it under participant ``targets[j]``'s public keys, dense."""
        ring, cache, out = self.keys.ring, {}, []
        users = getattr(self, "users", {})
        for op, m, who in zip(operands, lengths, targets):
            if who not in users:
                raise CryptoError(f"switch_step: no public keys registered for {who!r}")
            res = self._open(op, int(m), cache)
            self._record("switch", res)
            for start in range(0, max(res.shape[1], 1), ring.slots):
                part = np.zeros((ring.n_primes, ring.slots), dtype=np.uint64)
                part[:, :min(ring.slots, res.shape[1] - start)] = res[:, start:start + ring.slots]
                out.append([save_ct(users[who].encrypt(i, part[i])) for i in range(ring.n_primes)])
        return out

    def regroup_step(self, operand: list, length: int) -> list:
        """Open ``X = x + r`` (uniform) and return ``Enc(X)`` dense."""
        res = self._open(operand, int(length))
        self._record("regroup", res)
        return self._dense(res)


def decrypt_ints(keys: LatticeKeys, c: LatticeArray) -> list[int]:
    """The centered integers of ``c`` (S's keys; for tests and examples, not a protocol step)."""
    ring = keys.ring
    acc = np.zeros((ring.n_primes, c.length), dtype=np.uint64)
    for t in c.terms:
        for b, row in enumerate(t.cts):
            sel = t.block == b
            for i, ct in enumerate(row):
                vals = keys.decrypt(i, ct)
                acc[i, sel] = (acc[i, sel] + vals[t.slot[sel]]) % np.uint64(ring.primes[i])
    return ring.from_residues(acc)


