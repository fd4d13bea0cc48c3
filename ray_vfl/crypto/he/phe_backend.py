"""The ``phe`` backend (python-paillier) and conversions to and from python-paillier.

The backend does every homomorphic operation with python-paillier's own
``EncryptedNumber`` objects (its encryption, obfuscation, ``+``, ``*`` and
decryption), and only stores the resulting integers in the common
:class:`~ray_vfl.crypto.he.base.CipherArray` byte layout. It shares key classes,
fixed-point encoding and byte layout with the fast ``paillier`` backend, so a
ciphertext from one decrypts with the other.

python-paillier encodes ``x`` as ``encoding * 16**exponent``; our fixed point
with ``frac_bits`` fractional bits is exactly ``exponent = -frac_bits / 4``,
so ``frac_bits`` must be a multiple of 4 here.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Sequence

from ray_vfl.crypto.he.ciphertexts import CipherArray
from ray_vfl.crypto.he.modular import ModularBackend
from ray_vfl.crypto.he.paillier import PaillierPrivateKey, PaillierPublicKey
from ray_vfl.errors import ConfigError, CryptoError

try:
    from phe import paillier as _phe
except ImportError:  # pragma: no cover - exercised only without phe installed
    raise ConfigError("backend 'phe' needs python-paillier: pip install phe") from None

__all__ = [
    "PheBackend",
    "to_phe_keypair",
    "from_phe_keypair",
    "to_phe_ciphertexts",
    "from_phe_ciphertexts",
]


@lru_cache(maxsize=16)
def _phe_public(n: int) -> _phe.PaillierPublicKey:
    return _phe.PaillierPublicKey(n)


@lru_cache(maxsize=16)
def _phe_private(n: int, p: int, q: int) -> _phe.PaillierPrivateKey:
    return _phe.PaillierPrivateKey(_phe_public(n), p, q)


def _exponent(frac_bits: int) -> int:
    if frac_bits % 4:
        raise ConfigError(f"python-paillier needs frac_bits to be a multiple of 4, got {frac_bits}")
    return -frac_bits // 4


def to_phe_keypair(pk: PaillierPublicKey, sk: PaillierPrivateKey | None = None):
    """Convert our keys to python-paillier keys.

    Returns
    -------
    (phe.PaillierPublicKey, phe.PaillierPrivateKey or None)

    Example
    -------
    >>> from ray_vfl.crypto.he.paillier import generate_paillier_keypair
    >>> pk, sk = generate_paillier_keypair(1024)
    >>> phe_pk, phe_sk = to_phe_keypair(pk, sk)
    >>> phe_pk.n == pk.n
    True
    """
    if sk is not None and sk.public_key.key_id != pk.key_id:
        raise CryptoError("private key does not belong to the public key")
    return _phe_public(pk.n), (None if sk is None else _phe_private(pk.n, sk.p, sk.q))


def from_phe_keypair(phe_pk, phe_sk=None) -> tuple[PaillierPublicKey, PaillierPrivateKey | None]:
    """Convert python-paillier keys to ours (usable by both ``phe`` and ``paillier`` backends).

    Example
    -------
    >>> from phe import paillier
    >>> phe_pk, phe_sk = paillier.generate_paillier_keypair(n_length=1024)
    >>> pk, sk = from_phe_keypair(phe_pk, phe_sk)
    >>> pk.n == phe_pk.n
    True
    """
    if phe_pk.g != phe_pk.n + 1:
        raise CryptoError("only python-paillier keys with g = n + 1 are supported")
    pk = PaillierPublicKey(int(phe_pk.n))
    if phe_sk is None:
        return pk, None
    if phe_sk.public_key.n != phe_pk.n:
        raise CryptoError("private key does not belong to the public key")
    return pk, PaillierPrivateKey(pk, int(phe_sk.p), int(phe_sk.q))


def to_phe_ciphertexts(pk: PaillierPublicKey, c: CipherArray, frac_bits: int = 40) -> list:
    """Turn a scalar :class:`CipherArray` into python-paillier ``EncryptedNumber`` objects.

    Example
    -------
    >>> import numpy as np
    >>> from ray_vfl.crypto import get_backend
    >>> be = get_backend("paillier")
    >>> pk, sk = be.generate_keys(1024, allow_weak=True)  # small key: a quick example only
    >>> phe_pk, phe_sk = to_phe_keypair(pk, sk)
    >>> [phe_sk.decrypt(e) for e in to_phe_ciphertexts(pk, be.encrypt(pk, np.array([0.5])))]
    [0.5]
    """
    exp = _exponent(frac_bits)
    if c.key_id != pk.key_id:
        raise CryptoError("ciphertexts do not belong to this public key")
    if c.tag != f"num:f{frac_bits}":
        raise CryptoError(f"only scalar entries encoded with frac_bits={frac_bits} convert, got {c.tag!r}")
    w = c.data.shape[1]
    buf = c.data.tobytes()
    phe_pk = _phe_public(pk.n)
    return [_phe.EncryptedNumber(phe_pk, int.from_bytes(buf[i:i + w], "big"), exp) for i in range(0, len(buf), w)]


def from_phe_ciphertexts(pk: PaillierPublicKey, numbers: Sequence, frac_bits: int = 40) -> CipherArray:
    """Turn python-paillier ``EncryptedNumber`` objects into a scalar :class:`CipherArray`.

    Numbers with a coarser exponent are rescaled homomorphically; finer ones
    raise :class:`CryptoError`. Unobfuscated numbers are obfuscated
    (python-paillier's ``be_secure=True``).
    """
    exp = _exponent(frac_bits)
    backend = PheBackend(frac_bits=frac_bits)
    ints = []
    for e in numbers:
        if not isinstance(e, _phe.EncryptedNumber) or e.public_key.n != pk.n:
            raise CryptoError("every number must be a python-paillier EncryptedNumber under this public key")
        if e.exponent < exp:
            raise CryptoError(f"EncryptedNumber exponent {e.exponent} is finer than 16**{exp}: raise frac_bits")
        if e.exponent > exp:
            e = e.decrease_exponent_to(exp)
        ints.append(int(e.ciphertext(be_secure=True)))
    return backend._wrap(pk, ints, backend.num_tag)


class PheBackend(ModularBackend):
    """Backend over python-paillier's ``EncryptedNumber`` (honest baseline, slow).

    Example
    -------
    >>> import numpy as np
    >>> be = PheBackend()
    >>> pk, sk = be.generate_keys(1024, allow_weak=True)  # small key: a quick example only
    >>> be.decrypt(sk, be.mul_plain(pk, be.encrypt(pk, np.array([0.5])), np.array([3])))
    array([1.5])
    """

    name = "phe"
    public_key_type = PaillierPublicKey

    def __init__(self, frac_bits: int = 40, max_rows: int = 2**20, gradient_bound: float = 2.0**16,
                 guard_bits: int = 8, pairs: int = 1) -> None:
        if pairs != 1:
            raise ConfigError("backend 'phe' packs one gradient pair per ciphertext; multi-output trees need "
                              "backend='paillier' (or 'ou', 'plain')")
        super().__init__(frac_bits=frac_bits, max_rows=max_rows, gradient_bound=gradient_bound, guard_bits=guard_bits)
        self._exp = _exponent(self.fixed_point.frac_bits)

    def _generate_keys(self, key_bits: int) -> tuple[PaillierPublicKey, PaillierPrivateKey]:
        phe_pk, phe_sk = _phe.generate_paillier_keypair(n_length=key_bits)
        pk, sk = from_phe_keypair(phe_pk, phe_sk)
        self.packing.check_modulus(self._plain_bound(pk))
        return pk, sk

    def _plain_bound(self, pk: PaillierPublicKey) -> int:
        return pk.n

    def _ct_modulus(self, pk: PaillierPublicKey) -> int:
        return pk.nsquare

    def _width(self, pk: PaillierPublicKey) -> int:
        return (pk.nsquare.bit_length() + 7) // 8

    def _from_bytes(self, row: bytes) -> int:
        return int.from_bytes(row, "big")

    def _numbers(self, pk: PaillierPublicKey, cts: list[int]) -> list:
        phe_pk, exp = _phe_public(pk.n), self._exp
        return [_phe.EncryptedNumber(phe_pk, c, exp) for c in cts]

    supports_masks = False

    def _raw_masks(self, pk, count, sk=None):
        raise CryptoError("the python-paillier backend draws its randomness per encryption; "
                          "use backend 'paillier' for precomputed masks")

    def _raw_encrypt(self, pk, ms, sk=None, masks=None):
        if masks is not None:
            self._raw_masks(pk, len(ms))
        phe_pk = _phe_public(pk.n)
        n = pk.n
        # encrypt_encoded(..., r_value=None) obfuscates with a fresh r^n, python-paillier's default path
        # (python-paillier has no owner fast path, so ``sk`` is not used).
        return [phe_pk.encrypt_encoded(_phe.EncodedNumber(phe_pk, m % n, self._exp), None).ciphertext(be_secure=False)
                for m in ms]

    def _raw_decrypt(self, sk, cts):
        phe_sk = _phe_private(sk.public_key.n, sk.p, sk.q)
        return [phe_sk.raw_decrypt(int(c)) for c in cts]

    def _raw_add(self, pk, a, b):
        return [(x + y).ciphertext(be_secure=False) for x, y in zip(self._numbers(pk, a), self._numbers(pk, b))]

    def _raw_sub(self, pk, a, b):
        return [(x - y).ciphertext(be_secure=False) for x, y in zip(self._numbers(pk, a), self._numbers(pk, b))]

    def _raw_mul(self, pk, cts, ks):
        return [(x * k).ciphertext(be_secure=False) for x, k in zip(self._numbers(pk, cts), ks)]

    def _raw_bucket_sum(self, pk, cts, rows, buckets, n_buckets):
        nums = self._numbers(pk, cts)
        acc = [None] * n_buckets
        for r, b in zip(rows, buckets):
            a = acc[b]
            acc[b] = nums[r] if a is None else a + nums[r]
        return [1 if a is None else a.ciphertext(be_secure=False) for a in acc]  # 1: trivial encryption of 0

    def _raw_rerandomize(self, pk, cts, masks=None):
        if masks is not None:
            self._raw_masks(pk, len(cts))
        nums = self._numbers(pk, cts)
        for x in nums:
            x.obfuscate()
        return [x.ciphertext(be_secure=False) for x in nums]
