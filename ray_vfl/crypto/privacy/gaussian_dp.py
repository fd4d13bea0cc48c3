"""The Gaussian mechanism: noise calibration, privacy accounting, and the noise a party draws.

Every protocol that adds Gaussian noise to what it releases (PIVODL's leaf weights, split-NN's
embedding gradients) uses these three pieces:

- :func:`noise_multiplier` -- the ratio ``z = sigma / sensitivity`` for which ``releases``
  Gaussian releases of one individual's data are together ``(epsilon, delta)``-DP. ``k`` Gaussian
  releases with noise ``z * sensitivity`` each are exactly as private as one Gaussian release with
  ``z / sqrt(k)`` (Dong, Roth & Su, "Gaussian Differential Privacy", 2019: mu-GDP composes as
  ``sqrt(sum mu_i^2)``), and one release is calibrated exactly by the analytic Gaussian mechanism
  (Balle & Wang, ICML 2018, Theorem 8). No slack is left, unlike a zCDP or advanced-composition
  bound (about 30% more noise at the same budget).
- :func:`accounted_epsilon` -- the epsilon of a training, computed by Google's ``dp-accounting``
  privacy-loss-distribution (PLD) accountant from the events that actually happened, the number
  reported to the user. Tests check that it matches the configured budget.
- :class:`GaussianNoise` -- the noise source, seeded from the operating system's entropy inside the
  party that adds the noise: no other party knows or can derive its seed.

Example
-------
>>> z = noise_multiplier(epsilon=1.0, delta=1e-5, releases=4)
>>> round(z, 3), round(accounted_epsilon(z, releases=4, delta=1e-5), 2)
(7.461, 1.0)
"""

from __future__ import annotations

import math
import secrets

import numpy as np

from ...errors import ConfigError

__all__ = ["analytic_gaussian_sigma", "noise_multiplier", "accounted_epsilon", "GaussianNoise", "check_budget"]


def _phi(x: float) -> float:
    """The standard normal CDF, by ``erfc`` (accurate in both tails; no scipy import in a party's process)."""
    return 0.5 * math.erfc(-x / math.sqrt(2.0))


def check_budget(epsilon: object, delta: object) -> None:
    """Raise :class:`ConfigError` unless ``0 < epsilon <= 1000`` and ``0 < delta < 1`` (finite numbers)."""
    def number(value: object) -> bool:
        return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)

    if not (number(epsilon) and 0.0 < epsilon <= 1e3):
        raise ConfigError(f"epsilon must be a finite number in (0, 1000], got {epsilon!r} (smaller means more noise)")
    if not (number(delta) and 0.0 < delta < 1.0):
        raise ConfigError(f"delta must be a finite number in (0, 1), got {delta!r}; take it well below 1/rows "
                          "(1e-5 is usual)")


def analytic_gaussian_sigma(epsilon: float, delta: float, sensitivity: float) -> float:
    """Smallest sigma for which N(0, sigma^2) noise is (epsilon, delta)-DP at L2 ``sensitivity``.

    The analytic Gaussian mechanism (Balle & Wang, ICML 2018, Theorem 8): the mechanism is
    (eps, delta)-DP iff ``Phi(D/(2s) - eps*s/D) - exp(eps) * Phi(-D/(2s) - eps*s/D) <= delta``;
    the left side falls as ``s`` grows, so bisection finds the smallest ``s``.

    Example
    -------
    >>> round(analytic_gaussian_sigma(1.0, 1e-5, 1.0), 3)  # the classical bound would give 4.845
    3.731
    """
    check_budget(epsilon, delta)
    if not (isinstance(sensitivity, (int, float)) and math.isfinite(sensitivity) and sensitivity > 0):
        raise ConfigError(f"sensitivity must be a positive finite number, got {sensitivity!r}")

    def excess(s: float) -> float:
        a, b = sensitivity / (2 * s), epsilon * s / sensitivity
        return _phi(a - b) - math.exp(epsilon) * _phi(-a - b) - delta

    lo, hi = 1e-12 * sensitivity, sensitivity
    while excess(hi) > 0:
        hi *= 2.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if excess(mid) > 0 else (lo, mid)
    return hi


def _check_releases(releases: object) -> int:
    if isinstance(releases, bool) or not isinstance(releases, (int, np.integer)) or releases < 1:
        raise ConfigError(f"releases must be a positive integer (how often one individual's data is released), "
                          f"got {releases!r}")
    return int(releases)


def noise_multiplier(epsilon: float, delta: float, releases: int = 1) -> float:
    """``sigma / sensitivity`` for ``releases`` Gaussian releases that together are (epsilon, delta)-DP.

    Example
    -------
    >>> round(noise_multiplier(1.0, 1e-5), 3), round(noise_multiplier(1.0, 1e-5, releases=9), 3)
    (3.731, 11.192)
    """
    releases = _check_releases(releases)
    return analytic_gaussian_sigma(epsilon, delta, 1.0) * math.sqrt(releases)


def accounted_epsilon(noise_multiplier: float, releases: int, delta: float) -> float:
    """Epsilon of ``releases`` Gaussian releases with noise ``noise_multiplier * sensitivity`` at
    ``delta``, from ``dp-accounting``'s PLD accountant (the releases composed as they happened).

    Example
    -------
    >>> round(accounted_epsilon(3.731, releases=1, delta=1e-5), 2)
    1.0
    """
    from dp_accounting import dp_event
    from dp_accounting.pld import pld_privacy_accountant

    releases = _check_releases(releases)
    if not (isinstance(noise_multiplier, (int, float)) and math.isfinite(noise_multiplier) and noise_multiplier > 0):
        raise ConfigError(f"noise_multiplier must be a positive finite number, got {noise_multiplier!r}")
    accountant = pld_privacy_accountant.PLDAccountant()
    accountant.compose(dp_event.GaussianDpEvent(noise_multiplier), releases)
    return float(accountant.get_epsilon(delta))


class GaussianNoise:
    """Gaussian noise drawn from a generator seeded by the operating system's entropy.

    Build it inside the party that adds the noise (its actor): the 128-bit seed comes from
    :func:`secrets.randbits` there and is never stored, sent or derived from a shared seed, so no
    other party can regenerate the noise and subtract it.

    Example
    -------
    >>> noise = GaussianNoise()
    >>> noise.sample(3, sigma=2.0).shape
    (3,)
    """

    def __init__(self) -> None:
        self._rng = np.random.Generator(np.random.PCG64DXSM(secrets.randbits(128)))

    def sample(self, size: int | tuple[int, ...], sigma: float | np.ndarray) -> np.ndarray:
        """``N(0, sigma^2)`` draws of shape ``size`` (``sigma`` a scalar or broadcastable array)."""
        return self._rng.normal(0.0, 1.0, size=size) * sigma

    @property
    def generator(self) -> np.random.Generator:
        """The generator itself, for mechanisms that draw more than Gaussian noise (MixPro's pairing)."""
        return self._rng
