"""What a data set offers scikit-learn's model selection, which indexes an ``X`` by row positions:
``len(data)``, ``data.shape`` and ``data[rows]`` (:meth:`take`: each party cuts its own rows alike)."""

from __future__ import annotations

from .store import row_positions

__all__ = ["RowsLikeX"]


class RowsLikeX:
    """A mixin for data sets with ``n_rows``, ``n_features()`` and ``take(positions)``.

    Example
    -------
    >>> import numpy as np, pandas as pd
    >>> from ray_vfl.data.dataset import VerticalDataset
    >>> frames = {"a": pd.DataFrame({"x": [1.0, 2.0, 3.0]}), "b": pd.DataFrame({"z": [4.0, 5.0, 6.0]})}
    >>> data = VerticalDataset(frames, np.array([7, 8, 9]))
    >>> len(data), data.shape, data[np.array([2, 0])].ids.tolist()
    (3, (3, 2), [9, 7])
    """

    def __len__(self) -> int:
        """The number of rows (what scikit-learn's model selection counts)."""
        return self.n_rows

    @property
    def shape(self) -> tuple[int, int]:
        """``(rows, features of every party)``, as scikit-learn reads an ``X``."""
        return self.n_rows, self.n_features()

    def __getitem__(self, key):
        """Rows by position: ``data[rows]`` (or ``data[rows, ...]``) is :meth:`take`."""
        return self.take(row_positions(key, self.n_rows))
