"""A party serving its roles to the other organisations of a federation (``python -m ray_vfl.serve``).

:class:`PartyServer` is the handler of the party's gateway. It starts the roles another party asks for
(:class:`~.roles.StartRole`, on the control role) as actors of this party's own Ray cluster, when the
party's :class:`~.roles.ServePolicy` agrees, and runs the allowed methods of those roles. What it refuses,
with a :class:`~.gateway.Refusal` the caller reads as a ProtocolError naming this party:

* a role kind the policy does not list (the policy lists the data store, a PSI follower, a SecureBoost
  passive party, a split-NN feature party and a PIVODL client at most);
* a split-NN feature party sending its embeddings to any party but the one starting it; a PIVODL client
  whose clients are not distinct parties of the federation including this party and its starter, or that keeps
  a recorded view;
* a role under another party's name, a PSI party reading IDs it is sent instead of its own table, a PSI
  audit log, a saved model part to continue from (a path on this party's machine chosen by another);
* data other than what it serves: a store opens only a file the party serves, named by its file name
  (``shop.parquet``), never a path or a query another party chooses; the ID column and location are the
  serving party's;
* a call on a role it does not run for that caller: every role belongs to the party that started it, and
  answers no one else, but for a role's *fellows* (the other PIVODL clients its start names), who may call its
  fellow methods only: deliver their messages for it and fetch its mailbox key (:mod:`.relay`; this party
  delivers its own messages for a fellow the same way, after the method that made them returns, and fetches
  each fellow's key from the fellow's gateway when its starter introduces the parties);
* a request without its coordinator runtime's session (:class:`~.roles.StartRole`): each role is run per
  (starter, session), as ``"<role>@<session>"``, so two runtimes of one coordinating party each run and stop
  their own roles; a session names a role, it never grants access (the starter's certificate does);
* a mailbox key (``trust_mailboxes``) under any name but the caller's and its own: the caller's
  certificate decides whose key a key announcement is, so no party can hand in a key for a third party
  (and its own must be its own, :meth:`~ray_vfl.runtime.seal.Seal.trust`).

The gateway itself refuses any method off a role's allow-list before this handler runs
(:data:`~.roles.ROLE_KINDS`).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
from typing import Any, Callable, Mapping


from ...errors import ConfigError, VFLError
from ..actors import Runtime
from ..codec import wire_type
from ..task_pool import TaskPool
from ..waiting import gather
from .gateway import Refusal
from .relay import DELIVER, Posted, Relay
from .roles import (CONTROL_ROLE, ROLE_KINDS, SESSION, PoolSpec, RoleRef, ServePolicy, StartRole, TableKey, base_role,
                    role_instance)

__all__ = ["PartyServer", "served_data", "serve"]

log = logging.getLogger(__name__)


class PartyServer:
    """Starts and runs the roles of party ``policy.party`` for the other parties, as its policy allows.

    ``runtime`` is the party's own :class:`~ray_vfl.runtime.actors.Runtime` (connected to its cluster);
    ``None`` checks requests only (unit tests of the refusals). ``make_table(party, store, key, timeout_s)``
    makes a reference to one of the party's tables (:class:`ray_vfl.data.store.TableRef`, a layer above this one).
    ``peers``: the party's own :class:`~.gateway.GatewayClient`, to reach the fellows of its roles (:mod:`.relay`).
    """

    def __init__(self, policy: ServePolicy, runtime: Runtime | None = None, timeout_s: float = 600.0,
                 make_table: Callable[..., Any] | None = None, peers: Any = None) -> None:
        self.policy, self.runtime, self.timeout_s, self.make_table = policy, runtime, timeout_s, make_table
        self.party = policy.party
        self.relay = Relay(self.party, peers)
        self._lock = threading.Lock()
        self._roles: dict[tuple[str, str], str] = {}  # (starter, "<role>@<session>") -> the runtime's key of its actor
        self._fellows: dict[tuple[str, str], frozenset] = {}  # (starter, instance) -> the other parties it talks to

    # the gateway's handler -------------------------------------------------------------------
    def handle(self, sender: str, role: str, method: str, args: list) -> Any:
        if role == CONTROL_ROLE:
            if method == "start_role" and len(args) == 1:
                return self.start_role(sender, args[0])
            if method == "stop_role" and len(args) == 1:
                return self.stop_role(sender, str(args[0]))
            if method == "hello" and not args:
                return {"party": self.party, "kinds": list(self.policy.kinds), "data": sorted(self.policy.data)}
            raise Refusal(f"party {self.party!r}: control.{method} takes other arguments")
        if method == "trust_mailboxes":
            self.check_keys(sender, args)
        key = self._roles.get((sender, role))
        if key is None:
            return self._fellow_call(sender, role, method, args)
        if method == DELIVER:
            raise Refusal(f"party {self.party!r}: {sender!r} hands its messages to role {role!r} as arguments")
        if self.runtime is None:
            raise Refusal(f"party {self.party!r} runs no role {role!r} for party {sender!r}: start it first")
        fellows = self._fellows.get((sender, role), frozenset())
        args = [self._resolved(a, sender, role) for a in args]
        if method == "trust_mailboxes" and fellows:  # each fellow's key from its own gateway, pinned to its name
            args = [{**args[0], **self.relay.fellow_keys(role, fellows)}] + args[1:]
        if base_role(role) == ROLE_KINDS["store"].role and method == "open":
            args = self._served_open(args)
        handle = self.runtime.actor(key)
        result = gather([(self.party, getattr(handle, method).remote(*args))], f"{role}.{method}", self.timeout_s,
                        self.runtime._party_of_actor)[0]
        return self.relay.send_on(role, sender, fellows, result) if fellows else result

    def _fellow_call(self, sender: str, role: str, method: str, args: list) -> Any:
        """A call from a fellow of a role (a party its start names, not its starter): its fellow methods only."""
        started = [k for k, fellows in list(self._fellows.items()) if k[1] == role and sender in fellows]
        if len(started) != 1:
            raise Refusal(f"party {self.party!r} runs no role {role!r} for party {sender!r}: start it first")
        allowed = next(k.fellow_methods for k in ROLE_KINDS.values() if k.role == base_role(role))
        if method not in allowed:
            raise Refusal(f"party {self.party!r}: {sender!r} is a fellow of role {role!r}, which lets it call "
                          f"{list(allowed)} only, not {method!r}")
        if method == DELIVER and len(args) == 1:
            return self.relay.deliver(started[0], sender, args[0])
        if method == "mailbox_key" and not args and self.runtime is not None:
            handle = self.runtime.actor(self._roles[started[0]])
            return gather([(self.party, handle.mailbox_key.remote())], f"{role}.{method}", self.timeout_s,
                          self.runtime._party_of_actor)[0]
        raise Refusal(f"party {self.party!r}: {role}.{method} takes other arguments")

    # the control plane -----------------------------------------------------------------------
    def start_role(self, sender: str, request: Any) -> dict:
        """Start the role ``request`` asks for, for ``sender``'s runtime of the request's session; returns
        ``{"role": its instance name}`` (``"<role>@<session>"``)."""
        kind_name, args = self.check_start(sender, request)
        kind = ROLE_KINDS[kind_name]
        if self.runtime is None:
            raise Refusal(f"party {self.party!r} runs no cluster here (a policy check only)")
        instance = role_instance(kind.role, request.session)
        resolved = [self._resolved(a, sender, instance) for a in args]
        helper = f"{sender}-{kind.role}-{request.session}"
        key = f"{self.party}:{helper}"
        with self._lock:  # a live actor of the kind is re-initialised (its ``reset``), as Runtime.spawn does
            handle = self.runtime.spawn_helper(self.party, helper, kind.load(), *resolved)
            try:  # a constructor that refuses its input says so now, naming this party
                gather([(self.party, handle.alive.remote())], f"start {kind_name}", self.timeout_s,
                       self.runtime._party_of_actor)
            except VFLError:
                self.runtime.kill(key)
                raise
            self._roles[(sender, instance)] = key
            if kind.parties_arg is not None:
                self._fellows[(sender, instance)] = frozenset(args[kind.parties_arg]) - {sender, self.party}
                self.relay.open((sender, instance))
        log.info("party %r: started %s (role %r) for %r", self.party, kind_name, instance, sender)
        return {"role": instance}

    def stop_role(self, sender: str, role: str) -> None:
        with self._lock:
            key = self._roles.pop((sender, role), None)
            self._fellows.pop((sender, role), None)
            self.relay.close((sender, role))
            if key is not None and self.runtime is not None:
                self.runtime.kill(key)

    def check_start(self, sender: str, request: Any) -> tuple[str, list]:
        """``(kind, args)`` of a request this party's policy accepts; :class:`Refusal` naming why not."""
        me = self.party
        if self.policy.starters is not None and sender not in self.policy.starters:
            raise Refusal(f"party {me!r} starts roles for {sorted(self.policy.starters)} only, not for {sender!r}")
        if not isinstance(request, StartRole):
            raise Refusal(f"party {me!r}: control.start_role takes a StartRole record")
        if request.kind not in self.policy.kinds:
            raise Refusal(f"party {me!r} does not serve role kind {request.kind!r} (it serves {list(self.policy.kinds)})")
        args = list(request.args)
        if not args or args[0] != me:
            raise Refusal(f"party {me!r} starts roles under its own name only, got {args[:1]}")
        if request.kind == "store" and len(args) != 1:
            raise Refusal(f"party {me!r}: a store takes its party's name only")
        if request.kind == "psi":
            if len(args) < 4 or not isinstance(args[1], TableKey):
                raise Refusal(f"party {me!r} takes part in PSI with the IDs of its own table (a TableKey), not IDs "
                              "another party sends")
            if len(args) > 4 and args[4]:
                raise Refusal(f"party {me!r} keeps no PSI audit log for other parties (audit=False)")
        if request.kind == "secureboost-passive":
            if len(args) < 5 or not isinstance(args[1], TableKey):
                raise Refusal(f"party {me!r} trains on its own table only (a TableKey)")
            if len(args) > 5 and args[5] is not None:
                raise Refusal(f"party {me!r}: continuing a saved model across organisations is not supported "
                              "(init_model must be None)")
        if request.kind == "splitnn-nonlabel":
            if len(args) < 5 or not isinstance(args[1], TableKey):
                raise Refusal(f"party {me!r} trains on its own table only (a TableKey)")
            if args[4] != sender:
                raise Refusal(f"party {me!r} sends its embeddings to the party that starts its role only ({sender!r}), "
                              f"not to {args[4]!r}")
        if request.kind == "pivodl-client":
            self._check_pivodl(sender, args)
        if not isinstance(request.session, str) or not SESSION.match(request.session):
            raise Refusal(f"party {me!r}: a StartRole names its coordinator runtime's session (32 hex digits, "
                          f"roles.new_session()), got {request.session!r}")
        return request.kind, args

    def _check_pivodl(self, sender: str, args: list) -> None:
        """A PIVODL client: its own table, the run's clients (distinct, with this party and the starter, all of
        the federation), no recorded view (an audit log of what it decrypted)."""
        me = self.party
        if len(args) < 6 or not isinstance(args[1], TableKey):
            raise Refusal(f"party {me!r} trains on its own table only (a TableKey)")
        parties = args[5]
        if (not isinstance(parties, list) or not all(isinstance(p, str) for p in parties)
                or len(set(parties)) != len(parties) or not {me, sender} <= set(parties)):
            raise Refusal(f"party {me!r}: a PIVODL client's clients are distinct party names with {me!r} and its "
                          f"starter {sender!r} among them, got {parties!r}")
        known = getattr(self.relay.client, "federation", None)
        if known is not None and set(parties) - set(known.names):
            raise Refusal(f"party {me!r}: clients {sorted(set(parties) - set(known.names))} are not in the federation")
        if len(args) > 6 and args[6]:
            raise Refusal(f"party {me!r} keeps no recorded view for other parties (record_view=False)")

    def check_keys(self, sender: str, args: list) -> None:
        """A ``trust_mailboxes(keys, ...)`` from ``sender`` names keys of ``sender`` and this party only."""
        keys = args[0] if args else None
        if not isinstance(keys, dict):
            raise Refusal(f"party {self.party!r}: trust_mailboxes takes a {{party: public key}} mapping")
        foreign = sorted(str(name) for name in keys if name not in (sender, self.party))
        if foreign:
            raise Refusal(f"party {self.party!r} takes a mailbox key only from the party it belongs to: {sender!r} "
                          f"(by its certificate) announced keys for {foreign}")

    # arguments -------------------------------------------------------------------------------
    def _resolved(self, value: Any, sender: str, instance: str) -> Any:
        """A record that stands for something of this party's own cluster, made here: roles of ``sender``'s
        runtime session only, the session of ``instance`` (the role being started or called)."""
        t = type(value)
        if t is Posted:  # a message its sender delivered here directly
            return self.relay.take((sender, instance), value)
        if t is RoleRef:
            return self.runtime.actor(self._key(sender, value.role, instance))
        if t is TableKey:
            if self.make_table is None:
                raise Refusal(f"party {self.party!r} serves no tables here")
            return self.make_table(self.party, self.runtime.actor(self._key(sender, value.role, instance)), value.key,
                                   value.timeout_s)
        if t is PoolSpec:
            cpus = self.policy.max_workers
            workers = min(value.workers or cpus, cpus)
            from ..actors import party_resource

            return TaskPool(party_resource(self.party), max(1, workers), self.timeout_s)
        if t in (list, tuple):
            return t(self._resolved(v, sender, instance) for v in value)
        if t is dict:
            return {k: self._resolved(v, sender, instance) for k, v in value.items()}
        return value

    def _key(self, sender: str, role: str, instance: str) -> str:
        key = self._roles.get((sender, role))
        if key is None or role.partition("@")[2] != instance.partition("@")[2]:
            raise Refusal(f"party {self.party!r} runs no role {role!r} for party {sender!r} in this session")
        return key

    def _served_open(self, args: list) -> list:
        """A store's ``open(key, source, ...)`` with the source this party serves under the file name asked for."""
        if len(args) < 2 or not isinstance(args[1], wire_type("PartySource")):
            raise Refusal(f"party {self.party!r}: a store opens a PartySource naming data it serves")
        asked = args[1]
        served = self.policy.data.get(asked.location) if asked.query is None else None
        if served is None:
            raise Refusal(f"party {self.party!r} does not serve {asked.location!r}: it serves {sorted(self.policy.data)} "
                          "(by file name; the path, ID column and any query are its own)")
        source = dataclasses.replace(served, categorical=tuple(asked.categorical) or served.categorical)
        return [args[0], source] + list(args[2:])


def served_data(paths: Mapping[str, str] | list[str], id_column: str | None, categorical: tuple = ()) -> dict:
    """``{file name: PartySource}`` of the files a party serves (each must exist on this machine)."""
    PartySource = wire_type("PartySource")  # ray_vfl.data.sources, a layer above, as the typed wire names it
    out = {}
    for path in paths:
        if not os.path.exists(path):
            raise ConfigError(f"--data {path!r} does not exist on this machine")
        name = os.path.basename(os.path.normpath(path))
        if name in out:
            raise ConfigError(f"two served files share the name {name!r}; serve files of different names")
        out[name] = PartySource(os.path.abspath(path), None, id_column, None, tuple(categorical))
    return out


def serve(federation_path: str, party: str, data: list[str], id_column: str | None, credential_paths: Mapping[str, str],
          listen: str | None = None, kinds: tuple[str, ...] | None = None, num_cpus: int | None = None,
          categorical: tuple = (), timeout_s: float = 600.0, stop: threading.Event | None = None,
          announce=print, make_table: Callable[..., Any] | None = None) -> None:
    """Serve ``party``'s roles until ``stop`` is set (or SIGTERM / Ctrl-C in the command): join or start the
    party's own Ray (a local one, ``address="local"``, unless ``RAY_ADDRESS`` names its cluster), run its
    gateway on ``listen`` (default: its address in the federation file) under the policy the arguments say."""
    from .federation_file import Federation
    from .gateway import Credentials, Gateway, GatewayClient, GatewayPolicy

    federation = Federation.from_yaml(federation_path)
    federation.party(party)
    credentials = Credentials.from_files(**credential_paths)
    served = served_data(data, id_column, categorical)
    runtime = Runtime(address="auto" if os.environ.get("RAY_ADDRESS") else "local", num_cpus=num_cpus,
                      timeout_s=timeout_s)
    policy = ServePolicy(party, served, tuple(kinds or ROLE_KINDS))
    peers = GatewayClient(party, credentials, federation, timeout_s)  # to the fellows of its roles (PIVODL's clients)
    server = PartyServer(policy, runtime, timeout_s, make_table, peers)
    ready = threading.Event()

    def handle(sender: str, role: str, method: str, args: list) -> Any:
        if not ready.wait(timeout_s):
            raise Refusal(f"party {party!r} has not finished starting its Ray")
        return server.handle(sender, role, method, args)

    # the port first: the Ray started next opens many ports of its own, and could take the gateway's
    gateway = Gateway(party, credentials, federation, GatewayPolicy(policy.gateway_allow_list()), handle, workers=16)
    port = gateway.start(listen)
    try:
        runtime.connect([party])
        server.policy = dataclasses.replace(policy, max_workers=runtime.party_cpus(party))
        ready.set()
        announce(f"serving party {party!r} on port {port}: roles {list(policy.kinds)}, data {sorted(served)} "
                 f"(pid {os.getpid()})", flush=True)
        stop = stop or threading.Event()
        while not stop.wait(0.5):
            pass
    finally:
        gateway.stop(1.0)
        peers.close()
        runtime.shutdown()
