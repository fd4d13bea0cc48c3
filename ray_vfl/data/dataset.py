"""Vertically partitioned data held in this process: the simulation path.

A :class:`VerticalDataset` holds, for every party, a pandas frame of that
party's feature columns; all frames share one row order (row ``i`` of every
party is the same customer, identified by ``ids[i]``). One party, the label
owner, also holds the labels; or the labels are spread over several parties
(PIVODL), each row's label at exactly one of them (``label_owner``). Here the data starts in one process (a
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
from .labels import merge_spread_labels
from .sources import as_frame, read_table
from .rows import RowsLikeX
from .store import check_labels, split_table
from .weights import check_sample_weight

__all__ = ["AlignedDataset", "VerticalDataset", "align_frames", "read_table"]

if TYPE_CHECKING:  # the runtime imports Ray; data handling does not need it
    from ..psi.protocol import PsiResult
    from ..runtime.actors import Runtime

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class VerticalDataset(RowsLikeX):
    """Feature blocks of several parties over one shared row order.

    Attributes
    ----------
    features : dict[str, pandas.DataFrame]
        Party name -> that party's feature columns (positional row order shared).
    ids : numpy.ndarray
        Row identifiers, the same for every party.
    label : numpy.ndarray or None
        Labels (held by ``label_party``, or spread as ``label_owner`` says), or None for unlabelled
        data. With spread labels it still holds every row's label: in a simulation the driver
        holds the whole table anyway; each party's actor receives only its own (:meth:`tables`).
    label_party : str or None
        Name of the party that owns the labels (None when they are spread).
    categorical : dict[str, list[str]]
        Per party, the columns to encode as categories inside that party.
    label_owner : numpy.ndarray or None
        Labels spread over parties (PIVODL): per row, the name of the party holding its label.
        None: the classic single ``label_party``.
    weight : numpy.ndarray or None
        Sample weights (finite, non-negative), held with the labels: the label party's actors receive
        them with its block (each label party those of the rows it labels), no other party does.
        :meth:`with_weights` attaches them; ``fit(data, sample_weight=w)`` does it for you.

    Example
    -------
    >>> import pandas as pd
    >>> bank = pd.DataFrame({"id": [1, 2, 3, 4], "income": [3.0, 1.0, 2.0, 5.0], "y": [0, 1, 0, 1]})
    >>> shop = pd.DataFrame({"id": [1, 2, 3, 4], "spend": [9.0, 7.0, 8.0, 1.0]})
    >>> data = VerticalDataset.from_frames({"bank": bank, "shop": shop}, id_column="id", label="y")
    >>> data.party_names, data.label_party, data.n_rows
    (['bank', 'shop'], 'bank', 4)

    Labels spread over parties: each row's label at one party.

    >>> spread = VerticalDataset(data.features, data.ids, data.label,
    ...                          label_owner=np.array(["bank", "shop", "shop", "bank"]))
    >>> spread.labels_spread, spread.label_parties, spread.label_party
    (True, ['bank', 'shop'], None)
    """

    features: dict[str, pd.DataFrame]
    ids: np.ndarray
    label: np.ndarray | None = None
    label_party: str | None = None
    categorical: dict[str, list[str]] = field(default_factory=dict)
    label_owner: np.ndarray | None = None
    weight: np.ndarray | None = None
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
        if self.label_owner is not None:
            self._check_label_owner()
        if self.label is not None:
            if self.label_owner is None and self.label_party not in self.features:
                raise DataError(f"label_party {self.label_party!r} is not one of the parties {self.party_names}")
            if len(self.label) != len(self.ids):
                raise DataError(f"{len(self.label)} labels for {len(self.ids)} rows")
            if not np.all(np.isfinite(self.label)):
                bad = int(np.sum(~np.isfinite(self.label)))
                where = (" (with labels spread over parties every row needs its label at one party)"
                         if self.label_owner is not None else "")
                raise DataError(f"{bad} label(s) are NaN or inf{where}; drop or impute those rows before training")
        if self.weight is not None:
            if self.label is None:
                raise DataError("sample weights need labels: they travel with the labels to the label party; "
                                "build the dataset with label= first")
            object.__setattr__(self, "weight", check_sample_weight(self.weight, len(self.ids)))
        for party in self.categorical:
            if party not in self.features:
                raise DataError(f"categorical columns given for unknown party {party!r}; parties are {self.party_names}")

    def _check_label_owner(self) -> None:
        if self.label is None:
            raise DataError("label_owner says which party holds each row's label, but there are no labels; "
                            "pass label= too, or leave label_owner out")
        if self.label_party is not None:
            raise DataError(f"pass label_party={self.label_party!r} (one party holds every label) or label_owner "
                            "(labels spread over parties, one owner per row), not both")
        owner = np.asarray(self.label_owner, dtype=object)
        if owner.ndim != 1 or len(owner) != len(self.ids):
            raise DataError(f"the label owners name {len(owner) if owner.ndim == 1 else owner.shape} owner(s) for "
                            f"{len(self.ids)} rows; give one party name per row")
        known = set(self.features)
        unknown = ~np.fromiter((o in known for o in owner.tolist()), dtype=bool, count=len(owner))
        if unknown.any():
            names = list(dict.fromkeys(owner[unknown].tolist()))[:5]
            raise DataError(f"the label owners give {int(unknown.sum())} row(s) to parties that do not exist, e.g. "
                            f"{names}; every owner must be one of the parties {self.party_names}")
        object.__setattr__(self, "label_owner", owner)

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
        the result is an :class:`AlignedDataset` over the common
        IDs in ascending order, whose ``unaligned[party]`` keeps each party's
        other rows. ``label`` names the label column; the party whose table
        holds it is the label owner (and leads the PSI).

        If several parties' tables hold the label column (and ``label_party`` is
        not given), the labels are spread over them (PIVODL): each table's label
        column holds that party's labels, missing (NaN) for the rows it does not
        label, and each row must be labelled at exactly one party.

        Example
        -------
        >>> a = pd.DataFrame({"id": [1, 2, 3], "x": [0.1, 0.2, 0.3], "y": [1, None, None]})
        >>> b = pd.DataFrame({"id": [1, 2, 3], "z": [5.0, 6.0, 7.0], "y": [None, 0, 1]})
        >>> data = VerticalDataset.from_frames({"a": a, "b": b}, id_column="id", label="y")
        >>> data.label_parties, data.label.tolist(), data.label_owner.tolist()
        (['a', 'b'], [1.0, 0.0, 1.0], ['a', 'b', 'b'])
        """
        if not frames:
            raise DataError("from_frames needs at least one party table; got none")
        frames = {str(p): as_frame(t, str(p)) for p, t in frames.items()}
        if align is not None:
            if align != "psi":
                raise ConfigError(f"align must be None or 'psi', got {align!r}")
            return align_frames(frames, id_column, label, label_party, categorical, runtime=runtime)
        owners = [p for p, f in frames.items() if label is not None and label in f.columns]
        if label is not None and not owners:
            raise DataError(f"no party holds the label column {label!r}; add it to the label owner's table")
        spread = label_party is None and len(owners) > 1  # labels spread over parties (PIVODL)
        owner = label_party if label_party is not None else (owners[0] if owners and not spread else None)
        if owner is not None and owner not in owners:
            raise DataError(f"label_party {owner!r} does not hold the label column {label!r}")
        # The checks every party's table passes, here or in the party's own store.
        tables = {p: split_table(f, p, id_column, label if p == owner or (spread and p in owners) else None, spread)
                  for p, f in frames.items()}
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
        label_owner = None
        if spread:
            y, label_owner = merge_spread_labels({p: tables[p].label for p in owners}, np.asarray(ids))
        cats = {p: list(c) for p, c in (categorical or {}).items()}
        return cls(features, np.asarray(ids), y, owner, cats, label_owner)

    @classmethod
    def from_sources(cls, sources, id_column: str | None = "id", label: str | None = None,
                     categorical: Mapping[str, Sequence[str]] | None = None, align: str | None = None,
                     runtime: "Runtime | None" = None, labels: str = "auto", weight: str | None = None):
        """Open each party's table inside that party's own store actor; see
        :meth:`PartyHeldDataset.open <ray_vfl.data.party_held.PartyHeldDataset.open>` (``labels``:
        "auto", "single" or "spread"). The driver never reads a party's table, IDs or labels: it gets
        a handle (counts and column schemas)."""
        from .party_held import PartyHeldDataset

        return PartyHeldDataset.open(sources, id_column, label, categorical, align, runtime, labels=labels, weight=weight)

    @classmethod
    def from_files(cls, paths, id_column: str | None = "id", label: str | None = None,
                   categorical: Mapping[str, Sequence[str]] | None = None, align: str | None = None,
                   runtime: "Runtime | None" = None, labels: str = "auto", weight: str | None = None):
        """One CSV/Parquet file (or Parquet folder) per party, each read by its own party's actor:
        :meth:`from_sources` with paths (``weight``: the label party's sample-weight column)."""
        return cls.from_sources(paths, id_column, label, categorical, align, runtime, labels, weight)

    # what protocols use (shared with PartyHeldDataset) -----------------------
    def columns(self, party: str) -> list[str]:
        """Feature column names of ``party``."""
        return list(self.features[party].columns)

    def tables(self, runtime: "Runtime") -> dict:
        """Per party, a reference to its block (and the label owner's labels) that the party's actor
        fetches: each block is put into Ray's object store once per Ray session, then every fit,
        eval set and prediction on this dataset passes the same reference.

        With spread labels every party's reference carries ``(frame, labels)``: its own labels, NaN
        for the rows it does not label (all NaN for a party that labels none, see :meth:`labels_of`)."""
        import ray

        from .store import PutRows

        runtime.connect(self.party_names)
        session = ray.get_runtime_context().get_job_id()
        if self._placed.get("session") != session:  # a new Ray: the old references are gone with the old one
            self._placed.clear()
            self._placed["session"] = session
            self._placed["refs"] = {
                p: PutRows(p, ray.put((frame, self.labels_of(p))), runtime.timeout_s,
                           None if self.weights_of(p) is None else ray.put(self.weights_of(p)))
                for p, frame in self.features.items()
            }
        return dict(self._placed["refs"])

    def labels_of(self, party: str) -> np.ndarray | None:
        """The labels ``party``'s actors receive: all of them at the label party, None at the others; with
        spread labels a float64 array with the party's own labels and NaN elsewhere.

        Example
        -------
        >>> frames = {"a": pd.DataFrame({"x": [1.0, 2.0]}), "b": pd.DataFrame({"z": [3.0, 4.0]})}
        >>> data = VerticalDataset(frames, np.array([7, 8]), np.array([1.0, 0.0]), label_owner=np.array(["b", "b"]))
        >>> data.labels_of("b").tolist(), data.labels_of("a").tolist()
        ([1.0, 0.0], [nan, nan])
        """
        if party not in self.features:
            raise DataError(f"unknown party {party!r}; parties are {self.party_names}")
        if self.label_owner is None:
            return self.label if party == self.label_party else None
        return np.where(self.label_owner == party, self.label, np.nan).astype(np.float64)

    def weights_of(self, party: str) -> np.ndarray | None:
        """The sample weights ``party``'s actors receive with its labels (see :meth:`labels_of`): all of
        them at the label party, None elsewhere; with spread labels the weights of the party's own rows
        and NaN elsewhere (None at a party that labels none); None for unweighted data.

        Example
        -------
        >>> frames = {"a": pd.DataFrame({"x": [1.0, 2.0]}), "b": pd.DataFrame({"z": [3.0, 4.0]})}
        >>> data = VerticalDataset(frames, np.array([7, 8]), np.array([1.0, 0.0]), "a").with_weights([2.0, 0.5])
        >>> data.weights_of("a").tolist(), data.weights_of("b")
        ([2.0, 0.5], None)
        """
        if self.weight is None or party not in self.features:
            return None
        if self.label_owner is None:
            return self.weight if party == self.label_party else None
        mine = self.label_owner == party
        return np.where(mine, self.weight, np.nan).astype(np.float64) if mine.any() else None

    def with_weights(self, weight) -> "VerticalDataset":
        """This data set with sample weights (one per row, finite and non-negative; ``None``: none),
        held with its labels (:attr:`weight`). Raises :class:`DataError` for bad weights."""
        if weight is None:
            return self if self.weight is None else replace(self, weight=None)
        return replace(self, weight=check_sample_weight(weight, self.n_rows))

    @property
    def weighted(self) -> bool:
        """Whether the data carries sample weights (:attr:`weight`)."""
        return self.weight is not None

    # views ----------------------------------------------------------------
    @property
    def party_names(self) -> list[str]:
        return list(self.features)

    @property
    def labels_spread(self) -> bool:
        """Whether the labels are spread over parties (``label_owner``) rather than held by ``label_party``."""
        return self.label_owner is not None

    @property
    def label_parties(self) -> list[str]:
        """The parties holding at least one label, in party order (``[label_party]`` in the classic case)."""
        if self.label_owner is None:
            return [] if self.label is None or self.label_party is None else [self.label_party]
        held = set(self.label_owner.tolist())
        return [p for p in self.features if p in held]

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
            label_owner=None if self.label_owner is None else self.label_owner[rows],
            weight=None if self.weight is None else self.weight[rows],
        )

    def train_test_split(self, test_size: float = 0.2, seed: int = 0, stratify: bool = False):
        """Seeded random split into ``(train, test)`` datasets.

        ``stratify=True`` keeps the class balance of the labels in both parts (with spread labels too:
        the simulation's driver holds them all; each row keeps its label owner).
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

    def label_classes(self) -> np.ndarray:
        """The distinct label values, ascending (a classifier's ``classes_``).

        Example
        -------
        >>> p = pd.DataFrame({"id": [1, 2, 3], "a": [1.0, 2.0, 3.0], "y": [7, 3, 7]})
        >>> q = pd.DataFrame({"id": [1, 2, 3], "b": [0.0, 1.0, 0.0]})
        >>> VerticalDataset.from_frames({"p": p, "q": q}, id_column="id", label="y").label_classes().tolist()
        [3.0, 7.0]
        """
        if self.label is None:
            raise DataError("no party holds labels; build the dataset with label= naming the label column")
        return np.unique(self.label)

    def check_labels(self, objective: str) -> None:
        """Raise :class:`DataError` unless the labels suit ``objective`` (the check a party-held
        label party runs in its own store: :func:`ray_vfl.data.store.check_labels`).

        With spread labels each party's own labels are checked (naming the party), then all of them
        together (for a binary objective, both classes must occur)."""
        if self.label_owner is not None:
            for party in self.label_parties:
                try:
                    check_labels(self.labels_of(party), objective, spread=True)
                except DataError as exc:
                    raise DataError(f"party {party!r}: {exc}") from None
        check_labels(self.label, objective)


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
    """Align per-party tables whose ID sets differ by PSI; what ``from_frames(..., align="psi")`` runs
    (the PSI step: :func:`ray_vfl.data.alignment.align_rows`)."""
    from .alignment import align_rows  # PSI needs Ray, which building a dataset in-process does not

    aligned, unaligned, result = align_rows(frames, id_column, label, label_party, runtime, workers)
    base = VerticalDataset.from_frames(aligned, id_column, label, label_party, categorical)
    return AlignedDataset(base.features, base.ids, base.label, base.label_party, base.categorical,
                          base.label_owner, unaligned=unaligned, psi=result, label_column=label)
