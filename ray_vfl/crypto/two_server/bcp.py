"""Bresson-Catalano-Pointcheval (BCP) encryption: keys, Setup, KeyGen and the raw arithmetic.

Scheme (Bresson, Catalano, Pointcheval, "A simple public-key cryptosystem with a double
trapdoor decryption mechanism and its applications", Asiacrypt 2003; as used by SSXGB)::

    Setup   N = p q with safe primes p = 2p' + 1, q = 2q' + 1;  g in Z*_{N^2} of order p p' q q';
            public parameters (N, g), master key mk = (p', q')
    KeyGen  a_i uniform in [1, N^2 / 2],  h_i = g^{a_i} mod N^2          (pk_i = h_i, sk_i = a_i)
    Enc     (A, B) = (g^r, h_i^r (1 + m N)) mod N^2                      (m in Z_N)
    Dec     m = L(B / A^{a_i} mod N^2)  with  L(u) = (u - 1) / N
    mDec    with mk, for any user's ciphertext (below)

Order of g. The brief of this module said "g of order p'q'"; that would make mDec impossible
(``h = g^a`` would carry no information about ``a`` in its ``(1 + N)`` component, and a discrete
log in an order-``p'`` subgroup is hard even knowing ``p``). BCP's master trapdoor needs the
order ``p p' q q'`` of the paper, the largest order in the squares of ``Z*_{N^2}`` (which has
exponent ``lambda(N^2) = 2 N p' q'``). We take ``g = alpha^2 mod N^2`` for a random ``alpha`` and
check with the master key that its order is exactly ``p p' q q'``: ``g^{N p'} != 1``,
``g^{N q'} != 1`` (the ``p'``, ``q'`` parts) and ``ell_p(g) != 0``, ``ell_q(g) != 0`` (the ``p``,
``q`` parts; ``ell`` is defined below). A random square fails with probability about
``1/p' + 1/q' + 1/p + 1/q``; Setup draws again when it does.

mDec (the paper's second trapdoor). With ``lambda = lambda(N) = 2 p' q'``, ``u^lambda mod N^2 =
1 + N L(u^lambda)`` for every ``u``, and ``u -> L(u^lambda) mod N`` is a homomorphism from
``Z*_{N^2}`` to ``Z_N``. The paper recovers the discrete logs modulo ``N``::

    a mod N = L(h^lambda) / L(g^lambda)          r mod N = L(A^lambda) / L(g^lambda)
    tau = a r mod N,   m = (L(B^lambda) - tau L(g^lambda)) / lambda   mod N

since ``B^lambda = g^{a r lambda} (1 + m N)^lambda = 1 + N (tau L(g^lambda) + m lambda)``. We
compute the same thing prime by prime (the CRT; four half-size exponentiations instead of two
full-size ones): with ``ell_p(u) = L_p(u^{p-1} mod p^2) mod p``, ``L_p(v) = (v - 1) / p``, also a
homomorphism, ``ell_p(1 + m N) = -m q mod p``, so

    a_p = ell_p(h) / ell_p(g) mod p            (once per user key)
    m   = (a_p ell_p(A) - ell_p(B)) / q   mod p

(the ``tau`` step merged in: ``a_p ell_p(A) = ell_p(h^r)``), the same modulo ``q``, then the CRT.

Exponent lengths. User keys ``a_i`` are full length, as in the paper. The encryption exponent ``r``
is short: ``2 * security_level`` bits (160 / 224 bits at 1024 / 2048-bit ``N``), like our Paillier's
Damgard-Jurik-Nielsen exponents. Argument: the generic attacks on a short exponent (Pollard lambda,
baby-step giant-step on ``A = g^r``) cost ``2^(bits / 2)``, the security level; formally, semantic
security then rests on the short-exponent DDH assumption in ``<g>``, which Koshiba and Kurosawa
("Short exponent Diffie-Hellman problems", PKC 2004) reduce to DDH plus the hardness of discrete
logs with short exponents. ``mDec`` works for any ``r``. :func:`set_exponents(False) <set_exponents>`
draws ``r`` uniform below ``2^(8 ceil((2|N| - 2) / 8))`` (the paper's ``[1, N^2 / 4]``, rounded up to
bytes), several times slower.

Where short exponents are NOT allowed: the master-key holder computes ``r mod N`` of any ciphertext
(``ell_p(A) / ell_p(g)``). A ciphertext that C derives with secret multipliers (LGT's sign and scale,
Mult's masks) from ciphertexts whose randomness S knows or that is short would let S solve for those
multipliers from ``r mod N``. So every ciphertext C sends to S first gets a fresh encryption whose
exponent has ``|N| + HIDING_BITS`` bits (``HIDING_BITS = 128``; ``raw_encrypt(..., hiding=True)``),
statistically uniform modulo ``N``, which makes ``r mod N`` independent of everything else.

Speed: ``g`` and each ``h`` get fixed-base windowed tables per exponent length
(:class:`~ray_vfl.crypto.he.gmp.MaskPowers`: 8-bit windows, 12-bit once a process has made 8,192
encryptions under the key), so a short-exponent encryption costs ``2 * 28`` (then ``2 * 19``) modular
multiplications at 2048 bits instead of two exponentiations; a hiding one ``2 * 272`` (its 12-bit
tables would take ~380 MB per base, so it stays on 8-bit windows). Decryption and mDec use threaded
``powmod_base_list`` (:func:`~ray_vfl.crypto.he.gmp.parallel_powmod`), one exponent per batch; mDec
costs about twice a Paillier CRT decryption (four half-size exponentiations instead of two).
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from functools import cached_property, lru_cache

import gmpy2
import numpy as np
from gmpy2 import mpz

from ray_vfl.crypto.he.ciphertexts import fingerprint
from ray_vfl.crypto.he.gmp import MaskPowers, parallel_powmod
from ray_vfl.crypto.he.key_policy import check_key_bits, security_level
from ray_vfl.errors import ConfigError, CryptoError

__all__ = [
    "HIDING_BITS",
    "BCPMasterKey",
    "BCPParams",
    "BCPPublicKey",
    "BCPSecretKey",
    "encryption_exponent_bits",
    "joint_key",
    "keygen",
    "random_safe_prime",
    "raw_encrypt",
    "set_exponents",
    "setup",
]

_SHORT = True  # short encryption exponents (see the module docstring); set_exponents(False) for full length
# The master-key holder learns the randomness of any ciphertext modulo N (r mod N = ell(A) / ell(g)).
# A ciphertext sent to it must therefore carry a fresh exponent that is statistically uniform modulo N:
# |N| + HIDING_BITS bits (distance from uniform <= 2^-HIDING_BITS). Otherwise the exponent it sees is a
# known combination of short exponents and of C's secret multipliers (LGT's sign, Mult's masks).
HIDING_BITS = 128


def set_exponents(short: bool) -> bool:
    """Draw encryption exponents short (default, ``2 * security_level`` bits) or full length
    (``[1, N^2 / 4]``, the paper); returns the previous setting.

    Example
    -------
    >>> old = set_exponents(False); set_exponents(old)
    False
    """
    global _SHORT
    old, _SHORT = _SHORT, bool(short)
    return old


def encryption_exponent_bits(key_bits: int, hiding: bool = False) -> int:
    """Bits of the encryption exponent ``r``: ``2 * security_level`` when short, else ``2 * key_bits - 2``;
    with ``hiding``, at least ``key_bits + HIDING_BITS`` (see :data:`HIDING_BITS`).

    Example
    -------
    >>> encryption_exponent_bits(2048), encryption_exponent_bits(1024), encryption_exponent_bits(2048, hiding=True)
    (224, 160, 2176)
    """
    bits = 2 * security_level(key_bits) if _SHORT else 2 * int(key_bits) - 2
    return max(bits, int(key_bits) + HIDING_BITS) if hiding else bits


@dataclass(frozen=True)
class BCPParams:
    """Public parameters ``(N, g)`` of one BCP Setup; every user key of the setup shares them."""

    n: int
    g: int

    @cached_property
    def params_id(self) -> bytes:
        return fingerprint("bcp-params", self.n, self.g)

    @property
    def nsquare(self) -> int:
        return self.n * self.n

    @property
    def key_bits(self) -> int:
        return self.n.bit_length()

    @property
    def width(self) -> int:
        """Bytes of one component (``A`` or ``B``) of a ciphertext."""
        return (self.nsquare.bit_length() + 7) // 8


@dataclass(frozen=True)
class BCPPublicKey:
    """A user's (or the joint) public key ``h = g^a mod N^2`` under parameters ``params``."""

    scheme = "bcp"
    params: BCPParams
    h: int

    @cached_property
    def key_id(self) -> bytes:
        return fingerprint("bcp", self.params.n, self.params.g, self.h)

    @property
    def key_bits(self) -> int:
        return self.params.key_bits


@dataclass(frozen=True, repr=False)
class BCPSecretKey:
    """A user's secret exponent ``a`` (``h = g^a``); its repr never shows ``a``."""

    public_key: BCPPublicKey
    a: int

    def __repr__(self) -> str:
        return f"BCPSecretKey(key_id={self.key_id.hex()[:8]}..)"

    @property
    def key_id(self) -> bytes:
        return self.public_key.key_id


@dataclass(frozen=True, repr=False)
class BCPMasterKey:
    """The master key ``(p', q')`` of a Setup: decrypts any user's ciphertext (mDec).

    Raises
    ------
    CryptoError
        If ``(2p' + 1)(2q' + 1) != N``.
    """

    params: BCPParams
    p1: int
    q1: int

    def __repr__(self) -> str:  # never shows p', q'
        return f"BCPMasterKey(params={self.params.params_id.hex()[:8]}..)"

    def __post_init__(self) -> None:
        if (2 * int(self.p1) + 1) * (2 * int(self.q1) + 1) != self.params.n or self.p1 == self.q1:
            raise CryptoError("the master key (p', q') does not match N = (2p' + 1)(2q' + 1)")

    @property
    def p(self) -> int:
        return 2 * self.p1 + 1

    @property
    def q(self) -> int:
        return 2 * self.q1 + 1


# -- Setup ----------------------------------------------------------------------------------------
@lru_cache(maxsize=1)
def _small_primes(bound: int = 1 << 15) -> np.ndarray:
    sieve = np.ones(bound, dtype=bool)
    sieve[:2] = False
    for i in range(2, int(bound ** 0.5) + 1):
        if sieve[i]:
            sieve[i * i::i] = False
    return np.flatnonzero(sieve)[2:]  # odd primes >= 5 (3 and 2 handled by the residue class)


def random_safe_prime(bits: int) -> mpz:
    """A random safe prime ``p = 2p' + 1`` of exactly ``bits`` bits (``p'`` prime), from ``secrets``.

    Candidates ``p' = 5 mod 6`` (so neither ``p'`` nor ``p`` is divisible by 2 or 3) are sieved
    over a window of 2^15 by the primes below 2^15 for both ``p'`` and ``2p' + 1``; the survivors
    get Miller-Rabin tests (a base-2 Fermat test of ``p`` first).

    Example
    -------
    >>> p = random_safe_prime(64)
    >>> p.bit_length(), bool(gmpy2.is_prime(p)), bool(gmpy2.is_prime((p - 1) // 2))
    (64, True, True)
    """
    if bits < 16:
        raise ConfigError(f"safe primes need at least 16 bits, got {bits}")
    primes = _small_primes()
    window = 1 << 15
    inv6 = np.array([pow(6, -1, int(s)) for s in primes], dtype=np.int64)
    while True:
        start = mpz(secrets.randbits(bits - 1)) | (mpz(3) << (bits - 3))  # p' has bits - 1 bits
        start += (5 - start % 6) % 6
        ok = np.ones(window, dtype=bool)  # k -> p' = start + 6k
        res = np.array([int(start % int(s)) for s in primes], dtype=np.int64)
        for target in (np.zeros_like(primes), (primes - 1) // 2):  # s | p'  or  s | 2p' + 1
            k0 = (target - res) % primes * inv6 % primes
            for s, k in zip(primes.tolist(), k0.tolist()):
                ok[k::s] = False
        for k in np.flatnonzero(ok).tolist():
            p1 = start + 6 * k
            p = 2 * p1 + 1
            if p.bit_length() != bits:
                break
            if gmpy2.powmod(2, p - 1, p) == 1 and gmpy2.is_prime(p1, 30) and gmpy2.is_prime(p, 30):
                return p


def _ell(u: mpz, p: mpz, p2: mpz) -> mpz:
    """``ell_p(u) = L_p(u^(p-1) mod p^2) mod p`` (the p-adic logarithm, up to a constant)."""
    return (gmpy2.powmod(u, p - 1, p2) - 1) // p % p


def setup(key_bits: int = 2048, allow_weak: bool = False) -> tuple[BCPParams, BCPMasterKey]:
    """BCP Setup: public parameters ``(N, g)`` and the master key ``(p', q')``.

    Parameters
    ----------
    key_bits : int, default 2048
        Bits of ``N``; the key policy of :mod:`ray_vfl.crypto.he.key_policy` (1024 only with
        ``allow_weak=True``, with a :class:`~ray_vfl.errors.SecurityWarning`).

    Example
    -------
    >>> import warnings; warnings.simplefilter("ignore")
    >>> params, mk = setup(1024, allow_weak=True)
    >>> params.key_bits
    1024
    """
    key_bits = check_key_bits(key_bits, allow_weak, "allow_weak=True", stacklevel=2)
    if key_bits % 16:
        raise ConfigError(f"key_bits must be a multiple of 16, got {key_bits}")
    half = key_bits // 2
    while True:
        p, q = random_safe_prime(half), random_safe_prime(half)
        if p != q and (p * q).bit_length() == key_bits:
            break
    n = p * q
    n2 = n * n
    p1, q1 = (p - 1) // 2, (q - 1) // 2
    while True:  # g = alpha^2 of order exactly p p' q q' (module docstring)
        alpha = mpz(secrets.randbelow(int(n2) - 2) + 2)
        if gmpy2.gcd(alpha, n) != 1:
            continue
        g = alpha * alpha % n2
        if (gmpy2.powmod(g, n * p1, n2) != 1 and gmpy2.powmod(g, n * q1, n2) != 1
                and _ell(g, p, p * p) != 0 and _ell(g, q, q * q) != 0):
            break
    params = BCPParams(int(n), int(g))
    return params, BCPMasterKey(params, int(p1), int(q1))


def keygen(params: BCPParams) -> tuple[BCPPublicKey, BCPSecretKey]:
    """A user key pair: ``a`` uniform in ``[1, N^2 / 2]``, ``h = g^a mod N^2``.

    Example
    -------
    >>> pk, sk = keygen(BCPParams(n=11 * 23, g=4))
    >>> pk.h == pow(4, sk.a, (11 * 23) ** 2)
    True
    """
    if not isinstance(params, BCPParams):
        raise CryptoError(f"keygen needs BCPParams, got {type(params).__name__}")
    a = secrets.randbelow(params.nsquare // 2) + 1
    pk = BCPPublicKey(params, int(gmpy2.powmod(params.g, a, params.nsquare)))
    return pk, BCPSecretKey(pk, int(a))


def joint_key(keys: list[BCPPublicKey]) -> BCPPublicKey:
    """The joint public key ``prod h_i mod N^2`` (secret ``sum a_i``, which nobody holds; the
    master-key holder decrypts under it like under any key).

    Example
    -------
    >>> params = BCPParams(n=11 * 23, g=4)
    >>> joint_key([BCPPublicKey(params, 16), BCPPublicKey(params, 64)]).h == 16 * 64
    True
    """
    if not keys:
        raise CryptoError("joint_key needs at least one public key")
    params = keys[0].params
    h = mpz(1)
    for k in keys:
        if not isinstance(k, BCPPublicKey) or k.params != params:
            raise CryptoError("joint_key: every key must be a BCPPublicKey of the same Setup")
        h = h * k.h % params.nsquare
    return BCPPublicKey(params, int(h))


# -- per-process contexts (fixed-base tables, CRT constants) -----------------------------------------
class _Bases:
    """Fixed-base tables for ``g`` and one ``h`` (the masks ``g^r``, ``h^r`` of an encryption)."""

    def __init__(self, n: int, g: int, h: int, exp_bytes: int) -> None:
        self.n = mpz(n)
        self.n2 = self.n * self.n
        self.exp_bytes = exp_bytes
        self.g = _fixed(int(n), int(g), exp_bytes)
        self.h = _fixed(int(n), int(h), exp_bytes)

    def encrypt(self, ms: list[int]) -> tuple[list[mpz], list[mpz]]:
        eb = self.exp_bytes
        rs = secrets.token_bytes(eb * len(ms))
        big_a = self.g.pow_bytes(rs, eb)
        hr = self.h.pow_bytes(rs, eb)
        n, n2 = self.n, self.n2
        big_b = [(1 + (m % n) * n) * x % n2 for m, x in zip(ms, hr)]
        return big_a, big_b


@lru_cache(maxsize=64)
def _fixed(n: int, base: int, exp_bytes: int) -> MaskPowers:
    mp = MaskPowers(base, n * n, exp_bytes)
    if exp_bytes > 64:  # full-length exponents: a 12-bit table would take ~0.7 GB at 2048 bits; stay on 8-bit
        mp.MANY = float("inf")
    return mp


@lru_cache(maxsize=64)
def _bases(n: int, g: int, h: int, exp_bits: int) -> _Bases:
    return _Bases(n, g, h, (exp_bits + 7) // 8)


def raw_encrypt(pk: BCPPublicKey, ms: list[int], hiding: bool = False) -> tuple[list[mpz], list[mpz]]:
    """``(A, B)`` lists for signed integers ``ms`` (taken mod N); ``hiding``: exponents of
    ``|N| + HIDING_BITS`` bits, for ciphertexts the master-key holder will open (module docstring)."""
    bits = encryption_exponent_bits(pk.params.key_bits, hiding)
    return _bases(pk.params.n, pk.params.g, pk.h, bits).encrypt(ms)


def raw_decrypt(sk: BCPSecretKey, big_a: list[mpz], big_b: list[mpz]) -> list[mpz]:
    """Residues ``m mod N`` with the user key; raises if a ciphertext does not decrypt under it."""
    n = mpz(sk.public_key.params.n)
    n2 = n * n
    (aa,) = parallel_powmod(big_a, [(mpz(sk.a), n2)])
    out = []
    for x, b in zip(aa, big_b):
        u = b * gmpy2.invert(x, n2) % n2 - 1
        m, rest = gmpy2.t_divmod(u, n)
        if rest:
            raise CryptoError("a ciphertext does not decrypt under this secret key (wrong key or corrupt data)")
        out.append(m)
    return out
