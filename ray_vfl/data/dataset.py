"""Vertically partitioned data held in this process: the simulation path.

A :class:`VerticalDataset` holds, for every party, a pandas frame of that
party's feature columns; all frames share one row order (row ``i`` of every
party is the same customer, identified by ``ids[i]``). One party, the label
owner, also holds the labels. Here the data starts in one process (a
simulation, a notebook, a test): :func:`vertical_split` and
:meth:`VerticalDataset.from_frames` build it, and the first protocol run puts
each party's block into Ray's object store once (:meth:`VerticalDataset.tables`);
each party's actor fetches its own block from there, and every later run passes
the same reference.

In a federation each party's data stays on its own nodes:
:class:`~ray_vfl.data.party_held.PartyHeldDataset` (built by
:meth:`VerticalDataset.from_sources` or :meth:`VerticalDataset.from_files`) is
a handle the driver holds, with the same protocol-facing methods.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Mapping, Sequence

import numpy as np
import pandas as pd

from ..errors import ConfigError, DataError
from .sources import read_table
from .store import check_labels, split_table

__all__ = ["VerticalDataset", "vertical_split", "read_table"]

if TYPE_CHECKING:  # the runtime imports Ray; data handling does not need it
    from ..runtime.actors import Runtime

log = logging.getLogger(__name__)


def _as_frame(table, party: str) -> pd.DataFrame:
    if isinstance(table, pd.DataFrame):
        return table
    try:
        import pyarrow as pa

        if isinstance(table, pa.Table):
            return table.to_pandas()
    except ImportError:  # pragma: no cover - pyarrow is a dependency
        pass
    raise DataError(f"party {party!r}: expected a pandas DataFrame or pyarrow Table, got {type(table).__name__}")


@dataclass(frozen=True)
class VerticalDataset:
    """Feature blocks of several parties over one shared row order.

    Attributes
    ----------
    features : dict[str, pandas.DataFrame]
        Party name -> that party's feature columns (positional row order shared).
    ids : numpy.ndarray
        Row identifiers, the same for every party.
    label : numpy.ndarray or None
        Labels (held by ``label_party``), or None for unlabelled data.
    label_party : str or None
        Name of the party that owns the labels.
    categorical : dict[str, list[str]]
        Per party, the columns to encode as categories inside that party.

    Example
    -------
    >>> import pandas as pd
    >>> bank = pd.DataFrame({"id": [1, 2, 3, 4], "income": [3.0, 1.0, 2.0, 5.0], "y": [0, 1, 0, 1]})
    >>> shop = pd.DataFrame({"id": [1, 2, 3, 4], "spend": [9.0, 7.0, 8.0, 1.0]})
    >>> data = VerticalDataset.from_frames({"bank": bank, "shop": shop}, id_column="id", label="y")
    >>> data.party_names, data.label_party, data.n_rows
    (['bank', 'shop'], 'bank', 4)
    """

    features: dict[str, pd.DataFrame]
    ids: np.ndarray
    label: np.ndarray | None = None
    label_party: str | None = None
    categorical: dict[str, list[str]] = field(default_factory=dict)
    # the Ray session and each party's reference (see tables()): the frames are put once per session
    _placed: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if len(self.features) == 0:
            raise DataError("a vertical dataset needs at least one party; got none")
        if len(self.ids) == 0:
            raise DataError("a vertical dataset needs at least one row; got none (is the table empty?)")
        for party, frame in self.features.items():
            if frame.shape[1] == 0:
                raise DataError(f"party {party!r} has no feature columns; give it at least one or leave it out")
            if len(frame) != len(self.ids):
                raise DataError(f"party {party!r} has {len(frame)} rows but the dataset has {len(self.ids)} ids")
        if self.label is not None:
            if self.label_party not in self.features:
                raise DataError(f"label_party {self.label_party!r} is not one of the parties {self.party_names}")
            if len(self.label) != len(self.ids):
                raise DataError(f"{len(self.label)} labels for {len(self.ids)} rows")
            if not np.all(np.isfinite(self.label)):
                bad = int(np.sum(~np.isfinite(self.label)))
                raise DataError(f"{bad} label(s) are NaN or inf; drop or impute those rows before training")
        for party in self.categorical:
            if party not in self.features:
                raise DataError(f"categorical columns given for unknown party {party!r}; parties are {self.party_names}")

    @staticmethod
    def ensure(data: object, role: str = "fit") -> "VerticalDataset":
        """Return ``data`` if it is a :class:`VerticalDataset` or a party-held one; raise
        :class:`DataError` naming the fix otherwise."""
        from .party_held import PartyHeldDataset

        if not isinstance(data, (VerticalDataset, PartyHeldDataset)):
            raise DataError(f"{role} expects a VerticalDataset (see ray_vfl.vertical_split or "
                            f"VerticalDataset.from_frames), got {type(data).__name__}")
        return data

    # construction -------------------------------------------------------
    @classmethod
    def from_frames(
        cls,
        frames: Mapping[str, pd.DataFrame],
        id_column: str = "id",
        label: str | None = None,
        label_party: str | None = None,
        categorical: Mapping[str, Sequence[str]] | None = None,
        align: str | None = None,
        runtime: "Runtime | None" = None,
    ) -> "VerticalDataset":
        """Build from one table per party, each with an ID column.

        With ``align=None`` every party must list the same IDs in the same
        order. With ``align="psi"`` the tables may hold different IDs in any
        order: the parties intersect them by private set intersection on Ray
        actors (``runtime``, or a fresh :class:`~ray_vfl.runtime.actors.Runtime`) and
        the result is a :class:`~ray_vfl.data.alignment.AlignedDataset` over the common
        IDs in ascending order, whose ``unaligned[party]`` keeps each party's
        other rows. ``label`` names the label column; the party whose table
        holds it is the label owner (and leads the PSI).
        """
        if not frames:
            raise DataError("from_frames needs at least one party table; got none")
        frames = {str(p): _as_frame(t, str(p)) for p, t in frames.items()}
        if align is not None:
            if align != "psi":
                raise ConfigError(f"align must be None or 'psi', got {align!r}")
            from .alignment import align_frames  # alignment builds on this module

            return align_frames(frames, id_column, label, label_party, categorical, runtime=runtime)
        owners = [p for p, f in frames.items() if label is not None and label in f.columns]
        if label is not None and not owners:
            raise DataError(f"no party holds the label column {label!r}; add it to the label owner's table")
        if label_party is None and len(owners) > 1:
            raise DataError(f"several parties hold a column {label!r} ({owners}); pass label_party= to choose the owner")
        owner = label_party if label_party is not None else (owners[0] if owners else None)
        if owner is not None and owner not in owners:
            raise DataError(f"label_party {owner!r} does not hold the label column {label!r}")
        # The checks every party's table passes, here or in the party's own store.
        tables = {p: split_table(f, p, id_column, label if p == owner else None) for p, f in frames.items()}
        first, ids = next((p, t.ids) for p, t in tables.items())
        for party, table in tables.items():
            if len(table.ids) != len(ids) or not np.array_equal(table.ids, ids):
                same_set = len(table.ids) == len(ids) and set(table.ids.tolist()) == set(ids.tolist())
                hint = ("they hold the same IDs in a different order: sort every table by ID, or pass align='psi'"
                        if same_set else "their ID sets differ: pass align='psi' to intersect them by private set "
                        "intersection (each party keeps its other rows)")
                raise DataError(f"rows of parties {first!r} and {party!r} are misaligned; {hint}")
        features = {p: t.features for p, t in tables.items()}
        y = tables[owner].label if owner is not None else None
        cats = {p: list(c) for p, c in (categorical or {}).items()}
        return cls(features, np.asarray(ids), y, owner, cats)

    @classmethod
    def from_sources(cls, sources, id_column: str | None = "id", label: str | None = None,
                     categorical: Mapping[str, Sequence[str]] | None = None, align: str | None = None,
                     runtime: "Runtime | None" = None):
        """Open each party's table inside that party's own store actor; see
        :meth:`PartyHeldDataset.open <ray_vfl.data.party_held.PartyHeldDataset.open>`. The driver
        never reads a party's table, IDs or labels: it gets a handle (counts and column schemas)."""
        from .party_held import PartyHeldDataset

        return PartyHeldDataset.open(sources, id_column, label, categorical, align, runtime)

    @classmethod
    def from_files(cls, paths, id_column: str | None = "id", label: str | None = None,
                   categorical: Mapping[str, Sequence[str]] | None = None, align: str | None = None,
                   runtime: "Runtime | None" = None):
        """One CSV/Parquet file (or Parquet folder) per party, each read by its own party's actor:
        :meth:`from_sources` with paths."""
        return cls.from_sources(paths, id_column, label, categorical, align, runtime)

    # what protocols use (shared with PartyHeldDataset) -----------------------
    def columns(self, party: str) -> list[str]:
        """Feature column names of ``party``."""
        return list(self.features[party].columns)

    def tables(self, runtime: "Runtime") -> dict:
        """Per party, a reference to its block (and the label owner's labels) that the party's actor
        fetches: each block is put into Ray's object store once per Ray session, then every fit,
        eval set and prediction on this dataset passes the same reference."""
        import ray

        from .store import PutRows

        runtime.connect(self.party_names)
        session = ray.get_runtime_context().get_job_id()
        if self._placed.get("session") != session:  # a new Ray: the old references are gone with the old one
            self._placed.clear()
            self._placed["session"] = session
            self._placed["refs"] = {
                p: PutRows(p, ray.put((frame, self.label if p == self.label_party else None)), runtime.timeout_s)
                for p, frame in self.features.items()
            }
        return dict(self._placed["refs"])

    # views ----------------------------------------------------------------
    @property
    def party_names(self) -> list[str]:
        return list(self.features)

    @property
    def n_rows(self) -> int:
        return len(self.ids)

    def n_features(self, party: str | None = None) -> int:
        if party is not None:
            return self.features[party].shape[1]
        return sum(f.shape[1] for f in self.features.values())

    def take(self, rows: np.ndarray) -> "VerticalDataset":
        """Rows ``rows`` of every party (and of the labels)."""
        rows = np.asarray(rows)
        return replace(
            self,
            features={p: f.iloc[rows].reset_index(drop=True) for p, f in self.features.items()},
            ids=self.ids[rows],
            label=None if self.label is None else self.label[rows],
        )

    def train_test_split(self, test_size: float = 0.2, seed: int = 0, stratify: bool = False):
        """Seeded random split into ``(train, test)`` datasets.

        ``stratify=True`` keeps the class balance of the labels in both parts.
        """
        if not 0.0 < test_size < 1.0:
            raise DataError(f"test_size must be in (0, 1), got {test_size!r}")
        rng = np.random.default_rng(seed)
        if stratify and self.label is not None:
            test = []
            for cls_value in np.unique(self.label):
                members = np.flatnonzero(self.label == cls_value)
                test.append(rng.choice(members, int(round(test_size * len(members))), replace=False))
            test_rows = np.sort(np.concatenate(test))
        else:
            test_rows = np.sort(rng.choice(self.n_rows, int(round(test_size * self.n_rows)), replace=False))
        mask = np.zeros(self.n_rows, dtype=bool)
        mask[test_rows] = True
        if mask.all() or not mask.any():
            raise DataError(f"test_size={test_size} leaves an empty part for {self.n_rows} rows")
        return self.take(np.flatnonzero(~mask)), self.take(test_rows)

    def check_labels(self, objective: str) -> None:
        """Raise :class:`DataError` unless the labels suit ``objective`` (the check a party-held
        label party runs in its own store: :func:`ray_vfl.data.store.check_labels`)."""
        check_labels(self.label, objective)


def vertical_split(
    frame: pd.DataFrame,
    parties: int | Mapping[str, Sequence[str]] = 2,
    label: str | None = None,
    label_party: str | None = None,
    id_column: str | None = None,
    categorical: Sequence[str] = (),
    seed: int = 0,
) -> VerticalDataset:
    """Split one table's columns over parties.

    ``parties`` is either an explicit mapping ``{party: [columns]}`` or a number
    ``N``: the feature columns are shuffled with ``seed`` and dealt evenly to
    ``party0 .. party{N-1}``. The label goes to ``label_party`` (default: the
    first party). ``categorical`` lists columns to encode inside their party.

    Example
    -------
    >>> frame = pd.DataFrame({"a": [1.0, 2.0], "b": [3.0, 4.0], "c": [5.0, 6.0], "y": [0, 1]})
    >>> data = vertical_split(frame, {"bank": ["a"], "shop": ["b", "c"]}, label="y")
    >>> {p: list(f.columns) for p, f in data.features.items()}
    {'bank': ['a'], 'shop': ['b', 'c']}
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
    owner = None
    if label is not None:
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
    return VerticalDataset(features, ids, y, owner, {p: c for p, c in cats.items() if c})
