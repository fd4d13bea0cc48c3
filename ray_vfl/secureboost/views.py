"""What a SecureBoost party saw in a run: its mailbox's traffic, recorded inside its own actor.

A simulation's audit tool (tests, :mod:`ray_vfl.secureboost.attack`), never part of training: with
:class:`RecordViews` among a fit's callbacks, every party's actor keeps each payload its mailbox opens
(``"in"``) and each payload it sends (``"out"``) from the first tree on (the active party also
each level's bin sums of every passive party as it decrypted them, ``"dec"``), and :func:`recorded_view`
hands them to whoever asks, the driver included. The set-up messages come before the first tree: the
public key a passive party opened and the layouts the active party opened are read from the actors'
state instead (the very values they opened).

:func:`node_rows` replays a party's ``level_step`` and ``partition`` messages, received and sent, with
the rule both sides follow (:class:`ray_vfl.secureboost.levels.RowLevels`): the rows of every node a
party knows the instance space of. It is what both attacks of :mod:`.attack` start from.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from ..trees.callbacks import TrainingCallback
from .levels import RowLevels, unpack_partition

__all__ = ["Event", "PartyView", "RecordViews", "recorded_view", "node_rows"]


@dataclass(frozen=True)
class Event:
    """One payload a party received (``way="in"``, from ``peer``) or sent (``"out"``, to ``peer``)."""

    way: str
    peer: str
    kind: str
    tree: int
    depth: int
    payload: Any


@dataclass
class PartyView:
    """A party's recorded view: its events in the order they happened, and what it opened at set-up."""

    party: str
    events: list[Event] = field(default_factory=list)
    public_key: Any = None  # a passive party's: the active party's key
    layouts: dict = field(default_factory=dict)  # the active party's: each passive party's histogram layout

    def of_kind(self, kind: str, way: str | None = None) -> list[Event]:
        return [e for e in self.events if e.kind == kind and (way is None or e.way == way)]


def _keep(actor) -> None:
    """Inside a party's actor: wrap its mailbox so that every payload opened or sent is kept."""
    kept: list = []
    actor._kept_views = kept
    box = actor.mailbox
    opens, sends = box.open, box.send

    def opened(message, kind, *args, **kwargs):
        payload = opens(message, kind, *args, **kwargs)
        kept.append(Event("in", message.sender, kind, message.tree, message.depth, payload))
        return payload

    def sent(kind, receivers, payload, tree=-1, depth=-1):
        receivers = tuple(receivers)
        kept.append(Event("out", ",".join(receivers), kind, tree, depth, payload))
        return sends(kind, receivers, payload, tree, depth)

    box.open, box.send = opened, sent
    if hasattr(actor, "_peer_level"):  # the active party: what it decrypts of each passive party's histograms
        peer_level = actor._peer_level

        def decrypted(sender, *args, **kwargs):
            level = peer_level(sender, *args, **kwargs)
            kept.append(Event("dec", sender, "decrypted_histograms", actor.tree, -1,
                              {n: (np.array(g), np.array(h)) for n, (g, h) in level.items()}))
            return level

        actor._peer_level = decrypted


def _collect(actor) -> PartyView:
    return PartyView(actor.name, list(getattr(actor, "_kept_views", [])), getattr(actor, "public_key", None),
                     dict(getattr(actor, "layouts", {})))


class RecordViews(TrainingCallback):
    """A training callback: from the first tree on, every party's actor keeps what it opens and sends.

    Example
    -------
    >>> recorder = RecordViews(runtime, data.party_names)            # doctest: +SKIP
    >>> model = train(runtime, data, config, callbacks=[recorder])   # doctest: +SKIP
    >>> view = recorded_view(runtime, "party1")                      # doctest: +SKIP
    """

    def __init__(self, runtime, parties: Sequence[str]) -> None:
        self.runtime, self.parties = runtime, list(parties)

    def before_training(self, config: Any) -> None:
        rt = self.runtime
        rt.get([(p, rt.actor(p).__ray_call__.remote(_keep)) for p in self.parties], "record views")


def recorded_view(runtime, party: str) -> PartyView:
    """What ``party`` opened and sent since :class:`RecordViews` started recording (this fit)."""
    return runtime.get([(party, runtime.actor(party).__ray_call__.remote(_collect))], "recorded view")[0]


def node_rows(view: PartyView, n_rows: int) -> dict[int, dict[int, np.ndarray]]:
    """Per tree, the rows of every node whose instance space the party learned: ``{tree: {node: rows}}``.

    Replays the ``level_step`` and ``partition`` payloads of ``view`` (received or sent: a passive
    party receives the steps and sends its partitions, the active party the other way round) level by
    level, as :meth:`ray_vfl.secureboost.passive.PassiveParty.next_level` does.
    """
    out: dict[int, dict[int, np.ndarray]] = {}
    levels: RowLevels | None = None
    lefts: dict[int, np.ndarray] = {}
    pending: tuple | None = None  # (tree, depth, children) of a step that advances, once its level is complete

    def close() -> None:
        nonlocal pending, lefts
        if pending is not None:
            levels.advance(pending[2], lefts)
            out[pending[0]].update({int(n): levels.rows_of(int(n)) for n in levels.open.tolist()})
            pending, lefts = None, {}

    for e in view.events:
        if e.kind not in ("level_step", "partition", "encrypted_gh"):
            continue
        if pending is not None and (e.tree, e.depth) != pending[:2]:
            close()
        if e.kind == "encrypted_gh":  # a new tree: every row at the root
            levels, lefts = RowLevels(n_rows), {}
            out[e.tree] = {0: np.arange(n_rows)}
            continue
        if e.tree not in out:
            levels, lefts = RowLevels(n_rows), {}
            out[e.tree] = {0: np.arange(n_rows)}
        if e.kind == "partition":
            lefts.update(unpack_partition(e.payload))
            continue
        step = e.payload
        lefts.update(unpack_partition(step.partition))
        if step.advance:
            pending = (e.tree, e.depth, np.asarray(step.children))
    close()
    return out
