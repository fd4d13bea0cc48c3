"""Figures of a sweep's results: mean over repeats with a min-max band, as the papers draw them."""

from __future__ import annotations

import os

import pandas as pd

from ..errors import ConfigError, DataError

__all__ = ["plot_sweep", "UNITS"]

# Axis labels with units for the result columns.
UNITS = {
    "clients": "clients", "max_depth": "maximum depth", "n_trees": "trees", "epsilon": "epsilon (DP budget)",
    "key_bits": "key size (bits)", "auc": "test AUC", "accuracy": "test accuracy", "nll": "test NLL",
    "rmse": "test RMSE", "train_s": "training time (s)", "s_per_tree": "time per tree (s)",
    "setup_s": "set-up time (s)", "predict_s": "prediction time (s)", "mb": "traffic (MB)",
    "mb_per_tree": "traffic per tree (MB)", "guess_accuracy": "label-guess accuracy",
    "guess_auc_two_sided": "label-guess AUC (two-sided)",
}


def plot_sweep(results: pd.DataFrame, x: str, y: str, path: str, group: str | None = None, title: str | None = None) -> str:
    """Write a PNG of ``y`` against ``x`` (one line per value of ``group``): the mean over repeats,
    a band from the minimum to the maximum. Returns ``path``."""
    for column in (x, y) + ((group,) if group else ()):
        if column not in results.columns:
            raise ConfigError(f"column {column!r} is not in the results; they hold {sorted(results.columns)}")
    if results.empty:
        raise DataError("no results to plot")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.5, 3.8))
    groups = [(None, results)] if group is None else list(results.groupby(group, dropna=False))
    for key, part in groups:
        stats = part.groupby(x)[y].agg(["mean", "min", "max"]).sort_index()
        xs = stats.index.to_numpy(dtype=float)
        label = None if key is None else f"{group}={key}"
        line, = ax.plot(xs, stats["mean"], marker="o", label=label)
        ax.fill_between(xs, stats["min"], stats["max"], alpha=0.2, color=line.get_color())
    ax.set_xlabel(UNITS.get(x, x))
    ax.set_ylabel(UNITS.get(y, y))
    if title:
        ax.set_title(title)
    if group is not None:
        ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
