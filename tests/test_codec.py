"""The typed wire (ray_vfl.runtime.codec): every payload type the library sends round-trips exactly, the
registry covers every record type a schema names, and anything else -- a pickled object, a lambda, an
object array, a non-string key, an unknown record -- is refused with ProtocolError before any object of
it is built."""

from __future__ import annotations

import dataclasses
import importlib
import math
import pickle
import struct

import msgpack
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from ray_vfl import ProtocolError
from ray_vfl.crypto import available_backends, get_backend
from ray_vfl.crypto.he.ciphertexts import CipherArray
from ray_vfl.errors import VFLError
from ray_vfl.runtime import codec
from ray_vfl.runtime.codec import DTYPES, MAGIC, WIRE_TYPES, decode, encode, wire_type
from ray_vfl.runtime.comm import Mailbox, Message
from ray_vfl.runtime.validation import Is, registered_kinds, schema_of
from ray_vfl.secureboost.messages import LevelStep, Partition, RouteAnswer, SplitOrders

MESSAGE_MODULES = ["ray_vfl.secureboost.messages", "ray_vfl.pivodl.messages", "ray_vfl.ssxgb.messages",
                   "ray_vfl.psi.party", "ray_vfl.data.store", "ray_vfl.splitnn.network.parties"]


# ---------------------------------------------------------------------------
# the registry
def test_every_registered_type_is_a_frozen_dataclass_that_round_trips():
    for name in WIRE_TYPES:
        cls = wire_type(name)
        assert dataclasses.is_dataclass(cls) and cls.__dataclass_params__.frozen, name


def test_every_record_type_a_schema_names_travels():
    """The registry covers every kind the library sends: each record type a kind's schema asks for
    (``Is(path, SomeRecord)``) and every backend's public key (the ``public_key`` kinds) is registered."""
    for module in MESSAGE_MODULES:
        importlib.import_module(module)
    named = set()
    for kind in registered_kinds():
        for spec in schema_of(kind).specs:
            if isinstance(spec, Is):
                named.update(t for t in (spec.types if isinstance(spec.types, tuple) else (spec.types,))
                             if dataclasses.is_dataclass(t))
    for name in available_backends():
        named.add(get_backend(name).public_key_type)
    named.add(CipherArray)
    assert len(named) >= 6
    missing = sorted(cls.__name__ for cls in named if codec._registered(cls) is None)
    assert not missing, f"record types a schema names but the wire cannot carry: {missing}"


def test_every_record_type_of_a_messages_module_is_registered():
    for module in [m for m in MESSAGE_MODULES if m.endswith(".messages")]:
        mod = importlib.import_module(module)
        for value in vars(mod).values():
            if isinstance(value, type) and dataclasses.is_dataclass(value) and value.__module__ == module:
                assert codec._registered(value) is not None, f"{module}.{value.__name__} is not in WIRE_TYPES"


# ---------------------------------------------------------------------------
# round trips
def _same(a, b) -> bool:
    """Equal values of exactly the same types (NaN equal to NaN; arrays by dtype, shape and bytes)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, np.ndarray):
        return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()
    if isinstance(a, np.generic):
        return a.dtype == b.dtype and a.tobytes() == b.tobytes()
    if isinstance(a, float):
        return a == b or (math.isnan(a) and math.isnan(b))
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if dataclasses.is_dataclass(a):
        return all(_same(getattr(a, f.name), getattr(b, f.name)) for f in dataclasses.fields(a)
                   if not f.name.startswith("_"))
    return a == b


dtypes = st.sampled_from(DTYPES)
arrays = dtypes.flatmap(lambda d: hnp.arrays(d, hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=4)))
np_scalars = dtypes.flatmap(lambda d: hnp.from_dtype(d).map(d.type))
leaves = st.one_of(
    st.none(), st.booleans(), st.integers(), st.integers(-2**4200, 2**4200), st.floats(), st.text(), st.binary(),
    arrays, np_scalars,
    st.builds(RouteAnswer, hnp.arrays(np.uint8, st.integers(0, 6)), st.integers(0, 48)),
    st.builds(lambda a, k, t: CipherArray(a, k, t), hnp.arrays(np.uint8, st.tuples(st.integers(1, 3), st.just(8))),
              st.binary(min_size=16, max_size=16), st.text()),
)
payloads = st.recursive(
    leaves,
    lambda kids: st.one_of(st.lists(kids, max_size=4), st.lists(kids, max_size=4).map(tuple),
                           st.dictionaries(st.text(max_size=8), kids, max_size=4)),
    max_leaves=12,
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(payloads)
def test_every_payload_round_trips_exactly(payload):
    wire = encode(payload)
    assert _same(decode(wire), payload)
    assert _same(decode(bytearray(wire)), payload)  # as Mailbox.open hands it: any bytes-like


def test_the_messages_of_a_level_round_trip():
    orders = SplitOrders(np.array([0, 1]), np.array([3, 0]), np.array([7, 2], np.int32), np.array([True, False]),
                         np.array([0, 1], np.int64), np.packbits(np.array([[0] * 31, [1, 1] + [0] * 29], bool), axis=1))
    step = LevelStep(orders, np.arange(6).reshape(2, 3), Partition(np.array([2]), np.packbits([1, 0, 1]), np.array([3])), True)
    pk = get_backend("paillier").generate_keys(1024, allow_weak=True)[0]
    for payload in (step, (("paillier", {"frac_bits": 40, "max_rows": 2**20}), pk), {"n": 2**2047 + 1, "g": 3}):
        assert _same(decode(encode(payload)), payload)
    assert isinstance(decode(encode(step)).orders.bin, np.ndarray)
    big_endian = decode(encode(np.arange(3, dtype=">f8")))  # travels little-endian, same values
    assert big_endian.dtype == np.float64 and big_endian.tolist() == [0.0, 1.0, 2.0]


def test_arrays_are_aligned_views_of_the_decoded_buffer():
    wire = bytearray(encode({"a": np.arange(3, dtype=np.int8), "b": np.arange(5, dtype=np.float64)}))
    back = decode(wire)
    assert back["b"].flags.aligned and back["b"].ctypes.data % 8 == 0
    assert np.shares_memory(back["b"], np.frombuffer(wire, np.uint8))
    assert not decode(bytes(wire))["b"].flags.writeable  # from immutable bytes: read-only


# ---------------------------------------------------------------------------
# refusals, before anything of the payload is built
CALLS: list[str] = []


def _record(what: str) -> "Spy":
    CALLS.append(what)
    return Spy.__new__(Spy)


class Spy:
    """Records every way pickle or a decoder could bring it to life."""

    def __init__(self) -> None:
        CALLS.append("__init__")

    def __reduce__(self):
        return (_record, ("built by pickle",))

    def __setstate__(self, state) -> None:
        CALLS.append("__setstate__")


@pytest.fixture(autouse=True)
def no_calls():
    CALLS.clear()
    yield


def _wire(structure: bytes, arrays: bytes = b"") -> bytes:
    """Hand-made wire bytes: what a malicious sender could put together."""
    head = struct.pack("<4sI", MAGIC, len(structure)) + structure
    return head + bytes(-len(head) % 8) + arrays


def _ext(code: int, data: bytes) -> msgpack.ExtType:
    return msgpack.ExtType(code, data)


def _refused(wire, words: str) -> None:
    with pytest.raises(ProtocolError) as err:
        decode(wire, sender="mallory", kind="level_step", receiver="bank")
    assert (err.value.sender, err.value.kind, err.value.receiver) == ("mallory", "level_step", "bank")
    assert words in err.value.what, err.value.what
    assert CALLS == []


def test_a_pickled_object_is_refused_and_never_built():
    blob = pickle.dumps(Spy.__new__(Spy))
    pickle.loads(blob)
    assert CALLS == ["built by pickle"]  # what unpickling the old wire would have done
    CALLS.clear()
    _refused(blob, "not ray_vfl wire bytes")
    assert decode(encode({"blob": blob}))["blob"] == blob  # carried as bytes it stays bytes: never unpickled
    assert CALLS == []


def test_a_record_of_an_unknown_type_is_refused_before_its_fields_are_decoded():
    bad_array = _ext(codec._EXT_ARRAY, b"not an array header")  # never reached: the name is refused first
    _refused(_wire(msgpack.packb([_ext(codec._EXT_DATACLASS, b"Spy"), bad_array])),
             "names a type 'Spy' that does not travel")
    _refused(_wire(msgpack.packb([_ext(codec._EXT_DATACLASS, b"tests.test_codec:Spy")])), "does not travel")
    known = [_ext(codec._EXT_DATACLASS, b"RouteAnswer"), 1, 2, 3]
    _refused(_wire(msgpack.packb(known)), "a RouteAnswer must have the fields ['bits', 'count']")
    _refused(_wire(msgpack.packb([_ext(codec._EXT_DATACLASS, b"CipherArray"), 5, bytes(16), "num"])),
             "a CipherArray refused its fields (CryptoError")


def test_a_lambda_or_any_other_object_cannot_be_sent():
    for value in (lambda x: x, Spy.__new__(Spy), {1, 2}, object(), np.array([Spy.__new__(Spy)], dtype=object),
                  np.array(["a"]), np.datetime64("2024-01-01"), np.ma.masked_array([1, 2])):
        with pytest.raises(VFLError, match="cannot travel"):
            encode({"x": [value]})
    assert CALLS == []


def test_an_object_array_is_refused():
    head = struct.pack("<BBQ", len(DTYPES), 1, 0) + struct.pack("<Q", 1)  # dtype code of no allowed dtype
    _refused(_wire(msgpack.packb(_ext(codec._EXT_ARRAY, head)), bytes(8)), "none of bool, int8")
    with pytest.raises(VFLError, match="dtype object cannot travel"):
        encode(np.array([1, "a"], dtype=object))


def test_keys_other_than_strings_are_refused():
    _refused(_wire(msgpack.packb({1: "x"})), "not valid wire bytes")
    _refused(_wire(msgpack.packb({b"key": "x"}, use_bin_type=True)), "a dict with a bytes key")
    _refused(_wire(msgpack.packb([{"ok": 1}, {2.5: 1}])), "not valid wire bytes")


@pytest.mark.parametrize("make, words", [
    (lambda: _wire(msgpack.packb(_ext(99, b""))), "extension type 99"),
    (lambda: encode(np.arange(4))[:-1], "not where the wire holds them"),
    (lambda: encode(np.arange(4)) + bytes(8), "its payload ends at byte"),
    (lambda: encode({"a": 1})[:6], "not ray_vfl wire bytes"),
    (lambda: _wire(msgpack.packb(_ext(codec._EXT_ARRAY, struct.pack("<BBQ", 5, 1, 8) + struct.pack("<Q", 4))),
                   bytes(16)), "not where the wire holds them"),
    (lambda: _wire(msgpack.packb(_ext(codec._EXT_ARRAY, struct.pack("<BBQ", 5, 2, 0) + struct.pack("<Q", 4)))),
     "does not match its number of dimensions"),
    (lambda: _wire(msgpack.packb(_ext(codec._EXT_ARRAY, struct.pack("<BBQ", 0, 1, 0) + struct.pack("<Q", 2))),
                   bytes([1, 2]) + bytes(6)), "a bool array holds a byte other than 0 or 1"),
    (lambda: _wire(msgpack.packb([_ext(codec._EXT_TUPLE, b"x"), 1])), "a tuple marker carries bytes"),
    (lambda: _wire(msgpack.packb({"a": _ext(codec._EXT_TUPLE, b"")})), "marker stands elsewhere"),
    (lambda: _wire(msgpack.packb([1, _ext(codec._EXT_DATACLASS, b"RouteAnswer")])), "marker stands elsewhere"),
    (lambda: _wire(msgpack.packb(_ext(codec._EXT_TUPLE, b""))), "marker stands elsewhere"),
    (lambda: _wire(msgpack.packb(_ext(codec._EXT_SCALAR, bytes([200, 1])))), "unknown dtype"),
    (lambda: _wire(b"\x91" * 2000), "not valid wire bytes"),  # nested deeper than the decoder goes
])
def test_malformed_wire_bytes_are_refused(make, words):
    _refused(make(), words)


def test_a_sealed_pickle_is_refused_by_the_receiver_and_never_built():
    bank = Mailbox("bank")
    wire = Mailbox("mallory").seal.seal("split_rows", ("bank",), -1, -1, pickle.dumps(Spy.__new__(Spy)))
    with pytest.raises(ProtocolError, match="party 'mallory' sent a malformed 'split_rows' to 'bank': the payload is "
                                            "not ray_vfl wire bytes"):
        bank.open(Message("split_rows", "mallory", ("bank",), -1, -1, wire), "split_rows")
    assert CALLS == []
