"""Secure aggregation of float vectors by pairwise masks (no dropouts).

Bonawitz et al., *Practical Secure Aggregation for Privacy-Preserving Machine
Learning*, CCS 2017, the honest-but-curious protocol without dropouts (their
section 4, masks only). PIVODL's secure prediction uses it: ``K`` clients each
hold a float vector of the same length (their partial prediction scores per
row, zeros where they hold nothing) and the aggregator learns only the total.

========  =========================  ===========================  ===========================================
round     sender -> receiver         payload                      what the receiver learns
========  =========================  ===========================  ===========================================
1         party -> every party       X25519 public key, 32 bytes  nothing (a fresh public key)
2         aggregator -> parties      nonce, 16 bytes; party list  nothing (public)
3         party -> aggregator        masked share, ``n`` uint64   a uniformly distributed vector
(local)   aggregator                 ``combine(shares)``          the exact fixed-point total, nothing more
========  =========================  ===========================  ===========================================

What it protects, against whom
    The aggregator, and every single party, sees each share as a uniformly
    distributed vector in ``Z_{2^64}^n``, independent of the values it hides,
    as long as at least one other party in the sum is honest. The sum of *all*
    the shares of one nonce is the total; a coalition of every party but one
    still learns that one's vector (total minus its own), as in any sum.
    The model is honest-but-curious: every party is handed the same party
    list and nonce. An aggregator that hands different lists to different
    parties can learn sums of sub-coalitions (Bonawitz et al. add signatures
    and consistency checks against that); masks do not check who is honest.

Key agreement
    Each :class:`PairwiseMasker` makes a fresh X25519 key pair from OS
    entropy. For a pair ``(i, j)`` both sides compute the X25519 shared point
    and run HKDF-SHA256 (no salt) with ``info`` naming both parties and their
    public keys, in sorted order of the names, into a 32-byte pair key
    ``s_ij = s_ji``.

PRG
    For a sum with public nonce ``N`` (16 bytes, fresh for each sum, from
    :func:`secrets.token_bytes` at the aggregator) the mask between ``i`` and
    ``j`` is ``m_ij = ChaCha20(s_ij, N)`` keystream, ``8 n`` bytes, read as
    little-endian uint64. (The 16-byte nonce of ``cryptography``'s ChaCha20
    is a 32-bit block counter then a 96-bit nonce; OpenSSL carries the
    counter into the next word, so no call repeats its own keystream.)
    Party ``i`` sends ``y_i = x_i + sum_{j > i} m_ij - sum_{j < i} m_ij
    (mod 2^64)``, names ordered as strings, so every ``m_ij`` is added once
    and subtracted once. A masker refuses a nonce it has used before: two
    shares under the same masks would reveal the difference of two vectors.

Ring and exactness
    A value ``x`` is ``v = round(x * 2**frac_bits)`` (half to even, as
    :class:`~ray_vfl.crypto.he.fixed_point.FixedPoint`), stored as uint64 with
    wrap-around. Each party refuses ``|v| > (2**63 - 1) // K``, i.e. roughly
    ``|x| <= 2**(63 - frac_bits) / K`` (``2**29`` for ``K = 4`` and the
    default 32 fractional bits), so the integer total fits a signed int64 and
    is recovered *exactly*: ``combine`` returns ``sum_i v_i * 2**-frac_bits``
    rounded once to float64. Its distance to the real sum of the inputs is at
    most ``K * 2**-(frac_bits + 1)`` (one rounding per party) plus half an ulp
    of the result. The aggregator cannot check the bound (it sees a wrapped
    sum); each honest party checks its own part. All parties must use the same
    ``frac_bits``.

Example
-------
>>> import secrets
>>> import numpy as np
>>> names = ["alice", "bob", "carol"]
>>> maskers = {name: PairwiseMasker(name) for name in names}
>>> keys = {name: m.public_key() for name, m in maskers.items()}
>>> for name, m in maskers.items():
...     m.agree({peer: key for peer, key in keys.items() if peer != name})
>>> nonce = secrets.token_bytes(NONCE_BYTES)           # the aggregator's, fresh for this sum
>>> scores = {"alice": [0.5, 0.0], "bob": [0.25, -1.0], "carol": [0.0, 2.0]}
>>> shares = [maskers[name].share(np.array(scores[name]), nonce, names) for name in names]
>>> shares[0].dtype
dtype('uint64')
>>> combine(shares)
array([0.75, 1.  ])
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

import numpy as np
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from ray_vfl.errors import ConfigError, CryptoError, DataError, OverflowEncodingError

__all__ = ["NONCE_BYTES", "PUBLIC_KEY_BYTES", "PairwiseMasker", "combine", "decode_ring", "encode_ring", "ring_bound"]

logger = logging.getLogger(__name__)

NONCE_BYTES = 16
PUBLIC_KEY_BYTES = 32
_HKDF_LABEL = b"ray_vfl.secure_sum.v1"


def _check_frac_bits(frac_bits: int) -> int:
    if isinstance(frac_bits, bool) or not isinstance(frac_bits, (int, np.integer)):
        raise ConfigError(f"frac_bits must be an int, got {type(frac_bits).__name__}")
    if not 1 <= int(frac_bits) <= 62:
        raise ConfigError(f"frac_bits must be in [1, 62] for the 64-bit ring, got {frac_bits}")
    return int(frac_bits)


def ring_bound(n_parties: int) -> int:
    """Largest ``|round(x * 2**frac_bits)|`` one of ``n_parties`` may add: ``(2**63 - 1) // n_parties``.

    ``n_parties`` such integers sum to at most ``2**63 - 1`` in absolute value,
    so the total is a signed int64 and decodes exactly.

    Example
    -------
    >>> ring_bound(4) == (2**63 - 1) // 4
    True
    """
    if isinstance(n_parties, bool) or not isinstance(n_parties, (int, np.integer)) or n_parties < 1:
        raise ConfigError(f"n_parties must be a positive int, got {n_parties!r}")
    return (2**63 - 1) // int(n_parties)


def encode_ring(values: np.ndarray, frac_bits: int = 32, n_parties: int = 1) -> np.ndarray:
    """Encode floats as ``round(x * 2**frac_bits) mod 2**64`` (uint64, half to even).

    Parameters
    ----------
    values : array_like of float
        Any shape.
    frac_bits : int, default 32
        Fractional bits, in ``[1, 62]``.
    n_parties : int, default 1
        How many such vectors will be summed; sets the bound (:func:`ring_bound`).

    Raises
    ------
    DataError
        NaN, or not an array of floats.
    OverflowEncodingError
        ``|round(x * 2**frac_bits)| > (2**63 - 1) // n_parties`` (about
        ``|x| > 2**(63 - frac_bits) / n_parties``), or an infinity.

    Example
    -------
    >>> encode_ring(np.array([1.5, -0.25]), frac_bits=8).tolist()
    [384, 18446744073709551552]
    >>> decode_ring(encode_ring(np.array([1.5, -0.25]), frac_bits=8), frac_bits=8)
    array([ 1.5 , -0.25])
    """
    frac_bits = _check_frac_bits(frac_bits)
    bound = ring_bound(n_parties)
    try:
        x = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise DataError(f"values must be an array of floats: {exc}") from None
    if np.isnan(x).any():
        raise DataError(f"cannot encode NaN (first at flat index {int(np.flatnonzero(np.isnan(x))[0])})")
    with np.errstate(over="ignore"):
        scaled = np.rint(np.ldexp(x, frac_bits))  # exact scaling by a power of two, then half-to-even
    # `scaled` holds integer-valued floats: compare with the largest float <= bound, which is exact.
    fbound = float(bound)
    if int(fbound) > bound:
        fbound = float(np.nextafter(fbound, 0.0))
    too_big = ~(np.abs(scaled) <= fbound)
    if too_big.any():
        at = int(np.flatnonzero(too_big)[0])
        raise OverflowEncodingError(
            f"value {x.flat[at]:.6g} at flat index {at} does not fit the secure-sum ring: with "
            f"{n_parties} parties and frac_bits={frac_bits}, |x| must be <= "
            f"{bound / 2.0**frac_bits:.6g} (~2**(63 - {frac_bits}) / {n_parties}); scale the values down "
            "or lower frac_bits"
        )
    return scaled.astype(np.int64).view(np.uint64)


def decode_ring(ring: np.ndarray, frac_bits: int = 32) -> np.ndarray:
    """Read uint64 ring elements as signed int64 and scale by ``2**-frac_bits`` (float64, rounded once).

    Example
    -------
    >>> decode_ring(np.array([2**64 - 1], dtype=np.uint64), frac_bits=1)
    array([-0.5])
    """
    frac_bits = _check_frac_bits(frac_bits)
    arr = np.asarray(ring)
    if arr.dtype != np.uint64:
        raise CryptoError(f"ring elements must be uint64, got dtype {arr.dtype}")
    # int64 -> float64 rounds to nearest; the power-of-two scaling is exact.
    return np.ldexp(arr.view(np.int64).astype(np.float64), -frac_bits)


def combine(shares: Sequence[np.ndarray], frac_bits: int = 32) -> np.ndarray:
    """Add the masked shares of one sum modulo ``2**64`` and decode the total.

    The masks cancel only if ``shares`` holds exactly one share of every party
    in the sum, all made with the same nonce and party list; otherwise the
    result is uniformly random garbage (which cannot be detected here).

    Parameters
    ----------
    shares : sequence of numpy.ndarray of uint64
        One share per party, all of one shape.
    frac_bits : int, default 32
        The parties' ``frac_bits``.

    Returns
    -------
    numpy.ndarray of float64
        The total, exact up to one final rounding to float64.

    Raises
    ------
    CryptoError
        No shares, a share that is not uint64, or shapes that differ.

    Example
    -------
    >>> a = encode_ring(np.array([1.0]), n_parties=2)
    >>> b = encode_ring(np.array([-3.5]), n_parties=2)
    >>> combine([a, b])
    array([-2.5])
    """
    frac_bits = _check_frac_bits(frac_bits)
    if len(shares) == 0:
        raise CryptoError("combine needs at least one share")
    first = np.asarray(shares[0])
    total = np.zeros(first.shape, dtype=np.uint64)
    for k, share in enumerate(shares):
        share = np.asarray(share)
        if share.dtype != np.uint64:
            raise CryptoError(f"share {k} has dtype {share.dtype}; shares are uint64 (from PairwiseMasker.share)")
        if share.shape != first.shape:
            raise CryptoError(f"share {k} has shape {share.shape}, share 0 has {first.shape}; all must match")
        total += share  # uint64 arithmetic wraps: addition in Z_{2^64}
    return decode_ring(total, frac_bits)


class PairwiseMasker:
    """One party's side of pairwise-mask secure aggregation.

    Parameters
    ----------
    name : str
        The party's name, as every other party knows it; it fixes the sign of
        each pairwise mask.
    frac_bits : int, default 32
        Fractional bits of the ring encoding (the same at every party).

    Example
    -------
    >>> a, b = PairwiseMasker("a"), PairwiseMasker("b")
    >>> a.agree({"b": b.public_key()}); b.agree({"a": a.public_key()})
    >>> nonce = bytes(range(16))
    >>> ya = a.share(np.array([1.0, 2.0]), nonce, ["a", "b"])
    >>> yb = b.share(np.array([10.0, 20.0]), nonce, ["a", "b"])
    >>> combine([ya, yb])
    array([11., 22.])
    >>> a.share(np.array([1.0, 2.0]), nonce, ["a", "b"])  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ray_vfl.errors.CryptoError: party 'a' already made a share with this nonce; ...
    """

    def __init__(self, name: str, frac_bits: int = 32) -> None:
        if not isinstance(name, str) or not name:
            raise ConfigError(f"name must be a non-empty str, got {name!r}")
        self.name = name
        self.frac_bits = _check_frac_bits(frac_bits)
        self._private = X25519PrivateKey.generate()  # OS entropy
        self._public = self._private.public_key().public_bytes_raw()
        self._peer_public: dict[str, bytes] = {}
        self._pair_keys: dict[str, bytes] = {}
        self._used_nonces: set[bytes] = set()

    def __repr__(self) -> str:
        return f"PairwiseMasker({self.name!r}, peers={sorted(self._pair_keys)})"

    def __reduce__(self):
        # A masker holds a private key and the nonces it spent: copying it would let
        # two copies reuse a nonce, so it never leaves its process.
        raise TypeError("a PairwiseMasker holds a private key and its used nonces; it cannot be pickled")

    def public_key(self) -> bytes:
        """This party's X25519 public key, 32 bytes, to send to every other party."""
        return self._public

    @property
    def peers(self) -> list[str]:
        """Names of the parties this masker shares a pair key with, sorted."""
        return sorted(self._pair_keys)

    def agree(self, peers: Mapping[str, bytes]) -> None:
        """Derive a pair key with each peer from its public key.

        Parameters
        ----------
        peers : mapping of str to bytes
            Other parties' names and 32-byte public keys. Calling again adds
            peers; a peer already agreed must come with the same key.

        Raises
        ------
        ConfigError
            Own name among the peers, or a name that is not a non-empty str.
        CryptoError
            A key that is not 32 bytes, an invalid (low-order) key, or a new key for a known peer.
        """
        derived: dict[str, bytes] = {}
        for peer, key in peers.items():  # check everything before keeping anything
            if not isinstance(peer, str) or not peer:
                raise ConfigError(f"peer names must be non-empty str, got {peer!r}")
            if peer == self.name:
                raise ConfigError(f"party {self.name!r} cannot agree a key with itself; pass only the other parties")
            if not isinstance(key, (bytes, bytearray)) or len(key) != PUBLIC_KEY_BYTES:
                got = f"{len(key)} bytes" if isinstance(key, (bytes, bytearray)) else type(key).__name__
                raise CryptoError(f"public key of {peer!r} must be {PUBLIC_KEY_BYTES} bytes, got {got}")
            key = bytes(key)
            if peer in self._peer_public:
                if self._peer_public[peer] != key:
                    raise CryptoError(
                        f"party {self.name!r} already agreed a key with {peer!r} and got a different public "
                        "key now; make a new PairwiseMasker for a new session"
                    )
                continue
            try:
                point = self._private.exchange(X25519PublicKey.from_public_bytes(key))
            except ValueError as exc:  # all-zero shared point: a low-order key
                raise CryptoError(f"public key of {peer!r} is not a valid X25519 key: {exc}") from None
            derived[peer] = self._pair_key(point, peer, key)
        for peer, pair_key in derived.items():
            self._peer_public[peer] = bytes(peers[peer])
            self._pair_keys[peer] = pair_key
        logger.debug("party %r agreed keys with %s", self.name, sorted(derived))

    def _pair_key(self, point: bytes, peer: str, peer_public: bytes) -> bytes:
        # Both sides must build the same info: (name, public key) of both, sorted by name,
        # each length-prefixed so no two different pairs encode alike.
        ends = sorted([(self.name, self._public), (peer, peer_public)])
        info = _HKDF_LABEL
        for name, key in ends:
            raw = name.encode("utf-8")
            info += len(raw).to_bytes(4, "big") + raw + key
        return HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=info).derive(point)

    def share(self, values: np.ndarray, nonce: bytes, parties: Sequence[str]) -> np.ndarray:
        """This party's masked share of one sum.

        Parameters
        ----------
        values : array_like of float
            This party's vector (any shape, the same at every party); zeros where it holds nothing.
        nonce : bytes
            16 public bytes, fresh for this sum (``secrets.token_bytes(16)`` at the aggregator).
        parties : sequence of str
            Every party in this sum, this one included (the same list at every party).

        Returns
        -------
        numpy.ndarray of uint64
            ``encode_ring(values) + sum_{j > me} m_j - sum_{j < me} m_j (mod 2**64)``.

        Raises
        ------
        ConfigError
            ``parties`` lacks this party, repeats a name, or has fewer than two parties.
        CryptoError
            A wrong nonce length, a nonce this masker used before, or a party without an agreed key.
        OverflowEncodingError
            A value beyond ``2**(63 - frac_bits) / len(parties)`` (see :func:`encode_ring`).
        DataError
            NaN or non-float values.
        """
        if not isinstance(nonce, (bytes, bytearray)) or len(nonce) != NONCE_BYTES:
            got = f"{len(nonce)} bytes" if isinstance(nonce, (bytes, bytearray)) else type(nonce).__name__
            raise CryptoError(f"nonce must be {NONCE_BYTES} bytes (secrets.token_bytes({NONCE_BYTES})), got {got}")
        nonce = bytes(nonce)
        if nonce in self._used_nonces:
            raise CryptoError(
                f"party {self.name!r} already made a share with this nonce; reusing it would reveal the "
                "difference of two of its vectors. The aggregator must draw a fresh nonce for every sum"
            )
        if isinstance(parties, str):
            raise ConfigError("parties must be a sequence of names, not one str")
        names = list(parties)
        if len(set(names)) != len(names):
            raise ConfigError(f"parties must be distinct, got {names}")
        if self.name not in names:
            raise ConfigError(f"parties {names} must include this party, {self.name!r}")
        if len(names) < 2:
            # One party alone would send its vector unmasked.
            raise ConfigError(f"a secure sum needs at least two parties, got {names}")
        missing = sorted(p for p in names if p != self.name and p not in self._pair_keys)
        if missing:
            raise CryptoError(
                f"party {self.name!r} has no agreed key with {missing}; call agree() with their public keys first"
            )
        out = encode_ring(values, self.frac_bits, n_parties=len(names))
        flat = out.reshape(-1)  # a view of `out` (fresh, contiguous)
        for peer in names:
            if peer == self.name:
                continue
            mask = self._mask(peer, nonce, flat.size)
            if self.name < peer:
                flat += mask  # uint64: wraps modulo 2**64
            else:
                flat -= mask
        self._used_nonces.add(nonce)  # only once a share exists: a refused call spends nothing
        return out

    def _mask(self, peer: str, nonce: bytes, n: int) -> np.ndarray:
        encryptor = Cipher(algorithms.ChaCha20(self._pair_keys[peer], nonce), mode=None).encryptor()
        return np.frombuffer(encryptor.update(bytes(8 * n)), dtype="<u8")
