"""What each message kind may carry, checked by the receiver before it uses the payload.

Every protocol declares, next to its messages, one :class:`Schema` per kind it
sends (:func:`register`): the payload's type, each field's dtype and shape,
its value range, whether it must be finite or repeat no value, which of the
receiver's tables its indices point into, which sizes must match the
receiver's own. :meth:`~ray_vfl.runtime.comm.Mailbox.open` checks every
payload against its kind's schema, with the receiver's *context* (its table
sizes, its public key), and raises :class:`~ray_vfl.errors.ProtocolError`
naming the sender, the kind and the field. Nothing a peer sends is then used
to index, allocate or decrypt before it has been checked, and nothing it sends
runs before that either: payloads are decoded from the typed wire
(:mod:`ray_vfl.runtime.codec`), which builds numbers, strings, arrays and a few
registered records only, never pickle.

Where the schemas live: :mod:`ray_vfl.secureboost.messages` (SecureBoost),
:mod:`ray_vfl.psi.party` (ECDH-PSI), :mod:`ray_vfl.data.store` (``split_rows``),
:mod:`ray_vfl.splitnn.network.parties` (split learning).

A size, bound or set in a field spec is a *reference*: an ``int``/``float``,
a ``str`` naming a value of the receiver's context, or a :class:`Ref`
computed from the payload and the context (:func:`length`, :func:`total`).
Checks run in the order they are declared, so a later spec may rely on an
earlier one (a length checked before it is used as a shape).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Collection, Mapping

import numpy as np

from ..errors import ProtocolError, VFLError

__all__ = [
    "Ref", "length", "total", "not_in", "Is", "Scalar", "Size", "Array", "Packed", "Ciphers", "Rule", "Schema",
    "register", "schema_of", "registered_kinds", "check_payload",
]

_DTYPES = {"int": "iu", "float": "f", "bool": "b", "uint8": None}


class Malformed(Exception):
    """Raised by a field spec with what is wrong; turned into a ProtocolError by :meth:`Schema.check`."""


@dataclass(frozen=True)
class Ref:
    """A value computed from the payload and the receiver's context, described as ``desc`` in errors."""

    fn: Callable[[Any, Mapping[str, Any]], Any]
    desc: str


def length(path: str) -> Ref:
    """The length of another field of the payload (fields that must be as long as it)."""
    return Ref(lambda p, c: len(_get(p, path)), f"len({path})")


def total(path: str) -> Ref:
    """The sum of an integer field of the payload (a packed bit string's bit count, say)."""
    return Ref(lambda p, c: int(np.sum(_get(p, path))), f"sum({path})")


def not_in(values: np.ndarray, pool: Any) -> np.ndarray:
    """Which of ``values`` (1-D) are not in ``pool`` (an array, a set, a dict's keys).

    Node lists are short: Python sets answer in a few microseconds where ``np.isin`` takes
    tens (a level step has a handful of such checks, every level of every tree).

    Example
    -------
    >>> not_in(np.array([1, 5]), {1: "a", 2: "b"}).tolist()
    [False, True]
    """
    if len(values) <= 256:
        keys = set(pool.tolist() if isinstance(pool, np.ndarray) else pool)
        return np.fromiter((v not in keys for v in values.tolist()), dtype=bool, count=len(values))
    pool = np.fromiter(pool, dtype=np.int64) if isinstance(pool, (dict, set, frozenset)) else np.asarray(pool)
    return ~np.isin(values, pool)


def _get(payload: Any, path: str) -> Any:
    """Field ``path`` (dotted attributes or dict keys) of ``payload``; ``""`` is the payload itself."""
    value = payload
    for part in path.split(".") if path else ():
        if isinstance(value, dict):
            if part not in value:
                raise Malformed(f"has no field {path!r}")
            value = value[part]
        elif hasattr(value, "__dataclass_fields__") and part in value.__dataclass_fields__:
            value = getattr(value, part)
        else:
            raise Malformed(f"has no field {path!r}")
    return value


def _resolve(ref: Any, payload: Any, ctx: Mapping[str, Any]) -> Any:
    if isinstance(ref, Ref):
        return ref.fn(payload, ctx)
    if isinstance(ref, str):
        if ref not in ctx:  # the receiver's code forgot a value: a bug on this side, not the peer's
            raise VFLError(f"a message schema needs the receiver's context value {ref!r}")
        return ctx[ref]
    return ref


def _describe(ref: Any, value: Any = None) -> str:
    """``ref`` for an error message: where a bound comes from (and its value, if one number)."""
    if isinstance(ref, Ref):
        base = ref.desc
    elif isinstance(ref, str):
        base = f"the receiver's {ref}"
    else:
        return str(value if value is not None else ref)
    return f"{base} = {value}" if value is not None and np.ndim(value) == 0 else base


def _name(path: str) -> str:
    return path or "the payload"


def _at(path: str, shape: tuple, flat: int) -> str:
    """``path[i]`` (or ``path[i, j]``) of the ``flat``-th element of an array of ``shape``."""
    idx = np.unravel_index(flat, shape) if len(shape) > 1 else (flat,)
    return f"{path or 'payload'}[{', '.join(str(int(i)) for i in idx)}]"


class Spec:
    """One check of a message schema."""

    def check(self, payload: Any, ctx: Mapping[str, Any]) -> None:
        raise NotImplementedError


@dataclass(frozen=True)
class Is(Spec):
    """Field ``path`` is an instance of ``types``."""

    path: str
    types: type | tuple[type, ...]

    def check(self, payload, ctx):
        value = _get(payload, self.path)
        if not isinstance(value, self.types):
            types = self.types if isinstance(self.types, tuple) else (self.types,)
            raise Malformed(f"{_name(self.path)} is a {type(value).__name__}; expected "
                            f"{' or '.join(t.__name__ for t in types)}")


@dataclass(frozen=True)
class Size(Spec):
    """Field ``path`` (a sequence) has ``n`` items."""

    path: str
    n: Any

    def check(self, payload, ctx):
        value, n = _get(payload, self.path), _resolve(self.n, payload, ctx)
        if len(value) != n:
            raise Malformed(f"{_name(self.path)} has {len(value)} items; expected {_describe(self.n, n)}")


@dataclass(frozen=True)
class Scalar(Spec):
    """Field ``path`` is one ``int`` (never a ``bool``) or ``bool`` in ``[low, high)``, equal to
    ``equals`` if given."""

    path: str
    type: str = "int"
    low: Any = None
    high: Any = None
    equals: Any = None

    def check(self, payload, ctx):
        value = _get(payload, self.path)
        if self.type == "bool":
            ok = isinstance(value, (bool, np.bool_))
        else:
            ok = isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))
        if not ok:
            raise Malformed(f"{_name(self.path)} is a {type(value).__name__}; expected one {self.type}")
        _in_range(np.asarray([value]), self.path, self.low, self.high, payload, ctx, scalar=True)
        if self.equals is not None:
            want = _resolve(self.equals, payload, ctx)
            if value != want:
                raise Malformed(f"{_name(self.path)} = {value}; the receiver expects {_describe(self.equals, want)}")


def _in_range(values: np.ndarray, path: str, low: Any, high: Any, payload: Any, ctx: Mapping,
              scalar: bool = False) -> None:
    """Every value in ``[low, high)`` (either may be ``None``; a bound may be an array, one per value)."""
    if values.size == 0 or (low is None and high is None):
        return
    lo = None if low is None else _resolve(low, payload, ctx)
    hi = None if high is None else _resolve(high, payload, ctx)
    if np.ndim(lo) == 0 and np.ndim(hi) == 0:  # the extremes, without boolean temporaries: 6x faster
        if (lo is None or values.min() >= lo) and (hi is None or values.max() < hi):
            return
    bad = np.zeros(values.shape, dtype=bool)
    if lo is not None:
        bad |= values < lo
    if hi is not None:
        bad |= values >= hi
    if not bad.any():
        return
    i = int(np.flatnonzero(bad.ravel())[0])
    lo_i = "-inf" if lo is None else np.broadcast_to(lo, values.shape).ravel()[i]
    hi_i = "inf" if hi is None else np.broadcast_to(hi, values.shape).ravel()[i]
    notes = [_describe(r, v) for r, v in ((low, lo), (high, hi)) if isinstance(r, (str, Ref))]
    where = _name(path) if scalar else _at(path, values.shape, i)
    raise Malformed(f"{where} = {values.ravel()[i]} is outside [{lo_i}, {hi_i})"
                    + (f" ({'; '.join(notes)})" if notes else ""))


@dataclass(frozen=True)
class Array(Spec):
    """Field ``path`` is a numpy array of ``dtype`` (``"int"``, ``"float"``, ``"bool"``, ``"uint8"``).

    ``shape`` gives each axis a size (a reference) or ``None`` (any size), or is a reference to a
    whole shape tuple; ``low``/``high`` bound every value (inclusive, exclusive; a reference may be
    an array, one bound per value); ``finite``: no NaN or infinity; ``unique``: no value twice;
    ``increasing``: strictly ascending; ``among``: every value is in a collection (a context value,
    or a reference); ``equals``: the values are exactly these (a reference).
    """

    path: str
    dtype: str
    shape: Any = None
    low: Any = None
    high: Any = None
    finite: bool = False
    unique: bool = False
    increasing: bool = False
    among: Any = None
    equals: Any = None

    def check(self, payload, ctx):
        a = _get(payload, self.path)
        where = _name(self.path)
        if not isinstance(a, np.ndarray):
            raise Malformed(f"{where} is a {type(a).__name__}; expected a numpy array of {self.dtype}")
        kinds = _DTYPES[self.dtype]
        if (a.dtype != np.uint8) if kinds is None else (a.dtype.kind not in kinds):
            raise Malformed(f"{where} has dtype {a.dtype}; expected {self.dtype}")
        if self.shape is not None:
            self._check_shape(a, payload, ctx)
        if self.finite and a.size and not np.isfinite(a).all():
            i = int(np.flatnonzero(~np.isfinite(a.ravel()))[0])
            raise Malformed(f"{_at(self.path, a.shape, i)} = {a.ravel()[i]} is not finite")
        _in_range(a, self.path, self.low, self.high, payload, ctx)
        if self.increasing and a.size > 1 and not np.all(a[1:] > a[:-1]):
            i = int(np.flatnonzero(a[1:] <= a[:-1])[0]) + 1
            raise Malformed(f"{_at(self.path, a.shape, i)} = {a[i]} does not exceed the value before it")
        if self.unique and a.size > 1:
            s = np.sort(a.ravel())
            dup = np.flatnonzero(s[1:] == s[:-1])
            if dup.size:
                raise Malformed(f"{where} holds {s[dup[0]]} more than once")
        if self.among is not None:
            out = not_in(a.ravel(), _resolve(self.among, payload, ctx))
            if out.any():
                i = int(np.flatnonzero(out)[0])
                raise Malformed(f"{_at(self.path, a.shape, i)} = {a.ravel()[i]} is not one of {_describe(self.among)}")
        if self.equals is not None:
            want = np.asarray(_resolve(self.equals, payload, ctx))
            diff = (a != want).ravel()  # a reference's array has the field's shape (checked before)
            if diff.any():
                i = int(np.flatnonzero(diff)[0])
                raise Malformed(f"{_at(self.path, a.shape, i)} = {a.ravel()[i]}; the receiver expects "
                                f"{np.ravel(want)[i] if want.ndim else want} ({_describe(self.equals)})")

    def _check_shape(self, a: np.ndarray, payload, ctx) -> None:
        if isinstance(self.shape, tuple):
            sizes = [None if s is None else _resolve(s, payload, ctx) for s in self.shape]
            text = ", ".join("n" if s is None else _describe(r, s) for r, s in zip(self.shape, sizes))
        else:
            sizes = list(_resolve(self.shape, payload, ctx))
            text = f"{_describe(self.shape)} = {tuple(sizes)}"
        if a.ndim != len(sizes) or any(s is not None and d != s for d, s in zip(a.shape, sizes)):
            raise Malformed(f"{_name(self.path)} has shape {a.shape}; expected ({text}{',' if len(sizes) == 1 else ''})")


@dataclass(frozen=True)
class Packed(Spec):
    """Field ``path`` is a 1-D ``uint8`` array packing exactly ``bits`` bits (``np.packbits``)."""

    path: str
    bits: Any

    def check(self, payload, ctx):
        Array(self.path, "uint8", (None,)).check(payload, ctx)
        n = int(_resolve(self.bits, payload, ctx))
        got = len(_get(payload, self.path))
        if got != -(-n // 8):
            raise Malformed(f"{_name(self.path)} has {got} bytes; {_describe(self.bits, n)} bits need {-(-n // 8)}")


@dataclass(frozen=True)
class Ciphers(Spec):
    """Field ``path`` holds gradient-pair ciphertexts under the receiver's key (a list of them with
    ``each``): the receiver's ``backend`` checks their layout and that every ciphertext lies below
    its modulus (:meth:`~ray_vfl.crypto.he.base.Backend.peer_problem`); ``entries`` is the number of
    entries each holds (a reference; with ``each``, one per item); ``compressed=False`` refuses
    compressed arrays."""

    path: str
    entries: Any = None
    compressed: bool | None = None
    each: bool = False

    def check(self, payload, ctx):
        backend, pk = _resolve("backend", payload, ctx), _resolve("public_key", payload, ctx)
        value = _get(payload, self.path)
        items = list(value) if self.each else [value]
        want = None if self.entries is None else np.broadcast_to(_resolve(self.entries, payload, ctx), (len(items),))
        for i, c in enumerate(items):
            where = f"{self.path}[{i}]" if self.each else _name(self.path)
            problem = backend.peer_problem(pk, c, compressed=self.compressed)
            if problem:
                raise Malformed(f"{where} {problem}")
            if want is not None and backend.entry_count(c) != want[i]:
                raise Malformed(f"{where} holds {backend.entry_count(c)} entries; the receiver expects "
                                f"{want[i]} ({_describe(self.entries)})")


@dataclass(frozen=True)
class Rule(Spec):
    """A relation between fields that the specs above cannot state: ``fn(payload, ctx)`` returns
    what is wrong (naming the fields), or ``None``."""

    fn: Callable[[Any, Mapping[str, Any]], str | None]

    def check(self, payload, ctx):
        problem = self.fn(payload, ctx)
        if problem:
            raise Malformed(problem)


@dataclass(frozen=True)
class Schema:
    """What one message kind carries: its specs, checked in order."""

    kind: str
    specs: tuple[Spec, ...]

    def check(self, payload: Any, ctx: Mapping[str, Any], sender: str, receiver: str | None = None) -> None:
        try:
            for spec in self.specs:
                spec.check(payload, ctx)
        except Malformed as bad:
            raise ProtocolError(sender, self.kind, str(bad), receiver) from None


_SCHEMAS: dict[str, Schema] = {}


def register(kind: str, *specs: Spec) -> Schema:
    """Declare what messages of ``kind`` carry (once per kind, where the protocol defines them).

    Example
    -------
    >>> s = register("doc_example", Array("", "int", (None,), low=0, high="n_rows"))
    >>> s.check(np.array([0, 4]), {"n_rows": 4}, sender="bank")
    Traceback (most recent call last):
    ...
    ray_vfl.errors.ProtocolError: party 'bank' sent a malformed 'doc_example': payload[1] = 4 is outside [0, 4) \
(the receiver's n_rows = 4)
    """
    if kind in _SCHEMAS:
        raise VFLError(f"message kind {kind!r} already has a schema")
    _SCHEMAS[kind] = Schema(kind, tuple(specs))
    return _SCHEMAS[kind]


def schema_of(kind: str) -> Schema | None:
    return _SCHEMAS.get(kind)


def registered_kinds() -> list[str]:
    return sorted(_SCHEMAS)


def check_payload(kind: str, payload: Any, sender: str, context: Mapping[str, Any] | None = None,
                  receiver: str | None = None, senders: Collection[str] | None = None) -> None:
    """Check ``payload`` of a ``kind`` message from ``sender`` against the kind's schema.

    Kinds without a schema are not checked (tests' ad-hoc kinds); every kind the library sends has
    one (``tests/test_validation.py`` enforces it). ``senders``: the parties this message may come from.
    """
    if senders is not None and sender not in senders:
        raise ProtocolError(sender, kind, f"the receiver expects this message only from {sorted(senders)}", receiver)
    schema = _SCHEMAS.get(kind)
    if schema is not None:
        schema.check(payload, context or {}, sender, receiver)
