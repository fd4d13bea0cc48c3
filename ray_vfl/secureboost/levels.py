"""Which node every training row sits at, level by level, kept alike by every party.

The active party and each passive party hold one :class:`RowLevels` each and
advance it with the same inputs (the children of every split of the level and,
per split node, which of its rows go left), so they agree on the next level's
open nodes and on which child histogram is built from rows (the smaller) and
which is derived by subtraction (``parent - sibling``) without ever exchanging
the full row-to-node map.
"""

from __future__ import annotations

import numpy as np

from ..errors import VFLError
from ..trees.kernels import smaller_children
from .messages import Partition

__all__ = ["RowLevels", "pack_partition", "unpack_partition"]


class RowLevels:
    """Row-to-node map of one tree and the plan of its current level.

    ``open`` are the nodes whose histograms this level needs; ``build`` the
    ones summed from rows; ``derive`` rows ``(node, parent, sibling)``. Each
    open node's rows are kept as an ascending index array, split in two at
    every split, so no level ever scans all rows per node.

    Example
    -------
    >>> levels = RowLevels(4)
    >>> levels.advance(np.array([[0, 1, 2]]), {0: np.array([True, False, True, True])})
    >>> levels.node_of_row.tolist(), levels.open.tolist(), levels.build.tolist(), levels.derive.tolist()
    ([1, 2, 1, 1], [1, 2], [2], [[1, 0, 2]])
    """

    def __init__(self, n_rows: int) -> None:
        self.node_of_row = np.zeros(n_rows, dtype=np.int32)
        self.open = np.zeros(1, dtype=np.int32)
        self.build = self.open
        self.derive = np.zeros((0, 3), dtype=np.int32)
        self._rows = {0: np.arange(n_rows)}  # rows of each open node, ascending

    def rows_of(self, node: int) -> np.ndarray:
        """Rows at open node ``node``, ascending."""
        rows = self._rows.get(node)
        if rows is None:
            raise VFLError(f"node {node} is not open at this level (open: {self.open.tolist()})")
        return rows

    def built_child(self, node: int, l_child: int, r_child: int, left: np.ndarray) -> tuple[int, np.ndarray]:
        """The child of ``node``'s split that :meth:`advance` will plan to build from rows (the
        smaller) and its rows, ascending: known as soon as the split's ``left`` is.

        Example
        -------
        >>> child, rows = RowLevels(4).built_child(0, 1, 2, np.array([True, False, True, True]))
        >>> child, rows.tolist()
        (2, [1])
        """
        rows = self.rows_of(node)
        n_left = int(np.count_nonzero(left))
        return (l_child, rows[left]) if smaller_children(n_left, len(rows) - n_left) else (r_child, rows[~left])

    def advance(self, children: np.ndarray, lefts: dict[int, np.ndarray]) -> None:
        """Move the rows of every split node to its children and plan the next level.

        ``children`` rows are ``(node, left child, right child)``; ``lefts[node]``
        says, for the rows of ``node`` in ascending order, which go left.
        """
        open_, build, derive = [], [], []
        rows_of = {}
        for node, l_child, r_child in np.asarray(children, dtype=np.int64).reshape(-1, 3).tolist():
            rows = self.rows_of(node)
            left = lefts.get(node)
            if left is None or len(left) != len(rows):
                raise VFLError(f"node {node}: partition covers {None if left is None else len(left)} rows, the node has {len(rows)}")
            rows_of[l_child], rows_of[r_child] = rows[left], rows[~left]
            self.node_of_row[rows_of[l_child]] = l_child
            self.node_of_row[rows_of[r_child]] = r_child
            small, big = (l_child, r_child) if smaller_children(len(rows_of[l_child]), len(rows_of[r_child])) else (r_child, l_child)
            open_ += [l_child, r_child]
            build.append(small)
            derive.append((big, node, small))
        self._rows = rows_of
        self.open = np.asarray(open_, dtype=np.int32)
        self.build = np.asarray(build, dtype=np.int32)
        self.derive = np.asarray(derive, dtype=np.int32).reshape(-1, 3)


def pack_partition(nodes: list[int], lefts: list[np.ndarray]) -> Partition:
    """Left/right of the rows of ``nodes`` as one packed bit string."""
    bits = np.packbits(np.concatenate(lefts)) if lefts else np.zeros(0, dtype=np.uint8)
    return Partition(np.asarray(nodes, dtype=np.int32), bits, np.asarray([len(x) for x in lefts], dtype=np.int64))


def unpack_partition(part: Partition) -> dict[int, np.ndarray]:
    """Inverse of :func:`pack_partition`: ``{node: bool array over its rows}``."""
    bits = np.unpackbits(part.bits, count=int(part.counts.sum())).astype(bool)
    chunks = np.split(bits, np.cumsum(part.counts)[:-1]) if len(part.counts) else []
    return dict(zip(part.node.tolist(), chunks))
