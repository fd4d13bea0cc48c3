"""Fast Paillier on gmpy2 (backend name ``"paillier"``).

Scheme (Paillier 1999 with ``g = n + 1``)::

    Enc(m) = (1 + m n) * r^n  mod n^2
    Dec(c) = L(c^lambda mod n^2) * mu mod n          (done with CRT mod p^2, q^2)

Randomness follows Damgard-Jurik-Nielsen ("A generalization of Paillier's
public-key system...", Int. J. Inf. Security 2010, sec. 4.2): once per key
and process we pick ``h_s = -y^2 mod n`` for a random ``y`` and precompute a
fixed-base table for ``B = h_s^n mod n^2``; then ``r^n = (h_s^alpha)^n =
B^alpha`` for a short random exponent ``alpha``. ``alpha`` has
``2 * security_level`` bits (160 / 224 / 256 bits for 1024 / 2048 / 3072-bit
``n``, NIST SP 800-57 levels 80 / 112 / 128): the best generic attack on a
short exponent (Pollard lambda / baby-step giant-step) costs
``2**(bits / 2)``, i.e. exactly the security level; 224 bits at 2048 is also
SecretFlow HEU's choice. With 12-bit windows an encryption costs
``bits / 12`` modular multiplications (19 at 2048 bits) instead of a
2048-bit exponentiation.

Key-owner encryption (``encrypt(sk, x)``): the owner keeps the tables of
``B mod p^2`` and ``B mod q^2``, computes ``(1 + m n) B^alpha`` modulo each
half-size square with the same short ``alpha``, and recombines with the CRT;
the ciphertext is the same integer the public-key path would produce for
that ``alpha`` and ``B``, at about half the cost.

Security: semantic security rests on the decisional composite residuosity
assumption (DCRA) for ``n = p q``; DJN's short exponents add the assumption
that ``B^alpha`` with short ``alpha`` is indistinguishable from a random
``n``-th residue. Plaintext space ``Z_n`` (2048 bits at the default key).

Ciphertexts use the same integers, encoding and key material as
python-paillier, so keys and ciphertexts interoperate with it (see
:mod:`ray_vfl.crypto.he.phe_backend`).
"""

from __future__ import annotations

import logging
import secrets
from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from typing import ClassVar

import gmpy2
from gmpy2 import mpz

from ray_vfl.crypto.he.ciphertexts import PrivateKey, PublicKey, fingerprint
from ray_vfl.crypto.he.gmp import (
    FixedBase,
    MaskPowers,
    crt_pair,
    parallel_powmod,
    random_prime,
)
from ray_vfl.crypto.he.key_policy import security_level
from ray_vfl.crypto.he.modular import ModularBackend
from ray_vfl.errors import CryptoError

__all__ = [
    "PaillierBackend",
    "PaillierPublicKey",
    "PaillierPrivateKey",
    "generate_paillier_keypair",
    "short_exponent_bits",
]

logger = logging.getLogger(__name__)



def short_exponent_bits(key_bits: int) -> int:
    """Length of the DJN short exponent: twice the security level, a multiple of 8.

    Example
    -------
    >>> short_exponent_bits(2048)
    224
    """
    return 2 * security_level(key_bits)


@dataclass(frozen=True)
class PaillierPublicKey(PublicKey):
    """Paillier public key ``n`` (with ``g = n + 1``); picklable, a few hundred bytes.

    Example
    -------
    >>> pk = PaillierPublicKey(n=3233 * 3559)
    >>> pk.nsquare == pk.n ** 2
    True
    """

    scheme: ClassVar[str] = "paillier"
    n: int

    @cached_property
    def key_id(self) -> bytes:
        return fingerprint(self.scheme, self.n)

    @property
    def nsquare(self) -> int:
        return self.n * self.n

    @property
    def key_bits(self) -> int:
        return self.n.bit_length()


@dataclass(frozen=True)
class PaillierPrivateKey(PrivateKey):
    """Paillier private key: the primes ``p < q`` of ``n``.

    Raises
    ------
    CryptoError
        If ``p * q != public_key.n`` or ``p == q``.
    """

    public_key: PaillierPublicKey
    p: int = field(repr=False)
    q: int = field(repr=False)

    def __post_init__(self) -> None:
        p, q = int(self.p), int(self.q)
        if p * q != self.public_key.n or p == q:
            raise CryptoError("p and q do not factor the public key's n into two distinct primes")
        object.__setattr__(self, "p", min(p, q))
        object.__setattr__(self, "q", max(p, q))


def generate_paillier_keypair(key_bits: int = 2048) -> tuple[PaillierPublicKey, PaillierPrivateKey]:
    """Generate a Paillier key pair with an exactly ``key_bits``-bit modulus (no size check here).

    Example
    -------
    >>> pk, sk = generate_paillier_keypair(1024)
    >>> pk.key_bits
    1024
    """
    half = key_bits // 2
    while True:
        p, q = random_prime(half), random_prime(key_bits - half)
        if p != q and (p * q).bit_length() == key_bits:
            break
    pk = PaillierPublicKey(int(p * q))
    return pk, PaillierPrivateKey(pk, int(p), int(q))


class _PublicContext:
    """Per-process precomputation for one public key (never pickled)."""

    def __init__(self, n: int) -> None:
        self.n = mpz(n)
        self.nsq = self.n * self.n
        self.exp_bytes = short_exponent_bits(n.bit_length()) // 8
        self._fixed: MaskPowers | None = None

    def base(self) -> mpz:
        """A fresh DJN base ``B = h_s^n mod n^2`` with ``h_s = -y^2 mod n``."""
        y = mpz(secrets.randbelow(int(self.n) - 2) + 2)
        hs = (-y * y) % self.n  # generates (most of) the Jacobi-symbol-1 subgroup
        return gmpy2.powmod(hs, self.n, self.nsq)

    def random_rn(self, count: int) -> list[mpz]:
        """``count`` fresh values ``r^n mod n^2`` (as ``B^alpha`` with short random ``alpha``)."""
        return self.mask_powers().pow_bytes(secrets.token_bytes(self.exp_bytes * count), self.exp_bytes)

    def mask_powers(self) -> MaskPowers:
        """The DJN base's fixed-base tables of this process (a fresh base per process)."""
        if self._fixed is None:
            self._fixed = MaskPowers(self.base(), self.nsq, self.exp_bytes)
        return self._fixed


class _PrivateContext:
    """Per-process CRT constants (decryption) and CRT fixed-base tables (owner encryption)."""

    def __init__(self, n: int, p: int, q: int) -> None:
        self.n = mpz(n)
        self.p, self.q = mpz(p), mpz(q)
        self.p2, self.q2 = self.p * self.p, self.q * self.q
        self.hp = self._h(self.p, self.p2)
        self.hq = self._h(self.q, self.q2)
        self.q_inv_p = gmpy2.invert(self.q, self.p)
        self.q2_inv_p2 = gmpy2.invert(self.q2, self.p2)
        self._fixed: tuple[FixedBase, FixedBase] | None = None

    def _h(self, x: mpz, x2: mpz) -> mpz:
        # h_x = L_x(g^(x-1) mod x^2)^-1 mod x  with g = n + 1
        return gmpy2.invert((gmpy2.powmod(self.n + 1, x - 1, x2) - 1) // x, x)

    def _halves(self, count: int) -> tuple[list[mpz], list[mpz]]:
        """``B^alpha mod p^2`` and ``mod q^2`` for ``count`` fresh short ``alpha``."""
        pub = _public_context(int(self.n))
        if self._fixed is None:
            b = pub.base()
            self._fixed = (FixedBase(b % self.p2, self.p2, pub.exp_bytes),
                           FixedBase(b % self.q2, self.q2, pub.exp_bytes))
        eb = pub.exp_bytes
        alphas = secrets.token_bytes(eb * count)
        rp, rq = (fb.pow_bytes(alphas, eb) for fb in self._fixed)
        return rp, rq

    def encrypt(self, ms: list[int]) -> list[mpz]:
        """``(1 + m n) B^alpha mod n^2`` computed mod ``p^2`` and ``q^2``, then recombined."""
        rp, rq = self._halves(len(ms))
        n, p2, q2, q2inv = self.n, self.p2, self.q2, self.q2_inv_p2
        out = []
        for m, a, b in zip(ms, rp, rq):
            gm = 1 + (m % n) * n  # (1 + n)^m = 1 + m n (mod n^2)
            out.append(crt_pair(gm * a % p2, gm * b % q2, p2, q2, q2inv))
        return out

    def masks(self, count: int) -> list[mpz]:
        """``r^n mod n^2`` (as ``B^alpha``) made with the CRT: half-size tables, then recombined."""
        rp, rq = self._halves(count)
        p2, q2, q2inv = self.p2, self.q2, self.q2_inv_p2
        return [crt_pair(a, b, p2, q2, q2inv) for a, b in zip(rp, rq)]


@lru_cache(maxsize=16)
def _public_context(n: int) -> _PublicContext:
    return _PublicContext(n)


@lru_cache(maxsize=16)
def _private_context(n: int, p: int, q: int) -> _PrivateContext:
    return _PrivateContext(n, p, q)


class PaillierBackend(ModularBackend):
    """Fast Paillier backend on gmpy2 with DJN fixed-base encryption and CRT decryption.

    Example
    -------
    >>> import numpy as np
    >>> be = PaillierBackend()
    >>> pk, sk = be.generate_keys(1024, allow_weak=True)  # small key: a quick example only
    >>> c = be.add(pk, be.encrypt(pk, np.array([0.5])), be.encrypt(pk, np.array([0.25])))
    >>> be.decrypt(sk, c)
    array([0.75])
    """

    name = "paillier"
    public_key_type = PaillierPublicKey

    def _generate_keys(self, key_bits: int) -> tuple[PaillierPublicKey, PaillierPrivateKey]:
        pk, sk = generate_paillier_keypair(key_bits)
        self.packing.check_modulus(self._plain_bound(pk))
        return pk, sk

    def _plain_bound(self, pk: PaillierPublicKey) -> int:
        return pk.n

    def _ct_modulus(self, pk: PaillierPublicKey) -> int:
        return _public_context(pk.n).nsq

    def _width(self, pk: PaillierPublicKey) -> int:
        return (pk.nsquare.bit_length() + 7) // 8

    def _raw_encrypt(self, pk: PaillierPublicKey, ms: list[int], sk: PaillierPrivateKey | None = None,
                     masks: list | None = None) -> list[mpz]:
        if sk is not None and masks is None:
            return _private_context(pk.n, sk.p, sk.q).encrypt(ms)
        ctx = _public_context(pk.n)
        n, nsq = ctx.n, ctx.nsq
        # (1 + n)^m = 1 + m n (mod n^2): no exponentiation for the message part.
        return [(1 + (m % n) * n) * rn % nsq for m, rn in zip(ms, masks if masks is not None else ctx.random_rn(len(ms)))]

    def _raw_masks(self, pk: PaillierPublicKey, count: int, sk: PaillierPrivateKey | None = None) -> list[mpz]:
        if sk is not None:
            return _private_context(pk.n, sk.p, sk.q).masks(count)
        return _public_context(pk.n).random_rn(count)

    def _raw_decrypt(self, sk: PaillierPrivateKey, cts: list[mpz]) -> list[int]:
        ctx = _private_context(sk.public_key.n, sk.p, sk.q)
        p, q, hp, hq, qinv = ctx.p, ctx.q, ctx.hp, ctx.hq, ctx.q_inv_p
        xp, xq = parallel_powmod(cts, [(p - 1, ctx.p2), (q - 1, ctx.q2)])
        out = []
        for a, b in zip(xp, xq):
            mp = (a - 1) // p * hp % p
            mq = (b - 1) // q * hq % q
            out.append(int(mq + q * ((mp - mq) * qinv % p)))
        return out

    def _raw_rerandomize(self, pk: PaillierPublicKey, cts: list[mpz], masks: list | None = None) -> list[mpz]:
        ctx = _public_context(pk.n)
        nsq = ctx.nsq
        return [c * rn % nsq for c, rn in zip(cts, masks if masks is not None else ctx.random_rn(len(cts)))]
