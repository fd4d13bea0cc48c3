"""Federated tree structure and per-party lookup tables.

The active party holds every tree's structure and leaf weights; an internal
node stores only ``(owner party index, record id)``. The owner resolves the
record in its private :class:`LookupTable` (feature, bin, threshold, missing
direction); no other party ever sees a threshold.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from ..trees.categorical import goes_left_of_set
from ..trees.kernels import goes_left

__all__ = ["Tree", "TreeBuilder", "LookupTable"]


@dataclass
class Tree:
    """Arrays over node ids; ``left[i] == -1`` marks a leaf. ``weight`` is ``(n_nodes,)``, or
    ``(n_nodes, K)`` for a multi-output tree. ``feature``, ``gain`` and ``cover`` of an
    internal node are what the active party chose it by (the owner's feature index, never a threshold;
    the loss reduction; the hessian sum, summed over the K outputs of a multi-output tree), kept for
    feature importances (-1 and 0 in models saved before they were kept)."""

    left: np.ndarray
    right: np.ndarray
    owner: np.ndarray
    record: np.ndarray
    weight: np.ndarray
    feature: np.ndarray | None = None
    gain: np.ndarray | None = None
    cover: np.ndarray | None = None

    def __post_init__(self) -> None:
        n = len(self.left)
        if self.feature is None:
            self.feature = np.full(n, -1, dtype=np.int32)
        if self.gain is None:
            self.gain = np.zeros(n)
        if self.cover is None:
            self.cover = np.zeros(n)

    @property
    def n_nodes(self) -> int:
        return len(self.left)

    @property
    def n_leaves(self) -> int:
        return int(np.sum(self.left < 0))

    def to_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k).tolist() for k in ("left", "right", "owner", "record", "weight", "feature", "gain", "cover")}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Tree":
        ints = {k: np.asarray(d[k], dtype=np.int32) for k in ("left", "right", "owner", "record")}
        extra = {k: np.asarray(d[k], dtype=np.int32 if k == "feature" else np.float64)
                 for k in ("feature", "gain", "cover") if k in d}
        return cls(**ints, weight=np.asarray(d["weight"], dtype=np.float64), **extra)


@dataclass
class TreeBuilder:
    """Grows a tree node by node; ``finish`` freezes it into a :class:`Tree`. With ``outputs`` = K
    (multi-output trees) every leaf holds K weights: ``weight`` becomes ``(n_nodes, K)``."""

    outputs: int | None = None
    left: list[int] = field(default_factory=lambda: [-1])
    right: list[int] = field(default_factory=lambda: [-1])
    owner: list[int] = field(default_factory=lambda: [-1])
    record: list[int] = field(default_factory=lambda: [-1])
    weight: list[float] = field(default_factory=lambda: [0.0])
    feature: list[int] = field(default_factory=lambda: [-1])
    gain: list[float] = field(default_factory=lambda: [0.0])
    cover: list[float] = field(default_factory=lambda: [0.0])

    def split(self, node: int, owner: int, record: int, feature: int = -1, gain: float = 0.0,
              cover: float = 0.0) -> tuple[int, int]:
        children = []
        for _ in range(2):
            children.append(len(self.left))
            for arr, v in ((self.left, -1), (self.right, -1), (self.owner, -1), (self.record, -1), (self.weight, 0.0),
                           (self.feature, -1), (self.gain, 0.0), (self.cover, 0.0)):
                arr.append(v)
        self.left[node], self.right[node] = children
        self.owner[node], self.record[node] = owner, record
        self.feature[node], self.gain[node], self.cover[node] = int(feature), float(gain), float(cover)
        return children[0], children[1]

    def set_leaf(self, node: int, weight) -> None:
        self.weight[node] = float(weight) if self.outputs is None else np.asarray(weight, dtype=np.float64)

    def finish(self) -> Tree:
        return Tree(
            np.asarray(self.left, dtype=np.int32),
            np.asarray(self.right, dtype=np.int32),
            np.asarray(self.owner, dtype=np.int32),
            np.asarray(self.record, dtype=np.int32),
            np.asarray(self.weight, dtype=np.float64) if self.outputs is None
            else np.stack([np.broadcast_to(np.asarray(w, dtype=np.float64), (self.outputs,)) for w in self.weight]),
            np.asarray(self.feature, dtype=np.int32),
            np.asarray(self.gain, dtype=np.float64),
            np.asarray(self.cover, dtype=np.float64),
        )


class LookupTable:
    """A party's private split records: record id -> (feature, bin, threshold, missing left), and for
    a native categorical split the bins it sends left (:mod:`ray_vfl.trees.categorical`; its ``bin``
    is then the candidate's index, its threshold NaN: the set decides).

    Example
    -------
    >>> table = LookupTable()
    >>> table.add(0, feature=2, bin_index=5, threshold=3.5, default_left=True)
    >>> table.add(1, feature=0, bin_index=0, threshold=float("nan"), default_left=False, left_bins=[1, 3])
    >>> table.feature.tolist(), table.threshold.tolist()[:1]
    ([2, 0], [3.5])
    >>> bins = np.array([[0, 0, 9], [3, 0, 2]])
    >>> table.route(bins, np.array([0, 1, 0, 1]), np.array([0, 0, 1, 1]), missing_bin=9).tolist()
    [True, True, False, True]
    """

    def __init__(self) -> None:
        self._rows: list[tuple] = []
        self._arrays: tuple[np.ndarray, ...] | None = None  # column view, rebuilt lazily after additions

    def __len__(self) -> int:
        return len(self._rows)

    def add(self, record: int, feature: int, bin_index: int, threshold: float, default_left: bool,
            left_bins: Sequence[int] | None = None) -> None:
        if record != len(self._rows):
            raise ValueError(f"record ids must be filed in order: expected {len(self._rows)}, got {record}")
        row = (int(feature), int(bin_index), float(threshold), bool(default_left))
        self._rows.append(row if left_bins is None else row + (sorted(int(b) for b in left_bins),))
        self._arrays = None

    def _cols(self) -> tuple[np.ndarray, ...]:
        if self._arrays is None:
            rows = self._rows
            sets = np.zeros((len(rows), 256), dtype=bool)  # each record's left bins (categorical splits)
            for i, row in enumerate(rows):
                if len(row) > 4:
                    sets[i, row[4]] = True
            self._arrays = (
                np.array([r[0] for r in rows], dtype=np.int64),
                np.array([r[1] for r in rows], dtype=np.int64),
                np.array([r[2] for r in rows], dtype=np.float64),
                np.array([r[3] for r in rows], dtype=bool),
                sets,
                sets.any(axis=1),
            )
        return self._arrays

    feature = property(lambda self: self._cols()[0])
    bin = property(lambda self: self._cols()[1])
    threshold = property(lambda self: self._cols()[2])
    default_left = property(lambda self: self._cols()[3])
    categorical = property(lambda self: self._cols()[5])

    def route(self, bins: np.ndarray, rows: np.ndarray, records: np.ndarray, missing_bin: int) -> np.ndarray:
        """Which of ``rows`` go left at ``records`` (element-wise pairs)."""
        if len(rows) == 0:
            return np.zeros(0, dtype=bool)
        column = bins[rows, self.feature[records]]
        left = goes_left(column, self.bin[records], self.default_left[records], missing_bin)
        cat = self.categorical[records]
        if cat.any():
            at = records[cat]
            left[cat] = goes_left_of_set(column[cat], self._cols()[4][at], self.default_left[at], missing_bin)
        return left

    def left_bins(self, record: int) -> list[int] | None:
        """The bins a categorical split sends left, or None for a threshold split."""
        row = self._rows[record]
        return list(row[4]) if len(row) > 4 else None

    def to_dict(self) -> dict[str, Any]:
        return {"rows": [list(r) for r in self._rows]}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "LookupTable":
        table = cls()
        for i, row in enumerate(d["rows"]):
            table.add(i, *row[:4], left_bins=row[4] if len(row) > 4 else None)
        return table
