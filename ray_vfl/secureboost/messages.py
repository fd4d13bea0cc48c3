"""Typed payloads of the SecureBoost rounds (see :mod:`ray_vfl.secureboost.protocol`)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["LevelPlan", "SplitOrders", "Partition", "RouteQuery", "RouteAnswer"]


@dataclass(frozen=True)
class LevelPlan:
    """Active -> passive: the rows of each open node and which histograms to build.

    ``node_of_row[i]`` is the open node of row ``i`` (-1 once its leaf is
    final). Histograms of ``build`` are summed from rows; each
    ``(node, parent, sibling)`` of ``derive`` is ``parent - sibling``
    (histogram subtraction). The reply lists histograms in ``level`` order.
    """

    node_of_row: np.ndarray
    level: np.ndarray
    build: np.ndarray
    derive: np.ndarray  # (k, 3): node, parent, sibling


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
class RouteQuery:
    """Active -> passive at prediction: rows waiting at this passive's records."""

    row: np.ndarray
    record: np.ndarray


@dataclass(frozen=True)
class RouteAnswer:
    """Passive -> active: one packed bit per query, 1 = go left."""

    bits: np.ndarray
    count: int
