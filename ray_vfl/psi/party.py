"""ECDH-PSI building blocks: the X25519 group kernels and the party role.

The protocol itself (who sends what to whom) is :func:`ray_vfl.psi.private_set_intersection`;
this module holds what one party runs on its own machine.

Group. Commutative blinding uses X25519 (RFC 7748) from ``cryptography``
(OpenSSL): ``X(k, u)`` is the u-coordinate of ``[clamp(k)] P`` for a point
``P`` with u-coordinate ``u``. Because x-only scalar multiplication commutes,
``X(a, X(b, u)) == X(b, X(a, u))``. An ID is hashed to a u-coordinate as the
first 32 bytes of ``SHA-512(DOMAIN || tag || ID)`` (X25519 ignores the top
bit); the point lies on Curve25519 or on its twist, both of which resist
discrete logarithms (Curve25519 is twist-secure), and the first blinding by
a clamped scalar (a multiple of the cofactor 8) moves it into a prime-order
subgroup. This is the "hash to u, then X25519" construction of SecretFlow's
Curve25519 PSI cryptor. ristretto255 would give a prime-order group by
construction, but PyNaCl 1.6 does not bind it, and libsodium's ed25519
scalar multiplication (with its subgroup check) measured ~3x slower than
OpenSSL's X25519 here (190 vs 62 microseconds per operation).
"""

from __future__ import annotations

import hashlib
import secrets
from typing import Any

import numpy as np
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.x25519 import (
    X25519PrivateKey,
    X25519PublicKey,
)

from ..errors import VFLError
from ..runtime.actors import TaskPool
from ..runtime.comm import Mailbox, Message, Record

__all__ = [
    "DOMAIN", "POINT_BYTES", "DIGEST_BYTES", "encode_ids", "hash_and_blind", "blind", "match_digests", "PsiParty",
]

DOMAIN = b"ray_vfl/psi/x25519-sha512/v1\x00"  # domain separation: these hashes serve this protocol only
POINT_BYTES = 32
# Double-blinded values are only compared, so they travel truncated. With 16 bytes a false match among
# n_a * n_b pairs has probability n_a * n_b / 2**128 (< 1e-26 for 10**6 x 10**6).
DIGEST_BYTES = 16


def encode_ids(ids: np.ndarray, kind: str) -> list[bytes]:
    """Canonical bytes of each ID: ``b"i:" + decimal`` for integers, ``b"s:" + UTF-8`` for strings.

    The type tag keeps the integer 7 and the string "7" apart.

    Example
    -------
    >>> encode_ids(np.array([7, -1]), "int"), encode_ids(np.array(["7"], dtype=object), "str")
    ([b'i:7', b'i:-1'], [b's:7'])
    """
    if kind == "int":
        return [b"i:%d" % v for v in ids.tolist()]
    if kind == "str":
        return [b"s:" + v.encode("utf-8") for v in ids.tolist()]
    raise VFLError(f"unknown ID kind {kind!r}; expected 'int' or 'str'")


def _exchange(key_raw: bytes):
    key = X25519PrivateKey.from_private_bytes(key_raw)
    return key.exchange, X25519PublicKey.from_public_bytes


def hash_and_blind(ids: np.ndarray, kind: str, key_raw: bytes) -> np.ndarray:
    """``X(k, H(id))`` for every ID, as an ``(n, 32)`` uint8 matrix (a pool task).

    Example
    -------
    >>> a, b = secrets.token_bytes(32), secrets.token_bytes(32)
    >>> ids = np.array([1, 2, 3])
    >>> ab = blind(hash_and_blind(ids, "int", a), b, POINT_BYTES)
    >>> ba = blind(hash_and_blind(ids, "int", b), a, POINT_BYTES)
    >>> bool((ab == ba).all())
    True
    """
    exchange, point = _exchange(key_raw)
    sha512 = hashlib.sha512
    out = b"".join(exchange(point(sha512(DOMAIN + e).digest()[:POINT_BYTES])) for e in encode_ids(ids, kind))
    return np.frombuffer(out, dtype=np.uint8).reshape(-1, POINT_BYTES)


def blind(points: np.ndarray, key_raw: bytes, width: int = POINT_BYTES) -> np.ndarray:
    """``X(k, u)`` for every row ``u`` of ``points``, keeping the first ``width`` bytes (a pool task).

    Raises ``ValueError`` (from X25519) on a low-order input point: a peer's malformed message.
    """
    points = np.ascontiguousarray(points, dtype=np.uint8)
    if points.ndim != 2 or points.shape[1] != POINT_BYTES:
        raise VFLError(f"expected an (n, {POINT_BYTES}) uint8 matrix of points, got shape {points.shape}")
    exchange, point = _exchange(key_raw)
    buf = points.tobytes()
    out = b"".join(exchange(point(buf[i:i + POINT_BYTES]))[:width] for i in range(0, len(buf), POINT_BYTES))
    return np.frombuffer(out, dtype=np.uint8).reshape(-1, width)


def _as_keys(digests: np.ndarray) -> np.ndarray:
    """Rows of a uint8 digest matrix as fixed-width byte strings, sortable and comparable by numpy."""
    return np.ascontiguousarray(digests).view(f"S{digests.shape[1]}").ravel()


def match_digests(mine: np.ndarray, theirs: np.ndarray) -> np.ndarray:
    """For each row of ``mine``, the index of the equal row of ``theirs``, or -1.

    Example
    -------
    >>> m = np.array([[1, 2], [3, 4], [5, 6]], dtype=np.uint8)
    >>> match_digests(m, m[[2, 0]]).tolist()
    [1, -1, 0]
    """
    out = np.full(len(mine), -1, dtype=np.int64)
    if len(mine) == 0 or len(theirs) == 0:
        return out
    a, b = _as_keys(mine), _as_keys(theirs)
    order = np.argsort(b, kind="stable")
    pos = np.minimum(np.searchsorted(b[order], a), len(b) - 1)
    hit = b[order][pos] == a
    out[hit] = order[pos[hit]]
    return out


class PsiParty:
    """One party of ECDH-PSI: its own IDs, its secret scalar, its mailbox.

    The same class plays the leader and a follower; the driver decides which
    methods it calls. Heavy work (hashing, blinding) runs chunked on the
    party's pinned :class:`~ray_vfl.runtime.actors.TaskPool`. With ``audit=True``
    the party also keeps every payload it receives, for privacy tests.
    """

    def __init__(self, name: str, ids: Any, kind: str | None, pool: TaskPool, audit: bool = False,
                 keep_rows: bool = False) -> None:
        self.reset(name, ids, kind, pool, audit, keep_rows)

    def reset(self, name: str, ids: Any, kind: str | None, pool: TaskPool, audit: bool = False,
              keep_rows: bool = False) -> None:
        """Start over with new IDs and a fresh secret scalar (from the OS RNG).

        ``ids`` is an array (checked by the caller, ``kind`` given) or a reference to the party's own
        table, read here (``kind=None``). With ``keep_rows`` the party keeps its aligned rows for its
        own store (:meth:`result`) and tells the driver only their number.
        """
        self.name = name
        if kind is None:
            from .protocol import (
                normalize_ids,  # the checks every ID column passes, wherever it is read
            )

            ids, kind = normalize_ids(ids.fetch_ids(), name)
        self.ids = ids
        self.kind = kind
        self.keep_rows = keep_rows
        self._result: tuple[np.ndarray, np.ndarray] | None = None
        self.pool = pool
        self.mailbox = Mailbox(name)
        self.audit = audit
        self.inbox: list[Message] = []
        key = X25519PrivateKey.generate()
        self._key = key.private_bytes(serialization.Encoding.Raw, serialization.PrivateFormat.Raw,
                                      serialization.NoEncryption())
        self._perm: np.ndarray | None = None  # follower: shuffled position -> own row
        self._theirs: dict[str, np.ndarray] = {}  # leader: follower -> X(a, X(f, H(y))) digests
        self._matches: dict[str, np.ndarray] = {}  # leader: follower -> matching position per own row

    # helpers -------------------------------------------------------------
    def _open(self, message: Message, kind: str) -> Any:
        payload = self.mailbox.open(message, kind)
        if self.audit:
            self.inbox.append(message)
        return payload

    def _map(self, fn, items: np.ndarray, *shared: Any) -> np.ndarray:
        # Each task gets a contiguous chunk; the secret scalar goes only to this party's own pinned tasks.
        parts = self.pool.map(fn, [items[s] for s in self.pool.chunks(len(items), min_chunk=1024)], *shared)
        return np.concatenate(parts) if parts else np.zeros((0, POINT_BYTES), np.uint8)

    # rounds ----------------------------------------------------------------
    def blind_own(self, receivers: list[str], shuffle: bool) -> Message:
        """Round 1 / 2: send ``X(k, H(id))`` of every own ID.

        A follower shuffles the list (with OS entropy) so the leader, who later
        names matching positions, learns nothing from the follower's row order.
        """
        points = self._map(hash_and_blind, self.ids, self.kind, self._key)
        if shuffle:
            self._perm = np.random.default_rng(secrets.randbits(128)).permutation(len(points))
            points = points[self._perm]
        return self.mailbox.send("psi_points", receivers, points)

    def reblind(self, message: Message) -> Message:
        """Round 3 (follower): blind the leader's points again, same order, truncated to digests."""
        points = self._open(message, "psi_points")
        digests = self._map(blind, points, self._key, DIGEST_BYTES)
        return self.mailbox.send("psi_double_blinded", [message.sender], digests)

    def blind_theirs(self, message: Message) -> int:
        """Leader: blind a follower's shuffled points with the leader's scalar (kept locally)."""
        points = self._open(message, "psi_points")
        self._theirs[message.sender] = self._map(blind, points, self._key, DIGEST_BYTES)
        return len(points)

    def match(self, message: Message) -> int:
        """Leader: equal double-blinded values mark own rows the follower also holds."""
        digests = self._open(message, "psi_double_blinded")
        if len(digests) != len(self.ids):
            raise VFLError(f"{message.sender!r} returned {len(digests)} values for {len(self.ids)} points")
        found = match_digests(digests, self._theirs.pop(message.sender))
        self._matches[message.sender] = found
        return int((found >= 0).sum())  # |leader ∩ follower|, which the leader learns anyway

    def finish(self, followers: list[str]) -> tuple:
        """Leader: rows held by every follower, in ascending ID order; tell each follower its positions.

        Returns ``(own rows, own unaligned rows, message to each follower...)``.
        """
        member = np.ones(len(self.ids), dtype=bool)
        for f in followers:
            member &= self._matches[f] >= 0
        rows = np.flatnonzero(member)
        rows = rows[np.argsort(self.ids[rows], kind="stable")]  # the common order: ascending ID
        messages = [self.mailbox.send("psi_result", [f], self._matches.pop(f)[rows]) for f in followers]
        return (*self._keep(rows, np.flatnonzero(~member)), *messages)

    def apply_result(self, message: Message) -> tuple[np.ndarray, np.ndarray]:
        """Follower: own rows in the common order, and the rows outside the intersection."""
        positions = self._open(message, "psi_result")
        if self._perm is None:
            raise VFLError(f"party {self.name!r} got a PSI result before sending its points")
        if len(positions) and (positions.min() < 0 or positions.max() >= len(self._perm)
                               or len(np.unique(positions)) != len(positions)):
            raise VFLError(f"party {self.name!r} got invalid positions from {message.sender!r}")
        rows = self._perm[positions]
        member = np.zeros(len(self.ids), dtype=bool)
        member[rows] = True
        return self._keep(rows, np.flatnonzero(~member))

    def _keep(self, rows: np.ndarray, unaligned: np.ndarray) -> tuple:
        """This party's result: returned as is, or kept for its store (then only the sizes go back)."""
        if not self.keep_rows:
            return rows, unaligned
        self._result = (rows, unaligned)
        return len(rows), len(unaligned)

    def id_kind(self) -> str:
        """``"int"`` or ``"str"``: the parties must agree on it (it reveals nothing about any ID)."""
        return self.kind

    def result(self) -> tuple[np.ndarray, np.ndarray]:
        """The aligned rows (in the common order) and the rows outside the intersection, kept with
        ``keep_rows``; asked for by this party's own store only."""
        if self._result is None:
            raise VFLError(f"party {self.name!r} holds no PSI result; run the intersection with keep_rows first")
        return self._result

    # reporting -------------------------------------------------------------
    def comm_records(self) -> list[Record]:
        """Hand over (and forget) what this party's send path recorded."""
        return self.mailbox.drain()

    def received(self) -> list[Message]:
        """Every message this party opened (kept only with ``audit=True``)."""
        return list(self.inbox)
