"""Vectorised BCP on arrays: :class:`BCP` encrypts, decrypts and computes on :class:`CipherArray` values.

A BCP ciphertext array is a :class:`~ray_vfl.crypto.he.base.CipherArray` whose ``data`` is a ``uint8``
matrix ``(n, 2 w)``: row ``j`` holds ``A_j`` then ``B_j``, each ``w = bytes(N^2)`` big-endian bytes
(512 at 2048 bits). Its ``key_id`` is the fingerprint of ``(N, g, h)``; its tag ``"bcp:f<k>"`` says
that the plaintext integer is a fixed-point value scaled by ``2^k`` (``k = 0``: an integer). Such an
array pickles as the byte matrix, key id and tag only, and travels zero-copy through Ray.

Plaintexts are signed integers in the centred range of ``Z_N``: ``|m| <= N // 3`` on encryption and
on decryption (the middle third is the overflow band of :func:`~ray_vfl.crypto.he.fixed_point.center`,
decoding there raises :class:`~ray_vfl.errors.OverflowEncodingError`). Laws (``tests/test_bcp.py``)::

    dec(add(enc(a), enc(b))) == a + b        dec(mul_const(enc(a), k)) == k a
    dec(neg(enc(a))) == -a                   mdec(enc_pk_i(m)) == m  for every user key pk_i

Encryption, decryption, mDec and ``mul_const`` cut arrays over a task pool (``pool``: anything with
``chunks(n)`` and ``map(fn, chunks, *shared)``, e.g. :class:`ray_vfl.runtime.task_pool.TaskPool`)
once they hold two tasks' worth of work (:func:`min_chunk`: about 50 ms of exponentiations per task);
smaller arrays, or no pool, run here, with gmpy2's threaded list exponentiation for decryption.
Every call counts its values in :func:`op_counts` (per process), from which benchmarks compute the
crypto floor of a protocol run.

Example
-------
>>> import warnings; warnings.simplefilter("ignore")
>>> import numpy as np
>>> from ray_vfl.crypto.two_server.bcp import setup, keygen
>>> params, mk = setup(1024, allow_weak=True)
>>> pk, sk = keygen(params)
>>> bcp = BCP()
>>> c = bcp.add(pk, bcp.encrypt(pk, np.array([0.5, -2.0])), bcp.encrypt(pk, np.array([0.25, 1.0])))
>>> bcp.decrypt(sk, c), bcp.mdecrypt(mk, pk, c)
(array([ 0.75, -1.  ]), array([ 0.75, -1.  ]))
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

import gmpy2
import numpy as np
from gmpy2 import mpz

from ray_vfl.crypto.he.arrays import as_int_list
from ray_vfl.crypto.he.ciphertexts import CipherArray
from ray_vfl.runtime.timeline import timed
from ray_vfl.crypto.two_server.bcp import (
    BCPMasterKey,
    BCPPublicKey,
    BCPSecretKey,
    raw_decrypt,
    raw_encrypt,
)
from ray_vfl.crypto.two_server.bcp_master import master_context
from ray_vfl.crypto.he.fixed_point import FixedPoint, center
from ray_vfl.errors import CryptoError

__all__ = ["BCP", "bcp_tag", "check", "int_list", "key_logs", "op_counts", "tag_frac_bits"]

_OPS: Counter[str] = Counter()  # this process's BCP operations, by kind (values; exponent bits for mul_const)


def op_counts() -> dict[str, int]:
    """This process's BCP operations so far, by kind: ``encrypt``, ``encrypt_hiding``, ``decrypt``,
    ``mdec``, ``mdec_small``, ``mul_const`` (values) and ``mul_const_bits`` (their exponents' bits),
    ``add``, ``neg``. Benchmarks multiply them by single-core unit costs: the crypto floor."""
    return dict(_OPS)


def min_chunk(pk: BCPPublicKey) -> int:
    """Values per pool task: about 50 ms of exponentiations (32 at 2048 bits, 256 at 1024), below
    which a task's overhead (scheduling, a few KB of arguments) is no longer small."""
    return max(16, 32 * (2048 // max(1, pk.params.key_bits)) ** 3)


def bcp_tag(frac_bits: int) -> str:
    """The tag of ciphertexts of fixed-point values scaled by ``2**frac_bits``."""
    return f"bcp:f{int(frac_bits)}"


def tag_frac_bits(tag: str) -> int:
    """Inverse of :func:`bcp_tag`; raises :class:`CryptoError` on another scheme's tag."""
    if not isinstance(tag, str) or not tag.startswith("bcp:f") or not tag[5:].isdigit():
        raise CryptoError(f"not a BCP ciphertext array (tag {tag!r}, expected 'bcp:f<frac_bits>')")
    return int(tag[5:])


# -- byte layout ------------------------------------------------------------------------------------
def wrap(pk: BCPPublicKey, big_a: list, big_b: list, frac_bits: int) -> CipherArray:
    """``(A, B)`` integer lists as a CipherArray ``(n, 2 w)`` of big-endian bytes."""
    w = pk.params.width
    buf = b"".join([a.to_bytes(w, "big") + b.to_bytes(w, "big") for a, b in zip(big_a, big_b)])
    data = np.frombuffer(buf, dtype=np.uint8).reshape(len(big_a), 2 * w)
    return CipherArray(data, pk.key_id, bcp_tag(frac_bits), ("bcp", (big_a, big_b)))


def unwrap(pk: BCPPublicKey, c: CipherArray) -> tuple[list[mpz], list[mpz]]:
    """The ``(A, B)`` integer lists of ``c`` after checking its key, tag and layout."""
    check(pk, c)
    if c._ints is not None and c._ints[0] == "bcp":
        return c._ints[1]
    w = pk.params.width
    raw = c.data.tobytes()
    frm = mpz.from_bytes
    big_a = [frm(raw[i:i + w]) for i in range(0, len(raw), 2 * w)]
    big_b = [frm(raw[i + w:i + 2 * w]) for i in range(0, len(raw), 2 * w)]
    n2 = pk.params.nsquare
    for x in (big_a, big_b):
        if any(v == 0 or v >= n2 for v in x):
            raise CryptoError("malformed BCP ciphertext: a component is 0 or not below N^2")
    object.__setattr__(c, "_ints", ("bcp", (big_a, big_b)))
    return big_a, big_b


def check(pk: BCPPublicKey, c: Any) -> int:
    """Check that ``c`` is a BCP array under ``pk``; returns its ``frac_bits``."""
    if not isinstance(pk, BCPPublicKey):
        raise CryptoError(f"expected a BCPPublicKey, got {type(pk).__name__}")
    if not isinstance(c, CipherArray):
        raise CryptoError(f"expected a CipherArray of BCP ciphertexts, got {type(c).__name__}")
    frac = tag_frac_bits(c.tag)
    if c.key_id != pk.key_id:
        raise CryptoError(f"ciphertexts belong to key {c.key_id.hex()[:8]}.., not to key {pk.key_id.hex()[:8]}..: "
                          "keys must not be mixed (move them with the two-server KeyProd / TransDec)")
    w = pk.params.width
    if c.data.dtype != np.uint8 or c.data.ndim != 2 or c.data.shape[1] != 2 * w:
        raise CryptoError(f"malformed BCP ciphertext array: expected uint8 (n, {2 * w}), "
                          f"got {c.data.dtype} {c.data.shape}")
    return frac


def int_list(k: Any, n: int) -> list[int]:
    """Integers of any size, from a list/tuple of ints (kept exact: numpy would turn a mix of large
    positive and negative ints into floats) or an integer numpy array, of length ``n``."""
    if isinstance(k, (list, tuple)):
        if len(k) != n:
            raise CryptoError(f"expected {n} integers, got {len(k)}")
        if not all(isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_)) for v in k):
            raise CryptoError("expected integers only (Python int or numpy integer)")
        return [int(v) for v in k]
    return as_int_list(k, n)


def _enc_chunk(ms: list[int], pk: BCPPublicKey, frac_bits: int, hiding: bool) -> np.ndarray:
    return wrap(pk, *raw_encrypt(pk, ms, hiding), frac_bits).data


def _dec_chunk(data: np.ndarray, sk: BCPSecretKey, frac_bits: int) -> list[int]:
    c = CipherArray(data, sk.key_id, bcp_tag(frac_bits))
    return [int(v) for v in raw_decrypt(sk, *unwrap(sk.public_key, c))]


def _mdec_chunk(data: np.ndarray, mk: BCPMasterKey, pk: BCPPublicKey, frac_bits: int, small: bool = False) -> list[int]:
    ctx = master_context(mk)
    c = CipherArray(data, pk.key_id, bcp_tag(frac_bits))
    return [int(v) for v in (ctx.decrypt_small if small else ctx.decrypt)(key_logs(mk, pk), *unwrap(pk, c))]


def _mul_const_here(pk: BCPPublicKey, c: CipherArray, ks: list[int], out_frac: int) -> CipherArray:
    (a1, b1), n2 = unwrap(pk, c), mpz(pk.params.nsquare)
    pw = gmpy2.powmod  # a negative k inverts first: the cost follows |k|
    return wrap(pk, [pw(x, e, n2) for x, e in zip(a1, ks)], [pw(x, e, n2) for x, e in zip(b1, ks)], out_frac)


def _mulc_chunk(job: tuple[np.ndarray, list[int]], pk: BCPPublicKey, frac_bits: int) -> np.ndarray:
    data, ks = job
    return _mul_const_here(pk, CipherArray(data, pk.key_id, bcp_tag(frac_bits)), ks, frac_bits).data


def key_logs(mk: BCPMasterKey, pk: BCPPublicKey) -> tuple:
    """``(a mod p, a mod q)`` of ``pk`` (cached in the master key's context); raises
    :class:`CryptoError` if ``pk`` is of another Setup or not an element of ``<g>``."""
    if pk.params != mk.params:
        raise CryptoError("this ciphertext's key belongs to another BCP Setup: the master key cannot decrypt it")
    ctx = master_context(mk)
    if pk.key_id not in ctx.logs:
        ctx.logs[pk.key_id] = ctx.key_logs(pk.h)
    return ctx.logs[pk.key_id]


def _pooled(pool: Any, pk: BCPPublicKey, n: int) -> bool:
    """Whether ``n`` values are worth cutting over ``pool`` (two tasks' worth at least)."""
    return pool is not None and getattr(pool, "workers", 2) > 1 and n >= 2 * min_chunk(pk)


def _run(pool: Any, pk: BCPPublicKey, fn: Any, items: Any, n: int, *shared: Any) -> list:
    """``fn(items[s], *shared)`` over the pool's chunks, results in order (callers check :func:`_pooled`)."""
    return pool.map(fn, [items[s] for s in pool.chunks(n, min_chunk=min_chunk(pk))], *shared)


class BCP:
    """The BCP scheme on arrays, with one fixed-point encoding for floats.

    Parameters
    ----------
    frac_bits : int, default 40
        Fractional bits of :meth:`encrypt` (floats); the integer API takes its own scale.
    """

    def __init__(self, frac_bits: int = 40) -> None:
        self.fixed_point = FixedPoint(frac_bits)

    def __repr__(self) -> str:
        return f"BCP(frac_bits={self.fixed_point.frac_bits})"

    # -- encryption -----------------------------------------------------------------------------
    def encrypt(self, pk: BCPPublicKey, x: np.ndarray, pool: Any = None) -> CipherArray:
        """Encrypt floats as fixed-point integers scaled by ``2**frac_bits`` (tag ``bcp:f<frac_bits>``)."""
        self._pk(pk)
        ms = self.fixed_point.to_ints(np.asarray(x, dtype=np.float64).ravel(), max_abs_int=pk.params.n // 3)
        return self.encrypt_ints(pk, ms, self.fixed_point.frac_bits, pool)

    @timed("crypto")
    def encrypt_ints(self, pk: BCPPublicKey, ms: Sequence[int] | np.ndarray, frac_bits: int = 0,
                     pool: Any = None) -> CipherArray:
        """Encrypt signed integers ``|m| <= N // 3`` (``frac_bits``: the scale they carry, for the tag)."""
        self._pk(pk)
        ints = int_list(ms, len(ms))
        bound = pk.params.n // 3
        if ints and max(abs(min(ints)), abs(max(ints))) > bound:
            raise CryptoError(f"plaintext integers must satisfy |m| <= N // 3 (a {pk.key_bits}-bit key), got larger")
        return self._encrypt_residues(pk, ints, frac_bits, pool)

    @timed("crypto")
    def _encrypt_residues(self, pk: BCPPublicKey, ms: list[int], frac_bits: int, pool: Any = None,
                          hiding: bool = False) -> CipherArray:
        """Encrypt integers taken mod N, unchecked (the two-server masks are uniform in Z_N);
        ``hiding``: full-length randomness, for what the master-key holder will open."""
        _OPS["encrypt_hiding" if hiding else "encrypt"] += len(ms)
        if not _pooled(pool, pk, len(ms)):
            return wrap(pk, *raw_encrypt(pk, ms, hiding), frac_bits)
        parts = _run(pool, pk, _enc_chunk, ms, len(ms), pk, frac_bits, hiding)
        return CipherArray(np.concatenate(parts), pk.key_id, bcp_tag(frac_bits))

    @timed("crypto")
    def encrypt_zeros(self, pk: BCPPublicKey, count: int, frac_bits: int = 0) -> CipherArray:
        """``count`` fresh encryptions of 0 (for re-randomising)."""
        return self._encrypt_residues(pk, [0] * int(count), frac_bits)

    # -- decryption -----------------------------------------------------------------------------
    def decrypt(self, sk: BCPSecretKey, c: CipherArray, pool: Any = None) -> np.ndarray:
        """Decrypt with the user key and decode by the array's scale (floats)."""
        frac = check(self._sk(sk).public_key, c)
        return np.ldexp(self._floats(self.decrypt_ints(sk, c, pool)), -frac)

    @timed("crypto")
    def decrypt_ints(self, sk: BCPSecretKey, c: CipherArray, pool: Any = None) -> list[int]:
        """Signed plaintext integers (centred; the middle third of ``Z_N`` raises)."""
        return center(self.decrypt_residues(sk, c, pool), sk.public_key.params.n)

    @timed("crypto")
    def decrypt_residues(self, sk: BCPSecretKey, c: CipherArray, pool: Any = None) -> list[int]:
        """Plaintexts as residues in ``[0, N)``."""
        frac = check(self._sk(sk).public_key, c)
        _OPS["decrypt"] += len(c)
        if not _pooled(pool, sk.public_key, len(c)):
            return [int(v) for v in raw_decrypt(sk, *unwrap(sk.public_key, c))]
        return [v for part in _run(pool, sk.public_key, _dec_chunk, c.data, len(c), sk, frac) for v in part]

    def mdecrypt(self, mk: BCPMasterKey, pk: BCPPublicKey, c: CipherArray, pool: Any = None) -> np.ndarray:
        """mDec: decrypt a ciphertext under any user key ``pk`` of the Setup with the master key."""
        frac = check(pk, c)
        return np.ldexp(self._floats(self.mdecrypt_ints(mk, pk, c, pool)), -frac)

    @timed("crypto")
    def mdecrypt_ints(self, mk: BCPMasterKey, pk: BCPPublicKey, c: CipherArray, pool: Any = None) -> list[int]:
        """mDec to signed integers (centred)."""
        return center(self.mdecrypt_residues(mk, pk, c, pool), pk.params.n)

    @timed("crypto")
    def mdecrypt_residues(self, mk: BCPMasterKey, pk: BCPPublicKey, c: CipherArray, pool: Any = None) -> list[int]:
        """mDec to residues in ``[0, N)``.

        Raises
        ------
        CryptoError
            If ``pk`` is not of ``mk``'s Setup, or ``c`` is not under ``pk``.
        """
        if not isinstance(mk, BCPMasterKey):
            raise CryptoError(f"mDec needs a BCPMasterKey, got {type(mk).__name__}")
        frac = check(pk, c)
        logs = key_logs(mk, pk)
        _OPS["mdec"] += len(c)
        if not _pooled(pool, pk, len(c)):
            return [int(v) for v in master_context(mk).decrypt(logs, *unwrap(pk, c))]
        return [v for part in _run(pool, pk, _mdec_chunk, c.data, len(c), mk, pk, frac) for v in part]

    @timed("crypto")
    def mdecrypt_small(self, mk: BCPMasterKey, pk: BCPPublicKey, c: CipherArray, bound_bits: int,
                       pool: Any = None) -> list[int]:
        """mDec of signed plaintexts the caller knows to satisfy ``|m| < 2^bound_bits``: from their
        residues mod ``p`` alone (half of mDec's exponentiations) when ``bound_bits`` is below
        ``|N| / 2 - 2``, else the full :meth:`mdecrypt_ints`. A plaintext outside the stated bound
        comes out wrong (reduced mod ``p``), so callers range-check what they get."""
        if not isinstance(mk, BCPMasterKey):
            raise CryptoError(f"mDec needs a BCPMasterKey, got {type(mk).__name__}")
        frac = check(pk, c)
        ctx = master_context(mk)
        if int(bound_bits) >= ctx.small_bound_bits():
            return self.mdecrypt_ints(mk, pk, c, pool)
        logs = key_logs(mk, pk)
        _OPS["mdec_small"] += len(c)
        if not _pooled(pool, pk, len(c)):
            return [int(v) for v in ctx.decrypt_small(logs, *unwrap(pk, c))]
        return [v for part in _run(pool, pk, _mdec_chunk, c.data, len(c), mk, pk, frac, True) for v in part]

    # -- homomorphic operations (no key material beyond the public key) ---------------------------
    @timed("crypto")
    def add(self, pk: BCPPublicKey, a: CipherArray, b: CipherArray) -> CipherArray:
        """``Enc(x + y)``: component-wise products. Both arrays must carry the same scale."""
        fa, fb = check(pk, a), check(pk, b)
        if fa != fb or len(a) != len(b):
            raise CryptoError(f"add needs arrays of equal length and scale, got {len(a)} (f{fa}) and {len(b)} (f{fb})")
        (a1, b1), (a2, b2), n2 = unwrap(pk, a), unwrap(pk, b), mpz(pk.params.nsquare)
        _OPS["add"] += len(a)
        return wrap(pk, [x * y % n2 for x, y in zip(a1, a2)], [x * y % n2 for x, y in zip(b1, b2)], fa)

    @timed("crypto")
    def neg(self, pk: BCPPublicKey, c: CipherArray) -> CipherArray:
        """``Enc(-x)``: component-wise inverses."""
        frac = check(pk, c)
        (a1, b1), n2 = unwrap(pk, c), mpz(pk.params.nsquare)
        inv = gmpy2.invert
        _OPS["neg"] += len(c)
        return wrap(pk, [inv(x, n2) for x in a1], [inv(x, n2) for x in b1], frac)

    @timed("crypto")
    def sub(self, pk: BCPPublicKey, a: CipherArray, b: CipherArray) -> CipherArray:
        """``Enc(x - y)``."""
        return self.add(pk, a, self.neg(pk, b))

    @timed("crypto")
    def mul_const(self, pk: BCPPublicKey, c: CipherArray, k: np.ndarray | Sequence[int],
                  frac_bits: int = 0, pool: Any = None) -> CipherArray:
        """``Enc(k x)`` for integers ``k`` (one per value; Exp in SSXGB); the result's scale is the
        array's plus ``frac_bits`` (the scale ``k`` carries). Cut over ``pool`` when large."""
        frac = check(pk, c)
        ks = int_list(k, len(c))
        _OPS["mul_const"] += len(ks)
        _OPS["mul_const_bits"] += sum(v.bit_length() for v in ks)
        out_frac = frac + int(frac_bits)
        if not _pooled(pool, pk, len(ks)):
            return _mul_const_here(pk, c, ks, out_frac)
        jobs = [(c.data[s], ks[s]) for s in pool.chunks(len(ks), min_chunk=min_chunk(pk))]
        return CipherArray(np.concatenate(pool.map(_mulc_chunk, jobs, pk, frac)), pk.key_id, bcp_tag(out_frac))

    @timed("crypto")
    def rerandomize(self, pk: BCPPublicKey, c: CipherArray) -> CipherArray:
        """The same plaintexts under fresh randomness (multiplies by encryptions of 0)."""
        frac = check(pk, c)
        return self.add(pk, c, self.encrypt_zeros(pk, len(c), frac))

    def with_scale(self, c: CipherArray, frac_bits: int) -> CipherArray:
        """The same ciphertexts relabelled as carrying scale ``2**frac_bits`` (no computation)."""
        return CipherArray(c.data, c.key_id, bcp_tag(frac_bits), c._ints)

    def take(self, c: CipherArray, idx: np.ndarray | slice) -> CipherArray:
        """Rows ``idx`` of ``c`` (same key and tag)."""
        data = c.data[idx]
        if data.ndim == 1:
            data = data[None, :]
        return CipherArray(np.ascontiguousarray(data), c.key_id, c.tag)

    def concat(self, arrays: Sequence[CipherArray]) -> CipherArray:
        """One array of several under the same key and tag."""
        if not arrays:
            raise CryptoError("concat needs at least one array")
        first = arrays[0]
        if any(a.key_id != first.key_id or a.tag != first.tag for a in arrays):
            raise CryptoError("concat needs arrays under one key and with one scale")
        return CipherArray(np.concatenate([a.data for a in arrays]), first.key_id, first.tag)

    # -- helpers ----------------------------------------------------------------------------------
    @staticmethod
    def _pk(pk: Any) -> BCPPublicKey:
        if not isinstance(pk, BCPPublicKey):
            raise CryptoError(f"expected a BCPPublicKey, got {type(pk).__name__}")
        return pk

    @staticmethod
    def _sk(sk: Any) -> BCPSecretKey:
        if not isinstance(sk, BCPSecretKey):
            raise CryptoError(f"expected a BCPSecretKey, got {type(sk).__name__}")
        return sk

    def _floats(self, ints: list[int]) -> np.ndarray:
        # float(int) is correctly rounded; the caller's ldexp by the scale is exact
        return np.fromiter((float(v) for v in ints), dtype=np.float64, count=len(ints))
