"""SecureBoost (Cheng et al., "SecureBoost: A Lossless Federated Learning Framework", 2019/2021).

One active party holds the labels (and some features); passive parties hold
other features of the same rows. The active party encrypts gradients with its
Paillier key; passive parties sum ciphertexts into their own bins; the active
party decrypts the bin sums and finds every split. Trees grow level by level,
with histogram subtraction (build the smaller child, derive its sibling).

Rounds per tree (``P`` passive parties, ``D`` = max_depth):

=====  ======================  =================================  ==========================================
round  sender -> receiver      payload                            what the receiver learns
=====  ======================  =================================  ==========================================
once   active -> passive        public key                         nothing secret
1      active -> passive       Enc(g), Enc(h) per row             nothing (semantic security)
per d  active -> passive       open node of every row, which      the instance space of each node (as in
       (level_plan)            histograms to build / derive       SecureBoost)
per d  passive -> active       Enc(bin sums) per node, feature    bin sums of g and h (not per row)
per d  active -> passive p     (node, p's feature, p's bin)       which of its own bins won; never another
       (split_orders)          for the splits p won               party's split or any threshold
per d  passive p -> active     left/right of each row of those    the partition of the node's rows
       (partition)             nodes
=====  ======================  =================================  ==========================================

Prediction (``D`` rounds): the active party sends each passive party the
(row, record id) pairs waiting at its nodes and gets one bit per pair back.
The passive party learns which of its nodes each row reaches; the active
party learns the path, never a threshold. All calls below are submitted
without waiting: Ray chains them by their object references, and the driver
blocks once per tree.
"""

from __future__ import annotations

import json
import logging
import os
import uuid
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np

from ..binning import check_encodable
from ..callbacks import CallbackList, TrainingCallback
from ..comm import CommStats
from ..config import BoostConfig
from ..dataset import VerticalDataset
from ..errors import ConfigError, DataError
from ..kernels import transform_margin
from ..runtime import Runtime, as_ref_list
from .active import ActiveParty
from .passive import PassiveParty

__all__ = ["train", "FederatedModel"]

# What the parties' crypto tasks import; loaded while the label party generates its keys.
_TASK_MODULES = ("ray_vfl.secureboost.active", "ray_vfl.secureboost.passive", "ray_vfl.crypto.paillier", "ray_vfl.crypto.ou")

log = logging.getLogger(__name__)


@dataclass
class FederatedModel:
    """A trained SecureBoost model, spread over the party actors.

    The active party's actor holds the trees and leaf weights; every party's
    actor holds its own lookup table. Use :meth:`predict` for federated
    prediction, :meth:`save` to have each party write its own part.

    Example
    -------
    >>> model = train(Runtime(), train_data, BoostConfig(backend="plain"))  # doctest: +SKIP
    >>> model.predict(test_data)[:3]                                        # doctest: +SKIP
    >>> model.save("model/"); FederatedModel.load("model/").predict(test_data)  # doctest: +SKIP
    """

    runtime: Runtime
    order: list[str]
    label_party: str
    config: BoostConfig
    n_trees: int
    history: dict[str, list[dict[str, float]]] = field(default_factory=dict)
    comm_stats: CommStats = field(default_factory=CommStats)
    op_counts: dict[str, int] = field(default_factory=dict)
    best_iteration: int | None = None

    @property
    def passives(self) -> list[str]:
        return [p for p in self.order if p != self.label_party]

    def _handle(self, party: str):
        return self.runtime.actor(party)

    def predict_margin(self, data: VerticalDataset, n_trees: int | None = None) -> np.ndarray:
        """Raw margins of federated prediction for every row of ``data``."""
        if sorted(data.party_names) != sorted(self.order):
            raise DataError(f"prediction data must hold the parties {self.order}, got {data.party_names}")
        key = f"predict-{uuid.uuid4().hex[:8]}"
        calls = [(p, self._handle(p).load_rows.remote(key, data.features[p])) for p in self.order]
        self.runtime.get(calls, "load prediction rows")
        margin_ref, refs = _route(self, key, 0, n_trees or self.n_trees)
        margin = self.runtime.get(refs + [(self.label_party, margin_ref)], "prediction")[-1]
        self.runtime.get([(p, self._handle(p).drop_rows.remote(key)) for p in self.order], "cleanup")
        base = self.runtime.get([(self.label_party, self._handle(self.label_party).get_base_margin.remote())], "model")[0]
        return margin + base

    def predict(self, data: VerticalDataset, n_trees: int | None = None) -> np.ndarray:
        """Predictions (probabilities for the logistic objective)."""
        return transform_margin(self.config.objective, self.predict_margin(data, n_trees))

    def trees(self):
        """The trees as the active party holds them (owner, record id, weights)."""
        return self.runtime.get([(self.label_party, self._handle(self.label_party).trees_snapshot.remote())], "trees")[0]

    def lookup_tables(self) -> dict[str, Any]:
        """Every party's lookup table. Diagnostic only: in a deployment each stays with its party."""
        parts = self.runtime.get([(p, self._handle(p).model_part.remote()) for p in self.order], "model parts")
        return {p: part["lookup"] for p, part in zip(self.order, parts)}

    def save(self, directory: str) -> dict[str, str]:
        """Each party writes ``<directory>/<party>.json``, its own part only."""
        os.makedirs(directory, exist_ok=True)
        paths = {p: os.path.join(directory, f"{p}.json") for p in self.order}
        self.runtime.get([(p, self._handle(p).save_part.remote(paths[p])) for p in self.order], "save")
        meta = {"order": self.order, "label_party": self.label_party, "n_trees": self.n_trees, "config": self.config.to_dict()}
        with open(os.path.join(directory, "federation.json"), "w", encoding="utf-8") as fh:
            json.dump(meta, fh)
        return paths

    @classmethod
    def load(cls, directory: str, runtime: Runtime | None = None) -> "FederatedModel":
        """Start one actor per party and have each read its own saved part."""
        with open(os.path.join(directory, "federation.json"), encoding="utf-8") as fh:
            meta = json.load(fh)
        config = BoostConfig.from_dict(meta["config"])
        runtime = runtime or Runtime(timeout_s=config.timeout_s)
        runtime.connect(meta["order"])
        calls = []
        for p in meta["order"]:
            pool = runtime.pool(p, config.workers_per_party)
            if p == meta["label_party"]:
                handle = runtime.spawn(p, ActiveParty, p, None, [], config, pool, None, meta["order"])
            else:
                handle = runtime.spawn(p, PassiveParty, p, None, [], config, pool)
            calls.append((p, handle.load_part.remote(os.path.join(directory, f"{p}.json"))))
        runtime.get(calls, "load")
        return cls(runtime, meta["order"], meta["label_party"], config, meta["n_trees"])


def _route(model: FederatedModel, key: str, first: int, end: int):
    """Submit the prediction rounds for trees ``[first, end)``; returns (margin ref, calls)."""
    active = model._handle(model.label_party)
    passives = [(p, model._handle(p)) for p in model.passives]
    n = len(passives)
    calls = []
    queries = as_ref_list(active.route_start.options(num_returns=n).remote(key, first, end), n)
    # A row meets at most max_depth internal nodes, so max_depth rounds of answers reach every leaf.
    for depth in range(1, model.config.max_depth + 1):
        answers = [h.route.remote(key, q) for (p, h), q in zip(passives, queries)]
        calls += [(p, a) for (p, _), a in zip(passives, answers)]
        if depth < model.config.max_depth:
            queries = as_ref_list(active.route_step.options(num_returns=n).remote(key, depth, *answers), n)
    return active.route_finish.remote(key, *answers), calls


def train(
    runtime: Runtime,
    data: VerticalDataset,
    config: BoostConfig,
    eval_sets: Mapping[str, VerticalDataset] | None = None,
    callbacks: Sequence[TrainingCallback] = (),
) -> FederatedModel:
    """Train SecureBoost on ``data`` with one actor per party.

    Parameters
    ----------
    runtime : Runtime
        Owns the Ray connection and the actors.
    data : VerticalDataset
        Training rows; ``data.label_party`` becomes the active party.
    config : BoostConfig
        Hyper-parameters and the crypto backend.
    eval_sets : mapping of str to VerticalDataset, optional
        Labelled data sets evaluated after every tree (federated prediction).
    callbacks : sequence of TrainingCallback
        Progress bar, evaluation logging, early stopping.

    Returns
    -------
    FederatedModel

    Example
    -------
    >>> from ray_vfl import Runtime, BoostConfig, vertical_split, load_credit   # doctest: +SKIP
    >>> data = vertical_split(load_credit(), 2, label="default.payment.next.month")  # doctest: +SKIP
    >>> model = train(Runtime(), data, BoostConfig(n_trees=3, backend="plain"))      # doctest: +SKIP
    """
    _check_training_input(data, config, eval_sets or {})
    order = data.party_names
    active_name = data.label_party
    passive_names = [p for p in order if p != active_name]
    runtime.connect(order)
    pools = {p: runtime.pool(p, config.workers_per_party) for p in order}
    warm = [(p, ref) for p in order for ref in pools[p].warm_up(_TASK_MODULES)] if config.backend != "plain" else []
    cats = data.categorical
    active = runtime.spawn(active_name, ActiveParty, active_name, data.features[active_name], cats.get(active_name, []),
                           config, pools[active_name], data.label, order)
    passives = [(p, runtime.spawn(p, PassiveParty, p, data.features[p], cats.get(p, []), config, pools[p])) for p in passive_names]
    n = len(passives)
    key_msg = active.public_key_message.remote()
    setup = warm + [(active_name, key_msg)] + [(p, h.set_public_key.remote(key_msg)) for p, h in passives]
    model = FederatedModel(runtime, order, active_name, config, 0)
    for key, eval_data in (eval_sets or {}).items():
        setup += [(p, runtime.actor(p).load_rows.remote(key, eval_data.features[p])) for p in order]
        setup.append((active_name, active.set_eval_labels.remote(key, eval_data.label)))
    runtime.get(setup, "setup", config.timeout_s)

    cb = CallbackList(callbacks)
    cb.before_training(config)
    for t in range(config.n_trees):
        gh, plan = active.start_tree.options(num_returns=2).remote(t)
        calls = [(p, h.receive_gradients.remote(gh)) for p, h in passives]
        for depth in range(config.max_depth):
            own = active.own_histograms.remote()
            hists = [h.histograms.remote(plan) for _, h in passives]
            orders = as_ref_list(active.find_splits.options(num_returns=n).remote(depth, *hists), n)
            partitions = [h.apply_splits.remote(o) for (_, h), o in zip(passives, orders)]
            calls += [(active_name, own)] + [(p, r) for (p, _), r in zip(passives, hists + partitions)]
            plan = active.apply_partitions.remote(depth, *partitions)
            calls.append((active_name, plan))
        calls.append((active_name, active.finish_tree.remote()))
        wanted = {"train": len(calls) - 1}
        for key in eval_sets or {}:
            margin_ref, route_calls = _route(model, key, t, t + 1)
            calls += route_calls + [(active_name, active.record_eval.remote(key, margin_ref))]
            wanted[key] = len(calls) - 1
        results = runtime.get(calls, f"tree {t}", config.timeout_s)
        model.n_trees = t + 1
        logs = {key: results[i] for key, i in wanted.items()}
        if cb.after_iteration(t, logs):
            break
    cb.after_training(model)
    if cb.best_iteration is not None:
        model.best_iteration = cb.best_iteration
        model.n_trees = cb.best_iteration + 1
        runtime.get([(active_name, active.truncate.remote(model.n_trees))], "truncate", config.timeout_s)
    model.history = runtime.get([(active_name, active.history_snapshot.remote())], "history", config.timeout_s)[0]
    records = runtime.get([(p, runtime.actor(p).comm_records.remote()) for p in order], "communication statistics", config.timeout_s)
    model.comm_stats = CommStats(r for party_records in records for r in party_records)
    counts = runtime.get([(p, runtime.actor(p).op_counts.remote()) for p in order], "operation counts", config.timeout_s)
    model.op_counts = dict(sum((Counter(c) for c in counts), Counter()))
    for key in eval_sets or {}:
        runtime.get([(p, runtime.actor(p).drop_rows.remote(key)) for p in order], "cleanup", config.timeout_s)
    return model


def _check_training_input(data: VerticalDataset, config: BoostConfig, eval_sets: Mapping[str, VerticalDataset]) -> None:
    if not isinstance(config, BoostConfig):
        raise ConfigError(f"config must be a BoostConfig, got {type(config).__name__}")
    if data.label_party is None:
        raise DataError("no party holds labels; build the dataset with label= naming the label column")
    data.check_labels(config.objective)
    if len(data.party_names) < 2:
        raise DataError("SecureBoost needs the label party and at least one passive party; got one party")
    for party, frame in data.features.items():
        check_encodable(frame, data.categorical.get(party, []), party)
    for key, eval_data in eval_sets.items():
        if eval_data.party_names != data.party_names or eval_data.label_party != data.label_party:
            raise DataError(f"eval set {key!r} must have the training parties {data.party_names} and the same label party")
        eval_data.check_labels(config.objective)
        for p in data.party_names:
            if list(eval_data.features[p].columns) != list(data.features[p].columns):
                raise DataError(f"eval set {key!r}: party {p!r} has columns {list(eval_data.features[p].columns)}, "
                                f"training had {list(data.features[p].columns)}")
