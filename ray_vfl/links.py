"""Fast links from one party's actor to its peers' actors, over Ray compiled graphs.

A tree of SecureBoost is a chain of short rounds between the label party and
each peer; as ordinary actor calls each round costs 1-3 ms of Ray overhead
(task submission, scheduling, the reply through the owner), more than the
work of a plaintext level. A Ray *compiled graph* ("cgraph") from the label
party to one method of a peer keeps a channel open instead: the peer's actor
runs a loop on a background thread that reads a message, calls the method and
writes the reply, in about 0.1-0.5 ms per round trip.

What a link does not change: every message is still built by the sender's
metered :class:`~ray_vfl.comm.Mailbox`, and every failure still ends as a
:class:`~ray_vfl.errors.PartyFailedError` naming the peer (``DataError`` and
``ConfigError`` come back as they are).

What to know about compiled graphs (Ray's own constraints, measured on
Ray 2.60): only the process that compiled a graph can run it; an actor takes
part in one compiled graph at a time, and its loop ends only when the graph is
torn down, so a peer whose linking party died must be restarted
(:meth:`~ray_vfl.runtime.Runtime.link` arranges that); the peer's loop takes
~2 s to start, so links are opened during set-up. When Ray cannot compile a
link, the link falls back to actor calls, and so does ``compiled=False``.
"""

from __future__ import annotations

import logging
import pickle
import time
from typing import Any, Sequence

import ray

from .errors import PartyFailedError
from .runtime import failure_of, gather

__all__ = ["PeerLinks", "owned"]

log = logging.getLogger(__name__)

_CHANNEL_ERRORS = (ray.exceptions.RayChannelError,)


def owned(value: Any) -> Any:
    """A copy of ``value`` that owns its memory.

    A link's messages and replies are read from the channel's shared-memory
    buffers without a copy: an array kept from one (say, the gradient pairs a
    peer sums all tree long) pins its buffer, and once every buffer of the
    channel is pinned the next write waits forever. Measured: the 39th round
    of a 3-party fit hung so. Both ends therefore copy what they receive.

    Example
    -------
    >>> import numpy as np
    >>> a = np.arange(3); b = owned({"x": a}); b["x"] is a, b["x"].tolist()
    (False, [0, 1, 2])
    """
    return pickle.loads(pickle.dumps(value, protocol=5))


class PeerLinks:
    """Links from this actor to method ``method`` of each peer's actor.

    The method must answer the message ``None`` (a ping) with ``None``, and
    keep only :func:`owned` copies of what it receives.

    Example
    -------
    >>> links = PeerLinks({"bank": bank_handle}, "step", compiled=True)  # doctest: +SKIP
    >>> links.gather([links.call("bank", message)], "level 0", timeout_s=60)  # doctest: +SKIP
    """

    def __init__(self, peers: dict[str, Any], method: str, compiled: bool = True, timeout_s: float = 600.0) -> None:
        self.peers = dict(peers)
        self.method = method
        self.timeout_s = timeout_s
        self._graphs: dict[str, Any] = {}
        if compiled:
            self._compile()

    @property
    def compiled(self) -> bool:
        """Whether the rounds run over compiled graphs (else ordinary actor calls)."""
        return bool(self._graphs)

    def same_peers(self, peers: dict[str, Any]) -> bool:
        """Whether ``peers`` are the very actors these links reach."""
        return {p: h._actor_id for p, h in peers.items()} == {p: h._actor_id for p, h in self.peers.items()}

    def _compile(self) -> None:
        from ray.dag import InputNode

        try:
            for party, handle in self.peers.items():
                with InputNode() as message:
                    graph = getattr(handle, self.method).bind(message)
                self._graphs[party] = graph.experimental_compile(_submit_timeout=self.timeout_s)
            # a ping through every link: returns once each peer's loop runs (~2 s the first time)
            pings = [graph.execute(None) for graph in self._graphs.values()]
            for ping in pings:
                ray.get(ping, timeout=self.timeout_s)
        except Exception as exc:  # any Ray that cannot compile: the same rounds as actor calls
            log.warning("compiled links unavailable (%s: %s); using actor calls", type(exc).__name__, exc)
            self.close()

    def call(self, party: str, message: Any) -> tuple[str, Any]:
        """Send ``message`` to ``party``'s method; ``(party, reference to the reply)``."""
        graph = self._graphs.get(party)
        if graph is None:
            return party, getattr(self.peers[party], self.method).remote(message)
        try:
            return party, graph.execute(message)
        except Exception as exc:  # the link is closed: the peer died
            self.close()
            raise self._failure(exc, party, "send", self.timeout_s) from None

    def gather(self, calls: Sequence[tuple[str, Any]], phase: str, timeout_s: float) -> list:
        """The replies of :meth:`call`, in order; the first failure raises (see :func:`~ray_vfl.runtime.gather`).

        Compiled replies are read one after the other within one deadline. A
        failed or silent peer leaves its link unusable: the links are closed,
        and the next set-up opens new ones.
        """
        if not self._graphs:
            return gather(calls, phase, timeout_s)
        deadline = time.monotonic() + timeout_s
        out = []
        for i, (party, ref) in enumerate(calls):
            try:
                out.append(owned(ray.get(ref, timeout=max(deadline - time.monotonic(), 0.0))))
            except Exception as exc:
                error = self._failure(exc, party, phase, timeout_s)
                if isinstance(error, PartyFailedError):
                    self.close()
                else:  # a peer refused bad input: read the other replies so the links stay in step
                    self._drain(calls[i + 1:], deadline)
                raise error from None
        return out

    @staticmethod
    def _failure(exc: Exception, party: str, phase: str, timeout_s: float) -> Exception:
        if isinstance(exc, ray.exceptions.RayChannelTimeoutError):
            return PartyFailedError(party, phase, f"no answer within {timeout_s:g} s")
        if isinstance(exc, _CHANNEL_ERRORS):
            return PartyFailedError(party, phase, f"link closed (actor died): {exc}")
        return failure_of(exc, party, phase, timeout_s)

    @staticmethod
    def _drain(calls: Sequence[tuple[str, Any]], deadline: float) -> None:
        for _, ref in calls:
            try:
                ray.get(ref, timeout=max(deadline - time.monotonic(), 0.0))
            except Exception:  # noqa: BLE001 - the first error is the one reported
                pass

    def close(self) -> None:
        """Tear the compiled graphs down (each peer's loop ends); later calls are actor calls."""
        graphs, self._graphs = self._graphs, {}
        for party, graph in graphs.items():
            try:
                graph.teardown()
            except Exception as exc:  # noqa: BLE001 - a dead peer has nothing left to tear down
                log.debug("tearing down the link to %s: %s", party, exc)
