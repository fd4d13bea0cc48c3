"""The FedAds tables: effectiveness (Table 3-like) and utility/privacy (Table 4-like).

- :func:`effectiveness_table`: Local (label party's features only), VanillaVFL
  (federated, on Ray) and the centralized upper bound (all features in one
  process): test AUC and NLL.
- :func:`unaligned_table`: FedAds Table 3 with unaligned rows (20 % of the training rows aligned, the
  rest label-party only): Local, VanillaVFL, HeuristicVFL (with user IDs), JPL, Diffu-AT and ORACLE
  (every training row aligned), same test rows and epochs; :func:`summarize_seeds` gives mean and std.
- :func:`privacy_table`: VanillaVFL with no defense, DP, Marvell and MixPro:
  test AUC, the accounted epsilon (DP), and per attack (norm, direction,
  clustering) LeakAUC and dLeakAUC both one-sided and two-sided (per batch
  ``max(AUC, 1 - AUC)``: what a defense flips rather than removes), next to the
  two-sided level of random scores on the same batches; the attacks are
  computed only from the non-label party's recorded view.
"""

from __future__ import annotations

import csv
import json
import os
import time
from typing import Any, Callable, Mapping, Sequence

from ..errors import ConfigError
from ..runtime.actors import Runtime
from .privacy.attacks import ATTACKS, cluster_attack, d_leak_auc, leak_aucs, two_sided_chance
from .network.baselines import InProcessSplitNet
from .network.config import SplitNNConfig
from .data import SplitNNData
from .privacy.defenses import Defense, GaussianDP, Marvell, MixPro, NoDefense
from .protocol import SplitNNModel, train
from .unaligned.synthesis import UnalignedOptions
from .unaligned_protocol import split_aligned, train_unaligned

__all__ = ["effectiveness_table", "privacy_table", "privacy_row", "default_defenses", "write_table", "unaligned_table",
           "unaligned_row", "UNALIGNED_METHODS", "summarize_seeds"]


def default_defenses() -> dict[str, Defense]:
    """The Table 4 rows with their default parameters."""
    return {"none": NoDefense(), "DP": GaussianDP(), "Marvell": Marvell(), "MixPro": MixPro()}


def effectiveness_table(runtime: Runtime, data: SplitNNData, config: SplitNNConfig, num_threads: int = 1) -> list[dict[str, Any]]:
    """Local / VanillaVFL / centralized: test AUC and NLL on the aligned test rows."""
    rows = []

    def add(model: str, train_rows: int, metrics: dict[str, float], seconds: float, wall: float | None = None) -> None:
        # train_s: the training loop alone; wall_s adds starting/resetting actors and encoding (federated only)
        rows.append({"dataset": data.name, "model": model, "train_rows": train_rows, "auc": round(metrics["auc"], 4),
                     "nll": round(metrics["nll"], 4), "train_s": round(seconds, 2),
                     "wall_s": round(seconds if wall is None else wall, 2)})

    label = data.label_party
    local = InProcessSplitNet(config, [label], num_threads).fit(data.local_train())
    add("Local", data.train.n_rows, local.evaluate(data.test), local.train_seconds_)
    if data.label_only is not None:
        more = data.local_train(include_unaligned=True)
        local_all = InProcessSplitNet(config, [label], num_threads).fit(more)
        add("Local (+unaligned rows)", more.n_rows, local_all.evaluate(data.test), local_all.train_seconds_)
    start = time.perf_counter()
    vfl = train(runtime, data.train, config)
    wall = time.perf_counter() - start
    add("VanillaVFL", data.train.n_rows, vfl.evaluate(data.test), vfl.train_seconds, wall)
    central = InProcessSplitNet(config, None, num_threads).fit(data.train)
    add("Centralized", data.train.n_rows, central.evaluate(data.test), central.train_seconds_)
    return rows


def privacy_row(runtime: Runtime, data: SplitNNData, config: SplitNNConfig, name: str, defense: Defense,
                cluster_seed: int = 0, on_window: Callable | None = None) -> tuple[dict[str, Any], SplitNNModel]:
    """One row of :func:`privacy_table` (no dLeakAUC: that needs the first row) and its trained model.

    Every attack runs on the non-label party's recorded view only. ``on_window``: called with the
    batches done after every window of batches (progress).
    """
    y = data.train.label
    model = train(runtime, data.train, config, defense=defense, on_window=on_window)
    start = time.perf_counter()
    metrics = model.evaluate(data.test)
    predicted = time.perf_counter()
    view = model.recorded_view()
    row = {"dataset": data.name, "defense": name, "params": defense.params(), "auc": round(metrics["auc"], 4),
           "nll": round(metrics["nll"], 4),
           "epsilon": None if model.privacy is None else round(model.privacy["epsilon"], 4)}
    for attack, run in ATTACKS.items():
        scores = run(view, seed=cluster_seed) if run is cluster_attack else run(view)
        both = leak_aucs(scores, view.rows, y)
        row[f"{attack}_leak_auc"] = round(both["one_sided"], 4)
        row[f"{attack}_leak_auc_two_sided"] = round(both["two_sided"], 4)
    row["two_sided_chance"] = round(two_sided_chance(view.rows, y), 4)
    row.update(predict_s=round(predicted - start, 3), attack_s=round(time.perf_counter() - predicted, 3))
    return row, model


def privacy_table(runtime: Runtime, data: SplitNNData, config: SplitNNConfig,
                  defenses: Mapping[str, Defense] | None = None, cluster_seed: int = 0) -> list[dict[str, Any]]:
    """Per defense: test AUC, epsilon, and per attack LeakAUC and dLeakAUC (vs the first row), one- and two-sided.

    Columns per attack ``a`` in ``norm``, ``direction``, ``cluster``: ``a_leak_auc`` (one-sided),
    ``a_leak_auc_two_sided``, ``a_d_leak_auc`` and ``a_d_leak_auc_two_sided``; ``two_sided_chance`` is
    the two-sided LeakAUC of random scores on the same batches (what "no leak" reads as).
    """
    defenses = dict(defenses or default_defenses())
    rows = [privacy_row(runtime, data, config, name, defense, cluster_seed)[0] for name, defense in defenses.items()]
    base = rows[0]
    for row in rows:
        for attack in ATTACKS:
            for side in ("", "_two_sided"):
                value, ref = row[f"{attack}_leak_auc{side}"], base[f"{attack}_leak_auc{side}"]
                row[f"{attack}_d_leak_auc{side}"] = round(d_leak_auc(value, ref), 4)
    return rows


def write_table(rows: Sequence[dict[str, Any]], path_stem: str) -> list[str]:
    """Write ``rows`` as ``<stem>.csv`` and ``<stem>.json``; returns the paths."""
    os.makedirs(os.path.dirname(os.path.abspath(path_stem)), exist_ok=True)
    fields = list(dict.fromkeys(k for row in rows for k in row))
    with open(path_stem + ".csv", "w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=fields)
        writer.writeheader()
        for row in rows:
            writer.writerow({k: json.dumps(v) if isinstance(v, dict) else v for k, v in row.items()})
    with open(path_stem + ".json", "w", encoding="utf-8") as fh:
        json.dump(list(rows), fh, indent=2)
    return [path_stem + ".csv", path_stem + ".json"]


# FedAds Table 3's methods: key -> the name its row shows
UNALIGNED_METHODS = {"local": "Local", "vanilla": "VanillaVFL", "heuristic": "HeuristicVFL", "jpl": "JPL",
                     "fedcvt": "FedCVT", "ss-vfl": "SS-VFL", "fedhssl": "FedHSSL", "diffu-at": "Diffu-AT", "oracle": "ORACLE"}


def unaligned_row(runtime: Runtime, partial: SplitNNData, oracle: SplitNNData, config: SplitNNConfig,
                  options: UnalignedOptions, method: str, seed: int = 0, user_column: str | None = None,
                  num_threads: int = 1, on_window: Callable | None = None) -> tuple[dict[str, Any], Any]:
    """One method's row of :func:`unaligned_table` (``method`` a key of :data:`UNALIGNED_METHODS`) and its
    trained model (a :class:`SplitNNModel`, or for ``local`` an :class:`InProcessSplitNet`).

    ``partial, oracle`` come from :func:`split_aligned`. ``on_window``: called with the steps done after
    every window of federated steps (progress; the in-process Local method has none).
    """
    if method not in UNALIGNED_METHODS:
        raise ConfigError(f"method must be one of {list(UNALIGNED_METHODS)}, got {method!r}")
    cfg = config.replace(seed=seed)
    plain = cfg.replace(epochs=options.pretrain_epochs + config.epochs)
    extra: dict[str, Any] = {}
    if method == "local":
        model = InProcessSplitNet(plain, [partial.label_party], num_threads).fit(partial.local_train(include_unaligned=True))
        seconds = model.train_seconds_
    elif method in ("vanilla", "oracle"):
        model = train(runtime, (partial if method == "vanilla" else oracle).train, plain, on_window=on_window)
        seconds = model.train_seconds
    else:
        opts = options.replace(method=method, user_column=user_column, diffusion=options.diffusion.replace(seed=seed))
        model = train_unaligned(runtime, partial.train, partial.label_only, cfg, opts,
                                on_window=None if on_window is None else lambda phase, done: on_window(done))
        seconds = model.train_seconds
        extra = {k: model.unaligned[k] for k in ("embeddings_per_s", "user_hit_rate", "ssl_s", "ssl_output_std") if k in model.unaligned}
    start = time.perf_counter()
    metrics = model.evaluate(partial.test)
    row = {"dataset": partial.name, "seed": seed, "model": UNALIGNED_METHODS[method], "aligned_rows": partial.train.n_rows,
           "unaligned_rows": partial.label_only.n_rows, "auc": round(metrics["auc"], 4),
           "nll": round(metrics["nll"], 4), "train_s": round(seconds, 2),
           "predict_s": round(time.perf_counter() - start, 3), **extra}
    return row, model


def unaligned_table(runtime: Runtime, full: SplitNNData, config: SplitNNConfig, options: UnalignedOptions,
                    aligned_fraction: float = 0.2, seed: int = 0, user_column: str | None = None,
                    num_threads: int = 1, methods: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """One seed of FedAds Table 3 with unaligned rows, from all-aligned data ``full``.

    Every method sees the same rows, test set and budget: ``options.pretrain_epochs + config.epochs``
    passes over its training rows (Diffu-AT, JPL and HeuristicVFL: that many over the aligned rows, of
    which ``config.epochs`` alternate with the unaligned rows). Local trains on all the label party's
    training rows; ORACLE on every training row aligned. ``seed`` draws the aligned rows and seeds
    the models. HeuristicVFL runs only with ``user_column``. ``methods``: keys of :data:`UNALIGNED_METHODS`
    to run (default: all).
    """
    unknown = sorted(set(methods or ()) - set(UNALIGNED_METHODS))
    if unknown:
        raise ConfigError(f"unknown methods {unknown}; choose from {list(UNALIGNED_METHODS)}")
    partial, oracle = split_aligned(full, aligned_fraction, seed)
    methods = [m for m in (methods or UNALIGNED_METHODS) if m != "heuristic" or user_column is not None]
    return [unaligned_row(runtime, partial, oracle, config, options, m, seed, user_column, num_threads)[0]
            for m in methods]


def summarize_seeds(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Mean and standard deviation (over seeds) of AUC and NLL per dataset and model, in first-seen order."""
    import numpy as np

    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault((row["dataset"], row["model"]), []).append(row)
    out = []
    for (dataset, model), members in groups.items():
        auc = np.array([m["auc"] for m in members])
        nll = np.array([m["nll"] for m in members])
        out.append({"dataset": dataset, "model": model, "seeds": len(members),
                    "auc_mean": round(float(auc.mean()), 4), "auc_std": round(float(auc.std(ddof=1)) if len(auc) > 1 else 0.0, 4),
                    "nll_mean": round(float(nll.mean()), 4), "nll_std": round(float(nll.std(ddof=1)) if len(nll) > 1 else 0.0, 4)})
    return out
