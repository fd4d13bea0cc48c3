"""The schema of a sweep: one validated config, unknown keys refused with the valid ones named.

A sweep names a protocol, a dataset and a grid of settings (``sweep``); every combination runs
``repeats`` times. ``params`` fixes the protocol's other hyper-parameters (validated when the run
builds the protocol's own config: a typo there is an error too).

Example
-------
>>> cfg = ExperimentConfig.from_dict({"name": "demo", "protocol": "pivodl", "sweep": {"clients": [2, 4]}})
>>> [r["clients"] for r in cfg.runs()]
[2, 4]
>>> ExperimentConfig.from_dict({"name": "demo", "protocol": "pivodl", "sweeps": {}})
Traceback (most recent call last):
...
ray_vfl.errors.ConfigError: unknown ExperimentConfig parameter(s) ['sweeps']; valid names are ['checkpoint_every', 'dataset', 'description', 'figures', 'fresh_actors', 'name', 'params', 'per_tree', 'protocol', 'repeats', 'rows', 'seed', 'sweep', 'test_size']
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
from dataclasses import dataclass, field
from typing import Any

from ..config import ValidatedConfig, check_float, check_int
from ..errors import ConfigError, DataError

__all__ = ["ExperimentConfig", "PROTOCOLS", "SWEEPABLE", "FIGURE_KEYS", "SPLITNN_METHODS", "SPLITNN_DEFENSES",
           "SPLITNN_DATASETS", "result_columns", "PER_TREE_COLUMNS"]

PROTOCOLS = ("secureboost", "pivodl", "ssxgb", "splitnn")
# FedAds (protocol splitnn): Table 3's methods (unaligned rows), Table 4's defenses, the split-NN datasets.
SPLITNN_METHODS = ("local", "vanilla", "heuristic", "jpl", "fedcvt", "ss-vfl", "fedhssl", "diffu-at", "oracle")
SPLITNN_DEFENSES = ("none", "dp", "marvell", "mixpro")
SPLITNN_DATASETS = ("fedads_like", "credit", "ipinyou", "open_bandit")
# Settings only the split-NN runs have (swept, or fixed in params).
SPLITNN_ONLY = ("method", "defense", "epochs", "aligned_fraction", "embedding_dim")
TREE_ONLY = ("clients", "max_depth", "n_trees", "key_bits", "backend")
# params that say how long to wait, not what a run computes: left out of run_id
_WAITING_ONLY = frozenset({"timeout_s"})
# What a sweep may vary, and what each value must be.
SWEEPABLE = {
    "clients": "an integer >= 2 (parties the columns are split over)",
    "max_depth": "an integer in [1, 16]",
    "n_trees": "an integer >= 1",
    "epsilon": "a positive number, or null for no DP (PIVODL; splitnn: the budget of defense dp)",
    "key_bits": "an integer such as 1024 or 2048",
    "backend": "a crypto backend name: plain, paillier, ou",
    "dataset": "credit, bank, energy, mnist, iris, synthetic or a CSV/Parquet path",
    "rows": "an integer >= 10 (the dataset's first rows; for synthetic and fedads_like, the rows generated)",
    "instance_threshold": "an integer >= 1 (PIVODL: fewest rows of each client in any set whose sum a client decrypts; default 50)",
    "method": f"a FedAds Table 3 method (splitnn): one of {list(SPLITNN_METHODS)}",
    "defense": f"a FedAds Table 4 defense (splitnn): one of {list(SPLITNN_DEFENSES)}",
    "epochs": "an integer >= 1 (splitnn: epochs over the aligned rows)",
    "aligned_fraction": "a number in (0, 1) (splitnn Table 3: the training rows both parties hold)",
    "embedding_dim": "an integer in [1, 1024] (splitnn: every feature's embedding width, the models' capacity)",
}
# The columns the runner writes into every row (runner.run_one), per protocol; figures may only name these.
_COMMON_COLUMNS = ("clients", "dataset", "repeat", "rows", "backend", "key_bits", "max_depth", "n_trees", "train_rows",
                   "auc", "accuracy", "nll", "rmse", "data_s", "setup_s", "train_s", "s_per_tree", "predict_s", "mb",
                   "mb_per_tree")
# Where the training time went, measured by the parties (runner._where_time_went), for the tree protocols.
_TIMELINE_COLUMNS = ("crypto_s", "wire_s", "compute_s", "between_calls_s", "calls", "ms_per_call", "empty_call_ms",
                     "waiting_s_mean", "peak_rss_mb")
_SPLITNN_COLUMNS = ("method", "defense", "epochs", "aligned_fraction", "embedding_dim", "epsilon", "epsilon_accounted", "attack_s",
                    "leak_auc_two_sided_max", "two_sided_chance") + tuple(
    f"{attack}_leak_auc{side}" for attack in ("norm", "direction", "cluster") for side in ("", "_two_sided"))
_PROTOCOL_COLUMNS = {"secureboost": _TIMELINE_COLUMNS, "ssxgb": _TIMELINE_COLUMNS,
                     "pivodl": _TIMELINE_COLUMNS + ("epsilon", "epsilon_accounted", "instance_threshold", "guess_accuracy",
                                                    "guess_auc_two_sided", "guess_partition_auc_two_sided"),
                     "splitnn": _SPLITNN_COLUMNS}
# With ``per_tree: true`` each row also holds ``by_tree`` (JSON): the test metrics after each tree, for the
# protocol (model = the protocol's name) and for centralized xgboost with the same settings (model = xgboost);
# a figure whose x is ``tree`` is drawn from those (see plots.per_tree_table).
PER_TREE_COLUMNS = ("tree", "model", "auc", "accuracy", "nll", "rmse")
# What each entry of ``figures`` may hold (``x`` and ``y`` are required).
FIGURE_KEYS = {"name": "the PNG's file name (without .png)", "x": "the result column on the x axis",
               "y": "one result column or a list of them (one panel each)", "group": "one line per value of this column",
               "title": "the figure's title", "logx": "true for a logarithmic x axis", "logy": "true for a logarithmic y axis"}


def result_columns(protocol: str, per_tree: bool = False) -> tuple[str, ...]:
    """The numeric columns a figure may name for ``protocol``: every row's, or with ``per_tree`` (x = ``tree``)
    the per-tree table's.

    Example
    -------
    >>> "guess_auc_two_sided" in result_columns("pivodl"), "guess_auc_two_sided" in result_columns("ssxgb")
    (True, False)
    """
    if per_tree:
        return PER_TREE_COLUMNS
    return _COMMON_COLUMNS + _PROTOCOL_COLUMNS[protocol]


@dataclass(frozen=True)
class ExperimentConfig(ValidatedConfig):
    """One sweep (see the module docstring).

    Parameters
    ----------
    name : str
        Names the results (``<out>/<name>/results.csv``).
    description : str
        One line saying what the sweep reproduces and how long it takes (``jobs/experiment.py --help``
        lists it); not part of a run's identity.
    protocol : str
        ``"secureboost"``, ``"pivodl"``, ``"ssxgb"`` (binary classification only) or ``"splitnn"``
        (FedAds: sweep ``method`` for Table 3, ``defense`` for Table 4; needs torch to run).
    dataset : str
        Default dataset (``sweep`` may vary it).
    sweep : dict
        Setting -> list of values; settings in :data:`SWEEPABLE`.
    repeats : int
        Runs per combination (different data splits and, for DP, different noise).
    params : dict
        Fixed hyper-parameters of the protocol (``BoostConfig`` / ``PIVODLConfig`` fields; for splitnn
        ``SplitNNConfig`` fields plus the run settings of :mod:`ray_vfl.experiments.splitnn_runs`).
    test_size : float
        Fraction of rows held out for the test metrics.
    rows : int or None
        Use the first ``rows`` rows of the dataset only (the small variants); for ``synthetic``, the rows
        generated (default 10,000). ``sweep`` may vary it.
    figures : list of dict
        The paper figures this sweep reproduces, drawn by ``jobs/plot.py --config``: each names its file
        (``name``), ``x``, ``y`` (a column or a list, one panel each), optional ``group``, ``title``,
        ``logx``/``logy``. Each column must be one the runner writes for the protocol
        (:func:`result_columns`); ``x: tree`` draws the per-tree curves and needs ``per_tree``.
    fresh_actors : bool
        Start every run on new party actors (their start-up then counts in ``setup_s``), so each run's
        peak memory per party is its own; by default runs reuse the live actors.
    per_tree : bool
        Also evaluate the test metrics after each tree (``predict_margin(test, k)`` for k = 1 .. n_trees)
        and those of centralized xgboost trained with the same settings on the same rows (column ``by_tree``,
        JSON); costs one more prediction per tree.
    seed : int
        Seed of the column split, the label spread and the train/test split (plus the repeat number).
    checkpoint_every : int or None
        Tree protocols: every party saves its training state every this many trees under
        ``<out>/<name>/checkpoints/<run_id>/`` (:class:`~ray_vfl.trees.checkpoint.Checkpoint`), so an
        interrupted run resumes from its last saved tree instead of its first; the folder goes once the
        run's row is written. A resumed run's row counts time and bytes over the trees grown since the
        resume (``trees_resumed`` says from which tree). ``None`` (the default): no checkpoints, as their
        writing would sit inside the measured training time (it is subtracted: ``checkpoint_s``).
    """

    name: str
    protocol: str
    description: str = ""
    dataset: str = "credit"
    sweep: dict = field(default_factory=dict)
    repeats: int = 1
    params: dict = field(default_factory=dict)
    test_size: float = 0.2
    rows: int | None = None
    seed: int = 0
    figures: list = field(default_factory=list)
    fresh_actors: bool = False
    per_tree: bool = False
    checkpoint_every: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name or os.sep in self.name:
            raise ConfigError(f"name must be a non-empty file name, got {self.name!r}")
        if not isinstance(self.description, str):
            raise ConfigError(f"description must be one line of text, got {self.description!r}")
        if self.protocol not in PROTOCOLS:
            raise ConfigError(f"protocol must be one of {list(PROTOCOLS)}, got {self.protocol!r}")
        if not isinstance(self.sweep, dict):
            raise ConfigError(f"sweep must map settings to lists of values, got {type(self.sweep).__name__}")
        for key, values in self.sweep.items():
            if key not in SWEEPABLE:
                raise ConfigError(f"sweep setting {key!r} is unknown; valid settings are {sorted(SWEEPABLE)}")
            if not isinstance(values, list) or not values:
                raise ConfigError(f"sweep[{key!r}] must be a non-empty list of values, got {values!r}")
            if key == "epsilon" and self.protocol not in ("pivodl", "splitnn"):
                raise ConfigError(f"sweep over epsilon needs protocol 'pivodl' or 'splitnn' ({self.protocol} has no DP)")
            if key in SPLITNN_ONLY and self.protocol != "splitnn":
                raise ConfigError(f"sweep over {key} needs protocol 'splitnn' (FedAds); {self.protocol} has no {key}")
            if key in TREE_ONLY and self.protocol == "splitnn":
                raise ConfigError(f"sweep over {key} is for the tree protocols; splitnn sweeps {list(SPLITNN_ONLY)}, "
                                  "epsilon, dataset and rows")
            if key == "instance_threshold" and self.protocol != "pivodl":
                raise ConfigError(f"sweep over instance_threshold needs protocol 'pivodl' ({self.protocol} has none)")
            if key == "backend" and self.protocol == "ssxgb":
                raise ConfigError("SSXGB has one cryptosystem (BCP): sweep key_bits instead of backend")
            for v in values:
                self._check_value(key, v)
        if not isinstance(self.params, dict):
            raise ConfigError(f"params must map hyper-parameters to values, got {type(self.params).__name__}")
        if self.protocol == "splitnn":
            self._check_splitnn()
        if "rows" in self.sweep and self.rows is not None:
            raise ConfigError("rows is both swept and fixed; keep it in one place")
        clash = sorted(set(self.params) & set(self.sweep))
        if clash:
            raise ConfigError(f"{clash} are both swept and fixed in params; keep them in one place")
        check_int("repeats", self.repeats, 1, 1000)
        check_float("test_size", self.test_size, 0.0, 0.9, lo_open=True)
        if self.rows is not None:
            check_int("rows", self.rows, 10, 10**9)
        check_int("seed", self.seed, 0, 2**31)
        if not isinstance(self.fresh_actors, bool):
            raise ConfigError(f"fresh_actors must be true or false, got {self.fresh_actors!r}")
        if not isinstance(self.per_tree, bool):
            raise ConfigError(f"per_tree must be true or false, got {self.per_tree!r}")
        if self.checkpoint_every is not None:
            if self.protocol == "splitnn":
                raise ConfigError("checkpoint_every is for the tree protocols; a split-NN run is not checkpointed "
                                  "(drop the key)")
            check_int("checkpoint_every", self.checkpoint_every, 1, 10**6)
        if not isinstance(self.figures, list):
            raise ConfigError(f"figures must be a list of mappings, got {type(self.figures).__name__}")
        for i, fig in enumerate(self.figures):
            if not isinstance(fig, dict) or "x" not in fig or "y" not in fig:
                raise ConfigError(f"figures[{i}] must be a mapping with x and y at least, got {fig!r}")
            unknown = sorted(set(fig) - set(FIGURE_KEYS))
            if unknown:
                raise ConfigError(f"figures[{i}] has unknown key(s) {unknown}; valid keys are {sorted(FIGURE_KEYS)}")
            self._check_figure_columns(i, fig)

    def _check_figure_columns(self, i: int, fig: dict) -> None:
        per_tree = fig["x"] == "tree"
        if per_tree and not self.per_tree:
            raise ConfigError(f"figures[{i}] plots against 'tree': set per_tree: true so the runner evaluates each tree")
        ys = [fig["y"]] if isinstance(fig["y"], str) else fig["y"]
        if not isinstance(ys, list) or not ys or not all(isinstance(y, str) for y in ys):
            raise ConfigError(f"figures[{i}].y must be a column name or a non-empty list of them, got {fig['y']!r}")
        valid = result_columns(self.protocol, per_tree)
        for column in [fig["x"], *ys] + ([fig["group"]] if fig.get("group") is not None else []):
            if column not in valid:
                where = "the per-tree table (x: tree) does" if per_tree else f"{self.protocol}'s results do"
                raise ConfigError(f"figures[{i}] names column {column!r}, which {where} not hold; "
                                  f"valid columns are {sorted(valid)}")

    @staticmethod
    def _check_value(key: str, v: Any, where: str | None = None) -> None:
        def number(v):
            return isinstance(v, (int, float)) and not isinstance(v, bool)

        ok = {
            "clients": isinstance(v, int) and not isinstance(v, bool) and v >= 2,
            "max_depth": isinstance(v, int) and not isinstance(v, bool) and 1 <= v <= 16,
            "n_trees": isinstance(v, int) and not isinstance(v, bool) and v >= 1,
            "epsilon": v is None or (isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0),
            "key_bits": isinstance(v, int) and not isinstance(v, bool),
            "backend": isinstance(v, str),
            "dataset": isinstance(v, str),
            "rows": isinstance(v, int) and not isinstance(v, bool) and v >= 10,
            "method": v in SPLITNN_METHODS,
            "defense": v in SPLITNN_DEFENSES,
            "epochs": isinstance(v, int) and not isinstance(v, bool) and v >= 1,
            "aligned_fraction": number(v) and 0 < v < 1,
            "embedding_dim": isinstance(v, int) and not isinstance(v, bool) and 1 <= v <= 1024,
            "instance_threshold": isinstance(v, int) and not isinstance(v, bool) and v >= 1,
        }[key]
        if not ok:
            raise ConfigError(f"{where or f'sweep[{key!r}]'} holds {v!r}; each value must be {SWEEPABLE[key]}")

    def _check_splitnn(self) -> None:
        """The split-NN settings, swept or fixed: valid values, one table at a time, datasets it can load."""
        for key in ("method", "defense", "aligned_fraction", "epochs", "embedding_dim"):
            if key in self.params:
                self._check_value(key, self.params[key], where=f"params[{key!r}]")
        methods = self.sweep.get("method", [self.params["method"]] if "method" in self.params else [])
        defenses = self.sweep.get("defense", [self.params["defense"]] if "defense" in self.params else [])
        if methods and defenses:
            raise ConfigError("give method (FedAds Table 3) or defense (Table 4), not both: one table per sweep")
        datasets = self.sweep.get("dataset", [self.dataset])
        for d in datasets:
            if d not in SPLITNN_DATASETS:
                raise ConfigError(f"dataset {d!r} has no split-NN loader; splitnn datasets are {list(SPLITNN_DATASETS)}")
        if "heuristic" in methods and any(d != "fedads_like" for d in datasets):
            raise ConfigError("method 'heuristic' (HeuristicVFL) needs user IDs, which only dataset 'fedads_like' has")
        if "aligned_fraction" in self.sweep and not methods:
            raise ConfigError("aligned_fraction applies to FedAds Table 3 runs: sweep method too")

    @classmethod
    def from_yaml(cls, path: str) -> "ExperimentConfig":
        """Read a sweep from a YAML file (one mapping; unknown keys are errors)."""
        import yaml

        try:
            with open(path, encoding="utf-8") as fh:
                raw = yaml.safe_load(fh)
        except FileNotFoundError as exc:
            raise DataError(f"config file {path!r} does not exist") from exc
        except yaml.YAMLError as exc:
            raise ConfigError(f"{path!r} is not valid YAML: {exc}") from exc
        if not isinstance(raw, dict):
            raise ConfigError(f"{path!r} must hold one mapping (name, protocol, sweep, ...), got {type(raw).__name__}")
        return cls.from_dict(raw)

    def runs(self) -> list[dict[str, Any]]:
        """Every run: the grid's combinations (in the order the sweep lists them) times the repeats, each
        with a ``run_id`` that names its settings (finished runs are recognised by it). Settings that only
        say how long to wait (``timeout_s``) are not part of it: raising the timeout after a run timed out
        keeps its finished runs and its checkpoints."""
        keys = list(self.sweep)
        out = []
        for combo in itertools.product(*(self.sweep[k] for k in keys)):
            for repeat in range(self.repeats):
                settings = {"dataset": self.dataset, **dict(zip(keys, combo)), "repeat": repeat}
                params = {k: v for k, v in self.params.items() if k not in _WAITING_ONLY}
                ident = {"protocol": self.protocol, "params": params, "rows": self.rows,
                         "test_size": self.test_size, "seed": self.seed, **settings}
                if self.per_tree:  # a run without per-tree metrics is not a finished run of this sweep
                    ident["per_tree"] = True
                text = json.dumps(ident, sort_keys=True)
                out.append({**settings, "run_id": hashlib.sha256(text.encode()).hexdigest()[:16]})
        return out
