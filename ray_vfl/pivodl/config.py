"""PIVODL's hyper-parameters: XGBoost's, plus the instance threshold and the partial DP of leaf weights.

Objectives: ``binary:logistic``, ``reg:squarederror``, and ``multi:softprob`` / ``multi:softmax`` with
``num_class=K`` and one tree per class per round (``multi_strategy="one_output_per_tree"``, XGBoost's
default): tree ``t`` of a round fits class ``t % K``'s softmax gradient pairs of every client's own
labelled rows (:mod:`ray_vfl.trees.multiclass`), and ``n_trees`` counts rounds (``n_trees * K`` trees).

``enable_categorical``: the columns each client declares categorical are split natively, as XGBoost's
``hist`` does (:mod:`ray_vfl.trees.categorical`): one category against the rest below
``max_cat_to_onehot`` categories (one candidate per category), else by partition (the source offers one
record per category, the split client sorts them by leaf weight and scores the prefixes,
:mod:`ray_vfl.pivodl.partition`); the category set of a split stays in its source's lookup table.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..config import check_float, check_int
from ..crypto.privacy.gaussian_dp import check_budget, noise_multiplier
from ..errors import ConfigError
from ..trees.config import BoostConfig
from ..trees.multiclass import is_multiclass, trees_per_round

__all__ = ["PIVODLConfig"]


@dataclass(frozen=True)
class PIVODLConfig(BoostConfig):
    """:class:`~ray_vfl.trees.config.BoostConfig` plus what PIVODL adds.

    Parameters
    ----------
    instance_threshold : int
        ``t``: every sum a split client decrypts or derives at a node -- a candidate's left branch, its
        right branch, the node's totals -- and every difference of two of them holds 0 or at least
        ``t`` of each client's labelled rows. The source offers only the candidates that keep this
        (:mod:`ray_vfl.pivodl.threshold`: adjacent thresholds closer than ``t`` rows are merged, a
        candidate that cuts a node almost as an offered one does is dropped), each client refuses a
        left or right branch over 1 to ``t - 1`` of its rows, and a client may label 0 or at least
        ``t`` rows. 1 refuses nothing: the trees then equal the centralized ones (with any ``t``
        they equal :func:`ray_vfl.pivodl.reference.fit_reference`'s, which applies the same rule).

        Why 50 by default: a split client can compute every row's margin, so a sum over one other
        client's row, found by its hessian, reads the row's label (``y = p - g``). With ``t`` = 1
        the split client's differential attack (:func:`~ray_vfl.pivodl.attack.differential_guesses`)
        read 2-34% of the other clients' labels in the runs below (more on less data), every one
        right. With ``t`` >= 2 a difference
        never sums fewer than ``t`` rows of a client, so isolating a row needs its ``t - 1`` others
        to cancel exactly (rows of equal margin and label split evenly between the two sets): on
        credit (2-4 clients, 6 trees of depth 5, 3,000-12,000 training rows) the attack within a
        node still read one label at ``t`` = 2 and once at 20 (2 clients), none at 50 in any run;
        across the nodes of a tree (``scope="tree"``), which no size bound rules out, it read up to
        0.7% of the labels at 20, at most 0.2% at 50, at most 0.05% at 100. The test AUC stayed
        within 0.01 of ``t`` = 1's at 50 and 100; energy's RMSE rose from 88.9 to 92.9 Wh at 50 (4
        clients, 6 trees of depth 6). Small data or many clients may need less: a node splits only
        where each part keeps ``t`` rows of every client that has rows there.
    epsilon : float or None
        Budget of the partial differential privacy of the released leaf weights over the whole
        training (each row's label reaches one leaf per tree: ``n_trees`` releases, ``n_trees * K``
        with ``K`` classes, one tree per class and round); ``None`` (the
        default) releases exact leaf weights. It protects the released weights only: the row
        partitions reach every client, and a client holding labels reads the others' label rates off
        them whatever the budget (:mod:`ray_vfl.pivodl.attack`).
    delta : float
        The ``delta`` of that budget, in (0, 1); well below 1 / rows.
    leaf_clip : float or None
        ``C``: under DP every leaf weight is clipped to ``[-C, C]``, the released copy before its
        noise and the one its holder keeps for prediction alike. ``None``: 1.0 for the logistic
        and the multi-class objectives; squared error needs it given with ``epsilon`` (the scale of its leaf weights is
        the label's). A smaller ``C`` means less noise but caps how far the margins can move
        (``n_trees * C`` from the base score; see ``benchmarks/RESULTS.md``, "Why epsilon 1 scored below epsilon 0.1").
    dp_sensitivity : str
        How far one row's label can move a released leaf weight (:meth:`leaf_sensitivity`).
        ``"global"`` (the default): ``min(2C, eta * dg / lambda)``, the same bound for every leaf
        (``dg`` = 1 for the logistic loss, whose gradient ``p - y`` moves by at most 1 when a label
        flips, and for the softmax loss, whose class-``k`` gradient ``p_k - [y = k]`` moves by at most
        1 when a label changes class -- each class's tree is one release; unbounded, so ``2C``, for
        squared error). The hessians (``p (1 - p)``, ``2 p_k (1 - p_k)``) do not depend on the label
        given the margins. ``"leaf"``: ``min(2C, eta * dg / (H + lambda))``
        with the leaf's own hessian sum ``H`` -- still label-DP (``H`` does not depend on the labels
        given the margins) and far less noise in big leaves; but then the released weights keep
        telling every client the label *mean* of each big leaf, which the paper's label-guess attack
        exploits (see ``benchmarks/RESULTS.md``, "PIVODL Table III: label guess under partial DP
        (pivodl_table3_label_guess)").

    Example
    -------
    >>> cfg = PIVODLConfig(epsilon=1.0, n_trees=4, backend="plain")
    >>> cfg.leaf_clip, round(cfg.noise_multiplier, 2)
    (1.0, 7.46)
    >>> multi = PIVODLConfig(objective="multi:softprob", num_class=3, epsilon=1.0, n_trees=4, backend="plain")
    >>> multi.trees_per_round, multi.releases, round(multi.noise_multiplier, 2)  # 12 trees released
    (3, 12, 12.92)
    """

    backend: str = "paillier"
    instance_threshold: int = 50
    epsilon: float | None = None
    delta: float = 1e-5
    leaf_clip: float | None = None
    dp_sensitivity: str = "global"

    def __post_init__(self) -> None:
        super().__post_init__()
        if is_multiclass(self.objective) and self.multi_strategy != "one_output_per_tree":
            raise ConfigError(f"PIVODL grows one tree per class (multi_strategy='one_output_per_tree'), not "
                              f"{self.multi_strategy!r}: its split clients score one gradient pair per sum (a "
                              "client's encrypted candidate sums hold one class's G and H, and the instance "
                              "threshold is checked on those sums); multi-output trees are SecureBoost's "
                              "(SecureBoostClassifier(multi_strategy='multi_output_tree'))")
        check_int("instance_threshold", self.instance_threshold, 1, 1_000_000)
        if self.epsilon is not None:
            check_budget(self.epsilon, self.delta)
        else:
            check_budget(1.0, self.delta)
        if self.dp_sensitivity not in ("global", "leaf"):
            raise ConfigError(f"dp_sensitivity must be 'global' or 'leaf', got {self.dp_sensitivity!r}")
        if self.leaf_clip is not None:
            check_float("leaf_clip", self.leaf_clip, 0.0, 1e15, lo_open=True)
        elif self.epsilon is not None:
            if self.objective != "binary:logistic" and not is_multiclass(self.objective):
                raise ConfigError("leaf_clip must be given with epsilon for reg:squarederror: leaf weights scale "
                                  "with the label, so choose C near the largest leaf weight you expect")
            object.__setattr__(self, "leaf_clip", 1.0)

    @property
    def dp(self) -> bool:
        """Whether released leaf weights get noise."""
        return self.epsilon is not None

    def leaf_sensitivity(self, H):
        """How far one label can move each released (clipped) leaf weight, for leaves with hessian sums ``H``.

        Example
        -------
        >>> cfg = PIVODLConfig(epsilon=1.0, backend="plain", learning_rate=0.3)
        >>> float(cfg.leaf_sensitivity(np.array([9.0]))[0]), float(cfg.replace(dp_sensitivity="leaf").leaf_sensitivity(np.array([9.0]))[0])
        (0.3, 0.03)
        """
        H = np.asarray(H, dtype=np.float64)
        if self.objective != "binary:logistic" and not is_multiclass(self.objective):
            return np.full(H.shape, 2.0 * self.leaf_clip)
        denominator = self.reg_lambda + (H if self.dp_sensitivity == "leaf" else np.zeros_like(H))
        with np.errstate(divide="ignore"):
            step = np.where(denominator > 0, self.learning_rate / np.maximum(denominator, 1e-300), np.inf)
        return np.minimum(2.0 * self.leaf_clip, step)

    @property
    def trees_per_round(self) -> int:
        """Trees grown per boosting round: ``num_class`` for a multi-class objective, else 1."""
        return trees_per_round(self.objective, self.num_class, self.multi_strategy)

    @property
    def releases(self) -> int:
        """Leaf-weight releases of a whole training that each row's label takes part in: one per tree,
        ``n_trees * trees_per_round``."""
        return self.n_trees * self.trees_per_round

    @property
    def noise_multiplier(self) -> float | None:
        """``sigma / sensitivity`` of every released leaf weight (``None`` without DP), for
        :attr:`releases` releases."""
        return noise_multiplier(self.epsilon, self.delta, self.releases) if self.dp else None
