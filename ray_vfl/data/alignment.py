"""Row alignment of party tables whose ID sets differ, by private set intersection (:mod:`ray_vfl.psi`).

:func:`align_rows` intersects the tables' ID columns by PSI and cuts each table into its aligned rows and
its other rows; :func:`~ray_vfl.data.dataset.align_frames` (what ``from_frames(..., align="psi")`` runs)
builds the :class:`~ray_vfl.data.dataset.AlignedDataset` from them. Tables in, tables out: this module
needs nothing of the dataset classes.
"""

from __future__ import annotations

from typing import Mapping

import pandas as pd

from ..errors import DataError
from ..psi.protocol import PsiResult, private_set_intersection
from ..runtime.actors import Runtime

__all__ = ["align_rows"]


def align_rows(
    frames: Mapping[str, pd.DataFrame],
    id_column: str = "id",
    label: str | None = None,
    label_party: str | None = None,
    runtime: Runtime | None = None,
    workers: int | None = None,
) -> tuple[dict[str, pd.DataFrame], dict[str, pd.DataFrame], PsiResult]:
    """Per party, the rows in the intersection of the parties' IDs (ascending ID order) and its other rows
    (input order, all columns), and the PSI's result.

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
    return aligned, unaligned, result
