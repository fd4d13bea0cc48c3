"""Messages between two serving parties: a message for a third party goes to it directly, through the gateways.

In one cluster a protocol's driver hands each message reference from its sender to its receivers
(:mod:`ray_vfl.runtime.calls`). Across organisations the driver is the coordinating party, so a message of
the shop for the mall handed on that way would pass through the bank. Instead, for a role whose start names
its *fellow* parties (PIVODL's clients, :data:`~.roles.ROLE_KINDS`, ``parties_arg``):

* the sender's serving party (:class:`Relay`, its :meth:`~Relay.send_on`), once its role's method has
  returned, delivers every message of the result addressed to a fellow other than the caller straight to
  that fellow's gateway (``deliver``, a method only fellows may call); a message the caller does not
  receive comes back to the caller as a :class:`Posted` record (its sender and digest), never as itself;
* the coordinator's gateway client (:func:`posted_for`) hands a receiver a :class:`Posted` record in
  place of any message of a third party (neither the caller's nor the receiver's own): the receiver takes
  the message it was delivered (:meth:`Relay.take`), so what the coordinator holds of a message for
  others is never what they read;
* each fellow's mailbox key is fetched from that fellow's own gateway (:meth:`Relay.fellow_keys`), whose
  certificate pins the name (:meth:`~.gateway.GatewayClient.call` checks a ``mailbox_key`` answer), never
  from the coordinator.

A delivery is checked at the receiver: the caller's certificate names a fellow of the role, every message
is a :class:`~ray_vfl.runtime.comm.Message` from that fellow and for this party, and at most
:data:`MAX_PENDING` of them wait per role. The receiver's mailbox checks each seal when the role opens it.

Example
-------
>>> note = Message("note", "shop", ("bank", "mall"), 0, 0, b"sealed bytes")
>>> posted_for([note, 2], "bank", "mall") == [Posted("shop", digest(note)), 2]  # the bank hands the mall a token
True
>>> posted_for(note, "bank", "shop") is note  # a party's own message goes back to it as it is
True
"""

from __future__ import annotations

import hashlib
import threading
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from ..comm import Message
from .gateway import Refusal

__all__ = ["Posted", "digest", "posted_for", "Relay", "MAX_PENDING", "DELIVER"]

DELIVER = "deliver"  # the method a fellow calls to hand a role its messages (its serving party answers it)
MAX_PENDING = 4096  # messages waiting per role instance: a fellow cannot fill a party's memory


@dataclass(frozen=True)
class Posted:
    """A message its sender delivered to the receiver directly: the receiver takes it by sender and digest."""

    sender: str
    digest: str


def digest(message: Message) -> str:
    """SHA-256 over a message's header and sealed bytes (the seal's nonce makes each one unique)."""
    h = hashlib.sha256()
    for part in (message.kind, message.sender, "\x1f".join(message.receivers), str(message.tree), str(message.depth)):
        h.update(part.encode() + b"\x00")
    h.update(message.wire)
    return h.hexdigest()


def posted_for(value: Any, caller: str, target: str) -> Any:
    """``value`` as ``caller`` hands it to ``target``: every message of a third party (its sender neither
    ``caller`` nor ``target``) becomes a :class:`Posted` record, however nested."""
    t = type(value)
    if t is Message:
        return value if value.sender in (caller, target) else Posted(value.sender, digest(value))
    if t in (list, tuple):
        return t(posted_for(v, caller, target) for v in value)
    if t is dict:
        return {k: posted_for(v, caller, target) for k, v in value.items()}
    return value


def _messages(value: Any) -> Iterable[Message]:
    t = type(value)
    if t is Message:
        yield value
    elif t in (list, tuple):
        for v in value:
            yield from _messages(v)
    elif t is dict:
        for v in value.values():
            yield from _messages(v)


class Relay:
    """Party ``party``'s end of the messages between fellows: an inbox per role (keyed by the server's
    ``(starter, instance)``) and ``client``, the party's own gateway client, to deliver and fetch keys."""

    def __init__(self, party: str, client: Any = None, max_pending: int = MAX_PENDING) -> None:
        self.party, self.client, self.max_pending = party, client, max_pending
        self._lock = threading.Lock()
        self._inboxes: dict[tuple[str, str], dict[tuple[str, str], list[Message]]] = {}

    def open(self, role: tuple[str, str]) -> None:
        """An empty inbox for a role just started (a restarted role's old messages go)."""
        with self._lock:
            self._inboxes[role] = {}

    def close(self, role: tuple[str, str]) -> None:
        with self._lock:
            self._inboxes.pop(role, None)

    # the receiver ------------------------------------------------------------------------------
    def deliver(self, role: tuple[str, str], sender: str, messages: Any) -> int:
        """Keep ``messages`` (a list) that fellow ``sender`` delivered for ``role``; returns how many."""
        if not isinstance(messages, list) or not all(type(m) is Message for m in messages):
            raise Refusal(f"party {self.party!r}: a delivery is a list of sealed messages")
        for m in messages:
            if m.sender != sender or self.party not in m.receivers:
                raise Refusal(f"party {self.party!r} takes from {sender!r} only its messages for {self.party!r}, "
                              f"got one of {m.sender!r} for {list(m.receivers)}")
        with self._lock:
            inbox = self._inboxes.get(role)
            if inbox is None:
                raise Refusal(f"party {self.party!r} runs no role {role[1]!r} taking messages")
            if sum(map(len, inbox.values())) + len(messages) > self.max_pending:
                raise Refusal(f"party {self.party!r}: more than {self.max_pending} messages wait for role {role[1]!r}")
            for m in messages:
                inbox.setdefault((m.sender, digest(m)), []).append(m)
        return len(messages)

    def take(self, role: tuple[str, str], posted: Posted) -> Message:
        """The message ``posted`` stands for, delivered earlier by its sender (each is taken once)."""
        with self._lock:
            waiting = self._inboxes.get(role, {}).get((posted.sender, posted.digest))
            if not waiting:
                raise Refusal(f"party {self.party!r} was handed a message of {posted.sender!r} that {posted.sender!r} "
                              "never delivered to it")
            message = waiting.pop()
            if not waiting:
                del self._inboxes[role][(posted.sender, posted.digest)]
            return message

    # the sender --------------------------------------------------------------------------------
    def send_on(self, instance: str, caller: str, fellows: Iterable[str], result: Any) -> Any:
        """Deliver this party's messages in ``result`` to the ``fellows`` (not the caller) they address,
        one call per fellow; ``result`` with each message the caller does not receive as :class:`Posted`."""
        fellows = set(fellows) - {caller, self.party}
        batches: dict[str, list[Message]] = {}
        for m in _messages(result):
            if m.sender != self.party:
                continue
            for r in m.receivers:
                if r in fellows:
                    batches.setdefault(r, []).append(m)
        if batches and self.client is None:
            raise Refusal(f"party {self.party!r} has no gateway client to deliver messages to {sorted(batches)}")
        for receiver, messages in batches.items():
            self.client.call(receiver, instance, DELIVER, messages)
        return self._posted(result, caller, fellows)

    def _posted(self, value: Any, caller: str, fellows: set[str]) -> Any:
        """A message of this party delivered to a fellow, the caller not among its receivers, as Posted."""
        t = type(value)
        if t is Message:
            delivered = value.sender == self.party and fellows.intersection(value.receivers)
            return Posted(value.sender, digest(value)) if delivered and caller not in value.receivers else value
        if t in (list, tuple):
            return t(self._posted(v, caller, fellows) for v in value)
        if t is dict:
            return {k: self._posted(v, caller, fellows) for k, v in value.items()}
        return value

    def fellow_keys(self, instance: str, fellows: Iterable[str]) -> Mapping[str, Any]:
        """Each fellow's mailbox key, from its own gateway (the name pinned to its certificate)."""
        keys = {}
        for fellow in sorted(set(fellows) - {self.party}):
            if self.client is None:
                raise Refusal(f"party {self.party!r} has no gateway client to fetch {fellow!r}'s mailbox key")
            name, public = self.client.call(fellow, instance, "mailbox_key")
            keys[name] = public
        return keys
