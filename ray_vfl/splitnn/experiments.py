"""The FedAds tables: effectiveness (Table 3-like) and utility/privacy (Table 4-like).

- :func:`effectiveness_table`: Local (label party's features only), VanillaVFL
  (federated, on Ray) and the centralized upper bound (all features in one
  process): test AUC and NLL.
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

__all__ = ["effectiveness_table", "privacy_table", "default_defenses", "write_table"]


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
