"""Label-leakage defenses: wrappers of the embedding gradients the label party sends.

Every defense is a small frozen value with one method,
``protect(grad, labels, noise) -> grad``, applied by the label party to what it
sends and to nothing else: its own bottom and top models always train on the
true gradients. The protocol has no ``if defense:`` branch; "no defense" is
:class:`NoDefense`, the identity.

``noise`` is a :class:`~ray_vfl.crypto.privacy.gaussian_dp.GaussianNoise` the label
party builds inside its own actor, seeded from the operating system's entropy:
every random draw of every defense (DP's and Marvell's Gaussian noise, MixPro's
pairs and mixing weights) comes from it, never from ``SplitNNConfig.seed``, which
the non-label parties know (it orders the batches). A non-label party that
could regenerate the noise could subtract it (``tests/test_splitnn_defenses.py``
shows the attack working against a seed-derived generator and failing against
this one).

``grad`` is the ``(B, d)`` gradient of the batch's mean loss with respect to
one non-label party's embedding; ``labels`` are the batch's 0/1 labels (the
label party holds them; Marvell needs them).

=============  ==========================================================  =====================
defense        what it does to the rows it sends                            parameters
=============  ==========================================================  =====================
NoDefense      nothing                                                      -
GaussianDP     clip each row's per-example gradient to ``clip_norm``, add   epsilon, delta,
               N(0, sigma^2 I), sigma calibrated for every release          clip_norm
Marvell        per-batch Gaussian noise, class-dependent covariance         power_scale
               optimised to minimise leakage under a noise power budget
MixPro         mix each row with a random other row (lambda > 1/2), then    alpha, phi_goal
               add a multiple of the batch mean until cos >= phi_goal
=============  ==========================================================  =====================
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields, is_dataclass, replace
from functools import cached_property

import numpy as np

from ...crypto.privacy.gaussian_dp import GaussianNoise, accounted_epsilon, analytic_gaussian_sigma, noise_multiplier
from ...errors import ConfigError

__all__ = ["Defense", "NoDefense", "GaussianDP", "Marvell", "MixPro", "analytic_gaussian_sigma", "marvell_covariances",
           "marvell_bound", "DEFENSES"]


def _check(name: str, value, lo: float, hi: float, lo_open: bool = True, hi_open: bool = False) -> None:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if ok:
        ok = (value > lo if lo_open else value >= lo) and (value < hi if hi_open else value <= hi)
    if not ok:
        lb, rb = "(" if lo_open else "[", ")" if hi_open else "]"
        raise ConfigError(f"{name} must be a finite number in {lb}{lo:g}, {hi:g}{rb}, got {value!r}")


class Defense:
    """Base class: the identity. Subclasses override :meth:`protect`."""

    name = "none"

    def protect(self, grad: np.ndarray, labels: np.ndarray, noise: GaussianNoise) -> np.ndarray:
        return grad

    def params(self) -> dict:
        """The constructor parameters (for tables and saved models; no cached or internal state)."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.init} if is_dataclass(self) else {}

    def for_releases(self, releases: int) -> "Defense":
        """This defense for a training that releases each example's gradient row ``releases`` times
        (once per epoch and non-label party); only budgets that compose (DP) change."""
        return self

    def accounting(self) -> dict | None:
        """The privacy this defense proves for the training it was set up for (``None``: no guarantee)."""
        return None


@dataclass(frozen=True)
class NoDefense(Defense):
    """Send the true gradients."""

    name = "none"


@dataclass(frozen=True)
class GaussianDP(Defense):
    """Per-example clipping plus Gaussian noise: label differential privacy of what is sent.

    Each row is rescaled to the gradient of its own example's loss (``B *
    row``), clipped to L2 norm ``clip_norm``, given N(0, sigma^2 I) noise and
    scaled back by ``1/B``. Changing one example's label moves its clipped row
    by at most ``2 * clip_norm`` (the sensitivity).

    What is protected: the label of one row, against everything the non-label
    parties receive (every embedding-gradient row of every epoch), given the
    model, i.e. taking the other rows' labels, every party's features and the
    models' weights at each step as known. ``(epsilon, delta)`` is the budget
    of the whole training: with ``P`` non-label parties and ``E`` epochs a row's
    gradient goes out ``releases = E * P`` times (batches partition the rows;
    each non-label party gets the gradient of its own embedding), set by
    :func:`~ray_vfl.splitnn.protocol.train` through :meth:`for_releases`. Sigma
    is ``noise_multiplier(epsilon, delta, releases) * sensitivity``
    (:func:`ray_vfl.crypto.privacy.gaussian_dp.noise_multiplier`: exact Gaussian
    composition, no slack), and :meth:`accounting` reports the epsilon that
    ``dp-accounting``'s PLD accountant gives for those releases.

    Not covered: a label's influence through the label party's own model
    updates. The top model trains on the true labels, so the gradients of
    later batches (and the trained model) depend on every earlier label; the
    guarantee treats the model as given and does not bound that channel.

    Example
    -------
    >>> one, three = GaussianDP(epsilon=1.0), GaussianDP(epsilon=1.0).for_releases(3)
    >>> three.sigma > one.sigma
    True
    >>> round(three.accounting()["epsilon"], 2)
    1.0
    """

    epsilon: float = 1.0
    delta: float = 1e-5
    clip_norm: float = 0.1
    releases: int = 1
    name = "dp"

    def __post_init__(self) -> None:
        _check("epsilon", self.epsilon, 0.0, 1e3)
        _check("delta", self.delta, 0.0, 1.0, hi_open=True)
        _check("clip_norm", self.clip_norm, 0.0, 1e12)
        if isinstance(self.releases, bool) or not isinstance(self.releases, int) or self.releases < 1:
            raise ConfigError(f"releases must be a positive int (epochs times non-label parties), got {self.releases!r}")

    def for_releases(self, releases: int) -> "GaussianDP":
        return replace(self, releases=int(releases))

    @cached_property
    def noise_multiplier(self) -> float:
        """``sigma / sensitivity`` for ``releases`` releases that together are (epsilon, delta)-DP."""
        return noise_multiplier(self.epsilon, self.delta, self.releases)

    @cached_property
    def sigma(self) -> float:
        return self.noise_multiplier * 2.0 * self.clip_norm

    def accounting(self) -> dict:
        """The training's label-DP guarantee, epsilon from the PLD accountant (``dp-accounting``)."""
        return {"mechanism": "gaussian", "protects": "the label of one row, given the model",
                "epsilon": accounted_epsilon(self.noise_multiplier, self.releases, self.delta),
                "delta": self.delta, "releases": self.releases, "noise_multiplier": self.noise_multiplier,
                "sigma": self.sigma, "clip_norm": self.clip_norm}

    def protect(self, grad, labels, noise):
        n = len(grad)
        per_example = grad * n
        norms = np.linalg.norm(per_example, axis=1, keepdims=True)
        clipped = per_example * np.minimum(1.0, self.clip_norm / np.maximum(norms, 1e-300))
        noisy = clipped + noise.sample(grad.shape, self.sigma)
        return (noisy / n).astype(grad.dtype, copy=False)


def _divergence(x0, x1, mean_term: float):
    """One direction's share of ``2 (KL(N1||N0) + KL(N0||N1))`` for Gaussians with variances ``x0``, ``x1`` there.

    For Gaussian classes with covariances ``S0``, ``S1`` sharing eigenvectors,
    ``2 (KL(N1||N0) + KL(N0||N1)) = tr(S0^-1 S1) + tr(S1^-1 S0) - 2 dim + (m1 - m0)^T (S0^-1 + S1^-1) (m1 - m0)``,
    a sum over directions; ``mean_term`` is the squared class-mean distance
    along this direction (1 along the scaled ``d``, 0 across it).
    """
    x0, x1 = np.maximum(x0, 1e-12), np.maximum(x1, 1e-12)  # no spread and no noise: huge but finite
    return x1 / x0 + x0 / x1 - 2.0 + mean_term * (1.0 / x0 + 1.0 / x1)


def _marvell_lambdas(x: np.ndarray, p: float, dim: int, power: float) -> np.ndarray:
    """Map ``x = (t, a, b)`` in [0, 1]^3 to ``(l10, l11, l20, l21)`` spending exactly ``power``.

    ``t``: share of the power along the class-mean difference; ``a`` / ``b``:
    the positives' share of that part / of the orthogonal part.
    """
    t, a, b = x[..., 0], x[..., 1], x[..., 2]
    along, across = t * power, (1.0 - t) * power / max(dim - 1, 1)
    return np.stack([(1 - a) * along / (1 - p), a * along / p, (1 - b) * across / (1 - p), b * across / p], axis=-1)


def _marvell_inner(ts: np.ndarray, u0: float, u1: float, p: float, dim: int, power: float):
    """For each power share ``t`` along ``d``: the least bound and the positives' shares ``a``, ``b``.

    With ``t`` fixed the along and across parts of the bound depend on ``a``
    and ``b`` alone; each is minimised over [0, 1] by a grid zoomed around its
    best point, for every ``t`` at once.
    """
    totals = [(ts * power)[:, None], ((1.0 - ts) * power / max(dim - 1, 1))[:, None]]
    weights, mean_terms = [1.0, dim - 1.0], [1.0, 0.0]
    k = np.arange(len(ts))
    out = []
    for total, weight, mean_term in zip(totals, weights, mean_terms):
        lo, hi = np.zeros(len(ts)), np.ones(len(ts))
        for _ in range(5):
            shares = lo[:, None] + (hi - lo)[:, None] * np.linspace(0.0, 1.0, 41)[None, :]
            value = weight * _divergence(u0 + (1.0 - shares) * total / (1.0 - p), u1 + shares * total / p, mean_term)
            j = value.argmin(axis=1)
            best, step = shares[k, j], (hi - lo) / 40
            lo, hi = np.maximum(lo, best - 2 * step), np.minimum(hi, best + 2 * step)
        out.append((value[k, j], best))
    (v_along, a), (v_across, b) = out
    return v_along + v_across, a, b


def marvell_covariances(d2: float, u0: float, u1: float, p: float, dim: int, power: float) -> np.ndarray:
    """Marvell's optimal noise ``(l10, l11, l20, l21)`` for one batch (Li et al., ICLR 2022, Sec. 4).

    Solves ``min KL(N1||N0) + KL(N0||N1)`` over noise covariances
    ``Sigma_k = l2k I + (l1k - l2k) u u^T`` (``u`` the unit class-mean
    difference; the form the paper proves optimal) subject to the power
    constraint ``p (l11 + (dim-1) l21) + (1-p) (l10 + (dim-1) l20) <= power``,
    the noised class ``k`` being ``N(mean_k, uk I + Sigma_k)``. Inputs:
    ``d2 = |mean_1 - mean_0|^2``; ``u0``, ``u1`` the classes' per-coordinate
    gradient variances; ``p`` the share of positives; ``dim`` the gradient
    width. The objective only depends on ratios, so the problem is solved
    with ``d2 = 1``: a vectorised grid over the power split (for a fixed share
    ``t`` along ``u`` the along/across parts separate), zoomed around its best point.
    More noise never raises the bound, so the constraint holds with equality.

    Example
    -------
    >>> lam = marvell_covariances(d2=1.0, u0=0.0, u1=0.0, p=0.5, dim=4, power=4.0)
    >>> [round(float(v), 3) for v in lam[:2]], round(float(0.5 * lam[1] + 0.5 * lam[0]), 6)
    ([4.0, 4.0], 4.0)
    """
    if not (d2 > 0.0 and 0.0 < p < 1.0 and power > 0.0 and dim >= 1 and u0 >= 0.0 and u1 >= 0.0):
        raise ConfigError(f"Marvell needs d2 > 0, 0 < p < 1, power > 0, dim >= 1, u0, u1 >= 0; "
                          f"got d2={d2}, p={p}, power={power}, dim={dim}, u0={u0}, u1={u1}")
    u0, u1, power_n = u0 / d2, u1 / d2, power / d2
    ts, lo, hi = np.linspace(0.0, 1.0, 21), 0.0, 1.0
    if dim == 1:  # no orthogonal direction: all power along d
        ts = np.ones(1)
    for _ in range(6):  # zoom on t; for each t the two inner 1-D problems are solved exactly (vectorised)
        value, share_a, share_b = _marvell_inner(ts, u0, u1, p, dim, power_n)
        i = int(np.argmin(value))
        best = np.array([ts[i], share_a[i], share_b[i]])
        if len(ts) == 1:
            break
        step = ts[1] - ts[0]
        lo, hi = max(lo, ts[i] - 2 * step), min(hi, ts[i] + 2 * step)
        ts = np.linspace(lo, hi, 21)
    return _marvell_lambdas(np.clip(best, 0.0, 1.0), p, dim, power_n) * d2


def marvell_bound(lam: np.ndarray, d2: float, u0: float, u1: float, dim: int) -> float:
    """The leakage bound Marvell minimises, ``KL(N1||N0) + KL(N0||N1)``, for noise ``lam``."""
    l10, l11, l20, l21 = np.asarray(lam, dtype=np.float64) / d2
    u0, u1 = u0 / d2, u1 / d2
    return float(_divergence(u0 + l10, u1 + l11, 1.0) + (dim - 1) * _divergence(u0 + l20, u1 + l21, 0.0)) / 2.0


@dataclass(frozen=True)
class Marvell(Defense):
    """Marvell (Li et al., "Label Leakage and Protection in Two-party Split Learning", ICLR 2022).

    Per batch the label party estimates each class's mean gradient ``m0``,
    ``m1`` and per-coordinate variance ``u0``, ``u1``, solves
    :func:`marvell_covariances` with the power budget
    ``P = power_scale * |m1 - m0|^2`` (the paper's scale ``s``) and adds to
    every class-``k`` row Gaussian noise with covariance
    ``l2k I + (l1k - l2k) u u^T``, ``u = (m1 - m0) / |m1 - m0|``. A batch
    holding a single class gets the noise of the last mixed batch (its
    direction and variances; the power it spends is then not re-budgeted),
    or, before any mixed batch, isotropic noise of total power
    ``power_scale * mean |g_i|^2``, so no batch goes out unprotected.

    The instance keeps that last solution, so use one instance per training run.

    Example
    -------
    >>> grad = np.where(np.arange(64)[:, None] < 4, -1.0, 0.05) * np.ones((64, 8)) / 64
    >>> noisy = Marvell(power_scale=4.0).protect(grad, (np.arange(64) < 4).astype(float), GaussianNoise())
    >>> noisy.shape
    (64, 8)
    """

    power_scale: float = 4.0
    name = "marvell"
    _last: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        _check("power_scale", self.power_scale, 0.0, 1e6)

    def solve(self, grad: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
        """``(u, lam)`` for a batch holding both classes (``None`` otherwise)."""
        pos = np.asarray(labels) == 1
        if pos.all() or not pos.any():
            return None
        g = np.asarray(grad, dtype=np.float64)
        m1, m0 = g[pos].mean(axis=0), g[~pos].mean(axis=0)
        diff = m1 - m0
        d2 = float(diff @ diff)
        if not d2 > 0.0:
            return None
        dim = g.shape[1]
        u1 = float(((g[pos] - m1) ** 2).sum(axis=1).mean()) / dim
        u0 = float(((g[~pos] - m0) ** 2).sum(axis=1).mean()) / dim
        lam = marvell_covariances(d2, u0, u1, float(pos.mean()), dim, self.power_scale * d2)
        return diff / math.sqrt(d2), lam

    def protect(self, grad, labels, noise):
        pos = np.asarray(labels) == 1
        solved = self.solve(grad, labels)
        if solved is not None:
            self._last["solution"] = solved
        elif "solution" not in self._last:
            power = self.power_scale * float((np.asarray(grad, dtype=np.float64) ** 2).sum(axis=1).mean())
            added = noise.sample(grad.shape, math.sqrt(power / grad.shape[1]))
            return (grad + added).astype(grad.dtype, copy=False)
        unit, lam = solved if solved is not None else self._last["solution"]
        along = np.where(pos, math.sqrt(lam[1]), math.sqrt(lam[0]))
        across = np.where(pos, math.sqrt(lam[3]), math.sqrt(lam[2]))
        z = noise.sample(grad.shape, 1.0)
        # covariance l2 I + (l1 - l2) u u^T: scale z by sqrt(l2), then fix its component along u
        added = across[:, None] * z + ((along - across) * (z @ unit))[:, None] * unit[None, :]
        return (grad + added).astype(grad.dtype, copy=False)


@dataclass(frozen=True)
class MixPro(Defense):
    """MixPro (FedAds, Wei et al., SIGIR 2023): gradient mixup, then projection.

    1. Mixup: row ``i`` becomes ``h_i = lam_i g_i + (1 - lam_i) g_j``, ``j`` a
       random other row of the batch, ``lam_i ~ Beta(alpha, alpha)`` folded
       into ``(1/2, 1)`` (``lam = max(lam, 1 - lam)``).
    2. Projection onto the cone around the batch-mean gradient ``m`` (of the
       true rows), in the style of GradVac (Wang et al., ICLR 2021): a row with
       ``cos(h, m) = phi < phi_goal`` becomes ``h + a m`` with
       ``a = |h| (phi_goal sqrt(1 - phi^2) - phi sqrt(1 - phi_goal^2)) / (|m| sqrt(1 - phi_goal^2))``,
       the smallest step along ``m`` that gives ``cos = phi_goal``. The part
       of ``h`` orthogonal to ``m`` is kept, so the norm is *not* preserved:
       it becomes ``|h| sqrt(1 - phi^2) / sqrt(1 - phi_goal^2)``.

    It does not protect labels: keep it to reproduce FedAds' tables, not to
    defend. With FedAds' top model, one logistic layer, every row of the
    embedding gradient is ``(p_i - y_i) / B`` times the same weight vector, so
    all rows are collinear: the mixup keeps them collinear and the projection
    sets every row that points against the batch mean to (numerically) zero
    and leaves the others as they were. Which class vanishes depends on the
    sign of ``sum(p_i - y_i)`` in the batch, so the one-sided norm LeakAUC
    averages to ~0.5 while within each batch the norm still splits the
    classes: two-sided LeakAUC 0.99 (norm and direction attacks, FedAds-like
    data and iPinYou). A deeper top (``SplitNNConfig(top_hidden=(64,))`` or
    ``(128, 64)``) makes the rows non-collinear but the projection still marks
    them: rows lifted to exactly ``cos = phi_goal`` are the ones that pointed
    against the mean, mostly positives (two-sided direction LeakAUC 0.98, norm
    0.89-0.95). Batch composition only decides which class a batch's
    projection marks, not whether it marks one: the projection is a
    deterministic function of each row's gradient and the batch mean. Figures: ``benchmarks/RESULTS.md``,
    "Split-NN defenses, two-sided".

    Example
    -------
    >>> grad = np.random.default_rng(0).normal(size=(64, 8))
    >>> out = MixPro().protect(grad, np.zeros(64), GaussianNoise())
    >>> m = grad.mean(axis=0)
    >>> bool((out @ m / np.linalg.norm(out, axis=1) / np.linalg.norm(m) >= MixPro().phi_goal - 1e-9).all())
    True
    """

    alpha: float = 0.6
    phi_goal: float = math.sqrt(3.0) / 2.0
    name = "mixpro"

    def __post_init__(self) -> None:
        _check("alpha", self.alpha, 0.0, 1e3)
        _check("phi_goal", self.phi_goal, -1.0, 1.0, lo_open=False, hi_open=True)

    def mix(self, grad: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """The mixed rows and their ``lam`` (each in (1/2, 1))."""
        n = len(grad)
        lam = rng.beta(self.alpha, self.alpha, size=n)
        lam = np.maximum(np.maximum(lam, 1.0 - lam), np.nextafter(0.5, 1.0))
        partner = (np.arange(n) + rng.integers(1, n, size=n)) % n if n > 1 else np.zeros(n, dtype=np.int64)
        return lam[:, None] * grad + (1.0 - lam[:, None]) * grad[partner], lam

    def project(self, rows: np.ndarray, mean: np.ndarray) -> np.ndarray:
        """Add to each row with ``cos(row, mean) < phi_goal`` the multiple of ``mean`` that lifts it to ``phi_goal``."""
        rows = np.asarray(rows, dtype=np.float64)
        mean = np.asarray(mean, dtype=np.float64)
        m_norm = float(np.linalg.norm(mean))
        if m_norm == 0.0:
            return rows
        r_norm = np.linalg.norm(rows, axis=1)
        cos = np.clip(rows @ mean / np.maximum(r_norm * m_norm, 1e-300), -1.0, 1.0)
        cos = np.where(r_norm > 0, cos, 1.0)  # a zero row has nothing to project
        goal, sin_goal = self.phi_goal, math.sqrt(1.0 - self.phi_goal**2)
        step = r_norm * (goal * np.sqrt(1.0 - cos**2) - cos * sin_goal) / (m_norm * sin_goal)
        return np.where((cos < goal)[:, None], rows + step[:, None] * mean[None, :], rows)

    def protect(self, grad, labels, noise):
        mixed, _ = self.mix(grad, noise.generator)
        return self.project(mixed, np.asarray(grad, dtype=np.float64).mean(axis=0)).astype(grad.dtype, copy=False)


DEFENSES = {"none": NoDefense, "dp": GaussianDP, "marvell": Marvell, "mixpro": MixPro}
