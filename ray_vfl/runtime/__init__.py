"""The runtime layer: party actors on Ray, their task pools, and the one metered send path.

:mod:`.actors` (the :class:`Runtime` and its party actors), :mod:`.waiting` (waiting with blame,
and settling what a failed wait leaves unfetched), :mod:`.task_pool` (a party's crypto tasks),
:mod:`.comm` (messages and their byte counts), :mod:`.codec` (the typed wire payloads travel in,
never pickle), :mod:`.seal` (every message sealed for its receivers, proving its sender), :mod:`.local_ray` (a Ray started on this machine),
:mod:`.payload_shapes` (what a message carries, for the records), :mod:`.party` (what every party
actor shares: rows by key, records, its saved part), :mod:`.validation` (what each message kind
may carry, checked on receipt) and :mod:`.estimator` (what every scikit-learn style estimator
shares). Names load on first use, so a crypto task that needs only :mod:`.payload_shapes` does
not import Ray.
"""

from .. import _lazy_exports

_EXPORTS = {
    "Runtime": ".actors", "TaskPool": ".actors", "gather": ".waiting", "settle": ".waiting", "as_ref_list": ".actors",
    "party_resource": ".local_ray", "RESOURCE_UNITS": ".local_ray",
    "CommStats": ".comm", "Mailbox": ".comm", "Message": ".comm", "Record": ".comm",
    "FederatedEstimator": ".estimator", "PartyActor": ".party",
}
__getattr__, __dir__ = _lazy_exports(__name__, _EXPORTS)
__all__ = sorted(_EXPORTS)
