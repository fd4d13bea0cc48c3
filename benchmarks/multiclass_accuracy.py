"""Multi-class accuracy against xgboost: Iris, scikit-learn's digits and MNIST (10 classes), one run.

    python benchmarks/multiclass_accuracy.py                 # all three, 10 rounds
    python benchmarks/multiclass_accuracy.py --datasets mnist --rounds 20

SecureBoost (one tree per class, the plain backend: the federated trees equal the encrypted ones split for
split, ``tests/test_multiclass.py``, so the backend does not change the accuracy) and, with the same
rows, rounds, depth, learning rate, lambda, min_child_weight and bins, xgboost's ``hist`` (its own bins).
PIVODL (labels spread over the clients, instance threshold 1) on all three. Results go to
``benchmarks/results/multiclass_accuracy.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np
from multiclass import load  # benchmarks/multiclass.py: Iris, digits, MNIST with label "y"
from ray_vfl import PIVODLClassifier, Runtime, SecureBoostClassifier, vertical_split

DEPTH = {"iris": 3, "digits": 4, "mnist": 4}


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--datasets", nargs="+", default=["iris", "digits", "mnist"])
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--bins", type=int, default=32)
    p.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results", "multiclass_accuracy.json"))
    args = p.parse_args(argv)
    import xgboost as xgb

    runtime = Runtime()
    rows = []
    for name in args.datasets:
        frame = load(name, None)
        data = vertical_split(frame, 2, label="y", seed=0)
        train, test = data.train_test_split(0.2, seed=0, stratify=True)
        depth = DEPTH[name]
        common = dict(n_estimators=args.rounds, max_depth=depth, max_bin=args.bins, learning_rate=0.3, reg_lambda=1.0,
                      min_child_weight=1.0)
        start = time.perf_counter()
        ours = SecureBoostClassifier(backend="plain", runtime=runtime, **common).fit(train)
        ours_acc = float(np.mean(ours.predict(test) == test.label))
        ours_s = time.perf_counter() - start
        x = frame.drop(columns="y")
        ref = xgb.XGBClassifier(tree_method="hist", n_jobs=2, random_state=0, **common)
        ref.fit(x.iloc[train.ids], np.searchsorted(np.unique(frame["y"]), frame["y"].iloc[train.ids]))
        ref_acc = float(np.mean(np.unique(frame["y"])[ref.predict(x.iloc[test.ids])] == test.label))
        row = {"dataset": name, "classes": int(frame["y"].nunique()), "train_rows": train.n_rows, "rounds": args.rounds,
               "depth": depth, "secureboost": round(ours_acc, 4), "xgboost": round(ref_acc, 4),
               "gap": round(ours_acc - ref_acc, 4), "secureboost_s": round(ours_s, 1)}
        # PIVODL: the labels spread over 2 clients, instance threshold 1 (the paper's)
        spread = vertical_split(frame, 2, label="y", seed=0, label_owners={"party0": 0.5, "party1": 0.5})
        tr, te = spread.train_test_split(0.2, seed=0, stratify=True)
        start = time.perf_counter()
        piv = PIVODLClassifier(backend="plain", instance_threshold=1, runtime=runtime, **common).fit(tr)
        row["pivodl"] = round(float(np.mean(piv.predict(te) == te.label)), 4)
        row["pivodl_s"] = round(time.perf_counter() - start, 1)
        rows.append(row)
        print(row, flush=True)
    print("\n| data set | classes | train rows | rounds x depth | SecureBoost | PIVODL | xgboost | gap |\n|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['dataset']} | {r['classes']} | {r['train_rows']} | {r['rounds']} x {r['depth']} | {r['secureboost']:.4f} | "
              f"{r.get('pivodl', float('nan')):.4f} | {r['xgboost']:.4f} | {r['gap']:+.4f} |")
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as fh:
        json.dump(rows, fh, indent=1)


if __name__ == "__main__":
    main()
