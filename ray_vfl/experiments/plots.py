"""Figures of a sweep's results: mean over repeats with a min-max band, as the papers draw them; over a
categorical x (a split-NN method or defense) bars of the mean with min-max error bars."""

from __future__ import annotations

import json
import os

import numpy as np
import pandas as pd

from ..errors import ConfigError, DataError

__all__ = ["plot_sweep", "plot_figures", "per_tree_table", "brief", "UNITS"]

# Axis labels with units for the result columns.
UNITS = {
    "clients": "clients", "max_depth": "maximum depth", "n_trees": "trees", "epsilon": "epsilon (DP budget)",
    "key_bits": "key size (bits)", "auc": "test AUC", "accuracy": "test accuracy", "nll": "test NLL",
    "rmse": "test RMSE", "train_s": "training time (s)", "s_per_tree": "time per tree (s)",
    "setup_s": "set-up time (s)", "predict_s": "prediction time (s)", "mb": "traffic (MB)",
    "mb_per_tree": "traffic per tree (MB)", "guess_accuracy": "label-guess accuracy",
    "guess_auc_two_sided": "label-guess AUC (two-sided)",
    "guess_partition_auc_two_sided": "partition-score AUC (two-sided)", "rows": "rows", "peak_rss_mb": "peak memory per party (MB)",
    "crypto_s": "crypto, whole training (s)", "between_calls_s": "no party computing, whole training (s)",
    "calls": "actor calls, whole training", "wire_s": "serializing payloads, whole training (s)",
    "compute_s": "other party compute, whole training (s)", "waiting_s_mean": "mean party waiting, whole training (s)", "ms_per_call": "between-calls time per call (ms)",
    "method": "method (FedAds Table 3)", "defense": "defense (FedAds Table 4)", "epsilon_accounted": "accounted epsilon",
    "leak_auc_two_sided_max": "strongest attack's LeakAUC (two-sided)", "attack_s": "attack time (s)",
    **{f"{a}_leak_auc{s}": f"{a} attack LeakAUC ({s[1:].replace('_', '-') or 'one-sided'})"
       for a in ("norm", "direction", "cluster") for s in ("", "_two_sided")},
    "instance_threshold": "instance threshold (rows)", "tree": "trees so far (boosting round)",
    "data_s": "data loading time (s)", "train_rows": "training rows",
}


# The result columns a brief shows (those any run filled), after the swept settings.
BRIEF_COLUMNS = ("auc", "accuracy", "rmse", "guess_accuracy", "leak_auc_two_sided_max", "train_s", "s_per_tree", "mb")


def brief(cfg, results: pd.DataFrame) -> pd.DataFrame:
    """The results of ``cfg``'s runs as a short table to print: the swept settings (and the repeat, when
    there are several), then the test metrics, seconds and MB that any run filled in.

    Example
    -------
    >>> from ray_vfl.experiments import ExperimentConfig
    >>> cfg = ExperimentConfig.from_dict({"name": "t", "protocol": "pivodl", "sweep": {"clients": [2, 3]}})
    >>> rows = pd.DataFrame([{**r, "auc": 0.7, "rmse": float("nan"), "mb": 1.5} for r in cfg.runs()])
    >>> brief(cfg, rows).columns.tolist()
    ['clients', 'auc', 'mb']
    """
    ids = [r["run_id"] for r in cfg.runs()]
    mine = results[results["run_id"].isin(ids)] if "run_id" in results else results.iloc[:0]
    settings = list(cfg.sweep) + (["repeat"] if cfg.repeats > 1 else [])
    shown = [c for c in settings if c in mine] + [c for c in BRIEF_COLUMNS if c in mine and mine[c].notna().any()]
    order = {i: k for k, i in enumerate(ids)}
    return mine.sort_values("run_id", key=lambda column: column.map(order))[shown].reset_index(drop=True)


def per_tree_table(results: pd.DataFrame) -> pd.DataFrame:
    """The per-tree curves of a sweep run with ``per_tree: true``: one row per run, model and tree (the
    run's settings, ``tree``, ``model`` -- the protocol or ``xgboost`` -- and the test metrics).

    Example
    -------
    >>> table = pd.DataFrame({"clients": [4], "by_tree": ['[{"tree": 1, "model": "ssxgb", "accuracy": 0.9}]']})
    >>> per_tree_table(table)[["clients", "tree", "model", "accuracy"]].values.tolist()
    [[4, 1, 'ssxgb', 0.9]]
    """
    if "by_tree" not in results.columns:
        raise ConfigError("the results hold no per-tree metrics (column by_tree): run the sweep with per_tree: true")
    rows = []
    for _, run in results.iterrows():
        if not isinstance(run["by_tree"], str):
            continue
        settings = run.drop(labels=["by_tree", "auc", "accuracy", "nll", "rmse"], errors="ignore").to_dict()
        rows += [{**settings, **point} for point in json.loads(run["by_tree"])]
    if not rows:
        raise DataError("no run of these results has per-tree metrics")
    return pd.DataFrame(rows)


def plot_sweep(results: pd.DataFrame, x: str, y, path: str, group: str | None = None, title: str | None = None,
               logx: bool = False, logy: bool = False) -> str:
    """Write a PNG of ``y`` against ``x`` (one line per value of ``group``): the mean over repeats,
    a band from the minimum to the maximum; a categorical ``x`` (e.g. ``method``, ``defense``) gets bars
    of the mean with min-max error bars instead. ``y`` may be a list: one panel each, side by side.
    Returns ``path``.

    Example
    -------
    >>> table = pd.DataFrame({"clients": [2, 2, 4, 4], "s_per_tree": [1.0, 1.2, 2.0, 2.4]})
    >>> plot_sweep(table, "clients", "s_per_tree", "/tmp/doc_fig.png")  # doctest: +SKIP
    '/tmp/doc_fig.png'
    """
    ys = [y] if isinstance(y, str) else list(y)
    if not ys:
        raise ConfigError("y names no result column")
    for column in [x, *ys] + ([group] if group else []):
        if column not in results.columns:
            raise ConfigError(f"column {column!r} is not in the results; they hold {sorted(results.columns)}")
    if results.empty:
        raise DataError("no results to plot")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(ys), figsize=(5.0 * len(ys), 3.8), squeeze=False)
    groups = [(None, results)] if group is None else list(results.groupby(group, dropna=False))
    categorical = not pd.api.types.is_numeric_dtype(results[x])
    for ax, col in zip(axes[0], ys):
        if categorical:
            _bars(ax, groups, x, col, list(dict.fromkeys(results[x])), group)
        for j, (key, part) in enumerate(groups if not categorical else ()):
            if part[col].isna().all():  # e.g. RMSE of a classification dataset: no line, no legend entry
                continue
            stats = part.groupby(x)[col].agg(["mean", "min", "max"]).sort_index()
            xs = stats.index.to_numpy(dtype=float)
            label = None if key is None else f"{group}={key}"
            ax.plot(xs, stats["mean"], marker="o", label=label, color=f"C{j}")  # a group's colour in every panel
            ax.fill_between(xs, stats["min"], stats["max"], alpha=0.2, color=f"C{j}")
        ax.set_xlabel(UNITS.get(x, x))
        ax.set_ylabel(UNITS.get(col, col))
        if logx and not categorical:
            from matplotlib.ticker import NullFormatter, ScalarFormatter

            ax.set_xscale("log", base=2)  # the swept values as ticks (2, 4, 8, ...), not powers of ten
            ax.set_xticks(sorted(pd.unique(results[x].dropna())))
            ticks = ScalarFormatter()
            ticks.set_scientific(False)
            ax.xaxis.set_major_formatter(ticks)
            ax.xaxis.set_minor_formatter(NullFormatter())
        if logy:
            ax.set_yscale("log")
        elif col.endswith("auc_two_sided") and not categorical:
            ax.set_ylim(0.49, 1.01)  # all of a two-sided AUC's range, chance to certainty: panels compare
        ax.grid(alpha=0.3)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    if group is not None:  # one legend for every panel, below them, where it covers no bar or line
        entries = {label: handle for ax in axes[0] for handle, label in zip(*ax.get_legend_handles_labels())}
        if entries:
            fig.legend(entries.values(), entries.keys(), loc="lower center", ncol=min(len(entries), 6), frameon=False)
            rows = -(-len(entries) // 6)
            fig.subplots_adjust(bottom=min(0.5, fig.subplotpars.bottom + 0.08 * rows))  # room under the axis labels
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def _bars(ax, groups, x: str, col: str, categories: list, group: str | None) -> None:
    """A categorical ``x`` (a method, a defense): bars of the mean over repeats, min-max error bars, side by
    side per group, in the order the sweep ran them; the y axis spans the values, not zero (the paper's
    differences are in the second decimal)."""
    import numpy as np

    width = 0.8 / len(groups)
    lows, highs = [], []
    for j, (key, part) in enumerate(groups):
        stats = part.groupby(x, sort=False)[col].agg(["mean", "min", "max"]).reindex(categories)
        pos = np.arange(len(categories)) + (j - (len(groups) - 1) / 2) * width
        ax.bar(pos, stats["mean"], width, yerr=[stats["mean"] - stats["min"], stats["max"] - stats["mean"]],
               capsize=3, label=None if key is None else f"{group}={key}", color=f"C{j}")
        lows.append(stats["min"].min())
        highs.append(stats["max"].max())
    lo, hi = np.nanmin(lows), np.nanmax(highs)
    if np.isfinite(lo) and np.isfinite(hi):
        pad = max(hi - lo, 0.01 * max(abs(hi), 1e-9))
        ax.set_ylim(lo - pad if lo - pad > 0 or lo < 0 else 0.0, hi + pad)
    ax.set_xticks(np.arange(len(categories)), [str(c) for c in categories], rotation=30)


def plot_figures(cfg, results: pd.DataFrame, folder: str) -> list[str]:
    """Draw every figure a sweep's config declares (``figures``) into ``folder``; returns the paths.

    Example
    -------
    >>> from ray_vfl.experiments import ExperimentConfig
    >>> cfg = ExperimentConfig.from_dict({"name": "d", "protocol": "pivodl", "sweep": {"clients": [2, 4]},
    ...     "figures": [{"name": "fig6", "x": "clients", "y": ["auc", "s_per_tree"]}]})
    >>> plot_figures(cfg, table, "results/d")                               # doctest: +SKIP
    ['results/d/fig6.png']
    """
    if not cfg.figures:
        raise ConfigError(f"config {cfg.name!r} declares no figures; name x and y on the command line instead")
    out = []
    curves = None
    for i, fig in enumerate(cfg.figures):
        name = fig.get("name") or f"{cfg.name}_{i}"
        table = results
        if fig["x"] == "tree":
            curves = per_tree_table(results) if curves is None else curves
            table = curves
        elif fig["x"] in (cfg.sweep or {}) and not pd.api.types.is_numeric_dtype(table[fig["x"]]):
            order = {v: i for i, v in enumerate(cfg.sweep[fig["x"]])}  # bars in the config's order
            table = table.iloc[np.argsort([order.get(v, len(order)) for v in table[fig["x"]]], kind="stable")]
        out.append(plot_sweep(table, fig["x"], fig["y"], os.path.join(folder, f"{name}.png"), fig.get("group"),
                              fig.get("title", cfg.name), bool(fig.get("logx", False)), bool(fig.get("logy", False))))
    return out
