"""SSXGB: where a federated tree's time goes, and the bytes per split, at small settings.

Usage::

    python benchmarks/ssxgb.py                                  # 1024-bit keys, 200 rows, 4 participants, depth 3
    python benchmarks/ssxgb.py --bits 2048 --participants 8 --rows 400

Per federated tree: wall time at the driver, CPU seconds of each role's actor process (the
participants summed, server C, server S; ``time.process_time`` deltas), and the rest (waiting on
messages, Ray and pickling). Bytes per split on the two channels, next to the paper's formulas as
we read them: C <-> participants ``2 zeta d (n / q)`` and C <-> S ``12 zeta + 3 zeta (n / q) D``, with
``zeta`` the bytes of one ciphertext, ``d`` the features, ``n / q`` the split candidates per feature
(bins) and ``D`` the depth. That reading is ours; the measured numbers stand on their own.
BCP's own per-operation table (Setup .. LGT next to Paillier) is ``benchmarks/bcp.py``.
Not here yet: the crypto floor (operation counts times single-core costs) and MNIST at full size.
"""

from __future__ import annotations

import argparse
import json
import time
import warnings

import numpy as np
import pandas as pd
import ray

from ray_vfl import Runtime, vertical_split
from ray_vfl.ssxgb import SSXGBConfig, train
from ray_vfl.ssxgb.protocol import SERVER_C, SERVER_S


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--bits", type=int, default=1024)
    p.add_argument("--rows", type=int, default=200)
    p.add_argument("--participants", type=int, default=4)
    p.add_argument("--depth", type=int, default=3)
    p.add_argument("--max-bin", type=int, default=16)
    p.add_argument("--trees", type=int, default=3, help="trees in all (the LBP's first included)")
    args = p.parse_args(argv)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(args.rows, args.participants))
    frame = pd.DataFrame(x, columns=[f"f{i}" for i in range(args.participants)])
    frame["y"] = (x.sum(axis=1) + rng.normal(size=args.rows) > 0).astype(float)
    parts = [f"party{i}" for i in range(args.participants)]
    data = vertical_split(frame, {p: [f"f{i}"] for i, p in enumerate(parts)}, label="y")
    config = SSXGBConfig(n_trees=args.trees, max_depth=args.depth, max_bin=args.max_bin, key_bits=args.bits,
                         allow_weak_keys=args.bits < 2048, feature_subsample=1.0)
    with Runtime() as runtime, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        roles = parts + [SERVER_C, SERVER_S]
        t0 = time.perf_counter()
        model = train(runtime, data, config)
        wall = time.perf_counter() - t0
        cpu = dict(zip(roles, ray.get([runtime.actor(r).cpu_seconds.remote() for r in roles], timeout=120)))
        stats = model.comm_stats
    federated = args.trees - 1
    splits = federated * (2**args.depth - 1)
    width = 2 * ((2 * args.bits + 7) // 8)  # one BCP ciphertext (A, B), bytes
    by = stats.by_channel()
    c_p = sum(v for k, v in by.items() if SERVER_S not in k) * 1e6
    c_s = sum(v for k, v in by.items() if SERVER_S in k) * 1e6
    candidates = args.participants * (args.max_bin - 1)
    out = {
        "settings": vars(args),
        "wall_seconds_all": round(wall, 2),
        "cpu_seconds": {"participants": round(sum(cpu[p] for p in parts), 2), "server_c": round(cpu[SERVER_C], 2),
                        "server_s": round(cpu[SERVER_S], 2)},
        "two_server_round_trips": model.round_trips,
        "bytes_per_split": {"c_participants": round(c_p / splits), "c_s": round(c_s / splits)},
        "paper_formula_per_split_our_reading": {"c_participants": 2 * width * candidates,
                                                "c_s": 12 * width + 3 * width * candidates * args.depth},
    }
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
