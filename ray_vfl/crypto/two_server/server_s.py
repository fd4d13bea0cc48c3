"""Two-server sub-protocols on BCP ciphertexts (SSXGB's KeyProd, TransDec, Add, Neg, Exp, Sub, Mult, LGT, SArgmax).

Two non-colluding, honest-but-curious servers: **C** holds the public parameters, every public key and
the ciphertexts, and does all homomorphic work; **S** holds the BCP master key (mDec) and only ever
decrypts values that C has masked. Every protocol is vectorised: one C -> S request and one reply per
whole array (or list of arrays), never one per value. ``ServerC`` and ``ServerS`` are plain classes;
C (:class:`~ray_vfl.crypto.two_server.server_c.ServerC`) reaches S through a *link* with one method,
``ask(step, *payload)`` (``step`` a ``ServerS`` method):
:class:`LocalLink` runs it in-process, pickling every payload and reply so that only plain values
(``CipherArray`` byte matrices, key ids, ints) cross, and counts round trips and bytes. A Ray wrapper
sends the same payloads through ``ray_vfl.runtime.comm.Mailbox.send``.

References: Peter, Tews, Katzenbeisser, "Efficiently outsourcing multiparty computation under
multiple keys" (IEEE TIFS 2013) for KeyProd / TransDec / Mult; Liu, Lu, Ma, Chen, Qin, "Privacy-
preserving outsourced calculation on floating point numbers" / "Efficient and privacy-preserving
outsourced calculation of rational numbers" (IEEE TIFS / TDSC 2016) for the secure less-than (SLT)
that LGT adapts; SSXGB (Scalable Multi-Party Privacy-Preserving Gradient Tree Boosting over
Vertically Partitioned Dataset with Outsourced Computations) for how they compose.

Parameters (:class:`TwoServerConfig`): ``value_bits`` = l (default 128) bounds the plaintexts of Mult
and LGT, ``|x| < 2^l``; ``kappa`` (default 80) is the statistical hiding parameter. Both servers check
``l + kappa + 6 <= |N|`` at construction.

======================  =========================================  ==========================================
protocol (rounds)       C -> S payload                             what S learns
======================  =========================================  ==========================================
register (1)            user public keys ``h_i`` (ints)            public keys only
KeyProd (1)             ``Enc_pk_i(m + tau)`` per user array       ``m + tau mod N``: uniform in ``Z_N``
TransDec (1)            ``Enc_pk(m + tau)``, target key id         ``m + tau mod N``: uniform in ``Z_N``
Add, Neg, Sub, Exp (0)  (local at C)                               nothing
Mult (1)                ``Enc(x + r1)``, ``Enc(y + r2)`` (an       ``x + r1``, ``y + r2``: statistical
                        array in several products of one round     distance ``<= 2^(1 - kappa)`` from any
                        once; one kept from the previous Mult      other in-range input's; which products
                        not at all), index pairs, keep/reuse       share an operand, within a round and
                        tokens, each operand's bound               with the round before
LGT (1)                 ``Enc(s (r d + r'))``, d = 2(y - x) - 1,   the sign is uniform (independent of
                        elements in an order C shuffles            [x < y]); the magnitudes reveal about
                                                                   ``log2 |x - y|`` (bit length, +-1) of
                                                                   the elements, not which is which
SArgmax (2 ceil lg k)   LGT and Mult requests, tournament         what those LGTs and Mults reveal
Trunc (1)               ``Enc(x + r)``, shift ``k``                ``x + r``: as Mult's (``r`` of ``l + kappa``
                                                                   bits)
Reciprocal (3 a step)   Mult and Trunc requests (Newton's          what those Mults and Truncs reveal:
                        iteration, :mod:`~ray_vfl.crypto.          masked values only, statistically
                        two_server.reciprocal`)                    independent of ``d``
======================  =========================================  ==========================================

S -> C replies: fresh encryptions by S under a key C names (``Enc_pk(m + tau)`` re-encrypted, ``Enc(XY)``,
``Enc([v > 0])``); C learns nothing from them (semantic security; C has no secret key).

Randomness: S can compute the encryption exponent ``r mod N`` of any ciphertext with the master key,
so the mask encryption C adds to every ciphertext it sends to S has a fresh exponent of ``|N| + 128`` bits
(:data:`~ray_vfl.crypto.two_server.bcp.HIDING_BITS`), statistically uniform modulo ``N``: the exponent S could
compute is then independent of C's secret multipliers (LGT's ``s r``, Mult's ``r1``, ``r2`` through the
cross terms of earlier products).

Masks (all from ``secrets``): ``tau`` uniform in ``Z_N`` (perfect hiding: a one-time pad mod ``N``);
Mult's ``r1, r2`` uniform in ``[0, 2^(l + kappa))`` (statistical hiding: ``x + r1`` for two inputs
``|x|, |x'| < 2^l`` are at statistical distance ``<= |x - x'| / 2^(l + kappa) < 2^(1 - kappa)``; short
masks because C exponentiates by them: ``(l + kappa)``-bit instead of ``|N|``-bit exponents); LGT's
sign ``s`` uniform in ``{-1, +1}`` (1 bit), ``r`` uniform in ``[2^(kappa - 1), 2^kappa)`` and ``r'``
uniform in ``(-r, r)``: symmetric about 0, so for a given ``|d|`` S's value has one distribution whichever
the outcome (``r'`` in ``[0, r)`` would make ``|v|`` larger when ``x < y``, a statistical leak of the
outcome that a two-sample test detects at a few hundred comparisons).

Ranges. Mult: S refuses (:class:`~ray_vfl.errors.CryptoError`) a masked value outside
``(-2^b, 2^(b + kappa) + 2^b)``, the range of every in-range input's, where ``b`` is the operand's bound
C declares with it (``l`` unless C knows a smaller one); this catches every input with
``|x| >= 2^(b + kappa) + 2^b`` and one with ``2^b <= |x| < 2^(b + kappa) + 2^b`` only with probability
about ``(|x| - 2^b) / 2^(b + kappa)`` (C cannot see the plaintexts; for such an input the hiding
degrades to statistical distance ``|x - x'| / 2^(b + kappa)``). The product is correct whenever
``|x y| <= N // 3``. LGT: correct and accepted for ``|x|, |y| < 2^l``; S refuses
``|v| >= 2^(l + kappa + 2)``, which every pair with ``|y - x| >= 2^(l + 2)`` triggers
(``|v| > r (|d| - 1)`` and ``r >= 2^(kappa - 1)``); a pair in between is accepted only when ``|v|`` is
below the bound, far below ``N / 3``, so its result is still correct.
SArgmax: ``|v| < 2^(l - 1)`` (its Mults take differences of two values).

Trunc (secure truncation, for fixed-point products): C sends ``Enc(x + r)`` with ``r`` uniform in
``[0, 2^(l + kappa))``; S returns ``Enc(floor((x + r) / 2^k))``; C subtracts ``floor(r / 2^k)``. The result
is ``floor(x / 2^k)`` or ``floor(x / 2^k) + 1`` (the carry of the low bits, which C cannot see):
``|result - x / 2^k| < 1``, one unit of the new scale, for every integer ``x`` with ``|x| < 2^l``.

Reciprocal (:mod:`~ray_vfl.crypto.two_server.reciprocal`): Newton's iteration for ``2^J / d`` from a
linear start on ``d``'s public range, each step one Mult, one Mult and one Trunc; S needs no step of
its own and opens nothing but masked values. (An earlier one-round division opened ``d r`` with a
``rho``-bit ``r``: a factoring attack pinned ``d`` from it, :mod:`ray_vfl.ssxgb.attack`.)

Decryption at S. Every value S opens in Mult, LGT and Trunc is below ``2^(l + kappa + 2)``
in absolute value when C follows the protocol, far below ``p / 2`` (``p`` has ``|N| / 2`` bits), so S
decrypts those modulo ``p`` alone (:meth:`~ray_vfl.crypto.two_server.bcp_arrays.BCP.mdecrypt_small`: two of mDec's
four half-size exponentiations); when ``l + kappa + 2`` reaches ``|N| / 2 - 2`` it uses the full mDec.
A value outside the range would come out reduced modulo ``p`` and is then refused by the range checks
above with probability about ``1 - 2^(l + kappa + 3 - |N| / 2)``. KeyProd and TransDec open values
uniform in ``Z_N`` and use the full mDec.

LGT leaks the approximate magnitude of ``x - y`` to S, as the SLT of Liu et al. does (multiplicative
blinding cannot hide it); hiding it too needs a bitwise comparison (DGK-style), about ``l + kappa``
ciphertexts per value each way.

Example
-------
>>> import warnings; warnings.simplefilter("ignore")
>>> from ray_vfl.crypto.two_server.bcp import setup, keygen
>>> params, mk = setup(1024, allow_weak=True)
>>> users = [keygen(params) for _ in range(2)]
>>> s = ServerS(mk)
>>> from ray_vfl.crypto.two_server.server_c import ServerC
>>> c = ServerC(params, LocalLink(s))
>>> jpk = c.register([pk for pk, _ in users])
>>> x, y = c.encrypt_ints(jpk, [3, -4, 5]), c.encrypt_ints(jpk, [2, -4, 6])
>>> bcp = c.bcp
>>> bcp.mdecrypt_ints(mk, jpk, c.mult(x, y)), bcp.mdecrypt_ints(mk, jpk, c.lgt(x, y))
([6, 16, 30], [0, 0, 1])
>>> back = c.trans_dec(c.mult(x, y), users[0][0])           # to user 0, who decrypts alone
>>> bcp.decrypt_ints(users[0][1], back), c.link.round_trips
([6, 16, 30], 5)
"""

from __future__ import annotations

import pickle
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


from ray_vfl.crypto.he.ciphertexts import CipherArray
from ray_vfl.crypto.two_server.bcp import BCPMasterKey, BCPPublicKey
from ray_vfl.crypto.two_server.bcp_arrays import BCP, key_logs, tag_frac_bits
from ray_vfl.crypto.two_server.bcp_batches import encrypt_many, mdecrypt_small_many
from ray_vfl.errors import ConfigError, CryptoError

__all__ = ["LocalLink", "ServerS", "TwoServerConfig"]


@dataclass(frozen=True)
class TwoServerConfig:
    """Value range and statistical hiding parameter of the two-server protocols.

    Parameters
    ----------
    value_bits : int, default 128
        ``l``: Mult and LGT inputs satisfy ``|x| < 2^l`` (SArgmax: ``2^(l - 1)``).
    kappa : int, default 80
        Statistical hiding parameter: Mult's masks hide an input within ``2^(1 - kappa)``.

    Example
    -------
    >>> TwoServerConfig().mask_bits
    208
    >>> TwoServerConfig(value_bits=0)
    Traceback (most recent call last):
    ...
    ray_vfl.errors.ConfigError: value_bits must be an int >= 1, got 0
    """

    value_bits: int = 128
    kappa: int = 80

    def __post_init__(self) -> None:
        for name, lo in (("value_bits", 1), ("kappa", 40)):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < lo:
                raise ConfigError(f"{name} must be an int >= {lo}, got {v!r}")

    @property
    def mask_bits(self) -> int:
        """Bits of Mult's additive masks ``r1``, ``r2``: ``l + kappa``."""
        return self.value_bits + self.kappa

    @property
    def lgt_bound(self) -> int:
        """S refuses an LGT value ``|v| >= 2^(l + kappa + 2)``."""
        return 1 << (self.value_bits + self.kappa + 2)

    def check_key(self, key_bits: int) -> None:
        """``l + kappa + 6 <= |N|``: LGT's blinded values stay far below ``N / 3``."""
        if self.value_bits + self.kappa + 6 > key_bits:
            raise ConfigError(f"value_bits + kappa + 6 = {self.value_bits + self.kappa + 6} exceeds the "
                              f"{key_bits}-bit key: lower value_bits (at most {key_bits - self.kappa - 6})")


class ServerS:
    """Server S: holds the master key, answers C's steps on masked ciphertexts.

    Every ``*_step`` method takes and returns plain values (``CipherArray``, ``bytes``, ints).
    ``record_view=True`` keeps what S decrypted, ``(step name, list of ints)``, in :attr:`view`
    (tests audit it).
    """

    def __init__(self, mk: BCPMasterKey, config: TwoServerConfig = TwoServerConfig(), frac_bits: int = 40,
                 record_view: bool = False, pool: Any = None) -> None:
        if not isinstance(mk, BCPMasterKey):
            raise CryptoError(f"server S needs a BCPMasterKey, got {type(mk).__name__}")
        if not isinstance(config, TwoServerConfig):
            raise ConfigError(f"config must be a TwoServerConfig, got {type(config).__name__}")
        config.check_key(mk.params.key_bits)
        self.pool = pool
        self._mk = mk
        self.config = config
        self.bcp = BCP(frac_bits)
        self.keys: dict[bytes, BCPPublicKey] = {}
        self.record_view = record_view
        self.view: list[tuple[str, list[int]]] = []
        self._kept: dict[int, tuple[CipherArray, list[int]]] = {}  # Mult: token -> (masked array, opened)

    def _key(self, key_id: bytes) -> BCPPublicKey:
        if key_id not in self.keys:
            raise CryptoError(f"server S does not know key {bytes(key_id).hex()[:8]}..: register it first "
                              "(ciphertexts under an unknown key are refused)")
        return self.keys[key_id]

    def _open(self, step: str, c: CipherArray, signed: bool) -> list[int]:
        pk = self._key(c.key_id)
        if signed:  # masked values of a few hundred bits: residues mod p suffice (see "Decryption at S")
            vals = self.bcp.mdecrypt_small(self._mk, pk, c, self.config.value_bits + self.config.kappa + 2, self.pool)
        else:
            vals = self.bcp.mdecrypt_residues(self._mk, pk, c, self.pool)
        if self.record_view:
            self.view.append((step, vals))
        return vals

    def _open_many(self, step: str, arrays: list[CipherArray]) -> list[list[int]]:
        """:meth:`_open` (signed) of several arrays in one mDec call per key (:mod:`~ray_vfl.crypto.two_server.bcp_batches`)."""
        jobs = [(self._key(c.key_id), c) for c in arrays]
        opened = mdecrypt_small_many(self.bcp, self._mk, jobs, self.config.value_bits + self.config.kappa + 2,
                                     self.pool)
        if self.record_view:
            self.view.extend((step, vals) for vals in opened)
        return opened

    def register_step(self, hs: list[int]) -> list[bytes]:
        """Learn public keys ``h`` (checked to lie in ``<g>``); returns their key ids."""
        if not isinstance(hs, (list, tuple)) or not all(isinstance(h, int) and not isinstance(h, bool) for h in hs):
            raise CryptoError("register_step takes a list of public keys h as ints")
        ids = []
        for h in hs:
            pk = BCPPublicKey(self._mk.params, int(h))
            key_logs(self._mk, pk)  # checks h in <g>, and caches a mod p, a mod q for mDec
            self.keys[pk.key_id] = pk
            ids.append(pk.key_id)
        return ids

    def switch_key_step(self, masked: list[CipherArray], target: list[bytes]) -> list[CipherArray]:
        """KeyProd / TransDec: decrypt each masked array, re-encrypt it under its target key."""
        if len(masked) != len(target):
            raise CryptoError(f"{len(masked)} arrays for {len(target)} target keys")
        out = []
        for c, t in zip(masked, target):
            vals = self._open("switch_key", c, signed=False)
            out.append(self.bcp._encrypt_residues(self._key(t), vals, tag_frac_bits(c.tag), self.pool))
        return out

    def mult_step(self, operands: list[CipherArray], pairs: list[tuple[int, int]],
                  keep: list[tuple[int, int]] = (), reuse: list[int] = (),
                  bits: list[int] | None = None) -> list[CipherArray]:
        """Mult: open every masked operand ``X = x + r`` once and return ``Enc(X_i X_j)`` for each pair
        ``(i, j)`` of indices into ``operands``, under the pair's key (an operand in several pairs, or on
        both sides of one, is sent and opened once). ``reuse`` names operands the previous Mult kept
        (by token); they follow ``operands`` in the index order. ``keep`` holds ``(index, token)``: keep
        that operand's opened value for the next Mult (and nothing longer). ``bits``: per operand of
        ``operands``, the bound ``b`` C declared (``|x| < 2^b``, mask of ``b + kappa`` bits; default
        ``l``); an opened value outside ``(-2^b, 2^(b + kappa) + 2^b)`` is refused."""
        top = self.config.value_bits
        bits = [top] * len(operands) if bits is None else list(bits)
        if len(bits) != len(operands) or any(type(b) is not int or not 1 <= b <= top for b in bits):
            raise CryptoError(f"mult_step: bits must hold one bound in [1, {top}] per operand")
        kept, self._kept = self._kept, {}
        if not all(type(t) is int and t in kept for t in reuse) or len(set(reuse)) != len(reuse):
            raise CryptoError("mult_step: reuse names an operand the previous Mult did not keep")
        n_new = len(operands)
        operands = list(operands) + [kept[t][0] for t in reuse]
        m = len(operands)
        if not all(isinstance(k, (tuple, list)) and len(k) == 2 and all(type(v) is int for v in k) and 0 <= k[0] < m
                   for k in keep):
            raise CryptoError(f"mult_step: keep must be (index, token) pairs with indices into the {m} operands")
        if not all(isinstance(p, (tuple, list)) and len(p) == 2 and all(type(i) is int and 0 <= i < m for i in p)
                   for p in pairs):
            raise CryptoError(f"mult_step: pairs must be (i, j) indices into the {m} operands")
        if sorted({i for p in pairs for i in p}) != list(range(m)):
            raise CryptoError("mult_step: every operand must be used by a pair")
        for i, j in pairs:
            x, y = operands[i], operands[j]
            if x.key_id != y.key_id or len(x) != len(y):
                raise CryptoError("mult_step: operand arrays must share key and length")
        opened = self._open_many("mult", operands[:n_new])
        kappa = self.config.kappa
        for b, vals in zip(bits, opened):
            lo, hi = -(1 << b), (1 << (b + kappa)) + (1 << b)
            if any(not lo < v < hi for v in vals):
                raise CryptoError(f"Mult input outside its bound |x| < 2^{b} (value_bits = {top}): its mask no "
                                  "longer hides it; refused")
        opened += [kept[t][1] for t in reuse]
        self._kept = {t: (operands[i], opened[i]) for i, t in keep}
        products = [[a * b for a, b in zip(opened[i], opened[j])] for i, j in pairs]
        fresh = encrypt_many(self.bcp, [(self._key(operands[i].key_id), p) for (i, _), p in zip(pairs, products)],
                             self.pool)
        return [self.bcp.with_scale(c, tag_frac_bits(operands[i].tag) + tag_frac_bits(operands[j].tag))
                for c, (i, j) in zip(fresh, pairs)]

    def lgt_step(self, v: CipherArray) -> CipherArray:
        """LGT: open the blinded ``v`` and return ``Enc([v > 0])`` under the same key."""
        vals = self._open("lgt", v, signed=True)
        if any(abs(x) >= self.config.lgt_bound for x in vals):
            raise CryptoError(f"LGT input outside |x|, |y| < 2^{self.config.value_bits} (value_bits): "
                              "the comparison would not be reliable; refused")
        return self.bcp._encrypt_residues(self._key(v.key_id), [int(x > 0) for x in vals], 0, self.pool)

    def trunc_step(self, masked: list[CipherArray], shifts: list[int]) -> list[CipherArray]:
        """Trunc: open ``X = x + r`` and return ``Enc(floor(X / 2^k))`` (scale lowered by ``k``)."""
        if len(masked) != len(shifts):
            raise CryptoError(f"trunc_step: {len(masked)} arrays for {len(shifts)} shifts")
        lo, hi = -(1 << self.config.value_bits), (1 << self.config.mask_bits) + (1 << self.config.value_bits)
        for c, k in zip(masked, shifts):
            frac = tag_frac_bits(c.tag)
            if isinstance(k, bool) or not isinstance(k, int) or not 0 < k <= frac:
                raise CryptoError(f"trunc_step: shift must be an int in [1, {frac}] (the array's scale), got {k!r}")
        opened = self._open_many("trunc", list(masked))
        if any(not lo < v < hi for vals in opened for v in vals):
            raise CryptoError(f"Trunc input outside |x| < 2^{self.config.value_bits} (value_bits): its "
                              "mask no longer hides it; refused")
        fresh = encrypt_many(self.bcp, [(self._key(c.key_id), [v >> k for v in vals])
                                        for c, k, vals in zip(masked, shifts, opened)], self.pool)
        return [self.bcp.with_scale(f, tag_frac_bits(c.tag) - k) for f, c, k in zip(fresh, masked, shifts)]


class LocalLink:
    """In-process C -> S link: one :meth:`ask` is one round trip; payloads and replies are pickled,
    so only plain values cross, and counted.

    Attributes
    ----------
    round_trips, bytes_to_s, bytes_to_c : int
    """

    def __init__(self, server_s: ServerS) -> None:
        self.server_s = server_s
        self.round_trips = 0
        self.bytes_to_s = 0
        self.bytes_to_c = 0

    def ask(self, step: Callable, *payload: Any) -> Any:
        request = pickle.dumps(payload, protocol=5)
        self.round_trips += 1
        self.bytes_to_s += len(request)
        reply = pickle.dumps(step(self.server_s, *pickle.loads(request)), protocol=5)
        self.bytes_to_c += len(reply)
        return pickle.loads(reply)
