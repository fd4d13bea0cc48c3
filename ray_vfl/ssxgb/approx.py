"""SSXGB's approximations, in one place: the sigmoid polynomial, the fixed-point pipeline of the
gradients and of the leaf weights, and the error each adds.

All encrypted values are integers scaled by ``2^F`` (``F`` = ``frac_bits``). The functions named
``*_ints`` compute in Python integers what server C computes on ciphertexts, with *floor* where C
uses the two-server truncation (:meth:`~ray_vfl.crypto.two_server.server_c.ServerC.trunc`); the centralized
reference (:mod:`ray_vfl.ssxgb.reference`) calls them, so it differs from the federated run only by
the truncations' carries and the secure division's rounding, bounded below.

Sigmoid. ``sigma(x) ~ 1/2 + a1 x + a3 x^3``, the least-squares odd cubic on a uniform grid of
``[-R, R]`` (:func:`sigmoid_coefficients`). For ``R = 4`` (the default): ``a1 = 0.216606``,
``a3 = -0.00660418``, largest error ``0.0383`` on ``[-R, R]``; ``R = 4.5``: error ``0.0496``. Outside
``[-R, R]`` the cubic turns away: for ``R = 4`` its ``p`` falls past ``|x| = 3.3``, leaves ``[0, 1]`` past
``6.6`` and the hessian turns negative, so a margin that grows past ``R`` (a pure leaf does at any
learning rate) would break the gradients, the mask bounds and, once ``H + lambda <= 0``, the division.
Hence the **clamp**: C moves every margin into ``[-C, C]``, ``C = round(R 2^F)``, before the cubic,
``x' = x + [x < -C] (-C - x) + [C < x] (C - x)`` (one LGT round for both comparisons, one Mult round;
:func:`~ray_vfl.ssxgb.secure_math.clamped_gradients`), and :func:`gradient_ints` does the same. On
``[-R, R]`` the cubic's ``p`` stays inside ``(0, 1)`` for ``R <= 4.5`` (``R = 4``: ``p`` in
``[0.0225, 0.9775]``, ``h >= 0.022``; ``R = 4.5``: ``h >= 0.006``; past ``R = 4.7`` it leaves ``[0, 1]``),
which is why ``sigmoid_range`` is at most 4.5. :meth:`FixedPointPlan.p_range` and
:meth:`FixedPointPlan.h_range` bound the integer pipeline's ``p`` and ``h`` over every clamped margin,
carries included; every mask bound of the gradient stage, of the gain comparisons (``|g| < 2^F``,
``0 < h <= 2^(F-2) + 1``) and of the division follows from them by construction. The margins
themselves are not clamped (the model adds every leaf weight): they grow by at most ``eta / h_min``
per tree, far below ``2^l``.

Gradient pipeline at C (one two-server round per line; T = Trunc by F):
``x = clamp(x)`` (2 rounds), ``x2 = T(x x)``, ``x3 = T(x2 x)``, ``p = T(A1 x + A3 x3) + 2^(F-1)``,
``g = p - y``, ``h = T(p (2^F - p))``
with ``A1 = round(a1 2^F)``, ``A3 = round(a3 2^F)``. Each T adds a carry ``e`` in ``{0, 1}`` (units of
``2^-F``). For ``|x| <= R 2^F`` the errors against the floor pipeline are at most
``x2: 1``, ``x3: 1 + R + 1``, ``p: 1 + |A3| (R + 2) / 2^F + 1``, ``h: 2 e_p + 2`` units:
:func:`gradient_error_units` returns ``(e_g, e_h)`` = ``(3, 8)`` for ``R <= 8`` (a loose, simple bound).
The clamp is exact (comparisons and a product of integers): the same in both pipelines.

Secure division (leaf weights ``w = -eta G / (H + lambda)``): with ``D = H + round(lambda 2^F)`` and
``a = -round(eta 2^F) G`` (Exp), C gets ``Y ~ 2^J / D`` by Newton's iteration on masked values
(:mod:`ray_vfl.crypto.two_server.reciprocal`; S opens nothing but additively masked values, within
statistical distance ``4 k 2^(1 - kappa)`` of independent of ``D`` for ``k`` steps), multiplies ``a Y``
(Mult) and truncates by ``J`` (Trunc): ``W = a Y / 2^J``, in units of ``2^-F``. The clamp bounds every
row's ``h`` (:meth:`FixedPointPlan.h_range`), so a leaf of ``n`` sampled rows has ``D`` in
``[n h_lo + lambda, n h_hi + lambda]``, public to C: the Newton start is fitted to that range and
:meth:`FixedPointPlan.newton` takes enough steps (6 at the defaults) that ``|a / D| |e| <= 1/2`` for the
largest ``|a / D|`` any leaf can have (``eta max|g| / h_lo``); with the truncation's unit the total error
is below ``1/2 + 1`` unit, i.e. ``|w - w_exact| < 1.5 * 2^-F`` given the same integer ``G``, ``H``
(:func:`leaf_error_units`). The number of steps and every mask size follow from the run's public
constants (row count, ``F``, ``R``, ``eta``, ``lambda``), never from a leaf.

Split gains are compared exactly (cross-multiplied fractions of integers, no division): no error
beyond that of the gradient sums.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from functools import cache

import numpy as np

from ..crypto.two_server.reciprocal import Newton
from ..errors import ConfigError

__all__ = [
    "FixedPointPlan",
    "gradient_error_units",
    "gradient_ints",
    "leaf_error_units",
    "leaf_ints",
    "sigmoid_coefficients",
    "sigmoid_max_error",
]


@cache
def sigmoid_coefficients(r: float) -> tuple[float, float]:
    """``(a1, a3)`` of the least-squares odd cubic ``1/2 + a1 x + a3 x^3`` to the sigmoid on ``[-r, r]``
    (20,001 uniform points).

    Example
    -------
    >>> [round(a, 6) for a in sigmoid_coefficients(4.0)]
    [0.216606, -0.006604]
    """
    x = np.linspace(-r, r, 20001)
    s = 1.0 / (1.0 + np.exp(-x)) - 0.5
    coef, *_ = np.linalg.lstsq(np.column_stack([x, x**3]), s, rcond=None)
    return float(coef[0]), float(coef[1])


def sigmoid_max_error(r: float) -> float:
    """Largest ``|cubic(x) - sigma(x)|`` on ``[-r, r]``.

    Example
    -------
    >>> round(sigmoid_max_error(4.0), 4)
    0.0383
    """
    a1, a3 = sigmoid_coefficients(r)
    x = np.linspace(-r, r, 20001)
    return float(np.abs(0.5 + a1 * x + a3 * x**3 - 1.0 / (1.0 + np.exp(-x))).max())


@dataclass(frozen=True)
class FixedPointPlan:
    """The integer constants of one run: scale ``F``, the cubic's ``A1``, ``A3``, ``eta`` and ``lambda``
    in units of ``2^-F``, the clamp ``C = round(R 2^F)`` of the margins, and the secure division's
    parameters (:meth:`newton`).

    Example
    -------
    >>> from ray_vfl.ssxgb.config import SSXGBConfig
    >>> plan = FixedPointPlan.of(SSXGBConfig(frac_bits=16), 100)
    >>> plan.clamp == 4 << 16, plan.p_range(), plan.h_range()
    (True, (1478, 64058), (1444, 16385))
    """

    frac_bits: int
    a1: int
    a3: int
    eta: int
    lam: int
    n_rows: int
    clamp: int

    @classmethod
    def of(cls, config, n_rows: int) -> FixedPointPlan:
        f = config.frac_bits
        a1, a3 = sigmoid_coefficients(config.sigmoid_range)
        plan = cls(f, round(a1 * 2**f), round(a3 * 2**f), round(config.learning_rate * 2**f),
                   max(1, round(config.reg_lambda * 2**f)), int(n_rows), round(config.sigmoid_range * 2**f))
        if plan.h_range()[0] < 1:
            raise ConfigError(f"at frac_bits = {f} the clamped cubic on [-{config.sigmoid_range}, "
                              f"{config.sigmoid_range}] may round the hessian to 0 or below: raise frac_bits "
                              "or lower sigmoid_range")
        return plan

    def p_range(self) -> tuple[int, int]:
        """``(p_lo, p_hi)``: every ``p`` of the gradient pipeline for a clamped margin ``|x| <= C`` (units,
        carries included): the extremes of ``(A1 X + A3 X^3 / 2^2F) / 2^F + 2^(F-1)`` on ``[-C, C]``
        (at the ends or where its slope is 0), widened by the pipeline's error ``e_p``."""
        f, c = self.frac_bits, self.clamp
        xs = [-c, c]
        if self.a3 < 0 < self.a1:
            top = math.isqrt((self.a1 << (2 * f)) // (-3 * self.a3))  # where the cubic turns
            xs += [-top, top] if top <= c else []
        vals = [(self.a1 * x * (1 << 2 * f) + self.a3 * x**3) / 2.0 ** (3 * f) + (1 << (f - 1)) for x in xs]
        e_p = gradient_error_units(self)[0]
        return math.floor(min(vals)) - e_p, math.ceil(max(vals)) + e_p

    def h_range(self) -> tuple[int, int]:
        """``(h_lo, h_hi)``: every ``h = T(p (2^F - p))`` for ``p`` in :meth:`p_range` (the product is
        concave in ``p``: its least value is at an end; its largest ``2^(2F) / 4``; plus the carry)."""
        lo, hi = self.p_range()
        f = self.frac_bits
        return min(lo * (self.one - lo), hi * (self.one - hi)) >> f, (1 << (f - 2)) + 1

    @property
    def one(self) -> int:
        return 1 << self.frac_bits

    @property
    def sum_bits(self) -> int:
        """Bits of any ``|G|``, ``|H + lambda|``: ``|g|, h < 2`` per row (:meth:`h_range`: the clamp keeps
        ``p`` in ``(0, 2^F)``), so ``|G| < 2^(F + 1) n`` and ``H + lambda < 2^(F + 1) n + lambda 2^F``."""
        return self.frac_bits + max(1, self.n_rows).bit_length() + 2 + max(0, self.lam >> self.frac_bits).bit_length()

    def leaf_range(self, n_leaf: int) -> tuple[int, int]:
        """``[lo, hi]`` of ``D = H + lambda`` for a leaf of ``n_leaf`` sampled rows (units)."""
        h_lo, h_hi = self.h_range()
        return n_leaf * h_lo + self.lam, n_leaf * h_hi + self.lam

    def newton(self) -> Newton:
        """The secure division's :class:`~ray_vfl.crypto.two_server.reciprocal.Newton`: divisors of any
        leaf (``[lambda, n h_hi + lambda]``, a leaf's own range at most ``h_hi / h_lo`` wide), relative
        error ``2^-rel`` with ``2^rel >= 2 eta max|g| / h_lo`` (the largest ``|W|`` in units, doubled)."""
        h_lo, h_hi = self.h_range()
        p_lo, p_hi = self.p_range()
        w_max = -(-self.eta * max(p_hi, self.one - p_lo) // h_lo)
        return Newton(self.lam, self.leaf_range(max(1, self.n_rows))[1], Fraction(h_hi, h_lo), w_max.bit_length() + 1)

    def numerator_bits(self) -> int:
        """Bits of any ``|a| = eta |G|`` of the division (``|g| < 2^F`` per row)."""
        return (self.eta * max(1, self.n_rows) << self.frac_bits).bit_length()

    def value_bits_needed(self) -> int:
        """The least ``value_bits`` (``l``) of the run: the gain comparisons' cross products, Newton's
        ``Y E`` and the leaf weights' ``a Y``, each below ``2^l``."""
        newton = self.newton()
        return max(self.comparison_bits() + 2, 2 * newton.scale_bits + 3, self.numerator_bits() + newton.y_bits + 1)

    def comparison_bits(self) -> int:
        """Bits of the cross products the gain comparisons take (:mod:`ray_vfl.ssxgb.splits`):
        ``num den' < 2^b`` for ``num = d^2``, ``d = GL (HR + L) - GR (HL + L)``, ``den' = (HL + L) (HR + L)``.
        With ``|GL| + |GR| <= n g_max`` (``g_max``: the largest ``|p - y|``) and ``T = (HL + L) + (HR + L)
        <= n h_hi + 2 L``: ``|d| <= n g_max T`` and ``den' <= T^2 / 4``."""
        lo, hi = self.p_range()
        g_max = max(abs(lo), abs(hi), abs(self.one - lo), abs(self.one - hi))
        n = max(1, self.n_rows)
        t_max = n * self.h_range()[1] + 2 * self.lam
        d_max = n * g_max * t_max
        return (d_max * d_max * (t_max * t_max // 4)).bit_length()

    def encode(self, x: np.ndarray) -> list[int]:
        """Floats as integers in units of ``2^-F`` (rounded half to even)."""
        return [int(v) for v in np.rint(np.ldexp(np.asarray(x, dtype=np.float64), self.frac_bits)).astype(np.int64)]


def gradient_ints(plan: FixedPointPlan, x: list[int], y: list[int]) -> tuple[list[int], list[int]]:
    """``(g, h)`` of margins ``x`` and labels ``y`` (units of ``2^-F``) by the floor pipeline, the
    margins clamped into ``[-C, C]`` first."""
    f, one, c = plan.frac_bits, plan.one, plan.clamp
    x = [max(-c, min(c, v)) for v in x]
    x2 = [(v * v) >> f for v in x]
    x3 = [(a * b) >> f for a, b in zip(x2, x)]
    p = [((plan.a1 * a + plan.a3 * b) >> f) + (one >> 1) for a, b in zip(x, x3)]
    return [a - b for a, b in zip(p, y)], [(a * (one - a)) >> f for a in p]


def leaf_ints(plan: FixedPointPlan, G: list[int], H: list[int]) -> list[int]:
    """Exact ``round(-eta G / (H + lambda))`` in units of ``2^-F`` (the secure division's target)."""
    out = []
    for g, h in zip(G, H):
        num, den = -plan.eta * g, h + plan.lam
        out.append((2 * num + den) // (2 * den))
    return out


def gradient_error_units(plan: FixedPointPlan) -> tuple[int, int]:
    """Bounds, in units of ``2^-F``, on ``|g - g_floor|`` and ``|h - h_floor|`` per row for margins in
    ``[-R, R]`` (module docstring)."""
    r = 8  # above the largest sigmoid_range (4.5)
    e_x3 = 2 + r
    e_p = 1 + math.ceil(abs(plan.a3) * e_x3 / plan.one) + 1
    return e_p, 2 * e_p + 2


def leaf_error_units(plan: FixedPointPlan, G: int, H: int, n_leaf: int, margin_error: float = 0.0) -> float:
    """Bound, in units of ``2^-F``, on ``|W - w_ref|``: the federated leaf weight against the floor
    pipeline's ``round(-eta G / (H + lambda))`` of a leaf of ``n_leaf`` sampled rows with reference
    sums ``G``, ``H``, when the rows' margins differ by at most ``margin_error`` units already.

    Per row, ``g`` and ``h`` differ by at most ``e_g + m / 4 + 1`` and ``e_h + m / 4 + 1`` units
    (:func:`gradient_error_units`; the cubic's slope is below ``1/4``); so ``G`` by ``dG = n_leaf`` times
    that, ``D = H + lambda`` by ``dD``; then ``|dw| <= E (dG / D' + |G| dD / (D D'))`` units with
    ``E = round(eta 2^F)`` and ``D' = max(D - dD, lambda)`` (all sums in units), plus the division's
    ``1.5`` units and the reference's rounding ``0.5``. The first term is a worst case (every carry of
    every row of the leaf in the same direction); the errors seen are a few units.
    """
    e_g, e_h = gradient_error_units(plan)
    d_g = n_leaf * (e_g + margin_error / 4 + 1)
    d_h = n_leaf * (e_h + margin_error / 4 + 1)
    eta = plan.eta  # W = -E G / D is in units of 2^-F, so its error is E times the sums' relative error
    d = H + plan.lam
    d_low = max(d - d_h, plan.lam)
    return eta * (d_g / d_low + abs(G) * d_h / (d * d_low)) + 2.0
