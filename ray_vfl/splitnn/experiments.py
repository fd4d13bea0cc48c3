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
from typing import Any, Mapping, Sequence

from ..runtime.actors import Runtime
from .attacks import ATTACKS, cluster_attack, d_leak_auc, leak_aucs, two_sided_chance
from .baselines import InProcessSplitNet
from .config import SplitNNConfig
from .data import SplitNNData
from .defenses import Defense, GaussianDP, Marvell, MixPro, NoDefense
from .protocol import train
from .synthesis import UnalignedOptions
from .unaligned import split_aligned, train_unaligned

__all__ = ["effectiveness_table", "privacy_table", "default_defenses", "write_table", "unaligned_table",
           "summarize_seeds"]


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


def privacy_table(runtime: Runtime, data: SplitNNData, config: SplitNNConfig,
                  defenses: Mapping[str, Defense] | None = None, cluster_seed: int = 0) -> list[dict[str, Any]]:
    """Per defense: test AUC, epsilon, and per attack LeakAUC and dLeakAUC (vs the first row), one- and two-sided.

    Columns per attack ``a`` in ``norm``, ``direction``, ``cluster``: ``a_leak_auc`` (one-sided),
    ``a_leak_auc_two_sided``, ``a_d_leak_auc`` and ``a_d_leak_auc_two_sided``; ``two_sided_chance`` is
    the two-sided LeakAUC of random scores on the same batches (what "no leak" reads as).
    """
    defenses = dict(defenses or default_defenses())
    y = data.train.label
    rows: list[dict[str, Any]] = []
    for name, defense in defenses.items():
        model = train(runtime, data.train, config, defense=defense)
        view = model.recorded_view()
        metrics = model.evaluate(data.test)
        row = {"dataset": data.name, "defense": name, "params": defense.params(), "auc": round(metrics["auc"], 4),
               "nll": round(metrics["nll"], 4),
               "epsilon": None if model.privacy is None else round(model.privacy["epsilon"], 4)}
        for attack, run in ATTACKS.items():
            scores = run(view, seed=cluster_seed) if run is cluster_attack else run(view)
            both = leak_aucs(scores, view.rows, y)
            row[f"{attack}_leak_auc"] = round(both["one_sided"], 4)
            row[f"{attack}_leak_auc_two_sided"] = round(both["two_sided"], 4)
        row["two_sided_chance"] = round(two_sided_chance(view.rows, y), 4)
        rows.append(row)
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


def unaligned_table(runtime: Runtime, full: SplitNNData, config: SplitNNConfig, options: UnalignedOptions,
                    aligned_fraction: float = 0.2, seed: int = 0, user_column: str | None = None,
                    num_threads: int = 1) -> list[dict[str, Any]]:
    """One seed of FedAds Table 3 with unaligned rows, from all-aligned data ``full``.

    Every method sees the same rows, test set and budget: ``options.pretrain_epochs + config.epochs``
    passes over its training rows (Diffu-AT, JPL and HeuristicVFL: that many over the aligned rows, of
    which ``config.epochs`` alternate with the unaligned rows). Local trains on all the label party's
    training rows; ORACLE on every training row aligned. ``seed`` draws the aligned rows and seeds
    the models.
    """
    partial, oracle = split_aligned(full, aligned_fraction, seed)
    cfg = config.replace(seed=seed)
    epochs = options.pretrain_epochs + config.epochs
    plain = cfg.replace(epochs=epochs)
    rows: list[dict[str, Any]] = []

    def add(model: str, metrics: dict[str, float], seconds: float, extra: dict | None = None) -> None:
        rows.append({"dataset": full.name, "seed": seed, "model": model, "aligned_rows": partial.train.n_rows,
                     "unaligned_rows": partial.label_only.n_rows, "auc": round(metrics["auc"], 4),
                     "nll": round(metrics["nll"], 4), "train_s": round(seconds, 2), **(extra or {})})

    local = InProcessSplitNet(plain, [partial.label_party], num_threads).fit(partial.local_train(include_unaligned=True))
    add("Local", local.evaluate(partial.test), local.train_seconds_)
    vanilla = train(runtime, partial.train, plain)
    add("VanillaVFL", vanilla.evaluate(partial.test), vanilla.train_seconds)
    methods = [("JPL", "jpl"), ("Diffu-AT", "diffu-at")]
    if user_column is not None:
        methods.insert(0, ("HeuristicVFL", "heuristic"))
    for name, method in methods:
        opts = options.replace(method=method, user_column=user_column,
                               diffusion=options.diffusion.replace(seed=seed))
        model = train_unaligned(runtime, partial.train, partial.label_only, cfg, opts)
        extra = {k: model.unaligned[k] for k in ("embeddings_per_s", "user_hit_rate") if k in model.unaligned}
        add(name, model.evaluate(partial.test), model.train_seconds, extra)
    upper = train(runtime, oracle.train, plain)
    add("ORACLE", upper.evaluate(partial.test), upper.train_seconds)
    return rows


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
