"""The ``plain`` backend: no encryption, float64 arithmetic, same interface.

It exists for lossless tests and speed: results equal numpy float arithmetic
(``bucket_sum`` is ``np.bincount``, bit for bit). Keys are random tokens, so
mixing keys is still detected exactly like in the encrypted backends.

``bucket_sum`` is the hot path of plaintext training. When every key is
``>= 0`` (the SecureBoost case) it runs as one sparse scatter-add,
``out = A @ values`` with ``A[key, row] = 1``, through scipy's compiled CSC
kernel (2 columns at once, rows in order, so the sums are exactly
``np.bincount``'s); without scipy, or with negative keys, it falls back to
``np.bincount``.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from functools import cached_property
from typing import ClassVar

import numpy as np

from ray_vfl.crypto.he.arrays import as_int_list
from ray_vfl.crypto.he.base import Backend
from ray_vfl.crypto.he.ciphertexts import CipherArray, PrivateKey, PublicKey, fingerprint
from ray_vfl.crypto.he.fixed_point import as_float_vector
from ray_vfl.errors import DataError

try:  # compiled y += A @ x for CSC matrices; a private module, hence the feature detection
    from scipy.sparse._sparsetools import csc_matvecs as _csc_matvecs
except ImportError:  # pragma: no cover - scipy always comes with scikit-learn
    _csc_matvecs = None

__all__ = ["PlainBackend", "PlainPublicKey", "PlainPrivateKey"]

_NUM, _GH = "num", "gh"
_ONES = np.ones(0)


def _ones(n: int) -> np.ndarray:
    """A read-only vector of ``n`` ones, reused between calls."""
    global _ONES
    if _ONES.shape[0] < n:
        _ONES = np.ones(max(n, 2 * _ONES.shape[0]))
        _ONES.flags.writeable = False
    return _ONES[:n]


@dataclass(frozen=True)
class PlainPublicKey(PublicKey):
    """Public 'key' of the plain backend: a random token naming the key pair."""

    scheme: ClassVar[str] = "plain"
    token: bytes = field(default_factory=lambda: secrets.token_bytes(16))

    @cached_property
    def key_id(self) -> bytes:
        return fingerprint(self.scheme, self.token)


@dataclass(frozen=True)
class PlainPrivateKey(PrivateKey):
    """Private 'key' of the plain backend."""

    public_key: PlainPublicKey


class PlainBackend(Backend):
    """No-crypto backend over float64 arrays.

    Example
    -------
    >>> be = PlainBackend()
    >>> pk, sk = be.generate_keys()
    >>> c = be.bucket_sum(pk, be.encrypt(pk, np.array([1.0, 2.0, 4.0])), np.array([0, 2, 0]), 3)
    >>> be.decrypt(sk, c)
    array([5., 0., 2.])
    """

    name = "plain"
    is_encrypted = False
    public_key_type = PlainPublicKey

    def _generate_keys(self, key_bits: int) -> tuple[PlainPublicKey, PlainPrivateKey]:
        pk = PlainPublicKey()
        return pk, PlainPrivateKey(pk)

    def _wrap(self, pk: PublicKey, data: np.ndarray, tag: str) -> CipherArray:
        return CipherArray(np.ascontiguousarray(data, dtype=np.float64), pk.key_id, tag)

    def encrypt(self, pk: PublicKey | PrivateKey, x: np.ndarray) -> CipherArray:
        pk, _ = self._encryption_keys(pk)
        x = as_float_vector(x, "x")
        if np.any(np.isnan(x)):
            raise DataError("cannot encrypt NaN")
        return self._wrap(pk, x.copy(), _NUM)

    def decrypt(self, sk: PrivateKey, c: CipherArray) -> np.ndarray:
        self._check_sk(sk)
        self._check_ct(sk.public_key, c, _NUM)
        return np.array(c.data, dtype=np.float64)

    def add(self, pk: PublicKey, a: CipherArray, b: CipherArray) -> CipherArray:
        self._binary_checks(pk, a, b)
        return self._wrap(pk, a.data + b.data, a.tag)

    def sub(self, pk: PublicKey, a: CipherArray, b: CipherArray) -> CipherArray:
        self._binary_checks(pk, a, b)
        return self._wrap(pk, a.data - b.data, a.tag)

    def mul_plain(self, pk: PublicKey, c: CipherArray, k: np.ndarray) -> CipherArray:
        self._check_pk(pk)
        self._check_ct(pk, c)
        kf = np.array(as_int_list(k, len(c)), dtype=np.float64)
        if c.data.ndim == 2:
            kf = kf[:, None]
        return self._wrap(pk, c.data * kf, c.tag)

    def bucket_sum(self, pk: PublicKey, c: CipherArray, keys: np.ndarray, n_buckets: int) -> CipherArray:
        self._check_pk(pk)
        self._check_ct(pk, c)
        k = np.asarray(keys)
        if isinstance(n_buckets, bool) or not isinstance(n_buckets, (int, np.integer)) or n_buckets < 0:
            raise DataError(f"n_buckets must be a non-negative int, got {n_buckets!r}")
        n = len(c)
        if k.ndim not in (1, 2) or k.shape[0] != n:
            raise DataError(f"keys must have shape ({n},) or ({n}, F), got {k.shape}")
        if k.size and not np.issubdtype(k.dtype, np.integer):
            raise DataError(f"keys must have an integer dtype, got {k.dtype}")
        n_buckets = int(n_buckets)
        if k.size == 0:
            return self._wrap(pk, np.zeros((n_buckets,) + c.data.shape[1:]), c.tag)
        lo, hi = int(k.min()), int(k.max())
        if hi >= n_buckets:
            raise DataError(f"keys must be < n_buckets={n_buckets}, got {hi}")
        if lo >= 0 and _csc_matvecs is not None:
            per_row = k.size // n
            flat = np.ascontiguousarray(k, dtype=np.int64).reshape(-1)
            out = np.zeros((n_buckets,) + c.data.shape[1:])
            n_vecs = 1 if c.data.ndim == 1 else c.data.shape[1]
            indptr = np.arange(0, flat.size + 1, per_row, dtype=np.int64)
            # column ``row`` of A holds that row's keys: out[key] += 1.0 * values[row], rows in order
            _csc_matvecs(n_buckets, n, n_vecs, indptr, flat, _ones(flat.size), c.data.reshape(-1), out.reshape(-1))
            return self._wrap(pk, out, c.tag)
        k2 = k.reshape(n, -1).astype(np.int64, copy=False)
        if lo >= 0:  # no scipy: one bincount per column over row-repeated values
            flat, rows = k2.reshape(-1), np.repeat(np.arange(n), k2.shape[1])
        else:
            keep = k2 >= 0
            flat = k2[keep]
            rows = np.broadcast_to(np.arange(n)[:, None], k2.shape)[keep]
        cols = [c.data] if c.data.ndim == 1 else [c.data[:, j] for j in range(c.data.shape[1])]
        sums = [np.bincount(flat, weights=col[rows], minlength=n_buckets) for col in cols]
        out = sums[0] if c.data.ndim == 1 else np.stack(sums, axis=1)
        return self._wrap(pk, out, c.tag)

    def rerandomize(self, pk: PublicKey, c: CipherArray, masks: CipherArray | None = None) -> CipherArray:
        self._check_pk(pk)
        self._check_ct(pk, c)
        return self._wrap(pk, c.data.copy(), c.tag)

    def encrypt_gh(self, pk: PublicKey | PrivateKey, g: np.ndarray, h: np.ndarray, masks: CipherArray | None = None) -> CipherArray:
        pk, _ = self._encryption_keys(pk)
        k = self.packing.pairs
        if k > 1:  # K pairs per row: columns g_0, h_0, g_1, h_1, ...
            g, h = np.asarray(g, dtype=np.float64), np.asarray(h, dtype=np.float64)
            if g.ndim != 2 or g.shape != h.shape or g.shape[1] != k:
                raise DataError(f"g and h must both be (n, {k}) arrays, got {g.shape} and {h.shape}")
            return self._wrap(pk, np.stack([g, h], axis=2).reshape(len(g), 2 * k), self.gh_tag)
        g = as_float_vector(g, "g")
        h = as_float_vector(h, "h")
        if g.shape != h.shape:
            raise DataError(f"g and h must have the same length, got {len(g)} and {len(h)}")
        return self._wrap(pk, np.stack([g, h], axis=1), _GH)

    def encrypt_gh_sums(self, pk: PublicKey | PrivateKey, g: np.ndarray, h: np.ndarray) -> CipherArray:
        return self.encrypt_gh(pk, g, h)

    def decrypt_gh(self, sk: PrivateKey, c: CipherArray) -> tuple[np.ndarray, np.ndarray]:
        self._check_sk(sk)
        self._check_ct(sk.public_key, c, self.gh_tag)
        if self.packing.pairs > 1:
            return np.array(c.data[:, 0::2]), np.array(c.data[:, 1::2])
        return np.array(c.data[:, 0]), np.array(c.data[:, 1])

    @property
    def gh_tag(self) -> str:
        return _GH if self.packing.pairs == 1 else f"{_GH}:k{self.packing.pairs}"

    def _data_problem(self, pk: PublicKey, data: np.ndarray) -> str | None:
        """Gradient pairs in plaintext: ``float64 (n, 2 K)`` for ``K`` pairs per row, finite."""
        width = 2 * self.packing.pairs
        if data.dtype != np.float64 or data.ndim != 2 or data.shape[1] != width:
            return f"is a {data.dtype} {data.shape} array; expected float64 (n, {width})"
        if not np.isfinite(data).all():
            return f"row {int(np.flatnonzero(~np.isfinite(data).all(axis=1))[0])} is not finite"
        return None

    def _binary_checks(self, pk: PublicKey, a: CipherArray, b: CipherArray) -> None:
        self._check_pk(pk)
        self._check_ct(pk, a)
        self._check_ct(pk, b)
        self._check_pair(a, b, same_len=True)
