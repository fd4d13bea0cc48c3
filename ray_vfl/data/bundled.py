"""Bundled and named datasets.

The UCI "default of credit card clients" table (Yeh & Lien 2009, CC BY 4.0;
30,000 rows, 23 features, label ``default.payment.next.month``) ships inside
the package so the default demo runs anywhere without downloads.
"""

from __future__ import annotations

import os
from importlib import resources

import numpy as np
import pandas as pd

from ..errors import DataError
from .sources import read_table

__all__ = ["load_credit", "credit_path", "load_named", "NAMED_DATASETS"]

CREDIT_LABEL = "default.payment.next.month"


def credit_path() -> str:
    """Path of the bundled credit-card default CSV (gzip)."""
    return str(resources.files("ray_vfl").joinpath("data", "uci_default_credit_card.csv.gz"))


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


def _energy(path: str) -> tuple[pd.DataFrame, str, list[str], str]:
    frame = read_table(path).drop(columns=["date"])
    return frame, "Appliances", [], "reg:squarederror"


NAMED_DATASETS = {
    "credit": "bundled UCI default of credit card clients (binary)",
    "bank": "UCI bank marketing, bank-full (binary); needs --data-dir with uci_bank_marketing_full.csv.gz",
    "energy": "UCI appliances energy (regression); needs --data-dir with uci_appliances_energy.csv.gz",
}


def load_named(name: str, data_dir: str | None = None) -> tuple[pd.DataFrame, str, list[str], str]:
    """Load a named dataset: ``(frame, label column, categorical columns, objective)``.

    ``credit`` is bundled; the others are read from ``data_dir`` (default: the
    ``VFL_DATA_DIR`` environment variable).

    Example
    -------
    >>> frame, label, categorical, objective = load_named("credit")
    >>> label, objective
    ('default.payment.next.month', 'binary:logistic')
    """
    if name == "credit":
        return load_credit().drop(columns=["ID"]), CREDIT_LABEL, [], "binary:logistic"
    files = {"bank": ("uci_bank_marketing_full.csv.gz", _bank), "energy": ("uci_appliances_energy.csv.gz", _energy)}
    if name not in files:
        raise DataError(f"unknown dataset {name!r}; choose one of {sorted(NAMED_DATASETS)} or pass a CSV/Parquet path")
    data_dir = data_dir or os.environ.get("VFL_DATA_DIR")
    fname, loader = files[name]
    if data_dir is None or not os.path.exists(os.path.join(data_dir, fname)):
        where = "no folder was given" if data_dir is None else f"{data_dir!r} does not hold it"
        raise DataError(f"dataset {name!r} is not bundled and {where}: name the folder that holds {fname!r} with "
                        "data_dir= (Python), --data-dir (jobs/train.py) or the VFL_DATA_DIR environment variable")
    return loader(os.path.join(data_dir, fname))
