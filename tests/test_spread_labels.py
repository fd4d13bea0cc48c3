"""Labels spread over several parties (PIVODL, issue 19 point 10): each row's label at exactly one party.

In memory: ``VerticalDataset.label_owner``, ``vertical_split(label_owners=...)``, ``from_frames`` with
the label column at several parties. Party-held: each party's own label column, missing where it does
not label the row; each party's actors receive only that party's labels.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import ray

from ray_vfl import BoostConfig, SecureBoostClassifier, VerticalDataset, vertical_split
from ray_vfl.data.party_held import PartyHeldDataset
from ray_vfl.data.sources import PartySource
from ray_vfl.errors import ConfigError, DataError
from ray_vfl.secureboost import train

N = 60


def table(n=N, seed=0):
    rng = np.random.default_rng(seed)
    return pd.DataFrame({"a": rng.random(n), "b": rng.random(n), "c": rng.random(n), "d": rng.random(n),
                         "y": np.arange(n) % 2})


COLUMNS = {"bank": ["a"], "shop": ["b", "c"], "party0": ["d"]}


def spread_frames():
    """Three party tables over IDs 10..15: bank labels rows 0-2, shop rows 3-5, party0 holds no label column."""
    ids = np.arange(10, 16)
    y = np.array([0, 1, 0, 1, 1, 0], dtype=float)
    bank = pd.DataFrame({"id": ids, "x": np.arange(6.0), "y": np.where(np.arange(6) < 3, y, np.nan)})
    shop = pd.DataFrame({"id": ids, "z": np.arange(6.0) ** 2, "y": np.where(np.arange(6) >= 3, y, np.nan)})
    other = pd.DataFrame({"id": ids, "w": -np.arange(6.0)})
    return bank, shop, other, y


# -- VerticalDataset.label_owner -------------------------------------------------------------------

def test_label_owner_gives_label_parties_and_each_partys_labels():
    data = vertical_split(table(), COLUMNS, label="y", label_owners=["shop", "bank"] * (N // 2))
    assert data.labels_spread and data.label_party is None
    assert data.label_parties == ["bank", "shop"]  # party order, party0 labels none
    for p in ("bank", "shop"):
        own = data.labels_of(p)
        assert own.dtype == np.float64 and np.array_equal(~np.isnan(own), data.label_owner == p)
        np.testing.assert_array_equal(own[data.label_owner == p], data.label[data.label_owner == p])
    assert np.isnan(data.labels_of("party0")).all()
    classic = vertical_split(table(), COLUMNS, label="y", label_party="shop")
    assert not classic.labels_spread and classic.label_parties == ["shop"] and classic.labels_of("bank") is None


@pytest.mark.parametrize("kwargs, error, message", [
    (dict(label_owner=np.array(["bank"] * 3)), DataError, "name 3 owner.*for 6 rows; give one party name per row"),
    (dict(label_owner=np.array(["bank", "nope"] * 3)), DataError, r"3 row\(s\) to parties that do not exist.*'nope'"),
    (dict(label_owner=np.array(["bank"] * 6), label_party="bank"), DataError, "not both"),
    (dict(label_owner=np.array(["bank"] * 6), label=None), DataError, "there are no labels; pass label="),
    (dict(label_owner=np.array(["bank"] * 6), label=np.array([0, 1, np.nan, 1, 0, 1.0])), DataError,
     "every row needs its label at one party"),
])
def test_label_owner_is_validated(kwargs, error, message):
    args = dict(features={"bank": pd.DataFrame({"x": range(6)}), "shop": pd.DataFrame({"z": range(6)})},
                ids=np.arange(6), label=np.array([0, 1, 0, 1, 0, 1.0]))
    with pytest.raises(error, match=message):
        VerticalDataset(**{**args, **kwargs})


@pytest.mark.parametrize("stratify", [False, True])
def test_take_and_split_keep_each_rows_owner(stratify):
    owners = np.array(["bank", "shop", "party0"] * (N // 3), dtype=object)
    data = vertical_split(table(), COLUMNS, label="y", id_column=None, label_owners=owners)
    train_part, test_part = data.train_test_split(0.25, seed=1, stratify=stratify)
    assert train_part.n_rows + test_part.n_rows == N
    for part in (train_part, test_part):
        rows = part.ids  # ids are the original row positions
        np.testing.assert_array_equal(part.label_owner, owners[rows])
        np.testing.assert_array_equal(part.label, data.label[rows])
        assert part.labels_spread and part.label_party is None
    if stratify:
        assert test_part.label.mean() == pytest.approx(data.label.mean(), abs=0.01)
    picked = data.take(np.array([5, 0]))
    assert picked.label_owner.tolist() == [owners[5], owners[0]]


def test_check_labels_checks_each_party_and_both_classes_overall():
    data = vertical_split(table(), COLUMNS, label="y", label_owners=["bank", "shop"] * (N // 2))
    data.check_labels("binary:logistic")  # bank holds only 0s, shop only 1s: fine, both occur overall
    bad = VerticalDataset(data.features, data.ids, np.where(data.label_owner == "shop", 2.0, data.label),
                          label_owner=data.label_owner)
    with pytest.raises(DataError, match="party 'shop': labels must be 0 or 1"):
        bad.check_labels("binary:logistic")
    one_class = VerticalDataset(data.features, data.ids, np.zeros(N), label_owner=data.label_owner)
    with pytest.raises(DataError, match="one class only"):
        one_class.check_labels("binary:logistic")
    one_class.check_labels("reg:squarederror")


def test_tables_give_each_partys_actor_only_its_own_labels(runtime):
    data = vertical_split(table(), COLUMNS, label="y", label_owners={"bank": 0.5, "shop": 0.5})
    refs = data.tables(runtime)

    @ray.remote(num_cpus=0)
    def what_the_party_fetches(ref):  # as the party's own actor resolves its reference
        return ref.fetch()

    got = dict(zip(refs, ray.get([what_the_party_fetches.remote(r) for r in refs.values()], timeout=120)))
    for p, (frame, label) in got.items():
        assert list(frame.columns) == COLUMNS[p]
        assert label.dtype == np.float64 and len(label) == N
        mine = data.label_owner == p
        np.testing.assert_array_equal(label[mine], data.label[mine])
        assert np.isnan(label[~mine]).all()
    assert np.isnan(got["party0"][1]).all()  # a party that labels no row: all missing
    classic = vertical_split(table(), COLUMNS, label="y")
    fetched = ray.get([what_the_party_fetches.remote(r) for r in classic.tables(runtime).values()], timeout=120)
    assert fetched[0][1].tolist() == classic.label.tolist() and fetched[1][1] is None and fetched[2][1] is None


# -- vertical_split(label_owners=...) ---------------------------------------------------------------

def test_fractions_deal_exact_counts_by_largest_remainder_with_the_seed():
    frame = table(10)
    data = vertical_split(frame, COLUMNS, label="y", label_owners={"bank": 0.45, "shop": 0.45, "party0": 0.1}, seed=3)
    counts = {p: int((data.label_owner == p).sum()) for p in COLUMNS}
    assert counts == {"bank": 5, "shop": 4, "party0": 1}  # 4.5, 4.5, 1: the spare row to the first tie
    again = vertical_split(frame, COLUMNS, label="y", label_owners={"bank": 0.45, "shop": 0.45, "party0": 0.1}, seed=3)
    np.testing.assert_array_equal(again.label_owner, data.label_owner)
    other = vertical_split(frame, COLUMNS, label="y", label_owners={"bank": 0.45, "shop": 0.45, "party0": 0.1}, seed=4)
    assert not np.array_equal(other.label_owner, data.label_owner)
    only_two = vertical_split(table(7), COLUMNS, label="y", label_owners={"bank": 1 / 3, "shop": 2 / 3})
    assert {p: int((only_two.label_owner == p).sum()) for p in COLUMNS} == {"bank": 2, "shop": 5, "party0": 0}
    assert only_two.label_parties == ["bank", "shop"]
    np.testing.assert_array_equal(only_two.label, table(7)["y"].to_numpy(float))  # labels stay in row order


@pytest.mark.parametrize("owners", [
    lambda n: ["bank", "shop"] * (n // 2),
    lambda n: np.array(["bank", "shop"] * (n // 2)),
    lambda n: pd.Series(["bank", "shop"] * (n // 2), index=np.arange(n) + 100),  # positional, not by index
])
def test_an_explicit_row_to_party_map(owners):
    data = vertical_split(table(), 2, label="y", label_owners=[p.replace("bank", "party0").replace("shop", "party1")
                                                                for p in owners(N)])
    assert data.label_owner.tolist() == ["party0", "party1"] * (N // 2)
    data = vertical_split(table(), COLUMNS, label="y", label_owners=owners(N))
    assert data.label_owner.tolist() == ["bank", "shop"] * (N // 2)


@pytest.mark.parametrize("kwargs, message", [
    (dict(label_owners={"bank": 0.5, "shop": 0.4}), "fractions sum to 0.9, not 1; give each party its share"),
    (dict(label_owners={"bank": 0.5, "shop": 0.5 + 1e-6}), "not 1"),
    (dict(label_owners={"bank": 0.5, "bonk": 0.5}), "party 'bonk', which is not one of the parties"),
    (dict(label_owners={"bank": -0.5, "shop": 1.5}), r"label_owners\['bank'\] must be a fraction in \[0, 1\]"),
    (dict(label_owners={"bank": "half", "shop": 0.5}), "must be a fraction"),
    (dict(label_owners=["bank"] * (N - 1)), f"{N - 1} owner.*for {N} rows; give one party name per row"),
    (dict(label_owners=["bank", "bonk"] * (N // 2)), "parties that do not exist, e.g. \\['bonk'\\]"),
    (dict(label_owners="bank"), "mapping party -> fraction .* or one party name per row"),
    (dict(label_owners=["bank"] * N, label_party="bank"), "not both"),
    (dict(label_owners=["bank"] * N, label=None), "name the label column too"),
])
def test_bad_label_owners_say_how_to_fix_them(kwargs, message):
    columns = {**COLUMNS, "party0": ["d", "y"]} if kwargs.get("label", "y") is None else COLUMNS
    with pytest.raises(DataError, match=message):
        vertical_split(table(), columns, **{"label": "y", **kwargs})


def test_fractions_within_1e_9_of_one_are_accepted():
    data = vertical_split(table(), COLUMNS, label="y", label_owners={"bank": 0.1, "shop": 0.2, "party0": 0.7 + 5e-10})
    assert len(data.label_owner) == N


# -- from_frames with the label column at several parties --------------------------------------------

def test_from_frames_spreads_a_label_column_held_by_several_parties():
    bank, shop, other, y = spread_frames()
    data = VerticalDataset.from_frames({"bank": bank, "shop": shop, "party0": other}, id_column="id", label="y")
    assert data.labels_spread and data.label_party is None and data.label_parties == ["bank", "shop"]
    np.testing.assert_array_equal(data.label, y)
    assert data.label_owner.tolist() == ["bank"] * 3 + ["shop"] * 3
    assert list(data.features["bank"].columns) == ["x"] and list(data.features["shop"].columns) == ["z"]
    # a party whose label column is empty (pandas reads it as object): a label party with no label
    empty = VerticalDataset.from_frames({"bank": bank.assign(y=y), "shop": shop.assign(y=[None] * 6)}, label="y")
    assert empty.label_parties == ["bank"] and empty.labels_spread
    # the classic path: one label column, or label_party naming the owner
    classic = VerticalDataset.from_frames({"bank": bank.assign(y=y), "shop": shop.drop(columns="y")}, label="y")
    assert classic.label_party == "bank" and not classic.labels_spread and classic.label_owner is None


def test_a_row_labelled_at_two_parties_or_at_none_is_refused_naming_an_id():
    bank, shop, _, _ = spread_frames()
    twice = shop.assign(y=[np.nan, 1.0, np.nan, 1.0, 1.0, 0.0])  # row id 11 labelled at bank and shop
    with pytest.raises(DataError, match=r"1 row\(s\) are labelled at more than one party: row id 11 is labelled at "
                                        "both 'bank' and 'shop'; each row's label must be at exactly one party"):
        VerticalDataset.from_frames({"bank": bank, "shop": twice}, label="y")
    nowhere = shop.assign(y=[np.nan] * 4 + [1.0, 0.0])  # row id 13 labelled nowhere
    with pytest.raises(DataError, match=r"1 row\(s\) are labelled at no party, e.g. row id 13; each row's label must "
                                        "be at exactly one party: give it to one party's label column, or drop the row"):
        VerticalDataset.from_frames({"bank": bank, "shop": nowhere}, label="y")
    with pytest.raises(DataError, match="party 'shop': 1 label.*inf"):
        VerticalDataset.from_frames({"bank": bank, "shop": shop.assign(y=[np.nan] * 3 + [np.inf, 1, 0])}, label="y")
    string_ids = {p: f.assign(id=[f"c{i}" for i in f["id"]]) for p, f in (("bank", bank), ("shop", twice))}
    with pytest.raises(DataError, match="row id 'c11' is labelled at both"):
        VerticalDataset.from_frames(string_ids, label="y")


def test_spread_labels_survive_alignment_by_psi(runtime):
    bank, shop, _, y = spread_frames()
    data = VerticalDataset.from_frames({"bank": bank.iloc[::-1], "shop": shop.iloc[1:]}, label="y", align="psi",
                                       runtime=runtime)
    assert data.ids.tolist() == [11, 12, 13, 14, 15] and data.label_owner.tolist() == ["bank"] * 2 + ["shop"] * 3
    np.testing.assert_array_equal(data.label, y[1:])


# -- SecureBoost refuses spread labels ---------------------------------------------------------------

def test_secureboost_refuses_spread_labels(runtime):
    data = vertical_split(table(), COLUMNS, label="y", label_owners={"bank": 0.5, "shop": 0.5})
    message = (r"labels are spread over parties \['bank', 'shop'\]; SecureBoost needs one label party: use PIVODL, "
               "or give all labels to one party")
    with pytest.raises(DataError, match=message):
        train(runtime, data, BoostConfig(n_trees=1, max_depth=2, backend="plain"))
    with pytest.raises(DataError, match=message):
        SecureBoostClassifier(n_estimators=1, backend="plain", runtime=runtime).fit(data)
    classic = vertical_split(table(), COLUMNS, label="y")
    with pytest.raises(DataError, match="eval set 'spread': labels are spread"):
        train(runtime, classic, BoostConfig(n_trees=1, max_depth=2, backend="plain"), eval_sets={"spread": data})


# -- party-held data -----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def spread_files(tmp_path_factory):
    """bank.csv and shop.csv each with a label column missing where the other labels; other.csv without one."""
    folder = tmp_path_factory.mktemp("spread")
    bank, shop, other, y = spread_frames()
    bank.to_csv(folder / "bank.csv", index=False)
    shop.to_csv(folder / "shop.csv", index=False)
    other.to_csv(folder / "party0.csv", index=False)
    return folder, y


def held(folder, runtime, **kwargs):
    parties = kwargs.pop("parties", ("bank", "shop", "party0"))
    return VerticalDataset.from_files({p: str(folder / f"{p}.csv") for p in parties}, id_column="id", label="y",
                                      runtime=runtime, **kwargs)


@ray.remote(num_cpus=0)
def _resolve(ref):
    """A party-side task resolving a TableRef, as the party's protocol actors do."""
    return ref.fetch()


def test_party_held_spread_labels_reach_only_their_own_party(runtime, spread_files):
    folder, y = spread_files
    received = []
    real_get = ray.get

    def recording_get(refs, *args, **kwargs):
        value = real_get(refs, *args, **kwargs)
        received.append(value)
        return value

    ray.get = recording_get
    try:
        data = held(folder, runtime)
        data.check_labels("binary:logistic")
        train_part, test_part = data.train_test_split(0.5, seed=0)
    finally:
        ray.get = real_get
    assert isinstance(data, PartyHeldDataset) and data.labels_spread and data.label_party is None
    assert data.label_parties == ["bank", "shop"] and train_part.labels_spread and test_part.label_parties == ["bank", "shop"]
    # the driver took out of Ray schemas and sizes only: no label vector, no ID, no labelled mask
    for value in received:
        for item in (value if isinstance(value, list) else [value]):
            assert not isinstance(item, (np.ndarray, pd.DataFrame, pd.Series)), item
    refs = data.tables(runtime)
    got = dict(zip(refs, real_get([_resolve.remote(r) for r in refs.values()], timeout=120)))
    owner = np.array(["bank"] * 3 + ["shop"] * 3)
    for p in ("bank", "shop"):
        frame, label = got[p]
        assert "y" not in frame.columns and "id" not in frame.columns
        np.testing.assert_array_equal(label[owner == p], y[owner == p])
        assert np.isnan(label[owner != p]).all()
    assert np.isnan(got["party0"][1]).all() and len(got["party0"][1]) == 6
    # the non-stratified split: every party applies the same rows to its features and its labels
    parts = {p: real_get(_resolve.remote(test_part.tables()[p]), timeout=120) for p in ("bank", "shop")}
    rows = np.asarray(parts["bank"][0]["x"], dtype=int)  # x is the row position
    for p in ("bank", "shop"):
        mine = owner[rows] == p
        np.testing.assert_array_equal(parts[p][1][mine], y[rows][mine])
        assert np.isnan(parts[p][1][~mine]).all()


def test_party_held_spread_labels_bad_input(runtime, spread_files, tmp_path):
    folder, _ = spread_files
    data = held(folder, runtime)
    with pytest.raises(DataError, match=r"spread over parties \['bank', 'shop'\]: no one party can stratify.*"
                                        r"stratify=False"):
        data.train_test_split(0.5, seed=0, stratify=True)
    with pytest.raises(DataError, match="several parties hold the label column.*pass labels='spread'"):
        held(folder, runtime, labels="single")
    with pytest.raises(ConfigError, match="labels must be 'auto', 'single' or 'spread'"):
        held(folder, runtime, labels="both")
    # one label party with missing labels: the classic single-owner check, naming the spread alternative
    with pytest.raises(DataError, match="party 'bank': 3 label.*NaN or inf.*give each of them the label column"):
        held(folder, runtime, parties=("bank", "party0"))
    # ... unless the labels are declared spread: bank labels half the rows, party0 none
    half = held(folder, runtime, parties=("bank", "party0"), labels="spread")
    assert half.labels_spread and half.label_parties == ["bank"] and half.label_party is None
    # a party's own labels must suit the objective; that party names itself
    pd.read_csv(folder / "shop.csv").assign(y=[np.nan] * 3 + [2.0, 1.0, 0.0]).to_csv(tmp_path / "shop.csv", index=False)
    for p in ("bank", "party0"):
        (tmp_path / f"{p}.csv").write_text((folder / f"{p}.csv").read_text())
    with pytest.raises(DataError, match="party 'shop': labels must be 0 or 1"):
        held(tmp_path, runtime).check_labels("binary:logistic")
    with pytest.raises(DataError, match="labels are spread over parties.*use PIVODL"):
        SecureBoostClassifier(n_estimators=1, backend="plain", runtime=runtime).fit(data)


def test_party_held_single_owner_path_is_unchanged(runtime, tmp_path):
    bank, shop, _, y = spread_frames()
    bank.assign(y=y).to_csv(tmp_path / "bank.csv", index=False)
    shop.drop(columns="y").to_csv(tmp_path / "shop.csv", index=False)
    data = VerticalDataset.from_files({"bank": str(tmp_path / "bank.csv"), "shop": str(tmp_path / "shop.csv")},
                                      id_column="id", label="y", runtime=runtime)
    assert data.label_party == "bank" and not data.labels_spread and data.label_parties == ["bank"]
    bank_rows, shop_rows = ray.get([_resolve.remote(r) for r in data.tables().values()], timeout=120)
    np.testing.assert_array_equal(bank_rows[1], y)
    assert shop_rows[1] is None
    data.train_test_split(0.5, seed=0, stratify=True)


def test_party_sources_naming_their_own_label_columns_align_by_psi(runtime, tmp_path):
    """Each PartySource names its own label column (other names, other ID columns); PSI keeps the common rows."""
    bank, shop, _, y = spread_frames()
    bank.rename(columns={"y": "default"}).iloc[::-1].to_csv(tmp_path / "bank.csv", index=False)
    shop.rename(columns={"id": "cid", "y": "churn"}).iloc[1:].to_csv(tmp_path / "shop.csv", index=False)
    data = VerticalDataset.from_sources({"bank": PartySource(str(tmp_path / "bank.csv"), id_column="id", label="default"),
                                         "shop": PartySource(str(tmp_path / "shop.csv"), id_column="cid", label="churn")},
                                        align="psi", runtime=runtime)
    assert data.n_rows == 5 and data.labels_spread and data.label_parties == ["bank", "shop"]
    got = dict(zip(data.party_names, ray.get([_resolve.remote(r) for r in data.tables().values()], timeout=120)))
    owner = np.array(["bank"] * 2 + ["shop"] * 3)  # IDs 11..15 in ascending order
    for p in ("bank", "shop"):
        np.testing.assert_array_equal(got[p][1][owner == p], y[1:][owner == p])
        assert np.isnan(got[p][1][owner != p]).all()
