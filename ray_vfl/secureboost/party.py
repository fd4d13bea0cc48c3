"""What every SecureBoost party has: its own feature block, bins, lookup table, mailbox."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import numpy as np
import pandas as pd

from ..crypto import get_backend
from ..data.binning import PartyBinner, check_encodable
from ..errors import ConfigError, DataError
from ..runtime.task_pool import TaskPool
from ..runtime.party import PartyActor, read_part, resolve_rows, write_atomically
from ..trees.config import BoostConfig
from ..trees.kernels import feature_keys
from .tree import LookupTable

__all__ = ["Party"]


def _prepare_task(_, spec: tuple, key, encrypt: bool) -> None:
    """Build a worker's fixed-base tables for ``key`` (pinned task)."""
    get_backend(spec[0], **spec[1]).prepare(key, encrypt)


class Party(PartyActor):
    """Holds one party's features (binned on its own), its lookup table and mailbox.

    Data sets are kept by key (``"train"``, an eval set, a prediction batch) as bins; only this
    party's columns ever reach it, fetched from its own store (:mod:`ray_vfl.data.store`).
    """

    def __init__(self, name: str, table: Any, categorical: list[str], config: BoostConfig, pool: TaskPool,
                 init_part: str | None = None) -> None:
        self.reset(name, table, categorical, config, pool, init_part)

    def reset(self, name: str, table: Any, categorical: list[str], config: BoostConfig, pool: TaskPool,
              init_part: str | None = None) -> None:
        """(Re)start from a fresh training set, a reference to this party's rows (or, with ``table=None``,
        wait for :meth:`restore`); drops every earlier model and data set. ``init_part``: this party's
        saved part of a model to continue training (its bins and split records are kept)."""
        self._start_party(name)
        self.config = config
        self.pool = pool
        frame, self.own_label = resolve_rows(table)
        self.lookup = LookupTable()
        self.binner = PartyBinner(config.max_bin, config.enable_categorical)
        self.missing_bin = config.max_bin
        self.n_bins = config.max_bin + 1
        # Homomorphic operations performed, for the benchmarks' crypto floor.
        self.ops: Counter[str] = Counter()
        self.fkeys: np.ndarray | None = None
        self.init_part = read_part(init_part, name) if init_part else None
        if frame is not None:
            check_encodable(frame, categorical, name)
            if self.init_part is None:
                self.bins["train"] = self.binner.fit_transform(frame, categorical, party=name)
            else:  # continued training: the saved model's bins, so its split records keep their meaning
                self.binner = PartyBinner.from_dict(self.init_part["binner"])
                if self.binner.max_bin != config.max_bin:
                    raise ConfigError(f"party {name!r}: the model to continue has max_bin={self.binner.max_bin}, "
                                      f"this fit max_bin={config.max_bin}; use the model's")
                if self.binner.native_categorical != config.enable_categorical:
                    raise ConfigError(f"party {name!r}: the model to continue has enable_categorical="
                                      f"{self.binner.native_categorical}, this fit {config.enable_categorical}; use the model's")
                self.lookup = LookupTable.from_dict(self.init_part["lookup"])
                self.bins["train"] = self.binner.transform(frame, party=name)
            self.fkeys = feature_keys(self.bins["train"], self.n_bins)

    def prepare_pool(self, spec: tuple, key, encrypt: bool = True) -> None:
        """Have every worker of this party's task pool build its crypto tables for ``key`` during set-up
        (the private key stays on this party's nodes); ``encrypt=False``: only the masks' tables."""
        self.pool.map(_prepare_task, list(range(self.pool.workers)), spec, key, encrypt)

    @property
    def bins(self) -> dict[str, np.ndarray]:
        """Each data set's rows as this party's bins, by key."""
        return self.rows

    def encode_rows(self, frame: pd.DataFrame) -> np.ndarray:
        """Bin a new data set (eval or prediction rows) with the training cuts."""
        return self.binner.transform(frame, party=self.name)

    def unseen_categories(self) -> dict[str, int]:
        """Rows of the data set last binned whose category training never saw, per column."""
        return {c: n for c, n in self.binner.unseen_counts.items() if n}

    def feature_names(self) -> list[str]:
        """This party's column names (the schema every data handle shows the driver anyway)."""
        return list(self.binner.feature_names)

    @property
    def n_features(self) -> int:
        return len(self.binner.feature_names)

    def op_counts(self) -> dict[str, int]:
        """Crypto operations this party performed since training started."""
        return dict(self.ops)

    def model_part(self) -> dict[str, Any]:
        """This party's share of the model: its binner and its lookup table."""
        return {"party": self.name, "binner": self.binner.to_dict(), "lookup": self.lookup.to_dict()}

    def own_trees(self) -> dict[str, Any]:
        """This party's own view of the model, thresholds included (what :meth:`dump_trees` writes on its
        own node): its split records (feature name, bin, threshold or, for a categorical split, the categories
        sent left, missing direction) and each of its
        features' ``weight`` importance (how many splits use it). A passive party holds no tree structure
        and no gain or cover: those stay at the label party, which chose the splits."""
        names = list(self.binner.feature_names)
        records = []
        for i, (f, b, t, dl, *cats) in enumerate(self.lookup.to_dict()["rows"]):
            split = {"threshold": t} if not cats else {"categories_left": self.binner.split_categories(f, cats[0])}
            records.append({"record": i, "feature": names[f], "bin": b, **split, "default_left": dl})
        counts = np.bincount(self.lookup.feature, minlength=len(names)) if len(self.lookup) else np.zeros(len(names))
        return {"party": self.name, "records": records,
                "importance": {"weight": {n: float(c) for n, c in zip(names, counts.tolist())}}}

    def dump_trees(self, path: str) -> str:
        """Write :meth:`own_trees` as JSON to ``path`` on this party's own machine; the caller gets the path
        only. The thresholds are this party's secret (its lookup table): they are never returned to the
        driver, whose process is the label party's side."""
        view = self.own_trees()
        return write_atomically(path, lambda fh: json.dump(view, fh, indent=1))

    def restore(self, part: dict[str, Any]) -> None:
        """Load a saved model part (for prediction without retraining)."""
        self.binner = PartyBinner.from_dict(part["binner"])
        self.lookup = LookupTable.from_dict(part["lookup"])
        self.missing_bin = self.binner.max_bin
        self.n_bins = self.binner.max_bin + 1
        self.rows = {}

    def resume_training(self, state: dict[str, Any]) -> None:
        """Take up a checkpoint: the split records it had, after checking that the training data bin as then."""
        if json.loads(json.dumps(self.binner.to_dict())) != state["binner"]:
            raise DataError(f"party {self.name!r}: its training data bin differently from the checkpoint's; resume "
                            "with the same data, or start with a new checkpoint_dir")
        self.lookup = LookupTable.from_dict(state["lookup"])
