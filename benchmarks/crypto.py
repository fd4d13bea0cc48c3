"""Throughput of the crypto backends against python-paillier, measured in one run.

Usage::

    python benchmarks/crypto.py            # key sizes 1024, 2048, 3072
    python benchmarks/crypto.py --quick    # 2048 only, smaller batches

Columns: ``phe`` is python-paillier used directly (``EncryptedNumber``
objects, ``pk.encrypt``, ``a + b``, ``a * k``, a dict-of-sums bucket loop),
``phe-be`` is our ``phe`` backend (the same library behind the CipherArray
interface), ``paillier`` is the fast gmpy2 backend, ``plain`` is numpy. The
last column is ``paillier / phe``. ``add (cold)`` runs on arrays just
unpickled (as received from Ray, so the byte -> integer decoding is paid);
``add`` runs on arrays made in-process. ``bucket_sum`` counts one
homomorphic addition per (row, feature) incidence, 33 bins per feature.
All timings are single process; decryption uses threads (gmpy2 releases
the GIL).
"""

from __future__ import annotations

import argparse
import pickle
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from phe import paillier as phe_paillier  # noqa: E402

from ray_vfl.crypto import get_backend  # noqa: E402
from ray_vfl.crypto.phe_backend import to_phe_keypair  # noqa: E402

OPS = ("encrypt", "decrypt", "add", "add (cold)", "mul_plain", "bucket_sum")
N_FEATURES, N_BINS = 4, 33


def _rate(fn, count: int, min_time: float = 0.3) -> float:
    """Operations per second of ``fn`` (which performs ``count`` operations)."""
    fn()  # warm caches (fixed-base tables, CRT constants)
    runs, start = 0, time.perf_counter()
    while True:
        fn()
        runs += 1
        elapsed = time.perf_counter() - start
        if elapsed >= min_time:
            return runs * count / elapsed


def bench_backend(name: str, key_bits: int, n: int, n_rows: int, keys=None) -> dict[str, float]:
    be = get_backend(name)
    pk, sk = keys if keys is not None else be.generate_keys(key_bits)
    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, n)
    k = rng.integers(1, 2**16, n)
    bkeys = rng.integers(0, N_BINS, (n_rows, N_FEATURES)) + np.arange(N_FEATURES) * N_BINS
    c = be.encrypt(pk, x)
    # phe and paillier share keys and byte layout: make the big input with the fast backend.
    maker = get_backend("paillier") if name == "phe" else be
    rows = maker.encrypt(pk, rng.uniform(-1, 1, n_rows))
    blob = pickle.dumps(c)

    def cold_add():
        a, b = pickle.loads(blob), pickle.loads(blob)
        be.add(pk, a, b)

    return {
        "encrypt": _rate(lambda: be.encrypt(pk, x), n),
        "decrypt": _rate(lambda: be.decrypt(sk, c), n),
        "add": _rate(lambda: be.add(pk, c, c), n),
        "add (cold)": _rate(cold_add, n),
        "mul_plain": _rate(lambda: be.mul_plain(pk, c, k), n),
        "bucket_sum": _rate(lambda: be.bucket_sum(pk, rows, bkeys, N_FEATURES * N_BINS), n_rows * N_FEATURES),
    }


def bench_phe_native(phe_pk, phe_sk, n: int, n_rows: int) -> dict[str, float]:
    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, n).tolist()
    k = rng.integers(1, 2**16, n).tolist()
    bkeys = (rng.integers(0, N_BINS, (n_rows, N_FEATURES)) + np.arange(N_FEATURES) * N_BINS).tolist()
    c = [phe_pk.encrypt(v, precision=2.0**-40) for v in x]
    rows = [c[i % n] for i in range(n_rows)]  # phe encryption is too slow to make n_rows fresh ones

    def bucket_sum():
        out = {}
        for ci, row in zip(rows, bkeys):
            for b in row:
                out[b] = out[b] + ci if b in out else ci
        return out

    add = _rate(lambda: [a + b for a, b in zip(c, c)], n)
    return {
        "encrypt": _rate(lambda: [phe_pk.encrypt(v, precision=2.0**-40) for v in x], n),
        "decrypt": _rate(lambda: [phe_sk.decrypt(e) for e in c], n),
        "add": add,
        "add (cold)": add,  # python-paillier has no byte format of its own
        "mul_plain": _rate(lambda: [a * b for a, b in zip(c, k)], n),
        "bucket_sum": _rate(bucket_sum, n_rows * N_FEATURES),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2048-bit keys only, smaller batches")
    args = parser.parse_args(argv)
    sizes = (2048,) if args.quick else (1024, 2048, 3072)
    n_slow, n_fast = (32, 256) if args.quick else (64, 1024)
    n_rows = 512 if args.quick else 2048  # same histogram for every backend: ~15 / ~60 rows per bin

    header = f"{'bits':>5} {'op':<11} {'plain':>12} {'phe':>9} {'phe-be':>9} {'paillier':>9} {'paillier/phe':>13}"
    print(header)
    print("-" * len(header))
    for bits in sizes:
        paillier_be = get_backend("paillier")
        pk, sk = paillier_be.generate_keys(bits)
        phe_pk, phe_sk = to_phe_keypair(pk, sk)
        res = {
            "plain": bench_backend("plain", bits, n_fast, n_rows),
            "phe": bench_phe_native(phe_pk, phe_sk, n_slow, n_rows),
            "phe-be": bench_backend("phe", bits, n_slow, n_rows, keys=(pk, sk)),
            "paillier": bench_backend("paillier", bits, n_fast, n_rows, keys=(pk, sk)),
        }
        for op in OPS:
            r = {k: v[op] for k, v in res.items()}
            print(f"{bits:>5} {op:<11} {r['plain']:>12,.0f} {r['phe']:>9,.0f} {r['phe-be']:>9,.0f} "
                  f"{r['paillier']:>9,.0f} {r['paillier'] / r['phe']:>12.1f}x", flush=True)
    print("\nops/second, single process; bucket_sum counts (row, feature) additions")


if __name__ == "__main__":
    main()
