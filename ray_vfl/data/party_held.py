"""The driver's handle to data that each party holds on its own nodes.

:meth:`PartyHeldDataset.open` has every party's store actor read that party's source (a file, a
Parquet folder, an SQL query: :class:`~ray_vfl.data.sources.PartySource`) on the party's own
nodes. The driver keeps only what the parties consent to share: party names, row counts, column
names and dtypes, which party holds labels. Rows are aligned either by the parties' own ID order
(checked by comparing digests of their ID columns) or by private set intersection run among the
parties' PSI actors (:mod:`ray_vfl.psi`), whose result each party hands to its own store: the
aligned order reaches each party as positions into its own table, and the driver learns sizes.

Protocols use the same methods as on the in-process
:class:`~ray_vfl.data.dataset.VerticalDataset`: ``party_names``, ``label_party``, ``label_parties``,
``labels_spread``, ``n_rows``, ``columns``, ``categorical``, ``tables(runtime)``, ``check_labels``,
``train_test_split``.

Labels spread over parties (PIVODL): when more than one source has the label column (or with
``labels="spread"``), each of those parties keeps its own label column, a missing value marking a row
it does not label; ``label_party`` is None and every party's reference serves ``(features, labels)``
with NaN where the party labels no row (all NaN for a party without a label column). Each party's
store checks only its own labels. Whether every row is labelled at exactly one party needs every
party's labelled-row set: the protocol's parties compare those among themselves at set-up (PIVODL's
step 1); the driver never receives labels, IDs or labelled masks, so it cannot and does not check.
"""

from __future__ import annotations

import logging
import os
import uuid
import weakref
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Mapping, Sequence

import numpy as np

from ..errors import ConfigError, DataError
from .sources import PartySource
from .rows import RowsLikeX
from .store import PartyStore, TableRef

if TYPE_CHECKING:
    from ..runtime.actors import Runtime

__all__ = ["PartyHeldDataset"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, eq=False)
class PartyHeldDataset(RowsLikeX):
    """Rows held by the parties' store actors; the driver holds names, counts and schemas.

    Attributes
    ----------
    schemas : dict[str, dict]
        Per party: ``n_rows``, ``columns``, ``dtypes``, ``has_label``, ``labels_spread``, ``categorical``.
    label_party : str or None
        The party that holds the labels (None when they are spread over parties: ``label_parties``).
    unaligned : dict[str, int]
        After alignment by PSI: per party, how many of its rows lie outside the intersection (kept
        in its store as ``unaligned_table(party)``).

    Example
    -------
    >>> data = VerticalDataset.from_files({"bank": "bank.parquet", "shop": "shop.csv"},   # doctest: +SKIP
    ...                                   id_column="customer", label="default", align="psi")
    >>> data.n_rows, data.columns("shop")                                                  # doctest: +SKIP
    (24812, ['spend', 'visits'])
    >>> train, test = data.train_test_split(0.2, seed=0)                                   # doctest: +SKIP
    >>> SecureBoostClassifier().fit(train).predict_proba(test)                             # doctest: +SKIP
    """

    runtime: Any
    stores: dict[str, Any]
    keys: dict[str, str]
    schemas: dict[str, dict]
    label_party: str | None
    unaligned: dict[str, int] = field(default_factory=dict)
    unaligned_keys: dict[str, str] = field(default_factory=dict)
    psi_stats: Any = None

    def __post_init__(self) -> None:
        # The tables this handle named stay in the parties' stores as long as the handle lives: each
        # handle's keys are its own (opening, aligning, splitting and take make new ones).
        owned = {p: [self.keys[p]] + ([self.unaligned_keys[p]] if p in self.unaligned_keys else []) for p in self.stores}
        weakref.finalize(self, _release, dict(self.stores), owned)

    # construction -------------------------------------------------------------
    @classmethod
    def open(cls, sources: Mapping[str, PartySource | str | os.PathLike], id_column: str | None = "id",
             label: str | None = None, categorical: Mapping[str, Sequence[str]] | None = None,
             align: str | None = None, runtime: "Runtime | None" = None, workers: int | None = None,
             labels: str = "auto", weight: str | None = None) -> "PartyHeldDataset":
        """Have each party open its own source and align the rows.

        Parameters
        ----------
        sources : mapping of party name to PartySource or path
            A path (file or Parquet folder, as the party's nodes see it) takes ``id_column``,
            ``label`` and ``categorical`` from the arguments below; a :class:`PartySource` names
            its own columns (each party may name its ID column differently).
        id_column : str or None
            ID column of path sources (``None``: rows align by position).
        label : str or None
            Label column of path sources; the party whose table holds it is the label owner.
        categorical : mapping of party to column names, optional
            Categorical columns of path sources.
        align : None or "psi"
            ``None``: every party must hold the same IDs in the same order (checked by digest);
            ``"psi"``: intersect the ID sets by ECDH-PSI among the parties.
        runtime : Runtime, optional
            Where the store actors run (default: a new :class:`~ray_vfl.runtime.actors.Runtime`).
        labels : "auto", "single" or "spread"
            ``"single"``: one party holds every row's label (a second label column is an error, a
            missing label too). ``"spread"``: the labels are spread over the parties whose tables
            have the label column, each leaving the rows it does not label missing (PIVODL).
            ``"auto"`` (default): spread if more than one party's table has the label column,
            single otherwise.
        weight : str or None
            Sample-weight column of the label party's (or parties') table: opened and kept there with
            the labels, taken out of its features (finite and non-negative, one per labelled row);
            training weighs each row's gradients by it. Other parties' columns of that name stay features.
        """
        from ..runtime.actors import Runtime

        if not isinstance(sources, Mapping) or not sources:
            raise DataError("give one source per party: {party: path or PartySource}; got none")
        if align not in (None, "psi"):
            raise ConfigError(f"align must be None or 'psi', got {align!r}")
        if labels not in ("auto", "single", "spread"):
            raise ConfigError(f"labels must be 'auto', 'single' or 'spread', got {labels!r}")
        categorical = dict(categorical or {})
        unknown = sorted(set(categorical) - set(map(str, sources)))
        if unknown:
            raise DataError(f"categorical columns given for unknown part(y/ies) {unknown}; parties are {list(sources)}")
        specs = {str(p): PartySource.of(s, id_column, None, categorical.get(str(p), ())) for p, s in sources.items()}
        runtime = runtime or Runtime()
        runtime.connect(list(specs))
        stores = {p: runtime.spawn_helper(p, "data", PartyStore, p, keep=True) for p in specs}
        runtime.introduce([f"{p}:data" for p in specs])  # the stores send each other split rows, sealed
        base = f"source-{uuid.uuid4().hex[:8]}"
        # A path source takes the common label name if its table has that column (only its party can tell).
        # Missing labels are allowed while opening, and refused below if one party holds every label.
        calls = [(p, stores[p].open.remote(base, spec, label, True, weight)) for p, spec in specs.items()]
        schemas = dict(zip(specs, runtime.get(calls, "open party data")))
        owners = [p for p, s in schemas.items() if s["has_label"]]
        if label is not None and not owners:
            raise DataError(f"no party holds the label column {label!r}; add it to the label owner's table")
        spread = labels == "spread" or (labels == "auto" and len(owners) > 1)
        if len(owners) > 1 and not spread:
            raise DataError(f"several parties hold the label column ({owners}); keep it at one party only, or pass "
                            "labels='spread' if each labels some of the rows (labels spread over parties, for PIVODL)")
        if spread and not owners:
            raise DataError("labels='spread' needs a label column at one party at least; name it with label= "
                            "or in each label party's PartySource")
        if spread:
            calls = [(p, stores[p].spread_labels.remote(base)) for p in specs]
            schemas = dict(zip(specs, runtime.get(calls, "spread labels")))
        elif owners:
            runtime.get([(owners[0], stores[owners[0]].require_complete_labels.remote(base))], "check labels")
        data = cls(runtime, stores, {p: base for p in specs}, schemas, None if spread else (owners[0] if owners else None))
        return data._aligned_by_psi(workers) if align == "psi" else data._check_row_order()

    def _check_row_order(self) -> "PartyHeldDataset":
        counts = {p: s["n_rows"] for p, s in self.schemas.items()}
        if len(set(counts.values())) > 1:
            raise DataError(f"the parties hold different numbers of rows {counts}; pass align='psi' to intersect "
                            "their IDs by private set intersection (each party keeps its other rows)")
        digests = {p: s["id_digest"] for p, s in self.schemas.items() if s["id_digest"] is not None}
        if len(set(digests.values())) > 1:
            raise DataError(f"the parties' ID columns differ in content or order ({sorted(digests)}): sort every "
                            "table by ID, or pass align='psi' to intersect them privately")
        return self

    def _aligned_by_psi(self, workers: int | None) -> "PartyHeldDataset":
        from ..psi.protocol import private_set_intersection

        ids = {p: self._ref(p) for p in self.party_names}
        result = private_set_intersection(self.runtime, ids, self.label_party, workers, keep_rows=True)
        aligned = f"aligned-{uuid.uuid4().hex[:8]}"
        outside = f"unaligned-{uuid.uuid4().hex[:8]}"
        calls = [(p, self.stores[p].align.remote(aligned, outside, self.keys[p], self.runtime.actor(p)))
                 for p in self.party_names]
        sizes = dict(zip(self.party_names, self.runtime.get(calls, "keep the aligned rows")))
        keys = {p: aligned for p in self.party_names}
        schemas = self._schemas(keys)
        return PartyHeldDataset(self.runtime, self.stores, keys, schemas, self.label_party,
                                {p: s[1] for p, s in sizes.items()}, {p: outside for p in self.party_names},
                                result.comm_stats)

    # what protocols use -----------------------------------------------------------
    @property
    def party_names(self) -> list[str]:
        return list(self.schemas)

    @property
    def n_rows(self) -> int:
        return int(next(iter(self.schemas.values()))["n_rows"])

    @property
    def weighted(self) -> bool:
        """Whether the label party (or parties) holds sample weights with the labels (``weight=`` at open)."""
        return any(s.get("has_weight") for s in self.schemas.values())

    def with_weights(self, weight) -> "PartyHeldDataset":
        """``None`` only: party-held data keeps its sample weights with the labels, in the label party's
        store; an array held by the driver is refused with :class:`DataError` naming the fix."""
        if weight is None:
            return self
        raise DataError("party-held data keeps its sample weights at the label party: open it with "
                        "weight='<column of the label party>' (from_files / from_sources) instead of passing "
                        "sample_weight from the driver")

    @property
    def labels_spread(self) -> bool:
        """Whether the labels are spread over several parties (PIVODL) rather than held by ``label_party``."""
        return any(s.get("labels_spread", False) for s in self.schemas.values())

    @property
    def label_parties(self) -> list[str]:
        """The parties holding labels, in party order: ``[label_party]``, or with spread labels every party
        whose table has the label column (only a party knows how many of its rows it labels)."""
        if self.labels_spread:
            return [p for p, s in self.schemas.items() if s["has_label"]]
        return [] if self.label_party is None else [self.label_party]

    @property
    def categorical(self) -> dict[str, list[str]]:
        return {p: list(s["categorical"]) for p, s in self.schemas.items() if s["categorical"]}

    def columns(self, party: str) -> list[str]:
        """Feature column names of ``party`` (which it shares as part of the schema)."""
        return list(self.schemas[party]["columns"])

    def n_features(self, party: str | None = None) -> int:
        if party is not None:
            return len(self.schemas[party]["columns"])
        return sum(len(s["columns"]) for s in self.schemas.values())

    def _ref(self, party: str, key: str | None = None) -> TableRef:
        return TableRef(party, self.stores[party], key or self.keys[party], self.runtime.timeout_s)

    def tables(self, runtime: "Runtime | None" = None) -> dict[str, TableRef]:
        """Per party, a reference to its rows that its own actors resolve."""
        if runtime is not None:
            runtime.connect(self.party_names)
        return {p: self._ref(p) for p in self.party_names}

    def unaligned_table(self, party: str) -> TableRef:
        """A reference to ``party``'s rows outside the PSI intersection (for the party's own use)."""
        if party not in self.unaligned_keys:
            raise DataError(f"party {party!r} has no unaligned rows here; they exist after align='psi'")
        return self._ref(party, self.unaligned_keys[party])

    def check_labels(self, objective: str) -> None:
        """Have the label party check that its labels suit ``objective`` (it raises DataError if not).

        With spread labels every label party checks its own labelled rows (for a binary objective:
        values 0/1); that both classes occur overall is for the parties to check among themselves.
        """
        if not self.label_parties:
            raise DataError("no party holds labels; build the dataset with label= naming the label column")
        calls = [(p, self.stores[p].check_labels.remote(self.keys[p], objective)) for p in self.label_parties]
        self.runtime.get(calls, "check labels")

    def label_classes(self) -> np.ndarray:
        """The label party's distinct label values, ascending (from its store, to its own side)."""
        if self.label_party is None:
            raise DataError("no single party holds the labels; build the dataset with label= at one party")
        p = self.label_party
        return np.asarray(self.runtime.get([(p, self.stores[p].label_classes.remote(self.keys[p]))], "label classes")[0])

    def source_reads(self) -> dict[str, list[dict]]:
        """Per party, where its store read its source (host, node, process)."""
        calls = [(p, self.stores[p].source_reads.remote()) for p in self.party_names]
        return dict(zip(self.party_names, self.runtime.get(calls, "source reads")))

    # selections -------------------------------------------------------------------
    def _schemas(self, keys: Mapping[str, str]) -> dict[str, dict]:
        calls = [(p, self.stores[p].schema.remote(keys[p])) for p in self.party_names]
        return dict(zip(self.party_names, self.runtime.get(calls, "schemas")))

    def _derived(self, keys: dict[str, str]) -> "PartyHeldDataset":
        return PartyHeldDataset(self.runtime, self.stores, keys, self._schemas(keys), self.label_party)

    def take(self, rows: np.ndarray) -> "PartyHeldDataset":
        """The rows at positions ``rows`` (of this aligned order), selected by every party in its store."""
        rows = np.asarray(rows, dtype=np.int64)
        key = f"take-{uuid.uuid4().hex[:8]}"
        self.runtime.get([(p, self.stores[p].select.remote(key, self.keys[p], rows)) for p in self.party_names],
                         "select rows")
        return self._derived({p: key for p in self.party_names})

    def train_test_split(self, test_size: float = 0.2, seed: int = 0, stratify: bool = False):
        """Seeded random split into ``(train, test)``; every party applies it to its own rows.

        The driver draws an unstratified split from the row count and ``seed`` alone. With
        ``stratify=True`` the label party draws it (keeping the class balance) and sends the test
        positions to the other parties through the metered send path: the driver learns sizes.
        Labels spread over parties cannot be stratified this way (no party sees them all).
        """
        if not 0.0 < test_size < 1.0:
            raise DataError(f"test_size must be in (0, 1), got {test_size!r}")
        if stratify and self.labels_spread:
            raise DataError(f"the labels are spread over parties {self.label_parties}: no one party can stratify "
                            "the split by label; use train_test_split(..., stratify=False)")
        tag = uuid.uuid4().hex[:8]
        keys = (f"train-{tag}", f"test-{tag}")
        if stratify and self.label_party is not None:
            lp = self.label_party
            peers = {p: self.stores[p] for p in self.party_names if p != lp}
            self.runtime.get([(lp, self.stores[lp].split_by_label.remote(self.keys[lp], keys, test_size, seed, peers))],
                             "stratified split")
        else:
            rng = np.random.default_rng(seed)
            test = np.sort(rng.choice(self.n_rows, int(round(test_size * self.n_rows)), replace=False))
            calls = [(p, self.stores[p].apply_split.remote(None, self.keys[p], keys, test)) for p in self.party_names]
            self.runtime.get(calls, "split rows")
        return (self._derived({p: keys[0] for p in self.party_names}),
                self._derived({p: keys[1] for p in self.party_names}))


def _release(stores: Mapping[str, Any], keys: Mapping[str, list[str]]) -> None:
    """Have each party drop a garbage-collected handle's tables (nothing to do once Ray is gone)."""
    import ray

    from ..runtime.waiting import settle

    if not ray.is_initialized():
        return
    for party, store in stores.items():
        try:  # nobody waits for the answer: a store gone by now has nothing to report either
            settle([store.drop.remote(keys[party])])
        except Exception:  # noqa: BLE001 - a store already killed holds nothing to drop
            log.debug("store of %s already gone", party)
