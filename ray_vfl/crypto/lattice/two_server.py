"""The two-server sub-protocols (Mult, Trunc, LGT, Regroup) on the lattice engine, for whole arrays.

Server S holds the BFV secret keys (:class:`~ray_vfl.crypto.lattice.keys.LatticeKeys`); server C holds
the public keys and every ciphertext. Plaintexts live in ``Z_T`` (``T`` a product of 30-bit primes,
:mod:`ray_vfl.crypto.lattice.ring`), with ``T > 2^(l + kappa + 4)`` (``l`` = ``value_bits``).

What S sees. Everything C sends has been masked, re-randomised (a fresh public-key encryption of the
mask added) and flooded (:mod:`ray_vfl.crypto.lattice.keys`: the decryption noise is within ``2^-40``
per ciphertext of noise independent of C's operations). An operand made of several terms
(:mod:`ray_vfl.crypto.lattice.arrays`) is sent term by term, each with its own share of the mask
(all shares but one uniform in ``Z_T``), so any proper subset of the opened terms is uniform and S
learns only their sum. Slots of a block that hold no element of the operand get uniform values.
Terms of several operands of one request that sit in one block at disjoint slots are masked and sent
as one block (each operand's shares at its slots, the other slots uniform), which S decrypts once.

* Mult: ``X = x + r`` with ``r`` uniform in ``Z_T`` (exact: ``X`` is uniform, whatever ``x``). S returns
  fresh ``Enc(X_i X_j)`` per pair and, for each operand that is not already one fresh term holding every element,
  ``Enc(X_i)``; C computes ``Enc(x y) = Enc(XY) - r_j Enc(X_i) - r_i Enc(X_j) + r_i r_j`` (with ``x_i``'s own
  ciphertext in place of ``X_i`` where it is fresh, and the constant adjusted), mod ``T``, exact while
  ``|x y| < T/2`` (the declared bounds guarantee it). Its output's noise does not depend on the operands'
  history, and each operand that came back is replaced by ``Enc(X_i) - r_i``: one dense fresh term with
  the same values (so sums of slot-shifted terms do not pile up over a tournament).
* Trunc: ``X = x + r``, ``r`` uniform in ``[0, 2^(l + kappa))`` (statistical, ``2^-kappa`` per value for
  ``|x| < 2^l``); S returns ``Enc(floor(X / 2^k))``; C subtracts ``floor(r / 2^k)``: ``floor(x / 2^k) + e``,
  ``e`` in ``{0, 1}``.
* LGT: ``v = s (r d + r')``, ``d = 2 (y - x) - 1``, ``s`` a random sign, ``r`` in ``[2^(kappa-1), 2^kappa)``,
  ``r'`` in ``(-r, r)`` (as the BCP engine); S returns ``Enc([v > 0])``, C flips it where ``s = -1``.
  NOT shuffled: S opens each element's ``|v|`` at a slot it can name, so it learns the approximate
  magnitude of each element's ``|y - x|`` (the BCP engine shuffles, leaking only their multiset).
  Shuffling slots obliviously needs rotations (Galois keys) or a permutation network; not done.
* Regroup: ``X = x + r`` uniform; S returns ``Enc(X)`` dense; C subtracts ``r``. It refreshes noise and
  materialises a sum of terms.

S refuses Trunc and LGT values outside the ranges every in-bound input stays in (as the BCP engine).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from ray_vfl.crypto.lattice.arrays import (FRESH_NOISE, PLAIN_NOISE, LatticeArray, LatticeOps, Term, dense_term,
                                          frac_of)
from ray_vfl.crypto.lattice.keys import LatticePublic, flood, load_ct, save_ct, _seal
from ray_vfl.crypto.lattice.ring import uniform_residues
from ray_vfl.crypto.lattice.server_s import LatticeServerS, decrypt_ints, ring_for
from ray_vfl.crypto.two_server.server_s import TwoServerConfig
from ray_vfl.errors import ConfigError, CryptoError

__all__ = ["LatticeServerC", "LatticeServerS", "decrypt_ints", "ring_for"]  # S's part re-exported from .server_s


def _bits_uniform(bits: int, count: int) -> list[int]:
    raw = os.urandom(((bits + 7) // 8) * count)
    w = (bits + 7) // 8
    mask = (1 << bits) - 1
    return [int.from_bytes(raw[i * w:(i + 1) * w], "little") & mask for i in range(count)]


# -- server C ---------------------------------------------------------------------------------------
class LatticeServerC:
    """Server C on the lattice engine: the interface of
    :class:`~ray_vfl.crypto.two_server.server_c.ServerC` that SSXGB's array algorithms use
    (``bcp``, ``key_of``, ``encrypt_ints``, ``exp``, ``mult_many``, ``trunc``, ``trunc_many``, ``lgt``,
    ``config``, ``pool``), so :func:`~ray_vfl.ssxgb.secure_math.clamped_gradients`,
    :func:`~ray_vfl.ssxgb.splits.gain_fractions`, :func:`~ray_vfl.ssxgb.splits.best_candidates` and
    :func:`~ray_vfl.ssxgb.secure_math.leaf_weights` (the reciprocal) run on it unchanged.

    Parameters
    ----------
    pub : LatticePublic
        The public keys S published (``LatticePublic(ring, keys.exported)``).
    link : object with ``ask(step, *payload)`` (:class:`~ray_vfl.crypto.two_server.server_s.LocalLink`)
    config : TwoServerConfig
    """

    def __init__(self, pub: LatticePublic, link: Any, config: TwoServerConfig = TwoServerConfig()) -> None:
        if not isinstance(pub, LatticePublic):
            raise CryptoError(f"server C needs LatticePublic keys, got {type(pub).__name__}")
        if not isinstance(config, TwoServerConfig):
            raise ConfigError(f"config must be a TwoServerConfig, got {type(config).__name__}")
        if pub.ring.plain_bits < config.value_bits + config.kappa + 3:
            raise ConfigError("the ring's plaintext modulus is too small for value_bits + kappa: use ring_for(config)")
        self.pub, self.link, self.config = pub, link, config
        self.ring = pub.ring
        self.bcp = LatticeOps(pub, refresh=self.regroup)
        self.pool = None
        self.key_id = hashlib.sha256(b"".join(save_ct(pk) for pk in pub.public_keys[:1])).digest()[:16]

    # -- keys and local operations ------------------------------------------------------------------
    def key_of(self, c: LatticeArray) -> LatticePublic:
        frac_of(c)
        return self.pub

    def _encrypt_res(self, res: np.ndarray, frac: int) -> LatticeArray:
        ring, n = self.ring, self.ring.slots
        m = res.shape[1]
        cts = []
        for start in range(0, max(m, 1), n):
            part = np.zeros((ring.n_primes, n), dtype=np.uint64)
            part[:, :min(n, m - start)] = res[:, start:start + n]
            cts.append([self.pub.encrypt(i, part[i]) for i in range(ring.n_primes)])
        return LatticeArray([dense_term(cts, m, n, FRESH_NOISE)], m, frac, self.key_id)

    def encrypt_ints(self, pk: Any, ms: Sequence[int], frac_bits: int = 0) -> LatticeArray:
        return self._encrypt_res(self.ring.to_residues(list(ms)), frac_bits)

    def exp(self, c: LatticeArray, k: Sequence[int] | np.ndarray, frac_bits: int = 0) -> LatticeArray:
        return self.bcp.mul_const(self.pub, c, k, frac_bits)

    def _load_dense(self, blobs: list[list[bytes]], m: int, noise: int) -> Term:
        cts = [[load_ct(self.pub.contexts[i], b) for i, b in enumerate(row)] for row in blobs]
        return dense_term(cts, m, self.ring.slots, noise)

    def _unpack(self, blobs: list[list[bytes]], lengths: Sequence[int], noise: int) -> list[Term]:
        """The dense terms of arrays whose blocks S listed one array after another (:meth:`LatticeServerS._listed`)."""
        n, out, at = self.ring.slots, [], 0
        for m in lengths:
            size = max(-(-int(m) // n), 1)
            out.append(self._load_dense(blobs[at:at + size], int(m), noise))
            at += size
        if at != len(blobs):
            raise CryptoError(f"server S replied with {len(blobs)} blocks, {at} expected")
        return out

    def _add_plain(self, t: Term, res: np.ndarray) -> Term:
        """A term holding every element plus per-element residues (in place of its ciphertexts' copies)."""
        ev = self.pub.evaluators
        parts = [self.bcp.slot_values(t, b, res) for b in range(len(t.cts))]
        cts = self.bcp.map_cts(t, lambda b, i, u, w: ev[i].add_plain(u, self.pub.plaintext(i, parts[b][i]), w))
        return Term(cts, t.block, t.slot, t.noise + 1)

    # -- sending to S -------------------------------------------------------------------------------
    def _covered(self, c: LatticeArray) -> LatticeArray:
        """``c`` with every element held by at least one term (adds an encryption of 0 if not)."""
        hit = np.zeros(c.length, dtype=bool)
        for t in c.terms:
            hit |= t.covered()
        if hit.all():
            return c
        return self.bcp.add(self.pub, c, self._encrypt_res(np.zeros((self.ring.n_primes, c.length), np.uint64), c.frac))

    def _send(self, c: LatticeArray, mask: np.ndarray) -> list:
        return self._send_many([c], [mask])[0]

    def _send_many(self, arrays: Sequence[LatticeArray], masks: Sequence[np.ndarray]) -> list:
        """The terms of each ``c`` masked so their opened sum is ``x + mask``: re-randomised and flooded.
        Terms of several arrays that sit in one block at disjoint slots are sent as one masked block
        (each array's shares at its slots, every other slot uniform): one ciphertext per prime for
        all of them, opened once by S (slots that hold nothing of an operand stay uniform to S)."""
        shares = [self._shares(self._covered(c), mask) for c, mask in zip(arrays, masks)]
        ring, ev, n = self.ring, self.pub.evaluators, self.ring.slots
        sheets: dict[int, list[list]] = {}  # id of a block's ciphertexts -> [[taken slots, values, row], ...]
        places = []
        for per_array in shares:
            for t, share in per_array:
                for b, row in enumerate(t.cts):
                    sel = t.block == b
                    used = t.slot[sel]
                    group = sheets.setdefault(id(row), [])
                    sheet = next((sh for sh in group if not sh[0][used].any()), None)
                    if sheet is None:
                        sheet = [np.zeros(n, dtype=bool), uniform_residues(ring, n), row, None]
                        group.append(sheet)
                    sheet[0][used] = True
                    sheet[1][:, used] = share[:, sel]
                    places.append(sheet)
        for group in sheets.values():
            for sheet in group:
                sent = []
                for i, u in enumerate(sheet[2]):
                    w = _seal().Ciphertext()
                    ev[i].add(u, self.pub.encrypt(i, sheet[1][i]), w)
                    sent.append(flood(save_ct(w), self.pub.moduli, self.pub.flood_bits))
                sheet[3] = sent
        out, k = [], 0
        for per_array in shares:
            terms = []
            for t, _ in per_array:
                terms.append(([places[k + b][3] for b in range(len(t.cts))], t.block, t.slot))
                k += len(t.cts)
            out.append(terms)
        return out

    def _shares(self, c: LatticeArray, mask: np.ndarray) -> list[tuple[Term, np.ndarray]]:
        """Each term of ``c`` with its share of ``mask`` (every covering term but the last of an element
        a uniform share, the last the rest); refuses a term too noisy for the flooding."""
        ring = self.ring
        limit = self.pub.hide_limit
        # per element, every covering term but the last gets a uniform share, the last the rest
        cover = np.stack([t.covered() for t in c.terms])
        last_term = cover.shape[0] - 1 - np.argmax(cover[::-1], axis=0)
        shares = []
        rest = mask.copy()
        for n, t in enumerate(c.terms):
            u = uniform_residues(ring, c.length) * (cover[n] & (last_term != n)).astype(np.uint64)
            shares.append(u)
            rest = ring.sub(rest, u)
        for n in range(len(c.terms)):
            here = last_term == n
            shares[n][:, here] = rest[:, here]
        for t in c.terms:
            if t.noise + 1 > limit:
                raise CryptoError(f"a ciphertext's noise bound ({t.noise} bits) is past what flooding hides "
                                  f"({limit}): refresh it (regroup) before sending")
        return list(zip(c.terms, shares))

    # -- Regroup --------------------------------------------------------------------------------------
    def regroup(self, c: LatticeArray) -> LatticeArray:
        """``c`` as one dense, fresh term (1 round): refreshes noise, sums lazy terms."""
        r = uniform_residues(self.ring, c.length)
        reply = self.link.ask(LatticeServerS.regroup_step, self._send(c, r), c.length)
        t = self._add_plain(self._load_dense(reply, c.length, FRESH_NOISE), self.ring.neg(r))
        return LatticeArray([t], c.length, c.frac, self.key_id)

    # -- Mult -----------------------------------------------------------------------------------
    def mult(self, a: LatticeArray, b: LatticeArray) -> LatticeArray:
        return self.mult_many([(a, b)])[0]

    def mult_many(self, pairs: Sequence[tuple[LatticeArray, LatticeArray]],
                  bounds: Sequence[tuple[int, int]] | None = None,
                  keep: Sequence[LatticeArray] = ()) -> list[LatticeArray]:
        """Mult of several pairs in one round (module docstring); exact while ``|x y| < T / 2``.
        ``bounds`` (optional): per pair ``(bx, by)`` with ``|x| < 2^bx``, ``|y| < 2^by``, checked to fit
        (``bx + by <= plain_bits``). ``keep``
        is accepted for the BCP signature and needs nothing here: a fresh uniform mask hides exactly."""
        top = self.config.value_bits
        if bounds is not None:
            bounds = list(bounds)
            if len(bounds) != len(pairs) or any(type(b) is not int or not 1 <= b <= top for p in bounds for b in p):
                raise CryptoError(f"Mult bounds must be one (bits of x, bits of y) pair per product, each in [1, {top}]")
            if any(bx + by > self.ring.plain_bits for bx, by in bounds):
                raise CryptoError("a Mult product may not fit the plaintext modulus: lower the bounds")
        operands: list[LatticeArray] = []
        index = []
        for a, b in pairs:
            if len(a) != len(b):
                raise CryptoError(f"Mult needs arrays of equal length, got {len(a)} and {len(b)}")
            ends = []
            for arr in (a, b):
                frac_of(arr)
                pos = next((n for n, op in enumerate(operands) if op is arr), None)
                if pos is None:
                    pos = len(operands)
                    operands.append(arr)
                ends.append(pos)
            index.append(tuple(ends))
        ring = self.ring
        masks = [uniform_residues(ring, len(op)) for op in operands]
        # an operand that is one fresh term holding every element serves its own cross terms; any other gets Enc(X) back
        back = [not (len(op.terms) == 1 and op.terms[0].covered().all() and op.terms[0].noise <= FRESH_NOISE + 2)
                for op in operands]
        opened, products = self.link.ask(LatticeServerS.mult_step, self._send_many(operands, masks),
                                         [len(op) for op in operands], index, back)
        came = iter(self._unpack(opened, [len(op) for op, b in zip(operands, back) if b], FRESH_NOISE))
        made = self._unpack(products, [len(operands[i]) for i, _ in index], FRESH_NOISE)
        xs = []
        for op, r, flag in zip(operands, masks, back):
            if not flag:
                xs.append((op.terms[0], False))
                continue
            big_x = next(came)
            xs.append((big_x, True))
            # x = X - r: the operand becomes one dense fresh term (same values, no round)
            op.terms = [self._add_plain(big_x, ring.neg(r))]
        out = []
        for (i, j), product in zip(index, made):
            m = len(operands[i])
            # XY - r_j X_i - r_i X_j + r_i r_j, or with x itself: XY - r_j x_i - r_i x_j - r_i r_j
            (xi, opened_i), (xj, opened_j) = xs[i], xs[j]
            const = ring.mul(masks[i], masks[j])
            for flag in (opened_i, opened_j):
                if not flag:
                    const = ring.sub(const, ring.mul(masks[i], masks[j]))
            acc = LatticeArray([self._add_plain(product, const)],
                               m, operands[i].frac + operands[j].frac, self.key_id)
            cross = [self.bcp.mul_plain(xi, ring.neg(masks[j])), self.bcp.mul_plain(xj, ring.neg(masks[i]))]
            for t in cross:
                acc = self.bcp.add(self.pub, acc, LatticeArray([t], m, acc.frac, self.key_id))
            out.append(acc)
        return out

    # -- Trunc ----------------------------------------------------------------------------------
    def trunc(self, c: LatticeArray, k: int) -> LatticeArray:
        return self.trunc_many([c], k)[0]

    def trunc_many(self, arrays: Sequence[LatticeArray], k: int) -> list[LatticeArray]:
        """Trunc of several arrays by ``k`` bits in one round: ``floor(x / 2^k) + e``, ``e`` in ``{0, 1}``."""
        bits = self.config.mask_bits
        for c in arrays:
            if not 0 < k <= frac_of(c):
                raise CryptoError(f"Trunc by {k} bits of an array of scale {c.frac}: shift must be in [1, {c.frac}]")
        rs = [_bits_uniform(bits, len(c)) for c in arrays]
        reply = self.link.ask(LatticeServerS.trunc_step,
                              self._send_many(arrays, [self.ring.to_residues(r) for r in rs]), [len(c) for c in arrays], int(k))
        out = []
        for c, r, got in zip(arrays, rs, self._unpack(reply, [len(c) for c in arrays], FRESH_NOISE)):
            t = self._add_plain(got, self.ring.to_residues([-(v >> k) for v in r]))
            out.append(LatticeArray([t], len(c), c.frac - k, self.key_id))
        return out

    # -- LGT --------------------------------------------------------------------------------------
    def lgt(self, a: LatticeArray, b: LatticeArray) -> LatticeArray:
        """``Enc([x < y])`` element-wise (1 round; module docstring)."""
        if frac_of(a) != frac_of(b) or len(a) != len(b):
            raise CryptoError("LGT needs arrays of equal length and scale")
        m, kappa, ring = len(a), self.config.kappa, self.ring
        diff = self.bcp.sub(self.pub, b, a)
        if diff.noise + PLAIN_NOISE + 1 > self.pub.hide_limit:
            diff = self.regroup(diff)
        signs = [1 if v & 1 else -1 for v in _bits_uniform(1, m)]
        rs = [v | (1 << (kappa - 1)) for v in _bits_uniform(kappa - 1, m)]
        r2 = [int.from_bytes(os.urandom((kappa + 8) // 8 + 1), "little") % (2 * r - 1) - (r - 1) for r in rs]
        scale = ring.to_residues([2 * s * r for s, r in zip(signs, rs)])
        scaled = LatticeArray([self.bcp.mul_plain(t, scale) for t in diff.terms], m, diff.frac, diff.key_id)
        offset = ring.to_residues([s * (rp - r) for s, r, rp in zip(signs, rs, r2)])  # v = s(2r(y - x) - r + r')
        reply = self.link.ask(LatticeServerS.lgt_step, self._send(scaled, offset), m)
        bit = self._load_dense(reply, m, FRESH_NOISE)
        flipped = self.bcp.mul_plain(bit, ring.to_residues(signs))
        t = self._add_plain(flipped, ring.to_residues([(1 - s) // 2 for s in signs]))
        return LatticeArray([t], m, 0, self.key_id)
