"""A party's data held on its own nodes: the store actor, the tables it holds, references to them.

Each party has one :class:`PartyStore` actor per runtime (``"<party>:data"``), pinned to the
party's resource like every other actor of the party. It opens the party's source itself
(:class:`~ray_vfl.data.sources.PartySource`: a file, a Parquet folder, an SQL query), keeps the
table in memory by key, and hands rows to the party's protocol actors, which resolve a
:class:`TableRef` inside their own process. The driver sees only what :meth:`PartyStore.schema`
reports: row counts, column names and dtypes, and which party holds labels.

Row selections (train/test splits) are positions into the party's own table. A seeded split is
drawn by the driver from the row count alone; a split stratified by label is drawn by the label
party's store, which sends the positions to the other stores through the metered send path.

Labels spread over parties (PIVODL): each label party's table keeps its own labels, with NaN for the
rows it does not label, and a party without a label column serves an all-NaN label array. Each store
checks only its own labels; whether every row is labelled at exactly one party is checked among the
parties by the protocol that consumes them (the driver never sees labels, IDs or labelled masks).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, replace
from typing import Any, Sequence

import numpy as np
import pandas as pd

from ..errors import DataError
from ..runtime.comm import Mailbox, Message, Record
from ..runtime.validation import Array, register
from .sources import PartySource

__all__ = ["Table", "PartyStore", "TableRef", "PutRows", "InlineRows", "split_table", "stratified_test_rows",
           "row_positions"]

# The label party's test positions (rows of the shared table, each once), checked on receipt
# (context: n_rows of the receiver's table); see ray_vfl.runtime.validation.
register("split_rows", Array("", "int", (None,), low=0, high="n_rows", unique=True))


@dataclass(frozen=True)
class Table:
    """One data set of one party: its feature columns, its row IDs (or None) and its labels (or None).

    ``spread``: the dataset's labels are spread over parties, so NaN in ``label`` marks a row this
    party does not label (and a party without labels serves an all-NaN array, see :meth:`labels`).
    """

    features: pd.DataFrame
    ids: np.ndarray | None
    label: np.ndarray | None
    spread: bool = False
    weight: np.ndarray | None = None  # sample weights, held with the labels

    def take(self, rows: np.ndarray) -> "Table":
        return Table(self.features.iloc[rows].reset_index(drop=True),
                     None if self.ids is None else self.ids[rows],
                     None if self.label is None else self.label[rows], self.spread,
                     None if self.weight is None else self.weight[rows])

    def labels(self) -> np.ndarray | None:
        """The labels this party serves its own actors: with spread labels, NaN where it labels no row."""
        if self.spread and self.label is None:
            return np.full(len(self.features), np.nan)
        return self.label


def split_table(frame: pd.DataFrame, party: str, id_column: str | None, label: str | None,
                partial: bool = False, weight: str | None = None) -> Table:
    """Split one party's table into features, IDs, labels and (with ``weight``, a column the label
    party holds) sample weights, checking each.

    ``partial=True``: the labels are spread over parties, and a missing label (NaN) marks a row
    this party does not label; inf is still refused.

    Example
    -------
    >>> t = split_table(pd.DataFrame({"id": [1, 2], "x": [0.5, 0.1], "y": [0, 1]}), "bank", "id", "y")
    >>> list(t.features.columns), t.ids.tolist(), t.label.tolist()
    (['x'], [1, 2], [0.0, 1.0])
    >>> split_table(pd.DataFrame({"id": [1, 2], "x": [0.5, 0.1], "y": [None, 1]}), "bank", "id", "y",
    ...             partial=True).label.tolist()
    [nan, 1.0]
    """
    if len(frame) == 0:
        raise DataError(f"party {party!r}: its table has no rows (columns {list(frame.columns)}); "
                        "check the file or query it was read from")
    ids = None
    if id_column is not None:
        if id_column not in frame.columns:
            raise DataError(f"party {party!r} has no ID column {id_column!r}; its columns are {list(frame.columns)}")
        ids = frame[id_column].to_numpy()
        dup = pd.Index(ids).duplicated()
        if dup.any():
            raise DataError(f"party {party!r} has {int(dup.sum())} duplicate ID(s) in {id_column!r}, e.g. "
                            f"{ids[dup][:3].tolist()}; IDs must be unique within a party")
    y = None
    if label is not None:
        col = frame[label]
        if partial and col.isna().all():  # a label party labelling none of these rows (pandas: object dtype)
            col = col.astype(np.float64)
        if not pd.api.types.is_numeric_dtype(col):
            raise DataError(f"party {party!r}: label column {label!r} is not numeric (dtype {col.dtype}); "
                            "map it to 0/1 or numbers first")
        y = col.to_numpy(dtype=np.float64, na_value=np.nan)
        if partial and np.isinf(y).any():
            raise DataError(f"party {party!r}: {int(np.isinf(y).sum())} label(s) are inf; fix them, or leave "
                            "them missing (NaN) where this party does not label the row")
        if not partial:
            check_complete(y, party)
    w = None
    if weight is not None and y is not None and weight in frame.columns:
        from .weights import check_sample_weight

        w = frame[weight].to_numpy(dtype=np.float64, na_value=np.nan)
        labelled = ~np.isnan(y)  # spread labels: only the rows this party labels carry a weight here
        try:
            check_sample_weight(w[labelled], int(labelled.sum()), f"weight column {weight!r}")
        except DataError as exc:
            raise DataError(f"party {party!r}: {exc}") from None
        w = np.where(labelled, w, np.nan)
    else:
        weight = None
    features = frame.drop(columns=[c for c in (id_column, label, weight) if c is not None]).reset_index(drop=True)
    if features.shape[1] == 0:
        raise DataError(f"party {party!r} has no feature columns; give it at least one or leave it out")
    return Table(features, ids, y, weight=w)


def check_complete(label: np.ndarray, party: str) -> None:
    """Raise :class:`DataError` if a single label party's labels are missing or infinite anywhere."""
    bad = ~np.isfinite(label)
    if bad.any():
        raise DataError(f"party {party!r}: {int(bad.sum())} label(s) are NaN or inf; drop or impute those rows "
                        "before training (or, if other parties label those rows, give each of them the label "
                        "column: the labels are then spread over the parties)")


def row_positions(key, n_rows: int) -> np.ndarray:
    """Row positions from an index: an integer array or list, a boolean mask, a slice; ``(rows, ...)``
    too. Anything else (columns, a second axis) raises :class:`DataError`: a vertical data set is cut by
    rows only, each party cutting its own block."""
    if isinstance(key, tuple):
        if len(key) == 2 and key[1] is Ellipsis:
            key = key[0]
        else:
            raise DataError("a vertical data set is indexed by rows only (data[rows]); its columns stay with their parties")
    try:
        return np.arange(n_rows)[key]
    except (IndexError, TypeError, ValueError) as exc:
        raise DataError(f"cannot select rows {key!r} of {n_rows} rows: {exc}") from None


def stratified_test_rows(label: np.ndarray, test_size: float, seed: int) -> np.ndarray:
    """Test rows (ascending) drawn per class with ``seed``, keeping the class balance."""
    rng = np.random.default_rng(seed)
    test = [rng.choice(members, int(round(test_size * len(members))), replace=False)
            for members in (np.flatnonzero(label == c) for c in np.unique(label))]
    return np.sort(np.concatenate(test)) if test else np.zeros(0, dtype=np.int64)


def id_digest(ids: np.ndarray | None) -> str | None:
    """SHA-256 of a party's ID column in row order: equal digests mean the same IDs in the same order,
    which parties can check through the driver without showing it any ID."""
    if ids is None:
        return None
    h = hashlib.sha256()
    for v in ids.tolist():
        h.update(f"{type(v).__name__}:{v}\x00".encode())
    return h.hexdigest()


@dataclass(frozen=True)
class TableRef:
    """A reference to one of a party's tables, resolved inside that party's own actors.

    The store and the key are all it carries: passing it through the driver moves no row.
    """

    party: str
    store: Any  # the party's PartyStore actor handle
    key: str
    timeout_s: float = 600.0

    def fetch(self) -> tuple[pd.DataFrame, np.ndarray | None]:
        """``(features, labels or None)``; call it inside one of the party's own actors."""
        import ray

        return ray.get(self.store.rows.remote(self.key), timeout=self.timeout_s)

    def fetch_weights(self) -> np.ndarray | None:
        """The sample weights held with the labels (None: unweighted, or not a label party)."""
        import ray

        return ray.get(self.store.weights.remote(self.key), timeout=self.timeout_s)

    def fetch_ids(self) -> np.ndarray:
        """The table's row IDs (for private set intersection, inside the party's PSI actor)."""
        import ray

        return ray.get(self.store.ids.remote(self.key), timeout=self.timeout_s)


@dataclass(frozen=True)
class PutRows:
    """A simulation's block of one party, put into Ray's object store once by the process that held
    it; the party's actors fetch it with the same ``fetch`` as a :class:`TableRef`."""

    party: str
    ref: Any  # ObjectRef of (features, labels or None)
    timeout_s: float = 600.0
    weights: Any = None  # ObjectRef of the sample weights held with the labels, or None

    def fetch(self) -> tuple[pd.DataFrame, np.ndarray | None]:
        import ray

        return ray.get(self.ref, timeout=self.timeout_s)

    def fetch_weights(self) -> np.ndarray | None:
        """The sample weights that come with this party's labels (None: unweighted, or not a label party)."""
        import ray

        return None if self.weights is None else ray.get(self.weights, timeout=self.timeout_s)


@dataclass(frozen=True)
class InlineRows:
    """Rows carried by value, for a role object run in this very process (unit tests, baselines):
    the same ``fetch`` as :class:`TableRef`, without a store."""

    features: pd.DataFrame
    label: np.ndarray | None = None
    weight: np.ndarray | None = None

    def fetch(self) -> tuple[pd.DataFrame, np.ndarray | None]:
        return self.features, self.label

    def fetch_weights(self) -> np.ndarray | None:
        return self.weight


class PartyStore:
    """The tables of one party, kept in its own actor (see the module docstring).

    Example
    -------
    >>> store = PartyStore("bank")
    >>> frame = pd.DataFrame({"id": [3, 1], "income": [1.0, 2.0], "y": [0, 1]})
    >>> store.put("all", frame, "id", "y", [])["n_rows"]
    2
    >>> store.select("first", "all", np.array([0]))
    1
    >>> store.rows("first")[0]["income"].tolist()
    [1.0]
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self.mailbox = Mailbox(name)
        self.tables: dict[str, Table] = {}
        self.categorical: dict[str, list[str]] = {}
        self.reads: list[dict[str, Any]] = []  # where each source was read (node, process): for audits

    def _table(self, key: str) -> Table:
        if key not in self.tables:
            raise DataError(f"party {self.name!r} holds no data set {key!r}; it may have been dropped "
                            "or its store restarted: open the dataset again")
        return self.tables[key]

    def schema(self, key: str) -> dict[str, Any]:
        """What the party shares about a table: row count, column names and dtypes, whether it holds
        labels, its categorical columns and the digest of its ID order (not the IDs)."""
        t = self._table(key)
        return {"n_rows": len(t.features), "columns": list(t.features.columns),
                "dtypes": [str(d) for d in t.features.dtypes], "has_label": t.label is not None,
                "labels_spread": t.spread, "has_weight": t.weight is not None,
                "has_ids": t.ids is not None, "categorical": list(self.categorical.get(key, [])),
                "id_digest": id_digest(t.ids)}

    # opening ------------------------------------------------------------------
    def open(self, key: str, source: PartySource, label: str | None = None, partial: bool = False,
             weight: str | None = None) -> dict[str, Any]:
        """Read ``source`` here, on this party's node, and keep it as ``key``; ``label`` names a
        label column that this party holds if its table has it (a source's own label must exist).
        ``partial``: missing labels are allowed for now (spread labels; see :meth:`spread_labels`
        and :meth:`require_complete_labels`)."""
        import os
        import socket

        frame = source.read()
        self.reads.append({"location": source.location, "pid": os.getpid(), "host": socket.gethostname(),
                           "node_id": _node_id()})
        label = source.label or (label if label in frame.columns else None)
        return self.put(key, frame, source.id_column, label, list(source.categorical), partial, weight)

    def put(self, key: str, frame: pd.DataFrame, id_column: str | None, label: str | None,
            categorical: Sequence[str], partial: bool = False, weight: str | None = None) -> dict[str, Any]:
        """Keep a table given as a frame (a simulation's data, moved into the party once); ``weight``:
        the sample-weight column, taken out of the features where this party holds the labels."""
        self.tables[key] = split_table(frame, self.name, id_column, label, partial, weight)
        self.categorical[key] = [c for c in categorical if c in self.tables[key].features.columns]
        return self.schema(key)

    def require_complete_labels(self, key: str) -> None:
        """The one label party of a dataset: refuse missing labels (they were allowed while opening)."""
        table = self._table(key)
        if table.label is not None:
            check_complete(table.label, self.name)

    def spread_labels(self, key: str) -> dict[str, Any]:
        """Mark ``key``'s labels as spread over parties: NaN marks a row this party does not label."""
        self.tables[key] = replace(self._table(key), spread=True)
        return self.schema(key)

    # selections ---------------------------------------------------------------
    def select(self, key: str, base: str, rows: np.ndarray) -> int:
        """Keep rows ``rows`` (positions into ``base``) of a table as ``key``."""
        table = self._table(base)
        rows = np.asarray(rows, dtype=np.int64)
        if len(rows) and (rows.min() < 0 or rows.max() >= len(table.features)):
            raise DataError(f"party {self.name!r}: row positions outside its {len(table.features)} rows")
        self.tables[key] = table.take(rows)
        self.categorical[key] = list(self.categorical.get(base, []))
        return len(rows)

    def split_by_label(self, base: str, keys: tuple[str, str], test_size: float, seed: int,
                       peers: dict[str, Any]) -> tuple[int, int]:
        """Label party: draw a stratified split of ``base``, keep it, and send the test positions to
        the other parties' stores (metered); returns the train and test sizes."""
        import ray

        table = self._table(base)
        if table.label is None:
            raise DataError(f"party {self.name!r} holds no labels to stratify by")
        if table.spread:
            raise DataError(f"party {self.name!r} holds only part of the labels (they are spread over parties): "
                            "it cannot stratify a split alone; use train_test_split(..., stratify=False)")
        test = stratified_test_rows(table.label, test_size, seed)
        message = self.mailbox.send("split_rows", list(peers), test)
        ray.get([h.apply_split.remote(message, base, keys) for h in peers.values()], timeout=600)
        return self.apply_split(message, base, keys, own=test)

    def apply_split(self, message: Message | None, base: str, keys: tuple[str, str],
                    own: np.ndarray | None = None) -> tuple[int, int]:
        """Keep the train and test parts of ``base`` named by a split message (test positions)."""
        n = len(self._table(base).features)
        test = own if own is not None else self.mailbox.open(message, "split_rows", {"n_rows": n})
        mask = np.zeros(n, dtype=bool)
        mask[np.asarray(test, dtype=np.int64)] = True
        if mask.all() or not mask.any():
            raise DataError(f"the split leaves an empty part for {n} rows; change test_size")
        return self.select(keys[0], base, np.flatnonzero(~mask)), self.select(keys[1], base, np.flatnonzero(mask))

    def align(self, key: str, unaligned_key: str, base: str, psi: Any) -> tuple[int, int]:
        """Keep the rows a private set intersection aligned (``psi``: this party's PSI actor, which
        hands its result here, not to the driver) as ``key``, the others as ``unaligned_key``."""
        import ray

        rows, unaligned = ray.get(psi.result.remote(), timeout=600)
        return self.select(key, base, rows), self.select(unaligned_key, base, unaligned)

    # serving the party's own actors ---------------------------------------------
    def rows(self, key: str) -> tuple[pd.DataFrame, np.ndarray | None]:
        table = self._table(key)
        return table.features, table.labels()

    def weights(self, key: str) -> np.ndarray | None:
        """The sample weights held with the labels (NaN on rows this party does not label), or None."""
        return self._table(key).weight

    def ids(self, key: str) -> np.ndarray:
        table = self._table(key)
        if table.ids is None:
            raise DataError(f"party {self.name!r} has no ID column; name it (id_column=) to align by PSI")
        return table.ids

    def check_labels(self, key: str, objective: str) -> None:
        """Raise :class:`DataError` unless the labels suit ``objective`` (at the label party; with
        spread labels, at each label party, for its own labelled rows)."""
        table = self._table(key)
        try:
            check_labels(table.labels(), objective, spread=table.spread)
        except DataError as exc:
            raise DataError(f"party {self.name!r}: {exc}") from None

    def label_classes(self, key: str) -> list[float]:
        """The distinct label values, ascending (asked by the label party's side, for ``classes_``)."""
        label = self._table(key).labels()
        return [] if label is None else np.unique(label[np.isfinite(label)]).tolist()

    def drop(self, keys: Sequence[str]) -> None:
        for key in keys:
            self.tables.pop(key, None)
            self.categorical.pop(key, None)

    def source_reads(self) -> list[dict[str, Any]]:
        """Where this store read its sources (node, process): what a deployment audit checks."""
        return list(self.reads)

    def comm_records(self) -> list[Record]:
        return self.mailbox.drain()


def check_labels(label: np.ndarray | None, objective: str, spread: bool = False) -> None:
    """Raise :class:`DataError` unless ``label`` exists and suits ``objective``: for the binary
    objective, 0/1 values of both classes (with one class there is nothing to learn, and AUC is
    undefined).

    ``spread=True``: ``label`` is one party's share of labels spread over parties; NaN marks a row
    it does not label and is skipped, and only the values are checked (one party may hold one class,
    or no label at all).

    Example
    -------
    >>> check_labels(np.array([0.0, 0.0, 0.0]), "binary:logistic")
    Traceback (most recent call last):
    ...
    ray_vfl.errors.DataError: the labels hold one class only (all 3 rows are 0): a binary classifier needs rows of both classes; check the label column, or split with train_test_split(..., stratify=True)
    >>> check_labels(np.array([np.nan, 1.0, 1.0]), "binary:logistic", spread=True)   # one party's share
    """
    if label is None:
        raise DataError("no party holds labels; build the dataset with label= naming the label column")
    if spread:
        label = label[~np.isnan(label)]
    if objective == "binary:logistic":
        bad = ~np.isin(label, (0.0, 1.0))
        if bad.any():
            raise DataError(
                f"labels must be 0 or 1 for a binary objective; found {np.unique(label[bad])[:5].tolist()}; "
                "for more classes use objective='multi:softprob' (SecureBoostClassifier and, for in-process data, "
                "PIVODLClassifier pick it from the labels; labels 0 .. K-1 spread over parties' own stores: "
                "PIVODLClassifier(num_class=K)), or map the classes to 0/1 (or use a regression objective)"
            )
        classes = np.unique(label)
        if len(classes) < 2 and not spread:
            raise DataError(f"the labels hold one class only (all {len(label)} rows are {int(classes[0])}): a binary "
                            "classifier needs rows of both classes; check the label column, or split with "
                            "train_test_split(..., stratify=True)")
    if objective.startswith("multi:") and not spread and len(np.unique(label)) < 2:
        raise DataError(f"the labels hold one class only (all {len(label)} rows are {label[0]:g}): a classifier needs "
                        "rows of two classes at least; check the label column")


def _node_id() -> str | None:
    try:
        import ray

        return ray.get_runtime_context().get_node_id() if ray.is_initialized() else None
    except Exception:  # outside Ray (unit tests of the class itself)
        return None
