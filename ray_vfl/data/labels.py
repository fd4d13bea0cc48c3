"""Labels spread over several parties: each row's label at exactly one of them."""

from __future__ import annotations

from typing import Mapping

import numpy as np

from ..errors import DataError

__all__ = ["merge_spread_labels"]


def merge_spread_labels(labels: Mapping[str, np.ndarray], ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Every row's label and its owner from each label party's column (NaN: not labelled there);
    raise :class:`DataError` for a row labelled at two parties or at none."""
    parties = list(labels)
    held = np.stack([~np.isnan(labels[p]) for p in parties])  # (party, row): labelled there
    count = held.sum(axis=0)
    twice = np.flatnonzero(count > 1)
    if len(twice):
        i = twice[0]
        a, b = [parties[j] for j in np.flatnonzero(held[:, i])[:2]]
        raise DataError(f"{len(twice)} row(s) are labelled at more than one party: row id {ids[i:i + 1].tolist()[0]!r} "
                        f"is labelled at both {a!r} and {b!r}; each row's label must be at exactly one party "
                        "(leave it missing at the others)")
    nowhere = np.flatnonzero(count == 0)
    if len(nowhere):
        raise DataError(f"{len(nowhere)} row(s) are labelled at no party, e.g. row id "
                        f"{ids[nowhere[0]:nowhere[0] + 1].tolist()[0]!r}; each row's label must be at exactly one "
                        "party: give it to one party's label column, or drop the row")
    y = np.full(len(ids), np.nan)
    owner = np.empty(len(ids), dtype=object)
    for j, p in enumerate(parties):
        y[held[j]] = labels[p][held[j]]
        owner[held[j]] = p
    return y, owner
