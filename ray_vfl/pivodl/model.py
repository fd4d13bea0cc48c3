"""A trained PIVODL model: the driver's handle on the client actors that hold it."""

from __future__ import annotations

import os
import secrets
import uuid
from dataclasses import dataclass, field

import numpy as np

from ..data.dataset import VerticalDataset
from ..errors import ConfigError, DataError
from ..runtime.actors import Runtime
from ..runtime.comm import CommStats
from ..runtime.party import load_meta, save_parts, warn_unseen_categories
from ..trees.kernels import transform_margin
from .client import Client
from .config import PIVODLConfig
from ..runtime.calls import Calls
from .rounds import evaluate, route

__all__ = ["PIVODLModel"]


@dataclass
class PIVODLModel:
    """A trained PIVODL model, spread over the client actors: every client holds its lookup table and
    the weights of the leaves it holds (exact; clipped to ``[-C, C]`` under partial DP, before the noise
    that only the released copies carry); the tree shapes are known to every client. ``n_trees`` counts
    rounds: ``K`` trees each with ``K`` classes (one per class), one otherwise; the margins of a
    multi-class model are ``(rows, K)``. ``classes``: the label values the caller mapped to
    ``0 .. K-1`` before splitting (:class:`~ray_vfl.pivodl.estimator.PIVODLClassifier`), kept with the
    driver's part of a saved model.

    Example
    -------
    >>> model = train(Runtime(), data, PIVODLConfig(backend="plain"))  # doctest: +SKIP
    >>> model.predict(test)[:3]                                         # doctest: +SKIP
    """

    runtime: Runtime
    order: list[str]
    config: PIVODLConfig
    n_trees: int
    comm_stats: CommStats = field(default_factory=CommStats)
    op_counts: dict[str, int] = field(default_factory=dict)
    op_counts_by_client: dict[str, dict[str, int]] = field(default_factory=dict)
    history: dict[str, list[dict[str, float]]] = field(default_factory=dict)
    epsilon: float | None = None
    best_iteration: int | None = None
    label_party: None = None  # no single label party (what checkpoints record of a federation)
    classes: list | None = None  # multi-class: the caller's label values of classes 0 .. K-1

    def _calls(self) -> Calls:
        return Calls(self.runtime, self.order, self.config.timeout_s or self.runtime.timeout_s)

    def predict_margin(self, data: VerticalDataset, n_trees: int | None = None, output: str | None = None) -> np.ndarray:
        """Margins by secure prediction (step 7); ``output`` is the client that sums the masked shares
        (the first client by default) and hands the margins to the caller: whoever calls this method, on
        the label holders' side. They come back sealed to a key the caller's process made for this call
        (:meth:`ray_vfl.runtime.actors.Runtime.caller_box`): Ray's object store holds ciphertext, and the
        output client alone (no other client) learns the margins besides the caller."""
        n_trees = self.n_trees if n_trees is None else int(n_trees)
        if not 1 <= n_trees <= self.n_trees:
            raise ConfigError(f"n_trees must be in [1, {self.n_trees}], got {n_trees}")
        VerticalDataset.ensure(data, "predict")
        if sorted(data.party_names) != sorted(self.order):
            raise DataError(f"prediction data must hold the clients {self.order}, got {data.party_names}")
        output = output or self.order[0]
        if output not in self.order:
            raise ConfigError(f"output must be one of the clients {self.order}, got {output!r}")
        calls, key = self._calls(), f"predict-{uuid.uuid4().hex[:8]}"
        tables = data.tables(self.runtime)
        try:
            reports = calls.value("load_rows", self.order, lambda p: (key, tables[p]), "load prediction rows")
            warn_unseen_categories(self.order, reports, "prediction data")
            route(calls, self.config, key, n_trees)
            nonce = secrets.token_bytes(16)
            shares = calls.each("prediction_share", self.order, lambda p: (key, nonce, output), 1, "prediction shares")
            refs = [shares[p][0] for p in self.order if p != output]
            box = self.runtime.caller_box()  # the margins come back sealed to a key made for this call
            sealed = self.runtime.get([(output, self.runtime.actor(output).combine_shares.remote(key, refs, box.public_key))],
                                      "prediction")[0]
            shape = (data.n_rows,) if self.config.trees_per_round == 1 else (data.n_rows, self.config.num_class)
            margins = box.open(sealed, "pivodl_margins", {"shape": shape}, [output])
        except (DataError, ConfigError):  # bad input: the clients drop what they loaded and stay ready
            self._drop_rows(calls, key)
            raise
        self._drop_rows(calls, key)
        return margins

    def predict(self, data: VerticalDataset, n_trees: int | None = None) -> np.ndarray:
        """Predictions (probabilities for the logistic objective and ``multi:softprob``, ``(rows, K)``; the
        class index for ``multi:softmax``)."""
        return transform_margin(self.config.objective, self.predict_margin(data, n_trees))

    def evaluate(self, data: VerticalDataset, n_trees: int | None = None) -> dict[str, float]:
        """Metrics on labelled ``data`` (logloss and error, mlogloss and merror, or RMSE and MAE): each client scores the rows
        it labels from margins only it receives; the driver gets the totals (AUC needs every label in
        one place and is not computed: use :meth:`predict` where the labels are)."""
        n_trees = self.n_trees if n_trees is None else int(n_trees)
        VerticalDataset.ensure(data, "evaluate")
        calls, key = self._calls(), f"evaluate-{uuid.uuid4().hex[:8]}"
        tables = data.tables(self.runtime)
        try:
            calls.value("load_rows", self.order, lambda p: (key, tables[p]), "load evaluation rows")
            owned = calls.each("eval_labelled", self.order, lambda p: (key,), 1, "evaluation")
            calls.value("take_eval_labelled", self.order, lambda p: (key, calls.to(p, owned, lambda s, r: 0)), "evaluation")
            metrics = evaluate(calls, self.config, key, n_trees)
        except (DataError, ConfigError):  # bad input: the clients drop what they loaded and stay ready
            self._drop_rows(calls, key)
            raise
        self._drop_rows(calls, key)
        return metrics

    def _drop_rows(self, calls, key: str) -> None:
        """The clients drop the rows loaded under ``key``: after a result or bad input only (a failed client
        ends the federation: nothing is left to drop, and its failure is what the caller reads)."""
        calls.value("drop_rows", self.order, lambda p: (key,), "cleanup")

    def save(self, directory: str) -> dict[str, str]:
        """Each client writes ``<directory>/<client>.json``, its own part only (lookup table, tree shapes,
        the weights of the leaves it holds); the driver writes ``federation.json``."""
        meta = {"order": self.order, "n_trees": self.n_trees, "config": self.config.to_dict(), "epsilon": self.epsilon,
                "classes": self.classes}
        return save_parts(self.runtime, self.order, directory, meta, ".json", kind="pivodl")

    @classmethod
    def load(cls, directory: str, runtime: Runtime | None = None,
             objective: str | tuple[str, ...] | None = None) -> "PIVODLModel":
        """One actor per client, each reading its own saved part; the clients agree on fresh mask keys.
        ``objective``: the objective (or objectives) the caller accepts."""
        meta = load_meta(directory, "PIVODLModel.save", kind="pivodl")
        try:
            config, order, n_trees = PIVODLConfig.from_dict(meta["config"]), list(meta["order"]), int(meta["n_trees"])
        except (KeyError, TypeError, ValueError) as exc:
            raise DataError(f"{directory!r} holds no complete PIVODL federation file ({type(exc).__name__}: {exc}); "
                            "save the model again") from exc
        accepted = (objective,) if isinstance(objective, str) else objective
        if accepted is not None and config.objective not in accepted:
            raise DataError(f"{directory!r} holds a model with objective {config.objective!r}, not one of {accepted}: "
                            "load it with the estimator of that objective")
        runtime = runtime or Runtime(timeout_s=config.timeout_s or 600.0)
        runtime.connect(order)
        for p in order:
            runtime.spawn(p, Client, p, None, [], config, runtime.pool(p, 1), order)
        runtime.introduce(order)
        model = cls(runtime, order, config, n_trees, epsilon=meta.get("epsilon"), classes=meta.get("classes"))
        calls = model._calls()
        calls.value("load_part", order, lambda p: (os.path.join(directory, f"{p}.json"),), "load")
        keys = calls.each("mask_key", order, lambda p: (), 1, "load")
        calls.value("agree", order, lambda p: (calls.to(p, keys, lambda s, r: 0),), "load")
        return model

    def importance_stats(self, client: str | None = None) -> dict:
        """``client``'s feature-importance figures (the first client, the caller's side, by default): its own
        features' split statistics and every client's totals (:meth:`Client.importance_stats`)."""
        client = client or self.order[0]
        return self.runtime.get([(client, self.runtime.actor(client).importance_stats.remote())], "importances")[0]

    def skeleton(self) -> list[dict[int, tuple]]:
        """The tree shapes (owner of every split, holder of every leaf), as every client knows them."""
        return self._calls().value("skeleton", self.order[:1], lambda p: (), "trees")[0]

    def assembled_trees(self, n_features: dict[str, int]) -> list[dict[str, np.ndarray]]:
        """Diagnostic only (tests, benchmarks): the trees put together from every client's private
        part -- split features as global indices (clients' features concatenated in client order, as
        ``n_features`` counts them), bins, missing directions, the left category sets of native categorical
        splits (``left_set``, ``(nodes, max_bin)``, all False elsewhere) and the kept leaf weights, in the
        centralized reference's layout. In a deployment no one can do this: each part stays with its client."""
        parts = self._calls().value("model_part", self.order, lambda p: (), "model parts")
        lookup = {p: part["lookup"] for p, part in zip(self.order, parts)}
        held = {(t, n): w for part in parts for t, n, w in part["held"]}
        offset = dict(zip(self.order, np.cumsum([0] + [n_features[p] for p in self.order])))
        out = []
        for t, tree in enumerate(self.skeleton()):
            size = max(tree) + 1
            arrays = {"left": np.full(size, -1), "right": np.full(size, -1), "feature": np.full(size, -1),
                      "bin": np.full(size, -1), "default_left": np.zeros(size, dtype=bool), "weight": np.zeros(size),
                      "left_set": np.zeros((size, self.config.max_bin), dtype=bool)}
            for node, kind in tree.items():
                if kind[0] == "split":
                    _, source, record, left, right = kind
                    entry = lookup[source][record]
                    f, b, dl = entry[:3]
                    if len(entry) > 4:  # a native categorical split: the bins of its left categories
                        arrays["left_set"][node, entry[4]] = True
                    arrays["left"][node], arrays["right"][node] = left, right
                    arrays["feature"][node], arrays["bin"][node], arrays["default_left"][node] = offset[source] + f, b, dl
                else:
                    arrays["weight"][node] = held[(t, node)]
            out.append(arrays)
        return out

    def recorded_view(self, client: str) -> dict:
        """What ``client`` holds after training (:meth:`~ray_vfl.pivodl.client.Client.recorded_view`); the
        sums it decrypted are there if the model was trained with ``record_view=True``. For experiments in
        simulation only."""
        if client not in self.order:
            raise DataError(f"{client!r} is not a client of this model; the clients are {self.order}")
        return self._calls().value("recorded_view", [client], lambda p: (), "recorded view")[0]

    def label_guess_scores(self) -> dict[str, dict[str, np.ndarray]]:
        """Every client's label-guess scores of the training rows from its own view (the paper's attack).
        For experiments in simulation only: it returns what a curious client could compute. Binary and
        regression models only (a score per row ranks one label, not ``K`` classes)."""
        if self.config.trees_per_round > 1:
            raise DataError(f"the label-guess scores rank one label per row (the paper's Table III, binary); this "
                            f"model is {self.config.objective!r} with {self.config.num_class} classes")
        views = self._calls().value("guess_scores", self.order, lambda p: (), "label guess")
        return dict(zip(self.order, views))
