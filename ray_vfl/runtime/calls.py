"""The driver's side of a protocol's rounds: calls that hand back one reference per message.

A round calls one method on several parties; each returns a small status first and then one
``ObjectRef`` per message it sends. The driver waits on the statuses only (a failed party is named
at once, :meth:`~ray_vfl.runtime.actors.Runtime.get`) and passes the message references on to their
receivers unopened. Small messages come back inline to the driver, which owns the references, and
larger ones sit in Ray's object store; either way they are sealed for their receivers
(:mod:`ray_vfl.runtime.seal`), so the driver and the store hold ciphertext only.

Example
-------
>>> calls = Calls(runtime, ["party0", "party1"], timeout_s=60)                      # doctest: +SKIP
>>> sent = calls.each("propose", calls.order, lambda p: (tree,), 1, "proposals")   # doctest: +SKIP
>>> calls.value("choose", ["party0"], lambda p: (calls.to(p, sent, lambda s, r: 0),), "choice")  # doctest: +SKIP
"""

from __future__ import annotations

from typing import Callable, Sequence

from .actors import Runtime, as_ref_list
from .waiting import settle

__all__ = ["Calls"]


class Calls:
    """Rounds of actor calls on ``runtime``'s parties (``order``: the federation's parties, in order)."""

    def __init__(self, runtime: Runtime, order: Sequence[str], timeout_s: float) -> None:
        self.runtime, self.order, self.timeout_s = runtime, list(order), timeout_s

    def each(self, method: str, parties: Sequence[str], args_of: Callable, n_messages: int, phase: str) -> dict[str, list]:
        """Call ``method(*args_of(p))`` on every party, expecting a status and ``n_messages`` message
        references back; wait for every status; return each party's message references."""
        out, statuses = {}, []
        for p in parties:
            refs = as_ref_list(getattr(self.runtime.actor(p), method).options(num_returns=1 + n_messages)
                               .remote(*args_of(p)), 1 + n_messages)
            statuses.append((p, refs[0]))
            out[p] = refs[1:]
        try:
            self.runtime.get(statuses, phase, self.timeout_s)
        except BaseException:  # no receiver will read the messages now: nothing of them for Ray to report
            settle([ref for refs in out.values() for ref in refs])
            raise
        return out

    def value(self, method: str, parties: Sequence[str], args_of: Callable, phase: str) -> list:
        """Call a method that returns a plain value (statuses, counts, structure) on every party."""
        calls = [(p, getattr(self.runtime.actor(p), method).remote(*args_of(p))) for p in parties]
        return self.runtime.get(calls, phase, self.timeout_s)

    def to(self, receiver: str, sent: dict[str, list], index_of: Callable) -> list:
        """The references every other party sent ``receiver`` (``index_of(sender, receiver)`` picks one)."""
        return [sent[p][index_of(p, receiver)] for p in self.order if p != receiver]
