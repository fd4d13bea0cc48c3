"""Ciphertext arrays and the key base classes every backend shares.

A :class:`CipherArray` is a contiguous numpy array plus the fingerprint of the key that made it, so
mixing keys is detected on every operation; keys carry that fingerprint (:func:`fingerprint`).
"""

from __future__ import annotations

import hashlib
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from ray_vfl.errors import CryptoError
from ray_vfl.runtime.payload_shapes import dtype_name

__all__ = ["CipherArray", "PublicKey", "PrivateKey", "fingerprint"]


def fingerprint(scheme: str, *parts: int | bytes) -> bytes:
    """Return a 16-byte key fingerprint of ``scheme`` and the public parameters."""
    h = hashlib.sha256(scheme.encode())
    for part in parts:
        b = part if isinstance(part, bytes) else int(part).to_bytes((int(part).bit_length() + 8) // 8, "big")
        h.update(len(b).to_bytes(4, "big") + b)
    return h.digest()[:16]


class PublicKey(ABC):
    """A public key; picklable, small, identified by :attr:`key_id`."""

    scheme: ClassVar[str]

    @property
    @abstractmethod
    def key_id(self) -> bytes:
        """16-byte fingerprint of the public parameters."""


class PrivateKey(ABC):
    """A private key; holds its public key as :attr:`public_key`."""

    public_key: Any

    @property
    def key_id(self) -> bytes:
        """Fingerprint of the matching public key."""
        return self.public_key.key_id


@dataclass(frozen=True, eq=False)
class CipherArray:
    """A 1-D array of ciphertexts (or of plaintexts for the ``plain`` backend).

    Parameters
    ----------
    data : numpy.ndarray
        ``uint8`` of shape ``(n, width)`` holding fixed-width big-endian
        ciphertexts, or float64 of shape ``(n,)`` / ``(n, 2)`` for ``plain``.
        Treated as read-only: operations always build new arrays.
    key_id : bytes
        Fingerprint of the public key the entries belong to.
    tag : str
        What the entries encode: ``"num:f<frac_bits>"`` for scalars, a
        ``"gh:..."`` layout string for packed gradient pairs.

    Example
    -------
    >>> from ray_vfl.crypto import get_backend
    >>> be = get_backend("plain")
    >>> pk, sk = be.generate_keys()
    >>> c = be.encrypt(pk, np.array([1.0, 2.0]))
    >>> len(c), c.nbytes
    (2, 16)
    """

    data: np.ndarray
    key_id: bytes
    tag: str
    # Process-local cache ``(backend name, decoded big integers)``; never pickled.
    _ints: tuple | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.data, np.ndarray) or self.data.ndim < 1:
            raise CryptoError("CipherArray.data must be a numpy array with at least one dimension")
        if not self.data.flags.c_contiguous:
            object.__setattr__(self, "data", np.ascontiguousarray(self.data))

    def __len__(self) -> int:
        return int(self.data.shape[0])

    @property
    def nbytes(self) -> int:
        """Size of the payload in bytes (what crosses the network)."""
        return int(self.data.nbytes)

    def describe(self) -> tuple:
        """Shape of the payload for the send path's audit records (never values)."""
        return ("CipherArray", {"data": ("ndarray", dtype_name(self.data.dtype), self.data.shape), "key_id": "bytes", "tag": "str"})

    def __reduce__(self):  # ship only the array, key id and tag
        return (CipherArray, (self.data, self.key_id, self.tag))

    def __repr__(self) -> str:
        return f"CipherArray(len={len(self)}, tag={self.tag!r}, key_id={self.key_id.hex()[:8]}.., nbytes={self.nbytes})"
