"""Reciprocal: ``Enc(~2^J / d)`` of encrypted positive integers by Newton's iteration, with server S
seeing only additively masked values (Mult and Trunc), statistically independent of ``d``.

C knows of each divisor only a public range ``lo_i <= d <= hi_i`` (SSXGB: from a leaf's row count and
the hessian's bounds). It starts from the linear approximation of ``1 / d`` with the least largest
relative error on that range, ``y0 = c0 - c1 d`` with ``c1 = 8 / ((a + b)^2 + 4 a b)``, ``c0 = c1 (a + b)``
(``a, b = lo_i, hi_i``; error ``|1 - d y0| <= E0 = (b - a)^2 / ((a + b)^2 + 4 a b)``, a function of
``b / a`` alone), an Exp and an addition (no round). Then each Newton step, in fixed point of scale
``2^J`` (3 rounds)::

    T = d Y                       (Mult; S keeps Y's opened value for the next Mult)
    E = 2^(J+1) - T               (local)
    Y = Trunc(Y E, J)             (Mult, Trunc)

With ``Y = (2^J / d)(1 - e)``: ``Y E / 2^J = (2^J / d)(1 - e^2)`` and the truncation adds at most one unit,
so ``|e'| <= e^2 + hi / 2^J``; the first ``|e|`` is at most ``E0 + hi (hi + 1) / 2^(J+1)`` (``c0``, ``c1``
rounded to integers). :class:`Newton` takes the number of steps that brings that bound below
``2^-rel_bits`` for the worst range ratio it admits, so the number of rounds does not depend on the
divisors either.

What S learns: per element and step it opens ``d + r1``, ``Y + r2`` (kept for the second Mult),
``E + r3`` (masks of the operand's public bound plus ``kappa`` bits) and Trunc's ``Y E + r4`` (``l +
kappa`` bits): ``4 k`` values for ``k`` steps, each within statistical distance ``2^(1 - kappa)`` of
the same opening for any other in-range divisor, so S's whole view for ``d`` and for ``d'`` differ by at
most ``4 k 2^(1 - kappa)`` per element (``k = 6``, ``kappa = 80``: below ``2^-74``). No product or
multiple of ``d`` is ever opened (the division it replaces opened ``d r``, which a factoring attack
pins: :mod:`ray_vfl.ssxgb.attack`). A divisor outside its stated range makes the result wrong, and C
cannot see it: the caller proves the ranges.

Example
-------
>>> import warnings; warnings.simplefilter("ignore")
>>> from ray_vfl.crypto.two_server.bcp import keygen, setup
>>> from ray_vfl.crypto.two_server.server_c import ServerC
>>> from ray_vfl.crypto.two_server.server_s import LocalLink, ServerS, TwoServerConfig
>>> params, mk = setup(1024, allow_weak=True)
>>> cfg = TwoServerConfig(256, 40)
>>> c = ServerC(params, LocalLink(ServerS(mk, cfg)), cfg)
>>> jpk = c.register([keygen(params)[0]])
>>> newton = Newton(lo=100, hi=10_000, ratio=10, rel_bits=30)
>>> newton.iterations, newton.scale_bits
(5, 46)
>>> y = reciprocal(c, c.encrypt_ints(jpk, [150, 7_000]), newton, [100, 1_000], [1_000, 10_000])
>>> [abs(v * d / 2**46 - 1) < 2**-30 for v, d in zip(c.bcp.mdecrypt_ints(mk, jpk, y), [150, 7_000])]
[True, True]
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from fractions import Fraction

from ray_vfl.crypto.he.ciphertexts import CipherArray
from ray_vfl.crypto.two_server.bcp_arrays import check
from ray_vfl.errors import CryptoError

__all__ = ["Newton", "reciprocal"]


def first_error(ratio: float) -> float:
    """``E0``: the largest ``|1 - d y0|`` of the best linear start on a range with ``hi / lo = ratio``."""
    return (ratio - 1) ** 2 / ((ratio + 1) ** 2 + 4 * ratio)


@dataclass(frozen=True)
class Newton:
    """The public parameters of a reciprocal: every divisor in ``[lo, hi]``, each element's own range
    ``[lo_i, hi_i]`` with ``hi_i <= ratio lo_i``, result within relative error ``2^-rel_bits``.

    ``scale_bits`` (``J``; default the least that makes the rounding of ``c0``, ``c1`` and the
    truncations small enough), ``iterations`` and the operands' bounds (``d_bits``, ``y_bits``: ``|Y| <
    2^y_bits`` at every step, ``E < 2^(J+1)``) follow; :attr:`error` is the proven relative error.
    """

    lo: int
    hi: int
    ratio: Fraction | int
    rel_bits: int
    scale_bits: int = 0
    iterations: int = field(init=False)
    error: float = field(init=False)

    def __post_init__(self) -> None:
        lo, hi, rel = self.lo, self.hi, self.rel_bits
        if not (isinstance(lo, int) and isinstance(hi, int) and 1 <= lo <= hi):
            raise CryptoError(f"a reciprocal needs integer divisor bounds 1 <= lo <= hi, got {lo!r}, {hi!r}")
        if not isinstance(self.ratio, (int, Fraction)) or self.ratio < 1 or not (isinstance(rel, int)
                                                                                   and 1 <= rel <= 512):
            raise CryptoError(f"ratio must be an int or Fraction >= 1 and rel_bits in [1, 512], got "
                              f"{self.ratio!r}, {rel!r}")
        ratio = float(self.ratio)
        big_j = self.scale_bits or max(2 * hi.bit_length() + 4, hi.bit_length() + rel + 2)
        if big_j < hi.bit_length() + rel + 1:
            raise CryptoError(f"scale_bits = {big_j} is too small for rel_bits = {rel} with divisors up to {hi}")
        e = first_error(ratio) * (1 + 1e-9) + hi * (hi + 1) / 2.0 ** (big_j + 1)
        steps = 0
        while e > 2.0**-rel:
            nxt = e * e * (1 + 1e-9) + hi / 2.0**big_j
            if nxt >= e or steps == 64:
                raise CryptoError(f"Newton's iteration does not reach 2^-{rel} from a start error of {e:.3g}: "
                                  "raise scale_bits or narrow the divisors' ranges")
            e, steps = nxt, steps + 1
        object.__setattr__(self, "scale_bits", big_j)
        object.__setattr__(self, "iterations", steps)
        object.__setattr__(self, "error", e)

    @property
    def d_bits(self) -> int:
        return self.hi.bit_length()

    @property
    def y_bits(self) -> int:
        """``|e| < 1`` at every step, so ``0 < Y < 2^(J+1) / d + 1``."""
        return ((1 << (self.scale_bits + 1)) // self.lo + 2).bit_length()

    @property
    def rounds(self) -> int:
        return 3 * self.iterations

    def start(self, lo: int, hi: int) -> tuple[int, int]:
        """``(C0, C1)``: ``round(2^J c0)``, ``round(2^J c1)`` of the linear start on ``[lo, hi]``."""
        if not (self.lo <= lo <= hi <= self.hi and hi <= Fraction(self.ratio) * lo):
            raise CryptoError(f"an element's range [{lo}, {hi}] is not within [{self.lo}, {self.hi}] with "
                              f"hi / lo <= {self.ratio}")
        den = (lo + hi) ** 2 + 4 * lo * hi
        top = 1 << (self.scale_bits + 3)
        return (top * (lo + hi) + den // 2) // den, (top + den // 2) // den


def reciprocal(c, d: CipherArray, newton: Newton, lo: Sequence[int], hi: Sequence[int],
               out_frac: int | None = None) -> CipherArray:
    """``Enc(Y)``, ``|Y d / 2^J - 1| <= newton.error`` (``J`` = ``newton.scale_bits``), for the encrypted
    integers ``d`` (any tag: read as integers) with ``lo[i] <= d[i] <= hi[i]``, by ``newton.rounds``
    rounds with S (module docstring); the result is tagged ``out_frac`` (default ``J``).
    ``c`` is a :class:`~ray_vfl.crypto.two_server.server_c.ServerC` or a
    :class:`~ray_vfl.crypto.lattice.two_server.LatticeServerC` (same calls)."""
    pk = c.key_of(d)  # checks d is an array under a key server C knows (BCP or lattice engine)
    if isinstance(d, CipherArray):
        check(pk, d)
    m, big_j = len(d), newton.scale_bits
    if len(lo) != m or len(hi) != m:
        raise CryptoError(f"{m} divisors with {len(lo)} lower and {len(hi)} upper bounds")
    if 2 * big_j + 3 > c.config.value_bits:
        raise CryptoError(f"a reciprocal at scale 2^{big_j} needs value_bits >= {2 * big_j + 3}, got "
                          f"{c.config.value_bits}")
    starts = [newton.start(int(a), int(b)) for a, b in zip(lo, hi)]
    bcp = c.bcp
    d = bcp.with_scale(d, 0)
    y = bcp.add(pk, c.encrypt_ints(pk, [s[0] for s in starts], big_j), bcp.mul_const(pk, d, [-s[1] for s in starts],
                                                                                      big_j, c.pool))
    two = c.encrypt_ints(pk, [1 << (big_j + 1)] * m, big_j)
    yb, db = newton.y_bits, newton.d_bits
    for _ in range(newton.iterations):
        (t,) = c.mult_many([(d, y)], [(db, yb)], keep=(y,))  # scale J
        (ye,) = c.mult_many([(y, bcp.sub(pk, two, t))], [(yb, big_j + 1)])
        y = c.trunc(ye, big_j)
    return y if out_frac is None else bcp.with_scale(y, out_frac)
