"""The Ray runtime: one object owns the Ray connection and the party actors.

Each party runs as a named Ray actor bound to a custom
Ray resource of its own, ``vfl_<party>``: the actor and every task it fans out
can only be placed on nodes that declare that resource, so a party's data and
keys never leave its machines. On a laptop the runtime starts Ray itself and
declares every party's resource on the local node (:mod:`ray_vfl.runtime.local_ray`,
with spare slots for the parties of later federations); on a cluster
(``ray job submit``, ``cluster.yaml``) each party's nodes declare their own.

Protocol classes are plain Python; :meth:`Runtime.spawn` wraps them as actors.
Every exception raised inside a party method is re-raised at the driver as a
:class:`~ray_vfl.errors.PartyFailedError` naming the party and the phase, as
is a dead actor or a phase that exceeds its timeout; the runtime then kills
the other actors so nothing is left behind. Waiting itself is :mod:`ray_vfl.runtime.waiting`:
the calls a failed wait leaves unfetched are settled, so the one error is all a user reads.
"""

from __future__ import annotations

import functools
import inspect
import itertools
import logging
import os
import uuid
from typing import Any, Callable, Sequence

import ray

from ..errors import ConfigError, DataError, PartyFailedError, VFLError
from . import timeline
from .comm import CallerBox
from .local_ray import (
    RESOURCE_UNITS,
    claim_spare_slots,
    forget_local_ray,
    party_resource,
    start_local_ray,
)
from .task_pool import TaskPool
from .waiting import gather, settle

__all__ = ["Runtime", "gather", "settle", "party_resource", "as_ref_list", "RESOURCE_UNITS"]

log = logging.getLogger(__name__)


def as_ref_list(refs: Any, n: int) -> list:
    """The refs of a ``num_returns=n`` call as a list (Ray returns a bare ref when ``n == 1``)."""
    return [refs] if n == 1 else list(refs)


# ---------------------------------------------------------------------------
# party actors
PROBE_GROUP = "probe"  # a concurrency group of every party actor: a probe is answered while a method runs
_PROBE_S = 3.0  # how long a probe may take before its party counts as silent


def _named(exc: VFLError, party: str) -> VFLError:
    """``exc`` with the party's name in front of its message (unless the message names it already)."""
    text = str(exc)
    if f"{party!r}" in text or party == "?":
        return exc
    try:
        named = type(exc)(f"party {party!r}: {text}")
    except TypeError:  # an error class with other constructor arguments keeps its own message
        return exc
    named.__cause__ = exc.__cause__
    return named


def _guarded(name: str, fn: Callable) -> Callable:
    @functools.wraps(fn)
    def method(self, *args, **kwargs):
        party = getattr(self, "name", "?")
        try:
            with timeline.busy():
                return fn(self, *args, **kwargs)
        except PartyFailedError:
            raise  # a peer's failure, already named
        except VFLError as exc:  # the user's input or a crypto bound: reported as such, naming the party
            raise _named(exc, party) from exc
        except OSError as exc:  # a path, a folder, a permission on this party's own machine
            raise DataError(f"party {party!r}, {name}: {type(exc).__name__}: {exc}") from exc
        except Exception as exc:  # a fault: the party reports which of its steps failed
            raise PartyFailedError(party, name, f"{type(exc).__name__}: {exc}") from exc

    return method


def _alive(self) -> tuple[str, int]:
    """Answer a probe (in its own concurrency group, so a busy party answers too): name and process id."""
    return getattr(self, "name", "?"), os.getpid()


def _drain_timeline(self) -> dict[str, Any]:
    """This actor's measured intervals since the last call, and its peak memory (:mod:`.timeline`)."""
    return {"spans": timeline.drain(), "peak_rss_mb": timeline.peak_rss_mb()}


def _mailbox_key(self) -> tuple[str, bytes]:
    """The name and public key of this party's mailbox (:meth:`Runtime.introduce`)."""
    return self.mailbox.name, self.mailbox.public_key


def _trust_mailboxes(self, keys: dict[str, bytes], sealed: bool = True) -> None:
    """Take the other parties' public keys from the driver (:meth:`Runtime.introduce`)."""
    self.mailbox.trust(keys, sealed)


@functools.lru_cache(maxsize=None)
def _actor_class(cls: type) -> type:
    methods = {n: _guarded(n, f) for n, f in inspect.getmembers(cls, inspect.isfunction) if not n.startswith("_")}
    methods["alive"] = ray.method(concurrency_group=PROBE_GROUP)(_alive)
    methods["drain_timeline"] = _drain_timeline
    methods["mailbox_key"] = _guarded("mailbox_key", _mailbox_key)
    methods["trust_mailboxes"] = _guarded("trust_mailboxes", _trust_mailboxes)
    return type(f"{cls.__name__}Actor", (cls,), methods)


def _ray_options(cls: type) -> dict:
    """The class's own actor options, with the probe's concurrency group added."""
    options = dict(getattr(cls, "ray_options", None) or {})
    options["concurrency_groups"] = {**options.get("concurrency_groups", {}), PROBE_GROUP: 1}
    return options


class Runtime:
    """Owns the Ray connection and the actors of one federation.

    Parameters
    ----------
    address : str or None
        ``None`` connects to the cluster of a ``ray job submit`` (when
        ``RAY_ADDRESS`` is set) and otherwise starts a local Ray; ``"auto"``
        always attaches to a running cluster; ``"local"`` always starts one.
    num_cpus : int or None
        CPUs of a Ray started locally (default: all).
    timeout_s : float
        Default longest wait for one protocol phase.

    Example
    -------
    >>> rt = Runtime()                                    # doctest: +SKIP
    >>> bank = rt.spawn("bank", MyPartyClass, data)       # doctest: +SKIP
    >>> rt.get([("bank", bank.step.remote())], "step")    # doctest: +SKIP
    """

    def __deepcopy__(self, memo) -> "Runtime":
        """The same runtime: it owns Ray actors and a connection, which a copy could not own twice
        (scikit-learn's ``clone`` deep-copies parameters; a cloned estimator trains on this runtime)."""
        return self

    def __copy__(self) -> "Runtime":
        return self

    def __init__(self, address: str | None = None, num_cpus: int | None = None, timeout_s: float = 600.0) -> None:
        if address not in (None, "auto", "local") and not str(address).startswith(("ray://", "http")) and ":" not in str(address):
            raise ConfigError(f"address must be None, 'auto', 'local' or a Ray address, got {address!r}")
        self.address = address
        self.num_cpus = num_cpus
        self.timeout_s = timeout_s
        self.started_ray = False
        self._actors: dict[str, Any] = {}
        self._classes: dict[str, type] = {}
        self._token = uuid.uuid4().hex[:8]
        self._serial = itertools.count()
        # Messages are sealed. benchmarks/wire.py alone sets this False, to measure what sealing costs.
        self._seal_messages = True
        self._mailbox_keys: dict[str, bytes] = {}  # every introduced mailbox's public key (to open results)

    # connection ----------------------------------------------------------
    def connect(self, parties: Sequence[str]) -> None:
        """Attach to or start Ray so that every party's resource exists."""
        if not ray.is_initialized():
            address = self.address
            if address is None:
                address = "auto" if os.environ.get("RAY_ADDRESS") else "local"
            if address == "local":
                start_local_ray(parties, self.num_cpus)
                self.started_ray = True
            else:
                # logging_level: Ray's "Connecting to existing Ray cluster" INFO line says nothing the user asked for
                ray.init(address=address, log_to_driver=False, logging_level=logging.WARNING)
        available = ray.cluster_resources()
        lacking = claim_spare_slots([p for p in parties if available.get(party_resource(p), 0) <= 0], available)
        missing = [party_resource(p) for p in lacking]
        if missing:
            declare = ", ".join(f'"{r}": {RESOURCE_UNITS}' for r in missing)
            raise ConfigError(
                f"no Ray node declares the resource(s) {missing} that pin the parties' actors; start each party's "
                f"nodes with --resources '{{{declare}}}' (see cluster.yaml) or let ray_vfl start a local Ray"
            )

    def cpus(self) -> int:
        return max(1, int(ray.cluster_resources().get("CPU", 1)))

    def party_nodes(self, party: str) -> dict[str, int]:
        """The live nodes that declare ``party``'s resource (where its actor and tasks may run): node id -> CPUs."""
        return {n["NodeID"]: int(n.get("Resources", {}).get("CPU", 0)) for n in ray.nodes()
                if n.get("Alive") and n.get("Resources", {}).get(party_resource(party), 0) > 0}

    def party_cpus(self, party: str) -> int:
        """CPUs of the nodes ``party`` may use."""
        return max(1, sum(self.party_nodes(party).values()))

    def pool(self, party: str, workers: int | None = None) -> TaskPool:
        """The task pool a party uses for its heavy crypto (default: one worker per CPU of its nodes)."""
        return TaskPool(party_resource(party), workers or self.party_cpus(party), self.timeout_s)

    # actors --------------------------------------------------------------
    def spawn(self, party: str, cls: type, *args: Any, **kwargs: Any):
        """Start (or reuse) the actor of ``party`` running ``cls(*args, **kwargs)``.

        A live actor of the same class is reused and re-initialised through
        its ``reset`` method, so repeated fits pay the actor start-up once.
        """
        return self._spawn(party, party, cls, args, kwargs)

    def spawn_helper(self, party: str, role: str, cls: type, *args: Any, keep: bool = False):
        """A second actor of ``party`` (named ``"<party>:<role>"``), pinned to the party's nodes like its main actor.

        ``keep=True`` returns the live helper of that role and class as it is (a party's data
        store, say), without re-initialising it.
        """
        key = f"{party}:{role}"
        if keep and self._classes.get(key) is cls:
            return self._actors[key]
        return self._spawn(key, party, cls, args, {})

    def _spawn(self, key: str, party: str, cls: type, args: tuple, kwargs: dict):
        handle = self._actors.get(key)
        if handle is not None and self._classes.get(key) is cls and hasattr(cls, "reset"):
            try:
                self.get([(key, handle.reset.remote(*args, **kwargs))], "reset")
                return handle
            except PartyFailedError:
                self._actors.pop(key, None)
            except VFLError:  # the user's input refused: a live actor stays; one that never started goes
                if self._answers(handle):
                    raise
                self.kill(key)
        elif handle is not None:
            self.kill(key)
        actor_cls = ray.remote(**_ray_options(cls))(_actor_class(cls))
        handle = actor_cls.options(
            name=f"vfl-{self._token}-{key.replace(':', '-')}-{next(self._serial)}",  # a dead actor's name may linger
            num_cpus=0,
            resources={party_resource(party): 1},
            max_restarts=0,
        ).remote(*args, **kwargs)
        self._actors[key] = handle
        self._classes[key] = cls
        return handle

    def introduce(self, keys: Sequence[str], timeout_s: float | None = None) -> None:
        """Hand every actor of ``keys`` (parties, or ``"<party>:<role>"`` helpers) the public keys of
        the others' mailboxes, so they can seal messages to each other (:mod:`ray_vfl.runtime.seal`).

        Every protocol driver calls it once its actors are spawned, before the first message. Each
        actor made its key pair in its own process; the driver only carries the public keys. (An
        honest-but-curious driver hands out the real ones; a malicious one could substitute its own.
        Across organisations the keys are pinned to certificate names: a party's key reaches the
        driver under the name its gateway's certificate bears, and a serving party takes from the
        driver only the driver's key and its own, :mod:`ray_vfl.runtime.federation.gateway`.)
        """
        keys = list(keys)
        named = self.get([(k.split(":")[0], self.actor(k).mailbox_key.remote()) for k in keys], "introduce", timeout_s)
        directory: dict[str, bytes] = {}
        for key, (name, public) in zip(keys, named):
            if name in directory:
                raise VFLError(f"two actors introduced together have a mailbox named {name!r}; introduce "
                               "each group of talking actors on its own")
            directory[name] = public
        # the parties' own keys (not their helpers', whose mailboxes may bear the party's name), to open results
        self._mailbox_keys.update({name: public for key, (name, public) in zip(keys, named) if ":" not in key})
        self.get([(k.split(":")[0], self.actor(k).trust_mailboxes.remote(directory, self._seal_messages)) for k in keys],
                 "introduce", timeout_s)

    def caller_box(self) -> "CallerBox":
        """The driver's end of one call's result (:class:`~ray_vfl.runtime.comm.CallerBox`): a key pair
        made for this call; hand its ``public_key`` to the party that computes the result, which seals it
        (:meth:`~ray_vfl.runtime.comm.Mailbox.send_to_caller`), and open the message with the box."""
        return CallerBox(self._mailbox_keys, self._seal_messages)

    @staticmethod
    def _answers(handle) -> bool:
        """Whether an actor answers a probe (one whose constructor failed answers with its error)."""
        try:
            ray.get(handle.alive.remote(), timeout=_PROBE_S)
            return True
        except Exception:  # dead, never started, or silent
            return False

    @property
    def actors(self) -> dict[str, Any]:
        """The live actor handles by key (a party, or ``"<party>:<role>"`` for its helpers)."""
        return dict(self._actors)

    def timelines(self) -> dict[str, dict[str, Any]]:
        """Every live actor's measured intervals since the last call and its peak memory, by actor key
        (a party, or ``"<party>:<role>"``; :func:`ray_vfl.runtime.timeline.breakdown` sums them)."""
        calls = [(key, handle.drain_timeline.remote()) for key, handle in self._actors.items()]
        return dict(zip(self._actors, self.get(calls, "timelines"))) if calls else {}

    def actor(self, party: str):
        if party not in self._actors:
            raise VFLError(f"no actor for party {party!r}; parties are {sorted(self._actors)}")
        return self._actors[party]

    def kill(self, party: str) -> None:
        handle = self._actors.pop(party, None)
        self._classes.pop(party, None)
        if handle is not None:
            try:
                ray.kill(handle, no_restart=True)
            except Exception:  # already dead
                log.debug("actor of %s already gone", party)

    def kill_all(self) -> None:
        for party in list(self._actors):
            self.kill(party)

    def shutdown(self) -> None:
        """Kill the actors; stop Ray too if this runtime started it."""
        self.kill_all()
        if self.started_ray and ray.is_initialized():
            ray.shutdown()
            forget_local_ray()
            self.started_ray = False

    def __enter__(self) -> "Runtime":
        return self

    def __exit__(self, *exc) -> None:
        self.shutdown()

    # waiting -------------------------------------------------------------
    def _party_of_actor(self, actor_id) -> str:
        for party, handle in self._actors.items():
            if actor_id is not None and handle._actor_id.hex() == actor_id:
                return party
        return "?"

    def get(self, calls: Sequence[tuple[str, Any]], phase: str, timeout_s: float | None = None) -> list[Any]:
        """Wait for ``(party, ObjectRef)`` pairs; fail fast with the party's name.

        - A dead party, or one that answers nothing (not even a probe, which every party actor
          answers in its own concurrency group while it computes), raises
          :class:`PartyFailedError` naming *that* party, whichever party was waiting for it and
          however deeply the calls nest; every actor of this runtime is then killed.
        - No reply within the timeout while every party still answers probes: the party waited
          for is busy, not failed. :class:`PartyFailedError` (``reason="timeout"``) names it and
          the actors stay, so a trained model survives a slow prediction.
        - Errors a party raises because of the user's input (:class:`~ray_vfl.errors.DataError`,
          ``ConfigError``, ``CryptoError``; a missing path or an unwritable folder on the party's
          node becomes a ``DataError``) come back as they are, naming the party; the actors stay.
        - Any other exception inside a party is a fault: :class:`PartyFailedError`, actors killed.

        ``timeout_s`` defaults to the runtime's own.
        """
        timeout_s = self.timeout_s if timeout_s is None else timeout_s
        try:
            return gather(calls, phase, timeout_s, self._party_of_actor)
        except PartyFailedError as exc:
            if exc.reason == "timeout":
                silent = self.silent_parties()
                if not silent:
                    raise PartyFailedError(exc.party, exc.phase, f"{exc.cause}; every party still answers probes, so "
                                           f"{exc.party!r} is busy, not failed: the federation is kept (raise timeout_s "
                                           "to wait longer)", reason="timeout") from None
                exc = PartyFailedError(silent[0], exc.phase, f"no answer within {timeout_s:g} s, not even to a probe "
                                       f"(silent: {silent})", reason="silent")
            self.kill_all()
            raise exc from None

    def silent_parties(self, wait_s: float = _PROBE_S) -> list[str]:
        """Parties with an actor that is dead or does not answer a probe within ``wait_s`` seconds."""
        probes: dict[Any, str] = {}
        for key, handle in self._actors.items():
            probes[handle.alive.remote()] = key.split(":")[0]
        ready, pending = ray.wait(list(probes), num_returns=len(probes), timeout=wait_s) if probes else ([], [])
        failed = {probes[ref] for ref in pending}
        for ref in ready:
            try:
                ray.get(ref, timeout=0)
            except Exception:  # a dead actor answers its probe with an error
                failed.add(probes[ref])
        return sorted(failed)
