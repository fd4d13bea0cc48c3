"""ECDH-PSI throughput: IDs per second and bytes per ID, 2 and 3 parties, 50% overlap.

Every party holds ``n`` IDs; half of them are common to all parties, the
other half its own. Run from the repository root::

    python benchmarks/psi.py                          # 100,000 and 1,000,000 IDs, 2 and 3 parties
    python benchmarks/psi.py --sizes 100000 --parties 2 --json psi.json

IDs/s counts every party's IDs (``parties * n``) over the wall time of one
PSI (actors already started); bytes/ID is the metered traffic over the same
count. Starts a local Ray on loopback with the test suite's settings.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
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

from ray_vfl import Runtime  # noqa: E402
from ray_vfl.psi.party import hash_and_blind  # noqa: E402
from ray_vfl.psi.protocol import private_set_intersection  # noqa: E402


def party_ids(n: int, parties: int, seed: int = 0) -> dict[str, np.ndarray]:
    """``n`` shuffled IDs per party: ``n // 2`` shared by all, the rest each party's own."""
    rng = np.random.default_rng(seed)
    common = n // 2
    out = {}
    for i in range(parties):
        own = np.arange(common + i * (n - common), common + (i + 1) * (n - common))
        out[f"party{i}"] = rng.permutation(np.concatenate([np.arange(common), own]))
    return out


def op_cpu_us(n: int = 5_000) -> float:
    """CPU microseconds of one hash-and-blind (X25519) in this process: immune to other processes' load."""
    ids = np.arange(n)
    start = time.process_time()
    hash_and_blind(ids, "int", secrets.token_bytes(32))
    return (time.process_time() - start) / n * 1e6


def run(runtime: Runtime, n: int, parties: int, workers: int | None) -> dict:
    ids = party_ids(n, parties)
    start = time.perf_counter()
    result = private_set_intersection(runtime, ids, workers=workers)
    seconds = time.perf_counter() - start
    if result.n_aligned != n // 2:
        raise RuntimeError(f"expected {n // 2} common IDs, got {result.n_aligned}")
    total = n * parties
    return {"parties": parties, "ids_per_party": n, "common": result.n_aligned, "seconds": round(seconds, 2),
            "ids_per_s": round(total / seconds), "bytes_per_id": round(result.comm_stats.total_bytes / total, 2),
            "mb": round(result.comm_stats.total_mb, 2), "mb_by_kind": result.comm_stats.by_kind()}


def main(argv=None) -> list[dict]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[100_000, 1_000_000])
    p.add_argument("--parties", type=int, nargs="+", default=[2, 3])
    p.add_argument("--workers", type=int, default=None, help="pool tasks per party (default: all CPUs)")
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    names = [f"party{i}" for i in range(max(args.parties))]
    runtime = Runtime(address="local", timeout_s=3600)
    rows = []
    op_us = op_cpu_us()
    try:
        runtime.connect(names)
        run(runtime, 5_000, max(args.parties), args.workers)  # warm-up: actors and pool workers start here
        cpus = runtime.cpus()
        print(f"one X25519 hash-and-blind: {op_us:.0f} us CPU; a run makes (3 * parties - 2) * n of them, "
              f"so its CPU floor on {cpus} CPUs is that many * {op_us:.0f} us / {cpus}")
        print(f"{'parties':>7} {'IDs/party':>10} {'common':>9} {'seconds':>8} {'floor s':>8} {'IDs/s':>8} "
              f"{'bytes/ID':>8} {'MB':>8}")
        for n in args.sizes:
            for k in args.parties:
                row = run(runtime, n, k, args.workers)
                row["floor_s"] = round((3 * k - 2) * n * op_us / 1e6 / cpus, 1)
                rows.append(row)
                print(f"{k:>7} {n:>10,} {row['common']:>9,} {row['seconds']:>8.1f} {row['floor_s']:>8.1f} "
                      f"{row['ids_per_s']:>8,} "
                      f"{row['bytes_per_id']:>8.1f} {row['mb']:>8.1f}", flush=True)
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
