"""The one metered send path between parties, and communication statistics.

Every payload that crosses from one party to another is serialized once by
:meth:`Mailbox.send` into a :class:`Message` (pickle protocol 5, in band: the
bytes counted are the bytes that travel), and ``send`` records one
:class:`Record` per receiver: tree, depth, sender, receiver, kind, bytes and
the payload's *shape* (types, dtypes and lengths, never values).
:class:`CommStats` aggregates the records per channel and per kind; privacy
tests read the same records to audit what each party received.
"""

from __future__ import annotations

import pickle
from collections import defaultdict
from dataclasses import dataclass
from typing import Any, Collection, Iterable, Mapping

from ..errors import VFLError
from .payload_shapes import describe
from .timeline import span
from .validation import check_payload, unpickle_payload

__all__ = ["Message", "Record", "Mailbox", "CommStats", "payload_nbytes"]


@dataclass(frozen=True)
class Message:
    """A typed payload in flight from ``sender`` to ``receivers``, serialized once.

    ``wire`` is the payload pickled in band (protocol 5), the bytes that are
    metered and the bytes Ray ships. Handing Ray the payload itself (numpy
    arrays in dataclasses) made it serialize every array on its own: a
    plaintext tree's round trips took 3.5 ms each instead of 2.9 ms
    (``benchmarks/round_trips.py``). Unpickling a peer's bytes trusts the
    peer's code exactly as far as Ray's own argument passing already does
    (both are pickle): the parties are semi-honest, as in SecureBoost.
    """

    kind: str
    sender: str
    receivers: tuple[str, ...]
    tree: int
    depth: int
    wire: bytes

    @property
    def payload(self) -> Any:
        """The payload, deserialized (a new copy at each access)."""
        return pickle.loads(self.wire)


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


def _wire(payload: Any) -> bytes:
    """``payload`` as it travels (a :attr:`Message.wire`)."""
    return pickle.dumps(payload, protocol=5)


def payload_nbytes(payload: Any) -> int:
    """Size of ``payload`` as serialized for transport (a :attr:`Message.wire`), in bytes."""
    return len(_wire(payload))


class Mailbox:
    """A party's end of the network: sends through the one metered path.

    Example
    -------
    >>> import numpy as np
    >>> box = Mailbox("bank")
    >>> msg = box.send("hello", ["shop"], np.zeros(3), tree=0)
    >>> box.records[0].receiver, box.records[0].kind, box.records[0].shape
    ('shop', 'hello', ('ndarray', 'float64', (3,)))
    >>> Mailbox("shop").open(msg, "hello").shape
    (3,)
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self.records: list[Record] = []

    def send(self, kind: str, receivers: Iterable[str], payload: Any, tree: int = -1, depth: int = -1) -> Message:
        receivers = tuple(receivers)
        with span("wire"):
            wire = _wire(payload)
            shape = describe(payload)
        for receiver in receivers:
            if receiver == self.name:
                raise VFLError(f"party {self.name!r} tried to send {kind!r} to itself")
            self.records.append(Record(tree, depth, self.name, receiver, kind, len(wire), shape))
        return Message(kind, self.name, receivers, tree, depth, wire)

    def open(self, message: Message, kind: str, context: Mapping[str, Any] | None = None,
             senders: Collection[str] | None = None) -> Any:
        """Unwrap a message addressed to this party, checking its kind and its payload.

        The payload is checked against the schema of ``kind``
        (:mod:`ray_vfl.runtime.validation`) with this party's ``context``
        (the sizes of its tables, its key) before anyone uses it; a malformed
        one raises :class:`~ray_vfl.errors.ProtocolError` naming the sender,
        the kind and the field. ``senders``: the parties it may come from.
        """
        if not isinstance(message, Message):
            raise VFLError(f"party {self.name!r} expected a {kind!r} message, got {type(message).__name__}")
        if self.name not in message.receivers or message.kind != kind:
            raise VFLError(
                f"party {self.name!r} expected a {kind!r} message for itself, got {message.kind!r} for {message.receivers}"
            )
        with span("wire"):
            payload = unpickle_payload(message.wire, message.sender, kind, self.name)
            check_payload(kind, payload, message.sender, context, self.name, senders)
        return payload

    def drain(self) -> list[Record]:
        records, self.records = self.records, []
        return records


class CommStats:
    """Bytes exchanged, per channel (sender -> receiver) and per message kind.

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
