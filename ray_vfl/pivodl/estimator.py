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
from ..errors import ConfigError, DataError
from ..runtime.actors import Runtime
from ..runtime.estimator import FederatedEstimator
from ..trees.callbacks import TrainingCallback
from ..trees.estimator import ClassPredictions, ScoreOnDataLabels, bound_for_weights, fit_callbacks, weighted_fit_data
from ..trees.multiclass import MULTI_OBJECTIVES, as_labels, class_index, is_multiclass
from .config import PIVODLConfig
from .protocol import PIVODLModel, train

__all__ = ["PIVODLClassifier", "PIVODLRegressor"]

# Estimator parameter -> PIVODLConfig field, where the names differ (scikit-learn's n_estimators).
_RENAMED = {"n_estimators": "n_trees"}
_NOT_CONFIG = {"early_stopping_rounds", "callbacks", "verbose", "runtime", "importance_type", "num_class"}
# What a PIVODL client can score from its own view: a node's gain and source are told to every client, its
# hessian sum (cover) only to its split client, and no client knows another's features (no per-feature mean).
IMPORTANCE_TYPES = ("total_gain", "weight")


class _PIVODL(FederatedEstimator):
    _objective = "binary:logistic"
    _objectives: tuple[str, ...] = ("binary:logistic",)
    _stop_metric = "logloss"
    _fit_objective = _objective
    _fit_num_class: int | None = None

    def __init__(self, n_estimators: int = 10, max_depth: int = 5, learning_rate: float = 0.3, reg_lambda: float = 1.0,
                 gamma: float = 0.0, min_child_weight: float = 1.0, max_bin: int = 32, base_score: float | None = None,
                 backend: str = "paillier", key_bits: int = 2048, allow_weak_keys: bool = False,
                 workers_per_party: int | None = None, timeout_s: float | None = None,
                 gradient_bound: float | None = None, instance_threshold: int = 50, epsilon: float | None = None,
                 delta: float = 1e-5, leaf_clip: float | None = None, scale_pos_weight: float = 1.0,
                 enable_categorical: bool = False, max_cat_to_onehot: int = 4, max_cat_threshold: int = 64,
                 importance_type: str = "total_gain", num_class: int | None = None,
                 early_stopping_rounds: int | None = None,
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
        self.enable_categorical = enable_categorical
        self.max_cat_to_onehot = max_cat_to_onehot
        self.max_cat_threshold = max_cat_threshold
        self.importance_type = importance_type
        self.num_class = num_class
        self.early_stopping_rounds = early_stopping_rounds
        self.callbacks = callbacks
        self.verbose = verbose
        self.runtime = runtime

    def _config(self, gradient_bound: float | None = None) -> PIVODLConfig:
        params = {_RENAMED.get(k, k): v for k, v in self.get_params().items() if k not in _NOT_CONFIG}
        if gradient_bound is not None:
            params["gradient_bound"] = gradient_bound
        return PIVODLConfig(objective=self._fit_objective, num_class=self._fit_num_class, **params)

    def _choose_objective(self, data: VerticalDataset, evals: dict) -> tuple[VerticalDataset, dict]:
        """The objective of this fit, and the data to train on (the regressor's: as given)."""
        if self.num_class is not None:
            raise ConfigError(f"num_class={self.num_class!r} is for classes: PIVODLRegressor trains "
                              "reg:squarederror; use PIVODLClassifier")
        return data, evals

    def fit(self, data: VerticalDataset, y=None, *, sample_weight=None, eval_set: Sequence[VerticalDataset] | None = None,
            sample_weight_eval_set=None, checkpoint_dir: str | None = None, checkpoint_every: int = 1):
        """Train on ``data`` (labels spread over its clients); ``eval_set`` data sets are scored after
        every round (logloss and error, mlogloss and merror, or RMSE and MAE). ``y`` is scikit-learn's (None, or the data's
        own labels). ``sample_weight``: one weight per row, each travelling with its row's label to the
        client that labels it, which weighs that row's gradients (and the base score's sums) before
        anything is encrypted; ``sample_weight_eval_set`` weighs the eval sets' metrics alike. With
        ``checkpoint_dir`` every client saves its
        training state there (on its own machine) every ``checkpoint_every`` trees, and a fit started
        again with the same folder continues from the last tree every client completed."""
        self._config()  # the parameters are checked before the data
        data, evals = weighted_fit_data(data, y, sample_weight, eval_set, sample_weight_eval_set)
        data, evals = self._choose_objective(data, evals)
        config = self._config(bound_for_weights(self._fit_objective, self.gradient_bound,
                                                getattr(data, "weight", None), self.scale_pos_weight))
        stop_metric = "mlogloss" if is_multiclass(self._fit_objective) else self._stop_metric
        callbacks = fit_callbacks(self, evals, checkpoint_dir, checkpoint_every, stop_metric, maximize=False)
        self.model_ = train(self._fit_runtime(config.timeout_s), data, config, evals, callbacks)
        if is_multiclass(self._fit_objective):
            self.model_.classes = np.asarray(self.classes_, dtype=np.float64).tolist()
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
        model = PIVODLModel.load(directory, runtime, objective=cls._objectives)
        params = {f.name: getattr(model.config, f.name) for f in dataclasses.fields(model.config)}
        params = {k: params[_RENAMED.get(k, k)] for k in cls().get_params() if k not in _NOT_CONFIG}
        est = cls(**params, num_class=model.config.num_class, runtime=model.runtime)
        est.model_, est.n_trees_, est.epsilon_ = model, model.n_trees, model.epsilon
        est._fit_objective, est._fit_num_class = model.config.objective, model.config.num_class
        if model.config.num_class is not None:
            classes = model.classes if model.classes is not None else np.arange(model.config.num_class)
            est.classes_ = as_labels(np.asarray(classes, dtype=np.float64))
        return est


class PIVODLClassifier(ClassPredictions, ScoreOnDataLabels, ClassifierMixin, _PIVODL):
    """Federated XGBoost classifier with labels spread over several clients (PIVODL), binary or multi-class.

    The objective follows the labels as in XGBoost's scikit-learn wrapper: 0/1 labels train
    ``binary:logistic``; any other labels (``K`` distinct numbers) train ``multi:softprob`` with
    ``num_class=K`` and one tree per class per round. A client cannot map classes it does not see
    (another client may hold classes it has none of), so for in-process data the caller's side maps
    the labels (``data.label``) to ``0 .. K-1`` in ascending order before they are handed to the
    clients (``classes_`` keeps the values; eval sets are mapped alike). Party-held data never shows
    its labels to the driver: give ``num_class=K`` and keep labels ``0 .. K-1`` at every client
    (each client refuses others with a :class:`~ray_vfl.errors.DataError` naming the fix).
    ``predict_proba`` gives ``K`` columns (2 for binary), ``predict`` class labels.

    Example
    -------
    >>> from ray_vfl import PIVODLClassifier, vertical_split, load_credit                    # doctest: +SKIP
    >>> data = vertical_split(load_credit().drop(columns="ID"), 4, label="default.payment.next.month",
    ...                       label_owners={"party0": .4, "party1": .3, "party2": .3})        # doctest: +SKIP
    >>> train, test = data.train_test_split(0.2, seed=0)                                     # doctest: +SKIP
    >>> clf = PIVODLClassifier(n_estimators=10, epsilon=8.0).fit(train, eval_set=[test])     # doctest: +SKIP
    >>> clf.predict_proba(test)[:, 1], clf.epsilon_                                           # doctest: +SKIP
    >>> iris = vertical_split(load_iris(as_frame=True).frame, 3, label="target",
    ...                       label_owners={"party0": .4, "party1": .3, "party2": .3})        # doctest: +SKIP
    >>> PIVODLClassifier(n_estimators=10, instance_threshold=5).fit(iris).predict_proba(iris).shape  # doctest: +SKIP
    (150, 3)
    """

    _objective = "binary:logistic"
    _objectives = ("binary:logistic",) + MULTI_OBJECTIVES
    classes_ = np.array([0, 1])

    def _choose_objective(self, data: VerticalDataset, evals: dict) -> tuple[VerticalDataset, dict]:
        """``binary:logistic`` for 0/1 labels (and ``num_class=None``), else ``multi:softprob`` with the
        labels mapped to ``0 .. K-1`` where the caller holds them (in-process data)."""
        self._fit_objective, self._fit_num_class, self.classes_ = "binary:logistic", None, np.array([0, 1])
        label = getattr(data, "label", None)
        if label is None:  # party-held: the clients hold the labels, already 0 .. K-1 if num_class is given
            if self.num_class is not None:
                self._fit_objective, self._fit_num_class = "multi:softprob", int(self.num_class)
                self.classes_ = np.arange(int(self.num_class))
            return data, evals
        classes = np.unique(np.asarray(label, dtype=np.float64))
        if self.num_class is None and np.isin(classes, (0.0, 1.0)).all():
            return data, evals
        if self.num_class is not None and len(classes) != self.num_class:
            raise DataError(f"the labels hold {len(classes)} classes ({classes[:10].tolist()}), num_class says "
                            f"{self.num_class}; leave num_class=None (it follows the labels) or fix the labels")
        self._fit_objective, self._fit_num_class = "multi:softprob", len(classes)
        self.classes_ = as_labels(classes)
        mapped = {k: _mapped(d, classes, f"eval set {k!r}") for k, d in evals.items()}
        return _mapped(data, classes, "the labels"), mapped


def _mapped(data: VerticalDataset, classes: np.ndarray, role: str) -> VerticalDataset:
    """In-process ``data`` with its labels replaced by their class indices (ascending ``classes``)."""
    label = getattr(data, "label", None)
    if label is None:
        return data
    return dataclasses.replace(data, label=class_index(label, classes, role).astype(np.float64))


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
    _objectives = ("reg:squarederror",)
    _fit_objective = "reg:squarederror"
    _stop_metric = "rmse"

    def predict(self, data: VerticalDataset) -> np.ndarray:
        return self.predict_margin(data)
