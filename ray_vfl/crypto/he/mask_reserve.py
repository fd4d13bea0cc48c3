"""Encryption randomness made while a party would otherwise wait.

An encryption is almost all randomness: ``r^n mod n^2`` for Paillier,
``H^r mod n`` for OU; the message part is one multiplication. A
:class:`MaskReserve` is a second actor of the same party, on the party's own
nodes, holding the party's key. It makes masks in chunks at the lowest OS
priority (Linux ``SCHED_IDLE``), so it takes mostly CPU time the protocol leaves idle (while the
passive parties sum ciphertexts, during network round trips; next to a busy Ray worker it still
gets about 8% of the core, so masks nobody uses are not free: the label party stops ordering at its
last tree). Only the label party keeps one: a passive party's few hundred re-randomisations per
level cost less than a reserve's orders and idle process. The party's
:class:`MaskSupply` hands out the chunks that are ready, each exactly once,
and orders new ones; whatever is not ready is drawn fresh at encryption time,
so a slow reserve never stalls the protocol.

Masks never leave the party: they travel only between the party's own actor,
its reserve and its own crypto tasks (object references on the party's nodes).
"""

from __future__ import annotations

import logging
import os
from collections import deque
from typing import Any

import ray

from . import get_backend

__all__ = ["MaskReserve", "MaskSupply"]

log = logging.getLogger(__name__)


def _lowest_priority() -> None:
    """Run this process almost only on CPU time nothing else wants.

    Ray already runs its workers at nice 15, so ``nice 19`` alone would still
    take about 30% of a core from a busy party. Linux's ``SCHED_IDLE`` policy
    takes 8% of a core shared with a busy nice-15 worker (measured; CFS weights
    3 and 36) and all of an idle one. Elsewhere, fall back to ``nice 19``.
    """
    try:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
        return
    except (AttributeError, OSError):
        log.debug("SCHED_IDLE unavailable; using nice 19")
    try:
        os.nice(19)
    except OSError:  # pragma: no cover - some sandboxes forbid it
        log.debug("could not lower the mask reserve's priority")


class MaskReserve:
    """Makes one party's encryption masks, chunk by chunk, at the lowest OS priority.

    Its constructor lowers the priority of the whole process, so it runs as
    its own actor, never in a process that does anything else.

    :meth:`drop` runs in its own thread, at once, even while a chunk is being
    made: Ray 2.60 reports a queued actor task as cancelled by ``ray.cancel``
    but still runs it (measured), so the chunks ordered before a drop return
    ``None`` without making anything instead (credit, 4-party OU: about 14,000
    masks, 0.8 s of CPU, were made for nothing during the last tree).

    Example
    -------
    >>> reserve = runtime.spawn_helper("bank", "masks", MaskReserve)          # doctest: +SKIP
    >>> reserve.set_key.remote(("paillier", {}), secret_key)                 # doctest: +SKIP
    >>> len(ray.get(reserve.make.remote(4)))                                 # doctest: +SKIP
    4
    """

    name = "mask reserve"
    ray_options = {"concurrency_groups": {"control": 1}}  # drop() beside make()

    def __init__(self) -> None:
        _lowest_priority()  # Ray's task threads, started after this, inherit it (measured for both groups)
        self.backend = None
        self.key = None
        self.dropped_below = 0

    def reset(self) -> None:
        self.backend, self.key = None, None
        self.dropped_below = 0

    def set_key(self, spec: tuple, key: Any) -> None:
        """The backend and the key to make masks for (the owner's private key makes them faster)."""
        self.backend = get_backend(spec[0], **spec[1])
        self.key = key
        self.backend.prepare(key, encrypt=False)

    def make(self, count: int, epoch: int = 0):
        """``count`` fresh masks (a :class:`~ray_vfl.crypto.he.base.CipherArray` tagged ``"mask"``), or
        ``None`` when the order's ``epoch`` was dropped."""
        if epoch < self.dropped_below:
            return None
        return self.backend.make_masks(self.key, count)

    @ray.method(concurrency_group="control")
    def drop(self, epoch: int) -> None:
        """Make nothing for the orders of epochs below ``epoch`` that have not started."""
        self.dropped_below = max(self.dropped_below, epoch)


class MaskSupply:
    """The party's side of its reserve: a queue of ordered chunks, each handed out once.

    ``take(n)`` returns references to the longest run of chunks already made
    (covering at most ``n`` values) and how many values they cover; ``order(n)``
    asks the reserve for enough chunks to cover ``n`` more values.
    """

    def __init__(self, reserve, chunk: int = 2048) -> None:
        self.reserve = reserve
        self.chunk = chunk
        self.epoch = 0  # orders of earlier epochs were dropped
        self.pending: deque[tuple[Any, int]] = deque()  # (ref, size), in the order the reserve makes them

    @property
    def ordered(self) -> int:
        return sum(size for _, size in self.pending)

    def order(self, count: int) -> None:
        """Top the queue up to ``count`` values."""
        missing = count - self.ordered
        while missing > 0:
            size = min(self.chunk, missing)
            self.pending.append((self.reserve.make.remote(size, self.epoch), size))
            missing -= size

    def drop(self) -> None:
        """Forget every chunk not handed out; the reserve makes none of those it has not started."""
        if self.pending:
            self.epoch += 1
            self.reserve.drop.remote(self.epoch)
        self.pending.clear()

    def take(self, count: int) -> tuple[list[tuple[Any, int]], int]:
        """Chunks already made, in order, covering at most ``count`` values; ``(chunks, values)``."""
        if not self.pending:
            return [], 0
        refs = [ref for ref, _ in self.pending]
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=0, fetch_local=False)
        ready = set(ready)
        out, covered = [], 0
        while self.pending and self.pending[0][0] in ready and covered + self.pending[0][1] <= count:
            ref, size = self.pending.popleft()
            out.append((ref, size))
            covered += size
        return out, covered
