"""PIVODL's hyper-parameters: XGBoost's, plus the instance threshold and the partial DP of leaf weights."""

from __future__ import annotations

from dataclasses import dataclass

from ..config import check_float, check_int
from ..crypto.gaussian_dp import check_budget, noise_multiplier
from ..errors import ConfigError
from ..trees.config import BoostConfig

__all__ = ["PIVODLConfig"]


@dataclass(frozen=True)
class PIVODLConfig(BoostConfig):
    """:class:`~ray_vfl.trees.config.BoostConfig` plus what PIVODL adds.

    Parameters
    ----------
    instance_threshold : int
        A client refuses to sum a candidate's left branch over fewer than this many of its own
        labelled rows (it sums none at all without objection); a refused candidate is dropped.
        1 (the default) refuses nothing: the trees then equal the centralized ones. Larger values
        keep the split clients from decrypting sums over a handful of one client's rows, at some
        accuracy.
    epsilon : float or None
        Budget of the partial differential privacy of the released leaf weights over the whole
        training (each row's label reaches one leaf per tree: ``n_trees`` releases); ``None`` (the
        default) releases exact leaf weights.
    delta : float
        The ``delta`` of that budget, in (0, 1); well below 1 / rows.
    leaf_clip : float or None
        ``C``: a released leaf weight is first clipped to ``[-C, C]``. ``None``: 1.0 for the
        logistic objective; squared error needs it given with ``epsilon`` (the scale of its leaf
        weights is the label's).

    Example
    -------
    >>> cfg = PIVODLConfig(epsilon=1.0, n_trees=4, backend="plain")
    >>> cfg.leaf_clip, round(cfg.noise_multiplier, 2)
    (1.0, 7.46)
    """

    backend: str = "paillier"
    instance_threshold: int = 1
    epsilon: float | None = None
    delta: float = 1e-5
    leaf_clip: float | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        check_int("instance_threshold", self.instance_threshold, 1, 1_000_000)
        if self.epsilon is not None:
            check_budget(self.epsilon, self.delta)
        else:
            check_budget(1.0, self.delta)
        if self.leaf_clip is not None:
            check_float("leaf_clip", self.leaf_clip, 0.0, 1e15, lo_open=True)
        elif self.epsilon is not None:
            if self.objective != "binary:logistic":
                raise ConfigError("leaf_clip must be given with epsilon for reg:squarederror: leaf weights scale "
                                  "with the label, so choose C near the largest leaf weight you expect")
            object.__setattr__(self, "leaf_clip", 1.0)

    @property
    def dp(self) -> bool:
        """Whether released leaf weights get noise."""
        return self.epsilon is not None

    @property
    def noise_multiplier(self) -> float | None:
        """``sigma / sensitivity`` of every released leaf weight (``None`` without DP)."""
        return noise_multiplier(self.epsilon, self.delta, self.n_trees) if self.dp else None
