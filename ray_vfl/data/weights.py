"""Sample weights: checked where they enter, held with the labels.

A row's weight belongs with its label: the label party holds the weights of every row (or, with
labels spread over parties, each label party the weights of the rows it labels). They reach that
party's actors the way its labels do (:meth:`VerticalDataset.tables
<ray_vfl.data.dataset.VerticalDataset.tables>`: the label party's block carries them), and no
other party ever receives them.

Example
-------
>>> check_sample_weight([1, 2.5, 0], 3).tolist()
[1.0, 2.5, 0.0]
>>> check_sample_weight([1.0, -1.0], 2)
Traceback (most recent call last):
...
ray_vfl.errors.DataError: sample_weight must be finite and non-negative; 1 of 2 weights are negative (e.g. -1.0); drop those rows or fix their weights
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import DataError

__all__ = ["check_sample_weight"]


def check_sample_weight(weight: Any, n_rows: int, what: str = "sample_weight") -> np.ndarray:
    """``weight`` as a float64 array of ``n_rows`` finite, non-negative values with a positive sum, or
    :class:`~ray_vfl.errors.DataError` naming what is wrong (its length, NaN or inf, a negative weight,
    all zero)."""
    try:
        w = np.asarray(weight, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise DataError(f"{what} must be an array of numbers, one per row; got {type(weight).__name__} ({exc})") from None
    if w.ndim != 1:
        raise DataError(f"{what} must be one-dimensional, one weight per row; got shape {w.shape}")
    if len(w) != n_rows:
        raise DataError(f"{what} has {len(w)} weights for {n_rows} rows; give one weight per row (in the data's row order)")
    bad = ~np.isfinite(w)
    if bad.any():
        raise DataError(f"{what} must be finite and non-negative; {int(bad.sum())} of {n_rows} weights are NaN or inf; "
                        "drop those rows or fix their weights")
    neg = w < 0
    if neg.any():
        raise DataError(f"{what} must be finite and non-negative; {int(neg.sum())} of {n_rows} weights are negative "
                        f"(e.g. {float(w[neg][0])!r}); drop those rows or fix their weights")
    if n_rows and not (w > 0).any():
        raise DataError(f"{what} is zero for every row: nothing to learn from; give some rows a positive weight")
    return w
