"""Per-party feature encoding for embeddings: every column becomes integer IDs.

As in FedAds, a categorical value maps to its own ID and a continuous value to
the ID of its equal-frequency bin; each party fits its encoder on its own
training columns inside its own actor. ID 0 of every feature is reserved for
a missing or unseen value, so one embedding table with per-feature offsets
covers all of a party's features.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import pandas as pd

from ...data.binning import check_encodable, column_mismatch
from ...errors import ConfigError, DataError

__all__ = ["FeatureEncoder"]


class FeatureEncoder:
    """Categorical codes and equal-frequency bins of one party's columns.

    Parameters
    ----------
    n_bins : int
        Bins for a continuous column (fewer when values repeat).
    max_categories : int
        Largest vocabulary accepted for a categorical column.

    Example
    -------
    >>> frame = pd.DataFrame({"age": [20.0, 30.0, 40.0, None], "city": ["a", "b", "a", "c"]})
    >>> enc = FeatureEncoder(n_bins=2).fit(frame, categorical=["city"], party="shop")
    >>> enc.transform(frame).tolist()
    [[1, 1], [2, 2], [2, 1], [0, 3]]
    >>> enc.vocab_sizes
    [3, 4]
    """

    def __init__(self, n_bins: int = 32, max_categories: int = 1_000_000) -> None:
        self.n_bins = n_bins
        self.max_categories = max_categories
        self.columns: list[str] = []
        self.categories: dict[str, dict] = {}
        self.cuts: dict[str, np.ndarray] = {}
        self.vocab_sizes: list[int] = []
        # per categorical column, rows of the last transform whose category training never saw
        self.unseen_counts: dict[str, int] = {}

    def fit(self, frame: pd.DataFrame, categorical: Sequence[str], party: str = "?") -> "FeatureEncoder":
        check_encodable(frame, categorical, party)
        if frame.shape[1] == 0:
            raise DataError(f"party {party!r} has no feature columns to embed")
        self.columns = [str(c) for c in frame.columns]
        cat = set(map(str, categorical))
        self.categories, self.cuts, self.vocab_sizes = {}, {}, []
        for col in frame.columns:
            series = frame[col]
            if str(col) in cat:
                values = sorted(series.dropna().unique().tolist(), key=str)
                if len(values) > self.max_categories:
                    raise ConfigError(
                        f"party {party!r}: categorical column {col!r} has {len(values)} distinct values, more than "
                        f"max_categories={self.max_categories}; raise max_categories or treat the column as continuous"
                    )
                self.categories[str(col)] = {v: i + 1 for i, v in enumerate(values)}
                self.vocab_sizes.append(len(values) + 1)
                continue
            x = series.to_numpy(dtype=np.float64, na_value=np.nan)
            finite = x[np.isfinite(x)]
            if len(finite) == 0:
                cuts = np.empty(0)
            else:
                # equal-frequency cut points; repeated values collapse bins
                cuts = np.unique(np.quantile(finite, np.linspace(0.0, 1.0, self.n_bins + 1)[1:-1]))
            self.cuts[str(col)] = cuts
            self.vocab_sizes.append(len(cuts) + 2)
        return self

    def transform(self, frame: pd.DataFrame, party: str = "?") -> np.ndarray:
        """IDs of shape ``(rows, features)``, int64; 0 for missing or unseen values (how many rows hold
        an unseen category, per column, is kept in :attr:`unseen_counts`)."""
        if not self.columns:
            raise DataError(f"party {party!r}: the feature encoder is used before fit")
        if [str(c) for c in frame.columns] != self.columns:
            raise DataError(column_mismatch(party, frame.columns, self.columns))
        out = np.zeros((len(frame), len(self.columns)), dtype=np.int64)
        self.unseen_counts = {}
        for j, col in enumerate(self.columns):
            series = frame.iloc[:, j]
            if col in self.categories:
                codes = series.map(self.categories[col])
                self.unseen_counts[col] = int((series.notna() & codes.isna()).sum())
                out[:, j] = codes.fillna(0).to_numpy(dtype=np.int64)
                continue
            x = series.to_numpy(dtype=np.float64, na_value=np.nan)
            if np.isinf(x).any():
                raise DataError(f"party {party!r}: column {col!r} holds inf values; replace them with NaN or clip them")
            ids = np.searchsorted(self.cuts[col], x, side="right") + 1
            out[:, j] = np.where(np.isnan(x), 0, ids)
        return out

    def to_dict(self) -> dict:
        """Plain lists and numbers only (safe to store with ``torch.save`` and read back with ``weights_only``)."""
        return {"n_bins": self.n_bins, "max_categories": self.max_categories, "columns": list(self.columns),
                "categories": {c: [[v, i] for v, i in m.items()] for c, m in self.categories.items()},
                "cuts": {c: [float(x) for x in v] for c, v in self.cuts.items()}, "vocab_sizes": list(self.vocab_sizes)}

    @classmethod
    def from_dict(cls, state: dict) -> "FeatureEncoder":
        """The encoder :meth:`to_dict` described.

        Example
        -------
        >>> frame = pd.DataFrame({"age": [20.0, 30.0, 40.0], "city": ["a", "b", "a"]})
        >>> enc = FeatureEncoder(n_bins=2).fit(frame, categorical=["city"])
        >>> (FeatureEncoder.from_dict(enc.to_dict()).transform(frame) == enc.transform(frame)).all()
        np.True_
        """
        try:
            enc = cls(int(state["n_bins"]), int(state["max_categories"]))
            enc.columns = [str(c) for c in state["columns"]]
            enc.categories = {str(c): {v: int(i) for v, i in pairs} for c, pairs in state["categories"].items()}
            enc.cuts = {str(c): np.asarray(v, dtype=np.float64) for c, v in state["cuts"].items()}
            enc.vocab_sizes = [int(v) for v in state["vocab_sizes"]]
        except (KeyError, TypeError, ValueError) as exc:
            raise DataError(f"not a saved FeatureEncoder ({type(exc).__name__}: {exc}); was the file written by save_part?") from exc
        if set(enc.categories) | set(enc.cuts) != set(enc.columns) or len(enc.vocab_sizes) != len(enc.columns):
            raise DataError("saved FeatureEncoder is inconsistent: every column needs categories or cuts and a vocabulary size")
        return enc

