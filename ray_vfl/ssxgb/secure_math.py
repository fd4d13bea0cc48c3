"""Server C's fixed-point arithmetic on ciphertexts, row by row and leaf by leaf: the clamped cubic
sigmoid (each tree's gradients) and the leaf weights (the secure division).

Both run with server S through :class:`~ray_vfl.crypto.two_server.server_c.ServerC` on values C has
masked, and follow :mod:`ray_vfl.ssxgb.approx` step for step: :func:`clamped_gradients` is
:func:`~ray_vfl.ssxgb.approx.gradient_ints` with the truncations' carries, :func:`leaf_weights` is
:func:`~ray_vfl.ssxgb.approx.leaf_ints` within :func:`~ray_vfl.ssxgb.approx.leaf_error_units`. Every
Mult operand carries the bound the clamp proves (:meth:`~ray_vfl.ssxgb.approx.FixedPointPlan.p_range`),
and S refuses an opened value past it.

Example
-------
>>> import warnings; warnings.simplefilter("ignore")
>>> from ray_vfl.crypto.two_server.bcp import keygen, setup
>>> from ray_vfl.crypto.two_server.server_c import ServerC
>>> from ray_vfl.crypto.two_server.server_s import LocalLink, ServerS, TwoServerConfig
>>> from ray_vfl.ssxgb.approx import FixedPointPlan, gradient_ints
>>> from ray_vfl.ssxgb.config import SSXGBConfig
>>> params, mk = setup(1024, allow_weak=True)
>>> cfg = TwoServerConfig(256, 40)
>>> c = ServerC(params, LocalLink(ServerS(mk, cfg, 16)), cfg, 16)
>>> jpk = c.register([keygen(params)[0]])
>>> plan = FixedPointPlan.of(SSXGBConfig(frac_bits=16, kappa=40), 3)
>>> x = [-9 << 16, 0, 20 << 16]                       # margins -9, 0 and 20: clamped to -4, 0, 4
>>> g, h = clamped_gradients(c, plan, c.encrypt_ints(jpk, x, 16), c.encrypt_ints(jpk, [0, 1 << 16, 1 << 16], 16))
>>> ref_g, ref_h = gradient_ints(plan, x, [0, 1 << 16, 1 << 16])
>>> all(abs(a - b) <= 3 for a, b in zip(c.bcp.mdecrypt_ints(mk, jpk, g), ref_g))
True
"""

from __future__ import annotations

from collections.abc import Sequence

from ..crypto.he.ciphertexts import CipherArray
from ..crypto.two_server.reciprocal import reciprocal
from ..crypto.two_server.server_c import ServerC
from .approx import FixedPointPlan

__all__ = ["clamp", "clamped_gradients", "leaf_weights"]


def clamp(c: ServerC, plan: FixedPointPlan, x: CipherArray) -> CipherArray:
    """``Enc(max(-C, min(C, x)))`` for margins ``x`` of scale ``F`` (``C`` = ``plan.clamp``): one LGT
    round gives ``[x < -C]`` and ``[C < x]`` (both comparisons in one call, shuffled), one Mult round
    ``[x < -C] (-C - x)`` and ``[C < x] (C - x)``, which C adds to ``x``.

    S sees LGT's blinded differences ``x + C`` and ``x - C`` of every row in a shuffled order (their
    bit lengths: how far the rows' margins lie from ``-R`` and ``R``, as a multiset, not whose) and
    Mult's masked operands (statistically hidden). The differences are unbounded by construction (the
    margins are not clamped), so their masks have ``l + kappa`` bits.
    """
    bcp, pk, f = c.bcp, c.key_of(x), plan.frac_bits
    m = len(x)
    lo, hi = c.encrypt_ints(pk, [-plan.clamp] * m, f), c.encrypt_ints(pk, [plan.clamp] * m, f)
    below_above = c.lgt(bcp.concat([x, hi]), bcp.concat([lo, x]))  # [x < -C], then [C < x]
    below, above = bcp.take(below_above, slice(0, m)), bcp.take(below_above, slice(m, 2 * m))
    up, down = c.mult_many([(below, bcp.sub(pk, lo, x)), (above, bcp.sub(pk, hi, x))])
    moved = bcp.add(pk, bcp.with_scale(up, f), bcp.with_scale(down, f))
    return bcp.add(pk, x, moved)


def clamped_gradients(c: ServerC, plan: FixedPointPlan, x: CipherArray,
                      y: CipherArray) -> tuple[CipherArray, CipherArray]:
    """``(Enc(g), Enc(h))`` of margins ``x`` and labels ``y`` (scale ``F``): the clamp, then the cubic
    (:mod:`ray_vfl.ssxgb.approx`, 9 rounds with S: 2 for the clamp, 7 for the cubic). Every Mult
    operand of the cubic has the bound the clamp proves: ``|x| <= C``, ``x2 <= C^2 / 2^F + 1``,
    ``p`` in :meth:`~ray_vfl.ssxgb.approx.FixedPointPlan.p_range`."""
    bcp, pk, f = c.bcp, c.key_of(x), plan.frac_bits
    m = len(x)
    x = clamp(c, plan, x)
    bx = plan.clamp.bit_length()
    bx2 = ((plan.clamp * plan.clamp >> f) + 1).bit_length()
    lo, hi = plan.p_range()
    bp = max(abs(lo), abs(hi), abs(plan.one - lo), abs(plan.one - hi)).bit_length()
    # S keeps x opened for x3's Mult
    x2 = c.trunc(c.mult_many([(x, x)], [(bx, bx)], keep=(x,))[0], f)
    x3 = c.trunc(c.mult_many([(x2, x)], [(bx2, bx)])[0], f)
    lin = bcp.add(pk, c.exp(x, [plan.a1] * m, f), c.exp(x3, [plan.a3] * m, f))
    p = bcp.add(pk, c.trunc(lin, f), c.encrypt_ints(pk, [plan.one >> 1] * m, f))
    g = bcp.sub(pk, p, y)
    one_minus_p = bcp.sub(pk, c.encrypt_ints(pk, [plan.one] * m, f), p)
    h = c.trunc(c.mult_many([(p, one_minus_p)], [(bp, bp)])[0], f)
    return g, h


def leaf_weights(c: ServerC, plan: FixedPointPlan, G: CipherArray, H: CipherArray,
                 n_leaf: Sequence[int]) -> CipherArray:
    """``Enc(W)``, ``W ~ -eta G / (H + lambda)`` in units of ``2^-F``, per leaf (sums of scale ``F`` over
    ``n_leaf`` sampled rows each): Newton's reciprocal of ``D = H + lambda`` on its public range, then
    ``a Y`` and a truncation (:mod:`ray_vfl.ssxgb.approx`; ``3 k + 2`` rounds with S)."""
    bcp, pk, f = c.bcp, c.key_of(G), plan.frac_bits
    n = len(G)
    newton = plan.newton()
    big_j = newton.scale_bits
    ranges = [plan.leaf_range(int(k)) for k in n_leaf]
    d = bcp.add(pk, H, c.encrypt_ints(pk, [plan.lam] * n, f))
    y = reciprocal(c, d, newton, [r[0] for r in ranges], [r[1] for r in ranges], big_j - f)  # ~2^J / D
    a = c.exp(G, [-plan.eta] * n, f)  # scale 2F
    (ay,) = c.mult_many([(a, y)], [(plan.numerator_bits(), newton.y_bits)])  # scale F + J
    return c.trunc(ay, big_j)  # scale F
