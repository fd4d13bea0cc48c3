"""The one metered send path between parties, and communication statistics.

Every payload that crosses from one party to another is encoded once by
:meth:`Mailbox.send` (the typed wire of :mod:`ray_vfl.runtime.codec`, never pickle) and sealed
for its receivers (:mod:`ray_vfl.runtime.seal`) into a :class:`Message`: the driver, Ray's object
store and any relay hold ciphertext only. ``send`` records one :class:`Record` per receiver:
tree, depth, sender, receiver, kind, the sealed bytes and the payload's *shape* (types, dtypes
and lengths, never values). :meth:`Mailbox.open` verifies the seal (which proves the sender),
decodes and checks the payload against its kind's schema. :class:`CommStats` aggregates the
records per channel and per kind; privacy tests read the same records to audit what each party
received.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any, Collection, Iterable, Mapping

from ..errors import ProtocolError, VFLError
from .codec import MAGIC, decode, encode
from .payload_shapes import describe
from .seal import CALLER, PUBLIC_KEY_BYTES, Seal, sealed_size
from .timeline import span
from .validation import check_payload

__all__ = ["Message", "Record", "Mailbox", "CommStats", "payload_nbytes"]


@dataclass(frozen=True)
class Message:
    """A typed payload in flight from ``sender`` to ``receivers``, encoded and sealed once.

    ``wire`` is the payload encoded (:func:`ray_vfl.runtime.codec.encode`) and sealed for the
    receivers (:class:`ray_vfl.runtime.seal.Seal`): the bytes that are metered and the bytes
    Ray ships, readable by the receivers only. The header fields travel in the clear for routing
    and metering, and the seal authenticates every one of them: ``sender`` is a claim that only
    the sender's seal makes true (:meth:`Mailbox.open` checks it). Handing Ray the payload
    itself (numpy arrays in dataclasses) made it serialize every array on its own: a plaintext
    tree's round trips took 3.5 ms each instead of 2.9 ms (``benchmarks/round_trips.py``).
    """

    kind: str
    sender: str
    receivers: tuple[str, ...]
    tree: int
    depth: int
    wire: bytes


@dataclass(frozen=True)
class Record:
    """What the send path saw of one message to one receiver."""

    tree: int
    depth: int
    sender: str
    receiver: str
    kind: str
    nbytes: int
    shape: Any


def payload_nbytes(payload: Any, receivers: int = 1) -> int:
    """Size of ``payload`` as it travels to ``receivers`` parties (a sealed :attr:`Message.wire`), in bytes."""
    return sealed_size(len(encode(payload)), receivers)


class Mailbox:
    """A party's end of the network: sends through the one metered path, opens what is sealed for it.

    The party's key pair is made in its own process (:mod:`ray_vfl.runtime.seal`); at set-up the
    driver hands each mailbox the other parties' public keys (:meth:`trust`, through
    :meth:`ray_vfl.runtime.actors.Runtime.introduce`). Mailboxes of one process know each other.

    Example
    -------
    >>> import numpy as np
    >>> box, shop = Mailbox("bank"), Mailbox("shop")
    >>> msg = box.send("hello", ["shop"], np.zeros(3), tree=0)
    >>> box.records[0].receiver, box.records[0].kind, box.records[0].shape, box.records[0].nbytes
    ('shop', 'hello', ('ndarray', 'float64', (3,)), 92)
    >>> shop.open(msg, "hello").shape
    (3,)
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self.records: list[Record] = []
        self.seal = Seal(name)
        self.sealed = True

    @property
    def public_key(self) -> bytes:
        """This party's public key (32 bytes), which the driver hands to the other parties."""
        return self.seal.public_key

    def trust(self, keys: Mapping[str, bytes], sealed: bool = True) -> None:
        """Take the other parties' public keys (party -> key) from the driver, at set-up.

        ``sealed=False`` sends every message unsealed and opens only unsealed ones: it exists for
        one purpose, to measure what sealing costs (``benchmarks/wire.py``); no estimator or
        protocol option reaches it.
        """
        self.seal.trust(keys)
        self.sealed = bool(sealed)

    def send(self, kind: str, receivers: Iterable[str], payload: Any, tree: int = -1, depth: int = -1) -> Message:
        receivers = tuple(receivers)
        for receiver in receivers:
            if receiver == self.name:
                raise VFLError(f"party {self.name!r} tried to send {kind!r} to itself")
        with span("wire"):
            plain = encode(payload)
            wire = self.seal.seal(kind, receivers, tree, depth, plain) if self.sealed else plain
            shape = describe(payload)
        for receiver in receivers:
            self.records.append(Record(tree, depth, self.name, receiver, kind, len(wire), shape))
        return Message(kind, self.name, receivers, tree, depth, wire)

    def send_to_caller(self, kind: str, caller_key: bytes, payload: Any) -> Message:
        """A result for whoever called the protocol (predictions), sealed to the key ``caller_key`` it
        made for this call (:data:`ray_vfl.runtime.seal.CALLER`): metered like any message, readable by
        the caller alone. The caller opens it with a :class:`CallerBox`."""
        if not isinstance(caller_key, bytes) or len(caller_key) != PUBLIC_KEY_BYTES:
            raise VFLError(f"party {self.name!r} was handed a caller key that is not {PUBLIC_KEY_BYTES} bytes")
        with span("wire"):
            plain = encode(payload)
            wire = self.seal.seal(kind, (CALLER,), -1, -1, plain, {CALLER: caller_key}) if self.sealed else plain
            shape = describe(payload)
        self.records.append(Record(-1, -1, self.name, CALLER, kind, len(wire), shape))
        return Message(kind, self.name, (CALLER,), -1, -1, wire)

    def open(self, message: Message, kind: str, context: Mapping[str, Any] | None = None,
             senders: Collection[str] | None = None) -> Any:
        """Unwrap a message addressed to this party, checking its seal, its kind and its payload.

        The seal must prove that the message comes from the sender it names, for this party, and
        was not opened before (:meth:`ray_vfl.runtime.seal.Seal.unseal`); the payload must decode
        as the typed wire (:func:`ray_vfl.runtime.codec.decode`: no pickle) and fit the schema of
        ``kind`` (:mod:`ray_vfl.runtime.validation`) with this party's ``context`` (the sizes of
        its tables, its key) before anyone uses it. Anything else raises
        :class:`~ray_vfl.errors.ProtocolError` naming the sender, the kind and what is wrong.
        ``senders``: the parties it may come from. Arrays of the payload are read-only.
        """
        if not isinstance(message, Message):
            raise VFLError(f"party {self.name!r} expected a {kind!r} message, got {type(message).__name__}")
        if self.name not in message.receivers or message.kind != kind:
            raise VFLError(
                f"party {self.name!r} expected a {kind!r} message for itself, got {message.kind!r} for {message.receivers}"
            )
        with span("wire"):
            if senders is not None and message.sender not in senders:  # before any work on its bytes
                raise ProtocolError(message.sender, kind, f"the receiver expects this message only from "
                                    f"{sorted(senders)}", self.name)
            wire = message.wire
            if self.sealed or not (isinstance(wire, bytes) and wire.startswith(MAGIC)):
                wire = self.seal.unseal(kind, message.sender, message.receivers, message.tree, message.depth, wire)
            payload = decode(wire, message.sender, kind, self.name)
            check_payload(kind, payload, message.sender, context, self.name, senders)
        return payload

    def drain(self) -> list[Record]:
        records, self.records = self.records, []
        return records


class CallerBox(Mailbox):
    """The caller's end of one call's result (predictions): a key pair made in the caller's process for
    this call only, and the parties' public keys to prove which one sealed the result.

    Example
    -------
    >>> import numpy as np
    >>> bank = Mailbox("bank")
    >>> box = CallerBox({"bank": bank.public_key})
    >>> msg = bank.send_to_caller("result", box.public_key, np.arange(3.0))
    >>> box.open(msg, "result", senders=["bank"]).tolist(), bank.records[0].receiver
    ([0.0, 1.0, 2.0], 'caller')
    """

    def __init__(self, keys: Mapping[str, bytes], sealed: bool = True) -> None:
        self.name = CALLER
        self.records = []
        self.seal = Seal(CALLER, ephemeral=True)
        self.seal.trust(keys)
        self.sealed = bool(sealed)


class CommStats:
    """Bytes exchanged, per channel (sender -> receiver) and per message kind.

    The bytes are the sealed messages' (:attr:`Message.wire`): the encoded payload plus the seal,
    36 bytes, and 48 per receiver if there are several (:func:`ray_vfl.runtime.seal.sealed_size`). A
    message to several receivers counts once for each.

    Example
    -------
    >>> stats = CommStats([Record(0, 0, "a", "b", "gh", 2_000_000, None)])
    >>> stats.total_mb, stats.by_channel()
    (2.0, {'a -> b': 2.0})
    """

    def __init__(self, records: Iterable[Record] = ()) -> None:
        self.records: list[Record] = list(records)

    def extend(self, records: Iterable[Record]) -> None:
        self.records.extend(records)

    @property
    def total_bytes(self) -> int:
        return sum(r.nbytes for r in self.records)

    @property
    def total_mb(self) -> float:
        return self.total_bytes / 1e6

    @property
    def n_messages(self) -> int:
        return len(self.records)

    def _group(self, key) -> dict[str, float]:
        out: dict[str, float] = defaultdict(float)
        for r in self.records:
            out[key(r)] += r.nbytes / 1e6
        return dict(sorted(out.items()))

    def by_channel(self) -> dict[str, float]:
        """MB per ``"sender -> receiver"``."""
        return self._group(lambda r: f"{r.sender} -> {r.receiver}")

    def by_kind(self) -> dict[str, float]:
        """MB per message kind."""
        return self._group(lambda r: r.kind)

    def received_by(self, party: str) -> list[Record]:
        """Every record addressed to ``party`` (for privacy audits)."""
        return [r for r in self.records if r.receiver == party]

    def to_dict(self) -> dict[str, Any]:
        return {
            "total_mb": self.total_mb,
            "messages": self.n_messages,
            "mb_by_channel": self.by_channel(),
            "mb_by_kind": self.by_kind(),
        }

    def __repr__(self) -> str:
        lines = [f"CommStats({self.total_mb:.3f} MB in {self.n_messages} messages)"]
        lines += [f"  {k}: {v:.3f} MB" for k, v in self.by_channel().items()]
        return "\n".join(lines)
