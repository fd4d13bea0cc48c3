"""The coordinating party's runtime across organisations: its own roles are actors of its own Ray
cluster, every other party's roles are :class:`~.stubs.RemoteHandle` stubs reached through the parties'
gateways.

:class:`FederatedRuntime` has the surface of :class:`~ray_vfl.runtime.actors.Runtime`, so the protocols
(SecureBoost's rounds, split NN's steps, PIVODL's rounds, PSI, the party-held data's stores), ``Runtime.get``, ``Calls`` and the view audit
run unchanged: ``spawn`` / ``spawn_helper`` of another party sends a :class:`~.roles.StartRole` request to
that party's gateway (its :class:`~.roles.ServePolicy` decides) and returns without waiting, so the parties
start their roles side by side (each call of the handle goes after the start, and fails with its error if
the party refused it), ``handle.method.remote(...)`` returns an ``ObjectRef`` of this cluster, and a failed or unreachable party surfaces as
:class:`~ray_vfl.errors.PartyFailedError` naming it. The calls go through one
:class:`~.stubs.GatewayClientActor` of this cluster (its TLS channels made once).

Example
-------
>>> rt = FederatedRuntime("federation.yaml", "bank", {"cert": "bank.pem", "key": "bank.key", "ca": "ca.pem"})  # doctest: +SKIP
>>> data = VerticalDataset.from_files({"bank": "bank.csv", "shop": "shop.parquet"}, id_column="cid",  # doctest: +SKIP
...                                   label="y", align="psi", runtime=rt)
>>> SecureBoostClassifier(runtime=rt).fit(data)                                                       # doctest: +SKIP
"""

from __future__ import annotations

import logging
import uuid
from typing import Any, Mapping, Sequence

import ray

from ...errors import VFLError
from ..actors import Runtime
from ..task_pool import TaskPool
from .federation_file import Federation
from .gateway import Credentials
from .roles import CONTROL_ROLE, ROLE_KINDS, StartRole, kind_of_class, new_session, role_instance
from .stubs import ClientSpec, GatewayClientActor, RemoteHandle, readiness, wire_arg

__all__ = ["FederatedRuntime"]

log = logging.getLogger(__name__)

_STOP_S = 5.0  # how long stopping another party's role may take (best effort: it may be gone)


class FederatedRuntime(Runtime):
    """The runtime of party ``party`` in the federation of ``federation`` (a ``federation.yaml`` path or
    its parsed :class:`Federation`), with its certificate, key and CA at ``credential_paths``
    (``{"cert", "key", "ca"}``: files on this party's nodes; the key never travels). ``addresses`` overrides
    parties' gateway addresses (tests); the other arguments are :class:`Runtime`'s."""

    def __init__(self, federation: str | Federation, party: str, credential_paths: Mapping[str, str],
                 address: str | None = None, num_cpus: int | None = None, timeout_s: float = 600.0,
                 addresses: Mapping[str, str] | None = None) -> None:
        super().__init__(address, num_cpus, timeout_s)
        self.federation = federation if isinstance(federation, Federation) else Federation.from_yaml(federation)
        self.federation.party(party)
        Credentials.from_files(**credential_paths)  # unreadable files: said now, before anything starts
        self.party = party
        content = {"parties": {p.name: {"gateway": p.address, "certificate_name": p.certificate_name}
                               for p in self.federation.parties}}
        self.spec = ClientSpec(party, dict(credential_paths), content, timeout_s, dict(addresses or {}))
        self._client = None
        # this runtime's roles at the other parties are its own: another runtime of this party (another job,
        # a benchmark's second run) starts and stops its own (a session names roles, it grants nothing)
        self.session = new_session()

    # connection ------------------------------------------------------------------------------
    def is_remote(self, party: str) -> bool:
        return party != self.party

    def connect(self, parties: Sequence[str]) -> None:
        """Attach to or start this party's own Ray; the other parties must be in the federation file."""
        for p in parties:
            self.federation.party(p)  # ConfigError for a party outside the federation
        super().connect([self.party])
        if self._client is None:
            self._client = GatewayClientActor.options(
                name=f"vfl-gateway-client-{uuid.uuid4().hex[:8]}").remote(self.spec)

    def party_nodes(self, party: str) -> dict[str, int]:
        return {} if self.is_remote(party) else super().party_nodes(party)

    def pool(self, party: str, workers: int | None = None) -> TaskPool:
        """This party's task pool; another party's stands for the pool it makes itself (its own CPUs)."""
        if self.is_remote(party):
            return TaskPool(None, 1, self.timeout_s)
        return super().pool(party, workers)

    # roles -----------------------------------------------------------------------------------
    def _spawn(self, key: str, party: str, cls: type, args: tuple, kwargs: dict):
        if not self.is_remote(party):
            return super()._spawn(key, party, cls, args, kwargs)
        if kwargs:
            raise VFLError(f"roles at another organisation take positional arguments only, got {sorted(kwargs)}")
        kind = kind_of_class(cls, party)
        previous = self._actors.get(key)
        if self._classes.get(key) is not cls:  # the same kind is re-initialised at the party (its policy checks again)
            self.kill(key)
        elif isinstance(previous, RemoteHandle) and previous.ready is not None:  # its last start first, whatever came of it
            ray.wait([previous.ready], timeout=self.timeout_s)
        request = StartRole(kind, list(wire_arg(list(args), party)), self.session)
        self.connect([party])
        # not waited for: the parties start their roles side by side; every call of the handle goes after the start
        # (the roles and tables it names too) and fails with the start's error, naming the party, if it failed
        needed = readiness(list(args))
        started = self._client.call_with.remote(len(needed), 0, *needed, party, CONTROL_ROLE, "start_role", request)
        handle = RemoteHandle(self.spec, party, role_instance(ROLE_KINDS[kind].role, self.session), self._client,
                              ready=started)
        self._actors[key] = handle
        self._classes[key] = cls
        return handle

    def introduce(self, keys: Sequence[str], timeout_s: float | None = None) -> None:
        """:meth:`Runtime.introduce`, each other organisation's role handed only its own key and this party's:
        a serving party takes keys from the coordinator under these two names only (its keys are pinned to
        certificate names, :mod:`.serving`), so another serving party's key never travels through here: a role
        whose fellows are other serving parties (a PIVODL client) fetches their keys from their gateways
        (:mod:`.relay`)."""
        keys = list(keys)
        named = self.get([(k.split(":")[0], self.actor(k).mailbox_key.remote()) for k in keys], "introduce", timeout_s)
        directory: dict[str, bytes] = {}
        for name, public in named:
            if name in directory:
                raise VFLError(f"two actors introduced together have a mailbox named {name!r}; introduce "
                               "each group of talking actors on its own")
            directory[name] = public
        self._mailbox_keys.update({name: public for key, (name, public) in zip(keys, named) if ":" not in key})
        calls = []
        for k in keys:
            party = k.split(":")[0]
            handed = ({n: v for n, v in directory.items() if n in (party, self.party)} if self.is_remote(party)
                      else directory)
            calls.append((party, self.actor(k).trust_mailboxes.remote(handed, self._seal_messages)))
        self.get(calls, "introduce", timeout_s)

    def control(self, party: str, method: str, *args: Any, timeout_s: float | None = None) -> Any:
        """Call ``party``'s control role (``start_role``, ``stop_role``, ``hello``) and wait for the answer."""
        if self._client is None:
            self.connect([party])
        ref = self._client.call.remote(party, CONTROL_ROLE, method, *args)
        return self.get([(party, ref)], f"control.{method}", timeout_s)[0]

    def kill(self, party: str) -> None:
        handle = self._actors.get(party)
        if not isinstance(handle, RemoteHandle):
            return super().kill(party)
        self._actors.pop(party, None)
        self._classes.pop(party, None)
        try:  # best effort: a party that stopped (or a role that never started) has nothing left to stop
            ready = readiness(handle)
            ray.get(self._client.call_with.remote(len(ready), 0, *ready, handle.target, CONTROL_ROLE, "stop_role",
                                                  handle.role), timeout=_STOP_S)
        except Exception:  # noqa: BLE001 - unreachable or gone
            log.debug("could not stop %s.%s", handle.target, handle.role)

    def _party_of_actor(self, actor_id) -> str:
        for party, handle in self._actors.items():
            if actor_id is not None and not isinstance(handle, RemoteHandle) and handle._actor_id.hex() == actor_id:
                return party
        return "?"

    def shutdown(self) -> None:
        self.kill_all()
        if self._client is not None:
            try:
                ray.get(self._client.close.remote(), timeout=_STOP_S)
                ray.kill(self._client, no_restart=True)
            except Exception:  # noqa: BLE001 - Ray already gone
                log.debug("gateway client already gone")
            self._client = None
        super().shutdown()

