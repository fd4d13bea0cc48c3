"""The control plane across organisations: which roles a party may be asked to start, with which
methods open to the party that started them, and the typed records a request carries.

A coordinator asks another party to start a role (:class:`StartRole`) through that party's gateway; the
request travels on the typed wire (:mod:`ray_vfl.runtime.codec`), so everything in it is a payload or one
of the few records registered there: a :class:`~ray_vfl.trees.config.BoostConfig`, a
:class:`~ray_vfl.data.sources.PartySource` naming the data *by its file name*, and the three records of this
module, which stand for what only the called party can make on its own cluster:

* :class:`TableKey`: one of the called party's own tables (a :class:`~ray_vfl.data.store.TableRef`
  whose store is the called party's store), by the key its store gave it;
* :class:`PoolSpec`: the task pool the role fans its crypto out to (the called party sizes it from its
  own CPUs);
* :class:`RoleRef`: another role the called party runs for the same coordinator (its PSI actor handed to
  its store, say).

Every :class:`StartRole` carries the session of the coordinator's runtime that sends it (:func:`new_session`,
random per :class:`~.coordinator.FederatedRuntime`), and the role it starts is called by its *instance* name
``"<role>@<session>"`` (:func:`role_instance`): two runtimes of one coordinating party run and stop their own
roles, never each other's. A session grants nothing by itself: the called party runs an instance only for the
party whose certificate started it, and the gateway's allow-list is its role's (:func:`base_role`).

:data:`ROLE_KINDS` is what a party can serve at all: its data store, a PSI follower, a SecureBoost passive
party, a split-NN feature party and a PIVODL client, each with the methods a peer may call on it. Nothing else: a
method off the list (a store's ``rows``, which would hand over the raw table; a PSI party's ``received``, an audit
log; a PIVODL client's ``model_part`` or ``recorded_view``) is refused by the gateway before any argument is used.
:class:`ServePolicy` narrows that per party (``python -m ray_vfl.serve``).

A PIVODL client's peers are the other clients too, not only its starter: its start names the run's clients,
and those other than the starter (its *fellows*) may call two methods of it, ``deliver`` (their messages for it,
sent straight to its gateway, never through the coordinator) and ``mailbox_key`` (:mod:`.relay`).

Example
-------
>>> from ray_vfl.runtime.codec import decode, encode
>>> start = decode(encode(StartRole("psi", ["shop", TableKey("data", "source-1"), None, PoolSpec(0), False, True])))
>>> start.kind, start.args[1]
('psi', TableKey(role='data', key='source-1', timeout_s=600.0))
>>> ROLE_KINDS["store"].allows("rows")
False
"""

from __future__ import annotations

import importlib
import re
import secrets
from dataclasses import dataclass, field
from typing import Any, Mapping

from ...errors import ConfigError

__all__ = ["TableKey", "PoolSpec", "RoleRef", "StartRole", "RoleKind", "ROLE_KINDS", "COMMON_METHODS",
           "CONTROL_ROLE", "CONTROL_METHODS", "kind_of_class", "ServePolicy", "new_session", "role_instance",
           "base_role", "SESSION"]

CONTROL_ROLE = "control"
CONTROL_METHODS = ("start_role", "stop_role", "hello")
SESSION = re.compile(r"^[0-9a-f]{32}$")  # a runtime's session: 128 random bits, in hex
# what every party actor answers (ray_vfl.runtime.actors): probes, the mailbox key exchange, timelines
COMMON_METHODS = ("alive", "mailbox_key", "trust_mailboxes", "drain_timeline")


@dataclass(frozen=True)
class TableKey:
    """One of the called party's own tables, by its key in the called party's store of role ``role``."""

    role: str
    key: str
    timeout_s: float = 600.0


@dataclass(frozen=True)
class PoolSpec:
    """The task pool of a role started at the called party: ``workers`` asked for (0: the party's own
    choice); the called party caps it at its own CPUs."""

    workers: int = 0


@dataclass(frozen=True)
class RoleRef:
    """Another role the called party runs for the same caller, handed as an argument."""

    role: str


@dataclass(frozen=True)
class StartRole:
    """A request to start a role of kind ``kind`` (one of :data:`ROLE_KINDS`) with constructor ``args``, for
    the coordinator runtime of session ``session`` (:func:`new_session`)."""

    kind: str
    args: list = field(default_factory=list)
    session: str = ""


def new_session() -> str:
    """A coordinator runtime's session: 128 bits of the OS's entropy, in hex (:data:`SESSION`)."""
    return secrets.token_hex(16)


def role_instance(role: str, session: str) -> str:
    """The name a started role is called by: ``"<role>@<session>"``.

    >>> role_instance("data", "0" * 32) == "data@" + "0" * 32, base_role("data@" + "0" * 32), base_role("data")
    (True, 'data', 'data')
    """
    return f"{role}@{session}"


def base_role(name: str) -> str:
    """The role of an instance name (the name itself if it names no session): its allow-list is the role's."""
    return name.split("@", 1)[0]


@dataclass(frozen=True)
class RoleKind:
    """A kind of role a party can serve: its class (``"module:Class"``), the role name it is called by,
    and the methods the party that started it may call on it (besides :data:`COMMON_METHODS`).

    A role whose peers talk to each other names them: ``parties_arg`` is the index of its constructor's
    argument listing the parties of the run; the others of them (not the starter) are its *fellows*, who may
    call ``fellow_methods`` only (:mod:`.relay`: deliver their messages to it, fetch its mailbox key)."""

    cls: str
    role: str
    methods: tuple[str, ...]
    parties_arg: int | None = None
    fellow_methods: tuple[str, ...] = ()

    def allows(self, method: str) -> bool:
        return method in self.methods or method in COMMON_METHODS

    def load(self) -> type:
        module, name = self.cls.split(":")
        return getattr(importlib.import_module(module), name)


ROLE_KINDS: dict[str, RoleKind] = {
    # the party's tables: opened from the data it serves, aligned, split; never read out (no rows, ids, weights)
    "store": RoleKind("ray_vfl.data.store:PartyStore", "data", (
        "open", "schema", "select", "apply_split", "align", "drop", "source_reads", "comm_records")),
    # a PSI follower (the coordinator leads): rounds 2 and 3, and the result for its own store
    "psi": RoleKind("ray_vfl.psi.party:PsiParty", "psi", (
        "blind_own", "reblind", "apply_result", "id_kind", "comm_records")),
    # a SecureBoost passive party: the rounds the label party drives, prediction, its statistics
    "secureboost-passive": RoleKind("ray_vfl.secureboost.passive:PassiveParty", "secureboost", (
        "set_public_key", "histogram_layout", "begin_tree", "next_level", "route", "load_rows", "drop_rows",
        "unseen_categories", "comm_records", "op_counts", "feature_names", "n_features")),
    # a split-NN feature party: per-batch steps (its embedding out, its gradient in) and prediction embeddings;
    # never its weights, gradients, recorded view or a saved part (state, param_grads, recorded_view, *_part)
    "splitnn-nonlabel": RoleKind("ray_vfl.splitnn.network.parties:NonLabelParty", "splitnn", (
        "step", "embed", "load_rows", "drop_rows", "unseen_categories", "ping", "comm_records")),
    # a PIVODL client: the rounds of training (steps 1-6), prediction and evaluation (7), its statistics; never
    # its lookup table, labels, gradients, recorded view, attack scores or a saved part (model_part, skeleton,
    # released_weights, importance_stats, recorded_view, guess_scores, training_state, *_part, *_checkpoint);
    # its fellow clients (argument 5, the clients in order) deliver their messages and fetch its mailbox key
    "pivodl-client": RoleKind("ray_vfl.pivodl.client:Client", "pivodl", (
        "make_keys", "meet", "total_share", "aggregate", "open_total", "take_total", "start_margins", "begin_tree",
        "set_open_nodes", "propose", "sum_candidates", "forward", "score", "decide", "apply_wins",
        "apply_partitions", "apply_chosen", "finish_tree", "truncate", "route_start", "route_step",
        "prediction_share", "combine_shares", "eval_labelled", "take_eval_labelled", "eval_shares", "eval_sums",
        "eval_metrics", "load_rows", "drop_rows", "unseen_categories", "comm_records", "op_counts"),
        parties_arg=5, fellow_methods=("deliver", "mailbox_key")),
}


def kind_of_class(cls: type, party: str) -> str:
    """The role kind a coordinator's class stands for at another party, or ConfigError naming what can run."""
    spelled = f"{cls.__module__}:{cls.__qualname__}"
    for name, kind in ROLE_KINDS.items():
        if kind.cls == spelled:
            return name
    raise ConfigError(f"party {party!r} is on another organisation's cluster: it can be asked to run "
                      f"{sorted(ROLE_KINDS)}, not a {cls.__name__} (this protocol does not run across organisations yet)")


@dataclass(frozen=True)
class ServePolicy:
    """What one serving party agrees to: the role kinds it starts, the data it serves by file name
    (``{"shop.parquet": PartySource(...)}``), the most task workers a role may use, and which parties may
    start roles (default: every other party of the federation)."""

    party: str
    data: Mapping[str, Any]
    kinds: tuple[str, ...] = tuple(ROLE_KINDS)
    max_workers: int = 1
    starters: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        unknown = sorted(set(self.kinds) - set(ROLE_KINDS))
        if unknown:
            raise ConfigError(f"unknown role kind(s) {unknown}; a party can serve {sorted(ROLE_KINDS)}")

    def gateway_allow_list(self) -> dict[str, list[str]]:
        """Role -> methods, for the gateway (:class:`~ray_vfl.runtime.federation.gateway.GatewayPolicy`)."""
        allowed = {CONTROL_ROLE: list(CONTROL_METHODS)}
        for name in self.kinds:
            kind = ROLE_KINDS[name]
            allowed[kind.role] = list(kind.methods) + list(COMMON_METHODS) + list(kind.fellow_methods)
        return allowed
