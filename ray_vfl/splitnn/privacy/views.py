"""What a split-NN party saw in a run: every payload its mailbox opened and sent, kept inside its own actor.

A simulation's audit tool (the view tests, :mod:`ray_vfl.splitnn.unaligned_attack`), never part of
training: :func:`keep_views` wraps a party actor's mailbox so that each payload it opens (``"in"``) and
each it sends (``"out"``) is kept with its kind and batch number, and, for a FedHSSL party, each vector
of its local upper layers and heads it secret-shares (``"own"``: what it computed itself, never sent
as it is). :func:`recorded_events` hands them to whoever asks, the driver included.
:func:`ray_vfl.splitnn.unaligned_protocol.train_unaligned` starts the recording with
``record_views=True``, after the actors are introduced and before the first message; a party's next
fit (its actor reset with a fresh mailbox) records nothing, and reads as nothing, unless asked again.

Example
-------
>>> from ray_vfl.runtime.comm import Mailbox
>>> class Party:
...     mailbox = Mailbox("shop")
>>> party, bank = Party(), Mailbox("bank")
>>> keep_views(party)
>>> _ = party.mailbox.send("hello", ["bank"], np.zeros(2), tree=3)
>>> [(e.way, e.peer, e.kind, e.tree) for e in _collect(party).events]
[('out', 'bank', 'hello', 3)]
>>> party.mailbox = Mailbox("shop")   # what a reset for the next fit does
>>> _collect(party).events
[]
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["Event", "PartyLog", "keep_views", "recorded_events"]


@dataclass(frozen=True)
class Event:
    """One payload a party opened (``way="in"``, from ``peer``), sent (``"out"``, to ``peer``) or
    computed itself and shared (``"own"``)."""

    way: str
    peer: str
    kind: str
    tree: int
    payload: Any


@dataclass
class PartyLog:
    """A party's recorded view: its events in the order they happened."""

    party: str
    events: list[Event] = field(default_factory=list)

    def of_kind(self, kind: str, way: str | None = None) -> list[Event]:
        return [e for e in self.events if e.kind == kind and (way is None or e.way == way)]


def keep_views(actor: Any) -> None:
    """Inside a party's actor: wrap its mailbox so that every payload opened or sent is kept (and a
    FedHSSL party's shared vectors as it computes them)."""
    kept: list[Event] = []
    box = actor.mailbox
    actor._kept_events, actor._kept_box = kept, box
    opens, sends = box.open, box.send

    def opened(message, kind, *args, **kwargs):
        payload = opens(message, kind, *args, **kwargs)
        kept.append(Event("in", message.sender, kind, message.tree, _copy(payload)))
        return payload

    def sent(kind, receivers, payload, tree=-1, depth=-1):
        receivers = tuple(receivers)
        kept.append(Event("out", ",".join(receivers), kind, tree, _copy(payload)))
        return sends(kind, receivers, payload, tree, depth)

    box.open, box.send = opened, sent
    if hasattr(actor, "_masked_share"):  # FedHSSL: the vector a party masks for each secure sum, before the masks
        masked = type(actor)._masked_share.__get__(actor)  # the class's own: a second recording does not stack

        def share(nonce: bytes) -> np.ndarray:
            if actor.mailbox is box:  # this fit's (a reset makes a new mailbox)
                kept.append(Event("own", actor.name, "hssl_shared_vector", -1, actor._shared_vector().copy()))
            return masked(nonce)

        actor._masked_share = share


def _copy(payload: Any) -> Any:
    return np.array(payload) if isinstance(payload, np.ndarray) else payload


def _collect(actor: Any) -> PartyLog:
    recording = getattr(actor, "_kept_box", None) is actor.mailbox  # else a later fit reset the actor: nothing kept
    return PartyLog(getattr(actor, "name", actor.mailbox.name), list(actor._kept_events) if recording else [])


def recorded_events(runtime: Any, party: str) -> PartyLog:
    """What ``party`` opened, sent and shared since :func:`keep_views` started recording (this fit)."""
    return runtime.get([(party, runtime.actor(party).__ray_call__.remote(_collect))], "recorded view")[0]
