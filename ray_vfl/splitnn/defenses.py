"""Label-leakage defenses: wrappers of the embedding gradients the label party sends.

Every defense is a small frozen value with one method,
``protect(grad, labels, rng) -> grad``, applied by the label party to what it
sends and to nothing else: its own bottom and top models always train on the
true gradients. The protocol has no ``if defense:`` branch; "no defense" is
:class:`NoDefense`, the identity.

``grad`` is the ``(B, d)`` gradient of the batch's mean loss with respect to
one non-label party's embedding; ``labels`` are the batch's 0/1 labels (the
label party holds them; Marvell needs them).

=============  ==========================================================  =====================
defense        what it does to the rows it sends                            parameters
=============  ==========================================================  =====================
NoDefense      nothing                                                      -
GaussianDP     clip each row's per-example gradient to ``clip_norm``, add   epsilon, delta,
               N(0, sigma^2 I), sigma from the analytic Gaussian mechanism  clip_norm
Marvell        per-batch Gaussian noise, class-dependent covariance         power_scale
               optimised to minimise leakage under a noise power budget
MixPro         mix each row with a random other row (lambda > 1/2), then    alpha, phi_goal
               rotate it into the cone cos(row, batch mean) >= phi_goal
=============  ==========================================================  =====================
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.optimize import minimize_scalar
from scipy.stats import norm

from ..errors import ConfigError

__all__ = ["Defense", "NoDefense", "GaussianDP", "Marvell", "MixPro", "analytic_gaussian_sigma", "DEFENSES"]


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

    def protect(self, grad: np.ndarray, labels: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        return grad


@dataclass(frozen=True)
class NoDefense(Defense):
    """Send the true gradients."""

    name = "none"


def analytic_gaussian_sigma(epsilon: float, delta: float, sensitivity: float) -> float:
    """Smallest sigma for which N(0, sigma^2) noise is (epsilon, delta)-DP at L2 ``sensitivity``.

    The analytic Gaussian mechanism (Balle & Wang, ICML 2018, Theorem 8): the
    mechanism is (eps, delta)-DP iff
    ``Phi(D/(2s) - eps*s/D) - exp(eps) * Phi(-D/(2s) - eps*s/D) <= delta``;
    the left side falls as ``s`` grows, so bisection finds the smallest ``s``.

    Example
    -------
    >>> round(analytic_gaussian_sigma(1.0, 1e-5, 1.0), 3)  # the classical bound would give 4.845
    3.731
    """
    _check("epsilon", epsilon, 0.0, 1e3)
    _check("delta", delta, 0.0, 1.0, hi_open=True)
    _check("sensitivity", sensitivity, 0.0, 1e12)

    def excess(s: float) -> float:
        a, b = sensitivity / (2 * s), epsilon * s / sensitivity
        return norm.cdf(a - b) - math.exp(epsilon) * norm.cdf(-a - b) - delta

    lo, hi = 1e-12 * sensitivity, sensitivity
    while excess(hi) > 0:
        hi *= 2.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if excess(mid) > 0 else (lo, mid)
    return hi


@dataclass(frozen=True)
class GaussianDP(Defense):
    """Per-example clipping plus Gaussian noise (label DP of each released row).

    Each row is rescaled to the gradient of its own example's loss (``B *
    row``), clipped to L2 norm ``clip_norm``, given N(0, sigma^2 I) noise and
    scaled back by ``1/B``. Changing one example's label moves its clipped row
    by at most ``2 * clip_norm``, so with sigma from
    :func:`analytic_gaussian_sigma` at that sensitivity each released row is
    (epsilon, delta)-DP with respect to its label. Not accounted: composition
    over epochs and the label's later influence through the trained model.
    """

    epsilon: float = 1.0
    delta: float = 1e-5
    clip_norm: float = 0.1
    name = "dp"

    def __post_init__(self) -> None:
        _check("epsilon", self.epsilon, 0.0, 1e3)
        _check("delta", self.delta, 0.0, 1.0, hi_open=True)
        _check("clip_norm", self.clip_norm, 0.0, 1e12)

    @property
    def sigma(self) -> float:
        return analytic_gaussian_sigma(self.epsilon, self.delta, 2.0 * self.clip_norm)

    def protect(self, grad, labels, rng):
        n = len(grad)
        per_example = grad * n
        norms = np.linalg.norm(per_example, axis=1, keepdims=True)
        clipped = per_example * np.minimum(1.0, self.clip_norm / np.maximum(norms, 1e-300))
        noisy = clipped + rng.normal(0.0, self.sigma, size=grad.shape)
        return (noisy / n).astype(grad.dtype, copy=False)


def marvell_variances(d2: float, p: float, power: float) -> tuple[float, float]:
    """Noise variances ``(a0, a1)`` along the class-mean difference (2-class Marvell).

    Minimises the symmetrised KL divergence between the two noised classes,
    ``a0/a1 + a1/a0 - 2 + d2 * (1/a0 + 1/a1)``, under the power budget
    ``(1 - p) * a0 + p * a1 = power`` (``p``: share of positives, ``d2``:
    squared distance of the class means).

    Example
    -------
    >>> a0, a1 = marvell_variances(1.0, 0.5, 4.0)
    >>> round(a0, 6), round(a1, 6)
    (4.0, 4.0)
    """

    def objective(t: float) -> float:
        a1, a0 = t * power / p, (1 - t) * power / (1 - p)
        return a0 / a1 + a1 / a0 - 2.0 + d2 * (1.0 / a0 + 1.0 / a1)

    t = minimize_scalar(objective, bounds=(1e-6, 1 - 1e-6), method="bounded", options={"xatol": 1e-10}).x
    return float((1 - t) * power / (1 - p)), float(t * power / p)


@dataclass(frozen=True)
class Marvell(Defense):
    """Marvell (Li et al., "Label Leakage and Protection in Two-party Split Learning", ICLR 2022), 2-class, simplified.

    Per batch, the positive and negative gradient rows are modelled as point
    masses at their class means ``m1``, ``m0``; the noise added to a class-k
    row is N(0, a_k u u^T) along ``u = (m1 - m0) / |m1 - m0|`` with
    ``(a0, a1)`` minimising the symmetrised KL divergence between the noised
    classes (the paper's leakage bound) under the power budget
    ``(1 - p) a0 + p a1 = power_scale * |m1 - m0|^2``. Simplification: the
    paper optimises full class covariances including the spread of each class;
    with point masses the optimal noise orthogonal to ``u`` is zero, so only
    ``(a0, a1)`` are optimised. A single-class batch gets the last batch's noise
    (or none before the first mixed batch).
    """

    power_scale: float = 4.0
    name = "marvell"

    def __post_init__(self) -> None:
        _check("power_scale", self.power_scale, 0.0, 1e6)

    def protect(self, grad, labels, rng):
        pos = labels == 1
        p = float(pos.mean()) if len(labels) else 0.0
        if not 0.0 < p < 1.0:
            return grad
        diff = grad[pos].mean(axis=0) - grad[~pos].mean(axis=0)
        d2 = float(diff @ diff)
        if d2 <= 0.0:
            return grad
        a0, a1 = marvell_variances(d2, p, self.power_scale * d2)
        scale = np.where(pos, math.sqrt(a1), math.sqrt(a0))
        noise = (scale * rng.standard_normal(len(grad)))[:, None] * (diff / math.sqrt(d2))[None, :]
        return (grad + noise).astype(grad.dtype, copy=False)


@dataclass(frozen=True)
class MixPro(Defense):
    """MixPro (FedAds, Wei et al. SIGIR 2023): gradient mixup plus projection.

    Row ``i`` becomes ``lam_i * g_i + (1 - lam_i) * g_j`` with ``j`` a random
    other row of the batch and ``lam_i ~ Beta(alpha, alpha)`` folded into
    ``(1/2, 1)`` (``lam = max(lam, 1 - lam)``). Then, if its cosine with the
    batch-mean gradient (of the true rows) is below ``phi_goal``, it is rotated
    in the plane of itself and the mean, norm kept, onto the cone
    ``cos = phi_goal`` (a row parallel to the mean turns in a random
    orthogonal direction).
    """

    alpha: float = 0.6
    phi_goal: float = math.sqrt(3.0) / 2.0
    name = "mixpro"

    def __post_init__(self) -> None:
        _check("alpha", self.alpha, 0.0, 1e3)
        _check("phi_goal", self.phi_goal, -1.0, 1.0, lo_open=False)

    def mix(self, grad: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """The mixed rows and their ``lam`` (each in (1/2, 1))."""
        n = len(grad)
        lam = rng.beta(self.alpha, self.alpha, size=n)
        lam = np.maximum(np.maximum(lam, 1.0 - lam), np.nextafter(0.5, 1.0))
        partner = (np.arange(n) + rng.integers(1, n, size=n)) % n if n > 1 else np.zeros(n, dtype=np.int64)
        return lam[:, None] * grad + (1.0 - lam[:, None]) * grad[partner], lam

    def project(self, rows: np.ndarray, mean: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Rotate every row whose cosine with ``mean`` is below ``phi_goal`` onto the cone."""
        if rows.shape[1] < 2:
            raise ConfigError("MixPro's projection needs an embedding width of at least 2; widen nonlabel_hidden[-1]")
        m_norm = np.linalg.norm(mean)
        if m_norm == 0.0:
            return rows
        unit = mean / m_norm
        r_norm = np.linalg.norm(rows, axis=1)
        along = rows @ unit
        cos = np.where(r_norm > 0, along / np.maximum(r_norm, 1e-300), 1.0)
        bad = cos < self.phi_goal
        if not bad.any():
            return rows
        perp = rows[bad] - along[bad, None] * unit[None, :]
        p_norm = np.linalg.norm(perp, axis=1)
        flat = p_norm <= 1e-12 * np.maximum(r_norm[bad], 1e-300)
        if flat.any():  # parallel or anti-parallel to the mean: any orthogonal direction
            rand = rng.standard_normal((int(flat.sum()), rows.shape[1]))
            perp[flat] = rand - (rand @ unit)[:, None] * unit[None, :]
            p_norm[flat] = np.linalg.norm(perp[flat], axis=1)
        direction = perp / p_norm[:, None]
        out = rows.copy()
        phi = self.phi_goal
        out[bad] = r_norm[bad, None] * (phi * unit[None, :] + math.sqrt(max(0.0, 1 - phi * phi)) * direction)
        return out

    def protect(self, grad, labels, rng):
        mixed, _ = self.mix(grad, rng)
        return self.project(mixed, grad.mean(axis=0), rng).astype(grad.dtype, copy=False)


DEFENSES = {"none": NoDefense, "dp": GaussianDP, "marvell": Marvell, "mixpro": MixPro}
