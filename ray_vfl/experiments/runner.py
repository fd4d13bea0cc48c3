"""Run a sweep: one row per run, written as it finishes; an interrupted sweep resumes.

Why a small runner and not Ray Tune: a run here is a whole federation -- a driver that coordinates
one actor per party, each pinned to its party's resource -- and its timings are the result, so runs
go one at a time on the parties' own nodes. A Tune trial would be one more actor holding a CPU
while it coordinates the party actors, and with one trial at a time Tune's scheduler adds nothing;
what we need from it, resuming, is a set of finished run ids in the results file. The results are
a plain table (CSV and Parquet) that pandas, the plots and TensorBoard-free notebooks read directly.

Each row holds every setting, the test metric(s), wall time per phase (set-up, training,
prediction), seconds per tree (the mean, and each tree's in ``s_by_tree``, JSON), MB in all and per channel and message kind (JSON columns), attack
success where one applies (PIVODL's label-guess attack, split-NN's label-inference LeakAUCs), and
machine facts (CPUs, Ray and ray_vfl versions). Split-NN runs (FedAds Tables 3 and 4) are in
:mod:`ray_vfl.experiments.splitnn_runs`. For the tree protocols, where the training time went comes
from what the parties measured (:mod:`ray_vfl.runtime.timeline`): ``crypto_s``, ``wire_s``
(serializing and checking payloads), ``compute_s`` (other party work), ``between_calls_s`` (no party
computing: Ray's scheduling and transfers, the driver), ``calls`` and ``ms_per_call``, next to
``empty_call_ms`` (an empty actor call's round trip measured in the same run), each party's waiting
time and peak memory (``peak_rss_mb``, the largest; ``peak_rss_by_party``).
With ``per_tree`` a row also holds ``by_tree`` (JSON): the test metrics after each tree and those
of centralized xgboost trained with the same settings on the same rows (``plots.per_tree_table``).

Resuming inside a run: with ``checkpoint_every`` in the config (tree protocols), every party saves its
training state under ``<out>/<name>/checkpoints/<run_id>/`` every that many trees, and a run started
again continues from its last saved tree; a run of many hours then loses at most that many trees to an
interruption. The driver's copy of the folder goes once the run's row is written (on a cluster, each
party's own file stays on its node). The row's times and bytes cover the trees grown since the resume
(``trees_resumed``); the time the saves took is measured and left out of ``train_s`` (``checkpoint_s``).
"""

from __future__ import annotations

import json
import logging
import os
import platform
import shutil
import time
from typing import Any

import numpy as np
import pandas as pd

from ..data.bundled import load_named, synthetic
from ..data.splitting import vertical_split
from ..errors import ConfigError, DataError
from ..metrics import auc, logloss
from ..runtime.actors import Runtime
from ..runtime.party import write_atomically
from ..runtime.timeline import breakdown
from ..trees.callbacks import TreeTimer
from ..trees.checkpoint import Checkpoint
from .config import ExperimentConfig
from .progress import Interrupted, TreeProgress, close_bars

__all__ = ["run_sweep", "run_one", "RESULTS_FILE"]

log = logging.getLogger(__name__)
RESULTS_FILE = "results.csv"


def _data(cfg: ExperimentConfig, run: dict[str, Any]):
    """The run's train/test split, spread as the protocol needs (PIVODL: labels evenly over the clients)."""
    rows = run.get("rows", cfg.rows)
    if run["dataset"] == "synthetic":
        frame, label, categorical, objective = synthetic(rows or 10_000, seed=cfg.seed), "y", [], "binary:logistic"
    else:
        frame, label, categorical, objective = load_named(run["dataset"])
        if rows is not None:
            frame = frame.iloc[:rows].reset_index(drop=True)
    clients = int(run.get("clients", 2))
    n_features = frame.shape[1] - 1
    if clients > n_features:
        raise DataError(f"{clients} clients for {n_features} features of {run['dataset']!r}: each needs one at least")
    seed = cfg.seed + int(run["repeat"])
    owners = None
    if cfg.protocol == "pivodl":
        owners = {f"party{i}": 1.0 / clients for i in range(clients)}
        owners[f"party{clients - 1}"] = 1.0 - sum(list(owners.values())[:-1])
    data = vertical_split(frame, clients, label=label, categorical=categorical, seed=seed, label_owners=owners)
    if cfg.protocol == "ssxgb" and objective != "binary:logistic":
        raise DataError(f"SSXGB classifies (binary labels); {run['dataset']!r} is a {objective} dataset")
    stratify = objective == "binary:logistic"
    train, test = data.train_test_split(cfg.test_size, seed=seed, stratify=stratify)
    return train, test, objective, frame, label


def _protocol_config(cfg: ExperimentConfig, run: dict[str, Any], objective: str):
    params = {**cfg.params} if cfg.protocol == "ssxgb" else {**cfg.params, "objective": objective}
    for key in ("max_depth", "n_trees", "key_bits", "backend", "epsilon", "instance_threshold"):
        if key in run:
            params[key] = run[key]
    if params.get("key_bits", 2048) < 2048:
        params.setdefault("allow_weak_keys", True)
    if cfg.protocol == "pivodl":
        from ..pivodl.config import PIVODLConfig as Config
    elif cfg.protocol == "ssxgb":
        from ..ssxgb.config import SSXGBConfig as Config
    else:
        from ..trees.config import BoostConfig as Config
    return Config.from_dict(params)


def _metrics(objective: str, y: np.ndarray, margins: np.ndarray) -> dict[str, float]:
    if objective == "binary:logistic":
        p = 1.0 / (1.0 + np.exp(-margins))
        return {"auc": auc(y, p), "accuracy": float(np.mean((p > 0.5) == (y == 1))), "nll": logloss(y, p)}
    return {"rmse": float(np.sqrt(np.mean((margins - y) ** 2)))}


def _xgboost_curve(config, objective: str, frame: pd.DataFrame, label: str, train, test) -> list[dict[str, Any]]:
    """Test metrics after each tree of centralized xgboost with the run's settings (hist, the same depth,
    trees, learning rate, lambda, bins and, for SSXGB, row and feature sampling) on the same rows; none
    (with a log line) when xgboost is not installed."""
    try:
        import xgboost as xgb
    except ImportError:
        log.warning("xgboost is not installed: the per-tree curves have no centralized reference")
        return []
    x = frame.drop(columns=[label])
    for column in x.columns:
        if not pd.api.types.is_numeric_dtype(x[column]):
            x[column] = x[column].astype("category")
    params = {"objective": objective, "tree_method": "hist", "max_depth": config.max_depth,
              "eta": config.learning_rate, "lambda": config.reg_lambda, "max_bin": config.max_bin,
              "subsample": getattr(config, "row_subsample", 1.0), "colsample_bytree": getattr(config, "feature_subsample", 1.0),
              "min_child_weight": getattr(config, "min_child_weight", 0.0), "seed": 0, "nthread": 2}
    dtrain = xgb.DMatrix(x.iloc[train.ids], label=train.label, enable_categorical=True)
    dtest = xgb.DMatrix(x.iloc[test.ids], enable_categorical=True)
    booster = xgb.train(params, dtrain, num_boost_round=config.n_trees)
    return [{"tree": k, "model": "xgboost",
             **_metrics(objective, test.label, booster.predict(dtest, output_margin=True, iteration_range=(0, k)))}
            for k in range(1, config.n_trees + 1)]


class _TimedCheckpoint(Checkpoint):
    """A :class:`Checkpoint` that keeps the tree it resumed from and the seconds its saves took: between
    trees (inside the timer's window, so the row subtracts them from ``train_s``) and after the last."""

    def __init__(self, directory: str, every: int) -> None:
        super().__init__(directory, every)
        self.resumed, self.between_trees, self.after_last = 0, 0.0, 0.0

    def resume_point(self, model: Any) -> tuple[int, dict[str, str]]:
        trees, files = super().resume_point(model)
        self.resumed = trees
        return trees, files

    def after_iteration(self, iteration: int, logs: dict[str, dict[str, float]]) -> bool:
        t = time.perf_counter()
        try:
            return super().after_iteration(iteration, logs)
        finally:
            self.between_trees += time.perf_counter() - t

    def after_training(self, model: Any) -> None:
        t = time.perf_counter()
        try:
            super().after_training(model)
        finally:
            self.after_last += time.perf_counter() - t


def run_one(cfg: ExperimentConfig, run: dict[str, Any], runtime: Runtime, progress: bool = False,
            checkpoint_dir: str | None = None) -> dict[str, Any]:
    """Train and evaluate one run (with a bar over its trees if ``progress``); returns its result row.
    With ``cfg.checkpoint_every``, the run checkpoints into (and resumes from) ``checkpoint_dir``."""
    import ray

    if cfg.fresh_actors:
        runtime.kill_all()
    else:
        runtime.timelines()  # forget what the live actors measured before this run
    if cfg.protocol == "splitnn":  # FedAds Tables 3 and 4 (imports torch only here)
        from .splitnn_runs import run_splitnn

        row = run_splitnn(cfg, run, runtime, progress)
    else:
        row = _run_trees(cfg, run, runtime, progress, checkpoint_dir)
    row.update(cpus=os.cpu_count(), ray_version=ray.__version__, python=platform.python_version(),
               finished=time.strftime("%Y-%m-%dT%H:%M:%S"))
    return row


def _run_trees(cfg: ExperimentConfig, run: dict[str, Any], runtime: Runtime, progress: bool = False,
               checkpoint_dir: str | None = None) -> dict[str, Any]:
    t0 = time.perf_counter()
    train, test, objective, frame, label = _data(cfg, run)
    config = _protocol_config(cfg, run, objective)
    timer = TreeTimer()
    t_data = time.perf_counter()
    if cfg.protocol == "pivodl":
        from ..pivodl.attack import label_guess_report
        from ..pivodl.protocol import train as fit
    elif cfg.protocol == "ssxgb":
        from ..ssxgb.protocol import train as fit
    else:
        from ..secureboost.protocol import train as fit
    settings = ", ".join(f"{k}={v}" for k, v in run.items() if k not in ("run_id", "dataset"))
    checkpoint = None
    if cfg.checkpoint_every is not None:
        if checkpoint_dir is None:
            raise ConfigError(f"{cfg.name} sets checkpoint_every: give run_one a checkpoint_dir (run_sweep does)")
        checkpoint = _TimedCheckpoint(checkpoint_dir, cfg.checkpoint_every)
    # the checkpoint before the timer: its saves fall inside the timer's window and are subtracted below
    callbacks = ([checkpoint] if checkpoint else []) + [timer, TreeProgress(settings, timer, progress)]
    model = fit(runtime, train, config, callbacks=callbacks)
    t_fit = time.perf_counter()
    measured = _where_time_went(runtime, timer)
    margins = model.predict_margin(test)
    t_pred = time.perf_counter()
    y = test.label
    row: dict[str, Any] = {"run_id": run["run_id"], "name": cfg.name, "protocol": cfg.protocol,
                           "clients": len(train.party_names), "rows": len(frame), **run, "objective": objective,
                           "backend": getattr(config, "backend", "bcp"), "key_bits": config.key_bits,
                           "max_depth": config.max_depth, "n_trees": model.n_trees, "train_rows": train.n_rows}
    row.update(auc=np.nan, accuracy=np.nan, nll=np.nan, rmse=np.nan)  # every row holds every metric column
    row.update(_metrics(objective, y, margins))
    if cfg.per_tree:
        curve = [{"tree": k, "model": cfg.protocol, **_metrics(objective, y, model.predict_margin(test, k))}
                 for k in range(1, model.n_trees)] + [{"tree": model.n_trees, "model": cfg.protocol,
                                                        **_metrics(objective, y, margins)}]
        row["by_tree"] = json.dumps(curve + _xgboost_curve(config, objective, frame, label, train, test))
    between, after = (checkpoint.between_trees, checkpoint.after_last) if checkpoint else (0.0, 0.0)
    resumed = checkpoint.resumed if checkpoint else 0
    grown = max(1, model.n_trees - resumed)  # the trees this process grew (all of them without a resume)
    train_s = getattr(timer, "seconds", 0.0) - between
    row.update(data_s=t_data - t0, setup_s=(t_fit - t_data) - train_s - between - after, train_s=train_s,
               s_per_tree=train_s / grown, predict_s=t_pred - t_fit, checkpoint_s=between + after,
               trees_resumed=resumed, s_by_tree=json.dumps([round(x, 3) for x in getattr(timer, "laps", [])]),
               mb=model.comm_stats.total_mb, mb_per_tree=model.comm_stats.total_mb / grown,
               mb_by_channel=json.dumps(model.comm_stats.by_channel()), mb_by_kind=json.dumps(model.comm_stats.by_kind()),
               ops=json.dumps(model.op_counts))
    row.update(measured)
    if cfg.protocol == "pivodl":
        report = label_guess_report(model.label_guess_scores(), train.label) if objective == "binary:logistic" else {}
        guess = [r for r in report.values() if r["rows"]]
        row.update(epsilon=config.epsilon, epsilon_accounted=model.epsilon, instance_threshold=config.instance_threshold,
                   guess_accuracy=float(np.mean([r["accuracy"] for r in guess])) if guess else np.nan,
                   guess_auc_two_sided=float(np.mean([r["auc_two_sided"] for r in guess])) if guess else np.nan,
                   guess_partition_auc_two_sided=float(np.nanmean([r["partition_auc_two_sided"] for r in guess]))
                   if guess else np.nan)
    return row


def _where_time_went(runtime: Runtime, timer: TreeTimer) -> dict[str, Any]:
    """The training's wall time split from the parties' measured intervals (crypto, wire, other
    compute, between calls; :mod:`ray_vfl.runtime.timeline`), an empty call's round trip measured
    now, and each party's peak memory."""
    import ray

    spans: dict[str, list] = {}
    peaks: dict[str, float] = {}
    for key, report in runtime.timelines().items():
        party = key.split(":")[0]  # a party's helper actors count as the party
        spans.setdefault(party, []).extend(report["spans"])
        peaks[party] = max(peaks.get(party, 0.0), float(report["peak_rss_mb"]))
    parts = breakdown(spans, getattr(timer, "wall_start", 0.0), getattr(timer, "wall_end", 0.0))
    waiting = parts.pop("waiting_s")
    handles = list(runtime.actors.values())[:1]
    empty_ms = float("nan")
    if handles:
        ray.get(handles[0].alive.remote(), timeout=runtime.timeout_s)
        t = time.perf_counter()
        for _ in range(20):
            ray.get(handles[0].alive.remote(), timeout=runtime.timeout_s)
        empty_ms = (time.perf_counter() - t) / 20 * 1000.0
    return {**parts, "empty_call_ms": empty_ms, "waiting_s_mean": float(np.mean(list(waiting.values()))) if waiting else np.nan,
            "waiting_by_party": json.dumps({p: round(w, 3) for p, w in sorted(waiting.items())}),
            "peak_rss_mb": max(peaks.values()) if peaks else np.nan,
            "peak_rss_by_party": json.dumps({p: round(m, 1) for p, m in sorted(peaks.items())})}


def _read(path: str) -> pd.DataFrame:
    if not os.path.exists(path):
        return pd.DataFrame()
    try:
        return pd.read_csv(path)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
        raise DataError(f"{path!r} is not a results table of ray_vfl.experiments ({exc}); move it away") from exc


def _write(results: pd.DataFrame, folder: str) -> None:
    write_atomically(os.path.join(folder, RESULTS_FILE), lambda fh: results.to_csv(fh, index=False))
    try:
        write_atomically(os.path.join(folder, "results.parquet"), lambda fh: results.to_parquet(fh, index=False),
                         binary=True)
    except (ImportError, ValueError) as exc:  # pyarrow is a dependency; mixed column types are not fatal
        log.warning("results.parquet not written: %s", exc)


def run_sweep(cfg: ExperimentConfig, out: str, runtime: Runtime | None = None, progress: bool = True,
              max_runs: int | None = None) -> pd.DataFrame:
    """Run every run of ``cfg`` not yet in ``<out>/<name>/results.csv``, appending each row as it
    finishes (atomically), with a progress bar over the runs and one inside each run (over its trees, or
    a split network's federated steps); returns the whole table. ``max_runs``: run at most that many of the unfinished runs (a
    first look at a long sweep; the same call later continues with the next ones). Ctrl-C raises
    :class:`~ray_vfl.experiments.progress.Interrupted` (a ``KeyboardInterrupt`` saying how many runs are saved).

    Example
    -------
    >>> cfg = ExperimentConfig.from_dict({"name": "tiny", "protocol": "pivodl", "rows": 300,
    ...                                   "params": {"backend": "plain"}, "sweep": {"n_trees": [1, 2]}})
    >>> table = run_sweep(cfg, "results")                                  # doctest: +SKIP
    >>> table[["n_trees", "auc", "train_s"]]                               # doctest: +SKIP
    """
    if not isinstance(cfg, ExperimentConfig):
        raise ConfigError(f"run_sweep takes an ExperimentConfig, got {type(cfg).__name__}")
    folder = os.path.join(out, cfg.name)
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError as exc:
        raise DataError(f"cannot write results into {folder!r}: {exc}") from exc
    results = _read(os.path.join(folder, RESULTS_FILE))
    done = set(results["run_id"]) if "run_id" in results else set()
    todo = [r for r in cfg.runs() if r["run_id"] not in done]
    if max_runs is not None:
        if isinstance(max_runs, bool) or not isinstance(max_runs, int) or max_runs < 1:
            raise ConfigError(f"max_runs must be a positive integer or None, got {max_runs!r}")
        todo = todo[:max_runs]
    if done:
        log.info("%s: %d of %d runs already finished; running the other %d", cfg.name, len(done & {r["run_id"] for r in cfg.runs()}),
                 len(cfg.runs()), len(todo))
    runtime = runtime or Runtime()
    bar = None
    if progress and todo:
        from tqdm.auto import tqdm

        bar = tqdm(total=len(todo), desc=cfg.name, unit="run")
    try:
        for run in todo:
            checkpoints = os.path.join(folder, "checkpoints", run["run_id"])
            row = run_one(cfg, run, runtime, progress, checkpoints if cfg.checkpoint_every else None)
            results = pd.concat([results, pd.DataFrame([row])], ignore_index=True)
            _write(results, folder)
            if cfg.checkpoint_every:  # the row holds the run now
                shutil.rmtree(checkpoints, ignore_errors=True)
            if bar is not None:
                bar.update(1)
    except KeyboardInterrupt:  # Ctrl-C: every finished run is in the table already
        close_bars()
        ids = {r["run_id"] for r in cfg.runs()}
        raise Interrupted(len(ids & set(results["run_id"] if "run_id" in results else ())), len(ids),
                          os.path.relpath(folder)) from None
    finally:
        if bar is not None:
            bar.close()
    return results
