"""Okamoto-Uchiyama on gmpy2 (backend name ``"ou"``), SecretFlow HEU's default scheme.

Scheme (Okamoto and Uchiyama, "A new public-key cryptosystem as secure as
factoring", EUROCRYPT 1998, in the accelerated form of Coron, Naccache and
Paillier, "Accelerating Okamoto-Uchiyama public-key cryptosystem",
Electronics Letters 1999, as implemented by HEU)::

    n = p^2 q,   p - 1 = t u   with t a prime of 2 * security-level bits
    G = g^u mod n,   H = g'^(n u) mod n          (public: n, G, H)
    Enc(m) = G^m H^r  mod n        r: 2 * security-level random bits
    Dec(c) = L(c^t mod p^2) / L(G^t mod p^2)  mod p,   L(x) = (x - 1) / p

``H^t = 1 (mod p^2)``, so the randomness vanishes after raising to the short
``t`` (224 bits at 2048), which makes decryption cheap. ``G^m`` and ``H^r``
use fixed-base tables (12-bit windows); negative ``m`` use a table of ``G^-1``.
``encrypt(sk, ...)`` is accepted but uses the public tables (a CRT split
mod ``p^2`` and ``q`` did not pay in pure Python).

Security assumptions, next to Paillier's:

=================  =======================================  =========================================
                   Paillier (``"paillier"``)                 OU (``"ou"``)
=================  =======================================  =========================================
modulus            ``n = p q``                               ``n = p^2 q``, ``|p| = |q| = |n| / 3``
one-wayness        composite residuosity (CR)                as hard as factoring ``n``
semantic security  DCRA                                      ``p``-subgroup assumption
short randomness   DJN: ``B^alpha``, ``|alpha| = 2 lambda``  ``H^r``, ``|r| = 2 lambda``
plaintext space    ``Z_n`` (2048 bits at 2048)               ``Z_p``, ``p`` secret (682 bits at 2048)
ciphertext         ``2 |n|`` bits (4096 at 2048)             ``|n|`` bits (2048 at 2048)
=================  =======================================  =========================================

``lambda`` is the security level (112 bits at 2048). Factoring ``p^2 q`` has
no known shortcut over RSA moduli of the same size at these sizes (lattice
methods for ``p^r q`` need large ``r``; ECM on a 682-bit ``p`` is far out of
reach), so the key sizes read like RSA's. OU keeps only a chosen-plaintext
guarantee (like Paillier); a decryption oracle reveals ``p``. Because ``p`` is
secret, the public side range-checks against ``2^(|p| - 1) <= p``, stored in the
public key as ``p_bits``.

Why ``|r| = 2 lambda``: whoever guesses ``m`` can test it by solving
``c G^-m = H^r`` for ``r`` in ``[0, 2^|r|)``, and a kangaroo search does that in
about ``2^(|r| / 2)`` products mod ``n``. HEU draws 110-bit ``r`` at 2048 bits
(its ``kRandomBits2048``), which leaves about 55 bits against that search;
224 bits keep the 112-bit level and cost twice the table products (56 against
28 us per mask here, ``benchmarks/crypto.py``, table 5).
"""

from __future__ import annotations

import logging
import secrets
from collections import Counter
from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from typing import ClassVar

import gmpy2
from gmpy2 import mpz

from ray_vfl.crypto.he.ciphertexts import PrivateKey, PublicKey, fingerprint
from ray_vfl.crypto.he.gmp import FixedBase, MaskPowers, parallel_powmod, random_prime
from ray_vfl.crypto.he.modular import ModularBackend
from ray_vfl.crypto.he.paillier import short_exponent_bits
from ray_vfl.errors import CryptoError

__all__ = ["OUBackend", "OUPublicKey", "OUPrivateKey", "generate_ou_keypair"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class OUPublicKey(PublicKey):
    """OU public key ``(n, G, H)`` and the bit length of the secret prime ``p``.

    Example
    -------
    >>> pk, _ = generate_ou_keypair(1024)
    >>> pk.key_bits, pk.p_bits
    (1024, 341)
    """

    scheme: ClassVar[str] = "ou"
    n: int
    g: int = field(repr=False)
    h: int = field(repr=False)
    p_bits: int

    @cached_property
    def key_id(self) -> bytes:
        return fingerprint(self.scheme, self.n, self.g, self.h, self.p_bits)

    @property
    def key_bits(self) -> int:
        return self.n.bit_length()

    @property
    def plain_bound(self) -> int:
        """Public lower bound ``2^(p_bits - 1) <= p`` of the plaintext modulus."""
        return 1 << (self.p_bits - 1)


@dataclass(frozen=True)
class OUPrivateKey(PrivateKey):
    """OU private key: ``p``, ``q`` and the prime ``t`` dividing ``p - 1``.

    Raises
    ------
    CryptoError
        If ``p^2 q != n``, ``t`` does not divide ``p - 1`` or ``p`` has not ``p_bits`` bits.
    """

    public_key: OUPublicKey
    p: int = field(repr=False)
    q: int = field(repr=False)
    t: int = field(repr=False)

    def __post_init__(self) -> None:
        p, q, t = int(self.p), int(self.q), int(self.t)
        if p * p * q != self.public_key.n or (p - 1) % t or p.bit_length() != self.public_key.p_bits:
            raise CryptoError("p, q, t do not match the public key (n = p^2 q, t | p - 1, |p| = p_bits)")


def generate_ou_keypair(key_bits: int = 2048) -> tuple[OUPublicKey, OUPrivateKey]:
    """Generate an OU key pair with an exactly ``key_bits``-bit ``n = p^2 q`` (no size check here).

    ``p`` has ``key_bits // 3`` bits and ``p - 1`` a prime factor ``t`` of
    ``2 * security level`` bits (160 / 224 / 256 at 1024 / 2048 / 3072).
    """
    p_bits = key_bits // 3
    t_bits = short_exponent_bits(key_bits)
    if 2 * t_bits > p_bits:
        raise CryptoError(f"OU needs key_bits >= {6 * t_bits} for a {t_bits}-bit subgroup, got {key_bits}")
    while True:
        t = random_prime(t_bits)
        lo, hi = (3 << (p_bits - 2)) // t + 1, ((1 << p_bits) - 2) // t  # top two bits of p set
        for _ in range(4 * p_bits):
            u = (secrets.randbelow(int(hi - lo)) + lo) & ~1  # even u: p = t u + 1 is odd
            p = t * u + 1
            if p.bit_length() == p_bits and gmpy2.is_prime(p, 40):
                break
        else:
            continue
        for _ in range(64):
            q = random_prime(key_bits - (p * p).bit_length() + secrets.randbelow(2))
            if q != p and (p * p * q).bit_length() == key_bits:
                break
        else:
            continue
        break
    n, p2 = p * p * q, p * p
    while True:  # g^(p-1) mod p^2 must have order p, i.e. differ from 1
        g = mpz(secrets.randbelow(int(n) - 2) + 2)
        if gmpy2.gcd(g, n) == 1 and gmpy2.powmod(g, p - 1, p2) != 1:
            break
    while True:
        g2 = mpz(secrets.randbelow(int(n) - 2) + 2)
        if gmpy2.gcd(g2, n) == 1:
            break
    pk = OUPublicKey(int(n), int(gmpy2.powmod(g, u, n)), int(gmpy2.powmod(g2, n * u, n)), p_bits)
    return pk, OUPrivateKey(pk, int(p), int(q), int(t))


class _Tables:
    """Fixed-base tables for ``G``, ``G^-1`` and ``H`` modulo one modulus."""

    def __init__(self, g: int, h: int, modulus: int, msg_bytes: int, rand_bytes: int) -> None:
        self.modulus = mpz(modulus)
        self.msg_bytes, self.rand_bytes = msg_bytes, rand_bytes
        self.g = FixedBase(g, modulus, msg_bytes)
        self.g_inv = FixedBase(gmpy2.invert(mpz(g), self.modulus), modulus, msg_bytes)
        self.h = MaskPowers(h, modulus, rand_bytes)

    def encrypt(self, ms: list[int], masks: list[mpz]) -> list[mpz]:
        """``G^m H^r`` for signed ``m``, given the masks ``H^r``.

        ``G^m`` is computed once per distinct ``m``: in the first trees of a
        boosting run every row of a leaf has the same gradient pair. (Who
        watches the time learns at most how many distinct values there are,
        which the rows' known leaves already tell.)
        """
        mod = self.modulus
        counts = Counter(ms)
        width = max(1, (max((abs(v) for v in counts), default=0).bit_length() + 7) // 8)
        pos, neg = self.g._table(width), self.g_inv._table(width)
        distinct = list(counts)  # digits of each distinct message once
        digits = dict(zip(distinct, self.g.digits(b"".join(abs(v).to_bytes(width, "little") for v in distinct), width)))
        power: dict[int, mpz] = {}
        out = []
        for v, mask in zip(ms, masks):
            repeated = counts[v] > 1
            if repeated and v in power:
                out.append(mask * power[v] % mod)
                continue
            acc = mpz(1) if repeated else mask
            for row, d in zip(pos if v >= 0 else neg, digits[v]):
                if d:
                    acc = acc * row[d] % mod
            if repeated:
                power[v] = acc
                acc = mask * acc % mod
            out.append(acc)
        return out


class _PublicContext:
    """Per-process tables for one public key (never pickled)."""

    def __init__(self, pk: OUPublicKey) -> None:
        self.n = mpz(pk.n)
        self.rand_bytes = short_exponent_bits(pk.key_bits) // 8
        self.tables = _Tables(pk.g, pk.h, pk.n, (pk.p_bits + 7) // 8, self.rand_bytes)

    def random_hr(self, count: int) -> list[mpz]:
        return self.tables.h.pow_bytes(secrets.token_bytes(self.rand_bytes * count), self.rand_bytes)

    def encrypt(self, ms: list[int], masks: list[mpz] | None = None) -> list[mpz]:
        return self.tables.encrypt(ms, masks if masks is not None else self.random_hr(len(ms)))


class _PrivateContext:
    """Decryption constants of the key owner."""

    def __init__(self, sk: OUPrivateKey) -> None:
        pk = sk.public_key
        self.p, self.q, self.t = mpz(sk.p), mpz(sk.q), mpz(sk.t)
        self.p2 = self.p * self.p
        gp = gmpy2.powmod(pk.g, self.t, self.p2)  # G^t = g^(p-1): order p mod p^2
        self.gp_inv = gmpy2.invert((gp - 1) // self.p, self.p)


@lru_cache(maxsize=16)
def _public_context(pk: OUPublicKey) -> _PublicContext:
    return _PublicContext(pk)


@lru_cache(maxsize=16)
def _private_context(sk: OUPrivateKey) -> _PrivateContext:
    return _PrivateContext(sk)


class OUBackend(ModularBackend):
    """Okamoto-Uchiyama backend on gmpy2: 2048-bit ciphertexts at 2048-bit keys, cheap decryption.

    Example
    -------
    >>> import numpy as np
    >>> be = OUBackend()
    >>> pk, sk = be.generate_keys(1024, allow_weak=True)  # small key: a quick example only
    >>> c = be.sub(pk, be.encrypt(pk, np.array([0.5])), be.encrypt(sk, np.array([0.75])))
    >>> be.decrypt(sk, c)
    array([-0.25])
    """

    reuses_message_powers = True

    name = "ou"
    public_key_type = OUPublicKey

    def _generate_keys(self, key_bits: int) -> tuple[OUPublicKey, OUPrivateKey]:
        pk, sk = generate_ou_keypair(key_bits)
        self.packing.check_modulus(pk.plain_bound)
        return pk, sk

    def _plain_bound(self, pk: OUPublicKey) -> int:
        return pk.plain_bound

    def _decrypt_modulus(self, sk: OUPrivateKey) -> int:
        return sk.p

    def _ct_modulus(self, pk: OUPublicKey) -> int:
        return pk.n

    def _width(self, pk: OUPublicKey) -> int:
        return (pk.n.bit_length() + 7) // 8

    def _raw_encrypt(self, pk: OUPublicKey, ms: list[int], sk: OUPrivateKey | None = None,
                     masks: list | None = None) -> list[mpz]:
        # No owner fast path: CRT tables mod p^2 and q were measured at 0.8x (1024) to 1.2x (3072),
        # the two table walks cost more Python than the smaller moduli save.
        return _public_context(pk).encrypt(ms, masks)

    def _expect_many_masks(self, pk: OUPublicKey) -> None:
        _public_context(pk).tables.h.expect_many()  # the owner encrypts with the public tables

    def _raw_masks(self, pk: OUPublicKey, count: int, sk: OUPrivateKey | None = None) -> list[mpz]:
        return _public_context(pk).random_hr(count)

    def _raw_decrypt(self, sk: OUPrivateKey, cts: list[mpz]) -> list[int]:
        ctx = _private_context(sk)
        p, gp_inv = ctx.p, ctx.gp_inv
        (xs,) = parallel_powmod(cts, [(ctx.t, ctx.p2)])
        return [int((x - 1) // p * gp_inv % p) for x in xs]

    def _raw_rerandomize(self, pk: OUPublicKey, cts: list[mpz], masks: list | None = None) -> list[mpz]:
        ctx = _public_context(pk)
        n = ctx.n
        return [c * hr % n for c, hr in zip(cts, masks if masks is not None else ctx.random_hr(len(cts)))]
