"""scikit-learn style estimators over the SecureBoost protocol.

``__init__`` only stores parameters; ``fit`` validates them (through
:class:`~ray_vfl.trees.config.BoostConfig`), trains with one Ray actor per party and
returns ``self``; learned attributes end in ``_``.
"""

from __future__ import annotations

import shutil
import tempfile
from typing import Sequence

import numpy as np
from sklearn.base import ClassifierMixin, RegressorMixin

from ..data.dataset import VerticalDataset
from ..errors import ConfigError
from ..runtime.actors import Runtime
from ..runtime.estimator import FederatedEstimator
from ..trees.callbacks import TrainingCallback
from ..trees.config import BoostConfig
from ..trees.estimator import ClassPredictions, ScoreOnDataLabels, bound_for_weights, fit_callbacks, weighted_fit_data
from ..trees.importance import check_importance_type
from ..trees.multiclass import MULTI_OBJECTIVES, as_labels, is_multiclass
from .protocol import FederatedModel, train

__all__ = ["SecureBoostClassifier", "SecureBoostRegressor"]


class _SecureBoost(FederatedEstimator):
    _objective = "binary:logistic"

    def __init__(
        self,
        n_estimators: int = 10,
        max_depth: int = 5,
        learning_rate: float = 0.3,
        reg_lambda: float = 1.0,
        gamma: float = 0.0,
        min_child_weight: float = 1.0,
        max_bin: int = 32,
        base_score: float | None = None,
        backend: str = "paillier",
        key_bits: int = 2048,
        allow_weak_keys: bool = False,
        workers_per_party: int | None = None,
        timeout_s: float | None = None,
        precompute_masks: bool = True,
        group_features: bool = True,
        gradient_bound: float | None = None,
        scale_pos_weight: float = 1.0,
        importance_type: str = "gain",
        early_stopping_rounds: int | None = None,
        callbacks: Sequence[TrainingCallback] | None = None,
        verbose: bool = False,
        runtime: Runtime | None = None,
        objective: str | None = None,
        multi_strategy: str = "one_output_per_tree",
        enable_categorical: bool = False,
        max_cat_to_onehot: int = 4,
        max_cat_threshold: int = 64,
    ) -> None:
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
        self.precompute_masks = precompute_masks
        self.group_features = group_features
        self.gradient_bound = gradient_bound
        self.scale_pos_weight = scale_pos_weight
        self.importance_type = importance_type
        self.early_stopping_rounds = early_stopping_rounds
        self.callbacks = callbacks
        self.verbose = verbose
        self.runtime = runtime
        self.objective = objective
        self.multi_strategy = multi_strategy
        self.enable_categorical = enable_categorical
        self.max_cat_to_onehot = max_cat_to_onehot
        self.max_cat_threshold = max_cat_threshold

    def _config(self, gradient_bound: float | None = None) -> BoostConfig:
        return BoostConfig(
            n_trees=self.n_estimators, max_depth=self.max_depth, learning_rate=self.learning_rate,
            reg_lambda=self.reg_lambda, gamma=self.gamma, min_child_weight=self.min_child_weight,
            max_bin=self.max_bin, objective=self._fit_objective, base_score=self.base_score, backend=self.backend,
            key_bits=self.key_bits, allow_weak_keys=self.allow_weak_keys, workers_per_party=self.workers_per_party, timeout_s=self.timeout_s,
            precompute_masks=self.precompute_masks, group_features=self.group_features,
            gradient_bound=self.gradient_bound if gradient_bound is None else gradient_bound,
            scale_pos_weight=self.scale_pos_weight, num_class=self._num_class, multi_strategy=self.multi_strategy,
            enable_categorical=self.enable_categorical, max_cat_to_onehot=self.max_cat_to_onehot,
            max_cat_threshold=self.max_cat_threshold,
        )

    _fit_objective = _objective
    _num_class = None

    def _choose_objective(self, data: VerticalDataset) -> None:
        """The objective of this fit (the regressor's: squared error only)."""
        if self.objective not in (None, "reg:squarederror"):
            raise ConfigError(f"SecureBoostRegressor trains objective 'reg:squarederror', got {self.objective!r}; "
                              "for classes use SecureBoostClassifier")
        self._fit_objective = "reg:squarederror"

    def fit(self, data: VerticalDataset, y=None, *, sample_weight=None, eval_set: Sequence[VerticalDataset] | None = None,
            sample_weight_eval_set=None, checkpoint_dir: str | None = None, checkpoint_every: int = 1,
            xgb_model: "str | _SecureBoost | None" = None):
        """Train on ``data``; ``eval_set`` data sets are scored after every tree.

        ``y`` is scikit-learn's: the labels are the data's own (the label party holds them), so it is
        None or, for in-process data, equal to them. ``sample_weight`` (one finite, non-negative weight
        per row) travels with the labels to the label party, which weighs every row's gradient and
        hessian before encrypting them (XGBoost's weighted trees; the default base score is the weighted
        label mean); with ``gradient_bound=None`` the bound grows to cover the largest weight (a power
        of two; every party sees it). Party-held data keeps its weights in the label party's store
        (``from_files(..., weight="w")``). ``sample_weight_eval_set``: one weight array (or None) per
        eval set, for weighted eval metrics. Multi-class objectives weigh each row's K pairs alike
        (weighted ``mlogloss`` and ``merror``); ``scale_pos_weight`` (the rows labelled 1) is binary
        only and raises :class:`~ray_vfl.errors.ConfigError` with them.

        With ``checkpoint_dir`` every party saves its training state there (on its own machine)
        after every ``checkpoint_every`` trees, and a fit started again with the same folder
        continues from the last tree every party completed (:class:`~ray_vfl.trees.checkpoint.Checkpoint`).
        ``xgb_model`` (a folder :meth:`save_model` wrote, or a fitted estimator of the same parties)
        continues training that model: ``n_estimators`` more trees on ``data``, binned as that
        model's parties binned theirs.
        """
        self._config()  # the hyper-parameters are checked before the data; the objective follows the labels
        data, evals = weighted_fit_data(data, y, sample_weight, eval_set, sample_weight_eval_set)
        self._choose_objective(data)
        if is_multiclass(self._fit_objective) and self.scale_pos_weight != 1.0:
            raise ConfigError(f"scale_pos_weight={self.scale_pos_weight!r} weighs the rows labelled 1 of a binary "
                              f"objective; multi-class objective {self._fit_objective!r} takes sample_weight instead "
                              "(one weight per row): leave scale_pos_weight=1")
        config = self._config(bound_for_weights(self._fit_objective, self.gradient_bound, getattr(data, "weight", None),
                                                self.scale_pos_weight))
        check_importance_type(self.importance_type)
        runtime = self._fit_runtime(config.timeout_s)
        callbacks = fit_callbacks(self, evals, checkpoint_dir, checkpoint_every)
        init_model = xgb_model
        if isinstance(xgb_model, _SecureBoost):  # each party writes its part on its own node, read back there
            init_model = tempfile.mkdtemp(prefix="ray_vfl_continue_")
            xgb_model.save_model(init_model)
        try:
            self.model_ = train(runtime, data, config, evals, callbacks, init_model=init_model)
        finally:
            if init_model is not xgb_model:
                shutil.rmtree(init_model, ignore_errors=True)
        self.evals_result_ = self.model_.history
        self.comm_stats_ = self.model_.comm_stats
        self.best_iteration_ = self.model_.best_iteration
        self.n_trees_ = self.model_.n_trees
        self._set_fitted_shape(data)
        return self

    @property
    def feature_importances_(self) -> np.ndarray:
        """Importances of ``importance_type`` (XGBoost's: ``gain``, ``weight``, ``cover``, ``total_gain``,
        ``total_cover``) over ``feature_names_in_``, normalised as XGBoost's over every party's features:
        the label party's own features carry their scores; each passive party's features are NaN, since
        their per-feature figures stay at the label party, which chose those splits by feature index, and
        only each party's total leaves it (:attr:`party_importances_`; the label party's own features'
        scores plus every passive party's total sum to 1)."""
        return self._spread_over_features(self.model_.label_party, self._importances()[0])

    @property
    def party_importances_(self) -> dict[str, float]:
        """Each party's share of the ``importance_type`` total (its features' scores summed), normalised to 1."""
        return self._importances()[1]

    def _importances(self) -> tuple[np.ndarray, dict[str, float]]:
        from ..trees.importance import importance_scores

        kind = check_importance_type(self.importance_type)
        stats = self._check_fitted().importance_stats()
        totals = {p: v[kind] for p, v in stats["parties"].items()}
        norm = sum(totals.values()) or 1.0
        return importance_scores(stats["own"], kind) / norm, {p: t / norm for p, t in totals.items()}

    def predict_margin(self, data: VerticalDataset) -> np.ndarray:
        """Raw margins by federated prediction."""
        return self._check_fitted().predict_margin(data)

    def dump_model(self, directory: str) -> dict[str, str]:
        """Each party writes its own trees, with its thresholds, on its own machine
        (:meth:`FederatedModel.dump_trees`); returns the paths. This is the federated ``get_booster()``:
        a party's trees with thresholds stay at that party, so the driver (the label party's side) is
        handed no booster holding another party's thresholds."""
        return self._check_fitted().dump_trees(directory)

    def save_model(self, directory: str) -> dict[str, str]:
        """Each party writes its own part under ``directory`` (see :meth:`FederatedModel.save`)."""
        return self._check_fitted().save(directory)

    @classmethod
    def load_model(cls, directory: str, runtime: Runtime | None = None):
        """An estimator for prediction from parts saved by :meth:`save_model`.

        Raises :class:`~ray_vfl.errors.DataError` for a missing, empty or foreign folder, a format
        version this ray_vfl does not read, or a model of the other objective (a classifier never
        loads a regressor), naming the loader to use.
        """
        model = FederatedModel.load(directory, runtime, objective=cls._objectives)
        cfg = model.config
        est = cls(n_estimators=cfg.n_trees, max_depth=cfg.max_depth, learning_rate=cfg.learning_rate,
                  reg_lambda=cfg.reg_lambda, gamma=cfg.gamma, min_child_weight=cfg.min_child_weight,
                  max_bin=cfg.max_bin, base_score=cfg.base_score, backend=cfg.backend, key_bits=cfg.key_bits,
                  allow_weak_keys=cfg.allow_weak_keys, workers_per_party=cfg.workers_per_party,
                  timeout_s=cfg.timeout_s, precompute_masks=cfg.precompute_masks, group_features=cfg.group_features,
                  gradient_bound=cfg.gradient_bound, scale_pos_weight=cfg.scale_pos_weight, runtime=model.runtime,
                  multi_strategy=cfg.multi_strategy, objective=cfg.objective,
                  enable_categorical=cfg.enable_categorical, max_cat_to_onehot=cfg.max_cat_to_onehot,
                  max_cat_threshold=cfg.max_cat_threshold)
        est.model_ = model
        est.n_trees_ = model.n_trees
        est._fit_objective, est._num_class = cfg.objective, cfg.num_class
        est._set_feature_names(model.feature_names())  # feature_importances_ and the scikit-learn shape
        est._loaded(model)
        return est

    _objectives: tuple[str, ...] = ("reg:squarederror",)

    def _loaded(self, model: FederatedModel) -> None:
        """Learned attributes a loaded model gives besides its trees."""


class SecureBoostClassifier(ClassPredictions, ScoreOnDataLabels, ClassifierMixin, _SecureBoost):
    """Federated XGBoost classifier (SecureBoost), binary or multi-class.

    The objective follows the labels as in XGBoost's scikit-learn wrapper: 0/1 labels train
    ``binary:logistic``; any other labels (``K`` distinct numbers) train ``multi:softprob`` with
    ``num_class=K``, mapped to ``0 .. K-1`` by the label party in ascending order (``classes_``). Pass
    ``objective="multi:softmax"`` or ``"multi:softprob"`` to force it. ``multi_strategy``:
    ``"one_output_per_tree"`` (one tree per class and round, the default) or ``"multi_output_tree"``
    (one tree per round with ``K`` leaf weights; every row's ``K`` gradient pairs travel packed in one
    ciphertext). ``predict`` gives class labels, ``predict_proba`` ``K`` columns (2 for binary).
    ``enable_categorical=True`` splits the columns declared categorical (``vertical_split(...,
    categorical=...)``) by sets of categories, chosen with the label party from per-category sums and
    kept, as category values, at the party holding the column (:mod:`ray_vfl.trees.categorical`).

    Example
    -------
    Three classes (Iris), then binary (credit):

    >>> from sklearn.datasets import load_iris                                  # doctest: +SKIP
    >>> iris = vertical_split(load_iris(as_frame=True).frame, 2, label="target", seed=0)  # doctest: +SKIP
    >>> clf = SecureBoostClassifier(n_estimators=10, backend="paillier").fit(iris)  # doctest: +SKIP
    >>> clf.classes_, clf.predict_proba(iris).shape                             # doctest: +SKIP
    (array([0, 1, 2]), (150, 3))
    >>> SecureBoostClassifier(multi_strategy="multi_output_tree").fit(iris)     # doctest: +SKIP
    >>> from ray_vfl import SecureBoostClassifier, vertical_split, load_credit  # doctest: +SKIP
    >>> data = vertical_split(load_credit().drop(columns="ID"), 2,
    ...                       label="default.payment.next.month")            # doctest: +SKIP
    >>> train, test = data.train_test_split(0.2, seed=0)                      # doctest: +SKIP
    >>> clf = SecureBoostClassifier(n_estimators=10, backend="paillier")      # doctest: +SKIP
    >>> clf.fit(train, eval_set=[test]).predict_proba(test)[:, 1]             # doctest: +SKIP
    """

    _objective = "binary:logistic"
    _objectives = ("binary:logistic",) + MULTI_OBJECTIVES
    classes_ = np.array([0, 1])

    def _choose_objective(self, data: VerticalDataset) -> None:
        """XGBoost's scikit-learn rule: ``binary:logistic`` for 0/1 labels, ``multi:softprob`` with
        ``num_class`` = the number of classes for any others (or the ``objective`` given)."""
        allowed = (None,) + self._objectives
        if self.objective not in allowed:
            raise ConfigError(f"SecureBoostClassifier's objective must be one of {allowed}, got {self.objective!r}")
        self._fit_objective, self._num_class, self.classes_ = "binary:logistic", None, np.array([0, 1])
        if self.objective == "binary:logistic":
            return
        if self.objective is None and (getattr(data, "labels_spread", False) or data.label_party is None):
            return  # no single label party: training names what is wrong with these labels
        classes = data.label_classes()
        if self.objective is None and np.isin(classes, (0.0, 1.0)).all():  # (one class: binary's error names it)
            return
        self._fit_objective, self._num_class = self.objective or "multi:softprob", len(classes)
        self.classes_ = as_labels(classes)

    def _loaded(self, model: FederatedModel) -> None:
        if model.config.num_class is not None:
            self.classes_ = as_labels(model.classes())


class SecureBoostRegressor(ScoreOnDataLabels, RegressorMixin, _SecureBoost):
    """Federated XGBoost regressor (squared error).

    Encrypted gradients live in a fixed-point encoding of bounded range,
    ``gradient_bound`` (65,536 by default, seen by every party): ``fit``
    refuses labels further than half of it from the base score and names the
    bound to set instead (or scale the labels).

    Example
    -------
    >>> reg = SecureBoostRegressor(n_estimators=20, backend="paillier")          # doctest: +SKIP
    >>> reg.fit(train).predict(test)                                              # doctest: +SKIP
    >>> SecureBoostRegressor(gradient_bound=2**24).fit(train_in_cents)           # doctest: +SKIP
    """

    _objective = _fit_objective = "reg:squarederror"

    def predict(self, data: VerticalDataset) -> np.ndarray:
        return self.predict_margin(data)
