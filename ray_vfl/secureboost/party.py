"""What every SecureBoost party has: its own feature block, bins, lookup table, mailbox."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import numpy as np
import pandas as pd

from ..crypto import get_backend
from ..data.binning import PartyBinner
from ..runtime.actors import TaskPool
from ..runtime.comm import Mailbox, Record
from ..trees.config import BoostConfig
from ..trees.kernels import feature_keys
from .tree import LookupTable

__all__ = ["Party"]


def _prepare_task(_, spec: tuple, key, encrypt: bool) -> None:
    """Build a worker's fixed-base tables for ``key`` (pinned task)."""
    get_backend(spec[0], **spec[1]).prepare(key, encrypt)


class Party:
    """Holds one party's features (binned on its own), its lookup table and mailbox.

    Data sets are kept by key (``"train"``, an eval set, a prediction batch);
    only this party's columns ever reach it.
    """

    def __init__(self, name: str, frame: pd.DataFrame | None, categorical: list[str], config: BoostConfig, pool: TaskPool) -> None:
        self.reset(name, frame, categorical, config, pool)

    def reset(self, name: str, frame: pd.DataFrame | None, categorical: list[str], config: BoostConfig, pool: TaskPool) -> None:
        """(Re)start from a fresh training set (or, with ``frame=None``, wait for
        :meth:`restore`); drops every earlier model and data set."""
        self.name = name
        self.config = config
        self.pool = pool
        self.mailbox = Mailbox(name)
        self.lookup = LookupTable()
        self.binner = PartyBinner(config.max_bin)
        self.missing_bin = config.max_bin
        self.n_bins = config.max_bin + 1
        self.bins: dict[str, np.ndarray] = {}
        # Homomorphic operations performed, for the benchmarks' crypto floor.
        self.ops: Counter[str] = Counter()
        self.fkeys: np.ndarray | None = None
        if frame is not None:
            self.bins["train"] = self.binner.fit_transform(frame, categorical, party=name)
            self.fkeys = feature_keys(self.bins["train"], self.n_bins)

    def prepare_pool(self, spec: tuple, key, encrypt: bool = True) -> None:
        """Have every worker of this party's task pool build its crypto tables for ``key`` during set-up
        (the private key stays on this party's nodes); ``encrypt=False``: only the masks' tables."""
        self.pool.map(_prepare_task, list(range(self.pool.workers)), spec, key, encrypt)

    def load_rows(self, key: str, frame: pd.DataFrame) -> int:
        """Bin a new data set (eval or prediction rows) with the training cuts."""
        self.bins[key] = self.binner.transform(frame, party=self.name)
        return len(frame)

    def drop_rows(self, key: str) -> None:
        self.bins.pop(key, None)

    @property
    def n_features(self) -> int:
        return len(self.binner.feature_names)

    def comm_records(self) -> list[Record]:
        """Hand over (and forget) what this party's send path recorded."""
        return self.mailbox.drain()

    def op_counts(self) -> dict[str, int]:
        """Crypto operations this party performed since training started."""
        return dict(self.ops)

    def model_part(self) -> dict[str, Any]:
        """This party's share of the model: its binner and its lookup table."""
        return {"party": self.name, "binner": self.binner.to_dict(), "lookup": self.lookup.to_dict()}

    def restore(self, part: dict[str, Any]) -> None:
        """Load a saved model part (for prediction without retraining)."""
        self.binner = PartyBinner.from_dict(part["binner"])
        self.lookup = LookupTable.from_dict(part["lookup"])
        self.missing_bin = self.binner.max_bin
        self.n_bins = self.binner.max_bin + 1
        self.bins = {}

    def save_part(self, path: str) -> str:
        """Write this party's model part to ``path`` on this party's own machine."""
        with open(path, "w", encoding="utf-8") as fh:
            json.dump(self.model_part(), fh)
        return path

    def load_part(self, path: str) -> None:
        """Read a model part written by :meth:`save_part` (on this party's machine)."""
        with open(path, encoding="utf-8") as fh:
            self.restore(json.load(fh))
