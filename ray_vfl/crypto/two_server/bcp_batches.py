"""Several BCP arrays' work in one call: one task-pool round for all of them instead of one per array.

The two-server protocols handle a few arrays per round trip (Mult: two operands per product, several
products); each pooled call costs a scheduling round (tasks, shared arguments), so the arrays under
one key are concatenated, processed in one :class:`~ray_vfl.crypto.two_server.bcp_arrays.BCP` call (cut over
the pool when large) and split again, in the order given. Results carry scale 0; callers relabel them
(:meth:`~ray_vfl.crypto.two_server.bcp_arrays.BCP.with_scale`), since a ciphertext's scale is only its tag.

Example
-------
>>> import warnings; warnings.simplefilter("ignore")
>>> from ray_vfl.crypto.two_server.bcp import setup, keygen
>>> params, mk = setup(1024, allow_weak=True)
>>> pk, sk = keygen(params)
>>> bcp = BCP()
>>> a, b = encrypt_many(bcp, [(pk, [1, 2]), (pk, [-3])])
>>> [bcp.decrypt_ints(sk, c) for c in mul_const_many(bcp, [(pk, a, [5, 6]), (pk, b, [7])])]
[[5, 12], [-21]]
>>> mdecrypt_small_many(bcp, mk, [(pk, a), (pk, b)], 8)
[[1, 2], [-3]]
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ray_vfl.crypto.two_server.bcp import BCPMasterKey, BCPPublicKey
from ray_vfl.crypto.two_server.bcp_arrays import BCP
from ray_vfl.crypto.he.ciphertexts import CipherArray

__all__ = ["encrypt_many", "mdecrypt_small_many", "mul_const_many"]


def _by_key(keys: Sequence[BCPPublicKey], sizes: Sequence[int], run: Callable[[BCPPublicKey, list[int]], Any],
            cut: Callable[[Any, int, int], Any]) -> list:
    """``run(pk, positions)`` once per key over the jobs under it, ``cut(result, start, stop)`` back per job."""
    out: list = [None] * len(keys)
    groups: dict[bytes, list[int]] = {}
    for i, pk in enumerate(keys):
        groups.setdefault(pk.key_id, []).append(i)
    for positions in groups.values():
        whole = run(keys[positions[0]], positions)
        start = 0
        for i in positions:
            out[i] = cut(whole, start, start + sizes[i])
            start += sizes[i]
    return out


def _take(bcp: BCP) -> Callable[[CipherArray, int, int], CipherArray]:
    return lambda c, a, b: bcp.take(c, slice(a, b))


def encrypt_many(bcp: BCP, jobs: Sequence[tuple[BCPPublicKey, list[int]]], pool: Any = None,
                 hiding: bool = False) -> list[CipherArray]:
    """Fresh encryptions (scale 0) of each job's integers (taken mod N) under its key."""
    keys, ints = [pk for pk, _ in jobs], [list(m) for _, m in jobs]
    return _by_key(keys, [len(m) for m in ints],
                   lambda pk, pos: bcp._encrypt_residues(pk, [v for i in pos for v in ints[i]], 0, pool, hiding),
                   _take(bcp))


def mul_const_many(bcp: BCP, jobs: Sequence[tuple[BCPPublicKey, CipherArray, list[int]]],
                   pool: Any = None) -> list[CipherArray]:
    """``Enc(k x)`` (scale 0) for each job's array and integers."""
    keys = [pk for pk, _, _ in jobs]

    def run(pk: BCPPublicKey, pos: list[int]) -> CipherArray:
        joined = bcp.concat([bcp.with_scale(jobs[i][1], 0) for i in pos]) if len(pos) > 1 else \
            bcp.with_scale(jobs[pos[0]][1], 0)
        return bcp.mul_const(pk, joined, [int(v) for i in pos for v in jobs[i][2]], 0, pool)

    return _by_key(keys, [len(c) for _, c, _ in jobs], run, _take(bcp))


def mdecrypt_small_many(bcp: BCP, mk: BCPMasterKey, jobs: Sequence[tuple[BCPPublicKey, CipherArray]],
                        bound_bits: int, pool: Any = None) -> list[list[int]]:
    """:meth:`~ray_vfl.crypto.two_server.bcp_arrays.BCP.mdecrypt_small` of each job's array, one call per key."""
    keys = [pk for pk, _ in jobs]

    def run(pk: BCPPublicKey, pos: list[int]) -> list[int]:
        joined = bcp.concat([bcp.with_scale(jobs[i][1], 0) for i in pos]) if len(pos) > 1 else jobs[pos[0]][1]
        return bcp.mdecrypt_small(mk, pk, joined, bound_bits, pool)

    return _by_key(keys, [len(c) for _, c in jobs], run, lambda v, a, b: v[a:b])

