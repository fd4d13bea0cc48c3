"""The master-key holder's side of BCP: mDec's CRT constants and the per-key discrete logs it derives.

``mDec`` opens a ciphertext under any user key of the Setup: with ``ell_p`` the p-adic logarithm
(:func:`~ray_vfl.crypto.two_server.bcp._ell`), ``m q = a_p ell_p(A) - ell_p(B) (mod p)`` and likewise mod ``q``, where
``a_p = a mod p`` comes from the public key ``h = g^a`` once (:meth:`_Master.key_logs`). Four half-size
exponentiations per ciphertext, or two when the plaintext is known to be below ``p / 2``
(:meth:`_Master.decrypt_small`).
"""

from __future__ import annotations

from functools import lru_cache

import gmpy2
from gmpy2 import mpz

from ray_vfl.crypto.two_server.bcp import BCPMasterKey, _ell
from ray_vfl.crypto.he.gmp import crt_pair, parallel_powmod
from ray_vfl.errors import CryptoError

__all__ = ["master_context"]


class _Master:
    """CRT constants of a master key, and the per-key ``a mod p``, ``a mod q`` it has derived."""

    def __init__(self, n: int, p: int, q: int, g: int) -> None:
        self.n = mpz(n)
        self.p, self.q = mpz(p), mpz(q)
        self.p2, self.q2 = self.p * self.p, self.q * self.q
        self.q_inv_p = gmpy2.invert(self.q, self.p)  # CRT recombination
        self.gp_inv = gmpy2.invert(_ell(mpz(g), self.p, self.p2), self.p)
        self.gq_inv = gmpy2.invert(_ell(mpz(g), self.q, self.q2), self.q)
        self.pinv_mod_q = gmpy2.invert(self.p, self.q)
        self.order = self.n * (self.p - 1) * (self.q - 1) // 4  # p p' q q'
        self.logs: dict[bytes, tuple[mpz, mpz]] = {}  # key id -> (a mod p, a mod q), see key_logs

    def key_logs(self, h: int) -> tuple[mpz, mpz]:
        """``(a mod p, a mod q)`` of ``h = g^a``; raises if ``h`` is not in ``<g>``."""
        h = mpz(h)
        n2 = self.n * self.n
        if not 0 < h < n2 or gmpy2.gcd(h, self.n) != 1 or gmpy2.powmod(h, self.order, n2) != 1:
            raise CryptoError("public key h is not an element of <g> for these parameters")
        return (_ell(h, self.p, self.p2) * self.gp_inv % self.p,
                _ell(h, self.q, self.q2) * self.gq_inv % self.q)

    def decrypt(self, logs: tuple[mpz, mpz], big_a: list[mpz], big_b: list[mpz]) -> list[mpz]:
        """``m mod N`` for each ``(A, B)`` under the key with discrete logs ``logs``."""
        p, q, p2, q2 = self.p, self.q, self.p2, self.q2
        both_p, both_q = parallel_powmod(big_a + big_b, [(p - 1, p2), (q - 1, q2)])
        k = len(big_a)
        ap, bp, aq, bq = both_p[:k], both_p[k:], both_q[:k], both_q[k:]
        a_p, a_q = logs
        qi, pi_ = -self.q_inv_p, -self.pinv_mod_q
        out = []
        for xa, xb, ya, yb in zip(ap, bp, aq, bq):
            # m = (a_p ell_p(A) - ell_p(B)) / q mod p  (ell_p(1 + mN) = -m q), likewise mod q
            mp = ((xb - 1) // p - a_p * ((xa - 1) // p)) * qi % p
            mq = ((yb - 1) // q - a_q * ((ya - 1) // q)) * pi_ % q
            out.append(crt_pair(mp, mq, p, q, self.q_inv_p))
        return out

    def decrypt_small(self, logs: tuple[mpz, mpz], big_a: list[mpz], big_b: list[mpz]) -> list[mpz]:
        """Signed plaintexts known to satisfy ``|m| < p / 2``, from their residues mod ``p`` alone: two
        half-size exponentiations per ciphertext instead of four (the masked values of Mult, LGT and
        Trunc are a few hundred bits; ``p`` has ``|N| / 2``). A ciphertext outside that range
        decrypts to a wrong value, so the caller states the bound (:meth:`small_bound_bits`)."""
        p, p2 = self.p, self.p2
        (both,) = parallel_powmod(big_a + big_b, [(p - 1, p2)])
        k = len(big_a)
        a_p, qi, half = logs[0], -self.q_inv_p, p >> 1
        out = []
        for xa, xb in zip(both[:k], both[k:]):
            m = ((xb - 1) // p - a_p * ((xa - 1) // p)) * qi % p
            out.append(m - p if m > half else m)
        return out

    def small_bound_bits(self) -> int:
        """Plaintexts of fewer bits than this (in absolute value) may use :meth:`decrypt_small`."""
        return int(self.p.bit_length()) - 2


@lru_cache(maxsize=8)
def _master(n: int, p: int, q: int, g: int) -> _Master:
    return _Master(n, p, q, g)


def master_context(mk: BCPMasterKey) -> _Master:
    """The per-process CRT context of ``mk`` (cached)."""
    return _master(mk.params.n, mk.p, mk.q, mk.params.g)
