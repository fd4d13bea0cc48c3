"""Validation and grouping of the integer arrays the backends take (scalars, bucket keys)."""

from __future__ import annotations

import numpy as np

from ray_vfl.errors import DataError

__all__ = ["as_int_list", "incidences"]


def as_int_list(k: object, n: int) -> list[int]:
    """Validate an integer vector of length ``n`` and return it as Python ints."""
    arr = np.asarray(k)
    if arr.ndim != 1 or arr.shape[0] != n:
        raise DataError(f"scalar vector must be 1-D of length {n}, got shape {arr.shape}")
    if arr.dtype == object:
        out = arr.tolist()
        if not all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in out):
            raise DataError("scalar vector must hold integers only")
        return [int(v) for v in out]
    if not np.issubdtype(arr.dtype, np.integer):
        raise DataError(f"scalar vector must have an integer dtype, got {arr.dtype}")
    return arr.tolist()


def incidences(keys: object, n_rows: int, n_buckets: int) -> tuple[list[int], list[int]]:
    """The (row, bucket) incidences of :meth:`Backend.bucket_sum`, row by row.

    Parameters
    ----------
    keys : array_like of int, shape (n_rows,) or (n_rows, F)
        Bucket of each row (per feature); negative keys are skipped.
    n_rows, n_buckets : int

    Returns
    -------
    rows, buckets : list of int
        Row ``rows[i]`` goes into ``buckets[i]``; rows ascending, so a sum
        reads the rows' ciphertexts in the order they lie in memory.

    Example
    -------
    >>> incidences(np.array([[1, 0], [1, -1]]), 2, 3)
    ([0, 0, 1], [1, 0, 1])
    """
    if isinstance(n_buckets, bool) or not isinstance(n_buckets, (int, np.integer)) or n_buckets < 0:
        raise DataError(f"n_buckets must be a non-negative int, got {n_buckets!r}")
    k = np.asarray(keys)
    if k.ndim not in (1, 2) or k.shape[0] != n_rows:
        raise DataError(f"keys must have shape ({n_rows},) or ({n_rows}, F), got {k.shape}")
    if k.size and not np.issubdtype(k.dtype, np.integer):
        raise DataError(f"keys must have an integer dtype, got {k.dtype}")
    k = k.astype(np.int64, copy=False)
    if k.ndim == 1:
        k = k[:, None]
    flat = k.ravel()
    rows = np.repeat(np.arange(n_rows, dtype=np.int64), k.shape[1])
    keep = flat >= 0
    flat, rows = flat[keep], rows[keep]
    if flat.size and int(flat.max()) >= n_buckets:
        raise DataError(f"keys must be < n_buckets={n_buckets}, got {int(flat.max())}")
    return rows.tolist(), flat.tolist()
