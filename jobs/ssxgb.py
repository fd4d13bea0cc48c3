"""SSXGB on Ray: accuracy per round next to centralized xgboost, and running time against participants.

Iris (scikit-learn's bundled copy; 4 participants, one feature each; setosa vs rest, balanced with 50
synthetic setosa rows as in the paper; depth 4) and MNIST (``mnist_test_10k.csv.gz``, shipped in ray_vfl/data/files; 16
participants, 49 pixels each; digits 0-4 vs 5-9; depth 6); learning rate 0.08. Writes CSV, JSON and PNG::

    python jobs/ssxgb.py --dataset iris --rounds 10 --key-bits 1024 --allow-weak-keys
    python jobs/ssxgb.py --dataset mnist --rows 2000 --rounds 5          # the full 10k rows take hours on 2 cores
    python jobs/ssxgb.py --scaling 2,4,8 --key-bits 1024 --allow-weak-keys  # time per tree vs participants
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time

import numpy as np
import pandas as pd



def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--dataset", default="iris", choices=["iris", "mnist", "none"])
    p.add_argument("--rows", type=int, default=10_000, help="MNIST rows used (of 10,000)")
    p.add_argument("--rounds", type=int, default=10, help="trees, the LBP's first included")
    p.add_argument("--depth", type=int, default=None, help="tree depth (default: 4 for Iris, 6 for MNIST)")
    p.add_argument("--learning-rate", type=float, default=0.08)
    p.add_argument("--max-bin", type=int, default=32)
    p.add_argument("--key-bits", type=int, default=2048)
    p.add_argument("--allow-weak-keys", action="store_true", help="accept 1024-bit keys (tests, benchmarks)")
    p.add_argument("--scaling", default="", help="comma-separated participant counts for the timing sweep")
    p.add_argument("--scaling-rows", type=int, default=200)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="results/ssxgb")
    return p.parse_args(argv)


def load_iris_balanced(seed: int) -> tuple[pd.DataFrame, dict[str, list[str]]]:
    """Iris, setosa (1) vs rest (0), plus 50 synthetic setosa rows so that both classes have 100 rows
    (:func:`ray_vfl.data.bundled.iris_balanced`); one participant per feature."""
    from ray_vfl.data.bundled import iris_balanced

    frame = iris_balanced(seed)
    frame["y"] = frame["y"].astype(float)
    return frame, {f"party{i}": [c] for i, c in enumerate(frame.columns[:4])}


def load_mnist(path: str, rows: int, seed: int) -> tuple[pd.DataFrame, dict[str, list[str]]]:
    """MNIST test set, digits 0-4 (0) vs 5-9 (1); 16 participants of 49 pixels (a 7-row band of a
    quarter of the image each: pixels in order, 784 / 16 = 49)."""
    frame = pd.read_csv(path)
    if rows < len(frame):
        frame = frame.sample(rows, random_state=seed).reset_index(drop=True)
    y = (frame.pop("label") >= 5).astype(float)
    frame = frame.astype(np.float64)
    cols = list(frame.columns)
    frame["y"] = y
    return frame, {f"party{i}": cols[49 * i:49 * (i + 1)] for i in range(16)}


def centralized(train: pd.DataFrame, test: pd.DataFrame, rounds: int, depth: int, lr: float, max_bin: int, seed: int):
    """Accuracy and logloss per round of xgboost with the same settings (hist, 0.8 subsampling)."""
    import xgboost as xgb
    from sklearn.metrics import accuracy_score, log_loss

    clf = xgb.XGBClassifier(n_estimators=rounds, max_depth=depth, learning_rate=lr, max_bin=max_bin, subsample=0.8,
                            colsample_bytree=0.8, tree_method="hist", random_state=seed, n_jobs=2)
    clf.fit(train.drop(columns="y"), train["y"])
    out = []
    for k in range(1, rounds + 1):
        p = clf.predict_proba(test.drop(columns="y"), iteration_range=(0, k))[:, 1]
        out.append({"accuracy": accuracy_score(test["y"], p > 0.5), "logloss": log_loss(test["y"], p, labels=[0, 1])})
    return out


def run_dataset(args, name: str, frame: pd.DataFrame, columns: dict, depth: int) -> list[dict]:
    from sklearn.metrics import log_loss

    from ray_vfl import Runtime, vertical_split
    from ray_vfl.ssxgb import SSXGBConfig, train

    data = vertical_split(frame, columns, label="y")
    tr, te = data.train_test_split(0.2, seed=args.seed, stratify=True)
    config = SSXGBConfig(n_trees=args.rounds, max_depth=depth, learning_rate=args.learning_rate, max_bin=args.max_bin,
                         key_bits=args.key_bits, allow_weak_keys=args.allow_weak_keys, seed=args.seed)
    with Runtime() as runtime:
        t0 = time.perf_counter()
        model = train(runtime, tr, config)
        seconds = time.perf_counter() - t0
        y_te = te.label
        rows = []
        for k in range(1, model.n_trees + 1):
            p = model.predict(te, k)
            rows.append({"dataset": name, "round": k, "accuracy": float(((p > 0.5) == y_te).mean()),
                         "logloss": float(log_loss(y_te, np.clip(p, 1e-12, 1 - 1e-12), labels=[0, 1]))})
        stats = model.comm_stats
    plain, test = frame.iloc[tr.ids], frame.iloc[te.ids]  # vertical_split's ids are row positions: the same rows
    for row, c in zip(rows, centralized(plain, test, args.rounds, depth, args.learning_rate, args.max_bin, args.seed)):
        row["xgboost_accuracy"], row["xgboost_logloss"] = c["accuracy"], c["logloss"]
        row["train_seconds"] = round(seconds, 1)
    by = stats.by_channel()
    rows[-1]["mb_c_participants"] = sum(v for k, v in by.items() if "server_s" not in k)
    rows[-1]["mb_c_s"] = sum(v for k, v in by.items() if "server_s" in k)
    return rows


def run_scaling(args, counts: list[int]) -> list[dict]:
    from ray_vfl import Runtime, vertical_split
    from ray_vfl.ssxgb import SSXGBConfig, train

    rng = np.random.default_rng(args.seed)
    out = []
    for n_parts in counts:
        x = rng.normal(size=(args.scaling_rows, n_parts))
        frame = pd.DataFrame(x, columns=[f"f{i}" for i in range(n_parts)])
        frame["y"] = (x.sum(axis=1) + rng.normal(size=len(x)) > 0).astype(float)
        data = vertical_split(frame, {f"party{i}": [f"f{i}"] for i in range(n_parts)}, label="y")
        config = SSXGBConfig(n_trees=2, max_depth=2, max_bin=16, key_bits=args.key_bits, feature_subsample=1.0,
                             allow_weak_keys=args.allow_weak_keys, seed=args.seed)
        with Runtime() as runtime:
            t0 = time.perf_counter()
            model = train(runtime, data, config)
            out.append({"participants": n_parts, "rows": args.scaling_rows, "seconds_2_trees": round(time.perf_counter() - t0, 2),
                        "round_trips_c_s": model.round_trips, "mb_total": round(model.comm_stats.total_mb, 3)})
        print(out[-1], flush=True)
    return out


def _write(rows: list[dict], path: str) -> None:
    pd.DataFrame(rows).to_csv(path + ".csv", index=False)
    with open(path + ".json", "w") as fh:
        json.dump(rows, fh, indent=2)


def _plot(rows: list[dict], path: str, x: str, ys: list[str], title: str) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    fig, ax = plt.subplots(figsize=(5, 3.5))
    for y in ys:
        ax.plot([r[x] for r in rows], [r[y] for r in rows], marker="o", label=y)
    ax.set_xlabel(x)
    ax.set_title(title)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path + ".png", dpi=120)
    plt.close(fig)


def main(argv=None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    os.makedirs(args.out, exist_ok=True)
    if args.dataset != "none":
        if args.dataset == "iris":
            frame, columns = load_iris_balanced(args.seed)
        else:
            from ray_vfl.data.bundled import data_path

            frame, columns = load_mnist(data_path("mnist_test_10k.csv.gz"), args.rows, args.seed)
        depth = args.depth or (4 if args.dataset == "iris" else 6)
        rows = run_dataset(args, args.dataset, frame, columns, depth)
        for r in rows:
            print(r, flush=True)
        path = os.path.join(args.out, f"{args.dataset}_rounds")
        _write(rows, path)
        _plot(rows, path, "round", ["accuracy", "xgboost_accuracy"], f"SSXGB vs xgboost: {args.dataset}")
    if args.scaling:
        rows = run_scaling(args, [int(v) for v in args.scaling.split(",")])
        path = os.path.join(args.out, "scaling")
        _write(rows, path)
        _plot(rows, path, "participants", ["seconds_2_trees"], "SSXGB time vs participants")
    return 0


if __name__ == "__main__":
    sys.exit(main())
