"""Where a party's table lives, and reading it: on that party's own nodes, never in the driver.

A :class:`PartySource` is a description (a path or a query, the ID, label and
categorical columns), small enough to hand to the coordinator. Only
:meth:`PartySource.read`, which runs inside the party's own actor
(:mod:`ray_vfl.data.store`), touches the data. Supported sources:

- a CSV (optionally gzip-compressed), TSV or Parquet file;
- a folder of Parquet files, partitioned or not (read as one ``pyarrow`` dataset, Hive partitions
  becoming columns);
- an SQL query through a standard Python DB-API driver: ``sqlite:///path.db`` (the standard
  library's ``sqlite3``), ``duckdb:///path.duckdb`` (``duckdb``, read-only), or any SQLAlchemy URL
  (``postgresql://...``) when ``sqlalchemy`` is installed.
"""

from __future__ import annotations

import os
import sqlite3
from dataclasses import dataclass, field
from typing import Sequence

import pandas as pd

from ..errors import DataError

__all__ = ["PartySource", "as_frame", "read_table"]

_TABLE_SUFFIXES = (".parquet", ".pq", ".csv", ".csv.gz", ".txt", ".tsv")


def read_table(path: str | os.PathLike) -> pd.DataFrame:
    """Read a CSV (optionally gzip-compressed), TSV or Parquet file, or a folder of Parquet files.

    Raises :class:`~ray_vfl.errors.DataError` for a missing path, another extension, a file that
    cannot be parsed, an empty file, or a table with a header but no rows.

    Example
    -------
    >>> import os, tempfile
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     path = os.path.join(folder, "bank.csv")
    ...     pd.DataFrame({"id": [1, 2], "income": [3.5, 4.0]}).to_csv(path, index=False)
    ...     read_table(path).shape
    (2, 2)
    """
    path = os.fspath(path)
    if not os.path.exists(path):
        raise DataError(f"data file {path!r} does not exist on this node ({os.uname().nodename})")
    if os.path.isdir(path):
        import pyarrow.dataset as ds

        try:
            return ds.dataset(path, format="parquet", partitioning="hive").to_table().to_pandas()
        except Exception as exc:  # pyarrow names the bad file; keep its words
            raise DataError(f"cannot read the Parquet folder {path!r}: {exc}") from exc
    if not path.endswith(_TABLE_SUFFIXES):
        raise DataError(f"cannot read {path!r}: use a .csv, .csv.gz, .tsv or .parquet file, or a folder of Parquet files")
    try:
        if path.endswith((".parquet", ".pq")):
            frame = pd.read_parquet(path)
        else:
            frame = pd.read_csv(path, sep="\t" if path.endswith(".tsv") else ",")
    except pd.errors.EmptyDataError as exc:
        raise DataError(f"data file {path!r} is empty: no header and no rows; write the table with a header line") from exc
    except (pd.errors.ParserError, UnicodeDecodeError, OSError, ValueError) as exc:  # pyarrow's errors are ValueErrors
        raise DataError(f"cannot read {path!r} as a {_kind(path)} table: {type(exc).__name__}: {exc}") from exc
    if len(frame) == 0:
        raise DataError(f"data file {path!r} has a header ({len(frame.columns)} columns) but no rows")
    return frame


def _kind(path: str) -> str:
    return "Parquet" if path.endswith((".parquet", ".pq")) else "TSV" if path.endswith(".tsv") else "CSV"


def _read_sql(database: str, query: str) -> pd.DataFrame:
    """Run ``query`` on ``database`` (a URL) through its DB-API driver and return the rows."""
    scheme, sep, rest = database.partition("://")
    if not sep:
        raise DataError(f"database {database!r} is not a URL; write sqlite:///path.db, duckdb:///path.duckdb "
                        "or a SQLAlchemy URL such as postgresql://user@host/db")
    if scheme in ("sqlite", "duckdb"):
        path = rest[1:] if rest.startswith("/") else rest
        if not os.path.exists(path):
            raise DataError(f"database file {path!r} does not exist on this node ({os.uname().nodename})")
        if scheme == "sqlite":
            conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        else:
            try:
                import duckdb
            except ImportError as exc:
                raise DataError("reading a duckdb:// source needs the duckdb package: pip install duckdb") from exc
            conn = duckdb.connect(path, read_only=True)
        try:
            cursor = conn.execute(query)
            columns = [d[0] for d in cursor.description]
            return pd.DataFrame.from_records(cursor.fetchall(), columns=columns)
        except (sqlite3.Error, RuntimeError) as exc:  # duckdb's errors derive from RuntimeError
            raise DataError(f"query on {database!r} failed: {exc}") from exc
        finally:
            conn.close()
    try:
        import sqlalchemy
    except ImportError as exc:
        raise DataError(f"reading {scheme}:// needs SQLAlchemy and the database's driver: pip install sqlalchemy") from exc
    engine = sqlalchemy.create_engine(database)
    try:
        with engine.connect() as conn:
            return pd.read_sql_query(sqlalchemy.text(query), conn)
    except sqlalchemy.exc.SQLAlchemyError as exc:
        raise DataError(f"query on {scheme}:// failed: {exc}") from exc
    finally:
        engine.dispose()


@dataclass(frozen=True)
class PartySource:
    """One party's table: where it is and which columns play which role.

    Parameters
    ----------
    location : str
        A file or Parquet folder path (as the party's own nodes see it), or, with ``query``, a
        database URL.
    query : str, optional
        An SQL query to run on ``location``.
    id_column : str or None
        The column of row identifiers (needed to align parties; ``None``: rows are already aligned
        by position).
    label : str or None
        The label column, if this party holds labels.
    categorical : sequence of str
        Columns to encode as categories inside the party.

    Example
    -------
    >>> PartySource("bank.parquet", id_column="customer", label="default")          # doctest: +ELLIPSIS
    PartySource(location='bank.parquet', query=None, id_column='customer', label='default', categorical=())
    >>> PartySource.sql("sqlite:///shop.db", "SELECT id, spend FROM orders").query
    'SELECT id, spend FROM orders'
    """

    location: str
    query: str | None = None
    id_column: str | None = "id"
    label: str | None = None
    categorical: tuple[str, ...] = field(default=())

    def __post_init__(self) -> None:
        if not isinstance(self.location, (str, os.PathLike)) or not os.fspath(self.location):
            raise DataError(f"a party source needs a path or database URL, got {self.location!r}")
        object.__setattr__(self, "location", os.fspath(self.location))
        if isinstance(self.categorical, str) or not all(isinstance(c, str) for c in self.categorical):
            raise DataError(f"categorical must be a list of column names, got {self.categorical!r}")
        object.__setattr__(self, "categorical", tuple(self.categorical))
        if self.query is None and "://" in self.location:
            raise DataError(f"{self.location!r} looks like a database URL: give the SQL with PartySource.sql(url, query)")

    @classmethod
    def sql(cls, database: str, query: str, id_column: str | None = "id", label: str | None = None,
            categorical: Sequence[str] = ()) -> "PartySource":
        """A query on a database, run by the party's actor through the database's driver."""
        if not isinstance(query, str) or not query.strip():
            raise DataError(f"an SQL source needs a query, got {query!r}")
        return cls(database, query, id_column, label, tuple(categorical))

    @classmethod
    def of(cls, spec: "PartySource | str | os.PathLike", id_column: str | None = "id", label: str | None = None,
           categorical: Sequence[str] = ()) -> "PartySource":
        """``spec`` itself if it is a source, else a file source at path ``spec`` with these columns."""
        if isinstance(spec, PartySource):
            return spec
        return cls(os.fspath(spec), None, id_column, label, tuple(categorical))

    def read(self) -> pd.DataFrame:
        """Read the table (on the calling node) and check that the named columns exist."""
        frame = read_table(self.location) if self.query is None else _read_sql(self.location, self.query)
        where = self.location if self.query is None else f"the query on {self.location}"
        for role, col in (("ID", self.id_column), ("label", self.label)):
            if col is not None and col not in frame.columns:
                raise DataError(f"{where} has no {role} column {col!r}; its columns are {list(frame.columns)}")
        missing = [c for c in self.categorical if c not in frame.columns]
        if missing:
            raise DataError(f"categorical column(s) {missing} are not in {where}; its columns are {list(frame.columns)}")
        return frame


def as_frame(table, party: str) -> pd.DataFrame:
    """A party's table as a pandas DataFrame (a DataFrame, or a pyarrow Table converted)."""
    if isinstance(table, pd.DataFrame):
        return table
    try:
        import pyarrow as pa

        if isinstance(table, pa.Table):
            return table.to_pandas()
    except ImportError:  # pragma: no cover - pyarrow is a dependency
        pass
    raise DataError(f"party {party!r}: expected a pandas DataFrame or pyarrow Table, got {type(table).__name__}")
