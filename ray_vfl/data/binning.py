"""Per-party feature encoding and quantile binning.

Each party fits a :class:`PartyBinner` on its own columns, inside its own
actor: categorical columns become ordinal codes, numeric columns are cut at
quantiles into at most ``max_bin`` bins, and missing values get the extra bin
``max_bin``. The cut values are the party's private lookup data: a split on
bin ``b`` of feature ``f`` sends a row left iff ``x[f] <= cuts[f][b]``.

With ``native_categorical=True`` (the trees' ``enable_categorical``) each category of a categorical
column gets its own bin, numbered in an order drawn from the OS's entropy inside the party: a party
that learns which bins a split sends left (the label party, which scores the candidates) cannot
tell which categories they are, even knowing every category's name.
"""

from __future__ import annotations

import logging
import secrets
from typing import Any, Sequence

import numpy as np
import pandas as pd

from ..errors import DataError

__all__ = ["PartyBinner", "encode_party_frame", "check_encodable", "count_unseen", "column_mismatch"]

log = logging.getLogger(__name__)


def count_unseen(frame: pd.DataFrame, values: np.ndarray, categorical: Sequence[str]) -> dict[str, int]:
    """Per categorical column, the rows holding a value (not missing) that the code book lacks:
    those ``encode_party_frame`` turned into NaN.

    Example
    -------
    >>> frame = pd.DataFrame({"city": ["a", "z", None]})
    >>> values, _ = encode_party_frame(frame, ["city"], "shop", {"city": ["a", "b"]})
    >>> count_unseen(frame, values, ["city"])
    {'city': 1}
    """
    counts = {}
    for j, col in enumerate(frame.columns):
        if col in categorical:
            counts[str(col)] = int((frame[col].notna().to_numpy() & np.isnan(values[:, j])).sum())
    return counts


def encode_party_frame(
    frame: pd.DataFrame, categorical: Sequence[str], party: str, categories: dict[str, list] | None = None
) -> tuple[np.ndarray, dict[str, list]]:
    """Encode one party's columns as float64; categoricals become codes 0..k-1.

    ``categories`` fixes the code book (at prediction time); unseen categories
    and missing values become NaN. Non-numeric columns not listed in
    ``categorical`` raise :class:`DataError` naming the fix.
    """
    check_encodable(frame, categorical, party)
    books = {} if categories is None else dict(categories)
    out = np.empty((len(frame), frame.shape[1]), dtype=np.float64)
    for j, col in enumerate(frame.columns):
        series = frame[col]
        if col in categorical:
            if col not in books:
                books[col] = sorted(series.dropna().unique().tolist(), key=str)
            lookup = {v: i for i, v in enumerate(books[col])}
            out[:, j] = series.map(lookup).astype("float64").to_numpy()
            continue
        out[:, j] = series.to_numpy(dtype=np.float64, na_value=np.nan)  # inf was refused by check_encodable
    return out, books


def check_encodable(frame: pd.DataFrame, categorical: Sequence[str], party: str) -> None:
    """Raise :class:`DataError` if a column could not be encoded: not numeric and not declared
    categorical, or holding inf (one vectorised pass per column).

    Example
    -------
    >>> check_encodable(pd.DataFrame({"x": [1.0, float("inf")]}), [], "bank")
    Traceback (most recent call last):
    ...
    ray_vfl.errors.DataError: party 'bank': column 'x' holds inf values; replace them with NaN (missing) or clip them
    """
    unknown = sorted(set(categorical) - set(frame.columns))
    if unknown:
        raise DataError(f"party {party!r}: categorical column(s) {unknown} are not among its columns {list(frame.columns)}")
    for col in frame.columns:
        series = frame[col]
        if col in categorical or pd.api.types.is_bool_dtype(series):
            continue
        if pd.api.types.is_numeric_dtype(series):
            if pd.api.types.is_float_dtype(series) and np.isinf(series.to_numpy(dtype=np.float64, na_value=np.nan)).any():
                raise DataError(f"party {party!r}: column {col!r} holds inf values; replace them with NaN (missing) or clip them")
            continue
        raise DataError(
            f"party {party!r}: column {col!r} is not numeric (dtype {series.dtype}); "
            f"encode it first or declare it categorical, e.g. categorical={{{party!r}: [{col!r}]}}"
        )


def column_mismatch(party: str, got: Sequence, fitted: Sequence[str]) -> str:
    """The message of a :class:`DataError` for a data set whose columns are not the ones ``party``
    was fitted on, naming the columns missing, the columns extra, or the order.

    Example
    -------
    >>> print(column_mismatch("shop", ["age", "zip"], ["age", "city"]))  # doctest: +NORMALIZE_WHITESPACE
    party 'shop': the columns differ from the fitted columns: 'city' is missing (the party was fitted on it),
    'zip' is extra; give every data set the party's training columns, in the training order
    """
    got = [str(c) for c in got]
    missing, extra = [c for c in fitted if c not in got], [c for c in got if c not in fitted]

    def named(cols: list[str]) -> str:
        return ", ".join(map(repr, cols))

    said = []
    if missing:
        said.append(f"{named(missing)} {'is' if len(missing) == 1 else 'are'} missing (the party was fitted on "
                    f"{'it' if len(missing) == 1 else 'them'})")
    if extra:
        said.append(f"{named(extra)} {'is' if len(extra) == 1 else 'are'} extra")
    if not said:
        said.append(f"the same columns in another order, {got} instead of {list(fitted)}")
    return (f"party {party!r}: the columns differ from the fitted columns: {', '.join(said)}; give every data set the "
            "party's training columns, in the training order")


class PartyBinner:
    """Quantile bins of one party's features, fitted on that party's data only.

    Example
    -------
    >>> frame = pd.DataFrame({"age": [20, 30, 40, None], "city": ["a", "b", "a", "c"]})
    >>> binner = PartyBinner(max_bin=4).fit(frame, categorical=["city"], party="shop")
    >>> binner.transform(frame).tolist()
    [[0, 0], [1, 1], [2, 0], [4, 2]]
    """

    def __init__(self, max_bin: int = 32, native_categorical: bool = False) -> None:
        self.max_bin = max_bin
        self.native_categorical = native_categorical
        self.feature_names: list[str] = []
        self.categorical: list[str] = []
        self.categories: dict[str, list] = {}
        self.cuts: list[np.ndarray] = []
        # per categorical column, rows of the last transform whose category training never saw
        self.unseen_counts: dict[str, int] = {}

    def fit(self, frame: pd.DataFrame, categorical: Sequence[str] = (), party: str = "party") -> "PartyBinner":
        self.fit_transform(frame, categorical, party)
        return self

    def fit_transform(self, frame: pd.DataFrame, categorical: Sequence[str] = (), party: str = "party") -> np.ndarray:
        """Fit the encoding and the cuts on ``frame`` and return its bins."""
        books = self._shuffled_books(frame, categorical, party) if self.native_categorical else None
        values, self.categories = encode_party_frame(frame, categorical, party, books)
        self.feature_names = [str(c) for c in frame.columns]
        self.categorical = list(categorical)
        self.cuts = [self._quantile_cuts(values[:, j]) for j in range(values.shape[1])]
        return self.bin_values(values)

    def _shuffled_books(self, frame: pd.DataFrame, categorical: Sequence[str], party: str) -> dict[str, list]:
        """One bin per category, in an order drawn from OS entropy; at most ``max_bin`` categories."""
        books = {}
        for col in categorical:
            if col not in frame.columns:
                continue  # check_encodable names it
            book = frame[col].dropna().unique().tolist()
            if len(book) > self.max_bin:
                raise DataError(
                    f"party {party!r}: categorical column {col!r} holds {len(book)} categories, more than max_bin="
                    f"{self.max_bin}: native categorical splits give each category its own bin; raise max_bin (up to "
                    "255), group the rare categories into one, or leave enable_categorical=False")
            secrets.SystemRandom().shuffle(book)
            books[col] = book
        return books

    def n_categories(self) -> np.ndarray:
        """Per feature, its categories when split natively (``native_categorical``), else 0.

        >>> frame = pd.DataFrame({"age": [20, 30], "city": ["a", "b"]})
        >>> PartyBinner(native_categorical=True).fit(frame, ["city"]).n_categories().tolist()
        [0, 2]
        """
        native = self.native_categorical
        return np.asarray([len(self.categories[c]) if native and c in self.categorical else 0
                           for c in self.feature_names], dtype=np.int64)

    def split_categories(self, feature: int, left_bins: Sequence[int]) -> list:
        """The categories (values) of a categorical split's left bins: this party's secret."""
        book = self.categories[self.feature_names[feature]]
        return [book[b] for b in left_bins]

    def _quantile_cuts(self, x: np.ndarray) -> np.ndarray:
        x = x[~np.isnan(x)]
        uniq = np.unique(x)
        if len(uniq) <= self.max_bin:
            return uniq[:-1]  # one bin per distinct value
        levels = np.linspace(0.0, 1.0, self.max_bin + 1)[1:-1]
        cuts = np.unique(np.quantile(x, levels, method="inverted_cdf"))
        return cuts[cuts < uniq[-1]]

    def transform(self, frame: pd.DataFrame, party: str = "party") -> np.ndarray:
        """Bin a frame with the fitted cuts: uint8 ``(n, F)``, missing -> ``max_bin``.

        A category unseen in training is binned as missing; how many rows hold one, per column,
        is kept in :attr:`unseen_counts` (a count, never a value): the party reports it, and the
        driver warns the user once (:func:`ray_vfl.runtime.party.warn_unseen_categories`).
        """
        if [str(c) for c in frame.columns] != self.feature_names:
            raise DataError(column_mismatch(party, frame.columns, self.feature_names))
        values, _ = encode_party_frame(frame, self.categorical, party, self.categories)
        self.unseen_counts = count_unseen(frame, values, self.categorical)
        for col, count in self.unseen_counts.items():
            if count:  # the user is warned at the driver; this is the party's own trace
                log.debug("party %r, column %r: %d of %d rows hold categories unseen in training; binned as missing",
                          party, col, count, len(frame))
        return self.bin_values(values)

    def bin_values(self, values: np.ndarray) -> np.ndarray:
        out = np.empty(values.shape, dtype=np.uint8)
        for j, cuts in enumerate(self.cuts):
            col = values[:, j]
            out[:, j] = np.where(np.isnan(col), self.max_bin, np.searchsorted(cuts, col, side="left"))
        return out

    def threshold(self, feature: int, bin_index: int) -> float:
        """Raw cut value of a split: rows with ``x <= threshold`` go left."""
        cuts = self.cuts[feature]
        return float(cuts[bin_index]) if bin_index < len(cuts) else float("inf")

    def to_dict(self) -> dict[str, Any]:
        return {
            "max_bin": self.max_bin,
            "native_categorical": self.native_categorical,
            "feature_names": self.feature_names,
            "categorical": self.categorical,
            "categories": self.categories,
            "cuts": [c.tolist() for c in self.cuts],
        }

    @classmethod
    def from_dict(cls, state: dict[str, Any]) -> "PartyBinner":
        binner = cls(state["max_bin"], bool(state.get("native_categorical", False)))
        binner.feature_names = list(state["feature_names"])
        binner.categorical = list(state["categorical"])
        binner.categories = {k: list(v) for k, v in state["categories"].items()}
        binner.cuts = [np.asarray(c, dtype=np.float64) for c in state["cuts"]]
        return binner
