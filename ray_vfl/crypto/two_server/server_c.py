"""Server C of the two-server sub-protocols: every homomorphic step, and each interactive one's masks.

The protocols, their rounds and what S learns are described in :mod:`ray_vfl.crypto.two_server.server_s`,
which holds server S, the configuration and the in-process link.
"""

from __future__ import annotations

import itertools
import secrets
from collections.abc import Sequence
from typing import Any

import numpy as np

from ray_vfl.crypto.he.ciphertexts import CipherArray
from ray_vfl.crypto.two_server.bcp import BCPParams, BCPPublicKey, joint_key
from ray_vfl.crypto.two_server.bcp_arrays import BCP, check, tag_frac_bits
from ray_vfl.crypto.two_server.bcp_batches import encrypt_many, mul_const_many
from ray_vfl.errors import ConfigError, CryptoError

from ray_vfl.crypto.two_server.server_s import ServerS, TwoServerConfig

__all__ = ["ServerC"]


def _uniform(bits: int, count: int) -> list[int]:
    return [secrets.randbits(bits) for _ in range(count)]


class ServerC:
    """Server C: public parameters, public keys, ciphertexts; runs the protocols with S over ``link``.

    Parameters
    ----------
    params : BCPParams
    link : object with ``ask(step, *payload)``, e.g. :class:`LocalLink`
    config : TwoServerConfig
        The same as S's.
    frac_bits : int, default 40
        Scale of :meth:`encrypt` (floats).
    pool : optional task pool for large encryptions (see :mod:`ray_vfl.crypto.two_server.bcp_arrays`)
    """

    def __init__(self, params: BCPParams, link: Any, config: TwoServerConfig = TwoServerConfig(),
                 frac_bits: int = 40, pool: Any = None) -> None:
        if not isinstance(params, BCPParams):
            raise CryptoError(f"server C needs BCPParams, got {type(params).__name__}")
        if not isinstance(config, TwoServerConfig):
            raise ConfigError(f"config must be a TwoServerConfig, got {type(config).__name__}")
        config.check_key(params.key_bits)
        self.params = params
        self.link = link
        self.config = config
        self.bcp = BCP(frac_bits)
        self.pool = pool
        self.keys: dict[bytes, BCPPublicKey] = {}
        self.joint: BCPPublicKey | None = None
        self._held: list[tuple[CipherArray, int, list[int], int]] = []  # Mult operands S keeps: (array, token, r, bits)
        self._tokens = itertools.count()

    # -- keys -----------------------------------------------------------------------------------
    def register(self, user_keys: Sequence[BCPPublicKey]) -> BCPPublicKey:
        """KeyProd's key part: the joint key ``prod h_i``; S learns the user keys and the joint key (1 round)."""
        if not user_keys or any(not isinstance(k, BCPPublicKey) or k.params != self.params for k in user_keys):
            raise CryptoError("register needs BCPPublicKeys of this Setup")
        jpk = joint_key(list(user_keys))
        for k in (*user_keys, jpk):
            self.keys[k.key_id] = k
        self.link.ask(ServerS.register_step, [k.h for k in (*user_keys, jpk)])
        self.joint = jpk
        return jpk

    def key_of(self, c: CipherArray) -> BCPPublicKey:
        if not isinstance(c, CipherArray) or c.key_id not in self.keys:
            raise CryptoError("ciphertext under a key server C does not know: register the key first")
        return self.keys[c.key_id]

    def encrypt_ints(self, pk: BCPPublicKey, ms: Sequence[int], frac_bits: int = 0) -> CipherArray:
        return self.bcp.encrypt_ints(pk, ms, frac_bits, self.pool)

    def encrypt(self, pk: BCPPublicKey, x: np.ndarray) -> CipherArray:
        return self.bcp.encrypt(pk, x, self.pool)

    # -- key switching ----------------------------------------------------------------------------
    def _switch(self, arrays: Sequence[CipherArray], targets: Sequence[BCPPublicKey]) -> list[CipherArray]:
        n = self.params.n
        taus, masked = [], []
        for c in arrays:
            pk = self.key_of(c)
            frac = check(pk, c)
            tau = [secrets.randbelow(n) for _ in range(len(c))]  # one-time pad in Z_N
            taus.append(tau)
            masked.append(self.bcp.add(pk, c, self.bcp._encrypt_residues(pk, tau, frac, self.pool, hiding=True)))
        replies = self.link.ask(ServerS.switch_key_step, masked, [t.key_id for t in targets])
        out = []
        for r, tau, t in zip(replies, taus, targets):
            frac = check(t, r)
            out.append(self.bcp.add(t, r, self.bcp._encrypt_residues(t, [-v % n for v in tau], frac, self.pool)))
        return out

    def trans_dec_many(self, arrays: Sequence[CipherArray], user_keys: Sequence[BCPPublicKey]) -> list[CipherArray]:
        """TransDec of several arrays, each to its own registered user key, in one round trip."""
        if len(arrays) != len(user_keys):
            raise CryptoError(f"{len(arrays)} arrays for {len(user_keys)} target keys")
        for k in user_keys:
            if not isinstance(k, BCPPublicKey) or k.key_id not in self.keys:
                raise CryptoError("TransDec target must be a registered user key")
        return self._switch(arrays, user_keys) if arrays else []

    def key_prod(self, arrays: Sequence[CipherArray]) -> list[CipherArray]:
        """KeyProd: arrays under user keys -> the same plaintexts under the joint key (1 round for all)."""
        if self.joint is None:
            raise CryptoError("register the user keys before KeyProd")
        return self._switch(arrays, [self.joint] * len(arrays))

    def trans_dec(self, c: CipherArray, user_key: BCPPublicKey) -> CipherArray:
        """TransDec: an array under the joint key -> under ``user_key``, which its owner decrypts (1 round)."""
        if not isinstance(user_key, BCPPublicKey) or user_key.key_id not in self.keys:
            raise CryptoError("TransDec target must be a registered user key")
        return self._switch([c], [user_key])[0]

    # -- local operations ---------------------------------------------------------------------------
    def add(self, a: CipherArray, b: CipherArray) -> CipherArray:
        return self.bcp.add(self.key_of(a), a, b)

    def neg(self, c: CipherArray) -> CipherArray:
        return self.bcp.neg(self.key_of(c), c)

    def sub(self, a: CipherArray, b: CipherArray) -> CipherArray:
        return self.bcp.sub(self.key_of(a), a, b)

    def exp(self, c: CipherArray, k: Sequence[int] | np.ndarray, frac_bits: int = 0) -> CipherArray:
        """Exp: ``Enc(k x)`` for integer constants ``k`` (``frac_bits``: the scale ``k`` carries)."""
        return self.bcp.mul_const(self.key_of(c), c, k, frac_bits, self.pool)

    # -- Mult -----------------------------------------------------------------------------------
    def mult(self, a: CipherArray, b: CipherArray) -> CipherArray:
        """Mult: ``Enc(x y)`` element-wise (scale: the sum of the operands'), 1 round."""
        return self.mult_many([(a, b)])[0]

    def mult_many(self, pairs: Sequence[tuple[CipherArray, CipherArray]],
                  bounds: Sequence[tuple[int, int]] | None = None,
                  keep: Sequence[CipherArray] = ()) -> list[CipherArray]:
        """Mult of several array pairs in one round trip.

        C sends ``Enc(x + r1)``, ``Enc(y + r2)``; S returns ``Enc((x + r1)(y + r2))``; C removes
        the cross terms: ``Enc(x y) = Enc(X Y) - r2 Enc(x) - r1 Enc(y) - Enc(r1 r2)``.

        An array that appears in several pairs of one call (the same object: both sides of a square,
        a selection bit multiplying several differences) is masked and sent once, and S opens it once:
        one hiding encryption and one decryption fewer per repeat, and S sees one masked copy of it
        instead of several. A square's two cross terms are one Exp by ``2 r``.

        ``bounds``: per pair, ``(bx, by)`` with ``|x| < 2^bx`` and ``|y| < 2^by`` known to C (at most
        ``l``); the masks then have ``bx + kappa`` and ``by + kappa`` bits (a shared array: its largest
        bound), which hide ``x`` and ``y`` just as well (statistical distance ``<= 2^(1 - kappa)``) and
        make C's exponentiations by them cheaper (their cost follows the mask's bits). Default: ``l``.
        S is told each bound and refuses an opened value outside ``(-2^b, 2^(b + kappa) + 2^b)``, the
        range of every in-bound input's: an operand far past its bound is caught there.

        ``keep``: operands of this call (the same objects) that the *next* Mult also multiplies. S keeps
        their opened ``x + r`` for that call and C its ``r``, so the next call sends and opens them not
        at all: S sees the same masked value again, never a second masking of ``x``. Whatever was kept
        lasts one call.
        """
        n, top = self.params.n, self.config.value_bits
        if bounds is None:
            bounds = [(top, top)] * len(pairs)
        if len(bounds) != len(pairs) or any(isinstance(b, bool) or not isinstance(b, int) or not 1 <= b <= top
                                            for pair in bounds for b in pair):
            raise CryptoError(f"Mult bounds must be one (bits of x, bits of y) pair per product, each in [1, {top}]")
        operands: list[CipherArray] = []  # each distinct array once, in order of first appearance
        slot: dict[int, int] = {}
        bits: list[int] = []
        index = []
        for (a, b), (bx, by) in zip(pairs, bounds):
            if len(a) != len(b):
                raise CryptoError(f"Mult needs arrays of equal length, got {len(a)} and {len(b)}")
            ends = []
            for arr, bound in ((a, bx), (b, by)):
                if id(arr) not in slot:
                    slot[id(arr)] = len(operands)
                    operands.append(arr)
                    bits.append(bound)
                i = slot[id(arr)]
                bits[i] = max(bits[i], bound)
                ends.append(i)
            index.append(tuple(ends))
        if any(not any(arr is op for op in operands) for arr in keep):
            raise CryptoError("Mult can keep only arrays it multiplies")
        keys = [self.key_of(arr) for arr in operands]
        scales = [check(pk, arr) for pk, arr in zip(keys, operands)]
        if any(keys[i].key_id != keys[j].key_id for i, j in index):
            raise CryptoError("Mult needs both arrays of a pair under the same key")
        kappa, bcp = self.config.kappa, self.bcp
        held, self._held = self._held, []  # kept by the previous call, for this one only
        reused = {i: h for i, arr in enumerate(operands) for h in held if h[0] is arr and h[3] >= bits[i]}
        fresh = [i for i in range(len(operands)) if i not in reused]
        r = [reused[i][2] if i in reused else _uniform(b + kappa, len(operands[i])) for i, b in enumerate(bits)]
        # every mask, every cross term and every r1 r2 of all products in one pooled call each
        masks = encrypt_many(bcp, [(keys[i], r[i]) for i in fresh], self.pool, hiding=True)
        masked = [bcp.add(keys[i], operands[i], bcp.with_scale(m, scales[i])) for i, m in zip(fresh, masks)]
        # S's order: the fresh operands, then the reused ones
        at = {i: k for k, i in enumerate(fresh + list(reused))}
        tokens = {i: next(self._tokens) for i, arr in enumerate(operands) if any(arr is a for a in keep)}
        replies = self.link.ask(ServerS.mult_step, masked, [(at[i], at[j]) for i, j in index],
                                [(at[i], t) for i, t in tokens.items()], [reused[i][1] for i in reused],
                                [bits[i] for i in fresh])
        self._held = [(operands[i], t, r[i], bits[i]) for i, t in tokens.items()]
        jobs = []  # per pair: -r_j Enc(x_i) and -r_i Enc(x_j), or -2 r_i Enc(x_i) for a square
        for i, j in index:
            if i == j:
                jobs.append((keys[i], operands[i], [-2 * v for v in r[i]]))
            else:
                jobs += [(keys[i], operands[i], [-v for v in r[j]]), (keys[j], operands[j], [-v for v in r[i]])]
        terms = iter(mul_const_many(bcp, jobs, self.pool))
        cross = encrypt_many(bcp, [(keys[i], [-u * v % n for u, v in zip(r[i], r[j])]) for i, j in index], self.pool)
        out = []
        for (i, j), xy, rr in zip(index, replies, cross):
            pk = keys[i]
            frac = check(pk, xy)
            acc = bcp.add(pk, xy, bcp.with_scale(rr, frac))
            for _ in range(1 if i == j else 2):
                acc = bcp.add(pk, acc, bcp.with_scale(next(terms), frac))
            out.append(acc)
        return out

    # -- Trunc ----------------------------------------------------------------------------------
    def trunc(self, c: CipherArray, k: int) -> CipherArray:
        """Trunc: ``Enc(floor(x / 2^k) + e)``, ``e`` in ``{0, 1}``, scale lowered by ``k`` (1 round)."""
        return self.trunc_many([c], k)[0]

    def trunc_many(self, arrays: Sequence[CipherArray], k: int) -> list[CipherArray]:
        """Trunc of several arrays by the same ``k`` in one round trip (see the module docstring)."""
        bits = self.config.mask_bits
        masks = []
        for c in arrays:
            pk = self.key_of(c)
            frac = check(pk, c)
            if not 0 < k <= frac:
                raise CryptoError(f"Trunc by {k} bits of an array of scale {frac}: shift must be in [1, {frac}]")
            masks.append((pk, _uniform(bits, len(c))))
        blinds = encrypt_many(self.bcp, masks, self.pool, hiding=True)
        masked = [self.bcp.add(pk, c, self.bcp.with_scale(e, check(pk, c)))
                  for (pk, _), c, e in zip(masks, arrays, blinds)]
        replies = self.link.ask(ServerS.trunc_step, masked, [int(k)] * len(masked))
        unmask = encrypt_many(self.bcp, [(pk, [-(v >> k) for v in r]) for pk, r in masks], self.pool)
        return [self.bcp.add(pk, rep, self.bcp.with_scale(u, check(pk, rep)))
                for rep, (pk, _), u in zip(replies, masks, unmask)]

    # -- LGT --------------------------------------------------------------------------------------
    def lgt(self, a: CipherArray, b: CipherArray) -> CipherArray:
        """LGT: ``Enc([x < y])`` element-wise (integers of one scale, ``|x|, |y| < 2^l``), 1 round.
        ``Enc([x > y])`` is ``lgt(b, a)``.

        C sends ``Enc(v)``, ``v = s (r d + r')`` with ``d = 2 (y - x) - 1`` (odd, so never 0; ``d > 0``
        iff ``x < y``), ``s`` a random sign, ``r`` in ``[2^(kappa-1), 2^kappa)``, ``r'`` in ``(-r, r)``
        (``r d + r'`` keeps the sign of ``d``, and ``|v| = r |d| +- r'`` is distributed alike for ``d`` and
        ``-d``: with ``r'`` in ``[0, r)`` it would be ``r |d| + r'`` against ``r |d| - r'``, which a KS test
        tells apart at ``n = 400``); S returns ``Enc([v > 0])``; C flips it where ``s = -1``. The elements
        go to S in an order C shuffles afresh for every call, so the magnitude S can read off each
        ``|v|`` belongs to no element S can name.
        """
        pk = self.key_of(a)
        fa, fb = check(pk, a), check(pk, b)
        if fa != fb or len(a) != len(b):
            raise CryptoError(f"LGT needs arrays of equal length and scale, got {len(a)} (f{fa}) and {len(b)} (f{fb})")
        k = len(a)
        kappa = self.config.kappa
        signs = [1 - 2 * secrets.randbits(1) for _ in range(k)]
        rs = [(1 << (kappa - 1)) | secrets.randbits(kappa - 1) for _ in range(k)]
        rps = [secrets.randbelow(2 * r - 1) - (r - 1) for r in rs]  # uniform in (-r, r): symmetric about 0
        d = self.bcp.with_scale(self.bcp.mul_const(pk, self.bcp.sub(pk, b, a), [2] * k), 0)
        d = self.bcp.add(pk, d, self.bcp._encrypt_residues(pk, [-1] * k, 0, self.pool))
        blind = self.bcp._encrypt_residues(pk, [s * rp for s, rp in zip(signs, rps)], 0, self.pool, hiding=True)
        v = self.bcp.add(pk, self.bcp.mul_const(pk, d, [s * r for s, r in zip(signs, rs)], pool=self.pool), blind)
        order = list(range(k))
        secrets.SystemRandom().shuffle(order)
        back = np.argsort(order)
        bit = self.bcp.take(self.link.ask(ServerS.lgt_step, self.bcp.take(v, np.asarray(order, dtype=np.int64))), back)
        check(pk, bit)
        # s = +1: [v > 0] = [x < y];  s = -1: 1 - [v > 0]  ->  Enc(s b' + (1 - s) / 2), re-randomised
        return self.bcp.add(pk, self.bcp.mul_const(pk, bit, signs),
                            self.bcp._encrypt_residues(pk, [(1 - s) // 2 for s in signs], 0, self.pool))

    # -- SArgmax ----------------------------------------------------------------------------------
    def sargmax(self, c: CipherArray) -> tuple[CipherArray, CipherArray]:
        """SArgmax: ``(Enc(argmax), Enc(max))`` of the values of ``c`` (the first index among equal
        maxima, as ``numpy.argmax``); ``|v| < 2^(l - 1)``.

        A tournament: at each level the values are paired, one LGT round gives ``b = [L < R]`` for
        every pair, one Mult round selects ``L + b (R - L)`` for the value and for its index. Rounds:
        ``2 ceil(log2 k)``; LGTs and Mults: ``k - 1`` each (two Mult products per pair).
        """
        pk = self.key_of(c)
        frac = check(pk, c)
        if len(c) == 0:
            raise CryptoError("SArgmax of an empty array")
        vals, idx = c, self.encrypt_ints(pk, list(range(len(c))))
        while len(vals) > 1:
            m = len(vals) // 2 * 2
            left, right = self.bcp.take(vals, slice(0, m, 2)), self.bcp.take(vals, slice(1, m, 2))
            li, ri = self.bcp.take(idx, slice(0, m, 2)), self.bcp.take(idx, slice(1, m, 2))
            b = self.lgt(left, right)
            dv, di = self.mult_many([(b, self.bcp.sub(pk, right, left)), (b, self.bcp.sub(pk, ri, li))])
            new_v, new_i = self.bcp.add(pk, left, dv), self.bcp.add(pk, li, di)
            if m < len(vals):  # the odd one out goes up a level unchanged
                new_v = self.bcp.concat([new_v, self.bcp.take(vals, slice(m, m + 1))])
                new_i = self.bcp.concat([new_i, self.bcp.take(idx, slice(m, m + 1))])
            vals, idx = new_v, new_i
        if tag_frac_bits(vals.tag) != frac:
            raise CryptoError("SArgmax changed the scale")  # pragma: no cover - an internal invariant
        return idx, vals
