"""Bundled and named datasets.

Every data set the jobs, tests, notebooks and benchmarks use ships inside the package
(``ray_vfl/data/files/``, about 8 MB; its README gives each file's source and licence), so a fresh
clone runs anywhere without downloads: the UCI "default of credit card clients" table (Yeh & Lien 2009,
CC BY 4.0; 30,000 rows, 23 features, label ``default.payment.next.month``), FATE's vertical split of it,
UCI bank marketing and appliances energy, 10,000 MNIST test digits and the click logs of the split-network
studies. ``$VFL_DATA_DIR``, when set, names a folder searched first (a user's own copies).
"""

from __future__ import annotations

import os
from importlib import resources
from typing import Sequence

import numpy as np
import pandas as pd

from ..errors import DataError
from .sources import read_table

__all__ = ["load_credit", "credit_path", "load_named", "data_dirs", "data_path", "BUNDLED_DIR", "synthetic", "iris_balanced", "NAMED_DATASETS"]

CREDIT_LABEL = "default.payment.next.month"


BUNDLED_DIR = str(resources.files("ray_vfl").joinpath("data", "files"))


def credit_path() -> str:
    """Path of the bundled credit-card default CSV (gzip)."""
    return os.path.join(BUNDLED_DIR, "uci_default_credit_card.csv.gz")


def load_credit() -> pd.DataFrame:
    """The bundled UCI credit-card default table (``ID`` column, 23 features, label).

    Example
    -------
    >>> frame = load_credit()
    >>> frame.shape
    (30000, 25)
    """
    return pd.read_csv(credit_path())


def _bank(path: str) -> tuple[pd.DataFrame, str, list[str], str]:
    frame = read_table(path)
    frame["y"] = (frame["y"] == "yes").astype(np.int64)
    cats = [c for c in frame.columns if c != "y" and not pd.api.types.is_numeric_dtype(frame[c])]
    return frame, "y", cats, "binary:logistic"


def _mnist(path: str) -> tuple[pd.DataFrame, str, list[str], str]:
    """MNIST test set as a binary task: digits 0-4 (0) against 5-9 (1), 784 pixel columns (0-255)."""
    frame = read_table(path)
    frame["label"] = (frame["label"] >= 5).astype(np.int64)
    return frame, "label", [], "binary:logistic"


def synthetic(rows: int, features: int = 20, seed: int = 0) -> pd.DataFrame:
    """A documented synthetic binary table for row-scaling studies: ``features`` standard-normal columns
    ``x0..``, label ``y = 1`` when ``x . w + noise > 0`` for a fixed random ``w`` (every column informs).

    Example
    -------
    >>> frame = synthetic(1000, features=4)
    >>> frame.shape, sorted(frame["y"].unique().tolist())
    ((1000, 5), [0, 1])
    """
    if not isinstance(rows, (int, np.integer)) or rows < 10:
        raise DataError(f"synthetic data needs rows >= 10, got {rows!r}")
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((int(rows), features)).astype(np.float32)
    w = np.random.default_rng(12345).standard_normal(features)
    frame = pd.DataFrame(x, columns=[f"x{i}" for i in range(features)])
    frame["y"] = (x @ w + rng.standard_normal(int(rows)) > 0).astype(np.int64)
    return frame


def iris_balanced(seed: int = 0) -> pd.DataFrame:
    """Iris (scikit-learn's bundled copy) as SSXGB's paper uses it: setosa (``y = 1``) against the rest, plus
    50 synthetic setosa rows (Gaussian per feature around the setosa mean, with its deviation, rounded to
    0.1) so both classes have 100 rows; 4 feature columns.

    Example
    -------
    >>> frame = iris_balanced()
    >>> frame.shape, int(frame["y"].sum())
    ((200, 5), 100)
    """
    from sklearn.datasets import load_iris

    data = load_iris(as_frame=True)
    x = data.data.copy()
    x.columns = ["sepal_length", "sepal_width", "petal_length", "petal_width"]
    y = (data.target == 0).astype(np.int64)
    setosa = x[y == 1]
    rng = np.random.default_rng(seed)
    synth = pd.DataFrame(rng.normal(setosa.mean(), setosa.std(), size=(50, 4)).round(1), columns=x.columns)
    frame = pd.concat([x, synth], ignore_index=True)
    frame["y"] = np.concatenate([y.to_numpy(), np.ones(50, dtype=np.int64)])
    return frame


def _energy(path: str) -> tuple[pd.DataFrame, str, list[str], str]:
    frame = read_table(path).drop(columns=["date"])
    return frame, "Appliances", [], "reg:squarederror"


NAMED_DATASETS = {
    "credit": "bundled UCI default of credit card clients (binary)",
    "bank": "UCI bank marketing, bank-full (binary); uci_bank_marketing_full.csv.gz",
    "energy": "UCI appliances energy (regression); uci_appliances_energy.csv.gz",
    "mnist": "MNIST test set, digits 0-4 vs 5-9 (binary, 784 pixels); mnist_test_10k.csv.gz",
    "iris": "Iris, setosa vs rest, plus 50 synthetic setosa rows (200 rows, 4 features; as SSXGB's paper); bundled with scikit-learn",
    "synthetic": "synthetic binary table, 20 normal columns, as many rows as asked (rows=, default 10,000)",
}
_FILES = {"bank": ("uci_bank_marketing_full.csv.gz", _bank), "energy": ("uci_appliances_energy.csv.gz", _energy),
          "mnist": ("mnist_test_10k.csv.gz", _mnist)}
_TABLE_SUFFIXES = (".csv", ".csv.gz", ".tsv", ".txt", ".parquet", ".pq")


def data_dirs() -> list[str]:
    """Folders searched for the named datasets' files, in order: ``$VFL_DATA_DIR`` if set, then the
    package's own ``data/files`` folder (every shipped data set is there).

    Example
    -------
    >>> data_dirs()[-1] == BUNDLED_DIR
    True
    """
    found = [os.environ["VFL_DATA_DIR"]] if os.environ.get("VFL_DATA_DIR") else []
    out: list[str] = []
    for folder in map(os.path.abspath, found + [BUNDLED_DIR]):
        if folder not in out:
            out.append(folder)
    return out


def data_path(filename: str, data_dir: str | os.PathLike | Sequence[str] | None = None) -> str:
    """The path of a data file: the first of ``data_dir`` (a folder, or folders tried in order; by default
    :func:`data_dirs`) that holds it. A missing file names every folder tried.

    Example
    -------
    >>> os.path.basename(data_path("uci_bank_marketing_full.csv.gz"))
    'uci_bank_marketing_full.csv.gz'
    """
    folders = [os.fspath(data_dir)] if isinstance(data_dir, (str, os.PathLike)) else list(data_dir or data_dirs())
    for folder in folders:
        if os.path.isfile(os.path.join(folder, filename)):
            return os.path.join(folder, filename)
    looked = ", ".join(repr(os.path.abspath(f)) for f in folders) or "no folder"
    raise DataError(f"data file {filename!r} is in none of the folders tried ({looked}): name the folder that holds "
                    "it with data_dir= (Python), --data-dir (jobs/train.py) or the VFL_DATA_DIR environment variable")


def load_named(name: str, data_dir: str | Sequence[str] | None = None) -> tuple[pd.DataFrame, str, list[str], str]:
    """Load a named dataset: ``(frame, label column, categorical columns, objective)``.

    ``credit`` and the files of ``bank``, ``energy`` and ``mnist`` ship with the package; ``data_dir`` (a
    folder, or folders tried in order) overrides where the files are read, by default the folders of
    :func:`data_dirs`. A missing file names every folder tried.

    Example
    -------
    >>> frame, label, categorical, objective = load_named("credit")
    >>> label, objective
    ('default.payment.next.month', 'binary:logistic')
    >>> load_named("no_such_file.csv")
    Traceback (most recent call last):
    ...
    ray_vfl.errors.DataError: data file 'no_such_file.csv' does not exist (relative paths start at ...)
    """
    if name == "credit":
        return load_credit().drop(columns=["ID"]), CREDIT_LABEL, [], "binary:logistic"
    if name == "synthetic":
        return synthetic(10_000), "y", [], "binary:logistic"
    if name == "iris":
        return iris_balanced(), "y", [], "binary:logistic"
    if name not in _FILES:
        if os.sep in name or name.lower().endswith(_TABLE_SUFFIXES) or os.path.exists(name):
            if os.path.exists(name):
                raise DataError(f"{name!r} is a file, not a named dataset: read it with read_table({name!r}) and "
                                "name its label column (jobs/train.py: --dataset PATH --label COLUMN)")
            raise DataError(f"data file {name!r} does not exist (relative paths start at {os.getcwd()!r})")
        raise DataError(f"unknown dataset {name!r}; choose one of {sorted(NAMED_DATASETS)} or pass a CSV/Parquet path")
    fname, loader = _FILES[name]
    try:
        path = data_path(fname, data_dir)
    except DataError as exc:
        raise DataError(f"dataset {name!r}: {exc}") from None
    return loader(path)
