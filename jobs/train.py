"""Train SecureBoost on a vertically split dataset and report test quality, wall time and traffic.

Runs the same way on a laptop (starts a local Ray) and on a cluster::

    python jobs/train.py                                  # credit data, 2 parties, Paillier 2048
    ray job submit --address http://HEAD:8265 --working-dir . -- python jobs/train.py --parties 3
    python jobs/train.py --party-files bank=bank.csv shop=shop.csv --id-column ID --label y   # aligned by PSI
    python jobs/train.py --checkpoint-dir ckpt            # run again after a failure: it resumes

Under ``ray job submit`` the runtime attaches to the cluster, whose nodes must
declare the parties' resources (``vfl_party0`` ...; see cluster.yaml).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time

from ray_vfl import (
    EvaluationLogger,
    ProgressBar,
    Runtime,
    SecureBoostClassifier,
    SecureBoostRegressor,
    VerticalDataset,
    vertical_split,
)
from ray_vfl.data.bundled import NAMED_DATASETS, load_named
from ray_vfl.data.sources import read_table
from ray_vfl.errors import VFLError
from ray_vfl.trees.callbacks import TreeTimer


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--dataset", default="credit", help=f"one of {sorted(NAMED_DATASETS)} or a CSV/Parquet path")
    p.add_argument("--data-dir", default=None, help="folder holding the non-bundled named datasets")
    p.add_argument("--label", default=None, help="label column when --dataset is a path")
    p.add_argument("--objective", default="binary:logistic", choices=["binary:logistic", "reg:squarederror"],
                   help="objective when --dataset is a path")
    p.add_argument("--parties", type=int, default=2, help="parties to split the columns over (one holds the labels)")
    p.add_argument("--party-files", nargs="+", default=None, metavar="PARTY=PATH",
                   help="one CSV/Parquet file per party (IDs may differ); rows are aligned by PSI, --label names "
                        "the label column, --dataset and --parties are ignored")
    p.add_argument("--id-column", default="id", help="ID column of the --party-files tables")
    p.add_argument("--trees", type=int, default=10, help="boosting rounds")
    p.add_argument("--depth", type=int, default=5, help="maximum tree depth")
    p.add_argument("--bins", type=int, default=32, help="quantile bins per feature (max_bin)")
    p.add_argument("--learning-rate", type=float, default=0.3, help="shrinkage of each tree (eta)")
    p.add_argument("--key-bits", type=int, default=2048, help="key size of the encrypted backends (at least 1024)")
    p.add_argument("--backend", default="paillier", help="paillier, ou, phe or plain (no encryption: tests and baselines only)")
    p.add_argument("--workers", type=int, default=None, help="crypto tasks per party (None: the party's CPUs, split between passive parties that share a machine)")
    p.add_argument("--test-size", type=float, default=0.2, help="fraction of rows held out for the test AUC / RMSE")
    p.add_argument("--seed", type=int, default=0, help="seed of the column split and the train/test split")
    p.add_argument("--checkpoint-dir", default=None,
                   help="each party saves its training state here (on its own machine); a run with the same "
                        "folder resumes from the last tree every party saved")
    p.add_argument("--checkpoint-every", type=int, default=1, help="trees between checkpoints")
    p.add_argument("--json", default=None, help="write every reported figure to this JSON file")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    return p.parse_args(argv)


def psi_aligned(args, runtime: Runtime):
    """The --party-files tables, each opened by its own party's actor and aligned by private set
    intersection among the parties: this driver never reads a party file."""
    if args.label is None:
        sys.exit("--label is required with --party-files")
    bad = [spec for spec in args.party_files if "=" not in spec]
    if bad:
        sys.exit(f"--party-files takes PARTY=PATH pairs, got {bad}")
    paths = dict(spec.split("=", 1) for spec in args.party_files)  # each file is read by its own party's actor
    return VerticalDataset.from_files(paths, id_column=args.id_column, label=args.label, align="psi", runtime=runtime)


def main(argv=None) -> dict:
    args = parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    runtime = Runtime()
    if args.party_files:
        data, objective = psi_aligned(args, runtime), args.objective
        args.parties = len(data.party_names)
    elif os.path.exists(args.dataset):
        if args.label is None:
            sys.exit("--label is required when --dataset is a file")
        frame, label, cats, objective = read_table(args.dataset), args.label, [], args.objective
    else:
        frame, label, cats, objective = load_named(args.dataset, args.data_dir)
    if not args.party_files:
        data = vertical_split(frame, args.parties, label=label, categorical=cats, seed=args.seed)
    train, test = data.train_test_split(args.test_size, seed=args.seed)
    Model = SecureBoostClassifier if objective == "binary:logistic" else SecureBoostRegressor
    timer = TreeTimer()
    model = Model(
        n_estimators=args.trees, max_depth=args.depth, max_bin=args.bins, learning_rate=args.learning_rate,
        backend=args.backend, key_bits=args.key_bits, workers_per_party=args.workers, runtime=runtime,
        callbacks=[timer] + ([] if args.quiet else [ProgressBar(), EvaluationLogger()]),
    )
    start = time.perf_counter()
    model.fit(train, checkpoint_dir=args.checkpoint_dir, checkpoint_every=args.checkpoint_every)
    fit_s = time.perf_counter() - start
    model.predict_margin(test)
    wall_s = time.perf_counter() - start
    report = {
        "dataset": args.dataset, "rows_train": int(train.n_rows), "rows_test": int(test.n_rows),
        "features": int(data.n_features()), "parties": args.parties, "trees": int(model.n_trees_),
        "depth": args.depth, "bins": args.bins, "backend": args.backend, "key_bits": args.key_bits,
        "fit_s": round(fit_s, 3), "trees_s": round(timer.seconds, 3), "wall_s": round(wall_s, 3),
        "s_per_tree": round(timer.seconds / model.n_trees_, 3),
        "mb_exchanged": round(model.comm_stats_.total_mb, 3), "mb_by_channel": model.comm_stats_.by_channel(),
        "mb_by_kind": model.comm_stats_.by_kind(),
    }
    if args.party_files:
        report["psi"] = {"aligned_rows": int(data.n_rows), "mb_exchanged": round(data.psi_stats.total_mb, 3),
                         "unaligned_rows": dict(data.unaligned)}
    metrics = model.model_.evaluate(test)  # by the label party, from its own labels
    if objective == "binary:logistic":
        report["test_auc"] = round(metrics["auc"], 5)
    else:
        report["test_rmse"] = round(metrics["rmse"], 5)
    quality = f"test AUC {report['test_auc']:.4f}" if "test_auc" in report else f"test RMSE {report['test_rmse']:.4f}"
    print(f"{quality} | wall time {wall_s:.1f} s (fit {fit_s:.1f} s, {report['s_per_tree']:.2f} s/tree) | "
          f"{report['mb_exchanged']:.1f} MB exchanged | {args.parties} parties, {args.backend} {args.key_bits}-bit")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(report, fh, indent=2)
    runtime.shutdown()
    return report


if __name__ == "__main__":
    try:
        main()
    except VFLError as exc:  # bad input or a failed party: the message names the problem and the fix
        sys.exit(f"error: {exc}")
