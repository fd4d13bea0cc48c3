"""SSXGB's hyper-parameters: XGBoost's, the fixed-point and two-server sizes, the sampling rates."""

from __future__ import annotations

from dataclasses import dataclass

from ..config import ValidatedConfig, check_float, check_int
from ..crypto.he.key_policy import check_key_bits
from ..errors import ConfigError
from .approx import FixedPointPlan

__all__ = ["ENGINES", "SSXGBConfig", "check_engine_runs"]

#: the two servers' arithmetic engines :class:`SSXGBConfig` accepts
ENGINES = ("bcp", "lattice")


@dataclass(frozen=True)
class SSXGBConfig(ValidatedConfig):
    """What one SSXGB training uses (binary logistic loss only, as in the paper).

    Parameters
    ----------
    n_trees : int
        Trees in all, the LBP's first (plaintext) tree included, in [1, 10000].
    max_depth : int
        Depth of every tree; federated trees are grown full (every node of a level splits), in [1, 10].
    learning_rate, reg_lambda : float
        ``eta`` in (0, 1] and ``lambda`` > 0 (the secure division needs ``H + lambda > 0``).
    max_bin : int
        Quantile bins per feature, in [2, 255]; a feature's candidates are ``bin <= b`` for every
        bin ``b`` below its top one (missing values always go right).
    base_score : float or None
        Initial probability; ``None``: the LBP's label mean.
    key_bits, allow_weak_keys
        BCP modulus size (2048 and up; 1024 only with ``allow_weak_keys=True``).
    frac_bits : int
        ``F``: every encrypted value is a fixed-point integer scaled by ``2^F``, in [8, 40].
    value_bits, kappa : int
        ``l`` and the statistical hiding parameter of the two-server protocols
        (:class:`~ray_vfl.crypto.two_server.server_s.TwoServerConfig`).
    sigmoid_range : float
        ``R``: the sigmoid is replaced by its least-squares odd cubic on ``[-R, R]``, every margin
        clamped into that range first (:mod:`ray_vfl.ssxgb.approx`), in [1, 4.5] (past about 4.7
        the cubic leaves [0, 1] inside its own range).
    row_subsample, feature_subsample : float
        Rates in (0, 1] (the paper: 0.8): rows from a shared seed per round, features by each
        participant's own generator.
    seed : int
        The shared seed of the row sample.
    max_candidates : int
        Largest number of split candidates of one node over all participants: the comparison
        tournament costs ``3 ceil(log2 k)`` two-server rounds per level and its encrypted index must
        stay below ``2^index_bits`` (``index_bits = value_bits`` minus the bits of the gain comparisons'
        cross products, :meth:`~ray_vfl.ssxgb.approx.FixedPointPlan.comparison_bits`); more is refused.
    workers_per_server : int or None
        Ray tasks over which server C and server S each cut their large ciphertext arrays (encryption,
        Exp, mDec), pinned to the server's own nodes; ``None``: one per CPU of those nodes; 1: none.
    timeout_s : float or None
        Longest wait for one phase (default: the runtime's).
    engine : str
        The two servers' arithmetic, one of :data:`ENGINES`: ``"bcp"`` (the paper's additive HE, the
        default) or ``"lattice"`` (BFV with SIMD slots, :mod:`ray_vfl.crypto.lattice`). Both run the
        federated protocol (the lattice engine's rounds: :mod:`ray_vfl.ssxgb.lattice_roles`); the
        lattice engine saves no model or checkpoint yet.

    Example
    -------
    >>> SSXGBConfig(n_trees=3, key_bits=1024, allow_weak_keys=True).frac_bits
    24
    """

    n_trees: int = 10
    max_depth: int = 3
    learning_rate: float = 0.3
    reg_lambda: float = 1.0
    max_bin: int = 32
    base_score: float | None = None
    key_bits: int = 2048
    allow_weak_keys: bool = False
    frac_bits: int = 24
    value_bits: int = 256
    kappa: int = 80
    sigmoid_range: float = 4.0
    row_subsample: float = 0.8
    feature_subsample: float = 0.8
    seed: int = 0
    max_candidates: int = 4096
    workers_per_server: int | None = None
    timeout_s: float | None = None
    engine: str = "bcp"

    def __post_init__(self) -> None:
        check_int("n_trees", self.n_trees, 1, 10_000)
        check_int("max_depth", self.max_depth, 1, 10)
        check_float("learning_rate", self.learning_rate, 0.0, 1.0, lo_open=True)
        check_float("reg_lambda", self.reg_lambda, 0.0, 1e6, lo_open=True)
        check_int("max_bin", self.max_bin, 2, 255)
        if self.base_score is not None:
            check_float("base_score", self.base_score, 0.0, 1.0, lo_open=True)
            if self.base_score >= 1.0:
                raise ConfigError(f"base_score must be a probability in (0, 1), got {self.base_score}")
        if not isinstance(self.allow_weak_keys, bool):
            raise ConfigError(f"allow_weak_keys must be True or False, got {self.allow_weak_keys!r}")
        if isinstance(self.key_bits, bool) or not isinstance(self.key_bits, int):
            raise ConfigError(f"key_bits must be an integer such as 2048, got {self.key_bits!r}")
        check_key_bits(self.key_bits, self.allow_weak_keys, "allow_weak_keys=True", warn=False)
        check_int("frac_bits", self.frac_bits, 8, 40)
        check_int("value_bits", self.value_bits, 64, 4096)
        check_int("kappa", self.kappa, 40, 256)
        check_float("sigmoid_range", self.sigmoid_range, 1.0, 4.5)
        check_float("row_subsample", self.row_subsample, 0.0, 1.0, lo_open=True)
        check_float("feature_subsample", self.feature_subsample, 0.0, 1.0, lo_open=True)
        check_int("seed", self.seed, 0, 2**63 - 1)
        check_int("max_candidates", self.max_candidates, 2, 1 << 20)
        if self.value_bits + self.kappa + 6 > self.key_bits:
            raise ConfigError(f"value_bits + kappa + 6 = {self.value_bits + self.kappa + 6} exceeds key_bits = "
                              f"{self.key_bits}: lower value_bits or use a larger key")
        FixedPointPlan.of(self, 1)  # the clamped cubic's hessian must stay positive at this frac_bits
        if self.workers_per_server is not None:
            check_int("workers_per_server", self.workers_per_server, 1, 1024)
        if self.timeout_s is not None:
            check_float("timeout_s", self.timeout_s, 0.0, 1e7, lo_open=True)
        if not isinstance(self.engine, str) or self.engine not in ENGINES:
            raise ConfigError(f"engine must be one of {', '.join(repr(e) for e in ENGINES)}, got {self.engine!r}")

    def check_key_policy(self) -> None:
        """Warn (:class:`~ray_vfl.errors.SecurityWarning`) about a key below 2048 bits (allowed by opt-in)."""
        check_key_bits(self.key_bits, self.allow_weak_keys, "allow_weak_keys=True", stacklevel=4)


def check_engine_runs(config: SSXGBConfig) -> None:
    """Raise :class:`~ray_vfl.errors.ConfigError` if the federated protocol cannot run ``config.engine``
    (``"lattice"`` needs tenseal and zstandard: ``pip install 'ray_vfl[lattice]'``)."""
    if config.engine == "lattice":
        try:
            import tenseal.sealapi  # noqa: F401
            import zstandard  # noqa: F401
        except ImportError as exc:
            raise ConfigError(f"engine='lattice' needs tenseal and zstandard ({exc}): pip install 'ray_vfl[lattice]' "
                              "or use engine='bcp'") from None
