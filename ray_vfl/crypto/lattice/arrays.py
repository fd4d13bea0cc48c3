"""Encrypted arrays of the lattice engine: values in slots, and the local operations on them.

A :class:`LatticeArray` of ``m`` values is a sum of *terms*. A term is a list of blocks (each block:
one BFV ciphertext per plaintext prime, ``N`` slots) and, per element, the block and slot holding it
(``-1``: the term contributes 0 to that element). Element ``i`` of the array is the sum over terms of
the slot it names. So :meth:`LatticeOps.take` and :meth:`LatticeOps.concat` are free (they rewrite
the slot maps), and an addition of two arrays whose elements sit in the same slots is one SIMD
addition per block; otherwise it keeps both terms (no rotation, no round). Server S sums the terms
of an operand after opening them (each masked with its own share of the operand's mask), and every
result S returns is dense (element ``i`` in block ``i // N``, slot ``i % N``).

Noise. Each term carries ``noise``, an upper bound (bits) on its ciphertexts' decryption noise by
SEAL's measured growth at these parameters (fresh encryption :data:`FRESH_NOISE`; a product by an
arbitrary plaintext adds :data:`PLAIN_NOISE`; by a constant ``k`` its bits plus one; an addition one).
Before C sends a term to S it must be at most :attr:`~ray_vfl.crypto.lattice.keys.LatticePublic.hide_limit`,
so the flooding hides it (:mod:`ray_vfl.crypto.lattice.keys`); a product that would pass the limit
first has C refresh the array through S (a round).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ray_vfl.crypto.lattice.keys import LatticePublic, _seal
from ray_vfl.errors import CryptoError

__all__ = ["FRESH_NOISE", "PLAIN_NOISE", "LatticeArray", "LatticeOps", "Term", "frac_of", "is_dense"]

FRESH_NOISE = 10   # measured 8 bits (budget 136 of 144) at N = 8192, 30-bit primes
PLAIN_NOISE = 37   # measured 35 bits for a uniform plaintext


@dataclass
class Term:
    cts: list[list[Any]]      # [block][prime] ciphertexts
    block: np.ndarray         # int64 per element, -1: not in this term
    slot: np.ndarray          # int64 per element
    noise: int

    def covered(self) -> np.ndarray:
        return self.block >= 0


class LatticeArray:
    """Encrypted integers in BFV slots (see the module docstring); ``tag`` is ``'lat:f<frac_bits>'``."""

    def __init__(self, terms: list[Term], length: int, frac: int, key_id: bytes) -> None:
        self.terms = terms
        self.length = int(length)
        self.frac = int(frac)
        self.key_id = key_id

    @property
    def tag(self) -> str:
        return f"lat:f{self.frac}"

    def __len__(self) -> int:
        return self.length

    @property
    def noise(self) -> int:
        return max((t.noise for t in self.terms), default=0)


def frac_of(c: Any) -> int:
    if not isinstance(c, LatticeArray):
        raise CryptoError(f"expected a LatticeArray, got {type(c).__name__}")
    return c.frac


def dense_term(cts: list[list[Any]], m: int, slots: int, noise: int) -> Term:
    idx = np.arange(m, dtype=np.int64)
    return Term(cts, idx // slots, idx % slots, noise)


def is_dense(t: Term, m: int, slots: int) -> bool:
    """Element ``i`` in block ``i // N``, slot ``i % N`` (the layout of fresh encryptions and S's replies)."""
    idx = np.arange(m)
    return len(t.cts) == -(-m // slots) and np.array_equal(t.block, idx // slots) and np.array_equal(t.slot, idx % slots)


def _aligned(a: Term, b: Term) -> dict[int, int] | None:
    """``a``'s block -> ``b``'s block when both terms hold every element in the same slot, else None."""
    ca, cb = a.covered(), b.covered()
    if not (np.array_equal(ca, cb) and np.array_equal(a.slot[ca], b.slot[cb])):
        return None
    pairs = np.unique(np.stack([a.block[ca], b.block[cb]]), axis=1)
    if len(np.unique(pairs[0])) != pairs.shape[1] or len(np.unique(pairs[1])) != pairs.shape[1]:
        return None
    return {int(x): int(y) for x, y in pairs.T}


class LatticeOps:
    """The local operations (no round with S), with the signatures of
    :class:`~ray_vfl.crypto.two_server.bcp_arrays.BCP` so SSXGB's algorithms run on either engine
    (``pk`` is the engine's :class:`~ray_vfl.crypto.lattice.keys.LatticePublic`)."""

    def __init__(self, pub: LatticePublic, refresh: Any = None) -> None:
        self.pub = pub
        self.refresh = refresh  # C's round that re-encrypts an array through S (set by server C)

    # -- structure -----------------------------------------------------------------------------
    def with_scale(self, c: LatticeArray, frac_bits: int) -> LatticeArray:
        frac_of(c)
        return LatticeArray(c.terms, c.length, frac_bits, c.key_id)

    def take(self, c: LatticeArray, idx: np.ndarray | slice) -> LatticeArray:
        frac_of(c)
        sel = np.arange(c.length)[idx]
        sel = np.atleast_1d(sel)
        terms = []
        for t in c.terms:
            block, slot = t.block[sel], t.slot[sel]
            used = np.unique(block[block >= 0])
            if not used.size:
                continue
            remap = np.full(len(t.cts), -1, dtype=np.int64)
            remap[used] = np.arange(used.size)
            terms.append(Term([t.cts[b] for b in used], np.where(block >= 0, remap[np.maximum(block, 0)], -1),
                              slot, t.noise))
        return LatticeArray(terms, sel.size, c.frac, c.key_id)

    def concat(self, arrays: Sequence[LatticeArray]) -> LatticeArray:
        if not arrays:
            raise CryptoError("concat needs at least one array")
        fracs = {frac_of(a) for a in arrays}
        if len(fracs) != 1:
            raise CryptoError("concat needs arrays with one scale")
        total = sum(a.length for a in arrays)
        width = max(len(a.terms) for a in arrays)
        terms = []
        for j in range(width):
            cts, blocks, slots, noise, off = [], [], [], 0, 0
            for a in arrays:
                if j < len(a.terms):
                    t = a.terms[j]
                    blocks.append(np.where(t.block >= 0, t.block + len(cts), -1))
                    slots.append(t.slot)
                    cts += t.cts
                    noise = max(noise, t.noise)
                else:
                    blocks.append(np.full(a.length, -1, dtype=np.int64))
                    slots.append(np.zeros(a.length, dtype=np.int64))
                off += a.length
            terms.append(Term(cts, np.concatenate(blocks), np.concatenate(slots), noise))
        return LatticeArray(terms, total, fracs.pop(), arrays[0].key_id)

    # -- linear operations -----------------------------------------------------------------------
    def add(self, pk: Any, a: LatticeArray, b: LatticeArray) -> LatticeArray:
        fa, fb = frac_of(a), frac_of(b)
        if fa != fb or a.length != b.length:
            raise CryptoError(f"add needs arrays of equal length and scale, got {a.length} (f{fa}) and {b.length} (f{fb})")
        terms = list(a.terms)
        ev = self.pub.evaluators
        for tb in b.terms:
            for n, ta in enumerate(terms):
                pairs = _aligned(ta, tb)
                if pairs is None:
                    continue
                cts = [list(blk) for blk in ta.cts]
                for x, y in pairs.items():
                    out = []
                    for i, (u, v) in enumerate(zip(ta.cts[x], tb.cts[y])):
                        w = _seal().Ciphertext()
                        ev[i].add(u, v, w)
                        out.append(w)
                    cts[x] = out
                terms[n] = Term(cts, ta.block, ta.slot, max(ta.noise, tb.noise) + 1)
                break
            else:
                terms.append(tb)
        return LatticeArray(terms, a.length, fa, a.key_id)

    @staticmethod
    def map_cts(t: Term, op: Any) -> list[list[Any]]:
        """A new ciphertext ``op(b, i, u, out)`` for each ciphertext ``u`` of ``t`` (block ``b``, prime ``i``)."""
        cts = []
        for b, blk in enumerate(t.cts):
            row = []
            for i, u in enumerate(blk):
                w = _seal().Ciphertext()
                op(b, i, u, w)
                row.append(w)
            cts.append(row)
        return cts

    def neg(self, pk: Any, c: LatticeArray) -> LatticeArray:
        frac_of(c)
        ev = self.pub.evaluators
        terms = [Term(self.map_cts(t, lambda b, i, u, w: ev[i].negate(u, w)), t.block, t.slot, t.noise) for t in c.terms]
        return LatticeArray(terms, c.length, c.frac, c.key_id)

    def sub(self, pk: Any, a: LatticeArray, b: LatticeArray) -> LatticeArray:
        return self.add(pk, a, self.neg(pk, b))

    def slot_values(self, t: Term, block: int, res: np.ndarray, fill: np.ndarray | None = None) -> np.ndarray:
        """``(k, N)`` residues placing ``res[:, i]`` at element ``i``'s slot in ``block`` of term ``t``
        (other slots: ``fill`` or 0)."""
        ring = self.pub.ring
        out = np.zeros((ring.n_primes, ring.slots), dtype=np.uint64) if fill is None else fill.copy()
        sel = t.block == block
        out[:, t.slot[sel]] = res[:, sel]
        return out

    def mul_plain(self, t: Term, res: np.ndarray, fill: np.ndarray | None = None) -> Term:
        """The term times per-element residues ``res`` (``(k, m)``), slot-wise."""
        ev = self.pub.evaluators
        vals = [self.slot_values(t, b, res, fill) for b in range(len(t.cts))]
        cts = self.map_cts(t, lambda b, i, u, w: ev[i].multiply_plain(u, self.pub.plaintext(i, vals[b][i]), w))
        return Term(cts, t.block, t.slot, t.noise + PLAIN_NOISE)

    def mul_const(self, pk: Any, c: LatticeArray, k: np.ndarray | Sequence[int], frac_bits: int = 0,
                  pool: Any = None) -> LatticeArray:
        """``Enc(k x)`` for integers ``k`` (one per value); scale plus ``frac_bits``. One constant for
        every value multiplies by a constant polynomial (noise: its bits); else a slot-wise product."""
        frac = frac_of(c)
        ks = [int(v) for v in (np.asarray(k, dtype=object).ravel() if not isinstance(k, list) else k)]
        if len(ks) != c.length:
            raise CryptoError(f"mul_const needs one constant per value ({c.length}), got {len(ks)}")
        same = len(set(ks)) <= 1
        cost = (abs(ks[0]).bit_length() + 1 if ks else 0) if same else PLAIN_NOISE
        if self.refresh is not None and c.noise + cost > self.pub.hide_limit:
            c = self.refresh(c)
        ring, ev = self.pub.ring, self.pub.evaluators
        terms = []
        if same and ks and ks[0] == 0:
            n = ring.slots
            zero = np.zeros(n, np.uint64)
            cts = [[self.pub.encrypt(i, zero) for i in range(ring.n_primes)] for _ in range(-(-c.length // n))]
            return LatticeArray([dense_term(cts, c.length, n, FRESH_NOISE)], c.length, frac + frac_bits, c.key_id)
        if same and ks:
            kk = ks[0]
            consts = ring.to_residues([abs(kk)])
            plains = [self.pub.plaintext(i, np.full(ring.slots, consts[i, 0], np.uint64)) for i in range(ring.n_primes)]

            def times_k(b: int, i: int, u: Any, w: Any) -> None:
                ev[i].multiply_plain(u, plains[i], w)
                if kk < 0:
                    ev[i].negate_inplace(w)

            terms = [Term(self.map_cts(t, times_k), t.block, t.slot, t.noise + cost) for t in c.terms]
        else:
            res = ring.to_residues(ks)
            terms = [self.mul_plain(t, res) for t in c.terms]
        return LatticeArray(terms, c.length, frac + frac_bits, c.key_id)
