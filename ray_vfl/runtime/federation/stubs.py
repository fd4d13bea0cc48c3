"""Another organisation's roles with the surface of Ray actor handles, and the dispatch at its end.

On the caller's cluster, :class:`RemoteHandle` is what a protocol holds for a role of a party on
another cluster: ``handle.method.remote(*args)`` returns an ``ObjectRef`` of the local cluster, as an
actor handle does, so rounds, ``Runtime.get`` and waiting stay as they are. The call runs as a Ray task
on the caller's own cluster (no CPU reserved), which sends it through the caller's
:class:`~ray_vfl.runtime.federation.gateway.GatewayClient`; top-level ``ObjectRef`` arguments are
resolved by Ray before they leave (their values travel, on the typed wire), and the reply comes back as
the task's result (``.options(num_returns=k)``: one reference per item of the tuple it returns, as an
actor method's). A reference inside a list, tuple or dict is lifted to a top-level argument of that call, so
Ray resolves it on the caller's cluster too and its value travels in its place. A message of a third party
among the values goes as a :class:`~.relay.Posted` record: its sender delivered it to the receiver directly
(:mod:`.relay`). At the called party, :func:`dispatcher` is its gateway's handler: it runs the method on the
party's own actor of that role (whose allow-list the gateway checked) and returns the result.

Example
-------
>>> spec = ClientSpec("shop", {"cert": "shop.pem", "key": "shop.key", "ca": "ca.pem"},
...                   {"parties": {"bank": {"gateway": "10.0.0.1:50051"}, "shop": {"gateway": "10.0.0.2:50051"}}})
>>> handle = RemoteHandle(spec, "bank", "party")
>>> handle                                  # no connection until a call
RemoteHandle(bank.party via shop's gateway client)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import ray

from ...errors import VFLError
from .federation_file import Federation
from .gateway import Credentials, GatewayClient

__all__ = ["ClientSpec", "RemoteHandle", "GatewayClientActor", "dispatcher", "wire_arg"]


@dataclass(frozen=True)
class ClientSpec:
    """What a Ray worker of the caller's cluster needs to make the caller's gateway client: its party,
    the paths of its certificate, key and CA (files on the caller's own nodes: the key never travels),
    the federation file's content, the timeout and any address overrides."""

    party: str
    credential_paths: Mapping[str, str]
    federation: Mapping[str, Any]
    timeout_s: float = 600.0
    addresses: Mapping[str, str] = field(default_factory=dict)

    def key(self) -> tuple:
        return (self.party, tuple(sorted(self.credential_paths.items())), repr(self.federation), self.timeout_s,
                tuple(sorted(self.addresses.items())))


_CLIENTS: dict[tuple, GatewayClient] = {}  # per worker process: one client (its TLS channels) per spec


def _client(spec: ClientSpec) -> GatewayClient:
    client = _CLIENTS.get(spec.key())
    if client is None:
        client = _CLIENTS[spec.key()] = GatewayClient(
            spec.party, Credentials.from_files(**spec.credential_paths), Federation.from_dict(spec.federation),
            spec.timeout_s, spec.addresses)
    return client


class _Slot:
    """Where a reference nested in an argument was (its value fills it in the caller's gateway client)."""

    __slots__ = ("index",)

    def __init__(self, index: int) -> None:
        self.index = index


def _lift(value: Any, refs: list) -> Any:
    """``value`` with every ``ObjectRef`` nested in its lists, tuples and dicts replaced by a :class:`_Slot`,
    the references appended to ``refs`` (they become top-level arguments of the client's call: Ray resolves
    them on the caller's cluster and their values travel)."""
    t = type(value)
    if isinstance(value, ray.ObjectRef):
        refs.append(value)
        return _Slot(len(refs) - 1)
    if t in (list, tuple):
        return t(_lift(v, refs) for v in value)
    if t is dict:
        return {k: _lift(v, refs) for k, v in value.items()}
    return value


def _filled(value: Any, values: tuple) -> Any:
    t = type(value)
    if t is _Slot:
        return values[value.index]
    if t in (list, tuple):
        return t(_filled(v, values) for v in value)
    if t is dict:
        return {k: _filled(v, values) for k, v in value.items()}
    return value


def _send(spec: ClientSpec, n_ready: int, n_nested: int, rest: tuple) -> Any:
    """Call ``rest[n_ready + n_nested:]`` (target, role, method, args) through the caller's gateway client,
    its slots filled with ``rest[n_ready:n_ready + n_nested]`` (resolved by Ray, as are the role starts
    ``rest[:n_ready]`` the call waits for); a message of a third party goes as :class:`~.relay.Posted`
    (its sender delivered it to the target directly, :mod:`.relay`)."""
    from .relay import posted_for

    nested = rest[n_ready:n_ready + n_nested]
    target, role, method, *args = rest[n_ready + n_nested:]
    args = [posted_for(_filled(a, nested), spec.party, target) for a in args]
    return _client(spec).call(target, role, method, *args)


@ray.remote(num_cpus=0, max_retries=0)
def _gateway_call(spec: ClientSpec, n_ready: int, n_nested: int, *rest: Any) -> Any:
    return _send(spec, n_ready, n_nested, rest)


@ray.remote(num_cpus=0, max_restarts=0, max_concurrency=64)
class GatewayClientActor:
    """The caller's gateway client as one threaded actor of its cluster: every remote handle of a
    :class:`~ray_vfl.runtime.federation.coordinator.FederatedRuntime` calls through it, so the TLS
    channels are made once and reused, whichever local actor or driver calls."""

    def __init__(self, spec: ClientSpec) -> None:
        self.spec = spec

    def call(self, target: str, role: str, method: str, *args: Any) -> Any:
        return _send(self.spec, 0, 0, (target, role, method, *args))

    def call_with(self, n_ready: int, n_nested: int, *rest: Any) -> Any:
        """:meth:`call` once ``rest[:n_ready]`` are done (the starts of the roles the call names, as
        references: Ray resolves them first, and a failed start fails this call with its error), with the values
        of the ``n_nested`` references that were nested in the arguments filled into their slots (:func:`_send`)."""
        return _send(self.spec, n_ready, n_nested, rest)

    def close(self) -> None:
        client = _CLIENTS.pop(self.spec.key(), None)
        if client is not None:
            client.close()


def readiness(value: Any) -> list:
    """The pending starts (``ObjectRef``) of the remote roles ``value`` names: its handles and its tables'
    stores, however nested; a call naming them goes once they are done."""
    t = type(value)
    if t is RemoteHandle:
        return [] if value.ready is None else [value.ready]
    if t.__name__ == "TableRef" and type(getattr(value, "store", None)) is RemoteHandle:
        return readiness(value.store)
    if t in (list, tuple):
        return [r for v in value for r in readiness(v)]
    if t is dict:
        return [r for v in value.values() for r in readiness(v)]
    return []


def wire_arg(value: Any, target: str) -> Any:
    """``value`` as an argument for ``target``'s gateway: a handle of one of ``target``'s own roles
    becomes a :class:`~.roles.RoleRef`, a reference to one of its tables a :class:`~.roles.TableKey`, a
    task pool a :class:`~.roles.PoolSpec` (the called party resolves each on its own cluster); a handle
    or table of a third party is refused (a message for a third party goes to it directly)."""
    from ..task_pool import TaskPool
    from .roles import PoolSpec, RoleRef, TableKey

    t = type(value)
    if t is RemoteHandle:
        if value.target != target:
            raise VFLError(f"a handle of party {value.target!r}'s role {value.role!r} cannot be handed to party "
                           f"{target!r}: across organisations a party calls only its own roles and the caller's")
        return RoleRef(value.role)
    if t.__name__ == "TableRef" and hasattr(value, "store"):  # a party's table (ray_vfl.data.store, a layer above)
        store = value.store
        if type(store) is not RemoteHandle or store.target != target:
            raise VFLError(f"party {value.party!r}'s table cannot be handed to party {target!r}: only the party "
                           "holding a table resolves it")
        return TableKey(store.role, value.key, float(value.timeout_s))
    if t is TaskPool:
        return PoolSpec(0 if value.resource is None else int(value.workers))
    if t in (list, tuple):
        return t(wire_arg(v, target) for v in value)
    if t is dict:
        return {k: wire_arg(v, target) for k, v in value.items()}
    return value


class _RemoteMethod:
    def __init__(self, handle: "RemoteHandle", method: str, num_returns: int = 1) -> None:
        self._handle, self._method, self._num_returns = handle, method, num_returns

    def options(self, num_returns: int = 1, **other: Any) -> "_RemoteMethod":
        """As an actor method's: ``num_returns`` references, one per item of the tuple the method returns."""
        if other:
            raise VFLError(f"a role at another organisation takes the option num_returns only, got {sorted(other)}")
        return _RemoteMethod(self._handle, self._method, int(num_returns))

    def remote(self, *args: Any) -> Any:
        h = self._handle
        ready = readiness(h) + readiness(list(args))
        nested: list = []  # references inside lists, tuples and dicts: top-level arguments of the client's call
        args = tuple(a if isinstance(a, ray.ObjectRef) else _lift(wire_arg(a, h.target), nested) for a in args)
        rest = (*ready, *nested, h.target, h.role, self._method, *args)
        if h.client is not None:
            return h.client.call_with.options(num_returns=self._num_returns).remote(len(ready), len(nested), *rest)
        return _gateway_call.options(num_returns=self._num_returns).remote(h.spec, len(ready), len(nested), *rest)


class RemoteHandle:
    """Role ``role`` of party ``target`` on another cluster, called like a Ray actor handle (through
    ``client``, a :class:`GatewayClientActor`, if given; else through a Ray task per call). ``ready``: the
    role's start, still under way (an ``ObjectRef`` of the client's ``start_role`` call): every call waits
    for it (in Ray, not here) and fails with its error if it failed, as a call of an actor whose constructor
    raised does."""

    def __init__(self, spec: ClientSpec, target: str, role: str, client: Any = None,
                 ready: ray.ObjectRef | None = None) -> None:
        if target == spec.party:
            raise VFLError(f"party {spec.party!r} holds its own roles as actors of its cluster, not remote handles")
        if ready is not None and client is None:
            raise VFLError("a role still starting is called through a gateway client actor")
        self.spec, self.target, self.role, self.client, self.ready = spec, target, role, client, ready

    def __getattr__(self, method: str) -> _RemoteMethod:
        if method.startswith("_"):
            raise AttributeError(method)
        return _RemoteMethod(self, method)

    def __repr__(self) -> str:
        return f"RemoteHandle({self.target}.{self.role} via {self.spec.party}'s gateway client)"


def dispatcher(actors: Mapping[str, Any], timeout_s: float = 600.0, party: str = "?") -> Callable[[str, str, str, list], Any]:
    """A gateway handler running each allowed call on this party's (``party``'s) actor of the role: ``actors``
    maps a role to its actor handle on this party's cluster. The caller's name is the gateway's (from its
    certificate); a role this party does not run is said so; an actor's error is the library's
    (:func:`~ray_vfl.runtime.waiting.gather`: a ProtocolError stays one, any fault a PartyFailedError)."""
    from ..waiting import gather

    def handle(sender: str, role: str, method: str, args: list) -> Any:
        actor = actors.get(role)
        if actor is None:
            raise VFLError(f"this party runs no role {role!r} (it runs {sorted(actors)})")
        return gather([(party, getattr(actor, method).remote(*args))], f"{role}.{method}", timeout_s)[0]
    return handle
