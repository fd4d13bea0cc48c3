"""The split neural network's hyper-parameters: one frozen, self-checking dataclass.

Defaults follow the FedAds benchmark (Wei et al., SIGIR 2023): every feature
becomes an 8-dimensional embedding (continuous values first cut into
equal-frequency bins), the non-label party's bottom DNN is [128, 32], the
label party's bottom DNN is [256, 128], the top model is one logistic layer,
batch size 256, one epoch.

    >>> SplitNNConfig(batch_size=0)
    Traceback (most recent call last):
    ...
    ray_vfl.errors.ConfigError: batch_size must be an integer in [1, 1000000], got 0
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ...config import ValidatedConfig, check_float, check_int
from ...errors import ConfigError

__all__ = ["SplitNNConfig", "OPTIMIZERS", "DTYPES"]

OPTIMIZERS = ("adam", "sgd", "adagrad")
DTYPES = ("float32", "float64")


def _positive(name: str, value: Any, hi: float = 1e6) -> None:
    check_float(name, value, 0.0, hi, lo_open=True)


def _layers(name: str, value: Any) -> None:
    if not isinstance(value, tuple) or not value or any(isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= 65_536 for v in value):
        raise ConfigError(f"{name} must be a non-empty tuple of layer widths in [1, 65536], e.g. (128, 32); got {value!r}")


@dataclass(frozen=True)
class SplitNNConfig(ValidatedConfig):
    """Hyper-parameters of split-NN training (FedAds defaults).

    Parameters
    ----------
    embedding_dim : int
        Width of every feature's embedding, in [1, 1024].
    n_bins : int
        Equal-frequency bins for a continuous feature, in [2, 10000].
    max_categories : int
        Largest vocabulary a categorical feature may have (a safety limit on
        the embedding table), in [2, 10**7].
    nonlabel_hidden : tuple of int
        Non-label bottom DNN widths; the last one is the federated embedding width.
    label_hidden : tuple of int
        Label party bottom DNN widths.
    top_hidden : tuple of int
        Hidden ReLU layers of the top model before its logistic output; empty
        (the default) is FedAds' single logistic layer. With it every row of
        an embedding gradient is a multiple of one vector, which is what makes
        MixPro's projection leak (see :class:`~ray_vfl.splitnn.privacy.defenses.MixPro`).
    batch_size : int
        Rows per mini-batch, in [1, 10**6].
    epochs : int
        Passes over the aligned training rows, in [1, 1000].
    learning_rate : float
        Step size of every party's optimizer.
    optimizer : str
        ``"adam"``, ``"sgd"`` or ``"adagrad"``.
    dtype : str
        ``"float32"`` (default) or ``"float64"`` (exact comparisons in tests).
    seed : int
        Seeds the model initialisation and the shared batch order.
    pipeline_depth : int
        Batches the label party runs per driver call (the driver reports
        progress and checks for failures between calls; training stays
        exactly sequential).
    timeout_s : float or None
        Longest wait for one protocol phase before the driver raises
        :class:`~ray_vfl.errors.PartyFailedError`. Precedence: this value if set, else the
        timeout of the :class:`~ray_vfl.runtime.actors.Runtime` the protocol runs on (600 s by
        default). The parties' waits for each other use the same value.

    Example
    -------
    >>> cfg = SplitNNConfig()
    >>> cfg.nonlabel_hidden, cfg.label_hidden, cfg.batch_size
    ((128, 32), (256, 128), 256)
    >>> cfg.replace(epochs=2).epochs
    2
    """

    embedding_dim: int = 8
    n_bins: int = 32
    max_categories: int = 1_000_000
    nonlabel_hidden: tuple[int, ...] = (128, 32)
    label_hidden: tuple[int, ...] = (256, 128)
    top_hidden: tuple[int, ...] = ()
    batch_size: int = 256
    epochs: int = 1
    learning_rate: float = 1e-3
    optimizer: str = "adam"
    dtype: str = "float32"
    seed: int = 0
    pipeline_depth: int = 32
    timeout_s: float | None = None

    def __post_init__(self) -> None:
        for name in ("nonlabel_hidden", "label_hidden", "top_hidden"):
            value = getattr(self, name)
            if isinstance(value, list):  # accept lists from JSON, store tuples (hashable, frozen)
                object.__setattr__(self, name, tuple(value))
        check_int("embedding_dim", self.embedding_dim, 1, 1024)
        check_int("n_bins", self.n_bins, 2, 10_000)
        check_int("max_categories", self.max_categories, 2, 10**7)
        _layers("nonlabel_hidden", self.nonlabel_hidden)
        _layers("label_hidden", self.label_hidden)
        if self.top_hidden != ():
            _layers("top_hidden", self.top_hidden)
        check_int("batch_size", self.batch_size, 1, 1_000_000)
        check_int("epochs", self.epochs, 1, 1000)
        _positive("learning_rate", self.learning_rate, 10.0)
        if self.optimizer not in OPTIMIZERS:
            raise ConfigError(f"optimizer must be one of {OPTIMIZERS}, got {self.optimizer!r}")
        if self.dtype not in DTYPES:
            raise ConfigError(f"dtype must be one of {DTYPES}, got {self.dtype!r}")
        check_int("seed", self.seed, 0, 2**31 - 1)
        check_int("pipeline_depth", self.pipeline_depth, 1, 100_000)
        if self.timeout_s is not None:
            _positive("timeout_s", self.timeout_s, 1e7)

    @property
    def embedding_width(self) -> int:
        """Width of the federated embedding a non-label party sends."""
        return self.nonlabel_hidden[-1]

