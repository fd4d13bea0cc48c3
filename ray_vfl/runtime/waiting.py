"""Waiting for party calls: the first failure raises at once, naming the party, and the calls
nobody will fetch after it are settled so that Ray has nothing left to report.

:func:`gather` is how the driver (through :meth:`~ray_vfl.runtime.actors.Runtime.get`) and a party
actor waiting for its peers wait; :func:`settle` marks the rest of a failed wait as handled.
"""

from __future__ import annotations

import logging
import re
import time
from typing import Any, Callable, Sequence

import ray

from ..errors import ConfigError, DataError, PartyFailedError, VFLError

__all__ = ["gather", "settle"]

log = logging.getLogger(__name__)

_POLL_S = 0.25  # how often a waiting driver checks for failed parties


def settle(refs: Sequence[Any]) -> None:
    """Mark the calls of a failed wait as handled, so that Ray has nothing left to report on them.

    A wait that fails fast leaves the other calls of its batch unfetched: a peer's copy of the
    same error, a call that fails once its actor is killed, a message no receiver will read. Ray
    logs every error object dropped unfetched as "Unhandled error" with its remote traceback, 15-40
    lines on stderr after the one error the runtime has already raised. Each ref here gets a
    completion callback (``ObjectRef.future()``), which Ray counts as a fetch whether the result is
    there already or arrives later; nothing waits. Only the batch of the failed wait is settled: an
    unfetched error anywhere else is still reported.

    Example
    -------
    >>> settle([])
    """
    for ref in refs:
        try:
            ref.future()
        except Exception:  # a ref of a Ray that is shutting down: nothing left to report either
            log.debug("could not settle %s", ref)


def gather(calls: Sequence[tuple[str, Any]], phase: str, timeout_s: float, party_of_actor: Callable | None = None) -> list[Any]:
    """Values of ``(party, ObjectRef)`` pairs, in order; the first failure raises at once.

    Used by the driver (through :meth:`~ray_vfl.runtime.actors.Runtime.get`) and by a party actor that
    waits for its peers: an exception in a party, a dead actor or no answer
    within ``timeout_s`` raises :class:`PartyFailedError` naming the party
    and ``phase``; ``DataError`` and ``ConfigError`` raised in a party come
    back as they are.

    Example
    -------
    >>> gather([], "nothing to wait for", 1.0)
    []
    """
    try:
        return _gather(calls, phase, timeout_s, party_of_actor)
    except BaseException:  # a failed party, a timeout, Ctrl-C: the batch's other calls are fetched by nobody now
        settle([ref for _, ref in calls])
        raise


def _gather(calls: Sequence[tuple[str, Any]], phase: str, timeout_s: float, party_of_actor: Callable | None) -> list[Any]:
    deadline = time.monotonic() + timeout_s
    if len(calls) == 1:  # the common case inside a protocol round: one peer, one blocking get
        party, ref = calls[0]
        try:
            return [ray.get(ref, timeout=max(timeout_s, 0.0))]
        except Exception as exc:
            raise _failure(exc, party, phase, timeout_s, party_of_actor) from None
    party_of = {ref: party for party, ref in calls}
    pending = list(party_of)
    while pending:
        # Wake up at least every _POLL_S: one failed call ends the wait, the others notwithstanding.
        wait_s = min(_POLL_S, max(0.0, deadline - time.monotonic()))
        ready, pending = ray.wait(pending, num_returns=1, timeout=wait_s, fetch_local=False)
        for ref in ready:
            try:
                ray.get(ref, timeout=0)
            except Exception as exc:
                raise _failure(exc, party_of[ref], phase, timeout_s, party_of_actor) from None
        if pending and time.monotonic() >= deadline:
            raise PartyFailedError(party_of[pending[0]], phase, f"no answer within {timeout_s:g} s", reason="timeout")
    return ray.get([ref for _, ref in calls], timeout=max(1.0, deadline - time.monotonic()))


def _failure(exc: Exception, party: str, phase: str, timeout_s: float, party_of_actor: Callable | None) -> Exception:
    """The ray_vfl error for a failed wait on ``party``'s call."""
    cause = getattr(exc, "cause", None)
    while isinstance(cause, ray.exceptions.RayTaskError) and getattr(cause, "cause", None) is not None:
        cause = cause.cause  # a party's own task failed: report the task's error, not Ray's wrappers
    if isinstance(exc, ray.exceptions.RayTaskError) and cause is not None:
        if isinstance(cause, PartyFailedError):
            return PartyFailedError(cause.party, f"{phase}/{cause.phase}", cause.cause, cause.reason)
        if isinstance(cause, VFLError):
            return cause
        return PartyFailedError(party, phase, f"{type(cause).__name__}: {cause}")
    if isinstance(exc, ray.exceptions.RayActorError):
        failed = party_of_actor(getattr(exc, "actor_id", None)) if party_of_actor else "?"
        detail = "actor died"
        if getattr(exc, "actor_init_failed", False):  # Ray keeps only the text of a constructor's error
            errors = re.findall(r"^\s*(?:[\w.]+\.)?(\w+(?:Error|Exception): .+)$", getattr(exc, "error_msg", "") or "", re.M)
            user_error = re.match(r"(DataError|ConfigError): (.+)", errors[-1]) if errors else None
            if user_error:  # the party refused its input while starting: the user's error, as it was raised
                kind = DataError if user_error.group(1) == "DataError" else ConfigError
                return kind(user_error.group(2))
            detail = f"actor failed to start: {errors[-1] if errors else 'see the Ray logs'}"
        return PartyFailedError(failed if failed != "?" else party, phase, detail, reason="died")
    if isinstance(exc, ray.exceptions.GetTimeoutError):
        return PartyFailedError(party, phase, f"no answer within {timeout_s:g} s", reason="timeout")
    return PartyFailedError(party, phase, f"{type(exc).__name__}: {exc}")
