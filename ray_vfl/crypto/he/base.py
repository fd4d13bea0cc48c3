"""The backend interface (:class:`Backend`); ciphertext arrays and keys are in :mod:`.ciphertexts`.

Every backend is a small vectorised value API (in the spirit of
python-paillier): ``encrypt``/``decrypt``/``add``/``sub``/``mul_plain``/
``bucket_sum`` over whole arrays, plus gradient-pair helpers
``encrypt_gh``/``decrypt_gh``. Ciphertext arrays are :class:`CipherArray`
values: a contiguous numpy array plus the fingerprint of the key that made
it, so mixing keys is detected on every operation.

Cipher compression (:meth:`Backend.compress_gh`) turns an array of packed
gradient pairs into fewer ciphertexts of several entries each, so the key
owner decrypts a few ciphertexts per feature instead of one per bin. The
layout lives in the tag, ``"<gh tag>:pack<k>:n<count>"``: ``k`` entries per
ciphertext, ``count`` entries in all, only the last ciphertext may be partial.

Encryption by the key owner: ``encrypt``/``encrypt_gh`` accept either the
public key or the private key. Given the private key, ``paillier``
encrypts with the Chinese remainder theorem (half-size moduli ``p^2`` and
``q^2``); the ciphertexts are identical in distribution to those made with
the public key. Backends without such a fast path use the public key.

Key sizes follow :mod:`ray_vfl.crypto.he.key_policy` (2048 bits by default; 1024 only on request).
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from typing import ClassVar, Sequence

import numpy as np

from ray_vfl.crypto.he.ciphertexts import CipherArray, PrivateKey, PublicKey
from ray_vfl.crypto.he.fixed_point import FixedPoint
from ray_vfl.crypto.he.key_policy import DEFAULT_KEY_BITS, check_key_bits
from ray_vfl.crypto.he.lazy_ints import LazyInts
from ray_vfl.crypto.he.packing import GHPacking
from ray_vfl.crypto.he.tags import compressed_layout, compressed_tag, take_compressed_tag
from ray_vfl.errors import ConfigError, CryptoError, DataError

__all__ = ["Backend"]

logger = logging.getLogger(__name__)

class Backend(ABC):
    """A homomorphic-encryption backend: one small vectorised interface.

    Parameters
    ----------
    frac_bits : int, default 40
        Fixed-point precision of encrypted backends (ignored by ``plain``).
    max_rows : int, default 2**20
        GH packing stays exact for sums of up to this many rows.
    gradient_bound : float, default 2**16
        Largest ``|g|``, ``|h|`` accepted by :meth:`encrypt_gh`.
    guard_bits : int, default 8
        Bits per packed slot above the sum bound, where an overflow is detected (see
        :class:`~ray_vfl.crypto.he.packing.GHPacking`).

    Notes
    -----
    Results of ``add``/``sub``/``mul_plain``/``bucket_sum``/``compress_gh``
    are not re-obfuscated (like python-paillier's ``be_secure=False``): call
    :meth:`rerandomize` on anything that leaves the party.

    ``encrypt`` and ``encrypt_gh`` take the public key, or the private key
    when the key owner encrypts (CRT on ``paillier``, same ciphertext
    distribution).
    """

    name: ClassVar[str]
    is_encrypted: ClassVar[bool]
    public_key_type: ClassVar[type]

    def __init__(self, frac_bits: int = 40, max_rows: int = 2**20, gradient_bound: float = 2.0**16,
                 guard_bits: int = 8, pairs: int = 1) -> None:
        self.fixed_point = FixedPoint(frac_bits)
        self.packing = GHPacking(self.fixed_point, gradient_bound=gradient_bound, max_rows=max_rows, guard_bits=guard_bits,
                                 pairs=pairs)
        self.num_tag = f"num:f{self.fixed_point.frac_bits}"

    def __repr__(self) -> str:
        return f"{type(self).__name__}(frac_bits={self.fixed_point.frac_bits}, max_rows={self.packing.max_rows})"

    # -- keys --------------------------------------------------------------------------------
    def generate_keys(self, key_bits: int = DEFAULT_KEY_BITS, allow_weak: bool = False) -> tuple[PublicKey, PrivateKey]:
        """Generate a fresh key pair.

        Parameters
        ----------
        key_bits : int, default 2048
            Modulus size (:func:`check_key_bits`).
        allow_weak : bool, default False
            Accept 1024 <= key_bits < 2048 (with a :class:`~ray_vfl.errors.SecurityWarning`).

        Raises
        ------
        ConfigError
            If ``key_bits`` is not an int, is below 1024, or below 2048 without ``allow_weak``.
        """
        key_bits = check_key_bits(key_bits, allow_weak, "allow_weak=True")
        if key_bits % 8:
            raise ConfigError(f"key_bits must be a multiple of 8, got {key_bits}")
        return self._generate_keys(int(key_bits))

    @abstractmethod
    def _generate_keys(self, key_bits: int) -> tuple[PublicKey, PrivateKey]: ...

    # -- the interface -------------------------------------------------------------------------
    @abstractmethod
    def encrypt(self, pk: PublicKey | PrivateKey, x: np.ndarray) -> CipherArray:
        """Encrypt a 1-D float64 array; every ciphertext is freshly obfuscated.

        ``pk`` may be the private key (key owner: CRT encryption where supported).
        """

    @abstractmethod
    def decrypt(self, sk: PrivateKey, c: CipherArray) -> np.ndarray:
        """Decrypt to a float64 array."""

    @abstractmethod
    def add(self, pk: PublicKey, a: CipherArray, b: CipherArray) -> CipherArray:
        """Elementwise ``a + b``."""

    @abstractmethod
    def sub(self, pk: PublicKey, a: CipherArray, b: CipherArray) -> CipherArray:
        """Elementwise ``a - b``."""

    @abstractmethod
    def mul_plain(self, pk: PublicKey, c: CipherArray, k: np.ndarray) -> CipherArray:
        """Elementwise ``c * k`` for a 1-D integer vector ``k``."""

    @abstractmethod
    def bucket_sum(self, pk: PublicKey, c: CipherArray, keys: np.ndarray, n_buckets: int) -> CipherArray:
        """``out[keys[i, j]] += c[i]`` for every ``j`` (negative keys skipped); ``np.bincount`` semantics."""

    @abstractmethod
    def rerandomize(self, pk: PublicKey, c: CipherArray, masks: CipherArray | None = None) -> CipherArray:
        """Fresh obfuscation: new bytes, same plaintexts (with ``masks`` from :meth:`make_masks`, if given)."""

    @abstractmethod
    def encrypt_gh(self, pk: PublicKey | PrivateKey, g: np.ndarray, h: np.ndarray, masks: CipherArray | None = None) -> CipherArray:
        """Encrypt gradient pairs, one entry per row (``pk`` may be the private key, as in :meth:`encrypt`;
        ``masks`` from :meth:`make_masks`, one per row, replace the fresh randomness)."""

    def encrypt_gh_sums(self, pk: PublicKey | PrivateKey, g: np.ndarray, h: np.ndarray) -> CipherArray:
        """Encrypt plaintext gradient-pair *sums* (each of up to ``max_rows`` rows) straight into the
        compressed layout of :meth:`compress_gh`: ``slots_per_ciphertext`` entries per ciphertext,
        one encryption each, freshly obfuscated. It supports what a compressed array supports
        (``add``, ``sub``, :meth:`decrypt_gh`, contiguous ``take``)."""
        raise CryptoError(f"backend {self.name!r} cannot encrypt packed sums; use 'paillier', 'ou' or 'plain'")

    def prepare(self, key: PublicKey | PrivateKey, encrypt: bool = True) -> None:
        """Build this process's precomputed tables for ``key`` now rather than at the first encryption
        (a per-key, per-process cost that belongs to set-up); with ``encrypt=False`` only those that
        make masks and re-randomise (all a party that never encrypts needs). Backends without tables
        do nothing."""
        self._encryption_keys(key)

    def read_lazily(self, pk: PublicKey, c: CipherArray, share: tuple | None = None) -> CipherArray:
        """``c`` with its entries decoded on first read, each at most once (for an array whose rows are
        read again and again, a few at a time). With ``share=(slot, version)`` the decoded entries are
        shared by every call in this process with that key (tasks of one tree, say): a new version
        must come with new data. Backends that decode nothing return ``c``."""
        return c

    #: Whether :meth:`make_masks` can make encryption randomness ahead of time.
    supports_masks: ClassVar[bool] = False

    #: Whether one :meth:`encrypt_gh` call computes the message part once per distinct message (OU's
    #: ``G^m``), so that repeated gradient pairs cost only their randomness. Protocols count such
    #: repeats (``encrypt_repeated``) for an honest crypto floor.
    reuses_message_powers: ClassVar[bool] = False

    def make_masks(self, key: PublicKey | PrivateKey, count: int) -> CipherArray:
        """Encryption randomness made ahead of time (see :class:`~ray_vfl.crypto.he.modular.ModularBackend`)."""
        raise CryptoError(f"backend {self.name!r} cannot make encryption randomness ahead of time")

    @abstractmethod
    def decrypt_gh(self, sk: PrivateKey, c: CipherArray) -> tuple[np.ndarray, np.ndarray]:
        """Decrypt gradient-pair entries, plain or compressed, to ``(G, H)`` float64 arrays (one per entry)."""

    def decrypt_gh_many(self, sk: PrivateKey, arrays: Sequence[CipherArray]) -> list[tuple[np.ndarray, np.ndarray]]:
        """:meth:`decrypt_gh` of several arrays in one call (one batch of modular exponentiations)."""
        return [self.decrypt_gh(sk, c) for c in arrays]

    def slots_per_ciphertext(self, pk: PublicKey) -> int:
        """How many gradient-pair entries :meth:`compress_gh` puts in one ciphertext (1: no compression)."""
        self._check_pk(pk)
        return 1

    def compress_gh(self, pk: PublicKey, c: CipherArray) -> CipherArray:
        """Pack consecutive gradient-pair entries into as few ciphertexts as the plaintext space allows.

        The result decrypts with :meth:`decrypt_gh` to exactly the entries of
        ``c``; it supports :meth:`rerandomize`, ``add``/``sub`` with an array
        of the same layout, ``take`` of contiguous chunks and ``concat``, but
        not ``mul_plain`` or ``bucket_sum``. Backends without packing (``plain``)
        return ``c`` itself.

        Example
        -------
        >>> from ray_vfl.crypto import get_backend
        >>> be = get_backend("plain")
        >>> pk, sk = be.generate_keys()
        >>> c = be.encrypt_gh(pk, np.array([0.5, 1.0]), np.array([0.25, 0.5]))
        >>> be.compress_gh(pk, c) is c, be.slots_per_ciphertext(pk)
        (True, 1)
        """
        self._check_pk(pk)
        self._check_ct(pk, c)
        return c

    def _encryption_keys(self, key: object) -> tuple[PublicKey, PrivateKey | None]:
        """``(public key, private key or None)`` of the key given to ``encrypt``."""
        if isinstance(key, PrivateKey):
            self._check_sk(key)
            return key.public_key, key
        self._check_pk(key)
        return key, None

    def take(self, c: CipherArray, idx: np.ndarray) -> CipherArray:
        """Select rows ``c[idx]`` (integer indices or a boolean mask); no crypto."""
        if not isinstance(c, CipherArray):
            raise CryptoError(f"expected a CipherArray, got {type(c).__name__}")
        ix = np.asarray(idx)
        if ix.dtype == bool:
            if ix.shape != (len(c),):
                raise DataError(f"boolean mask must have shape ({len(c)},), got {ix.shape}")
            ix = np.flatnonzero(ix)
        elif ix.size == 0:
            ix = ix.astype(np.int64)
        elif ix.ndim != 1 or not np.issubdtype(ix.dtype, np.integer):
            raise DataError(f"idx must be a 1-D integer array, got dtype {ix.dtype}, shape {ix.shape}")
        if ix.size and (ix.max() >= len(c) or ix.min() < -len(c)):
            raise DataError(f"index out of range for CipherArray of length {len(c)}")
        tag = c.tag if compressed_layout(c.tag) is None else take_compressed_tag(c.tag, len(c), ix)
        ints = None
        if c._ints is not None:
            kind, src = c._ints
            ints = (kind, src.gather(ix) if isinstance(src, LazyInts) else [src[i] for i in ix.tolist()])
        return CipherArray(c.data[ix], c.key_id, tag, ints)

    def chunk(self, c: CipherArray, size: int) -> list[CipherArray]:
        """``c`` cut into consecutive pieces of ``size`` entries (the last may be shorter); no crypto.

        Uncompressed pieces are views; compressed ones go through :meth:`take`
        (``size`` counts ciphertexts), so only the last piece may end in a
        partial ciphertext and :meth:`concat` of the pieces gives ``c`` back.
        """
        if not isinstance(c, CipherArray):
            raise CryptoError(f"expected a CipherArray, got {type(c).__name__}")
        if isinstance(size, bool) or not isinstance(size, (int, np.integer)) or size <= 0:
            raise DataError(f"chunk size must be a positive int, got {size!r}")
        if compressed_layout(c.tag) is not None:
            return [self.take(c, np.arange(lo, min(lo + size, len(c)))) for lo in range(0, len(c), size)]
        parts = []
        for lo in range(0, len(c), size):
            ints = None if c._ints is None else (c._ints[0], c._ints[1][lo:lo + size])
            parts.append(CipherArray(c.data[lo:lo + size], c.key_id, c.tag, ints))
        return parts

    def concat(self, arrays: Sequence[CipherArray]) -> CipherArray:
        """Concatenate arrays of the same key and tag; no crypto."""
        arrays = list(arrays)
        if not arrays:
            raise DataError("concat needs at least one CipherArray")
        first = arrays[0]
        for a in arrays:
            if not isinstance(a, CipherArray):
                raise CryptoError(f"expected CipherArrays, got {type(a).__name__}")
        tag = first.tag
        layouts = [compressed_layout(a.tag) for a in arrays]
        if any(lay is not None for lay in layouts):
            tag = self._concat_compressed_tag(arrays, layouts)
        else:
            for a in arrays:
                self._check_pair(first, a)
        ints = None
        kinds = {a._ints[0] if a._ints is not None else None for a in arrays}
        if len(kinds) == 1 and None not in kinds:
            ints = (kinds.pop(), [v for a in arrays for v in a._ints[1]])
        return CipherArray(np.concatenate([a.data for a in arrays]), first.key_id, tag, ints)

    @staticmethod
    def _concat_compressed_tag(arrays: list[CipherArray], layouts: list) -> str:
        first = layouts[0]
        for a, lay in zip(arrays, layouts):
            if a.key_id != arrays[0].key_id:
                raise CryptoError("cannot combine ciphertexts of different keys")
            if lay is None or lay[:2] != first[:2]:
                raise CryptoError(f"cannot combine {arrays[0].tag!r} with {a.tag!r} entries")
        filled = [(a, lay) for a, lay in zip(arrays, layouts) if len(a)]
        for a, (_, per, count) in filled[:-1]:
            if count != per * len(a):
                raise CryptoError("only the last compressed array of a concat may end in a partial ciphertext")
        return compressed_tag(first[0], first[1], sum(lay[2] for lay in layouts))

    # -- what a peer sent ----------------------------------------------------------------------
    @property
    def gh_tag(self) -> str:
        """Tag of this backend's (uncompressed) gradient-pair arrays."""
        return self.packing.tag

    @staticmethod
    def entry_count(c: CipherArray) -> int:
        """Gradient-pair entries ``c`` holds: its length, or a compressed array's entry count."""
        layout = compressed_layout(c.tag)
        return len(c) if layout is None else layout[2]

    def peer_problem(self, pk: PublicKey, c: object, compressed: bool | None = None) -> str | None:
        """What is wrong with gradient-pair ciphertexts ``c`` that a peer sent under ``pk``, or ``None``.

        Checks, without decoding a ciphertext: the type, the key, the tag (this
        backend's gradient pairs, compressed only if ``compressed`` allows, with a
        ciphertext count that matches its layout) and the data (for big-integer
        schemes, ``uint8 (n, width)`` rows, each nonzero and below the ciphertext
        modulus). The answer reads after the field's name: ``"ciphers[2] " + problem``.

        Example
        -------
        >>> from ray_vfl.crypto import get_backend
        >>> be = get_backend("paillier")
        >>> pk, sk = be.generate_keys(1024, allow_weak=True)
        >>> c = be.encrypt_gh(pk, np.array([0.5]), np.array([0.25]))
        >>> be.peer_problem(pk, c) is None
        True
        >>> bad = CipherArray(np.full_like(c.data, 255), c.key_id, c.tag)
        >>> be.peer_problem(pk, bad)[:43]  # the modulus has 2047 or 2048 bits, as the key's primes fall
        'row 0 is not below the ciphertext modulus ('
        """
        if not isinstance(c, CipherArray):
            return f"is a {type(c).__name__}; expected a CipherArray"
        if c.key_id != pk.key_id:
            return "is under another key than the receiver's"
        layout = compressed_layout(c.tag)
        base = c.tag if layout is None else layout[0]
        if base != self.gh_tag:
            return f"holds {c.tag!r} entries; expected {self.gh_tag!r} (the receiver's backend options)"
        if layout is not None:
            if compressed is False:
                return f"is compressed ({c.tag!r}); expected one ciphertext per entry"
            _, per, count = layout
            if not 1 <= per <= self.slots_per_ciphertext(pk) or len(c) != -(-count // per):
                return (f"has {len(c)} ciphertexts for {count} entries at {per} per ciphertext "
                        f"(this key fits at most {self.slots_per_ciphertext(pk)})")
        elif compressed is True:
            return "is not compressed"
        return self._data_problem(pk, c.data)

    def _data_problem(self, pk: PublicKey, data: np.ndarray) -> str | None:
        """What is wrong with a peer's ciphertext data (see :meth:`peer_problem`), or ``None``."""
        return None

    # -- validation helpers --------------------------------------------------------------------
    def _check_pk(self, pk: object) -> None:
        if not isinstance(pk, self.public_key_type):
            raise CryptoError(
                f"backend {self.name!r} needs a {self.public_key_type.__name__}, got {type(pk).__name__}"
            )

    def _check_sk(self, sk: object) -> None:
        if not isinstance(sk, PrivateKey):
            raise CryptoError(f"expected a private key, got {type(sk).__name__}")
        self._check_pk(sk.public_key)

    def _check_ct(self, pk: PublicKey, c: object, tag: str | None = None, op: str | None = None) -> None:
        """Check key and tag of ``c``; ``op`` names an operation compressed arrays do not support."""
        if not isinstance(c, CipherArray):
            raise CryptoError(f"expected a CipherArray, got {type(c).__name__}")
        if c.key_id != pk.key_id:
            raise CryptoError(
                f"ciphertexts belong to key {c.key_id.hex()[:8]}.., not to key {pk.key_id.hex()[:8]}..: "
                "keys must not be mixed"
            )
        if tag is not None and c.tag != tag:
            hint = "use decrypt_gh" if c.tag.startswith("gh") else "use decrypt"
            raise CryptoError(f"ciphertexts hold {c.tag!r} entries, expected {tag!r} ({hint}, same backend options)")
        if op is not None and compressed_layout(c.tag) is not None:
            raise CryptoError(
                f"{op} is not defined on compressed gradient pairs ({c.tag!r}): call {op} before compress_gh"
            )

    @staticmethod
    def _check_pair(a: CipherArray, b: CipherArray, same_len: bool = False) -> None:
        if a.key_id != b.key_id:
            raise CryptoError("cannot combine ciphertexts of different keys")
        if a.tag != b.tag:
            raise CryptoError(f"cannot combine {a.tag!r} with {b.tag!r} entries")
        if same_len and len(a) != len(b):
            raise DataError(f"length mismatch: {len(a)} vs {len(b)}")
