"""Multi-class PIVODL (one tree per class per round): lossless against the first-principles softmax
booster of tests/test_multiclass.py (which calls none of ray_vfl's tree kernels), Paillier-encrypted
too, accurate against xgboost on Iris with the labels spread over three clients, partial DP accounted
over every class's tree, and bad input named."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.datasets import load_iris
from sklearn.metrics import log_loss

from ray_vfl import vertical_split
from ray_vfl.crypto.privacy.gaussian_dp import accounted_epsilon
from ray_vfl.errors import ConfigError, DataError
from ray_vfl.pivodl import PIVODLConfig, train
from ray_vfl.pivodl.estimator import PIVODLClassifier, PIVODLRegressor
from ray_vfl.runtime.view_table import view_table
import ray_vfl.pivodl.protocol as protocol
from test_multiclass import party_bins, reference_boost

OWNERS = {"party0": 0.4, "party1": 0.35, "party2": 0.25}


@pytest.fixture(scope="module")
def frame():
    bunch = load_iris(as_frame=True)
    out = bunch.frame.rename(columns={"target": "y"})
    out.columns = [f"f{i}" if c != "y" else c for i, c in enumerate(out.columns)]
    return out


@pytest.fixture(scope="module")
def iris(frame):
    """Iris over three clients, each labelling about a third of the rows (class indices 0 .. 2)."""
    return vertical_split(frame, 3, label="y", label_owners=OWNERS, seed=0)


def _softmax(m):
    z = np.exp(m - m.max(axis=1, keepdims=True))
    return z / z.sum(axis=1, keepdims=True)


def assert_lossless(model, data, cfg, w=None):
    """Every tree equals the reference's split for split (global feature, bin, missing direction) and leaf
    for leaf; the secure prediction's (rows, K) margins equal the reference's."""
    y = data.label.astype(np.int64)
    ref = [t for r in reference_boost(party_bins(data, cfg.max_bin), y, cfg, w) for t in r]
    fed = model.assembled_trees({p: data.n_features(p) for p in data.party_names})
    assert len(fed) == len(ref) == cfg.n_trees * cfg.num_class
    margin, splits = np.full((data.n_rows, cfg.num_class), 0.5), 0
    for t, (f, (left, right, split, weight, node_of)) in enumerate(zip(fed, ref)):
        np.testing.assert_array_equal(f["left"], left)
        np.testing.assert_array_equal(f["right"], right)
        for node in range(len(left)):
            if left[node] >= 0:
                assert (f["feature"][node], f["bin"][node], bool(f["default_left"][node])) == split[node], (t, node)
                splits += 1
            else:
                assert f["weight"][node] == pytest.approx(weight[node][0], abs=1e-12), (t, node)
        margin[:, t % cfg.num_class] += np.array([0.0 if w is None else w[0] for w in weight])[node_of]
    assert splits > 0
    np.testing.assert_allclose(model.predict_margin(data), margin, atol=1e-7)
    return margin


def test_lossless_plain_with_eval_metrics(runtime, iris):
    """Instance threshold 1, no DP: the trees are the centralized softmax booster's; the eval set's
    mlogloss and merror (each client scoring its own rows, masked sums) are scikit-learn's."""
    cfg = PIVODLConfig(objective="multi:softprob", num_class=3, n_trees=2, max_depth=3, max_bin=8, backend="plain",
                       instance_threshold=1)
    model = train(runtime, iris, cfg, eval_sets={"train": iris})
    margin = assert_lossless(model, iris, cfg)
    logged = model.history["train"][-1]
    assert set(logged) == {"mlogloss", "merror"} and len(model.history["train"]) == 2  # one entry per round
    assert logged["mlogloss"] == pytest.approx(log_loss(iris.label, _softmax(margin)), rel=1e-9)
    assert logged["merror"] == pytest.approx(float(np.mean(margin.argmax(axis=1) != iris.label)), abs=1e-12)
    np.testing.assert_allclose(model.predict(iris).sum(axis=1), 1.0)
    kinds = {r.kind for r in model.comm_stats.records}  # the binary protocol's kinds, and the base exchange skipped
    assert kinds <= {k for row in view_table(protocol.__doc__) for k in row.kinds}
    assert "pivodl_candidate_sums" in kinds


def test_lossless_paillier(runtime, iris):
    """Encrypted sums (Paillier 1024): the same trees."""
    cfg = PIVODLConfig(objective="multi:softmax", num_class=3, n_trees=1, max_depth=2, max_bin=8, backend="paillier",
                       key_bits=1024, allow_weak_keys=True, instance_threshold=1)
    model = train(runtime, iris, cfg)
    margin = assert_lossless(model, iris, cfg)
    np.testing.assert_array_equal(model.predict(iris), margin.argmax(axis=1))  # multi:softmax: the class index
    assert model.op_counts["encrypt"] > 0 and model.op_counts["decrypt"] > 0
    plain = train(runtime, iris, cfg.replace(backend="plain"))
    paillier_bytes, plain_bytes = (sum(r.nbytes for r in m.comm_stats.records if r.kind == "pivodl_forwarded_sums")
                                   for m in (model, plain))
    assert paillier_bytes > 1.3 * plain_bytes  # packed 1024-bit ciphertexts (several sums each), not floats


def test_sample_weights_are_lossless_and_a_checkpoint_resumes_by_round(runtime, iris, tmp_path):
    """Weights (eighths up to 3, each held with its row's label at the client that labels it) multiply every
    class's pair of the row: the trees equal the reference fitted on weighted pairs and the eval metrics are
    weighted (scikit-learn's log_loss); a run stopped after its first round resumes from the checkpoint to
    the same trees (a round is K trees)."""
    from ray_vfl.trees.callbacks import TrainingCallback
    from ray_vfl.trees.checkpoint import Checkpoint

    w = np.random.default_rng(3).integers(0, 25, size=iris.n_rows) / 8.0
    data = iris.with_weights(w)
    cfg = PIVODLConfig(objective="multi:softprob", num_class=3, n_trees=2, max_depth=2, max_bin=8, backend="plain",
                       instance_threshold=1, gradient_bound=4.0)
    model = train(runtime, data, cfg, eval_sets={"train": data})
    margin = assert_lossless(model, data, cfg, w)
    logged = model.history["train"][-1]["mlogloss"]
    assert logged == pytest.approx(log_loss(iris.label, _softmax(margin), sample_weight=w), rel=1e-9)
    assert logged != pytest.approx(log_loss(iris.label, _softmax(margin)), rel=1e-3)

    class Stop(Exception):
        pass

    class FailAfterFirst(TrainingCallback):
        def after_iteration(self, iteration, logs):
            if iteration == 0:
                raise Stop()
            return False

    folder = str(tmp_path / "ckpt")
    with pytest.raises(Stop):
        train(runtime, data, cfg, callbacks=[Checkpoint(folder), FailAfterFirst()])
    resumed = train(runtime, data, cfg, callbacks=[Checkpoint(folder)])
    feats = {p: data.n_features(p) for p in data.party_names}
    for a, b in zip(model.assembled_trees(feats), resumed.assembled_trees(feats), strict=True):
        for key in a:
            np.testing.assert_array_equal(a[key], b[key])


def test_iris_accuracy_matches_xgboost_and_maps_labels(runtime, frame, tmp_path):
    """Labels 10/20/30 spread over three clients: the classifier maps them to 0 .. 2 before the split,
    keeps them in classes_, and predicts them; test accuracy equals xgboost's with the same settings;
    a saved model loads with its classes and predictions."""
    xgb = pytest.importorskip("xgboost")
    from sklearn.model_selection import train_test_split

    tr, te = train_test_split(frame, test_size=0.25, random_state=0, stratify=frame["y"])
    labels = {0: 10, 1: 20, 2: 30}
    ours_tr, ours_te = tr.assign(y=tr["y"].map(labels)), te.assign(y=te["y"].map(labels))
    train_data = vertical_split(ours_tr.reset_index(drop=True), 3, label="y", label_owners=OWNERS, seed=0)
    test_data = vertical_split(ours_te.reset_index(drop=True), 3, label="y", label_owners=OWNERS, seed=0)
    clf = PIVODLClassifier(n_estimators=10, max_depth=3, max_bin=32, backend="plain", instance_threshold=1,
                           runtime=runtime).fit(train_data, eval_set=[test_data])
    assert clf.classes_.tolist() == [10, 20, 30] and clf.model_.config.objective == "multi:softprob"
    proba = clf.predict_proba(test_data)
    assert proba.shape == (len(te), 3) and np.allclose(proba.sum(axis=1), 1.0)
    ours = float(np.mean(clf.predict(test_data) == ours_te["y"].to_numpy()))
    ref = xgb.XGBClassifier(n_estimators=10, max_depth=3, learning_rate=0.3, max_bin=32, tree_method="hist",
                            reg_lambda=1.0, min_child_weight=1.0)
    ref.fit(tr.drop(columns="y"), tr["y"])
    theirs = float(np.mean(ref.predict(te.drop(columns="y")) == te["y"].to_numpy()))
    print(f"iris test accuracy: PIVODL {ours:.4f}, xgboost {theirs:.4f}")
    assert abs(ours - theirs) <= 0.005, (ours, theirs)
    y = np.searchsorted([10, 20, 30], ours_te["y"].to_numpy())
    assert clf.evals_result_["validation_0"][-1]["mlogloss"] == pytest.approx(log_loss(y, proba), rel=1e-6)
    assert clf.score(test_data) == pytest.approx(ours)
    clf.save_model(str(tmp_path / "m"))
    loaded = PIVODLClassifier.load_model(str(tmp_path / "m"), runtime=runtime)
    assert loaded.classes_.tolist() == [10, 20, 30]
    np.testing.assert_allclose(loaded.predict_proba(test_data), proba, atol=1e-12)


def test_partial_dp_counts_every_class_tree(runtime, iris):
    """Under partial DP each of a round's K trees is a release (the softmax gradient of class k moves by
    at most 1 when a label changes class, so the logistic sensitivity carries over): the noise is sized
    for n_trees * K releases and the model's epsilon is accounted over every one of them."""
    cfg = PIVODLConfig(objective="multi:softprob", num_class=3, n_trees=2, max_depth=2, max_bin=8, backend="plain",
                       instance_threshold=1, epsilon=2.0)
    assert cfg.releases == 6 and cfg.leaf_clip == 1.0
    assert float(cfg.leaf_sensitivity(np.array([5.0]))[0]) == pytest.approx(cfg.learning_rate / cfg.reg_lambda)
    model = train(runtime, iris, cfg)
    assert model.epsilon == pytest.approx(accounted_epsilon(cfg.noise_multiplier, 6, cfg.delta))
    assert 1.8 <= model.epsilon <= 2.0 + 1e-6 and accounted_epsilon(cfg.noise_multiplier, 2, cfg.delta) < 1.5
    view = model.recorded_view("party0")
    parts = model._calls().value("model_part", model.order, lambda p: (), "parts")
    held = {(t, n): w for part in parts for t, n, w in part["held"]}
    released = {(t, n): w for t, tree in enumerate(view["released"]) for n, w in tree.items()}
    assert len(released) == len(held) > 0 and all(abs(w) <= 1.0 for w in held.values())
    assert all(released[k] != held[k] for k in held)  # every released weight carries noise
    with pytest.raises(DataError, match="rank one label per row"):
        model.label_guess_scores()


def test_party_held_labels_take_num_class(runtime, frame, tmp_path):
    """Party-held data never shows its labels to the driver: num_class=K trains multi-class on labels
    0 .. K-1 kept at each client (spread over two files); labels outside 0 .. K-1 are refused by the
    client that holds them, and without num_class the binary check names the fix."""
    from ray_vfl import VerticalDataset

    def files(labels, tag):
        y = frame["y"].map(labels).astype(float)
        mine = np.arange(len(frame)) % 2 == 0
        paths = {}
        for party, cols, rows in (("party3", ["f0", "f1"], mine), ("party4", ["f2", "f3"], ~mine)):
            out = frame[cols].assign(id=np.arange(len(frame)), y=np.where(rows, y, np.nan))
            out.to_csv(tmp_path / f"{party}-{tag}.csv", index=False)
            paths[party] = str(tmp_path / f"{party}-{tag}.csv")
        return VerticalDataset.from_files(paths, label="y", labels="spread", runtime=runtime)

    held = files({0: 0, 1: 1, 2: 2}, "ok")
    params = dict(n_estimators=2, max_depth=2, max_bin=8, backend="plain", instance_threshold=1, runtime=runtime)
    clf = PIVODLClassifier(num_class=3, **params).fit(held)
    assert clf.classes_.tolist() == [0, 1, 2] and clf.model_.config.objective == "multi:softprob"
    proba = clf.predict_proba(held)
    assert proba.shape == (150, 3) and np.mean(proba.argmax(axis=1) == frame["y"].to_numpy()) > 0.9
    assert set(clf.model_.evaluate(held)) == {"mlogloss", "merror"}
    with pytest.raises(DataError, match=r"client 'party\d': multi-class labels must be class indices 0 \.\. 2"):
        PIVODLClassifier(num_class=3, **params).fit(files({0: 10, 1: 20, 2: 30}, "bad"))
    with pytest.raises(DataError, match="num_class=K"):
        PIVODLClassifier(**params).fit(held)


def test_bad_multiclass_input_is_named(runtime, iris, frame):
    with pytest.raises(ConfigError, match="one gradient pair per sum"):
        PIVODLConfig(objective="multi:softprob", num_class=3, multi_strategy="multi_output_tree", backend="plain")
    with pytest.raises(ConfigError, match="num_class"):
        PIVODLConfig(objective="multi:softprob", backend="plain")
    shifted = vertical_split(frame.assign(y=frame["y"] + 1), 3, label="y", label_owners=OWNERS, seed=0)
    cfg = PIVODLConfig(objective="multi:softprob", num_class=3, n_trees=1, max_depth=1, backend="plain",
                       instance_threshold=1)
    with pytest.raises(DataError, match=r"client 'party\d': multi-class labels must be class indices 0 \.\. 2"):
        train(runtime, shifted, cfg)
    with pytest.raises(DataError, match="classes the training labels do not have"):
        PIVODLClassifier(n_estimators=1, backend="plain", runtime=runtime).fit(iris.take(np.flatnonzero(iris.label != 1)),
                                                                               eval_set=[iris])
    with pytest.raises(ConfigError, match="PIVODLClassifier"):
        PIVODLRegressor(num_class=3, backend="plain", runtime=runtime).fit(iris)
