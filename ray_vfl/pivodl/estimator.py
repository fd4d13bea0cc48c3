"""scikit-learn style estimators over PIVODL: labels spread over several clients.

``__init__`` only stores parameters; ``fit`` validates them (through
:class:`~ray_vfl.pivodl.config.PIVODLConfig`), trains with one Ray actor per client and returns
``self``; learned attributes end in ``_``.
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

import numpy as np
from sklearn.base import ClassifierMixin, RegressorMixin

from ..data.dataset import VerticalDataset
from ..errors import ConfigError
from ..runtime.actors import Runtime
from ..runtime.estimator import FederatedEstimator
from ..trees.callbacks import TrainingCallback
from ..trees.estimator import BinaryClassifier, ScoreOnDataLabels, bound_for_weights, fit_callbacks, weighted_fit_data
from .config import PIVODLConfig
from .protocol import PIVODLModel, train

__all__ = ["PIVODLClassifier", "PIVODLRegressor"]

# Estimator parameter -> PIVODLConfig field, where the names differ (scikit-learn's n_estimators).
_RENAMED = {"n_estimators": "n_trees"}
_NOT_CONFIG = {"early_stopping_rounds", "callbacks", "verbose", "runtime", "importance_type"}
# What a PIVODL client can score from its own view: a node's gain and source are told to every client, its
# hessian sum (cover) only to its split client, and no client knows another's features (no per-feature mean).
IMPORTANCE_TYPES = ("total_gain", "weight")


class _PIVODL(FederatedEstimator):
    _objective = "binary:logistic"
    _stop_metric = "logloss"

    def __init__(self, n_estimators: int = 10, max_depth: int = 5, learning_rate: float = 0.3, reg_lambda: float = 1.0,
                 gamma: float = 0.0, min_child_weight: float = 1.0, max_bin: int = 32, base_score: float | None = None,
                 backend: str = "paillier", key_bits: int = 2048, allow_weak_keys: bool = False,
                 workers_per_party: int | None = None, timeout_s: float | None = None,
                 gradient_bound: float | None = None, instance_threshold: int = 50, epsilon: float | None = None,
                 delta: float = 1e-5, leaf_clip: float | None = None, scale_pos_weight: float = 1.0,
                 importance_type: str = "total_gain", early_stopping_rounds: int | None = None,
                 callbacks: Sequence[TrainingCallback] | None = None, verbose: bool = False,
                 runtime: Runtime | None = None) -> None:
        self.n_estimators = n_estimators
        self.max_depth = max_depth
        self.learning_rate = learning_rate
        self.reg_lambda = reg_lambda
        self.gamma = gamma
        self.min_child_weight = min_child_weight
        self.max_bin = max_bin
        self.base_score = base_score
        self.backend = backend
        self.key_bits = key_bits
        self.allow_weak_keys = allow_weak_keys
        self.workers_per_party = workers_per_party
        self.timeout_s = timeout_s
        self.gradient_bound = gradient_bound
        self.instance_threshold = instance_threshold
        self.epsilon = epsilon
        self.delta = delta
        self.leaf_clip = leaf_clip
        self.scale_pos_weight = scale_pos_weight
        self.importance_type = importance_type
        self.early_stopping_rounds = early_stopping_rounds
        self.callbacks = callbacks
        self.verbose = verbose
        self.runtime = runtime

    def _config(self, gradient_bound: float | None = None) -> PIVODLConfig:
        params = {_RENAMED.get(k, k): v for k, v in self.get_params().items() if k not in _NOT_CONFIG}
        if gradient_bound is not None:
            params["gradient_bound"] = gradient_bound
        return PIVODLConfig(objective=self._objective, **params)

    def fit(self, data: VerticalDataset, y=None, *, sample_weight=None, eval_set: Sequence[VerticalDataset] | None = None,
            sample_weight_eval_set=None, checkpoint_dir: str | None = None, checkpoint_every: int = 1):
        """Train on ``data`` (labels spread over its clients); ``eval_set`` data sets are scored after
        every tree (logloss and error, or RMSE and MAE). ``y`` is scikit-learn's (None, or the data's
        own labels). ``sample_weight``: one weight per row, each travelling with its row's label to the
        client that labels it, which weighs that row's gradients (and the base score's sums) before
        anything is encrypted; ``sample_weight_eval_set`` weighs the eval sets' metrics alike. With
        ``checkpoint_dir`` every client saves its
        training state there (on its own machine) every ``checkpoint_every`` trees, and a fit started
        again with the same folder continues from the last tree every client completed."""
        self._config()  # the parameters are checked before the data
        data, evals = weighted_fit_data(data, y, sample_weight, eval_set, sample_weight_eval_set)
        config = self._config(bound_for_weights(self._objective, self.gradient_bound, getattr(data, "weight", None),
                                                self.scale_pos_weight))
        callbacks = fit_callbacks(self, evals, checkpoint_dir, checkpoint_every, self._stop_metric, maximize=False)
        self.model_ = train(self._fit_runtime(config.timeout_s), data, config, evals, callbacks)
        self.evals_result_ = self.model_.history
        self.comm_stats_ = self.model_.comm_stats
        self.best_iteration_ = self.model_.best_iteration
        self.n_trees_ = self.model_.n_trees
        self.epsilon_ = self.model_.epsilon
        self._set_fitted_shape(data)
        return self

    @property
    def feature_importances_(self) -> np.ndarray:
        """Importances of ``importance_type`` (``"total_gain"`` or ``"weight"``, XGBoost's meanings) over
        ``feature_names_in_``, normalised over every client's splits: the first client's own features carry
        their scores (it computes them from its own view: every split's gain is told to every client, and
        it knows its own splits' features); the other clients' features are NaN, their totals are in
        :attr:`party_importances_`. ``"gain"`` and ``"cover"`` need a per-feature mean or a node's hessian
        sum, which no single client holds: :class:`~ray_vfl.errors.ConfigError`."""
        return self._spread_over_features(self.model_.order[0], self._importances()[0])

    @property
    def party_importances_(self) -> dict[str, float]:
        """Each client's share of the ``importance_type`` total over its splits, normalised to 1."""
        return self._importances()[1]

    def _importances(self) -> tuple[np.ndarray, dict[str, float]]:
        from ..trees.importance import importance_scores

        kind = self.importance_type
        if kind not in IMPORTANCE_TYPES:
            raise ConfigError(f"PIVODL's importance_type must be one of {IMPORTANCE_TYPES}, got {kind!r}: a node's "
                              "cover (hessian sum) is known to its split client only, and no client knows another's "
                              "features, so 'gain', 'cover' and 'total_cover' have no federated value here")
        stats = self._check_fitted().importance_stats()
        totals = {p: v[kind] for p, v in stats["parties"].items()}
        norm = sum(totals.values()) or 1.0
        return importance_scores(stats["own"], kind) / norm, {p: t / norm for p, t in totals.items()}

    def predict_margin(self, data: VerticalDataset) -> np.ndarray:
        """Raw margins by secure prediction (the clients' masked shares summed by the first client)."""
        return self._check_fitted().predict_margin(data)

    def evaluate(self, data: VerticalDataset) -> dict[str, float]:
        """Metrics on labelled data, each client scoring only the rows it labels."""
        return self._check_fitted().evaluate(data)

    def save_model(self, directory: str) -> dict[str, str]:
        """Each client writes its own part under ``directory`` (see :meth:`PIVODLModel.save`)."""
        return self._check_fitted().save(directory)

    @classmethod
    def load_model(cls, directory: str, runtime: Runtime | None = None):
        """An estimator for prediction from the parts :meth:`save_model` wrote."""
        model = PIVODLModel.load(directory, runtime, objective=cls._objective)
        params = {f.name: getattr(model.config, f.name) for f in dataclasses.fields(model.config)}
        params = {k: params[_RENAMED.get(k, k)] for k in cls().get_params() if k not in _NOT_CONFIG}
        est = cls(**params, runtime=model.runtime)
        est.model_, est.n_trees_, est.epsilon_ = model, model.n_trees, model.epsilon
        return est


class PIVODLClassifier(BinaryClassifier, ClassifierMixin, _PIVODL):
    """Federated XGBoost classifier with labels spread over several clients (PIVODL).

    Example
    -------
    >>> from ray_vfl import PIVODLClassifier, vertical_split, load_credit                    # doctest: +SKIP
    >>> data = vertical_split(load_credit().drop(columns="ID"), 4, label="default.payment.next.month",
    ...                       label_owners={"party0": .4, "party1": .3, "party2": .3})        # doctest: +SKIP
    >>> train, test = data.train_test_split(0.2, seed=0)                                     # doctest: +SKIP
    >>> clf = PIVODLClassifier(n_estimators=10, epsilon=8.0).fit(train, eval_set=[test])     # doctest: +SKIP
    >>> clf.predict_proba(test)[:, 1], clf.epsilon_                                           # doctest: +SKIP
    """

    _objective = "binary:logistic"


class PIVODLRegressor(ScoreOnDataLabels, RegressorMixin, _PIVODL):
    """Federated XGBoost regressor (squared error) with labels spread over several clients (PIVODL).

    ``gradient_bound`` sizes the encrypted fixed-point sums (65,536 by default): scale the labels or
    raise it for large targets. Under partial DP, ``leaf_clip`` must be given (leaf weights scale
    with the label).

    Example
    -------
    >>> reg = PIVODLRegressor(n_estimators=6, max_depth=6, gradient_bound=4096.0)  # doctest: +SKIP
    >>> reg.fit(train).predict(test)                                                # doctest: +SKIP
    """

    _objective = "reg:squarederror"
    _stop_metric = "rmse"

    def predict(self, data: VerticalDataset) -> np.ndarray:
        return self.predict_margin(data)
