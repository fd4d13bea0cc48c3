"""Multi-class SecureBoost: time and bytes per boosting round of K classes, three ways, in one run.

    python benchmarks/multiclass.py                              # digits (10 classes), 2 parties, Paillier 2048
    python benchmarks/multiclass.py --dataset mnist --rows 2000  # MNIST 10 classes, first 2000 rows (784 pixels)

- ``K binary``: K separate binary SecureBoost runs (class k against the rest), each with its own
  encrypted gradients: what a user without multi-class support runs. Their times and bytes are summed.
- ``one_output_per_tree``: multi-class SecureBoost, one tree per class and round (softmax gradients):
  per round the same messages as the K binary runs, K encrypted_gh messages of one pair per row.
- ``multi_output_tree``: one tree per round with K-weight leaves; every row's K pairs packed in ONE
  ciphertext, sent in ONE encrypted_gh message per round; every histogram cell carries K sums.

Columns: seconds per round (trees' wall time, after set-up and key generation), MB per round (every
message of the rounds, set-up messages excluded), messages per round, encryptions, ciphertext
products (histogram sums), decryptions, test accuracy. Results go to ``benchmarks/results/multiclass.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np
import pandas as pd

from ray_vfl import Runtime, SecureBoostClassifier, vertical_split
from ray_vfl.data.sources import read_table
from ray_vfl.data.bundled import data_dirs
from ray_vfl.trees.callbacks import TreeTimer

SETUP_KINDS = {"public_key", "histogram_layout"}


def load(dataset: str, rows: int | None) -> pd.DataFrame:
    """Iris (3 classes), digits (scikit-learn's 8x8, 1797 rows) or MNIST's test set (10,000 rows, 784
    pixels), 10 classes; label column ``y``, features ``x0 ..``."""
    if dataset in ("iris", "digits"):
        from sklearn.datasets import load_digits, load_iris

        frame = (load_iris if dataset == "iris" else load_digits)(as_frame=True).frame.rename(columns={"target": "y"})
    else:
        path = next(os.path.join(d, "mnist_test_10k.csv.gz") for d in data_dirs()
                    if os.path.exists(os.path.join(d, "mnist_test_10k.csv.gz")))
        frame = read_table(path).rename(columns={"label": "y"})
    frame.columns = [c if c == "y" else f"x{i}" for i, c in enumerate(frame.columns)]
    return frame if rows is None else frame.sample(n=rows, random_state=0).reset_index(drop=True)


def run(runtime, train, test, args, strategy: str | None, y_test: np.ndarray, label_of=None) -> dict:
    """One fit; its per-round figures."""
    timer = TreeTimer()
    clf = SecureBoostClassifier(n_estimators=args.rounds, max_depth=args.depth, max_bin=args.bins, backend=args.backend,
                                key_bits=args.key_bits, allow_weak_keys=args.key_bits < 2048, callbacks=[timer],
                                runtime=runtime, multi_strategy=strategy or "one_output_per_tree")
    clf.fit(train)
    records = [r for r in clf.comm_stats_.records if r.kind not in SETUP_KINDS]
    ops = clf.model_.op_counts
    out = {"seconds": timer.seconds, "bytes": sum(r.nbytes for r in records), "messages": len(records),
           "encrypted_gh_bytes": sum(r.nbytes for r in records if r.kind == "encrypted_gh"),
           "histogram_bytes": sum(r.nbytes for r in records if r.kind == "encrypted_histograms"),
           "encrypt": ops.get("encrypt", 0), "add": ops.get("add", 0), "decrypt": ops.get("decrypt", 0)}
    if label_of is None:
        out["accuracy"] = float(np.mean(clf.predict(test) == y_test))
    else:
        out["proba"] = clf.predict_proba(test)[:, 1]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", choices=["digits", "mnist"], default="digits")
    ap.add_argument("--rows", type=int, default=None, help="sample this many rows (all by default)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--depth", type=int, default=3)
    ap.add_argument("--bins", type=int, default=16)
    ap.add_argument("--backend", default="paillier")
    ap.add_argument("--key-bits", type=int, default=2048)
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results", "multiclass.json"))
    args = ap.parse_args()

    frame = load(args.dataset, args.rows)
    classes = np.unique(frame["y"])
    n_test = len(frame) // 5
    tr, te = frame.iloc[n_test:].reset_index(drop=True), frame.iloc[:n_test].reset_index(drop=True)
    train = vertical_split(tr, 2, label="y", seed=0)
    test = vertical_split(te, 2, label="y", seed=0)
    y_test = te["y"].to_numpy()
    runtime = Runtime(timeout_s=3600)
    runtime.connect(train.party_names)
    t0 = time.time()
    rows = {}
    for strategy in ("one_output_per_tree", "multi_output_tree"):
        rows[strategy] = run(runtime, train, test, args, strategy, y_test)
        print(strategy, {k: v for k, v in rows[strategy].items()}, flush=True)
    binary = []
    for k in classes:  # K separate binary runs, class k against the rest
        tr_k, te_k = tr.assign(y=(tr["y"] == k).astype(int)), te.assign(y=(te["y"] == k).astype(int))
        binary.append(run(runtime, vertical_split(tr_k, 2, label="y", seed=0), vertical_split(te_k, 2, label="y", seed=0),
                          args, None, None, label_of=k))
        print("binary", k, {key: v for key, v in binary[-1].items() if key != "proba"}, flush=True)
    summed = {key: sum(b[key] for b in binary) for key in binary[0] if key != "proba"}
    summed["accuracy"] = float(np.mean(classes[np.argmax(np.stack([b["proba"] for b in binary], axis=1), axis=1)] == y_test))
    rows["K binary"] = summed
    runtime.kill_all()

    per_round = {name: {k: (v / args.rounds if k not in ("accuracy",) else v) for k, v in r.items()}
                 for name, r in rows.items()}
    base = per_round["K binary"]
    print(f"\n{args.dataset}: {len(tr)} training rows, {frame.shape[1] - 1} features, {len(classes)} classes, 2 parties, "
          f"{args.backend} {args.key_bits}, depth {args.depth}, {args.bins} bins, {args.rounds} rounds ({time.time() - t0:.0f} s)")
    print("| per round | s | s vs K binary | MB | MB vs K binary | gh MB | histogram MB | messages | encryptions "
          "| ciphertext products | decryptions | test accuracy |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for name in ("K binary", "one_output_per_tree", "multi_output_tree"):
        r = per_round[name]
        print(f"| {name} | {r['seconds']:.1f} | {r['seconds'] / base['seconds']:.2f} | {r['bytes'] / 1e6:.2f} | "
              f"{r['bytes'] / base['bytes']:.2f} | {r['encrypted_gh_bytes'] / 1e6:.2f} | {r['histogram_bytes'] / 1e6:.2f} | "
              f"{r['messages']:.0f} | {r['encrypt']:.0f} | {r['add']:.0f} | {r['decrypt']:.0f} | {r['accuracy']:.3f} |")
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as fh:
        json.dump({"args": vars(args), "train_rows": len(tr), "features": frame.shape[1] - 1, "classes": len(classes),
                   "per_round": per_round, "date": time.strftime("%Y-%m-%d")}, fh, indent=1)


if __name__ == "__main__":
    main()
