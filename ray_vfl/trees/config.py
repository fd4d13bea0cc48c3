"""Hyper-parameters of federated gradient boosting, shared by every tree protocol.

    >>> BoostConfig(max_depth=0)
    Traceback (most recent call last):
    ...
    ray_vfl.errors.ConfigError: max_depth must be an integer in [1, 16], got 0
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any

from ..config import ValidatedConfig, check_float, check_int
from ..crypto.he.key_policy import MIN_KEY_BITS, check_key_bits, weak_key_warning
from ..errors import ConfigError, SecurityWarning
from .multiclass import MULTI_OBJECTIVES, MULTI_STRATEGIES, is_multiclass

__all__ = ["BoostConfig", "OBJECTIVES", "MIN_KEY_BITS", "PLAIN_BACKEND_WARNING", "default_gradient_bound"]

OBJECTIVES = ("binary:logistic", "reg:squarederror") + MULTI_OBJECTIVES
PLAIN_BACKEND_WARNING = (
    "backend='plain' encrypts nothing: every passive party sees each row's gradient, and the labels follow from "
    "the gradients (for the logistic loss g = p - y, so g < 0 exactly for the rows labelled 1); use it for tests "
    "and baselines only, and backend='paillier' or 'ou' with real data")
# Largest |gradient| the encrypted encoding holds for squared error unless the user says otherwise.
DEFAULT_GRADIENT_BOUND = 2.0**16


def default_gradient_bound(objective: str) -> float:
    """``|gradient|`` bound of an objective when the user sets none: 1 for logistic (a probability
    minus a label), :data:`DEFAULT_GRADIENT_BOUND` for squared error.

    Example
    -------
    >>> default_gradient_bound("binary:logistic"), default_gradient_bound("reg:squarederror")
    (1.0, 65536.0)
    """
    return 1.0 if objective == "binary:logistic" or is_multiclass(objective) else DEFAULT_GRADIENT_BOUND


@dataclass(frozen=True)
class BoostConfig(ValidatedConfig):
    """Hyper-parameters of federated gradient boosting (XGBoost semantics).

    Parameters
    ----------
    n_trees : int
        Number of boosting rounds, in [1, 10000].
    max_depth : int
        Depth of each tree, in [1, 16].
    learning_rate : float
        Shrinkage ``eta`` applied to every leaf weight, in (0, 1].
    reg_lambda : float
        L2 regularisation of leaf weights (``lambda``), >= 0.
    gamma : float
        Minimum loss reduction to make a split (``min_split_loss``), >= 0.
    min_child_weight : float
        Minimum hessian sum in each child, >= 0.
    max_bin : int
        Quantile bins per feature (missing values get one extra bin), in [2, 255].
    objective : str
        ``"binary:logistic"``, ``"reg:squarederror"``, or ``"multi:softprob"`` / ``"multi:softmax"``
        (``num_class`` classes, :mod:`ray_vfl.trees.multiclass`).
    base_score : float or None
        Initial prediction; ``None`` uses the label mean (a probability for the
        logistic objective).
    backend : str
        Crypto backend name (see :func:`ray_vfl.crypto.available_backends`).
    key_bits : int
        Modulus size of the encrypted backends: 2048 (the default, about 112 bits of security) or
        more; 1024 (about 80 bits) only with ``allow_weak_keys=True``.
    allow_weak_keys : bool
        Accept 1024 <= ``key_bits`` < 2048, with a :class:`~ray_vfl.errors.SecurityWarning` naming the
        security level: for tests and benchmarks, never for real data. ``False`` by default.
    workers_per_party : int or None
        Ray tasks a party fans its crypto out to; ``None``: the CPUs of the party's nodes, split
        between passive parties that share nodes.
    timeout_s : float or None
        Longest wait for one protocol phase before the driver raises
        :class:`~ray_vfl.errors.PartyFailedError`. Precedence: this value if set, else the
        timeout of the :class:`~ray_vfl.runtime.actors.Runtime` the protocol runs on (600 s by
        default). The parties' waits for each other use the same value.
    precompute_masks : bool
        Let the label party make the next tree's encryption randomness in the
        background, at the lowest OS priority (:mod:`ray_vfl.crypto.he.mask_reserve`).
    group_features : bool
        Let each passive party sum its encrypted histograms through the joint
        cells of groups of its features (:mod:`ray_vfl.trees.feature_groups`): the
        same sums from fewer ciphertext products.
    gradient_bound : float or None
        Largest ``|gradient|`` (and ``|hessian|``) the encrypted fixed-point
        encoding holds; it sizes every slot and every party sees it. ``None``
        (the default) resolves on construction to the objective's bound
        (:func:`default_gradient_bound`: 1 for the logistic objective, a
        probability minus a label; 65,536 for squared error), so the attribute
        always holds the bound in force, and :meth:`replace` with another
        objective derives it again unless it was given. Training refuses
        squared-error labels further than half the bound from the base score
        (residuals may grow a little while boosting): scale the labels or raise
        the bound. Sample weights multiply the gradients: the bound must cover
        the largest weight too (``fit(sample_weight=...)`` derives it when None).
    scale_pos_weight : float
        Weight of every row labelled 1 relative to the rows labelled 0 (XGBoost's ``scale_pos_weight``),
        > 0; 1 by default. It multiplies the sample weights, at the label party
        (:mod:`ray_vfl.trees.weights`).
    num_class : int or None
        Classes of a multi-class objective, in [2, 1000]; ``None`` for the others.
    multi_strategy : str
        Multi-class trees: ``"one_output_per_tree"`` (one tree per class and round, XGBoost's
        default) or ``"multi_output_tree"`` (one tree per round with ``num_class`` leaf weights).
    enable_categorical : bool
        Split the columns each party declares categorical natively, by sets of categories chosen at
        the party that holds the column (:mod:`ray_vfl.trees.categorical`, XGBoost's
        ``enable_categorical``); ``False`` (the default, as XGBoost's) splits their ordinal codes at
        thresholds. One category per bin: a column may hold at most ``max_bin`` categories.
        Not with ``multi_strategy="multi_output_tree"``.
    max_cat_to_onehot : int
        A categorical column of fewer categories is split one category against the rest; one of
        more by partition (categories sorted by their leaf weight at the node). 4 by default, in [1, 255].
    max_cat_threshold : int
        At most this many categories on one side of a partition split (64 by default, in [1, 255]).

    Warns
    -----
    SecurityWarning
        From :meth:`warn_if_weak`, which training calls once per fit: with ``allow_weak_keys=True``
        and a key under 2048 bits, and with ``backend="plain"`` (passive parties see the gradients,
        from which the labels follow).

    Example
    -------
    >>> cfg = BoostConfig(n_trees=10, max_depth=5)
    >>> cfg.replace(max_depth=3).max_depth
    3
    >>> cfg.gradient_bound, cfg.replace(objective="reg:squarederror").gradient_bound
    (1.0, 65536.0)
    >>> BoostConfig.from_dict(cfg.to_dict()) == cfg
    True
    >>> BoostConfig(objective="multi:softprob", num_class=3, multi_strategy="multi_output_tree").gradient_bound
    1.0
    """

    n_trees: int = 10
    max_depth: int = 5
    learning_rate: float = 0.3
    reg_lambda: float = 1.0
    gamma: float = 0.0
    min_child_weight: float = 1.0
    max_bin: int = 32
    objective: str = "binary:logistic"
    base_score: float | None = None
    backend: str = "paillier"
    key_bits: int = 2048
    allow_weak_keys: bool = False
    workers_per_party: int | None = None
    timeout_s: float | None = None
    precompute_masks: bool = True
    group_features: bool = True
    gradient_bound: float | None = None
    scale_pos_weight: float = 1.0
    num_class: int | None = None
    multi_strategy: str = "one_output_per_tree"
    enable_categorical: bool = False
    max_cat_to_onehot: int = 4
    max_cat_threshold: int = 64

    def __post_init__(self) -> None:
        check_int("n_trees", self.n_trees, 1, 10_000)
        check_int("max_depth", self.max_depth, 1, 16)
        check_float("learning_rate", self.learning_rate, 0.0, 1.0, lo_open=True)
        check_float("reg_lambda", self.reg_lambda, 0.0, 1e12)
        check_float("gamma", self.gamma, 0.0, 1e12)
        check_float("min_child_weight", self.min_child_weight, 0.0, 1e12)
        check_int("max_bin", self.max_bin, 2, 255)
        if self.objective not in OBJECTIVES:
            raise ConfigError(f"objective must be one of {OBJECTIVES}, got {self.objective!r}")
        if is_multiclass(self.objective):
            if self.num_class is None:
                raise ConfigError(f"objective {self.objective!r} needs num_class, the number of classes (2 or more)")
            check_int("num_class", self.num_class, 2, 1000)
        elif self.num_class is not None:
            raise ConfigError(f"num_class is for the multi-class objectives {MULTI_OBJECTIVES}; objective "
                              f"{self.objective!r} takes num_class=None")
        if self.multi_strategy not in MULTI_STRATEGIES:
            raise ConfigError(f"multi_strategy must be one of {MULTI_STRATEGIES}, got {self.multi_strategy!r}")
        if not isinstance(self.enable_categorical, bool):
            raise ConfigError(f"enable_categorical must be True or False, got {self.enable_categorical!r}")
        check_int("max_cat_to_onehot", self.max_cat_to_onehot, 1, 255)
        check_int("max_cat_threshold", self.max_cat_threshold, 1, 255)
        if self.enable_categorical and self.multi_strategy == "multi_output_tree" and is_multiclass(self.objective):
            raise ConfigError("enable_categorical=True splits by category sets with one output per tree; "
                              "use multi_strategy='one_output_per_tree', or enable_categorical=False to split "
                              "the categories' ordinal codes in multi-output trees")
        if self.base_score is not None:
            if self.objective == "binary:logistic":
                check_float("base_score", self.base_score, 0.0, 1.0, lo_open=True)
                if self.base_score >= 1.0:
                    raise ConfigError(f"base_score must be a probability in (0, 1), got {self.base_score!r}")
            else:
                check_float("base_score", self.base_score, -1e300, 1e300)
        if not isinstance(self.backend, str) or not self.backend:
            raise ConfigError(f"backend must be a backend name such as 'paillier' or 'plain', got {self.backend!r}")
        if not isinstance(self.allow_weak_keys, bool):
            raise ConfigError(f"allow_weak_keys must be True or False, got {self.allow_weak_keys!r}")
        if isinstance(self.key_bits, bool) or not isinstance(self.key_bits, int):
            raise ConfigError(f"key_bits must be an integer such as 2048, got {self.key_bits!r}")
        check_key_bits(self.key_bits, self.allow_weak_keys, "allow_weak_keys=True", warn=False)  # warned by training
        if self.workers_per_party is not None:
            check_int("workers_per_party", self.workers_per_party, 1, 4096)
        if self.timeout_s is not None:
            check_float("timeout_s", self.timeout_s, 0.0, 1e7, lo_open=True)
        if not isinstance(self.precompute_masks, bool):
            raise ConfigError(f"precompute_masks must be True or False, got {self.precompute_masks!r}")
        if not isinstance(self.group_features, bool):
            raise ConfigError(f"group_features must be True or False, got {self.group_features!r}")
        check_float("scale_pos_weight", self.scale_pos_weight, 0.0, 1e12, lo_open=True)
        if is_multiclass(self.objective) and self.scale_pos_weight != 1.0:
            raise ConfigError(f"scale_pos_weight weighs the rows labelled 1 of a binary objective; multi-class "
                              f"objective {self.objective!r} takes sample weights instead: leave scale_pos_weight=1")
        given = self.gradient_bound is not None
        if given:
            check_float("gradient_bound", self.gradient_bound, 0.0, 1e15, lo_open=True)
            if (self.objective == "binary:logistic" or is_multiclass(self.objective)) and self.gradient_bound < 1.0:
                raise ConfigError(f"gradient_bound must be at least 1 for {self.objective} (gradients reach +-1), "
                                  f"got {self.gradient_bound!r}")
        bound = float(self.gradient_bound) if given else default_gradient_bound(self.objective)
        object.__setattr__(self, "gradient_bound", bound)
        # Not a field: to_dict saves the resolved bound, and replace() derives a default one again.
        object.__setattr__(self, "_derived_gradient_bound", not given)

    def security_warnings(self) -> list[str]:
        """What is weaker than the default in this config, one sentence each: a key under 2048 bits
        (accepted with ``allow_weak_keys``), the ``plain`` backend.

        Example
        -------
        >>> [w[:32] for w in BoostConfig(backend="plain").security_warnings()]
        ["backend='plain' encrypts nothing"]
        >>> BoostConfig().security_warnings()
        []
        """
        if self.backend == "plain":  # no key at all: the key size does not matter
            return [PLAIN_BACKEND_WARNING]
        weak = weak_key_warning(self.key_bits, "allow_weak_keys=True")
        return [weak] if weak else []

    def warn_if_weak(self, stacklevel: int = 2) -> None:
        """Issue a :class:`~ray_vfl.errors.SecurityWarning` for each of :meth:`security_warnings`
        (training calls it once per fit)."""
        for message in self.security_warnings():
            warnings.warn(message, SecurityWarning, stacklevel=stacklevel + 1)

    def replace(self, **changes: Any) -> "BoostConfig":
        """Return a copy with some fields changed (validated again); a gradient bound the user
        never gave follows the new objective."""
        if self._derived_gradient_bound:
            changes.setdefault("gradient_bound", None)
        return super().replace(**changes)
