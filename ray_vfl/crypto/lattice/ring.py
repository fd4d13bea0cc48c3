"""Parameters of the lattice engine and exact arithmetic modulo its plaintext modulus ``T``.

The engine is BFV (Microsoft SEAL through ``tenseal.sealapi``) with ring degree ``N = 8192`` and
SEAL's default 218-bit ciphertext modulus for 128-bit security (the homomorphic-encryption
standard's table for ``N = 8192``). A BFV plaintext modulus that allows batching is a prime
``p = 1 mod 2N``, and SEAL keeps it below 60 bits; the two-server protocols need plaintexts of
``l + kappa + 4`` bits (a few hundred). So ``T`` is a product of ``k`` distinct batching primes of
about 30 bits, ``Z_T = Z_p1 x ... x Z_pk`` (CRT), and one array is ``k`` ciphertexts per block of
``N`` slots, one per prime, each under its own key. 30 bits (not 60) because every ciphertext must
keep room for one plaintext product by a uniform mask (about ``log p + 5`` bits of noise), one
product by a public constant and the flooding noise (:mod:`ray_vfl.crypto.lattice.keys`); measured
budgets (bits): fresh 136, after a uniform plaintext product 101, after a 24-bit constant 112.

Residues travel as ``uint64`` matrices of shape ``(k, m)``; every product of two residues is below
``2^60``, so numpy's ``uint64`` arithmetic is exact.

Example
-------
>>> ring = RingParams.for_bits(100)
>>> ring.n_primes, ring.plain_bits >= 100
(4, True)
>>> ring.from_residues(ring.to_residues([-5, 0, 2**90]))
[-5, 0, 1237940039285380274899124224]
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Sequence

import numpy as np

from ray_vfl.errors import ConfigError

__all__ = ["RingParams", "uniform_residues"]

POLY_DEGREE = 8192
PRIME_BITS = 30


@lru_cache(maxsize=8)
def _batching_primes(degree: int, bits: int, count: int) -> tuple[int, ...]:
    import tenseal.sealapi as seal
    return tuple(m.value() for m in seal.PlainModulus.Batching(degree, [bits] * count))


@dataclass(frozen=True)
class RingParams:
    """``k`` batching primes of ``PRIME_BITS`` bits for ring degree ``degree``; ``T`` their product.

    Parameters
    ----------
    n_primes : int
        ``k``; :meth:`for_bits` picks the least that holds a given number of signed bits.
    degree : int, default 8192
    """

    n_primes: int
    degree: int = POLY_DEGREE
    primes: tuple[int, ...] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if isinstance(self.n_primes, bool) or not isinstance(self.n_primes, int) or not 1 <= self.n_primes <= 64:
            raise ConfigError(f"n_primes must be an int in [1, 64], got {self.n_primes!r}")
        if self.degree not in (8192, 16384):
            raise ConfigError(f"degree must be 8192 or 16384 (128-bit security with SEAL's defaults), got {self.degree}")
        object.__setattr__(self, "primes", _batching_primes(self.degree, PRIME_BITS, self.n_primes))

    @classmethod
    def for_bits(cls, bits: int, degree: int = POLY_DEGREE) -> "RingParams":
        """The least ``k`` with ``T > 2^(bits + 1)``: every integer ``|v| < 2^bits`` has a unique
        centered residue."""
        if isinstance(bits, bool) or not isinstance(bits, int) or bits < 1:
            raise ConfigError(f"bits must be a positive int, got {bits!r}")
        k = max(1, math.ceil((bits + 2) / (PRIME_BITS - 1)))
        while True:
            ring = cls(k, degree)
            if ring.plain_bits >= bits + 1:
                return ring
            k += 1

    @property
    def modulus(self) -> int:
        """``T``."""
        return math.prod(self.primes)

    @property
    def plain_bits(self) -> int:
        """Signed bits ``T`` holds: every ``|v| < 2^plain_bits`` is represented (``T > 2^(plain_bits+1)``)."""
        return self.modulus.bit_length() - 2

    @property
    def slots(self) -> int:
        return self.degree

    @property
    def prime_array(self) -> np.ndarray:
        """The primes as a ``(k, 1)`` ``uint64`` column (broadcasts over residue matrices)."""
        return np.array(self.primes, dtype=np.uint64)[:, None]

    # -- CRT ------------------------------------------------------------------------------------
    def to_residues(self, values: Sequence[int] | np.ndarray) -> np.ndarray:
        """``(k, m)`` ``uint64`` residues of integers (any sign, any size)."""
        arr = np.asarray(values, dtype=object) if not isinstance(values, np.ndarray) else values
        if arr.dtype != object and np.issubdtype(arr.dtype, np.integer) and arr.size and \
                int(np.abs(arr.astype(np.int64)).max()) < (1 << 62):
            a = arr.astype(np.int64)
            return np.stack([np.mod(a, p).astype(np.uint64) for p in self.primes]) if a.size else \
                np.zeros((self.n_primes, 0), np.uint64)
        vals = [int(v) for v in arr.ravel()]
        return np.array([[v % p for v in vals] for p in self.primes], dtype=np.uint64).reshape(self.n_primes, len(vals))

    def from_residues(self, res: np.ndarray) -> list[int]:
        """Centered integers in ``(-T/2, T/2]`` of ``(k, m)`` residues."""
        t = self.modulus
        acc = np.zeros(res.shape[1], dtype=object)
        for p, coef, row in zip(self.primes, self._crt_coefficients, res):
            acc = acc + row.astype(object) * coef
        half = t // 2
        return [v - t if v > half else v for v in (int(a) % t for a in acc)]

    @property
    def _crt_coefficients(self) -> list[int]:
        t = self.modulus
        return [(t // p) * pow(t // p, -1, p) for p in self.primes]

    def add(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return (a + b) % self.prime_array

    def sub(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return (a + self.prime_array - b) % self.prime_array

    def mul(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return (a * b) % self.prime_array

    def neg(self, a: np.ndarray) -> np.ndarray:
        return (self.prime_array - a) % self.prime_array


def uniform_residues(ring: RingParams, m: int) -> np.ndarray:
    """``(k, m)`` residues of ``m`` values uniform in ``Z_T`` (independent uniform residues per prime,
    by CRT), drawn from OS entropy by rejection sampling: exactly uniform, not statistically."""
    out = np.empty((ring.n_primes, m), dtype=np.uint64)
    for i, p in enumerate(ring.primes):
        bits = p.bit_length()
        got = np.empty(0, dtype=np.uint64)
        while got.size < m:
            need = (m - got.size) * 5 // 4 + 16
            draw = np.frombuffer(os.urandom(4 * need), dtype=np.uint32).astype(np.uint64) & np.uint64((1 << bits) - 1)
            got = np.concatenate([got, draw[draw < p]])
        out[i] = got[:m]
    return out
