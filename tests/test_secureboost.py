"""SecureBoost on Ray actors: lossless, accurate, N parties, private, robust."""

import threading
import time

import numpy as np
import pandas as pd
import pytest
import ray

from ray_vfl import (
    BoostConfig,
    ConfigError,
    DataError,
    PartyFailedError,
    ProgressBar,
    Runtime,
    SecureBoostClassifier,
    SecureBoostRegressor,
    VerticalDataset,
    train,
    vertical_split,
)
from ray_vfl.data.binning import PartyBinner
from ray_vfl.data.bundled import load_named
from ray_vfl.trees.kernels import (
    base_margin,
    best_splits,
    bucket_sum,
    encoded_gradients,
    feature_keys,
    gradients,
)
from ray_vfl.trees.reference import fit_reference, predict_reference


def reference_bins(data: VerticalDataset, max_bin: int, fitted_on: VerticalDataset | None = None) -> np.ndarray:
    """Every party's own bins (fitted on the training rows), concatenated in party order."""
    fitted_on = fitted_on or data
    blocks = []
    for p in data.party_names:
        binner = PartyBinner(max_bin).fit(fitted_on.features[p], data.categorical.get(p, []), p)
        blocks.append(binner.transform(data.features[p], p))
    return np.concatenate(blocks, axis=1)


def assert_lossless(model, train_data, test_data, config):
    """Every tree equals the centralized reference on the same bins, split for split, its leaf weights
    bit for bit (every party and the reference sum the same encoded gradients)."""
    y = train_data.label
    if config.base_score is not None:
        base = config.base_score
    else:
        base = float(np.clip(y.mean(), 1e-6, 1 - 1e-6)) if config.objective == "binary:logistic" else float(y.mean())
    ref = fit_reference(reference_bins(train_data, config.max_bin), y, config, base)
    fed_trees, tables = model.trees(), model.lookup_tables()
    offsets = np.cumsum([0] + [train_data.n_features(p) for p in model.order])
    assert len(fed_trees) == len(ref) == config.n_trees
    n_splits = 0
    for fed, r in zip(fed_trees, ref):
        np.testing.assert_array_equal(fed.left, r.left)
        np.testing.assert_array_equal(fed.right, r.right)
        np.testing.assert_array_equal(fed.weight, r.weight)
        for node in np.flatnonzero(fed.left >= 0):
            owner = model.order[fed.owner[node]]
            feature, bin_index, _, default_left = tables[owner]["rows"][fed.record[node]]
            assert (offsets[fed.owner[node]] + feature, bin_index, default_left) == (
                r.feature[node], r.bin[node], r.default_left[node]), f"node {node}"
            n_splits += 1
    assert n_splits > 0
    expect = predict_reference(ref, reference_bins(test_data, config.max_bin, train_data),
                               base_margin(config.objective, base), config.max_bin)
    np.testing.assert_allclose(model.predict_margin(test_data), expect, atol=1e-6)


@pytest.fixture(scope="module")
def small_credit(credit):
    train_data, test_data = credit
    return train_data.take(np.arange(3000)), test_data.take(np.arange(1000))


def test_lossless_plain_backend(runtime, credit):
    train_data, test_data = credit
    config = BoostConfig(n_trees=4, max_depth=5, backend="plain")
    model = train(runtime, train_data, config)
    assert_lossless(model, train_data, test_data, config)


def test_lossless_paillier_backend(runtime, small_credit):
    """Lossless with and without feature groups; the groups give the same trees from fewer products."""
    train_data, test_data = small_credit
    products = {}
    for grouped in (True, False):
        config = BoostConfig(n_trees=2, max_depth=3, max_bin=16, backend="paillier", key_bits=1024, allow_weak_keys=True, group_features=grouped)
        model = train(runtime, train_data, config)
        assert_lossless(model, train_data, test_data, config)
        products[grouped] = model.op_counts["add"]
    assert products[True] < 0.8 * products[False]


@pytest.mark.parametrize("backend", ["paillier", "ou"])
def test_lossless_encrypted_three_parties(runtime, backend):
    """Two passive parties' ciphertexts decrypted in one round of tasks, every tree still lossless.

    This split has a float tie at node 2 (features 10 and 17 part the rows alike; their float gains
    differ by 1e-13): fixed-point and float sums must resolve it to the same first candidate."""
    frame, label, _, _ = load_named("credit")
    data = vertical_split(frame.iloc[:3000], 3, label=label, seed=3)
    train_data, test_data = data.train_test_split(0.25, seed=1)
    config = BoostConfig(n_trees=2, max_depth=3, max_bin=16, backend=backend, key_bits=1024, allow_weak_keys=True)
    model = train(runtime, train_data, config)
    assert_lossless(model, train_data, test_data, config)
    assert model.op_counts["decrypt"] > 0
    # the first tree's rows share two gradient pairs (one per label): OU reuses their G^m and says so
    n = len(train_data.label)
    repeated = model.op_counts.get("encrypt_repeated", 0)
    assert (n // 2 < repeated < model.op_counts["encrypt"]) if backend == "ou" else repeated == 0


def test_lossless_with_missing_values_and_categories(runtime):
    """Missing values (their own bin, a learned default direction) and categorical columns at both
    parties, under Paillier: still the centralized tree, split for split."""
    frame, label, _, _ = load_named("credit")
    frame = frame.iloc[:3000].copy()
    rng = np.random.default_rng(7)
    for column in ("LIMIT_BAL", "PAY_AMT1", "BILL_AMT2", "AGE"):
        frame.loc[rng.random(len(frame)) < 0.15, column] = np.nan
    frame["EDUCATION"] = frame["EDUCATION"].map(lambda v: f"edu{v}")
    frame["MARRIAGE"] = frame["MARRIAGE"].map(lambda v: f"m{v}")
    mapping = {"party0": ["LIMIT_BAL", "EDUCATION", "PAY_0", "PAY_2", "BILL_AMT1"],
               "party1": ["AGE", "MARRIAGE", "PAY_AMT1", "BILL_AMT2", "PAY_3", "PAY_AMT2"]}
    frame = frame[mapping["party0"] + mapping["party1"] + [label]]
    data = vertical_split(frame, mapping, label=label, categorical=["EDUCATION", "MARRIAGE"])
    train_data, test_data = data.train_test_split(0.25, seed=2)
    config = BoostConfig(n_trees=2, max_depth=4, max_bin=16, backend="paillier", key_bits=1024, allow_weak_keys=True)
    model = train(runtime, train_data, config)
    assert_lossless(model, train_data, test_data, config)
    missing_bin = config.max_bin  # the missing bin of every feature
    bins = reference_bins(train_data, config.max_bin)
    assert (bins == missing_bin).any(axis=0).sum() == 4


@pytest.mark.parametrize("n_parties", [3, 5])
def test_lossless_with_more_parties(runtime, n_parties):
    frame, label, _, _ = load_named("credit")
    data = vertical_split(frame.iloc[:4000], n_parties, label=label, seed=n_parties)
    train_data, test_data = data.train_test_split(0.25, seed=1)
    config = BoostConfig(n_trees=3, max_depth=4, backend="plain", learning_rate=0.5)
    model = train(runtime, train_data, config)
    assert model.order == [f"party{i}" for i in range(n_parties)]
    assert_lossless(model, train_data, test_data, config)


def near_tie_data(m: int = 50) -> VerticalDataset:
    """Two binary features, ``a`` at the label party and ``b`` at the passive one, whose root splits
    tie exactly on the encoded gradients but not on the float ones.

    Squared error with base score 0: each row's gradient is minus its label. Four cells of ``m`` rows,
    ``(a, b)``: gradients ``-c - d, d, 0, c`` with ``c = 2**-8`` and ``d = 2**-34``, a quarter of
    the ``2**-32`` step, so that encoding rounds the cells to ``-c, 0, 0, c``: the two splits then
    part the gradient sums alike (an exact tie, won by ``a``, the first candidate), while in floats
    ``d`` leaves ``a``'s children unchanged and widens ``b``'s (``b`` wins by 3e-8 of the gain, far
    past the 1e-9 tie margin). Float sums at the label party next to encoded ones at the passive
    party picked ``a`` where a float reference picked ``b``.
    """
    c, d = 2.0**-8, 2.0**-34
    a, b = np.repeat([0, 0, 1, 1], m), np.repeat([0, 1, 0, 1], m)
    gradient = np.repeat([-c - d, d, 0.0, c], m)
    frame = pd.DataFrame({"a": a, "b": b, "target": -gradient})
    return vertical_split(frame, {"party0": ["a"], "party1": ["b"]}, label="target")


def test_near_tie_resolves_alike_at_every_party_and_in_the_reference(runtime):
    """Root splits whose gains differ by less than the gradients' encoding error: rounded and float
    sums pick different splits, and every backend's federated tree is the centralized one, split for
    split, since every party and the reference sum the same encoded gradients."""
    data = near_tie_data()
    bins = reference_bins(data, 16)
    fkeys, n_bins = feature_keys(bins, 17), 17
    picks = {}
    for name, grad in (("float", gradients), ("encoded", encoded_gradients)):
        g, h = grad("reg:squarederror", data.label, np.zeros(len(data.label)))
        G, H = (bucket_sum(v, fkeys, 2 * n_bins).reshape(1, 2, n_bins) for v in (g, h))
        picks[name] = int(best_splits(G, H, reg_lambda=1.0, min_child_weight=1.0).feature[0])
    assert picks == {"float": 1, "encoded": 0}
    for backend in ("plain", "paillier"):
        config = BoostConfig(n_trees=2, max_depth=2, max_bin=16, objective="reg:squarederror", base_score=0.0,
                             backend=backend, key_bits=1024, allow_weak_keys=True)
        model = train(runtime, data, config)
        assert_lossless(model, data, data, config)
        assert model.trees()[0].owner[0] == 0, backend  # the root split is on the label party's feature


def test_federated_first_tree_equals_xgboost(runtime):
    """The federated plain run grows XGBoost's first tree where the cut points agree (integer
    features, fewer values than bins): the same split features, thresholds (each party's own cut
    values) and missing directions, the same leaf weights; and it is the centralized reference."""
    from test_kernels import (
        assert_same_tree,
        tree_by_path,
        xgboost_comparable_data,
        xgboost_first_tree,
    )

    x, y = xgboost_comparable_data(seed=5)
    frame = pd.DataFrame(x, columns=[f"x{j}" for j in range(x.shape[1])]).assign(target=y)
    data = vertical_split(frame, 2, label="target", seed=0)
    config = BoostConfig(n_trees=1, max_depth=3, learning_rate=0.3, objective="reg:squarederror", base_score=0.25,
                         backend="plain", max_bin=32)
    model = train(runtime, data, config)
    assert_lossless(model, data, data, config)
    fed, tables = model.trees()[0], model.lookup_tables()
    offsets = np.cumsum([0] + [data.n_features(p) for p in model.order])

    def split_of(node):
        feature, _, threshold, default_left = tables[model.order[fed.owner[node]]]["rows"][fed.record[node]]
        return offsets[fed.owner[node]] + feature, threshold, default_left

    stacked = pd.concat([data.features[p] for p in model.order], axis=1).to_numpy()
    ours = tree_by_path(fed.left, fed.right, fed.weight, split_of)
    assert sum(kind == "split" for kind, *_ in ours.values()) >= 3
    assert_same_tree(ours, xgboost_first_tree(stacked, data.label, config, 0.25))


def test_moving_the_label_party_between_fits(runtime, small_credit):
    """The same party names with the labels at another party: the runtime restarts the actors whose
    role changed, and every fit trains."""
    train_data, test_data = small_credit
    config = BoostConfig(n_trees=2, max_depth=3, backend="plain", timeout_s=60)
    for label_party in ("party1", "party0"):
        data = VerticalDataset(train_data.features, train_data.ids, train_data.label, label_party)
        model = train(runtime, data, config)
        assert model.label_party == label_party and len(model.trees()) == 2


def test_auc_matches_xgboost_on_credit(runtime, credit):
    xgb = pytest.importorskip("xgboost")
    train_data, test_data = credit

    def stacked(d):
        return pd.concat([d.features[p] for p in d.party_names], axis=1).to_numpy()

    ref = xgb.XGBClassifier(n_estimators=10, max_depth=5, learning_rate=0.3, reg_lambda=1.0, max_bin=32,
                            tree_method="hist", base_score=0.5)
    ref.fit(stacked(train_data), train_data.label)
    from ray_vfl.metrics import auc

    xgb_auc = auc(test_data.label, ref.predict_proba(stacked(test_data))[:, 1])
    clf = SecureBoostClassifier(n_estimators=10, max_depth=5, learning_rate=0.3, max_bin=32, base_score=0.5,
                                backend="plain", runtime=runtime).fit(train_data, eval_set=[test_data])
    ours = auc(test_data.label, clf.predict_proba(test_data)[:, 1])
    assert abs(ours - xgb_auc) <= 0.005, (ours, xgb_auc)
    assert clf.evals_result_["validation_0"][-1]["auc"] == pytest.approx(ours)
    assert len(clf.evals_result_["train"]) == 10
    assert set(clf.comm_stats_.by_channel()) == {"party0 -> party1", "party1 -> party0"}


def test_regressor_learns_energy(runtime):
    from conftest import data_file

    frame = pd.read_csv(data_file("uci_appliances_energy.csv.gz")).drop(columns="date").iloc[:5000]
    data = vertical_split(frame, 2, label="Appliances", seed=0)
    train_data, test_data = data.train_test_split(0.2, seed=0)
    reg = SecureBoostRegressor(n_estimators=20, max_depth=4, backend="plain", runtime=runtime).fit(train_data)
    rmse = float(np.sqrt(np.mean((reg.predict(test_data) - test_data.label) ** 2)))
    assert rmse < 0.9 * test_data.label.std()


def test_encrypted_regression_is_lossless_with_a_gradient_bound(runtime):
    """Squared error under OU, labels in the thousands: lossless once the bound covers them."""
    from conftest import data_file

    frame = pd.read_csv(data_file("uci_appliances_energy.csv.gz")).drop(columns="date").iloc[:2000]
    frame["Appliances"] = frame["Appliances"] * 1000.0  # up to ~1e6 from the mean
    data = vertical_split(frame, 2, label="Appliances", seed=0)
    train_data, test_data = data.train_test_split(0.25, seed=0)
    config = BoostConfig(n_trees=2, max_depth=3, max_bin=16, objective="reg:squarederror", backend="ou",
                         key_bits=1024, allow_weak_keys=True, gradient_bound=2.0**21)
    model = train(runtime, train_data, config)
    assert_lossless(model, train_data, test_data, config)


def test_config_gradient_bound_is_the_bound_in_force():
    """The attribute holds the bound used; a default one follows the objective, a given one stays,
    and a saved config loads equal (even one saved before the bound was resolved)."""
    logistic = BoostConfig()
    assert logistic.gradient_bound == 1.0
    squared = logistic.replace(objective="reg:squarederror")
    assert squared.gradient_bound == 2.0**16
    assert squared.replace(objective="binary:logistic").gradient_bound == 1.0
    given = BoostConfig(objective="reg:squarederror", gradient_bound=2**21)
    assert given.gradient_bound == 2.0**21
    assert given.replace(objective="binary:logistic").gradient_bound == 2.0**21
    for config in (logistic, squared, given):
        assert BoostConfig.from_dict(config.to_dict()) == config
    assert BoostConfig.from_dict({**squared.to_dict(), "gradient_bound": None}) == squared
    with pytest.raises(ConfigError, match="unknown BoostConfig parameter"):
        BoostConfig.from_dict({**logistic.to_dict(), "_derived_gradient_bound": True})


def test_save_and_load_give_the_same_predictions(runtime, credit, tmp_path):
    train_data, test_data = credit
    clf = SecureBoostClassifier(n_estimators=3, max_depth=3, backend="plain", runtime=runtime).fit(train_data)
    before = clf.predict_proba(test_data)
    clf.save_model(str(tmp_path / "model"))
    assert sorted(p.name for p in (tmp_path / "model").iterdir()) == ["federation.json", "party0.json", "party1.json"]
    loaded = SecureBoostClassifier.load_model(str(tmp_path / "model"), runtime=runtime)
    np.testing.assert_allclose(loaded.predict_proba(test_data), before, atol=1e-12)


def test_early_stopping_and_progress_bar(runtime, credit):
    import io

    train_data, test_data = credit
    stream = io.StringIO()
    clf = SecureBoostClassifier(n_estimators=40, max_depth=2, learning_rate=1.0, backend="plain", runtime=runtime,
                                early_stopping_rounds=2, callbacks=[ProgressBar(stream=stream)])
    clf.fit(train_data, eval_set=[test_data])
    aucs = [m["auc"] for m in clf.evals_result_["validation_0"]]
    assert clf.best_iteration_ == int(np.argmax(aucs)) and clf.n_trees_ == clf.best_iteration_ + 1
    assert len(aucs) < 40 and "ETA" in stream.getvalue()
    assert len(clf.model_.trees()) == clf.n_trees_


def test_a_callback_that_stops_training_keeps_the_trees_it_saw(runtime, small_credit):
    """A callback's stop ends training after the tree it saw: the model, its logs and its predictions
    are those of a fit with that many trees."""
    from ray_vfl import TrainingCallback

    class StopAfterThird(TrainingCallback):
        def after_iteration(self, iteration, logs):
            return iteration == 2

    train_data, test_data = small_credit
    stopped = SecureBoostClassifier(n_estimators=10, max_depth=3, backend="plain", runtime=runtime,
                                    callbacks=[StopAfterThird()]).fit(train_data, eval_set=[test_data])
    assert stopped.n_trees_ == len(stopped.model_.trees()) == 3
    assert len(stopped.evals_result_["train"]) == len(stopped.evals_result_["validation_0"]) == 3
    three = SecureBoostClassifier(n_estimators=3, max_depth=3, backend="plain", runtime=runtime).fit(train_data)
    np.testing.assert_array_equal(stopped.predict_proba(test_data), three.predict_proba(test_data))


def test_bad_input_is_rejected_before_training(runtime, credit):
    train_data, _ = credit
    with pytest.raises(DataError, match="0 or 1"):  # without objective=, labels 0/2 are two classes (multi:softprob)
        bad = VerticalDataset(train_data.features, train_data.ids, train_data.label * 2, "party0")
        SecureBoostClassifier(objective="binary:logistic", backend="plain", runtime=runtime).fit(bad)
    with pytest.raises(DataError, match="no party holds labels"):
        SecureBoostClassifier(backend="plain", runtime=runtime).fit(VerticalDataset(train_data.features, train_data.ids))
    with pytest.raises(ConfigError, match="key_bits"):
        SecureBoostClassifier(key_bits=512, runtime=runtime).fit(train_data)
    with pytest.raises(ConfigError, match="max_depth"):
        SecureBoostClassifier(max_depth=0, runtime=runtime).fit(train_data)
    with pytest.raises(ConfigError, match="unknown backend|valid"):
        SecureBoostClassifier(backend="rot13", runtime=runtime).fit(train_data)
    with pytest.raises(DataError, match="passive party"):
        one = VerticalDataset({"party0": train_data.features["party0"]}, train_data.ids, train_data.label, "party0")
        SecureBoostClassifier(backend="plain", runtime=runtime).fit(one)
    far = VerticalDataset(train_data.features, train_data.ids, train_data.label * 1e6, "party0")
    with pytest.raises(ConfigError, match="gradient_bound=2097152"):  # labels 0 or 1e6: gradients up to ~0.78e6
        SecureBoostRegressor(backend="paillier", runtime=runtime).fit(far)
    with pytest.raises(ConfigError, match="gradient_bound"):
        SecureBoostClassifier(gradient_bound=0.5, runtime=runtime).fit(train_data)
    infinite = train_data.features["party1"].astype(float)
    infinite.iloc[3, 0] = np.inf
    with pytest.raises(DataError, match="inf values"):
        data = VerticalDataset({"party0": train_data.features["party0"], "party1": infinite}, train_data.ids, train_data.label, "party0")
        SecureBoostClassifier(backend="paillier", key_bits=1024, allow_weak_keys=True, runtime=runtime).fit(data)
    text = train_data.features["party1"].assign(city="x")
    with pytest.raises(DataError, match="categorical"):
        data = VerticalDataset({"party0": train_data.features["party0"], "party1": text}, train_data.ids, train_data.label, "party0")
        SecureBoostClassifier(backend="plain", runtime=runtime).fit(data)


def test_killed_party_fails_fast_with_its_name(ray_session, credit):
    """A dead passive actor mid-training gives PartyFailedError, never a hang; the rest are cleaned up."""

    from ray_vfl import TrainingCallback

    train_data, _ = credit
    runtime = Runtime(timeout_s=60)
    first_tree_done = threading.Event()

    class Signal(TrainingCallback):
        def after_iteration(self, iteration, logs):
            first_tree_done.set()
            return False

    clf = SecureBoostClassifier(n_estimators=500, max_depth=5, backend="plain", runtime=runtime, callbacks=[Signal()])

    def kill_mid_training():
        if first_tree_done.wait(timeout=60):
            ray.kill(runtime.actor("party1"), no_restart=True)

    killer = threading.Thread(target=kill_mid_training)
    killer.start()
    start = time.monotonic()
    with pytest.raises(PartyFailedError) as info:
        clf.fit(train_data)
    killer.join()
    assert info.value.party == "party1" and info.value.phase.startswith("tree"), info.value
    assert time.monotonic() - start < 30
    assert runtime._actors == {}


def test_phase_timeout_raises_party_failed(ray_session, credit):
    train_data, _ = credit
    runtime = Runtime(timeout_s=60)
    with pytest.raises(PartyFailedError, match="no answer within") as info:
        SecureBoostClassifier(n_estimators=2, backend="plain", timeout_s=1e-3, runtime=runtime).fit(train_data)
    # Every party still answers probes: slow, not failed, so the federation is kept.
    assert info.value.reason == "timeout" and "busy" in str(info.value) and runtime._actors != {}
    runtime.kill_all()


def test_mask_reserve_hands_out_each_chunk_once(runtime):
    """The label party's reserve makes masks ahead of time; the supply hands each chunk out once, in order."""

    from ray_vfl.crypto import get_backend
    from ray_vfl.crypto.he.mask_reserve import MaskReserve, MaskSupply

    be = get_backend("paillier")
    pk, sk = be.generate_keys(1024, allow_weak=True)
    reserve = runtime.spawn_helper("party0", "masks", MaskReserve)
    supply = MaskSupply(reserve, chunk=5)
    ray.get(reserve.set_key.remote(("paillier", {}), sk), timeout=60)
    supply.order(12)
    assert [size for _, size in supply.pending] == [5, 5, 2]
    ray.get([ref for ref, _ in supply.pending], timeout=60)
    first, covered = supply.take(10)
    assert covered == 10 and [size for _, size in first] == [5, 5]
    rest, covered = supply.take(10)
    assert covered == 2 and supply.take(10) == ([], 0)
    masks = [ray.get(ref, timeout=60) for ref, _ in first + rest]
    rows = np.concatenate([m.data for m in masks])
    assert len({bytes(r) for r in rows}) == 12  # fresh randomness, never repeated
    g = np.linspace(-1, 1, 5)
    np.testing.assert_allclose(be.decrypt_gh(sk, be.encrypt_gh(sk, g, np.abs(g), masks=masks[0]))[0], g, atol=1e-9)
    busy = reserve.make.remote(3000)  # the reserve busy while the leftovers queue up and the drop arrives
    supply.order(500)  # a last tree's leftovers: dropped, the chunks not yet started never made
    dropped = [ref for ref, _ in supply.pending]
    supply.drop()
    assert supply.take(10) == ([], 0) and supply.ordered == 0
    made = [ray.get(ref, timeout=60) for ref in dropped]
    assert sum(m is None for m in made) > 50  # 100 chunks ordered at once: most of them skipped
    assert len(ray.get(busy, timeout=60)) == 3000
    supply.order(7)  # orders after the drop are made
    assert len(ray.get(supply.pending[-1][0], timeout=60)) == 2
    assert len(ray.get(reserve.make.remote(3, supply.epoch), timeout=60)) == 3  # the reserve still serves


def test_default_workers_follow_each_partys_nodes(runtime):
    """A party's pool defaults to the CPUs of its own nodes; passive parties sharing a node split them."""
    from ray_vfl.secureboost.protocol import _default_workers

    assert runtime.party_cpus("party0") == 2 and len(runtime.party_nodes("party0")) == 1
    assert runtime.pool("party0").workers == 2
    assert _default_workers(runtime, "party0", ["party1"]) == 2  # the active party uses every CPU
    assert _default_workers(runtime, "party1", ["party1"]) == 2
    assert _default_workers(runtime, "party1", ["party1", "party2", "party3"]) == 1


def test_the_scratch_home_of_a_local_ray_is_removed_at_exit(tmp_path):
    """ray_vfl points HOME at a scratch folder while it starts a local Ray (no cloud probes);
    that folder goes when the process ends, so runs leave nothing in the temp folder."""
    import os
    import subprocess
    import sys

    script = "from ray_vfl.runtime.local_ray import _no_phone_home\nimport os\nwith _no_phone_home(): print(os.environ['HOME'])"
    env = {**os.environ, "HOME": str(tmp_path)}  # a HOME without ray_bootstrap_config.yaml
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120, check=True)
    scratch = out.stdout.strip()
    assert scratch != str(tmp_path) and "ray_vfl_home" in scratch
    assert not os.path.exists(scratch)


def test_a_local_ray_pins_new_parties_to_spare_slots(ray_session, monkeypatch):
    """Ray cannot add resources to a running node: when ray_vfl started the local Ray, parties of a
    later federation (new names) get spare slots; when they run out, the error says what to do."""
    from ray_vfl.runtime import local_ray

    monkeypatch.setattr(local_ray, "_started", True)
    monkeypatch.setattr(local_ray, "_aliases", {})
    available = {"vfl_spare_0": 10_000, "vfl_spare_1": 10_000}
    assert local_ray.claim_spare_slots(["shop"], available) == []
    assert local_ray.party_resource("shop") == "vfl_spare_0" and local_ray.party_resource("bank") == "vfl_bank"
    with pytest.raises(ConfigError, match="spare party slots"):
        local_ray.claim_spare_slots(["a", "b"], available)
    monkeypatch.setattr(local_ray, "_started", False)  # a Ray someone else started: nothing to claim
    assert local_ray.claim_spare_slots(["c"], available) == ["c"]


def test_a_bad_prediction_input_leaves_the_model_usable(runtime, small_credit):
    """A party rejecting prediction rows (columns out of order) is the user's error: nothing is killed,
    the rows loaded elsewhere are dropped, and the model predicts the right input as before."""
    train_data, test_data = small_credit
    clf = SecureBoostClassifier(n_estimators=2, max_depth=3, backend="plain", runtime=runtime).fit(train_data)
    expected = clf.predict_proba(test_data)
    shuffled = test_data.take(np.arange(len(test_data.label)))
    shuffled.features["party1"] = shuffled.features["party1"][shuffled.features["party1"].columns[::-1]]
    with pytest.raises(DataError, match="differ from the fitted columns"):
        clf.predict_proba(shuffled)
    np.testing.assert_allclose(clf.predict_proba(test_data), expected)
