"""Throughput of the crypto backends against python-paillier, measured in one run.

Usage::

    python benchmarks/crypto.py            # key sizes 1024, 2048, 3072
    python benchmarks/crypto.py --quick    # 2048 only, smaller batches

Table 1 columns: ``phe`` is python-paillier used directly (``EncryptedNumber``
objects, ``pk.encrypt``, ``a + b``, ``a * k``, a dict-of-sums bucket loop),
``phe-be`` is our ``phe`` backend (the same library behind the CipherArray
interface), ``paillier`` is the fast gmpy2 backend, ``ou`` the
Okamoto-Uchiyama backend, ``plain`` is numpy. The last column is
``paillier / phe``. ``add (cold)`` runs on arrays just
unpickled (as received from Ray, so the byte -> integer decoding is paid);
``add`` runs on arrays made in-process. ``bucket_sum`` counts one
homomorphic addition per (row, feature) incidence, 33 bins per feature.
All timings are single process; decryption and compression use threads
(gmpy2 releases the GIL). Every rate is the best of 3 repeats.

Table 2 (cipher compression): entries per ciphertext, the passive party's
cost of ``compress_gh`` per entry, the active party's ``decrypt_gh`` cost per
entry without and with compression, and what a tree of 10,000 histogram
entries costs the active party in decryptions and seconds.

Table 3 (key-owner encryption, ``paillier``): ``encrypt_gh(pk, ...)``
against ``encrypt_gh(sk, ...)`` (CRT), rows per second.

Table 4 (plain ``bucket_sum``, 19,200 rows x 23 features, 8 nodes): the
scipy scatter-add fast path (all keys >= 0) against the general masking
path (one key is -1).

Table 5 (only when SecretFlow's ``sf-heu`` is installed: ``pip install -e ".[heu]"``):
HEU's own OU (``heu.numpy``, its own keys, one thread) next to our
``ou`` backend, and the cost of one encryption mask ``H^r`` with our fixed-base
table at HEU's exponent length and at ours. HEU draws ``r`` with 110 bits at
2048-bit keys (``kRandomBits2048`` in its source); ``ray_vfl`` draws 224 bits
(twice the security level): a kangaroo search over an exponent interval of
``2^k`` takes about ``2^(k/2)`` group operations, so 110 bits give
encryptions about 55-bit semantic security against it.
"""

from __future__ import annotations

import argparse
import pickle
import secrets
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ray_vfl.crypto import get_backend  # noqa: E402
from ray_vfl.crypto.he.phe_backend import to_phe_keypair  # noqa: E402

OPS = ("encrypt", "decrypt", "add", "add (cold)", "mul_plain", "bucket_sum")
N_FEATURES, N_BINS = 4, 33
TREE_ENTRIES = 10_000  # histogram entries one tree sends to the active party (measured protocol)


def _rate(fn, count: int, min_time: float = 0.3, repeats: int = 3) -> float:
    """Operations per second of ``fn`` (which performs ``count`` operations): best of ``repeats``."""
    fn()  # warm caches (fixed-base tables, CRT constants)
    best = 0.0
    for _ in range(repeats):
        runs, start = 0, time.perf_counter()
        while True:
            fn()
            runs += 1
            elapsed = time.perf_counter() - start
            if elapsed >= min_time / repeats:
                break
        best = max(best, runs * count / elapsed)
    return best


def bench_backend(name: str, key_bits: int, n: int, n_rows: int, keys=None) -> dict[str, float]:
    be = get_backend(name)
    pk, sk = keys if keys is not None else be.generate_keys(key_bits, allow_weak=True)
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


def bench_compression(name: str, key_bits: int, keys) -> dict[str, float]:
    be = get_backend(name)
    pk, sk = keys
    per = be.slots_per_ciphertext(pk)
    n = max(4 * per, 24)
    rng = np.random.default_rng(0)
    c = be.encrypt_gh(pk, rng.normal(size=n), rng.random(n))
    z = be.compress_gh(pk, c)
    dec = 1 / _rate(lambda: be.decrypt_gh(sk, c), n)
    dec_z = 1 / _rate(lambda: be.decrypt_gh(sk, z), n)
    return {
        "per": per,
        "compress": 1 / _rate(lambda: be.compress_gh(pk, c), n),
        "decrypt": dec,
        "decrypt_z": dec_z,
        "tree_cts": -(-TREE_ENTRIES // per),
        "tree_s": TREE_ENTRIES * dec,
        "tree_s_z": TREE_ENTRIES * dec_z,
    }


def bench_owner_encryption(name: str, keys, n: int) -> tuple[float, float, float, float]:
    """Rows/s: public-key encryption, owner (CRT) encryption, making masks as the owner, and
    encrypting with masks made ahead of time (what remains on the protocol's critical path)."""
    be = get_backend(name)
    pk, sk = keys
    rng = np.random.default_rng(0)
    g, h = rng.normal(size=n), rng.random(n)
    masks = be.make_masks(sk, n)
    return (_rate(lambda: be.encrypt_gh(pk, g, h), n), _rate(lambda: be.encrypt_gh(sk, g, h), n),
            _rate(lambda: be.make_masks(sk, n), n), _rate(lambda: be.encrypt_gh(sk, g, h, masks=masks), n))


def bench_plain_bucket_sum() -> tuple[float, float]:
    be = get_backend("plain")
    pk, _ = be.generate_keys()
    rng = np.random.default_rng(0)
    rows, feats, nodes = 19_200, 23, 8
    keys = rng.integers(0, N_BINS, (rows, feats)) + np.arange(feats) * N_BINS
    keys += (rng.integers(0, nodes, rows) * feats * N_BINS)[:, None]
    masked = keys.copy()
    masked[0, 0] = -1  # one skipped key forces the general path
    gh = be.encrypt_gh(pk, rng.normal(size=rows), rng.random(rows))
    nb = nodes * feats * N_BINS
    fast = _rate(lambda: be.bucket_sum(pk, gh, keys, nb), 1, min_time=1.0, repeats=5)
    slow = _rate(lambda: be.bucket_sum(pk, gh, masked, nb), 1, min_time=1.0, repeats=5)
    return 1e3 / fast, 1e3 / slow


def bench_heu(bits: int, n: int, n_rows: int) -> dict[str, float] | None:
    """SecretFlow HEU's OU through ``heu.numpy`` (ops/second, one thread), or None without sf-heu."""
    try:
        from heu import numpy as hnp
        from heu import phe
    except ImportError:
        return None
    kit = hnp.setup(phe.SchemaType.OU, bits)
    enc, ev, dec = kit.encryptor(), kit.evaluator(), kit.decryptor()
    coder = kit.integer_encoder(scale=1)
    rng = np.random.default_rng(0)
    pts = kit.array(rng.integers(-(2**40), 2**40, (n, 1)), coder)
    ks = kit.array(rng.integers(1, 2**16, (n, 1)), coder)
    c = enc.encrypt(pts)
    rows = enc.encrypt(kit.array(rng.integers(-(2**40), 2**40, (n_rows, 1)), coder))
    order = np.ascontiguousarray(rng.integers(0, N_BINS, (n_rows, N_FEATURES)), dtype=np.int8)
    everyone = np.ones((1, n_rows), dtype=np.int8)
    blob = c.serialize()
    return {
        "encrypt": _rate(lambda: enc.encrypt(pts), n),
        "decrypt": _rate(lambda: dec.decrypt(c), n),
        "add": _rate(lambda: ev.add(c, c), n),
        "add (cold)": _rate(lambda: ev.add(hnp.CiphertextArray.load_from(blob), hnp.CiphertextArray.load_from(blob)), n),
        "mul_plain": _rate(lambda: ev.mul(c, ks), n),
        "bucket_sum": _rate(lambda: ev.feature_wise_bucket_sum(rows, everyone, order, N_BINS, False), n_rows * N_FEATURES),
    }


# HEU's OU random exponent lengths (``kRandomBits1024/2048/3072`` in its source), in bits
HEU_RANDOM_BITS = {1024: 80, 2048: 110, 3072: 128}


def mask_costs(keys, n: int) -> tuple[int, float, int, float]:
    """Microseconds per ``H^r`` with our OU fixed-base table, for ``r`` of HEU's length (rounded up
    to whole bytes) and of ours: ``(heu bits, heu us, our bits, our us)``."""
    from ray_vfl.crypto.he.gmp import FixedBase
    from ray_vfl.crypto.he.paillier import short_exponent_bits

    pk = keys[0]
    out = []
    for bits in (HEU_RANDOM_BITS[pk.key_bits], short_exponent_bits(pk.key_bits)):
        width = -(-bits // 8)
        table = FixedBase(pk.h, pk.n, width)
        out += [8 * width, 1e6 / _rate(lambda: table.pow_bytes(secrets.token_bytes(width * n), width), n)]
    return tuple(out)


def print_heu(sizes, all_keys, n_fast: int, n_rows: int) -> None:
    """Table 5: sf-heu's OU against ours, when sf-heu is installed."""
    from ray_vfl.crypto.he.gmp import set_threads

    rows = []
    threads = set_threads(1)  # our decryption and compression also on one thread, as HEU's here
    try:
        for bits in sizes:
            try:
                heu = bench_heu(bits, n_fast, n_rows)
            except Exception as exc:  # a beta library: report an API change instead of losing the run
                print(f"sf-heu failed ({type(exc).__name__}: {exc}): no HEU comparison")
                return
            if heu is None:
                print('sf-heu is not installed (pip install -e ".[heu]"): no HEU comparison')
                return
            rows.append((bits, heu, bench_backend("ou", bits, n_fast, n_rows, keys=all_keys[bits]["ou"]),
                         mask_costs(all_keys[bits]["ou"], n_fast)))
    finally:
        set_threads(threads)
    header = f"{'bits':>5} {'op':<11} {'heu ou':>9} {'ou':>9} {'heu/ou':>7}"
    print(header)
    print("-" * len(header))
    for bits, heu, ours, _ in rows:
        for op in OPS:
            print(f"{bits:>5} {op:<11} {heu[op]:>9,.0f} {ours[op]:>9,.0f} {heu[op] / ours[op]:>6.2f}x", flush=True)
    print("\nops/second, one thread each")
    for bits, _, _, (heu_bits, heu_us, our_bits, our_us) in rows:
        print(f"{bits}-bit OU: HEU draws r with {HEU_RANDOM_BITS[bits]} bits, ray_vfl with {our_bits}; one mask H^r "
              f"with our table costs {heu_us:.0f} us at {heu_bits} bits and {our_us:.0f} us at {our_bits}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2048-bit keys only, smaller batches")
    args = parser.parse_args(argv)
    sizes = (2048,) if args.quick else (1024, 2048, 3072)
    n_slow, n_fast = (32, 256) if args.quick else (64, 1024)
    n_rows = 512 if args.quick else 2048  # same histogram for every backend: ~15 / ~60 rows per bin

    header = (f"{'bits':>5} {'op':<11} {'plain':>12} {'phe':>9} {'phe-be':>9} {'paillier':>9} {'ou':>9} "
              f"{'paillier/phe':>13}")
    print(header)
    print("-" * len(header))
    all_keys = {}
    for bits in sizes:
        paillier_be = get_backend("paillier")
        pk, sk = paillier_be.generate_keys(bits, allow_weak=True)  # 1024 bits timed on purpose, for comparison
        ou_keys = get_backend("ou").generate_keys(bits, allow_weak=True)
        all_keys[bits] = {"paillier": (pk, sk), "ou": ou_keys}
        phe_pk, phe_sk = to_phe_keypair(pk, sk)
        res = {
            "plain": bench_backend("plain", bits, n_fast, n_rows),
            "phe": bench_phe_native(phe_pk, phe_sk, n_slow, n_rows),
            "phe-be": bench_backend("phe", bits, n_slow, n_rows, keys=(pk, sk)),
            "paillier": bench_backend("paillier", bits, n_fast, n_rows, keys=(pk, sk)),
            "ou": bench_backend("ou", bits, n_fast, n_rows, keys=ou_keys),
        }
        for op in OPS:
            r = {k: v[op] for k, v in res.items()}
            print(f"{bits:>5} {op:<11} {r['plain']:>12,.0f} {r['phe']:>9,.0f} {r['phe-be']:>9,.0f} "
                  f"{r['paillier']:>9,.0f} {r['ou']:>9,.0f} {r['paillier'] / r['phe']:>12.1f}x", flush=True)
    print("\nops/second, single process; bucket_sum counts (row, feature) additions\n")

    header = (f"{'bits':>5} {'backend':<9} {'slots':>5} {'compress us/e':>13} {'decrypt us/e':>12} "
              f"{'compressed us/e':>15} {'decs/tree':>16} {'active s/tree':>15}")
    print(header)
    print("-" * len(header))
    for bits in sizes:
        for name in ("paillier", "ou"):
            r = bench_compression(name, bits, all_keys[bits][name])
            print(f"{bits:>5} {name:<9} {r['per']:>5} {r['compress'] * 1e6:>13,.0f} {r['decrypt'] * 1e6:>12,.0f} "
                  f"{r['decrypt_z'] * 1e6:>15,.0f} {TREE_ENTRIES:>7,} -> {r['tree_cts']:>5,} "
                  f"{r['tree_s']:>6.1f} -> {r['tree_s_z']:>4.1f}", flush=True)
    print(f"\nus per histogram entry; a tree = {TREE_ENTRIES:,} entries; the passive party pays compress\n")

    header = (f"{'bits':>5} {'backend':<9} {'encrypt_gh(pk)':>15} {'encrypt_gh(sk)':>15} {'gain':>6} "
              f"{'make_masks(sk)':>15} {'with masks':>11} {'gain':>6}")
    print(header)
    print("-" * len(header))
    for bits in sizes:
        for name in ("paillier", "ou"):  # only paillier has an owner (CRT) fast path
            pub, own, make, masked = bench_owner_encryption(name, all_keys[bits][name], n_fast // 2)
            print(f"{bits:>5} {name:<9} {pub:>15,.0f} {own:>15,.0f} {own / pub:>5.2f}x {make:>15,.0f} {masked:>11,.0f} "
                  f"{masked / own:>5.1f}x", flush=True)
    print("\nrows/second; 'with masks': encryption once the masks are made (ahead of time, in idle CPU)\n")

    fast, slow = bench_plain_bucket_sum()
    print(f"plain bucket_sum, 19,200 x 23 rows: fast path {fast:.2f} ms, general path {slow:.2f} ms "
          f"({slow / fast:.1f}x)\n")
    print_heu(sizes, all_keys, n_fast, n_rows)


if __name__ == "__main__":
    main()
