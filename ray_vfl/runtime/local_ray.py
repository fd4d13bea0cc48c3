"""The Ray that ray_vfl starts on one machine, and the resource that pins each party.

Every party's actor and tasks are pinned by a custom Ray resource,
``vfl_<party>`` (:func:`party_resource`): on a cluster each party's nodes
declare their own (``cluster.yaml``). When no Ray is running, ray_vfl starts
a local one (:func:`start_local_ray`) that declares the resource of every
party of the first federation, talks to loopback only, and keeps
:data:`SPARE_SLOTS` spare party resources: Ray cannot add resources to a
running node, so a later federation in the same process with new party
names (a second ``fit`` on 3 parties after one on 2) is pinned to spare
slots instead (:func:`claim_spare_slots`). Pinning to one local node is a
simulation either way: every party shares the machine.

A local Ray prints nothing of its own unless something fails:

- Token authentication stays on. Ray 2.60 turns it on by default for a Ray that
  ``ray.init`` starts (unless ``RAY_AUTH_MODE`` says otherwise) and announces it with
  a WARNING on stderr ("Token authentication is enabled for this Ray cluster. Set
  RAY_AUTH_MODE=disabled to opt out", logged by
  ``ray/_private/authentication/authentication_token_setup.py``). ray_vfl keeps that
  default and mutes only the announcement, while its own Ray starts
  (:data:`AUTH_NOTICE_LOGGER` raised to ERROR). Turning authentication off instead
  would weaken the one safeguard: a local Ray listens on every network interface, not
  on loopback only. A ``RAY_AUTH_MODE`` the user set (``disabled`` in the tests) is
  used as it is, and Ray says nothing about it either.
- Ray's start-up line is logged at INFO, below the ``logging_level`` given, and
  the workers' output stays in Ray's log files (``log_to_driver=False``).
- Ray's raylet warns on the driver's stdout, in colour ("WARNING: 8 PYTHON worker processes
  have been started ..., which is 4x the maximum expected startup concurrency (2)"), once its
  worker processes, less a few it keeps for spilling, reach 4 times its startup concurrency (by
  default the CPU count): taken as a sign of tasks blocked in ``ray.get``, it comes with 18
  parties on 2 CPUs. Here each party is an actor process of its own by design (its data and keys
  live in it; ``num_cpus=0``), so the local Ray starts up to one process per CPU and per party
  slot it declares at once (:func:`startup_concurrency`), and warns only past 4 times that.
- A start that misses Ray's fixed 30 s for its raylet to register (a busy machine) is killed and made
  again (:data:`START_ATTEMPTS`), with one WARNING line saying so.
- The errors of calls nobody fetched after a failure are settled
  (:func:`ray_vfl.runtime.waiting.settle`) rather than reported as "Unhandled error".
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import logging
import os
import shutil
import signal
import tempfile
from typing import Mapping, Sequence

import ray

from ..errors import ConfigError

__all__ = ["RESOURCE_UNITS", "SPARE_SLOTS", "party_resource", "start_local_ray", "claim_spare_slots", "forget_local_ray",
           "startup_concurrency"]

RESOURCE_UNITS = 10_000  # units of a party resource declared per node; an actor takes 1, a task 0.01
SPARE_SLOTS = 32  # spare party resources of a local Ray, for parties of later federations
# Values up to this size travel inside the actor call itself instead of through the shared-memory
# object store (Ray's default limit is 100 KiB). A plaintext tree's gradient pairs (24,000 rows:
# 384 KB) then take one call: 10 plaintext trees on credit took 0.56-0.59 s against 0.57-0.69 s,
# alternating runs. Ciphertext arrays (6 MB at 2048 bits) still go through the object store.
INLINE_BYTES = 2 * 1024**2
# Ray's logger of its notice that it turned token authentication on (its default): muted while ray_vfl starts Ray
AUTH_NOTICE_LOGGER = "ray._private.authentication.authentication_token_setup"

# Ray 2.60 gives its raylet a fixed 30 s to register with its GCS (ray/_private/node.py) and raises a bare
# Exception with this text past it: seen on the 2-core machine with three Rays starting at once. A start that
# times out is killed (what it started) and made again, up to START_ATTEMPTS in all.
START_TIMEOUT = "timed out during startup"
START_ATTEMPTS = 3
log = logging.getLogger(__name__)

_aliases: dict[str, str] = {}  # party -> spare slot it was given in the local Ray this process started
_started = False


def party_resource(party: str) -> str:
    """Name of the custom Ray resource that pins a party's actor and tasks.

    Example
    -------
    >>> party_resource("bank")
    'vfl_bank'
    """
    return _aliases.get(party) or f"vfl_{party}"


def _spare(i: int) -> str:
    return f"vfl_spare_{i}"


@contextlib.contextmanager
def _auth_notice_muted():
    """Ray's WARNING that it turned token authentication on, muted (authentication itself stays on)."""
    notice = logging.getLogger(AUTH_NOTICE_LOGGER)
    level = notice.level
    notice.setLevel(logging.ERROR)
    try:
        yield
    finally:
        notice.setLevel(level)


@functools.cache
def _scratch_home() -> str:
    """The HOME of every local Ray this process starts: a scratch folder holding ``ray_bootstrap_config.yaml``.

    One per process, not one per start: Ray writes its authentication token into the first
    one (``.ray/auth_token``) and the driver keeps that token, so a second local Ray must find
    it in the same place. Ray's processes keep this HOME until Ray stops: the folder is
    removed at exit, by a hook registered before ``ray.init`` so that it runs after Ray's own
    shutdown hook.
    """
    scratch = tempfile.mkdtemp(prefix="ray_vfl_home")
    with open(os.path.join(scratch, "ray_bootstrap_config.yaml"), "w", encoding="utf-8") as fh:
        fh.write("provider: {type: local}\n")
    atexit.register(shutil.rmtree, scratch, True)
    return scratch


@contextlib.contextmanager
def _no_phone_home():
    """Start a local Ray that talks to loopback only.

    Ray reports usage statistics unless told not to, and its dashboard head
    probes cloud metadata addresses (169.254.169.254, metadata.google.internal)
    at start unless ``~/ray_bootstrap_config.yaml`` exists. A federation's
    local simulation has no business on the network, so usage stats are off
    and, while Ray starts, HOME points at a scratch folder holding that file.
    """
    saved = {k: os.environ.get(k) for k in ("HOME", "RAY_USAGE_STATS_ENABLED")}
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    home = os.path.expanduser("~")
    if not os.path.exists(os.path.join(home, "ray_bootstrap_config.yaml")):
        os.environ["HOME"] = _scratch_home()
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def startup_concurrency(n_parties: int, num_cpus: int | None) -> int:
    """Worker processes the local Ray starts at once: one per CPU and one per party slot it declares
    (``n_parties`` plus :data:`SPARE_SLOTS`). Ray warns past 4 times this many processes.

    Example
    -------
    >>> startup_concurrency(2, 2)
    36
    """
    return (num_cpus or os.cpu_count() or 1) + n_parties + SPARE_SLOTS


def start_local_ray(parties: Sequence[str], num_cpus: int | None) -> None:
    """Start a local Ray declaring ``parties``' resources and the spare slots."""
    global _started
    _aliases.clear()
    resources = {party_resource(p): RESOURCE_UNITS for p in parties}
    resources.update({_spare(i): RESOURCE_UNITS for i in range(SPARE_SLOTS)})
    system = {"max_direct_call_object_size": INLINE_BYTES,
              "worker_maximum_startup_concurrency": startup_concurrency(len(parties), num_cpus)}
    with _no_phone_home(), _auth_notice_muted():
        for attempt in range(START_ATTEMPTS):
            started_before = _children()
            try:
                # logging_level: Ray's own "Started a local Ray instance" INFO line says nothing the user asked for
                ray.init(address="local", num_cpus=num_cpus, resources=resources, include_dashboard=False,
                         log_to_driver=False, logging_level=logging.WARNING,
                         _system_config=dict(system))  # a copy: ray.init adds to the one it is given
                break
            except Exception as exc:  # Ray raises a bare Exception for it
                if START_TIMEOUT not in str(exc) or attempt + 1 == START_ATTEMPTS:
                    raise
                _kill(_children() - started_before)
                log.warning("the local Ray did not come up within Ray's 30 s (a busy machine); starting it again "
                            "(attempt %d of %d)", attempt + 2, START_ATTEMPTS)
    _started = True


def _children() -> set[int]:
    """This process's child processes (Linux's /proc; elsewhere none are known)."""
    me, found = os.getpid(), set()
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else ():
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", "rb") as fh:
                    ppid = int(fh.read().rsplit(b")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            if ppid == me:
                found.add(int(entry))
    return found


def _kill(pids: set[int]) -> None:
    """What a failed start left (its GCS, raylet and their helpers): gone before the next attempt."""
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    for pid in pids:
        try:
            os.waitpid(pid, 0)
        except ChildProcessError:
            pass


def claim_spare_slots(parties: Sequence[str], available: Mapping[str, float]) -> list[str]:
    """Pin ``parties`` (whose resources the running Ray lacks) to free spare slots, if this process
    started that Ray; returns the parties still without a resource."""
    if not (_started and ray.is_initialized()):
        return list(parties)
    taken = set(_aliases.values())
    free = [_spare(i) for i in range(SPARE_SLOTS) if _spare(i) not in taken and available.get(_spare(i), 0) > 0]
    if len(free) < len(parties):
        raise ConfigError(
            f"the local Ray ray_vfl started has {len(free)} spare party slots left, {len(parties)} parties "
            f"({list(parties)}) need one: reuse party names, or shut Ray down (Runtime.shutdown() or "
            "ray.shutdown()) so the next fit starts a fresh one"
        )
    for party, slot in zip(parties, free):
        _aliases[party] = slot
    return []


def forget_local_ray() -> None:
    """The local Ray is gone: the next one starts without aliases."""
    global _started
    _aliases.clear()
    _started = False
