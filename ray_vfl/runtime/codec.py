"""The typed wire: message payloads encoded without pickle, and decoded only into known types.

A payload that crosses from one party to another is one of: ``None``, ``bool``, ``int`` (of any
size: Paillier and BCP keys are big integers), ``float``, ``str``, ``bytes``, a ``list`` or
``tuple`` of payloads, a ``dict`` with ``str`` keys, a numpy array or scalar of one of the fixed
dtypes :data:`DTYPES` (never ``object``), or an instance of one of the few frozen dataclasses
named in :data:`WIRE_TYPES` (message records, ciphertext arrays, public keys), whose public fields
are payloads. :func:`encode` refuses anything else (a lambda, an arbitrary object, an object
array) with :class:`~ray_vfl.errors.VFLError`; :func:`decode` refuses any other bytes with
:class:`~ray_vfl.errors.ProtocolError` naming the sender and the kind, and it refuses *before*
building any object of them: nothing a peer sends can name a class to instantiate or code to
run, because the decoder only builds the types above and a dataclass only by its registered
name, from exactly its registered fields (then its own constructor checks them).

Layout. ``MAGIC``, the length of a structure, the structure (msgpack, with extension types for
arrays, big integers and numpy scalars; a tuple or a registered dataclass is a msgpack array whose
first item is an extension type naming it, then its items or fields), then the arrays' bytes, each C-contiguous, little-endian and 8-byte aligned, in the order the structure names
them. An array costs one copy when encoded (into the message) and none when decoded: it is a
view of the decoded buffer, writable if that buffer is (a ``bytearray``, as
:meth:`~ray_vfl.runtime.comm.Mailbox.open` hands it). ``benchmarks/wire.py`` measures encoding
and decoding beside pickle on the messages of a SecureBoost run.

Example
-------
>>> import numpy as np
>>> wire = encode({"node": np.arange(3), "key": (2**2048 + 1, "paillier")})
>>> back = decode(wire)
>>> back["node"].tolist(), back["key"][0] == 2**2048 + 1, type(back["key"]).__name__
([0, 1, 2], True, 'tuple')
>>> decode(b"\\x80\\x04\\x95 pickle bytes", sender="bank", kind="gh")
Traceback (most recent call last):
...
ray_vfl.errors.ProtocolError: party 'bank' sent a malformed 'gh': the payload is not ray_vfl wire bytes \
(it starts with b'\\x80\\x04\\x95 ')
"""

from __future__ import annotations

import dataclasses
import importlib
import struct
from typing import Any

import msgpack
import numpy as np

from ..errors import ProtocolError, VFLError

__all__ = ["DTYPES", "WIRE_TYPES", "MAGIC", "encode", "decode", "wire_type", "WireRefused"]

MAGIC = b"RVW\x01"  # format version 1
_ALIGN = 8
_HEAD = struct.Struct("<4sI")  # magic, length of the structure

# The dtypes an array on the wire may have; an array's code is its index here.
DTYPES: tuple[np.dtype, ...] = tuple(np.dtype(t).newbyteorder("<") for t in (
    "bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float32", "float64"))
_CODE = {dt: i for i, dt in enumerate(DTYPES)}
_CODE.update({dt.newbyteorder("="): i for i, dt in enumerate(DTYPES)})  # the native spelling (little-endian hosts)

# The dataclasses that travel, by wire name: "module:class". A decoder imports the module of a
# name it meets for the first time (only these modules; the sender cannot name another). A backend
# added with ray_vfl.crypto.register_backend whose public key is a class of its own adds it here.
WIRE_TYPES: dict[str, str] = {
    "Message": "ray_vfl.runtime.comm:Message",  # a sealed protocol message, through another organisation's gateway
    "CipherArray": "ray_vfl.crypto.he.ciphertexts:CipherArray",
    "PlainPublicKey": "ray_vfl.crypto.he.plain:PlainPublicKey",
    "PaillierPublicKey": "ray_vfl.crypto.he.paillier:PaillierPublicKey",
    "OUPublicKey": "ray_vfl.crypto.he.ou:OUPublicKey",
    "SplitOrders": "ray_vfl.secureboost.messages:SplitOrders",
    "Partition": "ray_vfl.secureboost.messages:Partition",
    "LevelStep": "ray_vfl.secureboost.messages:LevelStep",
    "NodeHistograms": "ray_vfl.secureboost.messages:NodeHistograms",
    "RouteQuery": "ray_vfl.secureboost.messages:RouteQuery",
    "RouteAnswer": "ray_vfl.secureboost.messages:RouteAnswer",
    # across organisations (ray_vfl.runtime.federation.roles): a role's start and what it may be handed
    "Record": "ray_vfl.runtime.comm:Record",  # a party's statistics of what it sent
    "BoostConfig": "ray_vfl.trees.config:BoostConfig",
    "SplitNNConfig": "ray_vfl.splitnn.network.config:SplitNNConfig",
    "PIVODLConfig": "ray_vfl.pivodl.config:PIVODLConfig",
    "Posted": "ray_vfl.runtime.federation.relay:Posted",  # a message its sender delivered to its receiver directly
    "PartySource": "ray_vfl.data.sources:PartySource",
    "StartRole": "ray_vfl.runtime.federation.roles:StartRole",
    "TableKey": "ray_vfl.runtime.federation.roles:TableKey",
    "PoolSpec": "ray_vfl.runtime.federation.roles:PoolSpec",
    "RoleRef": "ray_vfl.runtime.federation.roles:RoleRef",
}

_EXT_ARRAY, _EXT_TUPLE, _EXT_INT, _EXT_SCALAR, _EXT_DATACLASS = 1, 2, 3, 4, 5
_TUPLE_HEAD = msgpack.ExtType(_EXT_TUPLE, b"")
_ARRAY_HEAD = struct.Struct("<BBQ")  # dtype code, ndim, offset of the bytes; then ndim sizes
_SIZES = [struct.Struct(f"<{n}Q") for n in range(33)]
_MAX_NDIM = 32


class WireRefused(Exception):
    """What is wrong with bytes being decoded; :func:`decode` turns it into a ProtocolError."""


# ---------------------------------------------------------------------------------------------
# the registry of dataclasses
_classes: dict[str, type] = {}  # wire name -> class (resolved on first use)
_names: dict[type, tuple[str, tuple[str, ...]]] = {}  # class -> (wire name, its public fields)
_HEADS: dict[str, msgpack.ExtType] = {}  # wire name -> the marker that heads a record of it


class _Mark:
    """What a marker decodes to: the head of the array holding a tuple's items or a record's fields."""

    __slots__ = ("cls", "fields")

    def __init__(self, cls: type | None, fields: tuple[str, ...] = ()) -> None:
        self.cls, self.fields = cls, fields


_MARKS: dict[str, _Mark] = {}  # wire name -> its decoded marker
_TUPLE_MARK = _Mark(None)


def wire_type(name: str) -> type:
    """The dataclass registered under wire name ``name`` (imported on first use).

    Example
    -------
    >>> wire_type("RouteAnswer").__name__
    'RouteAnswer'
    """
    cls = _classes.get(name)
    if cls is None:
        if name not in WIRE_TYPES:
            raise WireRefused(f"it names a type {name!r} that does not travel (known: {sorted(WIRE_TYPES)})")
        module, qualname = WIRE_TYPES[name].split(":")
        cls = getattr(importlib.import_module(module), qualname)
        if not (dataclasses.is_dataclass(cls) and cls.__dataclass_params__.frozen):
            raise VFLError(f"WIRE_TYPES[{name!r}] = {WIRE_TYPES[name]!r} is not a frozen dataclass")
        _classes[name] = cls
        # Private fields (a leading "_": process-local caches) never travel, as in the send records.
        _names[cls] = (name, tuple(f.name for f in dataclasses.fields(cls) if not f.name.startswith("_")))
        _HEADS[name] = msgpack.ExtType(_EXT_DATACLASS, name.encode())
        _MARKS[name] = _Mark(cls, _names[cls][1])
    return cls


def _registered(cls: type) -> tuple[str, tuple[str, ...]] | None:
    entry = _names.get(cls)
    if entry is None:
        spelled = f"{cls.__module__}:{cls.__qualname__}"
        for name, where in WIRE_TYPES.items():
            if where == spelled:
                wire_type(name)
                return _names[cls]
    return entry


# ---------------------------------------------------------------------------------------------
# encoding
class _Encoder:
    """One payload's encoding: the structure (msgpack) and the arrays' bytes, kept apart."""

    __slots__ = ("chunks", "size")

    def __init__(self) -> None:
        self.chunks: list[Any] = []
        self.size = 0

    def pack(self, obj: Any) -> bytes:
        return msgpack.packb(obj, default=self.default, strict_types=True, use_bin_type=True, datetime=False)

    def default(self, obj: Any) -> Any:
        t = type(obj)
        if t is np.ndarray:
            return self.array(obj)
        if t is tuple:  # [tuple marker, *items]: packed in the same pass, no nested encoding
            return [_TUPLE_HEAD, *obj]
        if t is int:  # beyond 64 bits (msgpack packs the others)
            return msgpack.ExtType(_EXT_INT, obj.to_bytes((obj.bit_length() + 8) // 8, "little", signed=True))
        if isinstance(obj, np.generic):
            code = _CODE.get(obj.dtype)
            if code is None:
                raise VFLError(f"a numpy value of dtype {obj.dtype} cannot travel; send one of {_dtype_names()}")
            return msgpack.ExtType(_EXT_SCALAR, bytes((code,)) + np.array(obj, dtype=DTYPES[code]).tobytes())
        entry = _registered(t)
        if entry is not None:  # [its name, *its public fields]
            head, fields = _HEADS[entry[0]], entry[1]
            return [head, *[getattr(obj, f) for f in fields]]
        raise VFLError(f"a {t.__module__}.{t.__qualname__} cannot travel between parties: send numbers, strings, "
                       f"bytes, lists, tuples, str-keyed dicts, numpy arrays or one of {sorted(WIRE_TYPES)}")

    def array(self, a: np.ndarray) -> msgpack.ExtType:
        code = _CODE.get(a.dtype.newbyteorder("<") if a.dtype.byteorder == ">" else a.dtype)
        if code is None:
            raise VFLError(f"an array of dtype {a.dtype} cannot travel; send one of {_dtype_names()}")
        if a.ndim > _MAX_NDIM:
            raise VFLError(f"an array of {a.ndim} dimensions cannot travel (at most {_MAX_NDIM})")
        if not a.flags.c_contiguous or a.dtype.byteorder == ">":
            a = np.ascontiguousarray(a, dtype=DTYPES[code])
        offset = -(-self.size // _ALIGN) * _ALIGN
        if offset > self.size:
            self.chunks.append(bytes(offset - self.size))
        self.chunks.append(a.reshape(-1).view(np.uint8) if a.size else b"")
        self.size = offset + a.nbytes
        return msgpack.ExtType(_EXT_ARRAY, _ARRAY_HEAD.pack(code, a.ndim, offset) + _SIZES[a.ndim].pack(*a.shape))


def _dtype_names() -> str:
    return ", ".join(dt.name for dt in DTYPES)


def encode(payload: Any) -> bytes:
    """``payload`` as wire bytes (see the module docstring); :class:`VFLError` for a value that
    cannot travel."""
    enc = _Encoder()
    try:
        structure = enc.pack(payload)
    except (TypeError, ValueError, OverflowError) as exc:  # msgpack's own refusals (a too large string, say)
        raise VFLError(f"the payload cannot travel between parties: {exc}") from None
    head = _HEAD.pack(MAGIC, len(structure)) + structure
    pad = -len(head) % _ALIGN
    return b"".join([head, bytes(pad), *enc.chunks])


# ---------------------------------------------------------------------------------------------
# decoding
class _Decoder:
    """One wire's decoding: ``ext_hook`` builds the extension types, arrays as views of ``data``."""

    __slots__ = ("data", "cursor", "marks")

    def __init__(self, data: memoryview) -> None:
        self.data = data  # the arrays' bytes
        self.cursor = 0
        self.marks = 0  # markers met and not yet at the head of their array

    def unpack(self, packed: bytes) -> Any:
        return msgpack.unpackb(packed, ext_hook=self.ext_hook, list_hook=self.list_hook, object_pairs_hook=_str_keyed,
                               strict_map_key=True, raw=False, use_list=True, timestamp=0)

    def list_hook(self, items: list) -> Any:
        """A msgpack array: a tuple or a record if a marker heads it, else a list."""
        if not items or type(items[0]) is not _Mark:
            return items
        self.marks -= 1
        mark = items[0]
        if mark.cls is None:
            return tuple(items[1:])
        if len(items) != 1 + len(mark.fields):
            raise WireRefused(f"a {mark.cls.__name__} must have the fields {list(mark.fields)}")
        try:
            return mark.cls(**dict(zip(mark.fields, items[1:])))
        except Exception as exc:  # its own constructor refused the values
            raise WireRefused(f"a {mark.cls.__name__} refused its fields ({type(exc).__name__}: {exc})") from None

    def ext_hook(self, code: int, data: bytes) -> Any:
        if code == _EXT_ARRAY:
            return self.array(data)
        if code == _EXT_TUPLE:
            if data:
                raise WireRefused("a tuple marker carries bytes")
            self.marks += 1
            return _TUPLE_MARK
        if code == _EXT_INT:
            if not data:
                raise WireRefused("a big integer has no bytes")
            return int.from_bytes(data, "little", signed=True)
        if code == _EXT_SCALAR:
            if not data or data[0] >= len(DTYPES) or len(data) != 1 + DTYPES[data[0]].itemsize:
                raise WireRefused("a numpy scalar has an unknown dtype or the wrong size")
            return np.frombuffer(data, DTYPES[data[0]], 1, 1)[0]
        if code == _EXT_DATACLASS:  # refuses an unknown name before the record's fields are decoded
            try:
                name = data.decode()
            except UnicodeDecodeError:
                raise WireRefused("a record's type name is not text") from None
            mark = _MARKS.get(name)
            if mark is None:
                wire_type(name)
                mark = _MARKS[name]
            self.marks += 1
            return mark
        raise WireRefused(f"it holds an extension type {code} that does not exist on the wire")

    def array(self, head: bytes) -> np.ndarray:
        if len(head) < _ARRAY_HEAD.size:
            raise WireRefused("an array header is cut short")
        code, ndim, offset = _ARRAY_HEAD.unpack_from(head)
        if code >= len(DTYPES):
            raise WireRefused(f"an array has dtype code {code}, which is none of {_dtype_names()}")
        if ndim > _MAX_NDIM or len(head) != _ARRAY_HEAD.size + 8 * ndim:
            raise WireRefused("an array header does not match its number of dimensions")
        shape = _SIZES[ndim].unpack_from(head, _ARRAY_HEAD.size)
        dtype = DTYPES[code]
        count = 1
        for s in shape:
            count *= s
        nbytes = count * dtype.itemsize
        start = -(-self.cursor // _ALIGN) * _ALIGN
        if offset != start or offset + nbytes > len(self.data):
            raise WireRefused(f"an array's {nbytes} bytes at offset {offset} are not where the wire holds them")
        self.cursor = offset + nbytes
        if code == 0 and count and np.frombuffer(self.data, np.uint8, count, offset).max() > 1:
            raise WireRefused("a bool array holds a byte other than 0 or 1")
        return np.frombuffer(self.data, dtype, count, offset).reshape(shape)


def _str_keyed(pairs: list) -> dict:
    for key, _ in pairs:
        if type(key) is not str:
            raise WireRefused(f"it holds a dict with a {type(key).__name__} key; keys are str")
    return dict(pairs)


def decode(wire: bytes | bytearray | memoryview, sender: str = "?", kind: str = "?", receiver: str | None = None) -> Any:
    """The payload of wire bytes made by :func:`encode`; anything else raises
    :class:`~ray_vfl.errors.ProtocolError` ``(sender, kind, what)`` before any object of it is
    built. Arrays are views of ``wire``: writable if ``wire`` is a ``bytearray``."""
    try:
        view = memoryview(wire).cast("B")
        if len(view) < _HEAD.size or bytes(view[:4]) != MAGIC:
            raise WireRefused(f"the payload is not ray_vfl wire bytes (it starts with {bytes(view[:4])!r})")
        _, n = _HEAD.unpack_from(view)
        body = _HEAD.size + n
        if body > len(view):
            raise WireRefused(f"its structure claims {n} bytes; the wire holds {len(view) - _HEAD.size}")
        arrays = -(-body // _ALIGN) * _ALIGN
        decoder = _Decoder(view[arrays:])
        payload = decoder.unpack(view[_HEAD.size:body])
        if decoder.marks or type(payload) is _Mark:
            raise WireRefused("a tuple or record marker stands elsewhere than at the head of an array")
        if arrays + decoder.cursor != len(view):
            raise WireRefused(f"the wire holds {len(view)} bytes; its payload ends at byte {arrays + decoder.cursor}")
        return payload
    except WireRefused as bad:
        raise ProtocolError(sender, kind, str(bad), receiver) from None
    except ProtocolError:
        raise
    except Exception as exc:  # msgpack's own refusals: cut short, too deeply nested, a non-str key
        raise ProtocolError(sender, kind, f"the payload is not valid wire bytes ({type(exc).__name__}: {exc})",
                            receiver) from None
