"""SSXGB's two engines side by side: per federated tree and per prediction, BCP against the lattice
engine (BFV SIMD slots), alternating in one run on the same data and settings.

Usage::

    python benchmarks/ssxgb_engines.py                      # credit sample, 600 rows, depth 3, 16 bins
    python benchmarks/ssxgb_engines.py --rows 2000 --test-rows 6000 --max-bin 32 --engines lattice

Per engine and repeat: the wall time of each federated tree at the driver (clock after the LBP's
tree to after the last), the CPU seconds of each role's process over the whole training, the
prediction of ``--test-rows`` rows, the test AUC, the two-server round trips and the bytes on each
channel; and whether the federated trees of both engines are equal split for split (same data,
same seed, same approximations: they should be, with ``--feature-subsample 1``; otherwise each
participant samples its features from OS entropy).
"""

from __future__ import annotations

import argparse
import json
import time
import warnings

import ray

from ray_vfl import Runtime, vertical_split
from ray_vfl.data.bundled import CREDIT_LABEL, load_credit
from ray_vfl.metrics import auc
from ray_vfl.ssxgb import SSXGBConfig, train
from ray_vfl.ssxgb.protocol import SERVER_C, SERVER_S
from ray_vfl.trees.callbacks import TrainingCallback


class Clock(TrainingCallback):
    """The driver's clock after every tree."""

    def __init__(self):
        self.at = []

    def after_iteration(self, iteration, logs):
        self.at.append(time.perf_counter())
        return False


def run(runtime, data, test, y_test, config, roles) -> dict:
    clock = Clock()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t0 = time.perf_counter()
        model = train(runtime, data, config, [clock])
        wall = time.perf_counter() - t0
    cpu = dict(zip(roles, ray.get([runtime.actor(r).cpu_seconds.remote() for r in roles], timeout=120)))
    t1 = time.perf_counter()
    margin = model.predict_margin(test)
    predict = time.perf_counter() - t1
    fed = (clock.at[-1] - clock.at[0]) / max(1, len(clock.at) - 1)
    by = model.comm_stats.by_channel()
    return {"engine": config.engine, "train_s": round(wall, 2), "per_federated_tree_s": round(fed, 2),
            "predict_s": round(predict, 2), "test_auc": round(float(auc(y_test, margin)), 4),
            "cpu_s": {r: round(cpu[r], 2) for r in roles},  # since the actor started (new classes: each run)
            "round_trips": model.round_trips,
            "mb_c_participants": round(sum(v for k, v in by.items() if SERVER_S not in k), 2),
            "mb_c_s": round(sum(v for k, v in by.items() if SERVER_S in k), 2),
            "splits": model.assembled_splits()}


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=600)
    p.add_argument("--test-rows", type=int, default=2000)
    p.add_argument("--depth", type=int, default=3)
    p.add_argument("--max-bin", type=int, default=16)
    p.add_argument("--trees", type=int, default=2, help="trees in all (the LBP's first included)")
    p.add_argument("--bits", type=int, default=2048, help="BCP key bits")
    p.add_argument("--engines", nargs="+", default=["bcp", "lattice"])
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--feature-subsample", type=float, default=0.8,
                   help="1.0 to compare the engines split for split (each participant samples features from OS entropy)")
    args = p.parse_args(argv)
    frame = load_credit().drop(columns=["ID"]).sample(n=args.rows + args.test_rows, random_state=0)
    frame = frame.rename(columns={CREDIT_LABEL: "y"}).reset_index(drop=True)
    feats = [c for c in frame.columns if c != "y"]
    cols = {"party0": feats[:12], "party1": feats[12:]}
    data = vertical_split(frame.iloc[:args.rows].reset_index(drop=True), cols, label="y")
    test_frame = frame.iloc[args.rows:].reset_index(drop=True)
    test = vertical_split(test_frame, cols, label="y")
    y_test = test_frame["y"].to_numpy()
    roles = list(cols) + [SERVER_C, SERVER_S]
    out = []
    with Runtime(timeout_s=7200) as runtime:
        for _ in range(args.repeats):
            for engine in args.engines:
                config = SSXGBConfig(n_trees=args.trees, max_depth=args.depth, max_bin=args.max_bin, key_bits=args.bits,
                                     allow_weak_keys=args.bits < 2048, learning_rate=0.3, engine=engine,
                                     feature_subsample=args.feature_subsample)
                res = run(runtime, data, test, y_test, config, roles)
                print(json.dumps({k: v for k, v in res.items() if k != "splits"}), flush=True)
                out.append(res)
    first = {r["engine"]: r["splits"] for r in out}
    if len(first) > 1:
        same = all(r["splits"] == out[0]["splits"] for r in out)
        print(json.dumps({"settings": vars(args), "engines_equal_split_for_split": same}))


if __name__ == "__main__":
    main()
