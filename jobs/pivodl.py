"""PIVODL studies on Ray: the paper's metric, training time and traffic against the number of clients,
the maximum depth, the number of trees and the DP budget, with and without encryption; and its label-guess
table (Table III). Writes CSV, JSON and PNG plots::

    python jobs/pivodl.py                                              # a small version, about a minute
    python jobs/pivodl.py --full                                       # the paper's studies (hours: Paillier 2048)
    python jobs/pivodl.py --datasets energy --studies clients --backends paillier --key-bits 1024 --allow-weak-keys
    ray job submit --address http://HEAD:8265 --working-dir . -- python jobs/pivodl.py --full

A study varies one setting (``clients``, ``depth``, ``trees`` or ``epsilon``) with the others at their
defaults (``--clients-default`` etc.), for every dataset (credit and bank marketing: test accuracy;
appliances energy: test RMSE in Wh) and every backend (``plain``: no encryption; ``paillier``/``ou``).
PIVODL is lossless: without DP the encrypted trees equal the plaintext ones, so the metric is the same
for every backend and only time and traffic differ. Each point runs ``--repeats`` times (a new label
spread and train/test split per repeat: seed = repeat); the summary holds mean, std, min and max.
Labels are spread evenly over the clients (``vertical_split(..., label_owners=...)``), the split is
80/20 (stratified for classification). Files in ``--out``: ``runs.jsonl`` (each run as it finishes; the
same command after Ctrl-C runs only the others), ``runs.csv`` (every run), ``summary.csv`` (per point),
``label_guess.csv``, ``results.json`` and one ``<dataset>_<study>.png`` per study (mean with the min-max
band over repeats).
"""

from __future__ import annotations

import argparse
import csv
import functools
import json
import logging
import os
import sys
import time
import warnings

import numpy as np


# None: ray_vfl.data.bundled.data_dirs() -- $VFL_DATA_DIR, then the shipped ray_vfl/data/files
DATA_DIR = None
DATASETS = ("credit", "bank", "energy")
STUDIES = ("clients", "depth", "trees", "epsilon")
BACKENDS = ("plain", "paillier", "ou")
NO_DP = "none"
RUN_COLUMNS = ["dataset", "study", "value", "backend", "key_bits", "clients", "max_depth", "n_trees", "epsilon",
               "repeat", "metric_name", "metric", "accuracy", "auc", "rmse", "train_s", "fit_s", "mb",
               "epsilon_accounted", "encrypt", "add", "decrypt", "train_rows", "test_rows"]
GUESS_COLUMNS = ["dataset", "clients", "epsilon", "repeat", "guess_accuracy", "guess_auc", "guess_auc_two_sided",
                 "guess_partition_auc_two_sided", "test_accuracy", "test_auc", "epsilon_accounted", "attackers"]
STUDY_AXES = {"clients": "number of clients", "depth": "maximum depth", "trees": "number of trees",
              "epsilon": "DP budget epsilon (whole training)"}

log = logging.getLogger("jobs.pivodl")


# -- shared with benchmarks/pivodl.py -------------------------------------------------------------------
def load_split(dataset: str, clients: int, data_dir: str | None = None, rows: int | None = None, seed: int = 0):
    """``(train, test, objective)``: the dataset's columns dealt evenly to ``clients`` clients, its labels
    spread evenly over them, 80/20 split (stratified for classification); ``rows`` subsamples first."""
    from ray_vfl import vertical_split
    from ray_vfl.data.bundled import load_named

    frame, label, cats, objective = load_named(dataset, data_dir)
    if rows and rows < len(frame):
        frame = frame.sample(n=rows, random_state=seed).reset_index(drop=True)
    owners = {f"party{i}": 1.0 / clients for i in range(clients)}
    data = vertical_split(frame, clients, label=label, categorical=cats, label_owners=owners, seed=seed)
    train, test = data.train_test_split(0.2, seed=seed, stratify=objective == "binary:logistic")
    return train, test, objective


def pivodl_config(objective: str, trees: int, depth: int, backend: str = "plain", key_bits: int = 2048,
                  epsilon: float | None = None, gradient_bound: float = 4096.0, leaf_clip: float = 100.0,
                  bins: int = 32, instance_threshold: int | None = None):
    """The configuration every study uses; ``gradient_bound`` and ``leaf_clip`` apply to regression
    (logistic gradients are bounded by 1 and the leaf clip defaults to 1); ``instance_threshold`` None keeps
    the library's default (PIVODLConfig: the one that stops the split client's differential attack)."""
    from ray_vfl.pivodl import PIVODLConfig

    regression = objective == "reg:squarederror"
    return PIVODLConfig(n_trees=trees, max_depth=depth, max_bin=bins, backend=backend, key_bits=key_bits,
                        allow_weak_keys=key_bits < 2048, objective=objective,
                        gradient_bound=gradient_bound if regression else None, epsilon=epsilon,
                        leaf_clip=leaf_clip if regression and epsilon is not None else None,
                        **({} if instance_threshold is None else {"instance_threshold": instance_threshold}))


def test_metrics(objective: str, y: np.ndarray, pred: np.ndarray) -> dict[str, float]:
    """Accuracy and AUC (classification, from probabilities) or RMSE (regression, in the label's unit)."""
    from ray_vfl.metrics import auc

    if objective == "binary:logistic":
        return {"accuracy": float(np.mean((pred > 0.5) == (y == 1))), "auc": auc(y, pred), "rmse": float("nan")}
    return {"accuracy": float("nan"), "auc": float("nan"), "rmse": float(np.sqrt(np.mean((pred - y) ** 2)))}


def run_pivodl(runtime, train, test, config, eval_sets=None, label: str | None = None,
               bar: bool = False) -> tuple[dict, object]:
    """Train one PIVODL model; ``(row, model)``: test metrics (computed from the predictions by the
    experimenter, who holds every label in simulation), tree wall time, fit time, MB, op counts. With a
    ``label``, a log line names each tree that took a minute or more (and ``bar`` draws a bar over the trees)."""
    from ray_vfl.experiments.progress import TreeProgress
    from ray_vfl.pivodl import train as train_pivodl
    from ray_vfl.trees.callbacks import TreeTimer

    timer = TreeTimer()
    callbacks = [timer] + ([TreeProgress(label, timer, bar)] if label else [])
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # SecurityWarning for plain/1024-bit runs: studied on purpose
        model = train_pivodl(runtime, train, config, eval_sets=eval_sets, callbacks=callbacks)
    fit_s = time.perf_counter() - start
    row = test_metrics(config.objective, test.label, model.predict(test))
    ops = model.op_counts
    row.update(train_s=timer.seconds, fit_s=fit_s, mb=model.comm_stats.total_mb, encrypt=ops.get("encrypt", 0),
               add=ops.get("add", 0), decrypt=ops.get("decrypt", 0), train_rows=len(train.label),
               test_rows=len(test.label), epsilon_accounted=model.epsilon if model.epsilon is not None else float("nan"))
    return row, model


def xgboost_metrics(train, test, objective: str, trees: int, depth: int, bins: int = 32,
                    learning_rate: float = 0.3, reg_lambda: float = 1.0, min_child_weight: float = 1.0,
                    on_bins: bool = False) -> dict:
    """Centralized xgboost (hist) on the same split and columns, categoricals coded as each client codes
    them, with PIVODL's hyper-parameters and base score (the training label mean). ``on_bins``: on the
    clients' own bin indices instead of the values (missing as NaN), so that xgboost's candidate splits
    are PIVODL's and only the two implementations differ, not their binning."""
    import xgboost as xgb

    from ray_vfl.data.binning import PartyBinner, encode_party_frame
    from ray_vfl.trees.kernels import base_score_of

    books = {p: PartyBinner(bins).fit(train.features[p], train.categorical.get(p, []), p) for p in train.party_names}

    def stacked(d):
        if on_bins:
            binned = [books[p].transform(d.features[p], party=p).astype(np.float64) for p in d.party_names]
            x = np.concatenate(binned, axis=1)
            x[x == bins] = np.nan  # the missing bin
            return x
        return np.concatenate([encode_party_frame(d.features[p], books[p].categorical, p, books[p].categories)[0]
                               for p in d.party_names], axis=1)

    estimator = xgb.XGBClassifier if objective == "binary:logistic" else xgb.XGBRegressor
    model = estimator(n_estimators=trees, max_depth=depth, learning_rate=learning_rate, reg_lambda=reg_lambda,
                      min_child_weight=min_child_weight, max_bin=bins, tree_method="hist",
                      base_score=base_score_of(objective, train.label), n_jobs=os.cpu_count())
    start = time.perf_counter()
    model.fit(stacked(train), train.label)
    seconds = time.perf_counter() - start
    xte = stacked(test)
    pred = model.predict_proba(xte)[:, 1] if objective == "binary:logistic" else model.predict(xte)
    return {**test_metrics(objective, test.label, pred), "seconds": seconds}


def label_guess_row(model, train) -> dict[str, float]:
    """Mean over attacking clients of the label-guess report (the paper's Table III, and the partition
    score beside it), plus each client's."""
    from ray_vfl.pivodl import label_guess_report

    report = label_guess_report(model.label_guess_scores(), train.label)
    keys = ("accuracy", "auc", "auc_two_sided", "partition_auc_two_sided")
    mean = {k: float(np.nanmean([r[k] for r in report.values()])) for k in keys}
    return {"guess_accuracy": mean["accuracy"], "guess_auc": mean["auc"], "guess_auc_two_sided": mean["auc_two_sided"],
            "guess_partition_auc_two_sided": mean["partition_auc_two_sided"], "attackers": len(report), "per_client": report}


# -- the job ----------------------------------------------------------------------------------------------
def _epsilon(text: str) -> float | None:
    if text.lower() in (NO_DP, "inf"):
        return None
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"epsilon must be a positive number or '{NO_DP}', got {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"epsilon must be > 0 (or '{NO_DP}' for no DP), got {text!r}")
    return value


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


# With no options the job runs a small version of the studies (about a minute); --full runs the paper's.
SMALL = {"datasets": ["credit", "energy"], "rows": 1500, "clients": [2, 3], "depths": [2, 3], "trees": [2, 3], "epsilons": [None, 4.0], "clients_default": 3,
         "depth_default": 3, "trees_default": 2, "repeats": 1, "key_bits": 1024, "out": "results/pivodl_small"}
FULL = {"datasets": list(DATASETS), "rows": None, "clients": [2, 4, 6, 8, 10], "depths": [3, 4, 5, 6], "trees": [5, 10, 20],
        "epsilons": [None, 1.0, 4.0, 16.0, 64.0], "clients_default": 4, "depth_default": 5, "trees_default": 10,
        "repeats": 5, "key_bits": 2048, "out": "results/pivodl"}


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter,
                                allow_abbrev=False, epilog="With no options: a small version of every study on credit "
                                "and energy (about a minute, into results/pivodl_small). The paper's studies: --full (hours).")
    p.add_argument("--full", action="store_true",
                   help="the paper's studies (hours: Paillier 2048): credit, bank and energy, every row, clients 2-10, depths 3-6, trees 5-20, "
                        "epsilons none/1/4/16/64 (default 4 clients, depth 5, 10 trees), 5 repeats, into results/pivodl; "
                        "explicit flags still apply on top")
    p.add_argument("--datasets", nargs="+", default=SMALL["datasets"], choices=DATASETS, help="credit, bank: accuracy; "
                   "energy: RMSE (--full: all three)")
    p.add_argument("--studies", nargs="+", default=list(STUDIES), choices=STUDIES, help="settings to vary, one at a time")
    p.add_argument("--backends", nargs="+", default=["plain", "paillier"], choices=BACKENDS,
                   help="plain: no encryption (same trees: PIVODL is lossless); paillier / ou: encrypted sums")
    p.add_argument("--key-bits", type=int, default=SMALL["key_bits"], help="key size of the encrypted backends "
                   "(the small default 1024 needs no --allow-weak-keys)")
    p.add_argument("--allow-weak-keys", action="store_true", help="allow --key-bits 1024 (about 80 bits of security)")
    p.add_argument("--clients", nargs="+", type=_positive, default=SMALL["clients"], help="values of the clients study")
    p.add_argument("--depths", nargs="+", type=_positive, default=SMALL["depths"], help="values of the depth study")
    p.add_argument("--trees", nargs="+", type=_positive, default=SMALL["trees"], help="values of the trees study")
    p.add_argument("--epsilons", nargs="+", type=_epsilon, default=SMALL["epsilons"],
                   help=f"values of the epsilon study and the label-guess table ('{NO_DP}': no DP)")
    p.add_argument("--clients-default", type=_positive, default=SMALL["clients_default"], help="clients when another setting varies")
    p.add_argument("--depth-default", type=_positive, default=SMALL["depth_default"], help="maximum depth when another setting varies")
    p.add_argument("--trees-default", type=_positive, default=SMALL["trees_default"], help="trees when another setting varies")
    p.add_argument("--repeats", type=_positive, default=SMALL["repeats"], help="runs per point (seed = repeat: split and label spread)")
    p.add_argument("--rows", type=_positive, default=SMALL["rows"], help="subsample every dataset to this many rows first "
                   "(--full: every row)")
    p.add_argument("--bins", type=_positive, default=32, help="bins per feature (max_bin)")
    p.add_argument("--gradient-bound", type=float, default=4096.0, help="regression: bound of |gradient| (Wh for energy)")
    p.add_argument("--leaf-clip", type=float, default=100.0, help="regression with DP: clip C of released leaf weights (Wh)")
    p.add_argument("--guess-dataset", default="credit", choices=list(DATASETS[:2]) + ["none"],
                   help="dataset of the label-guess table (none: skip it)")
    p.add_argument("--data-dir", default=DATA_DIR,
                   help="folder holding bank and energy (default: $VFL_DATA_DIR, then the shipped ray_vfl/data/files)")
    p.add_argument("--no-plots", action="store_true", help="write no PNG (matplotlib is then not needed)")
    p.add_argument("--no-progress", action="store_true", help="no progress bars (a log line per run only)")
    p.add_argument("--out", default=SMALL["out"], help="folder for the CSV, JSON and PNG files")
    argv = list(sys.argv[1:] if argv is None else argv)
    args = p.parse_args(argv)
    given = {a.split("=")[0] for a in argv if a.startswith("--")}
    if args.full:
        for key, value in FULL.items():
            if "--" + key.replace("_", "-") not in given:
                setattr(args, key, value)
    elif "--key-bits" not in given:  # the small version's test key size is the job's choice, not the user's
        args.allow_weak_keys = True
    return args


def _check(args) -> None:
    """Every option checked before Ray starts: a :class:`ConfigError` naming the flag and the fix."""
    from ray_vfl.data.bundled import load_named
    from ray_vfl.errors import ConfigError

    if any(b != "plain" for b in args.backends):
        if args.key_bits < 1024 or args.key_bits % 256:
            raise ConfigError(f"--key-bits must be a multiple of 256 and at least 1024, got {args.key_bits}")
        if args.key_bits < 2048 and not args.allow_weak_keys:
            raise ConfigError(f"--key-bits {args.key_bits} gives about 80 bits of security: use 2048 or more, or pass "
                              "--allow-weak-keys")
    if min(args.clients + [args.clients_default]) < 2:
        raise ConfigError("--clients and --clients-default must be at least 2: PIVODL needs at least 2 clients (a split "
                          "client is another client than the source)")
    if max(args.depths + [args.depth_default]) > 16:
        raise ConfigError(f"--depths and --depth-default must be in [1, 16], got {args.depths} and {args.depth_default}")
    if not 2 <= args.bins <= 255:
        raise ConfigError(f"--bins must be in [2, 255], got {args.bins}")
    if not args.gradient_bound > 0 or not args.leaf_clip > 0:
        raise ConfigError(f"--gradient-bound and --leaf-clip must be > 0, got {args.gradient_bound} and {args.leaf_clip}")
    if args.rows is not None and args.rows < 20 * max(args.clients + [args.clients_default]):
        raise ConfigError(f"--rows must be at least 20 per client (a test part and labels at every client), got {args.rows}")
    if os.path.exists(args.out) and not os.path.isdir(args.out):
        raise ConfigError(f"--out {args.out!r} is a file; name a folder")
    if not args.no_plots:
        try:
            import matplotlib  # noqa: F401
        except ModuleNotFoundError:
            raise ConfigError('the plots need matplotlib: pip install -e ".[plots]" (or pass --no-plots)') from None
    for dataset in dict.fromkeys(args.datasets + ([args.guess_dataset] if args.guess_dataset != "none" else [])):
        load_named(dataset, args.data_dir)  # a missing file is a DataError naming the folder, before Ray starts


def study_points(args, study: str) -> list[dict]:
    """The settings of one study: the varied value with the other settings at their defaults."""
    base = {"clients": args.clients_default, "depth": args.depth_default, "trees": args.trees_default, "epsilon": None}
    values = {"clients": args.clients, "depth": args.depths, "trees": args.trees, "epsilon": args.epsilons}[study]
    return [{**base, study: v} for v in values]


def _label(epsilon) -> str:
    return NO_DP if epsilon is None else f"{epsilon:g}"


def plan(args) -> list[dict]:
    """Every run of the command, in order: the studies' runs (a point, a repeat, a backend), then the
    label-guess table's (an epsilon, a repeat). Each holds every setting its result depends on, so a run
    is known again by them (``RunLog``) when the same command starts after an interruption."""
    common = {"rows": args.rows, "bins": args.bins, "data_dir": args.data_dir}
    runs = []
    for dataset in args.datasets:
        for study in args.studies:
            for point in study_points(args, study):
                for repeat in range(args.repeats):
                    for backend in args.backends:
                        runs.append({"kind": "study", "dataset": dataset, "study": study, **point, "repeat": repeat,
                                     "backend": backend, "key_bits": args.key_bits if backend != "plain" else 0,
                                     "gradient_bound": args.gradient_bound, "leaf_clip": args.leaf_clip, **common})
    if args.guess_dataset != "none":
        for epsilon in args.epsilons:
            for repeat in range(args.repeats):
                runs.append({"kind": "label_guess", "dataset": args.guess_dataset, "clients": args.clients_default,
                             "depth": args.depth_default, "trees": args.trees_default, "epsilon": epsilon,
                             "repeat": repeat, **common})
    return runs


@functools.lru_cache(maxsize=4)
def _split(dataset: str, clients: int, data_dir, rows, repeat: int):
    return load_split(dataset, clients, data_dir, rows, repeat)  # the backends of a point share one split


def run_study(runtime, run: dict, bar: bool = False) -> dict:
    """One run of a study: a result row of ``RUN_COLUMNS``."""
    train, test, objective = _split(run["dataset"], run["clients"], run["data_dir"], run["rows"], run["repeat"])
    config = pivodl_config(objective, run["trees"], run["depth"], run["backend"], run["key_bits"] or 2048,
                           run["epsilon"], run["gradient_bound"], run["leaf_clip"], run["bins"])
    study, value = run["study"], run[run["study"]]
    label = f"{run['dataset']} {study}={_label(value) if study == 'epsilon' else value} {run['backend']} repeat {run['repeat']}"
    row, _ = run_pivodl(runtime, train, test, config, label=label, bar=bar)
    metric_name = "accuracy" if objective == "binary:logistic" else "rmse"
    row.update(dataset=run["dataset"], study=study, value=_label(value) if study == "epsilon" else value,
               backend=run["backend"], key_bits=run["key_bits"], clients=run["clients"], max_depth=run["depth"],
               n_trees=run["trees"], epsilon=_label(run["epsilon"]), repeat=run["repeat"], metric_name=metric_name,
               metric=row[metric_name])
    log.info("%s: %s %.4f, %.2f s, %.2f MB", label, metric_name, row["metric"], row["train_s"], row["mb"])
    return row


def run_label_guess(runtime, run: dict, bar: bool = False) -> dict:
    """One run of Table III: each client's guess of the other clients' labels from the leaf weights it
    received, and (beyond the paper) from the partitions and its own labels; a row of ``GUESS_COLUMNS``."""
    train, test, objective = _split(run["dataset"], run["clients"], run["data_dir"], run["rows"], run["repeat"])
    config = pivodl_config(objective, run["trees"], run["depth"], "plain", epsilon=run["epsilon"], bins=run["bins"])
    label = f"label guess, epsilon {_label(run['epsilon'])}, repeat {run['repeat']}"
    result, model = run_pivodl(runtime, train, test, config, label=label, bar=bar)
    guess = label_guess_row(model, train)
    log.info("%s: accuracy %.3f, two-sided AUC %.3f (partition score %.3f)", label, guess["guess_accuracy"],
             guess["guess_auc_two_sided"], guess["guess_partition_auc_two_sided"])
    return {"dataset": run["dataset"], "clients": run["clients"], "epsilon": _label(run["epsilon"]), "repeat": run["repeat"],
            "guess_accuracy": guess["guess_accuracy"], "guess_auc": guess["guess_auc"],
            "guess_auc_two_sided": guess["guess_auc_two_sided"],
            "guess_partition_auc_two_sided": guess["guess_partition_auc_two_sided"], "test_accuracy": result["accuracy"],
            "test_auc": result["auc"], "epsilon_accounted": result["epsilon_accounted"], "attackers": guess["attackers"]}


def summarize(rows: list[dict], keys: list[str], values: list[str]) -> list[dict]:
    """Mean, std, min and max of ``values`` over the rows sharing ``keys`` (the repeats), in first-seen order."""
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault(tuple(r[k] for k in keys), []).append(r)
    out = []
    for key, members in groups.items():
        s = dict(zip(keys, key), repeats=len(members))
        for v in values:
            x = np.array([m[v] for m in members], dtype=np.float64)
            s.update({f"{v}_mean": float(np.mean(x)), f"{v}_std": float(np.std(x)), f"{v}_min": float(np.min(x)),
                      f"{v}_max": float(np.max(x))})
        out.append(s)
    return out


def write_csv(path: str, rows: list[dict], columns: list[str] | None = None) -> None:
    columns = columns or (list(rows[0]) if rows else [])
    with open(path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=columns, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)


def plot_studies(summary: list[dict], out: str) -> list[str]:
    """One PNG per (dataset, study): metric, training time and MB against the varied setting, one line
    per backend, mean with the min-max band over repeats."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    for dataset, study in dict.fromkeys((s["dataset"], s["study"]) for s in summary):
        points = [s for s in summary if s["dataset"] == dataset and s["study"] == study]
        metric = points[0]["metric_name"]
        panels = [("metric", "test accuracy" if metric == "accuracy" else "test RMSE (Wh)"),
                  ("train_s", "training time (s)"), ("mb", "traffic (MB)")]
        fig, axes = plt.subplots(1, 3, figsize=(13, 3.6))
        for backend in dict.fromkeys(s["backend"] for s in points):
            line = [s for s in points if s["backend"] == backend]
            labels = [str(s["value"]) for s in line]
            x = np.arange(len(line)) if study == "epsilon" else np.array([float(s["value"]) for s in line])
            for ax, (value, axis) in zip(axes, panels):
                name = backend if backend == "plain" else f"{backend} {line[0]['key_bits']}-bit"
                ax.plot(x, [s[f"{value}_mean"] for s in line], marker="o", label=name)
                ax.fill_between(x, [s[f"{value}_min"] for s in line], [s[f"{value}_max"] for s in line], alpha=0.2)
                ax.set_xlabel(STUDY_AXES[study])
                ax.set_ylabel(axis)
                if study == "epsilon":
                    ax.set_xticks(x, labels)
        axes[0].legend()
        fig.suptitle(f"PIVODL on {dataset}: {STUDY_AXES[study]} (mean, min-max band over repeats)")
        fig.tight_layout()
        path = os.path.join(out, f"{dataset}_{study}.png")
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)
    return written


def _print_table(title: str, rows: list[dict], columns: list[str]) -> None:
    print(f"\n{title}")
    print("| " + " | ".join(columns) + " |")
    print("|" + "---|" * len(columns))
    for r in rows:
        print("| " + " | ".join(f"{r[c]:.4g}" if isinstance(r.get(c), float) else str(r.get(c, "")) for c in columns) + " |")


def main(argv=None) -> int:
    args = parse_args(argv)
    _check(args)
    from ray_vfl import Runtime
    from ray_vfl.experiments import RunLog

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    book = RunLog(os.path.join(args.out, "runs.jsonl"), plan(args), "pivodl")
    started, bar = time.perf_counter(), not args.no_progress
    runtime = Runtime(timeout_s=3600)
    with book.guard():  # Ctrl-C anywhere: one line saying how many runs are saved
        try:
            results = book.run(lambda run: (run_study if run["kind"] == "study" else run_label_guess)(runtime, run, bar), bar)
        finally:
            runtime.shutdown()
        report(args, [r for run, r in zip(book.runs, results) if run["kind"] == "study"],
               [r for run, r in zip(book.runs, results) if run["kind"] == "label_guess"], time.perf_counter() - started)
    return 0


def report(args, runs: list[dict], guesses: list[dict], seconds: float) -> None:
    """The summaries, CSV, JSON and PNG files in ``--out``, and the tables printed."""
    summary = summarize(runs, ["dataset", "study", "value", "backend", "key_bits", "metric_name", "clients", "max_depth",
                               "n_trees", "epsilon"], ["metric", "train_s", "mb", "encrypt", "decrypt"])
    guess_summary = summarize(guesses, ["dataset", "clients", "epsilon"],
                              ["guess_accuracy", "guess_auc", "guess_auc_two_sided", "guess_partition_auc_two_sided",
                               "test_accuracy"])
    write_csv(os.path.join(args.out, "runs.csv"), runs, RUN_COLUMNS)
    write_csv(os.path.join(args.out, "summary.csv"), summary)
    write_csv(os.path.join(args.out, "label_guess.csv"), guesses, GUESS_COLUMNS)
    write_csv(os.path.join(args.out, "label_guess_summary.csv"), guess_summary)
    plots = [] if args.no_plots or not summary else plot_studies(summary, args.out)
    seconds = round(seconds, 1)
    with open(os.path.join(args.out, "results.json"), "w", encoding="utf-8") as fh:
        json.dump({"args": {k: v for k, v in vars(args).items()}, "runs": runs, "summary": summary,
                   "label_guess": guesses, "label_guess_summary": guess_summary, "plots": plots, "seconds": seconds},
                  fh, indent=2, default=float)
    _print_table("PIVODL studies (mean +- std over repeats)",
                 [{**s, "metric": f"{s['metric_mean']:.4f} +- {s['metric_std']:.4f}",
                   "train s": f"{s['train_s_mean']:.2f} +- {s['train_s_std']:.2f}", "MB": f"{s['mb_mean']:.1f}"}
                  for s in summary],
                 ["dataset", "study", "value", "backend", "metric_name", "metric", "train s", "MB"])
    if guess_summary:
        _print_table("Label guess (Table III; mean over attacking clients, then over repeats)",
                     [{**s, "accuracy": s["guess_accuracy_mean"], "AUC": s["guess_auc_mean"],
                       "AUC two-sided": s["guess_auc_two_sided_mean"],
                       "partition AUC two-sided": s["guess_partition_auc_two_sided_mean"],
                       "test accuracy": s["test_accuracy_mean"]}
                      for s in guess_summary],
                     ["dataset", "clients", "epsilon", "accuracy", "AUC", "AUC two-sided", "partition AUC two-sided",
                      "test accuracy"])
    print(f"\nwrote {args.out} in {seconds} s")
    if not args.full:
        print("the paper's studies (hours, Paillier 2048, 5 repeats): python jobs/pivodl.py --full")


def cli(argv=None) -> int:
    """:func:`main` as the command line runs it (:func:`ray_vfl.experiments.progress.run_job`)."""
    from ray_vfl.experiments.progress import run_job

    return run_job(main, argv)


if __name__ == "__main__":
    sys.exit(cli())
