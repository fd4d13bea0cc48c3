"""ECDH-PSI building blocks: the ristretto255 group kernels and the party role.

The protocol itself (who sends what to whom) is :func:`ray_vfl.psi.private_set_intersection`;
this module holds what one party runs on its own machine.

Group. Blinding works in ristretto255 (RFC 9496), a group of prime order
``L = 2**252 + 27742317777372353535851937790883648493`` built on Curve25519,
through libsodium (bundled by ``rbcl``). ``[k]P`` is scalar multiplication;
scalars are uniform in ``[1, L)``, drawn from ``secrets`` (OS entropy). An ID
is hashed to the group as ``H(id) = from_hash(SHA-512(DOMAIN || tag || ID))``,
RFC 9496's hash-to-group map (two Elligator 2 maps, added), which behaves as a
random oracle into the group. Blinding commutes, ``[a][f]H(x) == [f][a]H(x)``,
and in a prime-order group ``[k]P`` for a secret uniform ``k`` is a uniform
element other than the identity whatever ``P`` is (``P`` not the identity):
a blinded point's 32-byte encoding says nothing about the ID (DDH). Every
point a peer sends is decoded strictly (the canonical encoding of a group
element, not the identity) before it is multiplied; anything else raises
:class:`~ray_vfl.errors.CryptoError` naming the sender.

Cost. Per ID the protocol makes one ``from_hash`` and two scalar
multiplications (one by the owner, one by the peer). On a 2-core development
machine libsodium takes ~12 and ~37 microseconds for them and the loops below
add about 1 per ID; ``benchmarks/psi.py`` measures both on the machine it runs on.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import secrets
import sys
from typing import Any

import numpy as np
import pandas as pd
import ray
import rbcl

from ..errors import CryptoError, DataError, VFLError
from ..runtime.task_pool import TaskPool
from ..runtime.comm import Mailbox, Message, Record
from ..runtime.validation import Array, register

__all__ = [
    "normalize_ids",
    "DOMAIN", "POINT_BYTES", "DIGEST_BYTES", "SCALAR_BYTES", "new_scalar", "encode_ids", "hash_and_blind", "blind",
    "match_digests", "PsiParty",
]

DOMAIN = b"ray_vfl/psi/ristretto255-sha512/v2\x00"  # domain separation: these hashes serve this protocol only
POINT_BYTES = 32
SCALAR_BYTES = 32
# Double-blinded values are only compared, so they travel truncated. A ristretto255 encoding's lowest bit is
# always 0, so 16 bytes carry 127 free bits: a false match among n_a * n_b pairs has probability
# n_a * n_b / 2**127 (< 1e-26 for 10**6 x 10**6).
DIGEST_BYTES = 16

# What each PSI message carries (checked on receipt, see ray_vfl.runtime.validation). Points are also
# decoded strictly when blinded (:func:`blind`); here their layout is checked before any task starts.
register("psi_points", Array("", "uint8", (None, POINT_BYTES)))  # [k]H(id) of every ID the sender holds
register("psi_double_blinded",  # follower -> leader: one digest per point the leader sent (context: n_points)
         Array("", "uint8", ("n_points", DIGEST_BYTES)))
register("psi_result",  # leader -> follower: positions in the follower's shuffled points (context: n_points)
         Array("", "int", (None,), low=0, high="n_points", unique=True))


def _libsodium() -> ctypes.CDLL:
    # rbcl writes its bundled libsodium to a fresh temporary file at every import and never removes it
    # (2.8 MB per process: per Ray worker). Once loaded the file is not needed (Linux keeps the mapping).
    path = getattr(sys.modules.get("rbcl._sodium"), "lib_path", None)
    if path:
        try:
            os.unlink(path)
        except OSError:
            pass
    return rbcl._sodium


_SODIUM = _libsodium()
# Own function objects (``CDLL[name]`` makes a new one), called with bytes and ctypes buffers as rbcl does;
# rbcl's wrappers add only argument checks, done here once per batch instead of once per point.
_FROM_HASH = _SODIUM["crypto_core_ristretto255_from_hash"]  # 64 bytes -> point; never fails
_SCALARMULT = _SODIUM["crypto_scalarmult_ristretto255"]  # 0, or -1 for an invalid point or an identity result


def new_scalar() -> bytes:
    """A secret scalar, uniform in ``[1, L)``, from OS entropy.

    64 random bytes reduced modulo ``L`` are uniform to within ``2**-260``.

    Example
    -------
    >>> k = new_scalar()
    >>> len(k) == SCALAR_BYTES and k != new_scalar()
    True
    """
    while True:
        scalar = rbcl.crypto_core_ristretto255_scalar_reduce(secrets.token_bytes(64))
        if any(scalar):  # zero (probability 2**-252) would map every point to the identity
            return scalar


def _check_scalar(scalar: bytes) -> None:
    if not isinstance(scalar, bytes) or len(scalar) != SCALAR_BYTES or not any(scalar) \
            or rbcl.crypto_core_ristretto255_scalar_reduce(scalar + bytes(32)) != scalar:
        raise CryptoError(f"a PSI scalar must be {SCALAR_BYTES} bytes, reduced modulo the group order and not "
                          "zero; make one with new_scalar()")


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


def hash_and_blind(ids: np.ndarray, kind: str, scalar: bytes) -> np.ndarray:
    """``[k]H(id)`` for every ID, as an ``(n, 32)`` uint8 matrix of ristretto255 encodings (a pool task).

    Example
    -------
    >>> a, b = new_scalar(), new_scalar()
    >>> ids = np.array([1, 2, 3])
    >>> ab = blind(hash_and_blind(ids, "int", a), b)
    >>> ba = blind(hash_and_blind(ids, "int", b), a)
    >>> bool((ab == ba).all())
    True
    """
    _check_scalar(scalar)
    encoded = encode_ids(ids, kind)
    out = (ctypes.c_char * (len(encoded) * POINT_BYTES))()
    point = (ctypes.c_char * POINT_BYTES)()
    sha512, from_hash, scalarmult, byref, domain = hashlib.sha512, _FROM_HASH, _SCALARMULT, ctypes.byref, DOMAIN
    for i, e in enumerate(encoded):
        from_hash(point, sha512(domain + e).digest())
        if scalarmult(byref(out, i * POINT_BYTES), scalar, point):
            # H(id) is the identity with probability about 2**-252 (a SHA-512 preimage of it)
            raise CryptoError(f"ID number {i} of this batch hashes to the identity element; it cannot be blinded")
    return np.frombuffer(out, dtype=np.uint8).reshape(-1, POINT_BYTES)


def blind(points: np.ndarray, scalar: bytes, width: int = POINT_BYTES, sender: str | None = None) -> np.ndarray:
    """``[k]P`` for every row ``P`` of ``points``, keeping the first ``width`` bytes (a pool task).

    ``points`` come from the party ``sender``: each row must be the
    canonical ristretto255 encoding of a group element other than the
    identity, else :class:`~ray_vfl.errors.CryptoError` names the sender.

    Example
    -------
    >>> blind(np.zeros((1, POINT_BYTES), np.uint8), new_scalar(), sender="shop")
    Traceback (most recent call last):
    ...
    ray_vfl.errors.CryptoError: party 'shop' sent an invalid point (0000000000000000...): not the canonical \
ristretto255 encoding of a group element other than the identity; it was refused
    """
    _check_scalar(scalar)
    if not 1 <= width <= POINT_BYTES:
        raise VFLError(f"width must be in [1, {POINT_BYTES}], got {width}")
    who = "a peer" if sender is None else f"party {sender!r}"
    points = np.ascontiguousarray(points, dtype=np.uint8)
    if points.ndim != 2 or points.shape[1] != POINT_BYTES:
        raise CryptoError(f"{who} sent points of shape {points.shape}; "
                          f"expected an (n, {POINT_BYTES}) uint8 matrix")
    n = len(points)
    src = (ctypes.c_char * (n * POINT_BYTES)).from_buffer_copy(points)
    out = (ctypes.c_char * (n * POINT_BYTES))()
    scalarmult, byref = _SCALARMULT, ctypes.byref
    for offset in range(0, n * POINT_BYTES, POINT_BYTES):
        if scalarmult(byref(out, offset), scalar, byref(src, offset)):
            bad = points[offset // POINT_BYTES].tobytes().hex()[:16]
            raise CryptoError(f"{who} sent an invalid point ({bad}...): not the canonical ristretto255 "
                              "encoding of a group element other than the identity; it was refused")
    full = np.frombuffer(out, dtype=np.uint8).reshape(n, POINT_BYTES)
    return full if width == POINT_BYTES else full[:, :width].copy()


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


def normalize_ids(values: Any, party: str, id_column: str = "id") -> tuple[np.ndarray, str]:
    """Check one party's IDs and return them as ``(array, kind)``, kind ``"int"`` or ``"str"``.

    Raises :class:`DataError` for missing, duplicate, float, boolean or mixed IDs.

    Example
    -------
    >>> normalize_ids(pd.Series([3, 1]), "bank")[1], normalize_ids(["a", "b"], "shop")[1]
    ('int', 'str')
    """
    series = pd.Series(values) if not isinstance(values, pd.Series) else values
    where = f"party {party!r}, ID column {id_column!r}"
    missing = int(series.isna().sum())
    if missing:
        raise DataError(f"{where}: {missing} missing ID(s); every row needs an ID (drop or fill those rows first)")
    dtype = series.dtype
    if pd.api.types.is_bool_dtype(dtype):
        raise DataError(f"{where}: IDs are booleans; use integer or string IDs")
    if pd.api.types.is_integer_dtype(dtype):
        ids, kind = series.to_numpy(dtype=np.int64 if dtype.kind != "u" else np.uint64), "int"
    elif pd.api.types.is_float_dtype(dtype):
        raise DataError(f"{where}: IDs are floats ({dtype}); integer IDs read with missing values become floats. "
                        "Use integer or string IDs")
    else:
        ids = series.to_numpy(dtype=object)
        kinds = {"str" if isinstance(v, str) else "int" if isinstance(v, (int, np.integer)) and not isinstance(v, bool)
                 else type(v).__name__ for v in ids}
        if len(kinds) != 1 or not kinds <= {"str", "int"}:
            raise DataError(f"{where}: IDs must all be integers or all strings, found {sorted(kinds)}")
        kind = kinds.pop()
        if kind == "int":
            ids = np.array([int(v) for v in ids], dtype=object)  # may exceed 64 bits: keep Python ints
    dup = pd.Index(ids).duplicated()
    if dup.any():
        raise DataError(f"{where}: {int(dup.sum())} duplicate ID(s), e.g. {ids[dup][:3].tolist()}; "
                        "IDs must be unique within a party")
    return ids, kind


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
        """Start over with new IDs and a fresh secret scalar (:func:`new_scalar`, OS entropy).

        ``ids`` is an array (checked by the caller, ``kind`` given) or a reference to the party's own
        table, read here (``kind=None``). With ``keep_rows`` the party keeps its aligned rows for its
        own store (:meth:`result`) and tells the driver only their number.
        """
        self.name = name
        if kind is None:
            ids, kind = normalize_ids(ids.fetch_ids(), name)
        self.ids = ids
        self.kind = kind
        self.keep_rows = keep_rows
        self._result: tuple[np.ndarray, np.ndarray] | None = None
        self.pool = pool
        self.mailbox = Mailbox(name)
        self.audit = audit
        self.inbox: list[tuple[Message, Any]] = []
        self._scalar = new_scalar()
        self._perm: np.ndarray | None = None  # follower: shuffled position -> own row
        self._theirs: dict[str, np.ndarray] = {}  # leader: follower -> [a][f]H(y) digests
        self._matches: dict[str, np.ndarray] = {}  # leader: follower -> matching position per own row

    # helpers -------------------------------------------------------------
    def _open(self, message: Message, kind: str, context: dict | None = None) -> Any:
        payload = self.mailbox.open(message, kind, context)
        if self.audit:
            self.inbox.append((message, payload))
        return payload

    def _map(self, fn, items: np.ndarray, *shared: Any) -> np.ndarray:
        # Each task gets a contiguous chunk; the secret scalar goes only to this party's own pinned tasks.
        try:
            parts = self.pool.map(fn, [items[s] for s in self.pool.chunks(len(items), min_chunk=1024)], *shared)
        except ray.exceptions.RayTaskError as exc:
            if isinstance(exc.cause, VFLError):  # a kernel's own message (e.g. which peer sent a bad point)
                raise exc.cause from None
            raise
        return np.concatenate(parts) if parts else np.zeros((0, POINT_BYTES), np.uint8)

    # rounds ----------------------------------------------------------------
    def blind_own(self, receivers: list[str], shuffle: bool) -> Message:
        """Round 1 / 2: send ``[k]H(id)`` of every own ID.

        A follower shuffles the list (with OS entropy) so the leader, who later
        names matching positions, learns nothing from the follower's row order.
        """
        points = self._map(hash_and_blind, self.ids, self.kind, self._scalar)
        if shuffle:
            self._perm = np.random.default_rng(secrets.randbits(128)).permutation(len(points))
            points = points[self._perm]
        return self.mailbox.send("psi_points", receivers, points)

    def reblind(self, message: Message) -> Message:
        """Round 3 (follower): blind the leader's points again, same order, truncated to digests."""
        points = self._open(message, "psi_points")
        digests = self._map(blind, points, self._scalar, DIGEST_BYTES, message.sender)
        return self.mailbox.send("psi_double_blinded", [message.sender], digests)

    def blind_theirs(self, message: Message) -> int:
        """Leader: blind a follower's shuffled points with the leader's scalar (kept locally)."""
        points = self._open(message, "psi_points")
        self._theirs[message.sender] = self._map(blind, points, self._scalar, DIGEST_BYTES, message.sender)
        return len(points)

    def match(self, message: Message) -> int:
        """Leader: equal double-blinded values mark own rows the follower also holds."""
        digests = self._open(message, "psi_double_blinded", {"n_points": len(self.ids)})
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
        if self._perm is None:
            raise VFLError(f"party {self.name!r} got a PSI result before sending its points")
        positions = self._open(message, "psi_result", {"n_points": len(self._perm)})
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

    def received(self) -> list[tuple[Message, Any]]:
        """Every message this party opened, with its payload (kept only with ``audit=True``: the
        payloads then go to whoever asks, the driver included, for tests)."""
        return list(self.inbox)
