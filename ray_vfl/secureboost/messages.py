"""Typed payloads of the SecureBoost rounds (see :mod:`ray_vfl.secureboost.protocol`)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["SplitOrders", "Partition", "LevelStep", "NodeHistograms", "RouteQuery", "RouteAnswer"]


@dataclass(frozen=True)
class SplitOrders:
    """Active -> one passive: the splits it won (node, its feature, its bin, missing left)."""

    node: np.ndarray
    feature: np.ndarray
    bin: np.ndarray
    default_left: np.ndarray
    record: np.ndarray  # ids the passive files these splits under in its lookup table


@dataclass(frozen=True)
class Partition:
    """Passive -> active: for each ordered node, which of its rows go left (packed bits, row order)."""

    node: np.ndarray
    bits: np.ndarray
    counts: np.ndarray  # rows per node, to unpack ``bits``


@dataclass(frozen=True)
class LevelStep:
    """Active -> one passive once a level's splits are decided.

    ``orders`` are the splits this passive won; ``children`` rows are
    ``(node, left child, right child)`` for every split of the level;
    ``partition`` says which rows go left at the split nodes this passive
    does not own (the instance spaces SecureBoost shares). With ``advance``
    the passive moves its rows to the children, ready for the next level.
    """

    orders: SplitOrders
    children: np.ndarray
    partition: Partition
    advance: bool


@dataclass(frozen=True)
class NodeHistograms:
    """Passive -> active: the encrypted histograms of the nodes built at a level, in build order.

    Node ``i``'s array holds, in layout order, only the cells (of the
    passive's :meth:`~ray_vfl.secureboost.passive.PassiveParty.histogram_layout`)
    that any of the node's rows fall in: ``occupied`` packs one bit per
    (node, layout cell), row-major.
    """

    occupied: np.ndarray
    ciphers: list

    def occupied_cells(self, n_cells: int) -> np.ndarray:
        """``(nodes, n_cells)`` bool, for a layout of ``n_cells`` cells."""
        n = len(self.ciphers)
        return np.unpackbits(self.occupied, count=n * n_cells).astype(bool).reshape(n, n_cells)


@dataclass(frozen=True)
class RouteQuery:
    """Active -> passive at prediction: rows waiting at this passive's records."""

    row: np.ndarray
    record: np.ndarray


@dataclass(frozen=True)
class RouteAnswer:
    """Passive -> active: one packed bit per query, 1 = go left."""

    bits: np.ndarray
    count: int
