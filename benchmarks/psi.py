"""ECDH-PSI throughput over ristretto255: IDs per second per core, next to the crypto floor of this machine.

Every party holds ``n`` IDs; half of them are common to all parties, the
other half its own. Run from the repository root::

    python benchmarks/psi.py                          # 100,000 and 1,000,000 IDs, 2 and 3 parties
    python benchmarks/psi.py --sizes 200000 --parties 2 --kind str --repeat 3 --json psi.json

IDs/s counts every party's IDs (``parties * n``) over the wall time of one
PSI (actors already started), the fastest of ``--repeat`` runs (other
processes on the machine only ever slow a run down); per core divides by
the CPUs Ray sees. bytes/ID is the metered traffic over the same count.

The floor is what libsodium itself costs, timed on the CPU time of this
process (little affected by other processes' load). With ``k`` parties of
``n`` IDs, every ID is hashed once (SHA-512 and ristretto255 ``from_hash``)
and blinded by its owner, each follower's IDs once more by the leader, and
the leader's IDs once more by every follower: ``k * n`` hashes and
``(3k - 2) * n`` scalar multiplications, so no implementation over these
calls passes ``k / (k * hash + (3k - 2) * mult)`` IDs per second per core
(``1 / (hash + 2 * mult)`` for two parties). "of floor" is the measured
per-core rate over that bound. The library's own kernels are timed the
same way, to show what the Python loops around libsodium cost, and
OpenSSL's X25519 (a faster primitive, but its x-only encoding needs a hash
onto the curve, not the twist, to leak nothing) for reference. Starts a
local Ray on loopback with the test suite's settings.
"""

from __future__ import annotations

import argparse
import ctypes
import hashlib
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

_SCRATCH = tempfile.mkdtemp(prefix="vflh")
_RAY_TMP = tempfile.mkdtemp(prefix="rt", dir="/tmp")  # short: Ray's socket paths must stay under 107 chars
Path(_SCRATCH, "ray_bootstrap_config.yaml").write_text("provider: {type: local}\n")
os.environ.update(RAY_USAGE_STATS_ENABLED="0", RAY_AUTH_MODE="disabled", RAY_TMPDIR=_RAY_TMP, HOME=_SCRATCH,
                  RAY_USAGE_STATS_REPORT_URL="http://127.0.0.1:9/")
os.environ.pop("RAY_ADDRESS", None)

import numpy as np  # noqa: E402
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey  # noqa: E402

from ray_vfl import Runtime  # noqa: E402
from ray_vfl.psi import party  # noqa: E402
from ray_vfl.psi.protocol import private_set_intersection  # noqa: E402

TARGET_PER_CORE = 19_000  # SecretFlow's ECDH-PSI over FourQ, IDs/s per core


def party_ids(n: int, parties: int, kind: str = "int", seed: int = 0) -> dict[str, np.ndarray]:
    """``n`` shuffled IDs per party: ``n // 2`` shared by all, the rest each party's own."""
    rng = np.random.default_rng(seed)
    common = n // 2
    out = {}
    for i in range(parties):
        own = np.arange(common + i * (n - common), common + (i + 1) * (n - common))
        ids = rng.permutation(np.concatenate([np.arange(common), own]))
        out[f"party{i}"] = ids if kind == "int" else np.array([f"cust-{v:012d}" for v in ids.tolist()], dtype=object)
    return out


def _cpu_us(fn, n: int, repeat: int = 3) -> float:
    """Best of ``repeat`` CPU times of ``fn()``, in microseconds per item (``fn`` handles ``n`` items)."""
    best = float("inf")
    for _ in range(repeat):
        start = time.process_time()
        fn()
        best = min(best, time.process_time() - start)
    return best / n * 1e6


def op_costs(n: int = 3_000) -> dict[str, float]:
    """CPU microseconds per operation in this process: the raw calls, and the library's kernels per ID."""
    lib = party._SODIUM
    from_hash, mult = lib["crypto_core_ristretto255_from_hash"], lib["crypto_scalarmult_ristretto255"]
    scalar, out = party.new_scalar(), (ctypes.c_char * 32)()
    digests = [hashlib.sha512(b"s:cust-%012d" % i).digest() for i in range(n)]
    from_hash(out, digests[0])
    point = out.raw
    x_key = X25519PrivateKey.generate()
    x_peers = [X25519PublicKey.from_public_bytes(d[:32]) for d in digests]
    ids = np.array([f"cust-{i:012d}" for i in range(n)], dtype=object)
    points = party.hash_and_blind(ids, "str", party.new_scalar())
    costs = {
        "sha512": _cpu_us(lambda: [hashlib.sha512(b"s:cust-%012d" % i).digest() for i in range(n)], n),
        "from_hash": _cpu_us(lambda: [from_hash(out, d) for d in digests], n),
        "mult": _cpu_us(lambda: [mult(out, scalar, point) for _ in range(n)], n),
        "x25519": _cpu_us(lambda: [x_key.exchange(p) for p in x_peers], n),
        "hash_and_blind": _cpu_us(lambda: party.hash_and_blind(ids, "str", scalar), n),
        "blind": _cpu_us(lambda: party.blind(points, scalar, party.DIGEST_BYTES), n),
    }
    costs["floor_per_id"] = costs["sha512"] + costs["from_hash"] + 2 * costs["mult"]  # two parties
    costs["kernels_per_id"] = costs["hash_and_blind"] + costs["blind"]
    return costs


def run(runtime: Runtime, n: int, parties: int, kind: str, workers: int | None, repeat: int = 1) -> dict:
    ids = party_ids(n, parties, kind)
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        result = private_set_intersection(runtime, ids, workers=workers)
        times.append(time.perf_counter() - start)
    seconds = min(times)
    if result.n_aligned != n // 2:
        raise RuntimeError(f"expected {n // 2} common IDs, got {result.n_aligned}")
    total = n * parties
    return {"parties": parties, "ids_per_party": n, "kind": kind, "common": result.n_aligned,
            "seconds": round(seconds, 2), "all_seconds": [round(t, 2) for t in times], "ids_per_s": round(total / seconds),
            "bytes_per_id": round(result.comm_stats.total_bytes / total, 2),
            "mb": round(result.comm_stats.total_mb, 2), "mb_by_kind": result.comm_stats.by_kind()}


def main(argv=None) -> list[dict]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[100_000, 1_000_000])
    p.add_argument("--parties", type=int, nargs="+", default=[2, 3])
    p.add_argument("--kind", choices=["int", "str"], default="int", help="integer IDs or strings like 'cust-000000000042'")
    p.add_argument("--workers", type=int, default=None, help="pool tasks per party (default: all CPUs)")
    p.add_argument("--repeat", type=int, default=1, help="runs per size; the table shows the fastest")
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    names = [f"party{i}" for i in range(max(args.parties))]
    runtime = Runtime(address="local", timeout_s=3600)
    rows = []
    cost = op_costs()
    floor = 1e6 / cost["floor_per_id"]  # two parties

    def floor_per_core(k: int) -> float:
        return 1e6 * k / (k * (cost["sha512"] + cost["from_hash"]) + (3 * k - 2) * cost["mult"])

    try:
        runtime.connect(names)
        run(runtime, 5_000, max(args.parties), args.kind, args.workers)  # warm-up: actors and pool workers start here
        cpus = runtime.cpus()
        print(f"CPU us per op here: SHA-512 {cost['sha512']:.1f}, ristretto255 from_hash {cost['from_hash']:.1f}, "
              f"scalar mult {cost['mult']:.1f} (OpenSSL X25519 {cost['x25519']:.1f})")
        print(f"2-party floor per ID = SHA-512 + from_hash + 2 mult = {cost['floor_per_id']:.1f} us -> {floor:,.0f} IDs/s "
              f"per core (k parties: (3k - 2) / k mults per ID); "
              f"library kernels {cost['kernels_per_id']:.1f} us per ID ({cost['floor_per_id'] / cost['kernels_per_id']:.2f} "
              f"of floor); target {TARGET_PER_CORE:,} IDs/s per core ({TARGET_PER_CORE / floor:.2f} x floor); {cpus} CPUs")
        print(f"seconds: the fastest of {args.repeat} run(s); per core = IDs/s / {cpus}; of floor = per core / floor")
        print(f"{'parties':>7} {'IDs/party':>10} {'kind':>4} {'common':>9} {'seconds':>8} {'IDs/s':>8} {'per core':>8} "
              f"{'floor':>8} {'of floor':>8} {'bytes/ID':>8} {'MB':>7}")
        for n in args.sizes:
            for k in args.parties:
                row = run(runtime, n, k, args.kind, args.workers, args.repeat)
                row["ids_per_s_per_core"] = round(row["ids_per_s"] / cpus)
                row["floor_per_core"] = round(floor_per_core(k))
                row["of_floor"] = round(row["ids_per_s"] / cpus / floor_per_core(k), 3)
                row["op_us"] = {key: round(v, 2) for key, v in cost.items()}
                rows.append(row)
                print(f"{k:>7} {n:>10,} {args.kind:>4} {row['common']:>9,} {row['seconds']:>8.1f} {row['ids_per_s']:>8,} "
                      f"{row['ids_per_s_per_core']:>8,} {row['floor_per_core']:>8,} {row['of_floor']:>8.2f} "
                      f"{row['bytes_per_id']:>8.1f} {row['mb']:>7.1f}", flush=True)
    finally:
        runtime.shutdown()
        shutil.rmtree(_RAY_TMP, ignore_errors=True)
        shutil.rmtree(_SCRATCH, ignore_errors=True)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(rows, fh, indent=2)
    return rows


if __name__ == "__main__":
    main()
