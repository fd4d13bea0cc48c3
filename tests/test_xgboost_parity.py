"""Sample weights, scale_pos_weight, weighted eval sets, feature importances and scikit-learn model
selection for the tree protocols, each against an independent reference (xgboost with sample_weight,
scikit-learn's weighted metrics, first principles)."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pandas as pd
import pytest
from sklearn.base import clone
from sklearn.metrics import log_loss, roc_auc_score
from sklearn.model_selection import GridSearchCV, cross_val_score

from ray_vfl import SecureBoostClassifier, SecureBoostRegressor, VerticalDataset, vertical_split
from ray_vfl.errors import ConfigError, DataError, SecurityWarning
from ray_vfl.pivodl import PIVODLClassifier
from ray_vfl.trees.kernels import base_margin
from ray_vfl.trees.reference import fit_reference, predict_reference
from test_kernels import assert_same_tree, tree_by_path, xgboost_comparable_data
from test_secureboost import reference_bins

xgb = pytest.importorskip("xgboost")


@pytest.fixture(autouse=True)
def _quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SecurityWarning)
        yield


@pytest.fixture(scope="module")
def comparable():
    """xgboost-comparable integer data (cut points = values), binary labels, weights in eighths (exact in
    float32 and on the gradient grid, so xgboost and the parties sum the same numbers)."""
    x, y = xgboost_comparable_data(seed=3, n=400)
    y = (y > np.median(y)).astype(float)
    w = np.random.default_rng(3).integers(1, 25, len(y)) / 8
    frame = pd.DataFrame(x, columns=[f"x{j}" for j in range(x.shape[1])]).assign(target=y)
    return x, y, w, vertical_split(frame, 2, label="target", seed=0)


def xgb_booster(x, y, w, params: dict, rounds: int = 1):
    base = {"tree_method": "hist", "max_bin": 256, "objective": "binary:logistic", "nthread": 1, "base_score": 0.5}
    return xgb.train({**base, **params}, xgb.DMatrix(x, label=y, weight=w, missing=np.nan), num_boost_round=rounds)


def xgb_first_tree(booster) -> dict:
    """xgboost's first tree as ``{path: split or leaf}`` with our threshold convention (see test_kernels)."""
    out = {}

    def walk(node, path):
        if "leaf" in node:
            out[path] = ("leaf", node["leaf"])
            return
        out[path] = ("split", int(node["split"][1:]), node["split_condition"] - 1, node["missing"] == node["yes"])
        kids = {c["nodeid"]: c for c in node["children"]}
        walk(kids[node["yes"]], path + "L")
        walk(kids[node["no"]], path + "R")

    walk(json.loads(booster.get_dump(dump_format="json")[0]), "")
    return out


def test_weighted_first_tree_and_importances_equal_xgboost(runtime, comparable, tmp_path):
    """Sample weights and scale_pos_weight: the federated first tree is xgboost's with the same weights
    (splits, thresholds, missing directions, leaf weights), and feature_importances_ by gain, cover and
    weight are xgboost's normalised scores (label party's features; each passive party its total)."""
    _, y, w, data = comparable
    params = dict(max_depth=2, eta=0.3, reg_lambda=1.0, min_child_weight=2.0, scale_pos_weight=2.0)
    stacked = pd.concat([data.features[p] for p in data.party_names], axis=1).to_numpy()  # columns in party order
    booster = xgb_booster(stacked, y, w, params)
    clf = SecureBoostClassifier(n_estimators=1, max_depth=2, learning_rate=0.3, min_child_weight=2.0, base_score=0.5,
                                scale_pos_weight=2.0, backend="plain", runtime=runtime).fit(data, sample_weight=w)
    model = clf.model_
    fed, tables = model.trees()[0], model.lookup_tables()
    offsets = np.cumsum([0] + [data.n_features(p) for p in model.order])

    def split_of(node):
        feature, _, threshold, default_left = tables[model.order[fed.owner[node]]]["rows"][fed.record[node]]
        return offsets[fed.owner[node]] + feature, threshold, default_left

    ours = tree_by_path(fed.left, fed.right, fed.weight, split_of)
    assert sum(kind == "split" for kind, *_ in ours.values()) >= 3
    assert_same_tree(ours, xgb_first_tree(booster))
    columns = [c for p in data.party_names for c in data.columns(p)]
    label_cols = data.columns(data.label_party)
    for kind in ("gain", "cover", "weight"):
        theirs = booster.get_score(importance_type=kind)
        total = sum(theirs.values())
        expect = {c: theirs.get(f"f{columns.index(c)}", 0.0) / total for c in columns}
        clf.set_params(importance_type=kind)
        got = dict(zip(columns, clf.feature_importances_))
        for c in label_cols:
            assert got[c] == pytest.approx(expect[c], rel=1e-5, abs=1e-9), (kind, c)
        for p in model.passives:
            assert all(np.isnan(got[c]) for c in data.columns(p))
            assert clf.party_importances_[p] == pytest.approx(sum(expect[c] for c in data.columns(p)), rel=1e-5)
    # a loaded model gives the same importances (its parties tell the driver their column names, not more)
    clf.save_model(str(tmp_path))
    loaded = type(clf).load_model(str(tmp_path), runtime=runtime).set_params(importance_type="weight")
    np.testing.assert_array_equal(loaded.feature_names_in_, clf.feature_names_in_)
    np.testing.assert_allclose(loaded.feature_importances_, clf.feature_importances_, equal_nan=True)


def test_weighted_trees_equal_the_weighted_reference_and_eval_metrics_are_weighted(runtime, comparable):
    """Three weighted trees (with scale_pos_weight) equal the centralized weighted boosting, split for split,
    and the weighted eval set's logloss and AUC are scikit-learn's weighted ones of the predictions."""
    x, y, w, data = comparable
    train_data, test_data = data.take(np.arange(300)), data.take(np.arange(300, 400))
    w_train, w_test = w[:300], w[300:]
    clf = SecureBoostClassifier(n_estimators=3, max_depth=3, scale_pos_weight=1.5, backend="plain", runtime=runtime)
    clf.fit(train_data, sample_weight=w_train, eval_set=[test_data], sample_weight_eval_set=[w_test])
    config = clf.model_.config
    base = float(np.average(train_data.label, weights=w_train))  # the default base score: the weighted label mean
    ref = fit_reference(reference_bins(train_data, config.max_bin), train_data.label, config, base, weight=w_train)
    for fed, r in zip(clf.model_.trees(), ref):
        np.testing.assert_array_equal(fed.left, r.left)
        np.testing.assert_array_equal(fed.weight, r.weight)
    expect = predict_reference(ref, reference_bins(test_data, config.max_bin, train_data),
                               base_margin(config.objective, base), config.max_bin)
    np.testing.assert_allclose(clf.predict_margin(test_data), expect, atol=1e-9)
    p = clf.predict_proba(test_data)[:, 1]
    last = clf.evals_result_["validation_0"][-1]
    assert last["logloss"] == pytest.approx(log_loss(test_data.label, p, sample_weight=w_test), rel=1e-9)
    assert last["auc"] == pytest.approx(roc_auc_score(test_data.label, p, sample_weight=w_test), rel=1e-9)
    assert last["auc"] != pytest.approx(roc_auc_score(test_data.label, p), rel=1e-6)  # the weights count


def test_weights_under_paillier_equal_the_plain_run(runtime, comparable):
    """Paillier 1024: weights up to 3 (the bound grows to 4, every party sees it) give the plaintext trees."""
    _, _, w, data = comparable
    small, weights = data.take(np.arange(200)), w[:200]
    kwargs = dict(n_estimators=2, max_depth=2, runtime=runtime)
    plain = SecureBoostClassifier(backend="plain", **kwargs).fit(small, sample_weight=weights)
    enc = SecureBoostClassifier(backend="paillier", key_bits=1024, allow_weak_keys=True, **kwargs)
    enc.fit(small, sample_weight=weights)
    assert enc.model_.config.gradient_bound == 4.0
    for a, b in zip(plain.model_.trees(), enc.model_.trees()):
        np.testing.assert_array_equal(a.left, b.left)
        np.testing.assert_array_equal(a.weight, b.weight)
    with pytest.raises(ConfigError, match="gradient_bound=4"):  # a bound too small for the weights, named
        SecureBoostClassifier(backend="paillier", key_bits=1024, allow_weak_keys=True, gradient_bound=1.0,
                              **kwargs).fit(small, sample_weight=weights)


def test_pivodl_weighted_at_threshold_one_is_the_weighted_centralized_boosting(runtime, comparable):
    """PIVODL with labels (and their weights) spread over 2 clients, instance threshold 1: the weighted
    centralized boosting's predictions; each client weighs its own rows, the base score is the weighted mean,
    and a weighted eval set's logloss is scikit-learn's weighted one."""
    _, _, w, data = comparable
    owner = np.where(np.arange(data.n_rows) % 3 == 0, "party0", "party1")
    spread = VerticalDataset(data.features, data.ids, data.label, label_owner=owner)
    clf = PIVODLClassifier(n_estimators=2, max_depth=3, backend="plain", instance_threshold=1, runtime=runtime)
    clf.fit(spread, sample_weight=w, eval_set=[spread], sample_weight_eval_set=[w])
    config = clf.model_.config
    base = float(np.average(data.label, weights=w))
    ref = fit_reference(reference_bins(data, config.max_bin), data.label, config, base, weight=w)
    expect = predict_reference(ref, reference_bins(data, config.max_bin), base_margin(config.objective, base),
                               config.max_bin)
    np.testing.assert_allclose(clf.predict_margin(spread), expect, atol=1e-6)
    p = 1 / (1 + np.exp(-expect))  # the eval set's weighted logloss, from each client's masked weighted sums
    assert clf.evals_result_["validation_0"][-1]["logloss"] == pytest.approx(
        log_loss(data.label, p, sample_weight=w), rel=1e-6)


@pytest.mark.parametrize("weights, match", [
    ([1.0] * 10, "10 weights for 400 rows"),
    (np.r_[-1.0, np.ones(399)], "negative"),
    (np.r_[np.nan, np.ones(399)], "NaN or inf"),
    (np.zeros(400), "zero for every row"),
])
def test_bad_weights_are_refused_before_training(comparable, weights, match):
    data = comparable[3]
    with pytest.raises(DataError, match=match):
        SecureBoostClassifier(backend="plain").fit(data, sample_weight=weights)
    with pytest.raises(DataError, match=match):
        PIVODLClassifier(backend="plain").fit(data, sample_weight=weights)


def test_bad_weighted_calls_are_refused(comparable):
    from ray_vfl.ssxgb import SSXGBClassifier

    data = comparable[3]
    with pytest.raises(DataError, match="one weight array"):
        SecureBoostClassifier(backend="plain").fit(data, eval_set=[data], sample_weight_eval_set=[None, None])
    with pytest.raises(DataError, match="not the data's labels"):
        SecureBoostClassifier(backend="plain").fit(data, 1 - data.label)
    with pytest.raises(ConfigError, match="SSXGB trains without sample weights"):
        SSXGBClassifier().fit(data, sample_weight=np.ones(data.n_rows))
    with pytest.raises(ConfigError, match="scale_pos_weight"):
        SecureBoostClassifier(backend="plain", scale_pos_weight=0.0).fit(data)
    with pytest.raises(ConfigError, match="importance_type"):
        SecureBoostClassifier(backend="plain", importance_type="split").fit(data)


def test_scikit_learn_clone_params_and_checks(runtime):
    """clone, get_params/set_params round trips, and the scikit-learn estimator checks that apply to a
    federated estimator (the list of those that cannot is in the README, "scikit-learn")."""
    from sklearn.utils import estimator_checks as checks

    for cls in (SecureBoostClassifier, SecureBoostRegressor, PIVODLClassifier):
        est = cls(n_estimators=3, scale_pos_weight=2.0, runtime=runtime)
        copy = clone(est)
        assert copy.get_params() == est.get_params() and copy.runtime is runtime
        assert clone(copy.set_params(max_depth=2)).get_params()["max_depth"] == 2
        name = cls.__name__
        checks.check_parameters_default_constructible(name, cls())
        checks.check_no_attributes_set_in_init(name, cls())
        checks.check_get_params_invariance(name, cls())
        checks.check_set_params(name, cls())


def test_cross_val_score_and_grid_search_over_a_vertical_dataset(runtime, comparable):
    """Folds are cut by rows of every party (VerticalDataset.take), weights follow their rows through
    sklearn's fit params; the scores are each fold's accuracy, recomputed here from predict."""
    _, _, w, data = comparable
    data, w = data.take(np.arange(240)), w[:240]
    clf = SecureBoostClassifier(n_estimators=2, max_depth=2, backend="plain", runtime=runtime)
    scores = cross_val_score(clf, data, cv=2, params={"sample_weight": w})
    assert scores.shape == (2,) and (scores > 0.6).all()
    fold = clone(clf).fit(data[np.arange(120, 240)], sample_weight=w[120:])
    test = data[np.arange(120)]
    assert scores[0] == pytest.approx(np.mean(fold.predict(test) == test.label))  # the test fold carries no weights
    search = GridSearchCV(clf, {"max_depth": [1, 3]}, cv=2).fit(data)
    assert search.best_params_["max_depth"] in (1, 3) and search.best_estimator_.n_features_in_ == 6
    assert list(search.best_estimator_.classes_) == [0, 1]


def test_each_party_dumps_its_own_trees_with_its_thresholds_on_its_node(runtime, comparable, tmp_path):
    """get_booster's federated form: every party writes its own view on its own machine; the driver gets
    paths. The label party's file has the trees (same structure and leaf weights as the model), its own
    thresholds and (party, record) for the passive party's splits; the passive file has its thresholds,
    which never appear in the label party's."""
    data = comparable[3]
    clf = SecureBoostClassifier(n_estimators=2, max_depth=3, backend="plain", runtime=runtime).fit(data)
    paths = clf.dump_model(str(tmp_path))
    assert all(isinstance(p, str) for p in paths.values())
    active, passive = (json.load(open(paths[p])) for p in (clf.model_.label_party, clf.model_.passives[0]))
    tables = clf.model_.lookup_tables()
    mine, theirs = tables[clf.model_.label_party]["rows"], tables[clf.model_.passives[0]]["rows"]
    assert [r["threshold"] for r in passive["records"]] == [row[2] for row in theirs] and theirs
    seen = {"own": 0, "other": 0}

    def walk(node, tree, i):
        if "leaf" in node:
            assert tree.left[i] < 0 and node["leaf"] == tree.weight[i]
            return
        if node["party"] == clf.model_.label_party:
            assert node["threshold"] == mine[node["record"]][2] and node["feature"] in data.columns(node["party"])
            seen["own"] += 1
        else:
            assert "threshold" not in node and "feature" not in node
            seen["other"] += 1
        walk(node["yes"], tree, int(tree.left[i]))
        walk(node["no"], tree, int(tree.right[i]))

    for node, tree in zip(active["trees"], clf.model_.trees()):
        walk(node, tree, 0)
    assert seen["own"] and seen["other"]
    weight = clf.set_params(importance_type="weight").feature_importances_
    own_cols = data.columns(clf.model_.label_party)
    counts = np.array([active["importance"]["weight"][c] for c in own_cols])
    assert weight[~np.isnan(weight)] == pytest.approx(counts / (seen["own"] + seen["other"]))
    assert sum(passive["importance"]["weight"].values()) == seen["other"]


def test_weight_column_flag_of_the_main_job(tmp_path, capsys, monkeypatch):
    """jobs/train.py --weight-column: the column leaves the features and travels with the labels (checked
    before Ray starts); a bad weight ends the job with one error line naming it."""
    from conftest import load_job

    job = load_job("train")
    rng = np.random.default_rng(0)
    frame = pd.DataFrame(rng.normal(size=(60, 3)), columns=["a", "b", "c"]).assign(
        y=rng.integers(0, 2, 60), w=rng.integers(1, 5, 60) / 2)
    path = tmp_path / "loans.csv"
    frame.to_csv(path, index=False)
    args = job.parse_args(["--dataset", str(path), "--label", "y", "--weight-column", "w", "--backend", "plain",
                           "--scale-pos-weight", "2"])
    config, cats = job.check_options(args)
    data, _ = job.local_data(args, cats)
    assert config.scale_pos_weight == 2.0
    assert all("w" not in data.columns(p) for p in data.party_names)
    np.testing.assert_array_equal(data.weights_of(data.label_party), frame["w"].to_numpy())
    assert all(data.weights_of(p) is None for p in data.party_names if p != data.label_party)

    def no_runtime(*a, **k):
        raise AssertionError("the job started a runtime for bad weights")

    monkeypatch.setattr(job, "Runtime", no_runtime)
    frame.assign(w=-frame["w"]).to_csv(path, index=False)
    with pytest.raises(SystemExit) as exit_:
        job.cli(["--dataset", str(path), "--label", "y", "--weight-column", "w", "--backend", "plain"])
    assert str(exit_.value.code).startswith("error: --weight-column 'w' must be finite and non-negative")


def test_party_held_weights_stay_in_the_label_partys_store(runtime, comparable, tmp_path):
    """from_files(..., weight="w"): the label party's store takes the column out of its features and keeps it
    with the labels; training on it grows the trees of the in-process data with the same weights. A weight
    array from the driver is refused for party-held data, naming weight=."""
    _, _, w, data = comparable
    data, w = data.take(np.arange(200)), w[:200]
    label_party, other = data.label_party, [p for p in data.party_names if p != data.label_party][0]
    ids = np.arange(200)
    data.features[label_party].assign(id=ids, target=data.label, w=w).to_csv(tmp_path / "a.csv", index=False)
    data.features[other].assign(id=ids).to_csv(tmp_path / "b.csv", index=False)
    held = VerticalDataset.from_files({label_party: str(tmp_path / "a.csv"), other: str(tmp_path / "b.csv")},
                                      id_column="id", label="target", weight="w", runtime=runtime)
    assert held.weighted and held.columns(label_party) == data.columns(label_party)
    kwargs = dict(n_estimators=2, max_depth=3, backend="plain", runtime=runtime)
    theirs = SecureBoostClassifier(**kwargs).fit(data, sample_weight=w).model_.trees()
    ours = SecureBoostClassifier(**kwargs).fit(held).model_.trees()
    for a, b in zip(ours, theirs):
        np.testing.assert_array_equal(a.left, b.left)
        np.testing.assert_array_equal(a.weight, b.weight)
    with pytest.raises(DataError, match="weight='<column of the label party>'"):
        SecureBoostClassifier(**kwargs).fit(held, sample_weight=w)


def test_pivodl_importances_equal_xgboost(runtime, comparable):
    """PIVODL at instance threshold 1 grows xgboost's weighted first tree; the first client's importances
    (total gain and weight of its own features, from its own view) and every client's total are xgboost's
    normalised scores; gain and cover, which no client holds, are refused."""
    _, y, w, data = comparable
    stacked = pd.concat([data.features[p] for p in data.party_names], axis=1).to_numpy()
    booster = xgb_booster(stacked, y, w, dict(max_depth=2, eta=0.3, min_child_weight=2.0, scale_pos_weight=2.0))
    owner = np.where(np.arange(data.n_rows) % 3 == 0, "party0", "party1")
    spread = VerticalDataset(data.features, data.ids, data.label, label_owner=owner)
    clf = PIVODLClassifier(n_estimators=1, max_depth=2, min_child_weight=2.0, base_score=0.5, scale_pos_weight=2.0,
                           backend="plain", instance_threshold=1, runtime=runtime).fit(spread, sample_weight=w)
    columns = [c for p in data.party_names for c in data.columns(p)]
    first = clf.model_.order[0]
    for kind in ("total_gain", "weight"):
        theirs = booster.get_score(importance_type=kind)
        expect = {c: theirs.get(f"f{columns.index(c)}", 0.0) / sum(theirs.values()) for c in columns}
        got = dict(zip(columns, clf.set_params(importance_type=kind).feature_importances_))
        for c in data.columns(first):
            assert got[c] == pytest.approx(expect[c], rel=1e-5, abs=1e-9), (kind, c)
        for p in data.party_names:
            assert clf.party_importances_[p] == pytest.approx(sum(expect[c] for c in data.columns(p)), rel=1e-5, abs=1e-9)
    with pytest.raises(ConfigError, match="split client only"):
        clf.set_params(importance_type="cover").feature_importances_
