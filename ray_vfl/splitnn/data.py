"""Data for split-NN experiments: the FedAds-like generator and real-data loaders.

Every loader returns a :class:`SplitNNData`: aligned training rows (both
parties), aligned test rows and, when there are any, label-party-only
training rows (the unaligned part FedAds keeps for semi-supervised work).

- :func:`make_fedads_like`: a synthetic conversion log shaped like FedAds
  (16 label-party features, 7 non-label features, discrete IDs and binned
  continuous values, rare positives, a 4-week time order with the last week as
  test, 20 % aligned / 80 % label-party-only rows), with signal on both sides
  so that VanillaVFL beats Local.
- :func:`load_credit_vfl`, :func:`load_ipinyou`, :func:`load_open_bandit`: real
  data shipped in ``ray_vfl/data/files`` (see its README).
- :func:`load_fedads`: the real FedAds files, for users who have them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import pandas as pd

from ..data.bundled import data_path
from ..data.dataset import VerticalDataset
from ..errors import DataError

__all__ = ["SplitNNData", "make_fedads_like", "load_credit_vfl", "load_ipinyou", "load_open_bandit", "load_fedads",
           "FEDADS_LABEL_COLUMNS", "FEDADS_NONLABEL_COLUMNS"]


@dataclass(frozen=True)
class SplitNNData:
    """Aligned train/test rows, and optional label-party-only training rows."""

    name: str
    train: VerticalDataset
    test: VerticalDataset
    label_only: VerticalDataset | None = None

    @property
    def label_party(self) -> str:
        return self.train.label_party

    @property
    def nonlabel_parties(self) -> list[str]:
        return [p for p in self.train.party_names if p != self.label_party]

    def local_train(self, include_unaligned: bool = False) -> VerticalDataset:
        """The label party's training rows alone (aligned, plus unaligned if asked)."""
        own = _only(self.train, self.label_party)
        if include_unaligned and self.label_only is not None:
            return _concat(own, self.label_only)
        return own

    def summary(self) -> dict:
        out = {"name": self.name, "train_rows": self.train.n_rows, "test_rows": self.test.n_rows,
               "positive_rate_train": float(np.mean(self.train.label)), "positive_rate_test": float(np.mean(self.test.label)),
               "features": {p: self.train.n_features(p) for p in self.train.party_names}}
        out["label_only_rows"] = 0 if self.label_only is None else self.label_only.n_rows
        return out


def _only(data: VerticalDataset, party: str) -> VerticalDataset:
    cats = {party: data.categorical.get(party, [])}
    return VerticalDataset({party: data.features[party]}, data.ids, data.label, party, cats)


def _concat(a: VerticalDataset, b: VerticalDataset) -> VerticalDataset:
    party = a.label_party
    frame = pd.concat([a.features[party], b.features[party]], ignore_index=True)
    return VerticalDataset({party: frame}, np.concatenate([a.ids, b.ids]), np.concatenate([a.label, b.label]), party,
                           {party: a.categorical.get(party, [])})


def _split(frame: pd.DataFrame, columns: dict[str, list[str]], label: np.ndarray, label_party: str,
           categorical: Sequence[str], rows: np.ndarray, ids: np.ndarray) -> VerticalDataset:
    cat = set(categorical)
    feats = {p: frame.iloc[rows][cols].reset_index(drop=True) for p, cols in columns.items()}
    cats = {p: [c for c in cols if c in cat] for p, cols in columns.items()}
    return VerticalDataset(feats, ids[rows], label[rows].astype(np.float64), label_party, cats)


# ---------------------------------------------------------------------------
# the FedAds-like generator
_LABEL_CAT = [f"l_i_fea_{i}" for i in range(1, 7)] + [f"l_u_fea_{i}" for i in range(1, 5)]
_LABEL_NUM = [f"l_i_fea_{i}" for i in range(7, 11)] + ["l_u_fea_5", "l_u_fea_6"]
_NONLABEL_CAT = ["f_u_fea_1", "f_u_fea_2", "f_c_fea_1", "f_c_fea_2"]
_NONLABEL_NUM = ["f_uc_fea_1", "f_uc_fea_2", "f_u_fea_3"]


def _side(rng: np.random.Generator, n: int, cat_names: list[str], num_names: list[str]) -> tuple[dict, np.ndarray]:
    """Columns of one side and their standardised contribution to the logit."""
    cols, score = {}, np.zeros(n)
    for name in cat_names:
        vocab = int(rng.integers(5, 80))
        weights = 1.0 / np.arange(1, vocab + 1) ** 1.1  # Zipf-like: a few IDs dominate, as ad/item IDs do
        codes = rng.choice(vocab, size=n, p=weights / weights.sum())
        effect = rng.normal(0.0, 1.0, vocab)
        cols[name] = codes
        score += effect[codes]
    for name in num_names:
        x = rng.lognormal(mean=rng.normal(0, 1), sigma=1.0, size=n)
        z = (np.log(x) - np.log(x).mean()) / np.log(x).std()
        cols[name] = np.round(x, 4)
        score += 1.5 * np.tanh(rng.choice([-1.0, 1.0]) * z + rng.normal(0, 0.5)) + 0.5 * (z**2 - 1) * rng.normal()
    return cols, (score - score.mean()) / score.std()


def _with_users(rng: np.random.Generator, n: int, n_users: int) -> tuple[dict, np.ndarray, np.ndarray]:
    """Non-label columns whose user features (``f_u_fea_*``) are drawn per user; returns them, their
    standardised logit contribution and each row's user."""
    weights = 1.0 / np.arange(1, n_users + 1) ** 0.8
    user = rng.choice(n_users, size=n, p=weights / weights.sum())
    per_user, s_user = _side(rng, n_users, ["f_u_fea_1", "f_u_fea_2"], ["f_u_fea_3"])
    per_row, s_row = _side(rng, n, ["f_c_fea_1", "f_c_fea_2"], ["f_uc_fea_1", "f_uc_fea_2"])
    cols = {name: np.asarray(values)[user] for name, values in per_user.items()} | per_row
    cols = {name: cols[name] for name in _NONLABEL_CAT + _NONLABEL_NUM}
    score = s_user[user] + s_row  # the user's share of the logit and the row's own
    return cols, (score - score.mean()) / score.std(), user


def make_fedads_like(
    n_rows: int = 50_000,
    positive_rate: float = 0.03,
    aligned_fraction: float = 0.2,
    nonlabel_strength: float = 1.0,
    n_days: int = 28,
    test_days: int = 7,
    label_party: str = "party0",
    nonlabel_party: str = "party1",
    seed: int = 0,
    n_users: int | None = None,
) -> SplitNNData:
    """A synthetic FedAds-like conversion log.

    Label party: 16 features (10 categorical IDs, 6 continuous); non-label
    party: 7 (4 categorical, 3 continuous). The conversion logit is a sum of
    both parties' contributions (the non-label one scaled by
    ``nonlabel_strength``), a small weekly drift and an interaction, shifted so
    that about ``positive_rate`` of rows convert. Rows are in time order over
    ``n_days`` days; the last ``test_days`` are the test set. A random
    ``aligned_fraction`` of rows is known to both parties; the rest only to
    the label party (returned as ``label_only``, training days only).

    ``n_users``: rows come from that many users (Zipf-like activity); the label party gets a ``user_id``
    column and the non-label party's user features (``f_u_fea_*``) become the user's own, drawn once per
    user, so rows of one user share part of their federated embedding (what HeuristicVFL relies on).

    Example
    -------
    >>> data = make_fedads_like(5_000, seed=0, label_party="bank", nonlabel_party="shop")
    >>> data.train.n_features("bank"), data.train.n_features("shop")
    (16, 7)
    >>> 0.01 < data.summary()["positive_rate_train"] < 0.06
    True
    """
    if not 0.0 < positive_rate < 0.5:
        raise DataError(f"positive_rate must be in (0, 0.5), got {positive_rate!r}")
    if not 0.0 < aligned_fraction <= 1.0:
        raise DataError(f"aligned_fraction must be in (0, 1], got {aligned_fraction!r}")
    if not 0 < test_days < n_days:
        raise DataError(f"test_days must be in [1, n_days), got {test_days} of {n_days}")
    if n_rows < 100:
        raise DataError(f"n_rows must be at least 100, got {n_rows}")
    rng = np.random.default_rng(seed)
    day = np.sort(rng.integers(0, n_days, size=n_rows))
    label_cols, s_label = _side(rng, n_rows, _LABEL_CAT, _LABEL_NUM)
    nonlabel_cols, s_nonlabel = _side(rng, n_rows, _NONLABEL_CAT, _NONLABEL_NUM)
    if n_users is not None:
        if isinstance(n_users, bool) or not isinstance(n_users, int) or n_users < 1:
            raise DataError(f"n_users must be a positive integer or None, got {n_users!r}")
        nonlabel_cols, s_nonlabel, user = _with_users(rng, n_rows, n_users)
    logit = 1.5 * s_label + 1.5 * nonlabel_strength * s_nonlabel + 0.3 * s_label * s_nonlabel + 0.15 * np.sin(2 * np.pi * day / 7)
    lo, hi = -20.0, 5.0
    for _ in range(60):  # intercept giving the wanted positive rate
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if np.mean(1 / (1 + np.exp(-(logit + mid)))) < positive_rate else (lo, mid)
    y = (rng.random(n_rows) < 1 / (1 + np.exp(-(logit + lo)))).astype(np.float64)
    frame = pd.DataFrame({**label_cols, **nonlabel_cols})
    columns = {label_party: _LABEL_CAT + _LABEL_NUM, nonlabel_party: _NONLABEL_CAT + _NONLABEL_NUM}
    categorical = _LABEL_CAT + _NONLABEL_CAT
    if n_users is not None:
        frame["user_id"] = user
        columns[label_party] = columns[label_party] + ["user_id"]
        categorical = categorical + ["user_id"]
    aligned = rng.random(n_rows) < aligned_fraction
    is_test = day >= n_days - test_days
    ids = np.arange(n_rows)
    train = _split(frame, columns, y, label_party, categorical, np.flatnonzero(aligned & ~is_test), ids)
    test = _split(frame, columns, y, label_party, categorical, np.flatnonzero(aligned & is_test), ids)
    rest = np.flatnonzero(~aligned & ~is_test)
    label_only = None
    if len(rest):
        label_only = _split(frame, {label_party: columns[label_party]}, y, label_party, categorical, rest, ids)
    return SplitNNData("fedads_like", train, test, label_only)


# ---------------------------------------------------------------------------
# real data: the files ship with the package (ray_vfl/data/files; $VFL_DATA_DIR or data_dir= overrides)
def _path(data_dir: str | os.PathLike | None, name: str) -> str:
    return data_path(name, data_dir)


def _time_or_random_split(n: int, test_size: float, seed: int, order: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    if not 0.0 < test_size < 1.0:
        raise DataError(f"test_size must be in (0, 1), got {test_size!r}")
    idx = np.argsort(order, kind="stable") if order is not None else np.random.default_rng(seed).permutation(n)
    cut = int(round(n * (1 - test_size)))
    return np.sort(idx[:cut]), np.sort(idx[cut:])


def load_credit_vfl(data_dir: str | os.PathLike | None = None, label_party: str = "party0", nonlabel_party: str = "party1",
                    test_size: float = 0.2, seed: int = 0) -> SplitNNData:
    """FATE's vertical split of UCI credit default: guest (label, 13 features) and host (10).

    Random ``test_size`` split (the data has no time order); every row aligned.
    """
    guest = pd.read_csv(_path(data_dir, "fate_default_credit_hetero_guest.csv.gz"))
    host = pd.read_csv(_path(data_dir, "fate_default_credit_hetero_host.csv.gz"))
    host = host.rename(columns={c: f"h_{c}" for c in host.columns if c != "id"})
    frame = guest.merge(host, on="id", how="inner", validate="one_to_one")
    if len(frame) != len(guest):
        raise DataError("guest and host credit files do not hold the same ids")
    columns = {label_party: [c for c in guest.columns if c not in ("id", "y")],
               nonlabel_party: [c for c in frame.columns if c.startswith("h_")]}
    y, ids = frame["y"].to_numpy(), frame["id"].to_numpy()
    tr, te = _time_or_random_split(len(frame), test_size, seed, None)
    return SplitNNData("credit", _split(frame, columns, y, label_party, [], tr, ids),
                       _split(frame, columns, y, label_party, [], te, ids))


IPINYOU_LABEL_FIELDS = ["adexchange", "domain", "slotid", "slotwidth", "slotheight", "slotvisibility", "slotformat",
                        "creative", "advertiser", "slotprice"]
IPINYOU_NONLABEL_FIELDS = ["weekday", "hour", "useragent", "IP", "region", "city"]


def load_ipinyou(data_dir: str | os.PathLike | None = None, label_party: str = "party0", nonlabel_party: str = "party1") -> SplitNNData:
    """iPinYou campaign 2997 click sample (0.64 % clicks), its own train/test split.

    The label party (the advertiser's side, which observes clicks) holds the
    ad-slot fields; the non-label party (the publisher/exchange side) holds the
    user and context fields. Every field is categorical.
    """
    frame = pd.read_csv(_path(data_dir, "ipinyou_2997_click_sample.csv.gz"), dtype=str, keep_default_na=False)
    y = frame["click"].astype(np.int64).to_numpy()
    columns = {label_party: IPINYOU_LABEL_FIELDS, nonlabel_party: IPINYOU_NONLABEL_FIELDS}
    cats = IPINYOU_LABEL_FIELDS + IPINYOU_NONLABEL_FIELDS
    ids = np.arange(len(frame))
    split = frame["split"].to_numpy()
    return SplitNNData("ipinyou", _split(frame, columns, y, label_party, cats, np.flatnonzero(split == "train"), ids),
                       _split(frame, columns, y, label_party, cats, np.flatnonzero(split == "test"), ids))


def load_open_bandit(data_dir: str | os.PathLike | None = None, campaign: str = "all", label_party: str = "party0",
                     nonlabel_party: str = "party1", test_size: float = 0.2) -> SplitNNData:
    """Open Bandit (ZOZOTOWN) click log of one campaign; last ``test_size`` of time as test.

    The label party (the shop, which observes clicks) holds the item side
    (item features, position); the non-label party holds the user side (user
    features and user-item affinities).
    """
    if campaign not in ("all", "men", "women"):
        raise DataError(f"campaign must be 'all', 'men' or 'women', got {campaign!r}")
    frame = pd.read_csv(_path(data_dir, f"obd_zozotown_click_{campaign}.csv.gz"))
    item = ["item_id", "position"] + [c for c in frame.columns if c.startswith("item_feature_")]
    user = [c for c in frame.columns if c.startswith(("user_feature_", "user-item_affinity_"))]
    cats = ["item_id", "position"] + [c for c in item + user if c.endswith(("feature_1", "feature_2", "feature_3"))
                                      or c.startswith("user_feature_")]
    y = frame["click"].to_numpy()
    order = pd.to_datetime(frame["timestamp"]).to_numpy()
    tr, te = _time_or_random_split(len(frame), test_size, 0, order)
    ids = np.arange(len(frame))
    columns = {label_party: item, nonlabel_party: user}
    return SplitNNData(f"open_bandit_{campaign}", _split(frame, columns, y, label_party, cats, tr, ids),
                       _split(frame, columns, y, label_party, cats, te, ids))


# FedAds' own fields (alibaba/Elastic-Federated-Learning-Solution, docs/efls-dataset/dataset.md).
FEDADS_LABEL_COLUMNS = [f"l_i_fea_{i}" for i in range(1, 11)] + [f"l_u_fea_{i}" for i in range(1, 7)]
FEDADS_NONLABEL_COLUMNS = ["f_u_fea_1", "f_u_fea_2", "f_uc_fea_1", "f_uc_fea_2", "l_c_fea", "f_c"]


def _clean_cell(series: pd.Series) -> pd.Series:
    # FedAds cells may be JSON-like lists of one hashed value, e.g. "['8734']"
    return series.astype(str).str.strip("[]'\" ")


def _read_fedads(path: str, label_party: str, nonlabel_party: str, label_cols, nonlabel_cols, label: str) -> VerticalDataset:
    try:
        frame = pd.read_csv(path, dtype=str, keep_default_na=False)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError, OSError, EOFError) as exc:
        raise DataError(f"cannot read {path!r} as a FedAds CSV file (a header line, then one click per line): {exc}") from exc
    wanted = list(label_cols) + list(nonlabel_cols or [])
    missing = [c for c in wanted + [label] if c not in frame.columns]
    if missing:
        raise DataError(f"{path!r} lacks the FedAds column(s) {missing}; its columns are {list(frame.columns)[:30]}; "
                        "pass label_columns=/nonlabel_columns=/label= if your release names them differently")
    if frame.empty:
        raise DataError(f"{path!r} holds a header but no rows")
    frame = frame[wanted + [label]].apply(_clean_cell)
    y = pd.to_numeric(frame[label], errors="coerce").to_numpy(dtype=np.float64)
    bad = ~np.isin(y, (0.0, 1.0))
    if bad.any():
        first = int(np.flatnonzero(bad)[0])
        raise DataError(f"{path!r}: the {label!r} column must hold 0/1 conversions (plain or as ['0']/['1']); "
                        f"row {first + 1} holds {frame[label].iloc[first]!r} ({int(bad.sum())} bad rows)")
    columns = {label_party: list(label_cols)}
    if nonlabel_cols:
        columns[nonlabel_party] = list(nonlabel_cols)
    return _split(frame, columns, y, label_party, wanted, np.arange(len(frame)), np.arange(len(frame)))


def load_fedads(directory: str | os.PathLike, label_party: str = "party0", nonlabel_party: str = "party1",
                label_columns: Sequence[str] = tuple(FEDADS_LABEL_COLUMNS),
                nonlabel_columns: Sequence[str] = tuple(FEDADS_NONLABEL_COLUMNS), label: str = "label") -> SplitNNData:
    """Read the real FedAds files (Tianchi dataset 148347) from ``directory``.

    Expects ``sample_train_aligned.csv``, ``sample_test.csv`` and optionally
    ``sample_train_nonaligned.csv`` (or ``sample_train_unaligned``; ``.csv``,
    ``.csv.gz`` or ``.txt``): a header line, then one click per line with a
    ``label`` column and the feature columns named in the dataset's
    documentation; cells may be plain or one-element lists such as
    ``['8734']``. Every feature is treated as a categorical ID (the release
    already bins its continuous values). Column names and the party
    assignment can be overridden when a release differs. Raises
    :class:`~ray_vfl.errors.DataError` naming the file for a missing file, an
    unreadable one, missing columns or labels other than 0/1.

    Example
    -------
    >>> data = load_fedads("/data/fedads")                    # doctest: +SKIP
    >>> data.train.n_features("party0"), data.train.n_features("party1")  # doctest: +SKIP
    (16, 6)
    """
    folder = os.fspath(directory)
    if not os.path.isdir(folder):
        raise DataError(f"FedAds folder {folder!r} does not exist; pass the folder holding sample_train_aligned.csv "
                        "and sample_test.csv (download FedAds from Tianchi, dataset 148347, and extract the archives)")

    def find(stems: Sequence[str], required: bool) -> str | None:
        for stem in stems:
            for ext in (".csv", ".csv.gz", ".txt"):
                path = os.path.join(folder, stem + ext)
                if os.path.isfile(path):
                    return path
        if required:
            hint = " (found the .tar.gz archive: extract it first)" if os.path.exists(os.path.join(folder, stems[0] + ".tar.gz")) else ""
            raise DataError(f"{stems[0]}.csv not found in {folder!r}{hint}; download FedAds from Tianchi (dataset 148347)")
        return None

    train = _read_fedads(find(["sample_train_aligned"], True), label_party, nonlabel_party, label_columns, nonlabel_columns, label)
    test = _read_fedads(find(["sample_test"], True), label_party, nonlabel_party, label_columns, nonlabel_columns, label)
    rest_path = find(["sample_train_nonaligned", "sample_train_unaligned"], False)
    rest = _read_fedads(rest_path, label_party, nonlabel_party, label_columns, (), label) if rest_path else None
    return SplitNNData("fedads", train, test, rest)
