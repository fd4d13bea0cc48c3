"""scikit-learn style estimator over SSXGB: many participants, two outsourcing servers.

``__init__`` only stores parameters; ``fit`` validates them (through
:class:`~ray_vfl.ssxgb.config.SSXGBConfig`), trains with one Ray actor per participant plus the
servers C and S, and returns ``self``; learned attributes end in ``_``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from sklearn.base import ClassifierMixin

from ..data.dataset import VerticalDataset
from ..errors import ConfigError
from ..runtime.actors import Runtime
from ..runtime.estimator import FederatedEstimator
from ..trees.callbacks import TrainingCallback
from ..trees.estimator import BinaryClassifier, eval_sets_of, fit_callbacks
from .config import SSXGBConfig
from .protocol import SSXGBModel, train

__all__ = ["SSXGBClassifier"]

_RENAMED = {"n_estimators": "n_trees"}
_NOT_CONFIG = {"callbacks", "verbose", "runtime", "early_stopping_rounds"}


class SSXGBClassifier(BinaryClassifier, ClassifierMixin, FederatedEstimator):
    """Federated XGBoost classifier outsourced to two non-colluding servers (SSXGB).

    Parameters are those of :class:`~ray_vfl.ssxgb.config.SSXGBConfig` (``n_estimators`` is its
    ``n_trees``), plus ``early_stopping_rounds`` (stop when the last eval set's logloss has not
    improved for that many trees; predictions then use the trees up to the best), ``callbacks``,
    ``verbose`` (a progress bar and, with eval sets, their metrics) and ``runtime``.

    Example
    -------
    >>> from ray_vfl import vertical_split                                              # doctest: +SKIP
    >>> data = vertical_split(frame, 4, label="y", seed=0)                               # doctest: +SKIP
    >>> clf = SSXGBClassifier(n_estimators=5, max_depth=3, learning_rate=0.08).fit(data)  # doctest: +SKIP
    >>> clf.predict_proba(data)[:, 1]                                                     # doctest: +SKIP
    """

    def __init__(self, n_estimators: int = 10, max_depth: int = 3, learning_rate: float = 0.3,
                 reg_lambda: float = 1.0, max_bin: int = 32, base_score: float | None = None, key_bits: int = 2048,
                 allow_weak_keys: bool = False, frac_bits: int = 24, value_bits: int = 256, kappa: int = 80,
                 sigmoid_range: float = 4.0, row_subsample: float = 0.8, feature_subsample: float = 0.8,
                 seed: int = 0, max_candidates: int = 4096, workers_per_server: int | None = None,
                 timeout_s: float | None = None, engine: str = "bcp",
                 early_stopping_rounds: int | None = None, callbacks: Sequence[TrainingCallback] | None = None,
                 verbose: bool = False, runtime: Runtime | None = None) -> None:
        self.n_estimators = n_estimators
        self.early_stopping_rounds = early_stopping_rounds
        self.max_depth = max_depth
        self.learning_rate = learning_rate
        self.reg_lambda = reg_lambda
        self.max_bin = max_bin
        self.base_score = base_score
        self.key_bits = key_bits
        self.allow_weak_keys = allow_weak_keys
        self.frac_bits = frac_bits
        self.value_bits = value_bits
        self.kappa = kappa
        self.sigmoid_range = sigmoid_range
        self.row_subsample = row_subsample
        self.feature_subsample = feature_subsample
        self.seed = seed
        self.max_candidates = max_candidates
        self.workers_per_server = workers_per_server
        self.timeout_s = timeout_s
        self.engine = engine
        self.callbacks = callbacks
        self.verbose = verbose
        self.runtime = runtime

    def _config(self) -> SSXGBConfig:
        params = {_RENAMED.get(k, k): v for k, v in self.get_params().items() if k not in _NOT_CONFIG}
        return SSXGBConfig(**params)

    def fit(self, data: VerticalDataset, eval_set: Sequence[VerticalDataset] | None = None,
            checkpoint_dir: str | None = None, checkpoint_every: int = 1, *, sample_weight=None,
            sample_weight_eval_set=None):
        """Train on ``data`` (one participant holds the 0/1 labels); returns ``self``. ``eval_set`` data
        sets (labels at the same participant) are scored after every tree by encrypted prediction, the
        LBP comparing with its own labels (logloss, AUC: ``evals_result_``). With
        ``checkpoint_dir`` every role (participants, C, S) saves its training state there (on its own
        machine) every ``checkpoint_every`` trees, and a fit started again with the same folder
        continues from the last tree every role completed. SSXGB trains unweighted, as its paper:
        ``sample_weight`` (or ``sample_weight_eval_set``) raises :class:`~ray_vfl.errors.ConfigError`."""
        if sample_weight is not None or sample_weight_eval_set is not None or getattr(data, "weighted", False):
            raise ConfigError("SSXGB trains without sample weights (its paper's protocol has none): leave sample_weight "
                              "out, or use SecureBoostClassifier / PIVODLClassifier, which weigh the gradients at the "
                              "label party")
        config = self._config()
        VerticalDataset.ensure(data)
        evals = eval_sets_of(eval_set)
        callbacks = fit_callbacks(self, evals, checkpoint_dir, checkpoint_every, "logloss", maximize=False)
        self.model_ = train(self._fit_runtime(config.timeout_s), data, config, callbacks, eval_sets=evals)
        self.evals_result_ = self.model_.history
        self.best_iteration_ = self.model_.best_iteration
        self.comm_stats_ = self.model_.comm_stats
        self.n_trees_ = self.model_.n_trees
        return self

    def save_model(self, directory: str) -> dict[str, str]:
        """Each role writes its own part under ``directory`` (see :meth:`SSXGBModel.save`)."""
        return self._check_fitted().save(directory)

    @classmethod
    def load_model(cls, directory: str, runtime: Runtime | None = None) -> SSXGBClassifier:
        """An estimator for prediction from the parts :meth:`save_model` wrote."""
        model = SSXGBModel.load(directory, runtime)
        params = model.config.to_dict()
        params["n_estimators"] = params.pop("n_trees")
        est = cls(**params, runtime=model.runtime)
        est.model_, est.n_trees_ = model, model.n_trees
        return est

    def predict_margin(self, data: VerticalDataset) -> np.ndarray:
        """Margins by encrypted federated prediction, decrypted by the LBP alone."""
        return self._check_fitted().predict_margin(data)
