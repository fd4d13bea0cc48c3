"""Vertical datasets, binning and configuration: good input works, bad input says how to fix it."""

import numpy as np
import pandas as pd
import pytest

from ray_vfl import BoostConfig, ConfigError, DataError, VerticalDataset, vertical_split
from ray_vfl.data.binning import PartyBinner


def frames(n=6):
    bank = pd.DataFrame({"id": range(n), "income": np.arange(n, dtype=float), "y": [0, 1] * (n // 2)})
    shop = pd.DataFrame({"id": range(n), "spend": np.arange(n, dtype=float)[::-1], "city": ["a", "b", "c"] * (n // 3)})
    return bank, shop


def test_from_frames_builds_aligned_blocks():
    bank, shop = frames()
    data = VerticalDataset.from_frames({"bank": bank, "shop": shop}, id_column="id", label="y", categorical={"shop": ["city"]})
    assert data.label_party == "bank" and data.n_rows == 6
    assert list(data.features["bank"].columns) == ["income"]
    assert list(data.features["shop"].columns) == ["spend", "city"]
    np.testing.assert_array_equal(data.label, [0, 1, 0, 1, 0, 1])


def test_from_frames_accepts_pyarrow_tables():
    import pyarrow as pa

    bank, shop = frames()
    data = VerticalDataset.from_frames({"bank": pa.Table.from_pandas(bank), "shop": pa.Table.from_pandas(shop)},
                                       id_column="id", label="y", categorical={"shop": ["city"]})
    assert data.n_features("shop") == 2


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda b, s: (b, s.iloc[::-1]), "different order"),
        (lambda b, s: (b, s.iloc[:-1]), "ID sets differ"),
        (lambda b, s: (pd.concat([b, b.iloc[:1]]), s), "duplicate ID"),
        (lambda b, s: (b.assign(y=[0, 1, np.nan, 1, 0, 1]), s), "NaN or inf"),
        (lambda b, s: (b.assign(y=[0, 1, np.inf, 1, 0, 1]), s), "NaN or inf"),
        (lambda b, s: (b, s[["id"]]), "no feature columns"),
        (lambda b, s: (b.drop(columns="y"), s), "no party holds the label"),
        (lambda b, s: (b.drop(columns="id"), s), "no ID column"),
    ],
)
def test_bad_frames_raise_clear_errors(mutate, message):
    bank, shop = mutate(*frames())
    with pytest.raises(DataError, match=message):
        VerticalDataset.from_frames({"bank": bank, "shop": shop}, id_column="id", label="y", categorical={"shop": ["city"]})


def test_binary_labels_must_be_zero_one():
    bank, shop = frames()
    data = VerticalDataset.from_frames({"bank": bank.assign(y=[0, 2, 0, 2, 0, 2]), "shop": shop}, id_column="id", label="y",
                                       categorical={"shop": ["city"]})
    with pytest.raises(DataError, match="0 or 1"):
        data.check_labels("binary:logistic")
    data.check_labels("reg:squarederror")


def test_non_numeric_column_needs_an_encoding():
    _, shop = frames()
    with pytest.raises(DataError, match="categorical="):
        PartyBinner(8).fit(shop.drop(columns="id"), party="shop")


def test_binner_quantiles_missing_bin_and_unseen_categories():
    frame = pd.DataFrame({"x": np.r_[np.arange(100.0), [np.nan]], "c": ["u", "v"] * 50 + [None]})
    binner = PartyBinner(max_bin=8)
    bins = binner.fit_transform(frame, ["c"], "p")
    assert bins[:, 0].max() <= 8 and bins[-1, 0] == 8 and bins[-1, 1] == 8
    assert len(np.unique(bins[:-1, 0])) == 8  # eight quantile bins for 100 distinct values
    # x <= threshold(f, b) exactly for rows with bin <= b
    for b in range(7):
        np.testing.assert_array_equal(bins[:-1, 0] <= b, frame.x[:-1] <= binner.threshold(0, b))
    new = binner.transform(pd.DataFrame({"x": [5.0], "c": ["w"]}), "p")
    assert new[0, 1] == 8  # unseen category is missing
    restored = PartyBinner.from_dict(binner.to_dict())
    np.testing.assert_array_equal(restored.transform(frame, "p"), bins)


def test_vertical_split_even_and_explicit():
    frame = pd.DataFrame({f"f{i}": np.arange(4.0) for i in range(7)} | {"y": [0, 1, 0, 1]})
    data = vertical_split(frame, 3, label="y", seed=1)
    assert data.party_names == ["party0", "party1", "party2"]
    assert sorted(c for f in data.features.values() for c in f.columns) == [f"f{i}" for i in range(7)]
    assert [f.shape[1] for f in data.features.values()] == [3, 2, 2]
    assert vertical_split(frame, 3, label="y", seed=1).features["party1"].columns.tolist() == data.features["party1"].columns.tolist()
    with pytest.raises(DataError, match="given to no party"):
        vertical_split(frame, {"a": ["f0"], "b": ["f1"]}, label="y")
    with pytest.raises(DataError, match="both"):
        vertical_split(frame, {"a": ["f0", "f1"], "b": ["f1", "f2", "f3", "f4", "f5", "f6"]}, label="y")


def test_train_test_split_is_seeded_and_disjoint():
    frame = pd.DataFrame({"a": np.arange(100.0), "b": np.arange(100.0), "y": [0, 1] * 50})
    data = vertical_split(frame, 2, label="y")
    tr1, te1 = data.train_test_split(0.2, seed=3)
    tr2, te2 = data.train_test_split(0.2, seed=3)
    np.testing.assert_array_equal(te1.ids, te2.ids)
    assert len(te1.ids) == 20 and not set(tr1.ids) & set(te1.ids)
    _, strat = data.train_test_split(0.2, seed=0, stratify=True)
    assert strat.label.mean() == 0.5


@pytest.mark.parametrize(
    "field, value",
    [("n_trees", 0), ("max_depth", 0), ("max_depth", 17), ("learning_rate", 0.0), ("learning_rate", 1.5),
     ("reg_lambda", -1.0), ("gamma", -0.1), ("min_child_weight", -1.0), ("max_bin", 1), ("max_bin", 256),
     ("objective", "multi:softmax"), ("base_score", 1.0), ("key_bits", 512), ("timeout_s", 0.0), ("n_trees", 2.5)],
)
def test_out_of_range_hyper_parameters(field, value):
    with pytest.raises(ConfigError, match=field):
        BoostConfig(**{field: value})


def test_unknown_parameter_is_an_error():
    with pytest.raises(ConfigError, match="unknown BoostConfig parameter"):
        BoostConfig.from_dict({"max_dpeth": 3})


def test_every_public_name_has_a_docstring_example():
    """Issue 2, point 10: each name exported from ``ray_vfl`` shows how it is used."""
    import inspect

    import ray_vfl

    missing = [name for name in ray_vfl.__all__ if ">>>" not in (inspect.getdoc(getattr(ray_vfl, name)) or "")]
    assert not missing, f"public names without a docstring example: {missing}"
