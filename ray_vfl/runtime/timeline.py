"""Where the time goes: intervals each party's process measures, and their sum over a training.

Every party actor records wall-clock intervals (``time.time()``, comparable across processes of one
machine; on a cluster as close as the nodes' clocks) of three kinds:

========  ====================================================================================
kind      measured around
========  ====================================================================================
busy      every protocol method the driver calls on the party's actor (``runtime.actors``)
crypto    the party's encryption, decryption and homomorphic sums, in-process or on its task pool
wire      encoding and sealing a payload in the metered send path; opening, decoding and checking one on receipt
========  ====================================================================================

:func:`breakdown` splits a training's wall time into exclusive shares by sweeping the intervals of
all parties: *crypto* while some party is in crypto; else *wire* while some party (de)serializes;
else *compute* while some party is otherwise busy; else *between calls* -- no party runs a
method: Ray's scheduling and argument transfer of the next call, the driver's own work and the
return of results. Divided by the number of calls, the last share is the overhead per call. Each
party's *waiting* is the wall time minus its own busy time. Peak memory is the party process's
maximum resident set (``getrusage``); tasks of its pool are other processes and not included.

Example
-------
>>> spans = {"bank": [("busy", 0.0, 4.0), ("crypto", 1.0, 3.0)], "shop": [("busy", 5.0, 6.0)]}
>>> b = breakdown(spans, 0.0, 10.0)
>>> b["crypto_s"], b["compute_s"], b["between_calls_s"], b["calls"], b["waiting_s"]
(2.0, 3.0, 5.0, 2, {'bank': 6.0, 'shop': 9.0})
"""

from __future__ import annotations

import functools
from collections import deque
import resource
import sys
import threading
import time
from contextlib import contextmanager, nullcontext
from typing import Any, Callable, Iterator, Mapping, Sequence

__all__ = ["span", "span_if", "busy", "timed", "drain", "peak_rss_mb", "breakdown", "KINDS"]

KINDS = ("crypto", "wire", "busy")  # precedence of the exclusive shares, highest first
# This process's intervals since the last drain. A process nobody drains (a training outside a sweep, a
# pool worker) keeps the latest 200,000 only: a few MB, and appending stays O(1).
_SPANS: deque[tuple[str, float, float]] = deque(maxlen=200_000)


@contextmanager
def span(kind: str) -> Iterator[None]:
    """Record the wall-clock interval of the ``with`` block as one interval of ``kind``."""
    start = time.time()
    try:
        yield
    finally:
        _SPANS.append((kind, start, time.time()))


def span_if(kind: str, on: bool):
    """:func:`span` of ``kind`` when ``on``, else a block that records nothing (plaintext backends)."""
    return span(kind) if on else nullcontext()


_nesting = threading.local()  # busy methods open in this thread: only the outermost call is one interval


@contextmanager
def busy() -> Iterator[None]:
    """A ``busy`` interval around an actor method called by the driver (methods it calls inside
    do not count again; an actor's concurrency groups run in threads of their own)."""
    depth = getattr(_nesting, "depth", 0)
    _nesting.depth = depth + 1
    try:
        if depth:
            yield
        else:
            with span("busy"):
                yield
    finally:
        _nesting.depth = depth


def timed(kind: str, when: Callable[[Any], bool] | None = None) -> Callable:
    """Method decorator: the call is one interval of ``kind`` (if ``when(self)`` holds, when given).

    Example
    -------
    >>> class Party:
    ...     encrypted = True
    ...     @timed("crypto", when=lambda self: self.encrypted)
    ...     def seal(self): return 1
    >>> _ = drain(); Party().seal(), [k for k, _, _ in drain()]
    (1, ['crypto'])
    """
    def wrap(fn: Callable) -> Callable:
        @functools.wraps(fn)
        def method(self, *args, **kwargs):
            with span_if(kind, when is None or when(self)):
                return fn(self, *args, **kwargs)
        return method
    return wrap


def drain() -> list[tuple[str, float, float]]:
    """This process's intervals since the last drain (and forget them)."""
    out = list(_SPANS)
    _SPANS.clear()
    return out


def peak_rss_mb() -> float:
    """This process's peak resident memory so far, in MB."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 1024 ** 2 if sys.platform == "darwin" else peak / 1024  # bytes on macOS, KiB on Linux


def breakdown(spans: Mapping[str, Sequence[tuple[str, float, float]]], start: float, end: float) -> dict[str, Any]:
    """Split the wall time ``[start, end]`` into exclusive shares (see the module docstring).

    ``spans``: party -> its intervals ``(kind, t0, t1)``. Returns seconds per share (``crypto_s``,
    ``wire_s``, ``compute_s``, ``between_calls_s``; they sum to ``end - start``), ``calls`` (busy
    intervals in the window), ``ms_per_call`` (between-calls time per call) and ``waiting_s``
    (party -> wall time minus its busy time).
    """
    events: list[tuple[float, int, int]] = []
    busy = {}
    calls = 0
    for party, items in spans.items():
        own = 0.0
        for kind, t0, t1 in items:
            t0, t1 = max(t0, start), min(t1, end)
            if t1 <= t0 or kind not in KINDS:
                continue
            k = KINDS.index(kind)
            events += [(t0, +1, k), (t1, -1, k)]
            if kind == "busy":
                own += t1 - t0
                calls += 1
        busy[party] = own
    events.sort()
    active = [0] * len(KINDS)
    shares = [0.0] * (len(KINDS) + 1)  # the last one: no party busy
    t = start
    for when, delta, k in events:
        if when > t:
            first = next((i for i, n in enumerate(active) if n > 0), len(KINDS))
            shares[first] += when - t
            t = when
        active[k] += delta
    shares[len(KINDS)] += max(0.0, end - t)
    return {"crypto_s": shares[0], "wire_s": shares[1], "compute_s": shares[2], "between_calls_s": shares[3],
            "calls": calls, "ms_per_call": 1000.0 * shares[3] / calls if calls else float("nan"),
            "waiting_s": {p: max(0.0, (end - start) - b) for p, b in busy.items()}}
