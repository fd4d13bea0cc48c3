"""A trained SecureBoost model, spread over the party actors: prediction, evaluation, the trees as the label
party holds them, each party's own saved part (:meth:`FederatedModel.save`, :meth:`FederatedModel.load`).

:func:`ray_vfl.secureboost.protocol.train` returns one; the driver holds no tree, threshold or label of it,
only the parties' names and the handles of their actors.
"""

from __future__ import annotations

import os
import uuid
import warnings
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..data.dataset import VerticalDataset
from ..errors import ConfigError, DataError, DataWarning
from ..runtime.actors import Runtime
from ..runtime.comm import CommStats
from ..runtime.party import load_meta, save_parts, warn_unseen_categories
from ..trees.config import BoostConfig
from ..trees.kernels import transform_margin
from .active import ActiveParty
from .passive import PassiveParty

__all__ = ["FederatedModel"]

_ESTIMATORS = {"binary:logistic": "SecureBoostClassifier", "reg:squarederror": "SecureBoostRegressor",
               "multi:softprob": "SecureBoostClassifier", "multi:softmax": "SecureBoostClassifier"}


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

    def evaluate(self, data: VerticalDataset, n_trees: int | None = None) -> dict[str, float]:
        """Test metrics (logloss and AUC, or RMSE) computed by the label party from its own labels:
        the driver receives the figures only, which suits party-held data. An AUC that is undefined
        (rows of one class) comes back as NaN with a :class:`~ray_vfl.errors.DataWarning`."""
        n_trees = self._n_trees(n_trees)
        metrics = self._with_rows(data, lambda key, active: active.evaluate.remote(key, n_trees), "evaluate")
        if "auc" in metrics and not np.isfinite(metrics["auc"]):
            warnings.warn(f"AUC is undefined on these {data.n_rows} rows: they hold one class only; evaluate on "
                          "more rows, or split with train_test_split(..., stratify=True)", DataWarning, stacklevel=2)
        return metrics

    def _n_trees(self, n_trees: int | None) -> int:
        """The number of trees to predict with: all (``None``) or 1 to :attr:`n_trees`."""
        if n_trees is None:
            return self.n_trees
        if isinstance(n_trees, bool) or not isinstance(n_trees, (int, np.integer)) or not 1 <= n_trees <= self.n_trees:
            raise ConfigError(f"n_trees must be an integer in [1, {self.n_trees}] (the trees this model holds) or None "
                              f"for all of them, got {n_trees!r}")
        return int(n_trees)

    def predict_margin(self, data: VerticalDataset, n_trees: int | None = None) -> np.ndarray:
        """Raw margins of federated prediction for every row of ``data`` with its first ``n_trees``
        trees (all by default; :class:`~ray_vfl.errors.ConfigError` outside 1 .. :attr:`n_trees`).
        The active party hands them to the caller (whoever calls this method, on the label party's side)
        sealed to a key the caller's process made for this call
        (:meth:`ray_vfl.runtime.actors.Runtime.caller_box`)."""
        n_trees = self._n_trees(n_trees)
        box = self.runtime.caller_box()  # the margins come back sealed to a key made for this call

        def margins(key, active):
            return active.margins_for_caller.remote(key, n_trees, box.public_key)

        return box.open(self._with_rows(data, margins, "predict"), "margins",
                        {"n_rows": data.n_rows, "n_outputs": self.config.num_class}, [self.label_party])

    def _with_rows(self, data: VerticalDataset, call, role: str = "predict") -> Any:
        """Have every party load its rows of ``data``, run ``call(key, label party)`` and drop the rows."""
        VerticalDataset.ensure(data, role)
        if sorted(data.party_names) != sorted(self.order):
            raise DataError(f"prediction data must hold the parties {self.order}, got {data.party_names}")
        key = f"predict-{uuid.uuid4().hex[:8]}"
        try:
            tables = data.tables(self.runtime)
            calls = [(p, self._handle(p).load_rows.remote(key, tables[p])) for p in self.order]
            warn_unseen_categories(self.order, self.runtime.get(calls, "load prediction rows"), "prediction data")
            result = self.runtime.get([(self.label_party, call(key, self._handle(self.label_party)))], "prediction")[0]
        except (DataError, ConfigError):  # bad input: the parties drop what they loaded and stay ready
            self._drop_rows(key)
            raise
        self._drop_rows(key)
        return result

    def _drop_rows(self, key: str) -> None:
        self.runtime.get([(p, self._handle(p).drop_rows.remote(key)) for p in self.order], "cleanup")

    def predict(self, data: VerticalDataset, n_trees: int | None = None) -> np.ndarray:
        """Predictions (probabilities for the logistic objective and ``multi:softprob``, ``(n, K)``;
        class indices for ``multi:softmax``)."""
        return transform_margin(self.config.objective, self.predict_margin(data, n_trees))

    def classes(self) -> np.ndarray:
        """Multi-class: the training labels' classes, ascending, from the label party (the caller's side)."""
        return np.asarray(self.runtime.get([(self.label_party, self._handle(self.label_party).label_classes.remote())],
                                           "classes")[0])

    def trees(self):
        """The trees as the active party holds them (owner, record id, weights)."""
        return self.runtime.get([(self.label_party, self._handle(self.label_party).trees_snapshot.remote())], "trees")[0]

    def importance_stats(self) -> dict[str, Any]:
        """The label party's feature-importance figures (:meth:`ActiveParty.importance_stats`): split
        statistics of its own features, and per party the totals of each importance type."""
        return self.runtime.get([(self.label_party, self._handle(self.label_party).importance_stats.remote())],
                                "importances")[0]

    def feature_names(self) -> dict[str, list[str]]:
        """Each party's column names, in party order (the schema, nothing secret)."""
        names = self.runtime.get([(p, self._handle(p).feature_names.remote()) for p in self.order], "feature names")
        return dict(zip(self.order, names))

    def lookup_tables(self) -> dict[str, Any]:
        """Every party's lookup table. Diagnostic only: in a deployment each stays with its party."""
        parts = self.runtime.get([(p, self._handle(p).model_part.remote()) for p in self.order], "model parts")
        return {p: part["lookup"] for p, part in zip(self.order, parts)}

    def dump_trees(self, directory: str) -> dict[str, str]:
        """Each party writes its own view of the trees, thresholds included, to
        ``<directory>/<party>.trees.json`` on its own machine (XGBoost's ``dump_model``, per party): the
        label party the tree structure, leaf weights, every split's gain and cover and its own splits'
        thresholds; a passive party its split records with their thresholds. The driver gets the paths
        only: a party's thresholds never leave it (see :meth:`lookup_tables` for the diagnostic way)."""
        paths = {p: os.path.join(directory, f"{p}.trees.json") for p in self.order}
        self.runtime.get([(p, self._handle(p).dump_trees.remote(paths[p])) for p in self.order], "dump trees")
        return paths

    def save(self, directory: str) -> dict[str, str]:
        """Each party writes ``<directory>/<party>.json``, its own part only."""
        meta = {"order": self.order, "label_party": self.label_party, "n_trees": self.n_trees, "config": self.config.to_dict()}
        return save_parts(self.runtime, self.order, directory, meta, ".json", kind="secureboost")

    @classmethod
    def load(cls, directory: str, runtime: Runtime | None = None,
             objective: str | tuple[str, ...] | None = None) -> "FederatedModel":
        """Start one actor per party and have each read its own saved part; ``objective``, if given,
        must be the saved model's, or one of them (a classifier never loads a regressor's trees)."""
        meta = load_meta(directory, "FederatedModel.save", kind="secureboost")
        try:
            config = BoostConfig.from_dict(meta["config"])
            order, label_party, _ = list(meta["order"]), meta["label_party"], int(meta["n_trees"])
        except (KeyError, TypeError, ValueError) as exc:
            raise DataError(f"{directory!r} holds no complete SecureBoost federation file "
                            f"({type(exc).__name__}: {exc}); save the model again") from exc
        if label_party not in order:
            raise DataError(f"{directory!r}: the label party {label_party!r} is not among the parties {order}")
        if isinstance(objective, str):
            objective = (objective,)
        if objective is not None and config.objective not in objective:
            raise DataError(f"{directory!r} holds a {_ESTIMATORS[config.objective]} model (objective "
                            f"{config.objective!r}), not one with objective {' or '.join(map(repr, objective))}: load it with "
                            f"{_ESTIMATORS[config.objective]}.load_model")
        runtime = runtime or Runtime(timeout_s=config.timeout_s or 600.0)
        runtime.connect(meta["order"])
        calls = []
        for p in meta["order"]:
            pool = runtime.pool(p, config.workers_per_party)
            if p == meta["label_party"]:
                handle = runtime.spawn(p, ActiveParty, p, None, [], config, pool, meta["order"])
            else:
                handle = runtime.spawn(p, PassiveParty, p, None, [], config, pool)
            calls.append((p, handle.load_part.remote(os.path.join(directory, f"{p}.json"))))
        runtime.get(calls, "load")
        runtime.introduce(meta["order"])
        peers = {p: runtime.actor(p) for p in meta["order"] if p != meta["label_party"]}
        runtime.get([(meta["label_party"], runtime.actor(meta["label_party"]).set_peers.remote(peers))], "load")
        return cls(runtime, meta["order"], meta["label_party"], config, meta["n_trees"])
