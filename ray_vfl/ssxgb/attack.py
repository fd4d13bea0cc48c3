"""What server S could infer of a leaf's hessian sum from the values it opens: the factoring attack on a
multiplicatively blinded divisor.

A division that opens ``M = D r`` to S (``D = H + lambda``, ``r`` uniform in ``[2^(rho-1), 2^rho)``, as
SSXGB's Reciprocal once did) shows S a multiple of ``D``: every divisor ``D'`` of ``M`` in the range ``D``
can take (``[lo, hi]``, public: it follows from the row count) whose cofactor ``M / D'`` has ``rho`` bits
is a candidate, and ``D`` is always one of them. S factors ``M`` far enough to list them
(:func:`divisor_candidates`: only prime factors up to ``hi`` matter, found by trial division and
Pollard's rho). :func:`factoring_attack` runs it on every value S opened in each trial and scores how
often ``D`` is among the candidates, the only one, or one of at most three.

SSXGB's division (:mod:`ray_vfl.crypto.two_server.reciprocal`) opens only additively
masked values; ``tests/test_ssxgb_privacy.py`` runs this attack on them (``D`` found in none of 40
trials) and on ``M = D r`` (``D`` among the candidates in every trial, often alone).

Example
-------
>>> divisor_candidates(91 * 1_000_003, 50, 200, 20)  # 1_000_003 is prime, of 20 bits
[91]
>>> factoring_attack([[91 * 1_000_003], [12345]], [91, 101], 50, 200, 20)
DivisionAttack(trials=2, found=1, pinned=1, at_most_3=1)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import gmpy2
from gmpy2 import mpz

__all__ = ["DivisionAttack", "divisor_candidates", "factoring_attack", "prime_factors_below"]

_SMALL = [2]  # the primes below 2^12, for trial division
while _SMALL[-1] < 1 << 12:
    _SMALL.append(int(gmpy2.next_prime(_SMALL[-1])))


def _rho(n: mpz, cap: int, c: int) -> mpz | None:
    """A proper factor of the composite ``n`` by Brent's variant of Pollard's rho (``x -> x^2 + c``), or
    ``None`` after ``cap`` steps (no prime factor below about ``(cap / 4)^2``, with high probability)."""
    y, r, q, g, x, ys = mpz(2), 1, mpz(1), mpz(1), mpz(2), mpz(2)
    steps = 0
    while g == 1:
        x = y
        for _ in range(r):
            y = (y * y + c) % n
        k = 0
        while k < r and g == 1:
            ys = y
            for _ in range(min(128, r - k)):
                y = (y * y + c) % n
                q = q * abs(x - y) % n
            g = gmpy2.gcd(q, n)
            k += 128
        steps += r
        r *= 2
        if steps > cap:
            return None
    if g == n:  # the batch overshot: step one at a time from its start
        while True:
            ys = (ys * ys + c) % n
            g = gmpy2.gcd(abs(x - ys), n)
            if g > 1:
                break
    return None if g == n else g


def prime_factors_below(m: int, bound: int) -> list[int]:
    """The prime factors ``p <= bound`` of ``m > 0``, with multiplicity (those above may be missed, and
    one below is missed with probability below ``e^-8`` per factor)."""
    m = mpz(m)
    out = []
    for p in _SMALL:
        while m % p == 0:
            out.append(p)
            m //= p
    cap = 16 * math.isqrt(max(1, bound)) + 4096
    stack = [m] if m > 1 else []
    while stack:
        n = stack.pop()
        if n <= bound and gmpy2.is_prime(n):
            out.append(int(n))
            continue
        if gmpy2.is_prime(n):
            continue
        for c in (1, 3, 5, 7):
            f = _rho(n, cap, c)
            if f is not None:
                stack += [f, n // f]
                break
    return sorted(out)


def divisor_candidates(m: int, lo: int, hi: int, rho: int) -> list[int]:
    """Every ``D`` in ``[lo, hi]`` dividing ``m`` with ``m / D`` in ``[2^(rho-1), 2^rho)``: what S can
    conclude about ``D`` from an opened ``m = D r``."""
    if m <= 0:
        return []
    lo, hi = max(lo, -(-m >> rho) if m >> rho else 1), min(hi, m >> (rho - 1))
    if lo > hi:
        return []
    divisors = {1}
    for p in prime_factors_below(m, hi):
        divisors |= {d * p for d in divisors if d * p <= hi}
    return sorted(d for d in divisors if lo <= d and m % d == 0 and (1 << (rho - 1)) <= m // d < (1 << rho))


@dataclass(frozen=True)
class DivisionAttack:
    """Of ``trials``: how often ``D`` was among the candidates of some opened value (``found``), the
    only candidate (``pinned``), or one of at most three (``at_most_3``)."""

    trials: int
    found: int
    pinned: int
    at_most_3: int


def factoring_attack(views: Sequence[Sequence[int]], secrets: Sequence[int], lo: int, hi: int,
                     rho: int) -> DivisionAttack:
    """The attack on each trial: ``views[t]``, the integers S opened in trial ``t``; ``secrets[t]``, that
    trial's ``D`` (to score the attack; S does not have it). An opened value can name ``D`` only if ``D``
    divides it with a ``rho``-bit cofactor, so the candidates are listed for those values alone."""
    found = pinned = few = 0
    for vals, d in zip(views, secrets):
        sizes = [len(divisor_candidates(v, lo, hi, rho)) for v in vals
                 if v > 0 and v % d == 0 and lo <= d <= hi and (1 << (rho - 1)) <= v // d < (1 << rho)]
        if sizes:
            found += 1
            pinned += min(sizes) == 1
            few += min(sizes) <= 3
    return DivisionAttack(len(secrets), found, pinned, few)
