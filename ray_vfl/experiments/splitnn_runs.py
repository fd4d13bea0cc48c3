"""One split-NN (FedAds) run of a sweep: one Table 3 method or one Table 4 defense, one result row.

A run with ``method`` (swept or in ``params``) is a row of FedAds Table 3: a random ``aligned_fraction``
(default 0.2) of the training rows is held by both parties, the rest by the label party only, and the
method (:data:`~ray_vfl.splitnn.experiments.UNALIGNED_METHODS`) trains on them. A run with ``defense``
(or neither: ``none``) is a row of Table 4: VanillaVFL on every aligned row with the defense wrapping
the gradients the label party sends, then the label-inference attacks on the non-label party's recorded
view. The rows come from :func:`~ray_vfl.splitnn.experiments.unaligned_row` and
:func:`~ray_vfl.splitnn.experiments.privacy_row`, the functions behind ``jobs/splitnn.py``'s tables.

``params`` holds :class:`~ray_vfl.splitnn.SplitNNConfig` fields and these run settings
(:data:`RUN_PARAMS`): ``method``, ``defense``, ``aligned_fraction``, ``epsilon`` (of ``dp``),
``defense_params`` (defense -> its keyword arguments, e.g. ``{marvell: {init_scale: 4.0}}``),
``pretrain_epochs``, ``diffusion_steps``, ``imitation_epochs``, ``ssl_epochs``, ``ssl_guidance`` (Table 3's
unaligned methods), and ``positive_rate``, ``n_users``, ``nonlabel_strength`` (the ``fedads_like`` generator).
Besides ``method``, ``defense``, ``aligned_fraction`` and ``epsilon``, a sweep may vary ``epochs`` and
``embedding_dim`` (the models' capacity; every row records it).

Datasets: ``fedads_like`` (the FedAds-like generator, ``rows`` rows generated, default 50,000; users
for HeuristicVFL), ``credit``, ``ipinyou``, ``open_bandit`` (shipped in ray_vfl/data/files; ``rows``:
a seeded random subset of that many training rows and proportionally many test rows). Needs torch.
dLeakAUC (against the ``none`` row) is a difference of two rows' columns, left to the reader of the table.

Example
-------
>>> from ray_vfl.experiments import ExperimentConfig
>>> cfg = ExperimentConfig.from_dict({"name": "t4", "protocol": "splitnn", "dataset": "fedads_like",
...                                   "rows": 400, "sweep": {"defense": ["none", "dp"]}})
>>> [r["defense"] for r in cfg.runs()]
['none', 'dp']
>>> run_splitnn(cfg, cfg.runs()[1], Runtime())          # doctest: +SKIP
{'defense': 'dp', 'auc': ..., 'epsilon_accounted': 1.0, 'norm_leak_auc_two_sided': ..., ...}
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

import numpy as np

from ..data.bundled import data_path
from ..errors import ConfigError
from .config import ExperimentConfig

__all__ = ["run_splitnn", "RUN_PARAMS", "DATA_FILES"]

RUN_PARAMS = ("method", "defense", "aligned_fraction", "epsilon", "defense_params", "pretrain_epochs",
              "diffusion_steps", "imitation_epochs", "ssl_epochs", "ssl_guidance", "positive_rate", "n_users", "nonlabel_strength")
_GENERATOR = ("positive_rate", "n_users", "nonlabel_strength")
# dataset -> (its shipped data file, its loader in ray_vfl.splitnn)
DATA_FILES = {"credit": ("fate_default_credit_hetero_guest.csv.gz", "load_credit_vfl"),
              "ipinyou": ("ipinyou_2997_click_sample.csv.gz", "load_ipinyou"),
              "open_bandit": ("obd_zozotown_click_all.csv.gz", "load_open_bandit")}
ATTACKS = ("norm", "direction", "cluster")


def _setting(cfg: ExperimentConfig, run: dict[str, Any], key: str, default: Any = None) -> Any:
    return run.get(key, cfg.params.get(key, default))


def _subset(data, rows: int | None, test_size: float, seed: int):
    """A seeded random ``rows`` of the training rows and ``rows * test_size / (1 - test_size)`` test rows."""
    from ..splitnn import SplitNNData

    if rows is None or rows >= data.train.n_rows:
        return data
    rng = np.random.default_rng([seed, 7])
    n_test = min(data.test.n_rows, max(10, round(rows * test_size / (1 - test_size))))

    def pick(part, n):
        return part.take(np.sort(rng.choice(part.n_rows, n, replace=False)))

    return SplitNNData(data.name, pick(data.train, rows), pick(data.test, n_test))


def load_data(cfg: ExperimentConfig, run: dict[str, Any]):
    """The run's data with every row aligned (Table 3 runs split it again), and the user column or None."""
    from .. import splitnn

    name, rows = run["dataset"], run.get("rows", cfg.rows)
    if name == "fedads_like":
        n = rows or 50_000
        kwargs = {k: cfg.params[k] for k in _GENERATOR if k in cfg.params}
        kwargs.setdefault("n_users", max(1, n // 20))
        return splitnn.make_fedads_like(n, aligned_fraction=1.0, seed=cfg.seed, **kwargs), "user_id"
    filename, loader = DATA_FILES[name]
    folder = os.path.dirname(data_path(filename))
    extra = {"test_size": cfg.test_size, "seed": cfg.seed} if name == "credit" else {}
    return _subset(getattr(splitnn, loader)(folder, **extra), rows, cfg.test_size, cfg.seed), None


def _configs(cfg: ExperimentConfig, run: dict[str, Any], seed: int):
    from ..splitnn import DiffusionConfig, SplitNNConfig, UnalignedOptions

    net = {k: v for k, v in cfg.params.items() if k not in RUN_PARAMS}
    valid = {f for f in SplitNNConfig.__dataclass_fields__}
    unknown = sorted(set(net) - valid)
    if unknown:
        raise ConfigError(f"unknown splitnn parameter(s) {unknown}; valid names are the SplitNNConfig fields "
                          f"{sorted(valid)} and the run settings {sorted(RUN_PARAMS)}")
    for key in ("epochs", "embedding_dim"):
        if key in run:
            net[key] = run[key]
    config = SplitNNConfig.from_dict({**net, "seed": seed})
    options = UnalignedOptions(pretrain_epochs=cfg.params.get("pretrain_epochs", 1),
                               imitation_epochs=cfg.params.get("imitation_epochs", 20),
                               ssl_epochs=cfg.params.get("ssl_epochs", 5),
                               ssl_guidance=cfg.params.get("ssl_guidance", 0.5),
                               diffusion=DiffusionConfig(steps=cfg.params.get("diffusion_steps", 100), seed=seed))
    return config, options


def _defense(cfg: ExperimentConfig, run: dict[str, Any], name: str):
    from ..splitnn import GaussianDP, Marvell, MixPro, NoDefense

    kinds = {"none": NoDefense, "dp": GaussianDP, "marvell": Marvell, "mixpro": MixPro}
    per = cfg.params.get("defense_params") or {}
    if not isinstance(per, dict) or not set(per) <= set(kinds):
        raise ConfigError(f"params['defense_params'] must map defenses {list(kinds)} to their keyword arguments, got {per!r}")
    kwargs = dict(per.get(name) or {})
    if name == "dp" and _setting(cfg, run, "epsilon") is not None:
        kwargs["epsilon"] = float(_setting(cfg, run, "epsilon"))
    try:
        return kinds[name](**kwargs)
    except TypeError as exc:
        raise ConfigError(f"params['defense_params'][{name!r}]: {exc}") from exc


def _traffic(model) -> dict[str, Any]:
    stats = getattr(model, "comm_stats", None)
    if stats is None:  # Local: one process, nothing sent
        return {"mb": 0.0, "mb_by_channel": "{}", "mb_by_kind": "{}"}
    return {"mb": stats.total_mb, "mb_by_channel": json.dumps(stats.by_channel()),
            "mb_by_kind": json.dumps(stats.by_kind())}


class _StepBar:
    """The federated steps of one run, under the bar over the runs (one tick per window of steps)."""

    def __init__(self, desc: str) -> None:
        from tqdm.auto import tqdm

        self.bar = tqdm(desc=desc, unit="window", position=1, leave=False)

    def __call__(self, done: int) -> None:
        self.bar.set_postfix_str(f"{done} steps", refresh=False)
        self.bar.update(1)

    def close(self) -> None:
        self.bar.close()


def run_splitnn(cfg: ExperimentConfig, run: dict[str, Any], runtime, progress: bool = False) -> dict[str, Any]:
    """Train and evaluate one split-NN run (one method or one defense; a bar over its federated steps if
    ``progress``); returns its result row."""
    bar = _StepBar(", ".join(f"{k}={v}" for k, v in run.items() if k != "run_id")) if progress else None
    try:
        return _run(cfg, run, runtime, bar)
    finally:
        if bar is not None:
            bar.close()


def _run(cfg: ExperimentConfig, run: dict[str, Any], runtime, bar) -> dict[str, Any]:
    try:
        from ..splitnn.experiments import privacy_row, unaligned_row
        from ..splitnn.unaligned_protocol import split_aligned
    except ModuleNotFoundError as exc:
        if exc.name != "torch":
            raise
        raise ConfigError("protocol 'splitnn' needs torch: pip install torch==2.13.0 (the CPU build)") from exc
    t0 = time.perf_counter()
    seed = cfg.seed + int(run["repeat"])
    data, users = load_data(cfg, run)
    config, options = _configs(cfg, run, seed)
    method = _setting(cfg, run, "method")
    row: dict[str, Any] = {"run_id": run["run_id"], "name": cfg.name, "protocol": cfg.protocol, **run,
                           "epochs": config.epochs, "batch_size": config.batch_size,
                           "embedding_dim": config.embedding_dim}
    if method is not None:
        fraction = float(_setting(cfg, run, "aligned_fraction", 0.2))
        partial, oracle = split_aligned(data, fraction, seed)
        t_data = time.perf_counter()
        result, model = unaligned_row(runtime, partial, oracle, config, options, method, seed,
                                      users if method == "heuristic" else None, on_window=bar)
        attack_s = 0.0
        row.update(table=3, method=method, aligned_fraction=fraction, pretrain_epochs=options.pretrain_epochs,
                   train_rows=oracle.train.n_rows, test_rows=partial.test.n_rows)
    else:
        name = _setting(cfg, run, "defense", "none")
        t_data = time.perf_counter()
        result, model = privacy_row(runtime, data, config, name, _defense(cfg, run, name), cluster_seed=seed,
                                    on_window=bar)
        attack_s = result.pop("attack_s")
        two = [result[f"{a}_leak_auc_two_sided"] for a in ATTACKS]
        row.update(table=4, defense=name, train_rows=data.train.n_rows, test_rows=data.test.n_rows,
                   defense_params=json.dumps(result.pop("params")), epsilon_accounted=result.pop("epsilon"),
                   leak_auc_two_sided_max=max(two))
    wall = time.perf_counter() - t_data
    train_s = float(getattr(model, "train_seconds", getattr(model, "train_seconds_", 0.0)))
    predict_s = result.pop("predict_s")
    result.pop("train_s", None)
    row.update({k: v for k, v in result.items() if k not in ("dataset", "seed")})
    row.update(data_s=t_data - t0, setup_s=max(0.0, wall - train_s - predict_s - attack_s), train_s=train_s,
               predict_s=predict_s, attack_s=attack_s, **_traffic(model))
    return row
