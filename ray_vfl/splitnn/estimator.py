"""A scikit-learn style estimator over split-NN training (FedAds).

``__init__`` only stores parameters; ``fit`` validates them (through
:class:`~ray_vfl.splitnn.network.config.SplitNNConfig`), trains with one Ray actor per
party (:func:`ray_vfl.splitnn.train`) and returns ``self``; learned
attributes end in ``_``.
"""

from __future__ import annotations

import numpy as np
from sklearn.base import ClassifierMixin

from ..data.dataset import VerticalDataset
from ..errors import ConfigError
from ..runtime.actors import Runtime
from ..runtime.estimator import FederatedEstimator
from .network.config import SplitNNConfig
from .privacy.defenses import Defense
from .unaligned.diffusion import DiffusionConfig
from .protocol import SplitNNModel, train
from .unaligned.synthesis import METHODS, UnalignedOptions
from .unaligned_protocol import train_unaligned

__all__ = ["SplitNNClassifier"]


class SplitNNClassifier(ClassifierMixin, FederatedEstimator):
    """Split neural network for 0/1 labels: the label party's bottom model and top, each other party's bottom model.

    Parameters mirror :class:`~ray_vfl.splitnn.network.config.SplitNNConfig`
    (``random_state`` is its ``seed``: models and batch order; a defense's noise
    never depends on it); ``defense`` wraps the embedding
    gradients the label party sends (default: none).

    ``unaligned``: ``None`` trains on the aligned rows only (VanillaVFL); ``"diffu-at"`` (FedAds), or the
    baselines ``"jpl"``, ``"fedcvt"``, ``"heuristic"`` (with ``user_column``), ``"ss-vfl"`` (each party's
    bottom pretrained self-supervised for ``ssl_epochs`` on all its rows, labels unused) and ``"fedhssl"``
    (two encoders per party, pretrained for ``ssl_epochs`` with the other parties over the aligned rows and
    alone on all its rows, the local one pulled towards the cross-party one with weight ``ssl_guidance``;
    :mod:`~ray_vfl.splitnn.unaligned.hybrid`), also learn from the label party's
    unaligned rows (:func:`~ray_vfl.splitnn.unaligned_protocol.train_unaligned`): those PSI left out of ``data``
    (``VerticalDataset.from_files(..., align="psi")``), or the ``unaligned_rows`` given to :meth:`fit`.
    ``epochs`` then counts the alternating epochs after ``pretrain_epochs`` of VanillaVFL;
    ``diffusion_steps`` is the diffusion model's ``T``; ``branch_norm`` how real and synthetic ``h_N`` are
    brought to one scale (:class:`~ray_vfl.splitnn.unaligned.synthesis.UnalignedOptions`: ``"moments"``, the default,
    ``"batchnorm"`` or ``"none"``). Models trained with ``unaligned`` save and load as the others do
    (:meth:`save_model`, :meth:`load_model`): the label party's part also holds its batch norm per branch
    (``branch_norm="batchnorm"``) and its fitted diffusion model (or JPL mapping, or FedCVT's keys and values).

    Example
    -------
    >>> from ray_vfl.splitnn import SplitNNClassifier, Marvell, make_fedads_like  # doctest: +SKIP
    >>> data = make_fedads_like(50_000, seed=0)                                    # doctest: +SKIP
    >>> clf = SplitNNClassifier(epochs=2, defense=Marvell()).fit(data.train)       # doctest: +SKIP
    >>> clf.predict_proba(data.test)[:, 1]                                         # doctest: +SKIP
    >>> clf.save_model("cvr_model")                                               # doctest: +SKIP
    >>> SplitNNClassifier.load_model("cvr_model").predict(data.test)               # doctest: +SKIP

    Two files with different ID sets to a Diffu-AT model:

    >>> data = VerticalDataset.from_files({"ads": "ads.csv", "media": "media.csv"}, id_column="id",  # doctest: +SKIP
    ...                                   label="y", align="psi")
    >>> clf = SplitNNClassifier(unaligned="diffu-at").fit(data)                     # doctest: +SKIP
    """

    classes_ = np.array([0, 1])

    def __init__(
        self,
        embedding_dim: int = 8,
        n_bins: int = 32,
        max_categories: int = 1_000_000,
        nonlabel_hidden: tuple[int, ...] = (128, 32),
        label_hidden: tuple[int, ...] = (256, 128),
        top_hidden: tuple[int, ...] = (),
        batch_size: int = 256,
        epochs: int = 1,
        learning_rate: float = 1e-3,
        optimizer: str = "adam",
        defense: Defense | None = None,
        random_state: int = 0,
        timeout_s: float | None = None,
        runtime: Runtime | None = None,
        unaligned: str | None = None,
        pretrain_epochs: int = 1,
        diffusion_steps: int = 100,
        user_column: str | None = None,
        ssl_epochs: int = 5,
        ssl_guidance: float = 0.5,
        branch_norm: str = "moments",
    ) -> None:
        self.embedding_dim = embedding_dim
        self.n_bins = n_bins
        self.max_categories = max_categories
        self.nonlabel_hidden = nonlabel_hidden
        self.label_hidden = label_hidden
        self.top_hidden = top_hidden
        self.batch_size = batch_size
        self.epochs = epochs
        self.learning_rate = learning_rate
        self.optimizer = optimizer
        self.defense = defense
        self.random_state = random_state
        self.timeout_s = timeout_s
        self.runtime = runtime
        self.unaligned = unaligned
        self.pretrain_epochs = pretrain_epochs
        self.diffusion_steps = diffusion_steps
        self.user_column = user_column
        self.ssl_epochs = ssl_epochs
        self.ssl_guidance = ssl_guidance
        self.branch_norm = branch_norm

    def _config(self) -> SplitNNConfig:
        return SplitNNConfig(
            embedding_dim=self.embedding_dim, n_bins=self.n_bins, max_categories=self.max_categories,
            nonlabel_hidden=tuple(self.nonlabel_hidden), label_hidden=tuple(self.label_hidden),
            top_hidden=tuple(self.top_hidden),
            batch_size=self.batch_size, epochs=self.epochs, learning_rate=self.learning_rate,
            optimizer=self.optimizer, seed=self.random_state, timeout_s=self.timeout_s,
        )

    def _options(self) -> UnalignedOptions | None:
        if self.unaligned is None:
            return None
        if self.unaligned not in METHODS:
            raise ConfigError(f"unaligned must be None or one of {METHODS}, got {self.unaligned!r}")
        return UnalignedOptions(method=self.unaligned, pretrain_epochs=self.pretrain_epochs,
                                diffusion=DiffusionConfig(steps=self.diffusion_steps, seed=self.random_state),
                                user_column=self.user_column, ssl_epochs=self.ssl_epochs,
                                ssl_guidance=self.ssl_guidance, branch_norm=self.branch_norm)

    def fit(self, data: VerticalDataset, unaligned_rows: VerticalDataset | None = None) -> "SplitNNClassifier":
        """Train on the aligned rows of ``data`` (its ``label_party`` holds the labels), and with
        ``unaligned`` set on the label party's unaligned rows too."""
        config = self._config()
        options = self._options()
        VerticalDataset.ensure(data)
        if options is None and unaligned_rows is not None:
            raise ConfigError("unaligned_rows given but unaligned=None; set unaligned='diffu-at' to use them")
        runtime = self._fit_runtime(config.timeout_s)
        if options is None:
            self.model_ = train(runtime, data, config, defense=self.defense)
        else:
            self.model_ = train_unaligned(runtime, data, unaligned_rows, config, options, defense=self.defense)
        self.unaligned_report_ = self.model_.unaligned
        self.losses_ = list(self.model_.losses)
        self.comm_stats_ = self.model_.comm_stats
        self.label_party_ = self.model_.label_party
        self.privacy_ = self.model_.privacy  # GaussianDP: the accounted epsilon of this training; else None
        return self

    def predict_proba(self, data: VerticalDataset) -> np.ndarray:
        """``(n, 2)`` class probabilities by federated prediction."""
        p = self._check_fitted().predict_proba(data)
        return np.column_stack([1.0 - p, p])

    def predict(self, data: VerticalDataset) -> np.ndarray:
        """Predicted class (0 or 1) per row."""
        return (self.predict_proba(data)[:, 1] > 0.5).astype(np.int64)

    def evaluate(self, data: VerticalDataset) -> dict[str, float]:
        """Test AUC and NLL (log loss) on labelled rows."""
        return self._check_fitted().evaluate(data)

    def recorded_view(self, party: str | None = None):
        """What a non-label party saw during training (the input of the label-inference attacks)."""
        return self._check_fitted().recorded_view(party)

    def save_model(self, directory: str) -> dict[str, str]:
        """Each party writes its own part under ``directory`` (see :meth:`SplitNNModel.save`)."""
        return self._check_fitted().save(directory)

    @classmethod
    def load_model(cls, directory: str, runtime: Runtime | None = None) -> "SplitNNClassifier":
        """An estimator for prediction from parts saved by :meth:`save_model`."""
        model = SplitNNModel.load(directory, runtime)
        cfg, opts = model.config, model.unaligned_options
        unaligned = {}
        if opts is not None:  # the saved config counts the pretraining epochs too; epochs= counts the alternating ones
            unaligned = dict(unaligned=opts.method, pretrain_epochs=opts.pretrain_epochs,
                             diffusion_steps=opts.diffusion.steps, user_column=opts.user_column,
                             ssl_epochs=opts.ssl_epochs, ssl_guidance=opts.ssl_guidance, branch_norm=opts.branch_norm)
        est = cls(embedding_dim=cfg.embedding_dim, n_bins=cfg.n_bins, max_categories=cfg.max_categories,
                  nonlabel_hidden=cfg.nonlabel_hidden, label_hidden=cfg.label_hidden, top_hidden=cfg.top_hidden, batch_size=cfg.batch_size,
                  epochs=cfg.epochs - (opts.pretrain_epochs if opts else 0), learning_rate=cfg.learning_rate,
                  optimizer=cfg.optimizer, defense=model.defense, random_state=cfg.seed, timeout_s=cfg.timeout_s,
                  runtime=model.runtime, **unaligned)
        est.model_ = model
        est.label_party_ = model.label_party
        est.unaligned_report_ = model.unaligned
        return est
