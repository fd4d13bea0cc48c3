"""gmpy2 helpers shared by the big-integer schemes (Paillier, OU).

* :class:`FixedBase`: windowed fixed-base exponentiation. With 8-bit windows
  and a table of ``base^(j * 256**i)``, ``base^e`` costs one modular
  multiplication per non-zero byte of ``e`` instead of a full exponentiation.
* :func:`parallel_powmod`: ``gmpy2.powmod_base_list`` split over threads
  (gmpy2 releases the GIL inside the list functions).
* :func:`random_prime`: primes from the OS entropy source (``secrets``).
"""

from __future__ import annotations

import os
import secrets
from concurrent.futures import ThreadPoolExecutor

import gmpy2
from gmpy2 import mpz

__all__ = ["FixedBase", "parallel_powmod", "random_prime", "crt_pair"]

_WINDOW = 8  # bits per window: 255 table entries per byte of exponent
_EXECUTOR: ThreadPoolExecutor | None = None
_WORKERS = max(1, min(4, os.cpu_count() or 1))


class FixedBase:
    """``base^e mod modulus`` for many exponents ``e >= 0``, with lazily built 8-bit window tables.

    Parameters
    ----------
    base, modulus : int
    max_bytes : int
        Tables for exponents of up to this many bytes are built on first use
        (``255 * max_bytes`` residues; about 3.6 MB for 28 bytes mod a 4096-bit modulus).

    Example
    -------
    >>> fb = FixedBase(3, 1009, 2)
    >>> fb.pow_bytes(bytes([5, 1]), 2) == [pow(3, 5 + 256, 1009)]
    True
    """

    def __init__(self, base: int, modulus: int, max_bytes: int) -> None:
        self.modulus = mpz(modulus)
        self.max_bytes = int(max_bytes)
        self._next = mpz(base) % self.modulus  # base^(256**len(rows))
        self._rows: list[list[mpz]] = []

    def _table(self, n_bytes: int) -> list[list[mpz]]:
        if n_bytes > self.max_bytes:
            raise ValueError(f"exponent of {n_bytes} bytes exceeds the table ({self.max_bytes} bytes)")
        m = self.modulus
        while len(self._rows) < n_bytes:
            b = self._next
            row = [mpz(1), b]
            for _ in range((1 << _WINDOW) - 2):
                row.append(row[-1] * b % m)
            self._rows.append(row)
            self._next = row[-1] * b % m
        return self._rows

    def pow_bytes(self, exps: bytes, width: int) -> list[mpz]:
        """``[base^e mod m]`` for little-endian exponents of ``width`` bytes packed in ``exps``."""
        table, m = self._table(width), self.modulus
        out = []
        one = mpz(1)
        for k in range(0, len(exps), width):
            acc = None
            for row, byte in zip(table, exps[k:k + width]):
                if byte:
                    acc = row[byte] if acc is None else acc * row[byte] % m
            out.append(one if acc is None else acc)
        return out

    def pow_ints(self, exps: list[int]) -> list[mpz]:
        """``[base^e mod m]`` for non-negative Python ints (each at most ``max_bytes`` long)."""
        out = []
        for e in exps:
            width = max(1, (int(e).bit_length() + 7) // 8)
            out.extend(self.pow_bytes(int(e).to_bytes(width, "little"), width))
        return out


def parallel_powmod(bases: list, jobs: list[tuple[int, int]]) -> list[list[mpz]]:
    """``[[b^e mod m for b in bases] for e, m in jobs]``, split over up to 4 threads.

    Example
    -------
    >>> [[int(v) for v in r] for r in parallel_powmod([2, 3], [(5, 7)])]
    [[4, 5]]
    """
    global _EXECUTOR
    if len(bases) < 8 or _WORKERS == 1:
        return [gmpy2.powmod_base_list(bases, e, m) for e, m in jobs]
    if _EXECUTOR is None:
        _EXECUTOR = ThreadPoolExecutor(max_workers=_WORKERS, thread_name_prefix="ray_vfl_gmp")
    per_job = max(1, _WORKERS // len(jobs))
    step = -(-len(bases) // per_job)
    futures = [
        [_EXECUTOR.submit(gmpy2.powmod_base_list, bases[i:i + step], e, m) for i in range(0, len(bases), step)]
        for e, m in jobs
    ]
    return [[v for f in fs for v in f.result()] for fs in futures]


def random_prime(bits: int) -> mpz:
    """A random prime of exactly ``bits`` bits, ``= 3 mod 4``, top two bits set.

    Example
    -------
    >>> p = random_prime(64)
    >>> p.bit_length(), p % 4, gmpy2.is_prime(p)
    (64, mpz(3), True)
    """
    while True:
        cand = mpz(secrets.randbits(bits)) | (mpz(3) << (bits - 2)) | 3
        while cand.bit_length() == bits:
            if gmpy2.is_prime(cand, 40):
                return cand
            cand += 4


def crt_pair(a_mod_m1: mpz, b_mod_m2: mpz, m1: mpz, m2: mpz, m2_inv_m1: mpz) -> mpz:
    """The ``x mod m1*m2`` with ``x = a (mod m1)``, ``x = b (mod m2)`` (Garner; ``m2_inv_m1 = m2^-1 mod m1``).

    Example
    -------
    >>> int(crt_pair(mpz(2), mpz(3), mpz(5), mpz(7), gmpy2.invert(7, 5)))
    17
    """
    return b_mod_m2 + m2 * ((a_mod_m1 - b_mod_m2) * m2_inv_m1 % m1)
