"""Row alignment of party tables whose ID sets differ, by private set intersection (:mod:`ray_vfl.psi`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Sequence

import pandas as pd

from ..errors import DataError
from ..psi.protocol import PsiResult, private_set_intersection
from ..runtime.actors import Runtime
from .dataset import VerticalDataset

__all__ = ["AlignedDataset", "align_frames"]


@dataclass(frozen=True)
class AlignedDataset(VerticalDataset):
    """A :class:`VerticalDataset` whose rows were aligned by PSI.

    Its rows are the intersection of the parties' IDs, in ascending ID order.
    Nothing is dropped: ``unaligned[p]`` holds party ``p``'s other rows, with
    all their columns (ID and label included), in their input order.

    Attributes
    ----------
    unaligned : dict[str, pandas.DataFrame]
        Per party, the rows of its input table outside the intersection.
    psi : PsiResult or None
        Row positions of the alignment and its communication statistics.
    label_column : str or None
        Name of the label column in the label party's unaligned rows.

    Example
    -------
    >>> bank = pd.DataFrame({"id": [3, 1, 2], "income": [1.0, 2.0, 3.0], "y": [0, 1, 0]})
    >>> shop = pd.DataFrame({"id": [2, 4, 3], "spend": [5.0, 6.0, 7.0]})
    >>> data = VerticalDataset.from_frames({"bank": bank, "shop": shop}, label="y", align="psi")  # doctest: +SKIP
    >>> data.ids.tolist(), data.unaligned["shop"]["id"].tolist()                                # doctest: +SKIP
    ([2, 3], [4])
    """

    unaligned: dict[str, pd.DataFrame] = field(default_factory=dict)
    psi: PsiResult | None = None
    label_column: str | None = None  # the label's column in the label party's ``unaligned`` rows


def align_frames(
    frames: Mapping[str, pd.DataFrame],
    id_column: str = "id",
    label: str | None = None,
    label_party: str | None = None,
    categorical: Mapping[str, Sequence[str]] | None = None,
    runtime: Runtime | None = None,
    workers: int | None = None,
) -> AlignedDataset:
    """Align per-party tables whose ID sets differ by PSI; what ``from_frames(..., align="psi")`` runs.

    The label party (when there is one; not when the labels are spread) leads the intersection. Without a
    ``runtime`` a fresh one is used and its PSI actors are killed afterwards
    (Ray itself keeps running for the training that follows).
    """
    for party, frame in frames.items():
        if id_column not in frame.columns:
            raise DataError(f"party {party!r} has no ID column {id_column!r}; its columns are {list(frame.columns)}")
    owners = [p for p, f in frames.items() if label is not None and label in f.columns]
    leader = label_party if label_party in frames else (owners[0] if len(owners) == 1 else None)
    own_runtime = runtime is None
    runtime = runtime or Runtime()
    try:
        result = private_set_intersection(runtime, {p: f[id_column] for p, f in frames.items()}, leader, workers)
    finally:
        if own_runtime:
            runtime.kill_all()
    aligned = {p: f.iloc[result.rows[p]].reset_index(drop=True) for p, f in frames.items()}
    unaligned = {p: f.iloc[result.unaligned_rows[p]].reset_index(drop=True) for p, f in frames.items()}
    base = VerticalDataset.from_frames(aligned, id_column, label, label_party, categorical)
    return AlignedDataset(base.features, base.ids, base.label, base.label_party, base.categorical,
                          base.label_owner, unaligned=unaligned, psi=result, label_column=label)
