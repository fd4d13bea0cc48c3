"""Train SecureBoost on a vertically split dataset and report test quality, wall time and traffic.

Runs the same way on a laptop (starts a local Ray) and on a cluster::

    python jobs/train.py                                  # credit data, 2 parties, Paillier 2048
    ray job submit --address http://HEAD:8265 --working-dir . -- python jobs/train.py --parties 3
    python jobs/train.py --party-files bank=bank.csv shop=shop.csv --id-column ID --label y   # aligned by PSI
    python jobs/train.py --checkpoint-dir ckpt            # run again after a failure: it resumes
    python jobs/train.py --federation federation.yaml --party bank --cert bank.pem --key bank.key --ca ca.pem \
        --party-files bank=bank.csv shop=shop.parquet --id-column cid --label y   # across organisations
    python jobs/train.py --dataset loans.csv --label y --weight-column w   # weighted rows (the label party's column)
    python jobs/train.py --dataset sales.csv --label y --categorical city,channel --objective reg:squarederror \
        --gradient-bound 1e6
    python jobs/train.py --dataset iris.csv --label species --objective multi:softprob   # K classes: accuracy, mlogloss

Every option is checked before Ray starts; a bad one ends the job with ``error: <what and how to fix it>``
and exit code 1 (as do bad data and failed parties). Warnings print as ``warning: ...`` lines.

The result line's wall time is the whole process's (Python's start, imports, reading the data,
starting Ray, training, testing); ``fit`` is the training alone, with the parties' set-up::

    test AUC 0.7552 | wall time 21.3 s for the whole process (fit 17.9 s, 0.33 s/tree) | 17.9 MB exchanged | 2 parties, plain (no encryption)

Under ``ray job submit`` the runtime attaches to the cluster, whose nodes must
declare the parties' resources (``vfl_party0`` ...; see cluster.yaml).
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import re
import sys
import time
import warnings

import numpy as np

from ray_vfl import (
    BoostConfig,
    EvaluationLogger,
    ProgressBar,
    Runtime,
    SecureBoostClassifier,
    SecureBoostRegressor,
    VerticalDataset,
    vertical_split,
)
from ray_vfl.crypto import get_backend
from ray_vfl.data.bundled import NAMED_DATASETS, data_dirs, load_named
from ray_vfl.data.weights import check_sample_weight
from ray_vfl.data.sources import read_table
from ray_vfl.errors import ConfigError, DataError, VFLError
from ray_vfl.trees.callbacks import TreeTimer


STUDIES = ("the paper studies (hours): python jobs/experiment.py --config NAME, e.g. secureboost_scaling_parties "
           "(python jobs/experiment.py --help lists them)")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter,
                                epilog=f"With no options: one training on credit, about a minute; {STUDIES}.")
    p.add_argument("--dataset", default="credit", help=f"one of {sorted(NAMED_DATASETS)} or a CSV/Parquet path")
    p.add_argument("--data-dir", default=None,
                   help="folder holding the non-bundled named datasets (default: $VFL_DATA_DIR, then the shipped ray_vfl/data/files)")
    p.add_argument("--label", default=None, help="label column when --dataset is a path, or of the --party-files tables")
    p.add_argument("--objective", default=None, choices=["binary:logistic", "reg:squarederror", "multi:softprob",
                                                         "multi:softmax"],
                   help="objective when --dataset is a path or with --party-files (default: from the labels, as "
                        "xgboost's scikit-learn wrapper: binary:logistic for 0/1 labels, multi:softprob for more classes)")
    p.add_argument("--multi-strategy", default="one_output_per_tree", choices=["one_output_per_tree", "multi_output_tree"],
                   help="multi-class trees: one per class and round, or one per round with K leaf weights (every row's "
                        "K gradient pairs packed in one ciphertext)")
    p.add_argument("--parties", type=int, default=2, help="parties to split the columns over (one holds the labels)")
    p.add_argument("--party-files", nargs="+", default=None, metavar="PARTY=PATH",
                   help="one CSV/Parquet file per party (IDs may differ); rows are aligned by PSI, --label names "
                        "the label column, --dataset and --parties are ignored")
    p.add_argument("--id-column", default="id", help="ID column of the --party-files tables")
    p.add_argument("--weight-column", default=None,
                   help="sample-weight column (finite, non-negative), kept with the labels at the label party and "
                        "taken out of the features; weighs every row's gradients and the test metrics")
    p.add_argument("--scale-pos-weight", type=float, default=1.0,
                   help="weight of the rows labelled 1 relative to those labelled 0 (xgboost's scale_pos_weight)")
    p.add_argument("--categorical", nargs="+", default=[], metavar="[PARTY=]COL,...",
                   help="categorical (non-numeric) columns, encoded inside their party: PARTY=COL,... with "
                        "--party-files; COL,... (or PARTY=COL,... to check where it lands) for a split table")
    p.add_argument("--enable-categorical", action="store_true",
                   help="split the categorical columns by sets of categories (xgboost's enable_categorical), chosen "
                        "with the label party and kept at the party holding the column; default: their ordinal codes")
    p.add_argument("--max-cat-to-onehot", type=int, default=4,
                   help="with --enable-categorical, columns of fewer categories split one category against the rest")
    p.add_argument("--trees", type=int, default=10, help="boosting rounds")
    p.add_argument("--depth", type=int, default=5, help="maximum tree depth")
    p.add_argument("--bins", type=int, default=32, help="quantile bins per feature (max_bin)")
    p.add_argument("--learning-rate", type=float, default=0.3, help="shrinkage of each tree (eta)")
    p.add_argument("--key-bits", type=int, default=2048, help="key size of the encrypted backends (2048 or more)")
    p.add_argument("--allow-weak-keys", action="store_true",
                   help="accept --key-bits 1024 (about 80 bits of security): tests and benchmarks only")
    p.add_argument("--gradient-bound", type=float, default=None,
                   help="largest |gradient| the encrypted encoding holds (regression: labels may lie up to half of it "
                        "from their mean; default 65536, or 1 for binary:logistic)")
    p.add_argument("--backend", default="paillier", help="paillier, ou, phe or plain (no encryption: tests and baselines only)")
    p.add_argument("--workers", type=int, default=None, help="crypto tasks per party (None: the party's CPUs, split between passive parties that share a machine)")
    p.add_argument("--test-size", type=float, default=0.2, help="fraction of rows held out for the test AUC / RMSE")
    p.add_argument("--seed", type=int, default=0, help="seed of the column split and the train/test split")
    p.add_argument("--checkpoint-dir", default=None,
                   help="each party saves its training state here (on its own machine); a run with the same "
                        "folder resumes from the last tree every party saved")
    p.add_argument("--checkpoint-every", type=int, default=1, help="trees between checkpoints")
    p.add_argument("--json", default=None, help="write every reported figure to this JSON file")
    p.add_argument("--federation", default=None,
                   help="federation.yaml: run across organisations, this party coordinating and every other party "
                        "serving its roles on its own Ray cluster (python -m ray_vfl.serve); needs --party-files, "
                        "naming each other party's file by the name it serves it under")
    p.add_argument("--party", default=None, help="with --federation: this party's name in the federation file")
    p.add_argument("--cert", default=None, help="with --federation: this party's certificate (PEM)")
    p.add_argument("--key", default=None, help="with --federation: this party's private key (PEM)")
    p.add_argument("--ca", default=None, help="with --federation: the federation's CA certificate (PEM)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    return p.parse_args(argv)


def _pairs(specs: list[str], option: str, what: str) -> list[tuple[str, str]]:
    """``PARTY=VALUE`` items of a list option, or ConfigError naming the bad ones."""
    bad = [s for s in specs if "=" not in s or not s.split("=", 1)[0] or not s.split("=", 1)[1]]
    if bad:
        raise ConfigError(f"{option} takes PARTY={what} items, got {bad}")
    return [tuple(s.split("=", 1)) for s in specs]


def _categorical(args) -> dict[str | None, list[str]]:
    """--categorical as {party or None: columns}."""
    out: dict[str | None, list[str]] = {}
    for spec in args.categorical:
        party, _, cols = spec.rpartition("=")
        names = [c.strip() for c in cols.split(",") if c.strip()]
        if not names or (party == "" and "=" in spec):
            raise ConfigError(f"--categorical takes PARTY=COL,COL or COL,COL items, got {spec!r}")
        out.setdefault(party or None, []).extend(names)
    return out


def check_options(args) -> tuple[BoostConfig, dict]:
    """Every option checked before anything starts: the config (and its backend), the data options."""
    cats = _categorical(args)
    get_backend(args.backend)  # an unknown or uninstalled backend is a ConfigError here, before Ray starts
    if not 0.0 < args.test_size < 1.0:
        raise ConfigError(f"--test-size must be in (0, 1), got {args.test_size}")
    if args.workers is not None and args.workers < 1:
        raise ConfigError(f"--workers must be at least 1, got {args.workers}")
    if args.json:
        folder = os.path.dirname(os.path.abspath(args.json))
        if not os.path.isdir(folder):
            raise ConfigError(f"--json {args.json}: the folder {folder!r} does not exist; create it first")
    if args.federation is not None:
        missing = [f"--{n}" for n in ("party", "cert", "key", "ca") if getattr(args, n) is None]
        if missing or not args.party_files:
            raise ConfigError(f"--federation needs {missing + ([] if args.party_files else ['--party-files'])}: this "
                              "party's name and credentials, and one file per party (the others' by the name they serve)")
        if args.checkpoint_dir is not None:
            raise ConfigError("--checkpoint-dir is not supported with --federation yet")
    elif any(getattr(args, n) is not None for n in ("party", "cert", "key", "ca")):
        raise ConfigError("--party, --cert, --key and --ca go with --federation")
    if args.party_files:
        if args.label is None:
            raise ConfigError("--label is required with --party-files")
        files = dict(_pairs(args.party_files, "--party-files", "PATH"))
        if len(files) < 2:
            raise ConfigError(f"--party-files needs at least two parties (the label party and one more), got {list(files)}")
        if None in cats:
            raise ConfigError(f"with --party-files, name each categorical column's party: --categorical PARTY=COL,... "
                              f"(got {cats[None]})")
        unknown = sorted(set(cats) - set(files))
        if unknown:
            raise ConfigError(f"--categorical names part(y/ies) {unknown} that are not among --party-files {list(files)}")
    else:
        if not os.path.exists(args.dataset) and args.dataset not in NAMED_DATASETS:
            load_named(args.dataset, args.data_dir)  # raises: a path that does not exist, or an unknown name
        if os.path.exists(args.dataset) and args.label is None:
            raise ConfigError("--label is required when --dataset is a file")
    try:
        config = BoostConfig(n_trees=args.trees, max_depth=args.depth, max_bin=args.bins,
                             learning_rate=args.learning_rate, objective=args.objective or "binary:logistic",
                             num_class=2 if (args.objective or "").startswith("multi:") else None,  # checked here,
                             multi_strategy=args.multi_strategy, backend=args.backend,  # K comes from the labels
                             key_bits=args.key_bits, allow_weak_keys=args.allow_weak_keys,
                             workers_per_party=args.workers, gradient_bound=args.gradient_bound,
                             scale_pos_weight=args.scale_pos_weight, enable_categorical=args.enable_categorical,
                             max_cat_to_onehot=args.max_cat_to_onehot)
    except ConfigError as exc:  # the library's parameter names, as this job spells them
        raise ConfigError(_as_flags(str(exc))) from None
    return config, cats


def _as_flags(message: str) -> str:
    for name, flag in (("allow_weak_keys=True", "--allow-weak-keys"), ("key_bits", "--key-bits"),
                       ("n_trees", "--trees"), ("max_depth", "--depth"), ("max_bin", "--bins"),
                       ("learning_rate", "--learning-rate"), ("gradient_bound", "--gradient-bound"),
                       ("workers_per_party", "--workers"), ("scale_pos_weight", "--scale-pos-weight"),
                       ("multi_strategy='one_output_per_tree'", "--multi-strategy one_output_per_tree"),
                       ("enable_categorical=True", "--enable-categorical"), ("enable_categorical=False", "no --enable-categorical"),
                       ("max_cat_to_onehot", "--max-cat-to-onehot"), ("multi_strategy", "--multi-strategy")):
        message = message.replace(name, flag)
    return message


def local_data(args, cats: dict):
    """The --dataset table, split over --parties (read here, before Ray starts)."""
    if os.path.exists(args.dataset):
        frame, label, named_cats, objective = read_table(args.dataset), args.label, [], args.objective
        if label not in frame.columns:
            raise DataError(f"{args.dataset!r} has no label column {label!r}; its columns are {list(frame.columns)}")
    else:
        folders = [args.data_dir] if args.data_dir else data_dirs()
        frame, label, named_cats, objective = load_named(args.dataset, folders)
    weight = None
    if args.weight_column is not None:
        if args.weight_column not in frame.columns or args.weight_column == label:
            raise DataError(f"--weight-column {args.weight_column!r} is not a column of {args.dataset!r} besides the "
                            f"label; its columns are {list(frame.columns)}")
        weight = check_sample_weight(frame[args.weight_column].to_numpy(dtype=float, na_value=np.nan), len(frame),
                                     f"--weight-column {args.weight_column!r}")
        frame = frame.drop(columns=[args.weight_column])
    n_features = len(frame.columns) - 1  # every column but the label
    if not 2 <= args.parties <= n_features:
        raise ConfigError(f"--parties must be in [2, {n_features}]: {args.dataset!r} has {n_features} feature columns "
                          f"(the label party and at least one more; one column each at least), got {args.parties}")
    wanted = [c for cols in cats.values() for c in cols]
    missing = [c for c in wanted if c not in frame.columns]
    if missing:
        raise DataError(f"--categorical column(s) {missing} are not in {args.dataset!r}; its columns are {list(frame.columns)}")
    data = vertical_split(frame, args.parties, label=label, categorical=list(named_cats) + wanted,
                          seed=args.seed).with_weights(weight)  # the weights travel with the labels
    for party, cols in cats.items():
        if party is None:
            continue
        if party not in data.party_names:
            raise ConfigError(f"--categorical {party}=...: the split's parties are {data.party_names}")
        elsewhere = [c for c in cols if c not in data.columns(party)]
        if elsewhere:
            raise DataError(f"--categorical {party}=...: column(s) {elsewhere} went to another party with "
                            f"--seed {args.seed}; drop the party name (COL,...) to let the column go anywhere")
    return data, objective


def psi_aligned(args, cats: dict, runtime: Runtime):
    """The --party-files tables, each opened by its own party's actor and aligned by private set
    intersection among the parties: this driver never reads a party file."""
    paths = dict(_pairs(args.party_files, "--party-files", "PATH"))
    return VerticalDataset.from_files(paths, id_column=args.id_column, label=args.label, categorical=cats,
                                      align="psi", runtime=runtime, weight=args.weight_column)


_LOADED = time.monotonic()


def process_seconds() -> float:
    """Wall-clock seconds since this process started: on Linux from the kernel's record of the process
    (``/proc``), so Python's start and every import count too; elsewhere since this script was loaded."""
    try:
        with open("/proc/self/stat", encoding="ascii") as fh:
            start_ticks = int(fh.read().rsplit(")", 1)[1].split()[19])  # field 22, starttime, after "pid (comm)"
        with open("/proc/uptime", encoding="ascii") as fh:
            return float(fh.read().split()[0]) - start_ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return time.monotonic() - _LOADED


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """Warnings as one ``warning: ...`` line each, for a command-line user."""
    print(f"warning: {message}", file=sys.stderr if file is None else file)


def main(argv=None) -> dict:
    args = parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    warnings.showwarning = _show_warning
    config, cats = check_options(args)  # before anything starts
    data = None
    if not args.party_files:  # a local table is read and split here, before Ray starts
        data, objective = local_data(args, cats)
        if objective is not None and objective != config.objective:  # a named dataset's own (energy: regression)
            config = config.replace(objective=objective, num_class=2 if objective.startswith("multi:") else None)
        args.objective = objective  # None: the classifier picks it from the labels
        split = data.train_test_split(args.test_size, seed=args.seed)
        binary = objective == "binary:logistic" or (objective is None and np.isin(split[0].label, (0, 1)).all())
        if binary and len(np.unique(split[1].label)) < 2:
            raise DataError(_ONE_CLASS.format(n=split[1].n_rows))
    runtime = Runtime() if args.federation is None else federated_runtime(args)
    try:
        return _run(args, config, cats, runtime, data, *([] if data is None else split))
    finally:
        runtime.shutdown()


def federated_runtime(args):
    """This party's runtime across organisations: its own roles on its own Ray, the others' through their gateways."""
    from ray_vfl.runtime.federation.coordinator import FederatedRuntime

    return FederatedRuntime(args.federation, args.party, {"cert": args.cert, "key": args.key, "ca": args.ca})


_ONE_CLASS = "test AUC is undefined: the {n} test rows hold one class only; raise --test-size or use more rows"


def _run(args, config: BoostConfig, cats: dict, runtime: Runtime, data=None, train=None, test=None) -> dict:
    objective = args.objective  # None: binary or multi-class, from the labels
    if data is None:
        data = psi_aligned(args, cats, runtime)
        args.parties = len(data.party_names)
        train, test = data.train_test_split(args.test_size, seed=args.seed)
    Model, classes = (SecureBoostRegressor, {}) if objective == "reg:squarederror" else (SecureBoostClassifier, {
        "objective": objective, "multi_strategy": args.multi_strategy})
    timer = TreeTimer()
    model = Model(**classes,
        n_estimators=config.n_trees, max_depth=config.max_depth, max_bin=config.max_bin,
        learning_rate=config.learning_rate, backend=config.backend, key_bits=config.key_bits,
        allow_weak_keys=config.allow_weak_keys, workers_per_party=config.workers_per_party,
        gradient_bound=args.gradient_bound, scale_pos_weight=args.scale_pos_weight, runtime=runtime,
        enable_categorical=config.enable_categorical, max_cat_to_onehot=config.max_cat_to_onehot,
        callbacks=[timer] + ([] if args.quiet else [ProgressBar(), EvaluationLogger()]),
    )
    start = time.perf_counter()
    model.fit(train, checkpoint_dir=args.checkpoint_dir, checkpoint_every=args.checkpoint_every)
    fit_s = time.perf_counter() - start
    model.predict_margin(test)
    report = {
        "dataset": "party-files" if args.party_files else args.dataset,
        "rows_train": int(train.n_rows), "rows_test": int(test.n_rows),
        "features": int(data.n_features()), "parties": args.parties, "trees": int(model.n_trees_),
        "depth": args.depth, "bins": args.bins, "backend": args.backend,
        "key_bits": None if args.backend == "plain" else args.key_bits,  # a plain backend has no key
        "fit_s": round(fit_s, 3), "trees_s": round(timer.seconds, 3),
        "s_per_tree": round(timer.seconds / model.n_trees_, 3),
        "mb_exchanged": round(model.comm_stats_.total_mb, 3), "mb_by_channel": model.comm_stats_.by_channel(),
        "mb_by_kind": model.comm_stats_.by_kind(),
        "weight_column": args.weight_column, "scale_pos_weight": args.scale_pos_weight,
    }
    if args.party_files:
        report["party_files"] = dict(_pairs(args.party_files, "--party-files", "PATH"))
        report["psi"] = {"aligned_rows": int(data.n_rows), "mb_exchanged": round(data.psi_stats.total_mb, 3),
                         "unaligned_rows": dict(data.unaligned)}
    with warnings.catch_warnings():  # an undefined AUC is this job's error, below
        warnings.filterwarnings("ignore", message="AUC is undefined")
        metrics = model.model_.evaluate(test)  # by the label party, from its own labels
    if "merror" in metrics:  # multi-class
        report["classes"] = int(len(model.classes_))
        report["test_accuracy"], report["test_mlogloss"] = round(1.0 - metrics["merror"], 5), round(metrics["mlogloss"], 5)
    elif "auc" in metrics:
        if not math.isfinite(metrics["auc"]):  # party-held test labels: known only to the label party
            raise DataError(_ONE_CLASS.format(n=test.n_rows))
        report["test_auc"] = round(metrics["auc"], 5)
    else:
        report["test_rmse"] = round(metrics["rmse"], 5)
    quality = (f"test AUC {report['test_auc']:.4f}" if "test_auc" in report else
               f"test accuracy {report['test_accuracy']:.4f} ({report['classes']} classes, mlogloss "
               f"{report['test_mlogloss']:.4f})" if "test_accuracy" in report else f"test RMSE {report['test_rmse']:.4f}")
    report["wall_s"] = round(process_seconds(), 3)  # the whole process: start-up, imports, data, Ray, fit, test
    crypto = "plain (no encryption)" if args.backend == "plain" else f"{args.backend} {args.key_bits}-bit"
    print(f"{quality} | wall time {report['wall_s']:.1f} s for the whole process (fit {fit_s:.1f} s, "
          f"{report['s_per_tree']:.2f} s/tree) | {report['mb_exchanged']:.1f} MB exchanged | {args.parties} parties, {crypto}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(report, fh, indent=2)
    return report


# the library's advice for a text column, as a Python caller writes it: categorical={'shop': ['city']}
_CATEGORICAL_KWARG = re.compile(r"categorical=\{'([^']+)': \['([^']+)'\]\}")


def _as_cli(message: str) -> str:
    """A library message as this job's user acts on it: the ``--categorical PARTY=COL`` flag, not the
    Python keyword (``PARTY=`` is optional for a split table, and right either way)."""
    return _CATEGORICAL_KWARG.sub(r"--categorical \1=\2", message)


def cli(argv=None) -> dict:
    """:func:`main` as the command line runs it: bad input exits with status 1 and one ``error:`` line."""
    try:
        report = main(argv)
    except ConfigError as exc:  # a bad option: named as this job spells it
        sys.exit(f"error: {_as_cli(_as_flags(str(exc)))}")
    except VFLError as exc:  # bad input or a failed party: the message names the problem and the fix
        sys.exit(f"error: {_as_cli(str(exc))}")
    except KeyboardInterrupt:  # Ctrl-C: one line, the status a shell gives an interrupted command
        print("interrupted: with --checkpoint-dir the same command resumes from the last tree every party saved; "
              "without it nothing is saved", file=sys.stderr)
        sys.exit(130)
    if not (sys.argv[1:] if argv is None else argv):  # run with no options: say what runs the full studies
        print(STUDIES)
    return report


if __name__ == "__main__":
    cli()
