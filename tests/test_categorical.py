"""Native categorical splits (issue 38, point 4): the split kernel against a brute force over category
sets, SecureBoost equal to the centralized reference split for split (category sets included) with
categorical columns at the label party and at passive parties, bank within 0.002 AUC of xgboost's
native categorical model, and the category sets kept at the party that holds the column."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from scipy import stats

from ray_vfl import BoostConfig, ConfigError, DataError, PIVODLConfig, SecureBoostClassifier, train, vertical_split
from ray_vfl.data.binning import PartyBinner
from ray_vfl.data.bundled import load_named
from ray_vfl.metrics import auc
from ray_vfl.runtime.view_table import check_views, view_table
from ray_vfl.secureboost import protocol
from ray_vfl.secureboost.views import RecordViews, recorded_view
from ray_vfl.trees.categorical import CategoricalFeatures
from ray_vfl.trees.kernels import base_margin, best_splits
from ray_vfl.trees.reference import fit_reference, predict_reference

MAPPING = {"party0": ["age", "job", "balance", "month", "housing"],  # the label party: categories of its own
           "party1": ["education", "marital", "duration", "contact", "pdays"],
           "party2": ["poutcome", "loan", "day", "campaign", "previous"]}


def _gain(gl, hl, g, h, lam):
    gr, hr = g - gl, h - hl
    return gl**2 / (hl + lam) + gr**2 / (hr + lam) - g**2 / (h + lam)


def _brute_force(G, H, k, lam, subsets):
    """The best gain over every candidate set (each with missing values on either side), first principles."""
    g, h = G.sum(), H.sum()
    best = -np.inf
    for left in subsets:
        idx = list(left)
        if not idx or len(idx) == k:
            continue
        for with_missing in (True, False):
            gl = G[idx].sum() + (G[-1] if with_missing else 0.0)
            hl = H[idx].sum() + (H[-1] if with_missing else 0.0)
            if hl > 0 and h - hl > 0:
                best = max(best, _gain(gl, hl, g, h, lam))
    return best


@pytest.mark.parametrize("k", [2, 3, 5, 7])
def test_the_kernel_finds_the_best_set_a_brute_force_finds(k):
    """Without regularisation the partition scan (categories sorted by G/H) finds the best of all 2^k sets
    (Fisher's theorem); below max_cat_to_onehot only single categories compete; with lambda, the best prefix
    of the categories sorted by their leaf weight. Every gain recomputed here from the bin sums alone."""
    rng = np.random.default_rng(k)
    n_bins = 9  # 8 category bins (k of them used) + missing
    for trial in range(40):
        G = np.zeros(n_bins)
        H = np.zeros(n_bins)
        G[:k] = rng.normal(size=k)
        H[:k] = rng.uniform(0.5, 2.0, size=k)
        G[-1], H[-1] = rng.normal() * (trial % 2), rng.uniform(0.5, 1.0) * (trial % 2)  # half the trials: missing rows
        features = CategoricalFeatures(np.array([k]), max_cat_to_onehot=1 if trial % 3 else 99)
        onehot = features.onehot()[0]
        lam = 0.0 if trial % 4 < 2 else 1.0
        choice = best_splits(G[None, None], H[None, None], lam, 0.0, features)
        if onehot:
            subsets = [(c,) for c in range(k)]
        elif lam == 0.0:
            subsets = [s for r in range(1, k) for s in itertools.combinations(range(k), r)]
        else:
            order = sorted(range(k), key=lambda c: (-G[c] / (H[c] + lam), c))
            subsets = [tuple(order[:j]) for j in range(1, k)]
        expect = _brute_force(np.r_[G[:k], G[-1]], np.r_[H[:k], H[-1]], k, lam, subsets)
        assert choice.gain[0] == pytest.approx(expect, rel=1e-9, abs=1e-12), (k, trial, onehot, lam)
        left = np.flatnonzero(choice.left_set[0])
        assert 0 < len(left) < k and left.max() < k  # a split of the categories, each side non-empty
        gl = G[left].sum() + (G[-1] if choice.default_left[0] else 0.0)
        hl = H[left].sum() + (H[-1] if choice.default_left[0] else 0.0)
        assert _gain(gl, hl, G.sum(), H.sum(), lam) == pytest.approx(choice.gain[0], rel=1e-9, abs=1e-12)


def test_max_cat_threshold_bounds_the_smaller_side():
    G = np.array([[[3.0, 2.0, 1.0, -1.0, -2.0, -3.0, 0.0]]])  # six categories, weights ascending by bin
    H = np.ones_like(G)
    free = best_splits(G, H, 1.0, 0.0, CategoricalFeatures(np.array([6])))
    assert free.left_set[0].sum() == 3  # the best cut parts the six in halves
    bound = best_splits(G, H, 1.0, 0.0, CategoricalFeatures(np.array([6]), max_cat_threshold=2))
    assert min(bound.left_set[0].sum(), 6 - bound.left_set[0].sum()) == 2


def test_config_and_data_errors_name_the_fix():
    with pytest.raises(ConfigError, match="one_output_per_tree"):
        BoostConfig(objective="multi:softprob", num_class=3, multi_strategy="multi_output_tree", enable_categorical=True)
    assert PIVODLConfig(enable_categorical=True).enable_categorical  # PIVODL splits natively too (test_pivodl_categorical.py)
    with pytest.raises(ConfigError, match="max_cat_to_onehot"):
        BoostConfig(max_cat_to_onehot=0)
    frame = load_named("bank")[0]
    frame = frame.assign(code=np.arange(len(frame)) % 40).astype({"code": str})
    with pytest.raises(DataError, match="'code' holds 40 categories, more than max_bin=32"):
        PartyBinner(32, native_categorical=True).fit(frame[["code"]], ["code"], "shop")


def test_category_bins_are_numbered_in_an_order_from_os_entropy():
    """The label party sees a categorical split as a set of bins: which category a bin is must be
    independent of the category (a uniform position over fits), which a sorted code book fails."""
    column = np.array(["a", "b", "c", "d", "e"] * 4)
    import pandas as pd

    frame = pd.DataFrame({"city": column})
    positions = [PartyBinner(8, native_categorical=True).fit(frame, ["city"]).categories["city"].index("c")
                 for _ in range(300)]
    counts = np.bincount(positions, minlength=5)
    assert stats.chisquare(counts).pvalue > 1e-4
    sorted_book = [PartyBinner(8).fit(frame, ["city"]).categories["city"].index("c") for _ in range(300)]
    assert stats.chisquare(np.bincount(sorted_book, minlength=5)).pvalue < 1e-6  # the leaky order fails


def _party_bins(runtime, model, data, fitted_on):
    """The parties' own bins (their code books: fetched for the test, never for the driver's protocol)."""
    parts = runtime.get([(p, model._handle(p).model_part.remote()) for p in model.order], "binners")
    blocks, n_categories = [], []
    for p, part in zip(model.order, parts):
        binner = PartyBinner.from_dict(part["binner"])
        blocks.append(binner.transform(data.features[p], p))
        n_categories.append(binner.n_categories())
    return np.concatenate(blocks, axis=1), np.concatenate(n_categories), parts


@pytest.fixture(scope="module")
def bank_split():
    frame, label, cats, _ = load_named("bank")
    frame = frame.sample(2500, random_state=3)[sum(MAPPING.values(), []) + [label]]
    data = vertical_split(frame, MAPPING, label=label, categorical=[c for c in cats if c in frame.columns])
    return data.train_test_split(0.2, seed=1)


def test_secureboost_equals_the_reference_set_for_set(runtime, bank_split):
    """Paillier, 3 parties, categorical columns at all three (one-hot and partition splits): every tree
    equals the centralized reference on the parties' bins, split for split and set for set; the views
    recorded equal the protocol's table; no category value reaches another party."""
    train_data, test_data = bank_split
    config = BoostConfig(n_trees=2, max_depth=3, max_bin=16, backend="paillier", key_bits=1024,
                         allow_weak_keys=True, enable_categorical=True)
    model = train(runtime, train_data, config, callbacks=[RecordViews(runtime, train_data.party_names)])
    bins, n_categories, parts = _party_bins(runtime, model, train_data, train_data)
    y = train_data.label
    base = float(np.clip(y.mean(), 1e-6, 1 - 1e-6))
    ref = fit_reference(bins, y, config, base, n_categories=n_categories)
    offsets = np.cumsum([0] + [train_data.n_features(p) for p in model.order])
    kinds = set()
    for fed, r in zip(model.trees(), ref):
        np.testing.assert_array_equal(fed.left, r.left)
        np.testing.assert_array_equal(fed.weight, r.weight)
        for node in np.flatnonzero(fed.left >= 0):
            owner = int(fed.owner[node])
            row = parts[owner]["lookup"]["rows"][fed.record[node]]
            assert (offsets[owner] + row[0], row[3]) == (r.feature[node], r.default_left[node]), f"node {node}"
            if len(row) > 4:
                kinds.add(("category set", owner > 0))
                np.testing.assert_array_equal(row[4], np.flatnonzero(r.left_set[node]))
            else:
                assert r.left_set is None or not r.left_set[node].any()
                assert row[1] == r.bin[node]
    assert kinds == {("category set", False), ("category set", True)}  # at the label party and at a passive one
    test_bins = _party_bins(runtime, model, test_data, train_data)[0]
    expect = predict_reference(ref, test_bins, base_margin(config.objective, base), config.max_bin)
    np.testing.assert_allclose(model.predict_margin(test_data), expect, atol=1e-6)
    # the messages equal the table; no party received another's category values
    roles = {"party0": "active", "party1": "passive", "party2": "passive", "caller": "caller"}
    records = runtime.get([(p, runtime.actor(p).comm_records.remote()) for p in model.order], "records")
    model.comm_stats.extend(r for party_records in records for r in party_records)  # the prediction's messages
    assert check_views(view_table(protocol.__doc__), model.comm_stats.records, roles) == []
    for p in model.order:
        received = repr([e.payload for e in recorded_view(runtime, p).events if e.way == "in"])
        for q, part in zip(model.order, parts):
            if q != p:
                for book in part["binner"]["categories"].values():
                    assert not any(f"'{v}'" in received for v in book), (p, q)


def test_bank_within_0_002_auc_of_xgboost_native_categorical():
    """The centralized trainer the federated one equals (test above), on all of bank: native categorical
    splits against xgboost's (hist, the same trees, depth, bins), and the ordinal codes as a floor."""
    xgb = pytest.importorskip("xgboost")
    frame, label, cats, _ = load_named("bank")
    rng = np.random.default_rng(0)
    idx = rng.permutation(len(frame))
    cut = int(0.8 * len(frame))
    x = frame.drop(columns=[label])
    y = frame[label].to_numpy(dtype=np.float64)
    scores = {}
    for native in (False, True):
        config = BoostConfig(n_trees=10, max_depth=5, backend="plain", enable_categorical=native)
        binner = PartyBinner(config.max_bin, native).fit(x.iloc[idx[:cut]], cats, "all")
        base = float(y[idx[:cut]].mean())
        trees = fit_reference(binner.transform(x.iloc[idx[:cut]]), y[idx[:cut]], config, base,
                              n_categories=binner.n_categories())
        margin = predict_reference(trees, binner.transform(x.iloc[idx[cut:]]), base_margin(config.objective, base),
                                   config.max_bin)
        scores[native] = auc(y[idx[cut:]], margin)
    xc = x.astype({c: "category" for c in cats})
    params = {"objective": "binary:logistic", "tree_method": "hist", "max_depth": 5, "eta": 0.3, "lambda": 1.0,
              "max_bin": 32, "min_child_weight": 1.0, "max_cat_to_onehot": 4, "seed": 0, "nthread": 2}
    booster = xgb.train(params, xgb.DMatrix(xc.iloc[idx[:cut]], label=y[idx[:cut]], enable_categorical=True), 10)
    reference = auc(y[idx[cut:]], booster.predict(xgb.DMatrix(xc.iloc[idx[cut:]], enable_categorical=True)))
    assert abs(scores[True] - reference) <= 0.002, (scores, reference)
    assert scores[True] > scores[False] + 0.004  # the ordinal codes lose what the sets keep


def test_estimator_dumps_category_sets_at_their_party(runtime, bank_split, tmp_path):
    """The scikit-learn estimator takes enable_categorical; each party's dump names the categories its
    splits send left (its own values), the label party's holds no passive party's categories."""
    import json

    train_data, test_data = bank_split
    clf = SecureBoostClassifier(n_estimators=2, max_depth=3, max_bin=16, backend="plain", enable_categorical=True,
                                max_cat_to_onehot=3, runtime=runtime).fit(train_data)
    assert clf.get_params()["max_cat_to_onehot"] == 3
    paths = clf.dump_model(str(tmp_path))
    views = {p: json.load(open(path)) for p, path in paths.items()}
    sets = [r for v in views.values() for r in v["records"] if "categories_left" in r]
    assert sets and all(isinstance(c, str) for r in sets for c in r["categories_left"])
    assert 0.5 < auc(test_data.label, clf.predict_proba(test_data)[:, 1]) <= 1.0
