"""gmpy2 helpers shared by the big-integer schemes (Paillier, OU).

* :class:`FixedBase`: windowed fixed-base exponentiation. With 12-bit windows
  and a table of ``base^(j * 4096**i)``, ``base^e`` costs one modular
  multiplication per non-zero digit of ``e`` instead of a full exponentiation.
* :func:`parallel_powmod`: ``gmpy2.powmod_base_list`` split over threads
  (gmpy2 releases the GIL inside the list functions).
* :func:`random_prime`: primes from the OS entropy source (``secrets``).
"""

from __future__ import annotations

import os
import secrets
from concurrent.futures import ThreadPoolExecutor

import gmpy2
import numpy as np
from gmpy2 import mpz

__all__ = ["FixedBase", "MaskPowers", "parallel_powmod", "set_threads", "random_prime", "crt_pair"]

_WINDOW = 12  # bits per digit of a fixed-base exponent: 4,096 table entries per digit
_EXECUTOR: ThreadPoolExecutor | None = None
_WORKERS = max(1, min(4, os.cpu_count() or 1))


class FixedBase:
    """``base^e mod modulus`` for many exponents ``e >= 0``, with lazily built window tables.

    The exponent is cut into ``window``-bit digits ``d_i`` and ``base^e`` is
    the product of the table entries ``base^(d_i * 2**(window * i))``: one
    modular multiplication per non-zero digit instead of a full
    exponentiation. 12-bit windows (4,096 entries per digit) were measured
    1.2x (2048-bit moduli) to 1.3x (4096-bit) faster than bytes, for a table
    built in 0.2 to 0.5 s per process and key.

    Parameters
    ----------
    base, modulus : int
    max_bytes : int
        Longest exponent, in bytes; table rows are built on first use.
    window : int
        Bits per digit.

    Example
    -------
    >>> fb = FixedBase(3, 1009, 2)
    >>> fb.pow_bytes(bytes([5, 1]), 2) == [pow(3, 5 + 256, 1009)]
    True
    """

    def __init__(self, base: int, modulus: int, max_bytes: int, window: int = _WINDOW) -> None:
        self.modulus = mpz(modulus)
        self.max_bytes = int(max_bytes)
        self.window = int(window)
        self._next = mpz(base) % self.modulus  # base^(2**(window * len(rows)))
        self._rows: list[list[mpz]] = []
        self._weights = 1 << np.arange(self.window, dtype=np.int64)

    _BLOCK = 2048  # exponents per digit-major pass

    def n_digits(self, n_bytes: int) -> int:
        return -(-8 * n_bytes // self.window)

    def _table(self, n_bytes: int) -> list[list[mpz]]:
        """Rows for exponents of ``n_bytes`` bytes: ``rows[i][d] = base^(d * 2**(window * i))``."""
        if n_bytes > self.max_bytes:
            raise ValueError(f"exponent of {n_bytes} bytes exceeds the table ({self.max_bytes} bytes)")
        m = self.modulus
        while len(self._rows) < self.n_digits(n_bytes):
            b = self._next
            row = [mpz(1), b]
            for _ in range((1 << self.window) - 2):
                row.append(row[-1] * b % m)
            self._rows.append(row)
            self._next = row[-1] * b % m
        return self._rows

    def digits(self, exps: bytes, width: int) -> list[list[int]]:
        """The ``window``-bit digits (least significant first) of little-endian ``width``-byte exponents."""
        return self._digit_array(exps, width).tolist()

    def _digit_array(self, exps: bytes, width: int) -> np.ndarray:
        """:meth:`digits` as an ``(exponents, digits)`` int64 array."""
        n = self.n_digits(width)
        if not exps:
            return np.zeros((0, n), dtype=np.int64)
        bits = np.unpackbits(np.frombuffer(exps, dtype=np.uint8).reshape(-1, width), axis=1, bitorder="little")
        pad = n * self.window - 8 * width
        if pad:
            bits = np.pad(bits, ((0, 0), (0, pad)))
        return bits.reshape(len(bits), n, self.window).astype(np.int64) @ self._weights

    def pow_bytes(self, exps: bytes, width: int) -> list[mpz]:
        """``[base^e mod m]`` for little-endian exponents of ``width`` bytes packed in ``exps``.

        Digit by digit over blocks of exponents: one table row serves a whole
        block before the next row is read, so the row (1.2 MB of 2048-bit
        entries at 12-bit windows) stays in cache instead of every product
        fetching a random entry of the whole 20 MB table. Measured on 2048-bit
        OU masks: 1-7% faster per exponent alone, about 1% of a 4-party OU fit.
        """
        table, m = self._table(width), self.modulus
        digits = self._digit_array(exps, width)
        first, rest = table[0], table[1:]
        out: list[mpz] = []
        for start in range(0, len(digits), self._BLOCK):
            columns = digits[start:start + self._BLOCK].T.tolist()  # columns[i]: digit i of each exponent
            acc = [first[d] for d in columns[0]]  # row[0] is 1: a zero digit multiplies by 1
            for row, column in zip(rest, columns[1:]):
                acc = [a * row[d] % m for a, d in zip(acc, column)]
            out.extend(acc)
        return out

    def pow_ints(self, exps: list[int]) -> list[mpz]:
        """``[base^e mod m]`` for non-negative Python ints (each at most ``max_bytes`` long)."""
        out = []
        for e in exps:
            width = max(1, (int(e).bit_length() + 7) // 8)
            out.extend(self.pow_bytes(int(e).to_bytes(width, "little"), width))
        return out


class MaskPowers:
    """``base^e`` for fresh random exponents (encryption masks): from 8-bit windows until a process
    has made enough masks to pay for the 12-bit table, or was told it will (:meth:`expect_many`).

    At 2048-bit OU with 224-bit exponents, the 12-bit table takes 78,000 products to build and a mask
    then 18 products; the 8-bit one takes 7,000 and 27 per mask. A party that only re-randomises
    what it sends (a few hundred ciphertexts per tree) is done before the big table would pay, at
    about 8,000 masks; the key owner, which encrypts every row of every tree, builds it at set-up.

    Example
    -------
    >>> mp = MaskPowers(3, 1009, 2)
    >>> mp.pow_bytes(bytes([5, 1]), 2) == [pow(3, 5 + 256, 1009)], mp.small._rows != [], mp.big._rows
    (True, True, [])
    >>> mp.expect_many(); mp.pow_bytes(bytes([5, 1]), 2) == [pow(3, 261, 1009)], mp.big._rows != []
    (True, True)
    """

    SMALL_WINDOW = 8
    MANY = 8192  # masks after which the 12-bit table has paid for itself

    def __init__(self, base: int, modulus: int, max_bytes: int) -> None:
        self.max_bytes = int(max_bytes)
        self.small = FixedBase(base, modulus, max_bytes, self.SMALL_WINDOW)
        self.big = FixedBase(base, modulus, max_bytes)
        self.made = 0
        self.many = False

    def expect_many(self) -> None:
        """Build the 12-bit table now (during set-up) and use it from here on."""
        self.many = True
        self.big._table(self.max_bytes)

    def pow_bytes(self, exps: bytes, width: int) -> list[mpz]:
        count = len(exps) // max(1, width)
        self.made += count
        if not self.many and self.made > self.MANY:
            self.expect_many()
        return (self.big if self.many else self.small).pow_bytes(exps, width)


def set_threads(threads: int) -> int:
    """How many threads :func:`parallel_powmod` may use in this process (1: none); returns the old value.

    Benchmarks set 1 to measure an operation's CPU cost rather than its wall time.

    Example
    -------
    >>> old = set_threads(1); set_threads(old)
    1
    """
    global _WORKERS
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise ValueError(f"threads must be a positive int, got {threads!r}")
    old, _WORKERS = _WORKERS, threads
    return old


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
