"""Party-held data: each party's source is opened in its own store actor; the driver holds a handle."""

from __future__ import annotations

import sqlite3
import sys

import numpy as np
import pandas as pd
import pytest
import ray
from conftest import data_file

from ray_vfl import BoostConfig, SecureBoostClassifier, VerticalDataset
from ray_vfl.data.party_held import PartyHeldDataset
from ray_vfl.data.sources import PartySource
from ray_vfl.errors import DataError
from ray_vfl.secureboost import train

N = 1500


@pytest.fixture(scope="module")
def credit_parts():
    """Two party tables of the credit data: the bank with labels, the shop without; string IDs."""
    frame = pd.read_csv(data_file("uci_default_credit_card.csv.gz")).iloc[:N]
    ids = [f"cust-{i:06d}" for i in frame["ID"]]
    bank = frame[["LIMIT_BAL", "AGE", "PAY_0", "BILL_AMT1", "default.payment.next.month"]].assign(customer=ids)
    shop = frame[["PAY_AMT1", "PAY_AMT2", "BILL_AMT2", "EDUCATION"]].assign(cid=ids)
    return bank, shop


def write_sources(folder, bank, shop):
    """The bank as CSV, the shop as a partitioned Parquet folder and as tables in SQLite and DuckDB."""
    bank.to_csv(folder / "bank.csv", index=False)
    shop.assign(part=np.arange(len(shop)) % 3).to_parquet(folder / "shop", partition_cols=["part"])
    with sqlite3.connect(folder / "shop.db") as conn:
        shop.to_sql("shop", conn, index=False)
    import duckdb

    with duckdb.connect(str(folder / "shop.duckdb")) as conn:
        conn.register("frame", shop)
        conn.execute("CREATE TABLE shop AS SELECT * FROM frame")
    return folder


def fetch(data, party):
    """What a party holds, fetched here as that party's own actor would (a test's view only)."""
    return data.tables()[party].fetch()


@pytest.fixture(scope="module")
def folder(tmp_path_factory, credit_parts):
    return write_sources(tmp_path_factory.mktemp("parties"), *credit_parts)


def bank_source(folder):
    return PartySource(str(folder / "bank.csv"), id_column="customer", label="default.payment.next.month")


@pytest.mark.parametrize("shop", ["parquet folder", "sqlite", "duckdb"])
def test_each_source_kind_opens_in_its_party(runtime, folder, credit_parts, shop):
    sources = {
        "parquet folder": PartySource(str(folder / "shop"), id_column="cid"),
        "sqlite": PartySource.sql(f"sqlite:///{folder / 'shop.db'}", "SELECT * FROM shop ORDER BY cid", id_column="cid"),
        "duckdb": PartySource.sql(f"duckdb:///{folder / 'shop.duckdb'}", "SELECT * FROM shop ORDER BY cid", id_column="cid"),
    }
    data = VerticalDataset.from_sources({"bank": bank_source(folder), "shop": sources[shop]}, align="psi", runtime=runtime)
    assert isinstance(data, PartyHeldDataset) and data.n_rows == N and data.label_party == "bank"
    features, label = fetch(data, "shop")
    expected = credit_parts[1].sort_values("cid").drop(columns="cid").reset_index(drop=True)
    got = features[list(expected.columns)].astype(expected.dtypes.to_dict())
    pd.testing.assert_frame_equal(got, expected)
    assert label is None and fetch(data, "bank")[1].shape == (N,)


def test_driver_never_reads_a_party_file_nor_receives_its_rows(runtime, folder, credit_parts, monkeypatch):
    """Audited: the driver's file opens (audit hook) and every value it takes out of Ray."""
    bank, shop = credit_parts
    opened, received = [], []
    party_paths = (str(folder / "bank.csv"), str(folder / "shop"))
    active = [True]

    def hook(event, args):
        if active[0] and event == "open" and isinstance(args[0], str) and args[0].startswith(party_paths):
            opened.append(args[0])

    sys.addaudithook(hook)
    real_get = ray.get

    def recording_get(refs, *args, **kwargs):
        value = real_get(refs, *args, **kwargs)
        received.append(value)
        return value

    monkeypatch.setattr(ray, "get", recording_get)
    try:
        data = VerticalDataset.from_sources({"bank": bank_source(folder), "shop": PartySource(str(folder / "shop"), id_column="cid")},
                                            align="psi", runtime=runtime)
        train_part, test_part = data.train_test_split(0.2, seed=0, stratify=True)
        model = train(runtime, train_part, BoostConfig(n_trees=2, max_depth=3, backend="plain"))
        margin = model.predict_margin(test_part)
    finally:
        active[0] = False
        monkeypatch.undo()
    assert opened == []
    secrets = {"ids": set(bank["customer"]), "features": set(np.round(shop["PAY_AMT1"].to_numpy(), 6)) - {0.0},
               "labels": bank["default.payment.next.month"].to_numpy()}
    leaks = [leak for value in received for leak in _leaks(value, secrets)]
    assert leaks == [], leaks[:3]
    assert margin.shape == (test_part.n_rows,) and data.source_reads()["shop"][-1]["location"].endswith("shop")


def _leaks(value, secrets, depth=0):
    """Whatever in ``value`` is a party's raw ID, feature column, label vector or table."""
    if depth > 6:
        return []
    if isinstance(value, (pd.DataFrame, pd.Series)):
        return [f"a {type(value).__name__}"]
    if isinstance(value, str):
        return [value] if value in secrets["ids"] else []
    if isinstance(value, np.ndarray):
        if value.dtype == object:
            return [v for v in value.ravel().tolist() if isinstance(v, str) and v in secrets["ids"]][:1]
        if value.ndim == 1 and len(value) == len(secrets["labels"]) and np.array_equal(value, secrets["labels"]):
            return ["the label vector"]
        if value.dtype.kind == "f" and value.size > 20:
            hits = np.isin(np.round(value.ravel(), 6), list(secrets["features"])).mean()
            return [f"a feature column ({hits:.0%} of values)"] if hits > 0.5 else []
        return []
    if isinstance(value, dict):
        return [x for k, v in value.items() for x in _leaks(k, secrets, depth + 1) + _leaks(v, secrets, depth + 1)]
    if isinstance(value, (list, tuple)):
        return [x for v in value for x in _leaks(v, secrets, depth + 1)]
    return []


def held_and_local(runtime, folder, credit_parts):
    """The same rows twice: held by the parties (bank CSV, shop SQLite, aligned by PSI) and as frames
    in this process, in PSI's common order (ascending ID)."""
    bank, shop = credit_parts
    shop_sql = PartySource.sql(f"sqlite:///{folder / 'shop.db'}", "SELECT * FROM shop", id_column="cid")
    held = VerticalDataset.from_sources({"bank": bank_source(folder), "shop": shop_sql}, align="psi", runtime=runtime)
    frames = {"bank": bank.rename(columns={"customer": "id"}), "shop": shop.rename(columns={"cid": "id"})}
    local = VerticalDataset.from_frames(frames, label="default.payment.next.month")
    return held, local.take(np.argsort(local.ids))


def test_party_held_training_equals_the_simulation(runtime, folder, credit_parts):
    held, local = held_and_local(runtime, folder, credit_parts)
    held_model = SecureBoostClassifier(n_estimators=3, max_depth=3, backend="plain", runtime=runtime).fit(held)
    local_model = SecureBoostClassifier(n_estimators=3, max_depth=3, backend="plain", runtime=runtime).fit(local)
    np.testing.assert_array_equal(held_model.predict_margin(held), local_model.predict_margin(local))


def test_each_party_names_its_own_columns_and_errors_name_the_party(runtime, folder):
    shop = PartySource(str(folder / "shop"), id_column="cid", categorical=("EDUCATION",))
    data = VerticalDataset.from_sources({"bank": bank_source(folder), "shop": shop}, align="psi", runtime=runtime)
    assert data.categorical == {"shop": ["EDUCATION"]} and "cid" not in data.columns("shop")
    with pytest.raises(DataError, match="does not exist on this node"):
        VerticalDataset.from_sources({"bank": bank_source(folder), "shop": str(folder / "missing.csv")}, runtime=runtime)
    with pytest.raises(DataError, match="no ID column 'nope'"):
        VerticalDataset.from_sources({"bank": bank_source(folder), "shop": PartySource(str(folder / "shop"), id_column="nope")},
                                     runtime=runtime)
    with pytest.raises(DataError, match="query on"):
        VerticalDataset.from_sources({"bank": bank_source(folder),
                                      "shop": PartySource.sql(f"sqlite:///{folder / 'shop.db'}", "SELECT * FROM nowhere")},
                                     runtime=runtime)
    with pytest.raises(DataError, match="align='psi'"):  # different row sets without PSI
        VerticalDataset.from_sources({"bank": bank_source(folder),
                                      "shop": PartySource.sql(f"sqlite:///{folder / 'shop.db'}", "SELECT * FROM shop LIMIT 10",
                                                              id_column="cid")}, runtime=runtime)


def test_split_on_the_handle_is_applied_by_every_party(runtime, folder):
    data = VerticalDataset.from_sources({"bank": bank_source(folder), "shop": PartySource(str(folder / "shop"), id_column="cid")},
                                        align="psi", runtime=runtime)
    for stratify in (False, True):
        train_part, test_part = data.train_test_split(0.25, seed=3, stratify=stratify)
        assert train_part.n_rows + test_part.n_rows == N and test_part.n_rows == pytest.approx(N / 4, abs=2)
        ids = {p: part.tables()[p].fetch_ids() for part in (test_part,) for p in part.party_names}
        assert np.array_equal(ids["bank"], ids["shop"])  # both parties kept the same customers
    _, label = fetch(test_part, "bank")
    _, all_labels = fetch(data, "bank")
    assert label.mean() == pytest.approx(all_labels.mean(), abs=0.01)  # stratified


def test_split_nn_trains_and_is_scored_on_party_held_data(runtime, folder, credit_parts):
    """The label party scores the test rows from its own labels: the same figures as the frames path."""
    from ray_vfl.splitnn import SplitNNConfig
    from ray_vfl.splitnn import train as train_split

    held, local = held_and_local(runtime, folder, credit_parts)
    config = SplitNNConfig(batch_size=128, epochs=1)
    scores = [train_split(runtime, d, config).evaluate(d) for d in (held, local)]
    assert scores[0] == scores[1] and 0.5 < scores[0]["auc"] <= 1.0
