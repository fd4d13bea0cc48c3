"""Deal one table's columns (and, for PIVODL, its labels) over parties: :func:`vertical_split`.

The simulation's way to a :class:`~ray_vfl.data.dataset.VerticalDataset` when the data starts as one
table in this process.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np
import pandas as pd

from ..errors import DataError
from .dataset import VerticalDataset

__all__ = ["vertical_split"]


def _deal_label_owners(label_owners, parties: list[str], n_rows: int, seed: int) -> np.ndarray:
    """Per row, the party holding its label: from fractions per party (rows dealt at random with
    ``seed``, exact counts by largest remainder) or from one party name per row."""
    if isinstance(label_owners, Mapping):
        fractions = {}
        for party, f in label_owners.items():
            if str(party) not in parties:
                raise DataError(f"label_owners names party {party!r}, which is not one of the parties {parties}")
            if isinstance(f, bool) or not isinstance(f, (int, float, np.integer, np.floating)) or not 0.0 <= f <= 1.0:
                raise DataError(f"label_owners[{party!r}] must be a fraction in [0, 1], got {f!r}")
            fractions[str(party)] = float(f)
        total = sum(fractions.values())
        if abs(total - 1.0) > 1e-9:
            raise DataError(f"label_owners fractions sum to {total!r}, not 1; give each party its share of the "
                            f"labelled rows, e.g. {{{', '.join(f'{p!r}: {1 / len(parties):.3g}' for p in parties)}}}")
        names = [p for p in parties if p in fractions]
        exact = np.array([fractions[p] / total * n_rows for p in names])  # sums to n_rows, not n_rows * (1 ± 1e-9)
        counts = np.floor(exact).astype(np.int64)
        # Largest remainder: the rows left over go to the largest fractional parts (ties: party order).
        extra = np.argsort(-(exact - counts), kind="stable")[: n_rows - int(counts.sum())]
        counts[extra] += 1
        owner = np.empty(n_rows, dtype=object)
        owner[np.random.default_rng(seed).permutation(n_rows)] = np.repeat(np.array(names, dtype=object), counts)
        return owner
    if isinstance(label_owners, (str, bytes)) or not isinstance(label_owners, (Sequence, np.ndarray, pd.Series)):
        raise DataError("label_owners must be a mapping party -> fraction of the labelled rows, or one party name "
                        f"per row (a list, array or Series); got {type(label_owners).__name__}")
    owner = np.asarray(label_owners.to_numpy() if isinstance(label_owners, pd.Series) else label_owners, dtype=object)
    if owner.ndim != 1 or len(owner) != n_rows:
        raise DataError(f"label_owners names {len(owner) if owner.ndim == 1 else owner.shape} owner(s) for {n_rows} "
                        "rows; give one party name per row (or a mapping party -> fraction)")
    return owner



def vertical_split(
    frame: pd.DataFrame,
    parties: int | Mapping[str, Sequence[str]] = 2,
    label: str | None = None,
    label_party: str | None = None,
    id_column: str | None = None,
    categorical: Sequence[str] = (),
    seed: int = 0,
    label_owners: Mapping[str, float] | Sequence[str] | np.ndarray | pd.Series | None = None,
) -> VerticalDataset:
    """Split one table's columns over parties.

    ``parties`` is either an explicit mapping ``{party: [columns]}`` or a number
    ``N``: the feature columns are shuffled with ``seed`` and dealt evenly to
    ``party0 .. party{N-1}``. The label goes to ``label_party`` (default: the
    first party). ``categorical`` lists columns to encode inside their party.

    ``label_owners`` spreads the labels over parties instead (PIVODL): either a
    mapping ``{party: fraction}`` (fractions in [0, 1] summing to 1; the rows are
    dealt at random with ``seed``, each party getting its fraction of the rows
    rounded by largest remainder; unnamed parties label none) or one party name
    per row (an explicit row -> party map). It excludes ``label_party``.

    Example
    -------
    >>> frame = pd.DataFrame({"a": [1.0, 2.0], "b": [3.0, 4.0], "c": [5.0, 6.0], "y": [0, 1]})
    >>> data = vertical_split(frame, {"bank": ["a"], "shop": ["b", "c"]}, label="y")
    >>> {p: list(f.columns) for p, f in data.features.items()}
    {'bank': ['a'], 'shop': ['b', 'c']}
    >>> spread = vertical_split(frame, {"bank": ["a"], "shop": ["b", "c"]}, label="y", label_owners=["shop", "bank"])
    >>> spread.label_parties, spread.labels_of("bank").tolist()
    (['bank', 'shop'], [nan, 1.0])
    >>> half = vertical_split(frame, {"bank": ["a"], "shop": ["b", "c"]}, label="y",
    ...                       label_owners={"bank": 0.5, "shop": 0.5}, seed=1)
    >>> sorted(half.label_owner.tolist())
    ['bank', 'shop']
    """
    if id_column is not None and id_column not in frame.columns:
        raise DataError(f"id column {id_column!r} not in the table's columns")
    if label is not None and label not in frame.columns:
        raise DataError(f"label column {label!r} not in the table's columns {list(frame.columns)}")
    reserved = {c for c in (id_column, label) if c is not None}
    feature_cols = [c for c in frame.columns if c not in reserved]
    if isinstance(parties, int) and not isinstance(parties, bool):
        if not 1 <= parties <= len(feature_cols):
            raise DataError(f"parties must be in [1, {len(feature_cols)}] (one feature each at least), got {parties}")
        order = np.random.default_rng(seed).permutation(len(feature_cols))
        mapping = {f"party{i}": [feature_cols[j] for j in sorted(chunk)] for i, chunk in enumerate(np.array_split(order, parties))}
    elif isinstance(parties, Mapping):
        mapping = {str(p): list(cols) for p, cols in parties.items()}
        seen: dict[str, str] = {}
        for party, cols in mapping.items():
            for col in cols:
                if col not in feature_cols:
                    raise DataError(f"party {party!r}: column {col!r} is not a feature column of the table")
                if col in seen:
                    raise DataError(f"column {col!r} is given to both {seen[col]!r} and {party!r}")
                seen[col] = party
        missing = [c for c in feature_cols if c not in seen]
        if missing:
            raise DataError(f"columns {missing} are given to no party; map them to one or drop them from the table first")
    else:
        raise DataError(f"parties must be an int or a mapping party -> columns, got {type(parties).__name__}")
    owner, owners = None, None
    if label_owners is not None:
        if label is None:
            raise DataError("label_owners spreads the labels over parties: name the label column too (label=)")
        if label_party is not None:
            raise DataError(f"pass label_party={label_party!r} (one party holds every label) or label_owners "
                            "(labels spread over parties), not both")
        owners = _deal_label_owners(label_owners, list(mapping), len(frame), seed)
    elif label is not None:
        owner = label_party if label_party is not None else next(iter(mapping))
        if owner not in mapping:
            raise DataError(f"label_party {owner!r} is not one of the parties {list(mapping)}")
    ids = frame[id_column].to_numpy() if id_column else np.arange(len(frame))
    if pd.Index(ids).has_duplicates:
        raise DataError(f"id column {id_column!r} has duplicate IDs; IDs must be unique")
    features = {p: frame[cols].reset_index(drop=True) for p, cols in mapping.items()}
    cats = {p: [c for c in cols if c in set(categorical)] for p, cols in mapping.items()}
    y = None
    if label is not None:
        col = frame[label]
        if not pd.api.types.is_numeric_dtype(col):
            raise DataError(f"label column {label!r} is not numeric (dtype {col.dtype}); map it to 0/1 or numbers first")
        y = col.to_numpy(dtype=np.float64, na_value=np.nan)
    return VerticalDataset(features, ids, y, owner, {p: c for p, c in cats.items() if c}, owners)
