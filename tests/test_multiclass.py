"""Multi-class SecureBoost: lossless against an independent first-principles reference, accurate
against xgboost (Iris, scikit-learn's digits), packed and encrypted with Paillier.

The reference below is written from the definitions (softmax cross-entropy, XGBoost's gain and leaf
weight, level-wise growth, the missing bin's learned direction), in plain numpy loops over the
candidates: it calls none of ray_vfl's tree kernels.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from sklearn.datasets import load_digits, load_iris

from ray_vfl import SecureBoostClassifier, vertical_split
from ray_vfl.data.binning import PartyBinner
from ray_vfl.errors import ConfigError, DataError
import ray_vfl.secureboost.protocol as protocol
from ray_vfl.runtime.view_table import check_views, view_table
from ray_vfl.secureboost.protocol import train
from ray_vfl.trees.config import BoostConfig

GRID = 2.0**32  # the gradients' fixed-point grid (32 fractional bits)


# -- the independent reference -----------------------------------------------------------------------
def _softmax(m):
    z = np.exp(m - m.max(axis=1, keepdims=True))
    return z / z.sum(axis=1, keepdims=True)


def _pairs(y, margin):
    """Softmax gradient pairs rounded to the 2**-32 grid (half to even), hessians at least 2**-32."""
    p = _softmax(margin)
    g = p.copy()
    g[np.arange(len(y)), y] -= 1.0
    h = np.maximum(2.0 * p * (1.0 - p), 1e-16)
    return np.round(g * GRID) / GRID, np.maximum(np.round(h * GRID) / GRID, 1.0 / GRID)


def _best(bins, g, h, rows, cfg, n_bins):
    """(feature, bin, missing left) of the best candidate at a node, or None. g, h: (n, K)."""
    lam, candidates = cfg.reg_lambda, []
    G, H = g[rows].sum(axis=0), h[rows].sum(axis=0)
    for f in range(bins.shape[1]):
        col = bins[rows, f]
        miss = col == n_bins - 1
        for default_left in (True, False):
            for b in range(n_bins - 1):
                left = (col <= b) & ~miss | (miss & default_left)
                gl, hl = g[rows[left]].sum(axis=0), h[rows[left]].sum(axis=0)
                gr, hr = g[rows[~left]].sum(axis=0), h[rows[~left]].sum(axis=0)
                if left.all() or not left.any() or (hl < cfg.min_child_weight).any() or (hr < cfg.min_child_weight).any():
                    continue
                gain = float(np.sum(gl**2 / (hl + lam) + gr**2 / (hr + lam) - G**2 / (H + lam)))
                candidates.append((gain, (f, b, default_left)))
    if not candidates:
        return None
    top = max(gain for gain, _ in candidates)  # ties (within 1e-9 relative): the first candidate wins
    gain, best = next(c for c in candidates if c[0] >= top - 1e-9 * abs(top))
    return best if gain > max(cfg.gamma, 1e-10) else None


def _tree(bins, g, h, cfg, n_bins):
    """Level-wise tree: node arrays (children appended left then right) and each row's leaf."""
    left, right, split, weight = [-1], [-1], [None], [None]
    node_of = np.zeros(len(bins), dtype=np.int64)
    frontier = [0]
    for _ in range(cfg.max_depth):
        nxt = []
        for node in frontier:
            rows = np.flatnonzero(node_of == node)
            choice = _best(bins, g, h, rows, cfg, n_bins)
            if choice is None:
                continue
            f, b, dl = choice
            col = bins[rows, f]
            go = np.where(col == n_bins - 1, dl, col <= b)
            left[node], right[node], split[node] = len(left), len(left) + 1, choice
            for _ in range(2):
                left.append(-1), right.append(-1), split.append(None), weight.append(None)
            node_of[rows[go]], node_of[rows[~go]] = left[node], right[node]
            nxt += [left[node], right[node]]
        frontier = nxt
    for node in range(len(left)):
        if left[node] < 0:
            rows = node_of == node
            weight[node] = -cfg.learning_rate * g[rows].sum(axis=0) / (h[rows].sum(axis=0) + cfg.reg_lambda)
    return left, right, split, weight, node_of


def reference_boost(bins, y, cfg, w=None):
    """Trees per round as (left, right, splits, leaf weights): K one-output trees, or one K-output tree.
    ``w``: sample weights, multiplying every class's pair of a row (then rounded to the grid again)."""
    k, n_bins = cfg.num_class, cfg.max_bin + 1
    margin = np.full((len(y), k), 0.5)
    rounds = []
    for _ in range(cfg.n_trees):
        g, h = _pairs(y, margin)
        if w is not None:
            g = np.round(g * w[:, None] * GRID) / GRID
            h = np.where(w[:, None] > 0, np.maximum(np.round(h * w[:, None] * GRID) / GRID, 1.0 / GRID), 0.0)
        if cfg.multi_strategy == "multi_output_tree":
            t = _tree(bins, g, h, cfg, n_bins)
            margin += np.stack([np.zeros(k) if w is None else w for w in t[3]])[t[4]]
            rounds.append([t])
        else:
            trees = [_tree(bins, g[:, [c]], h[:, [c]], cfg, n_bins) for c in range(k)]
            for c, t in enumerate(trees):
                margin[:, c] += np.array([0.0 if w is None else w[0] for w in t[3]])[t[4]]
            rounds.append(trees)
    return rounds


def party_bins(data, max_bin):
    return np.concatenate([PartyBinner(max_bin).fit(data.features[p], [], p).transform(data.features[p], p)
                           for p in data.party_names], axis=1)


def assert_equal_to_reference(model, data, cfg, w=None):
    y = np.searchsorted(np.unique(data.label), data.label)
    ref = [t for r in reference_boost(party_bins(data, cfg.max_bin), y, cfg, w) for t in r]
    fed, tables = model.trees(), model.lookup_tables()
    offsets = np.cumsum([0] + [data.n_features(p) for p in model.order])
    assert len(fed) == len(ref)
    splits = 0
    for t, (left, right, split, weight, _) in zip(fed, ref):
        np.testing.assert_array_equal(t.left, left)
        np.testing.assert_array_equal(t.right, right)
        for node in range(len(left)):
            if left[node] >= 0:
                owner = t.owner[node]
                f, b, _, dl = tables[model.order[owner]]["rows"][t.record[node]]
                assert (offsets[owner] + f, b, dl) == split[node], f"node {node}"
                splits += 1
            else:
                np.testing.assert_allclose(np.ravel(t.weight[node]), weight[node], rtol=0, atol=1e-12)
    assert splits > 0


# -- data -------------------------------------------------------------------------------------------
def _frame(loader, n=None):
    bunch = loader(as_frame=True)
    frame = bunch.frame.rename(columns={"target": "y"})
    frame.columns = [f"f{i}" if c != "y" else c for i, c in enumerate(frame.columns)]
    return frame if n is None else frame.iloc[:n]


@pytest.fixture(scope="module")
def iris():
    frame = _frame(load_iris)
    frame["y"] = frame["y"].map({0: 10, 1: 20, 2: 30})  # labels other than 0..K-1: mapped, kept in classes_
    return vertical_split(frame, 2, label="y", seed=0)


@pytest.mark.parametrize("strategy", ["one_output_per_tree", "multi_output_tree"])
def test_lossless_against_first_principles_reference(runtime, iris, strategy):
    cfg = BoostConfig(n_trees=3, max_depth=3, max_bin=8, backend="plain", objective="multi:softprob", num_class=3,
                      multi_strategy=strategy)
    model = train(runtime, iris, cfg)
    assert_equal_to_reference(model, iris, cfg)
    assert model.predict(iris).shape == (150, 3)


def test_estimator_picks_softprob_and_maps_labels(runtime, iris):
    train_data, test_data = iris.train_test_split(0.3, seed=1, stratify=True)
    clf = SecureBoostClassifier(n_estimators=4, max_depth=3, backend="plain", runtime=runtime)
    clf.fit(train_data, eval_set=[test_data])
    assert clf._fit_objective == "multi:softprob" and clf.classes_.tolist() == [10, 20, 30]
    proba = clf.predict_proba(test_data)
    assert proba.shape == (45, 3) and np.allclose(proba.sum(axis=1), 1.0)
    assert set(clf.predict(test_data).tolist()) <= {10, 20, 30}
    assert clf.evals_result_["validation_0"][-1] == pytest.approx(clf.model_.evaluate(test_data))  # labels 10/20/30
    assert set(clf.evals_result_["validation_0"][-1]) == {"mlogloss", "merror"}
    roles = {p: "active" if p == clf.model_.label_party else "passive" for p in clf.model_.order}
    # multi-class sends only the kinds of SecureBoost's view table (margins go to a caller at predict only)
    assert check_views(view_table(protocol.__doc__), clf.comm_stats_.records, roles, optional={"margins", "partition"}) == []
    soft = SecureBoostClassifier(n_estimators=2, max_depth=2, backend="plain", objective="multi:softmax",
                                 runtime=runtime).fit(train_data)
    assert soft.model_.predict(test_data).shape == (45,)  # the class index, as xgboost's multi:softmax


def test_bad_multiclass_input_is_named(runtime, iris):
    with pytest.raises(ConfigError, match="num_class"):
        BoostConfig(objective="multi:softprob", backend="plain")
    with pytest.raises(ConfigError, match="multi_strategy"):
        BoostConfig(objective="multi:softprob", num_class=3, multi_strategy="vector")
    with pytest.raises(DataError, match="multi:softprob"):  # the binary error names the multi-class objective
        SecureBoostClassifier(objective="binary:logistic", backend="plain", runtime=runtime).fit(iris)


@pytest.mark.parametrize("strategy", ["one_output_per_tree", "multi_output_tree"])
def test_sample_weights_are_lossless_and_weigh_the_metrics(runtime, iris, strategy):
    """Weights (in eighths, up to 3) multiply every class's gradient pair of a row: the trees equal the
    first-principles reference fitted on weighted pairs (multi-output: K weighted pairs packed in one
    Paillier ciphertext under the grown gradient bound); the eval metrics are weighted (scikit-learn's
    log_loss with sample_weight); scale_pos_weight, a binary notion, is refused by name."""
    from sklearn.metrics import log_loss

    w = np.random.default_rng(3).integers(0, 25, size=iris.n_rows) / 8.0
    backend = {"backend": "paillier", "key_bits": 1024, "allow_weak_keys": True} if strategy == "multi_output_tree" \
        else {"backend": "plain"}
    clf = SecureBoostClassifier(n_estimators=2, max_depth=3, max_bin=8, multi_strategy=strategy, runtime=runtime, **backend)
    clf.fit(iris, sample_weight=w, eval_set=[iris], sample_weight_eval_set=[w])
    cfg = clf.model_.config
    assert cfg.gradient_bound == 4.0  # the largest weight, 3, rounded up to a power of two
    assert_equal_to_reference(clf.model_, iris, cfg, w)
    proba = clf.predict_proba(iris)
    y = np.searchsorted(clf.classes_, iris.label)
    logged = clf.evals_result_["validation_0"][-1]["mlogloss"]
    assert logged == pytest.approx(log_loss(y, proba, sample_weight=w), rel=1e-6)
    assert logged != pytest.approx(log_loss(y, proba), rel=1e-3)
    with pytest.raises(ConfigError, match="scale_pos_weight"):
        BoostConfig(objective="multi:softprob", num_class=3, backend="plain", scale_pos_weight=2.0)
    with pytest.raises(ConfigError, match="scale_pos_weight"):
        SecureBoostClassifier(n_estimators=1, backend="plain", scale_pos_weight=3.0, runtime=runtime).fit(iris)


def _accuracy_against_xgboost(runtime, frame, strategy, n_estimators, max_depth):
    import xgboost as xgb
    from sklearn.model_selection import train_test_split

    tr, te = train_test_split(frame, test_size=0.25, random_state=0, stratify=frame["y"])
    train_data = vertical_split(tr.reset_index(drop=True), 2, label="y", seed=0)
    test_data = vertical_split(te.reset_index(drop=True), 2, label="y", seed=0)
    clf = SecureBoostClassifier(n_estimators=n_estimators, max_depth=max_depth, max_bin=32, backend="plain",
                                multi_strategy=strategy, runtime=runtime).fit(train_data)
    ours = float(np.mean(clf.predict(test_data) == te["y"].to_numpy()))
    ref = xgb.XGBClassifier(n_estimators=n_estimators, max_depth=max_depth, learning_rate=0.3, max_bin=32,
                            tree_method="hist", multi_strategy=strategy, reg_lambda=1.0, min_child_weight=1.0)
    ref.fit(tr.drop(columns="y"), tr["y"])
    theirs = float(np.mean(ref.predict(te.drop(columns="y")) == te["y"].to_numpy()))
    return ours, theirs


def test_iris_accuracy_matches_xgboost(runtime):
    ours, theirs = _accuracy_against_xgboost(runtime, _frame(load_iris), "one_output_per_tree", 10, 3)
    assert abs(ours - theirs) <= 0.005, (ours, theirs)


def test_digits_accuracy_matches_xgboost(runtime):
    ours, theirs = _accuracy_against_xgboost(runtime, _frame(load_digits), "one_output_per_tree", 10, 4)
    assert abs(ours - theirs) <= 0.005, (ours, theirs)


def test_paillier_multi_output_tree_packs_every_class_in_one_ciphertext(runtime, iris):
    """Paillier 1024: each row's 3 pairs in ONE ciphertext (one encrypted_gh entry per row), the
    histograms' cells 3 pairs each; the trees still equal the reference's."""
    cfg = BoostConfig(n_trees=2, max_depth=2, max_bin=8, backend="paillier", key_bits=1024, allow_weak_keys=True,
                      objective="multi:softprob", num_class=3, multi_strategy="multi_output_tree")
    model = train(runtime, iris, cfg)
    assert_equal_to_reference(model, iris, cfg)
    assert model.op_counts["encrypt"] == 2 * 150  # one ciphertext per row and round, not per class
    gh = [r for r in model.comm_stats.records if r.kind == "encrypted_gh"]
    assert len(gh) == 2  # one message per round


def test_ssxgb_stays_binary_and_pivodl_grows_one_tree_per_class(iris):
    """SSXGB is binary; PIVODL is multi-class with one tree per class only (tests/test_pivodl_multiclass.py)."""
    from ray_vfl.pivodl.config import PIVODLConfig
    from ray_vfl.ssxgb.config import SSXGBConfig
    from ray_vfl.ssxgb.protocol import _check_input

    with pytest.raises(DataError, match="SSXGB is binary, as its paper"):
        _check_input(iris, SSXGBConfig())
    assert PIVODLConfig(objective="multi:softprob", num_class=3, backend="plain").trees_per_round == 3
    with pytest.raises(ConfigError, match="one gradient pair per sum"):
        PIVODLConfig(objective="multi:softprob", num_class=3, backend="plain", multi_strategy="multi_output_tree")


def test_save_and_load_keep_classes_and_predictions(runtime, iris, tmp_path):
    clf = SecureBoostClassifier(n_estimators=2, max_depth=2, backend="plain", multi_strategy="multi_output_tree",
                                runtime=runtime).fit(iris)
    clf.save_model(str(tmp_path / "m"))
    loaded = SecureBoostClassifier.load_model(str(tmp_path / "m"), runtime=runtime)
    assert loaded.classes_.tolist() == [10, 20, 30] and loaded.multi_strategy == "multi_output_tree"
    np.testing.assert_array_equal(loaded.predict_proba(iris), clf.predict_proba(iris))


def test_train_job_picks_multiclass_from_the_labels(runtime, tmp_path, capsys):
    """jobs/train.py on a CSV of 3 classes, in-process on the session's Ray: the objective follows the labels."""
    from conftest import load_job

    path = tmp_path / "iris.csv"
    _frame(load_iris).to_csv(path, index=False)
    report = load_job("train").cli(["--dataset", str(path), "--label", "y", "--backend", "plain", "--trees", "3",
                                    "--depth", "2", "--quiet", "--multi-strategy", "multi_output_tree"])
    assert report["classes"] == 3 and report["test_accuracy"] > 0.8
    assert "test accuracy" in capsys.readouterr().out


@pytest.mark.parametrize("strategy", ["one_output_per_tree", "multi_output_tree"])
def test_checkpoint_resume_and_continuation_grow_the_same_trees(runtime, iris, tmp_path, strategy):
    from ray_vfl.trees.callbacks import TrainingCallback

    class StopAfterFirst(TrainingCallback):
        def after_iteration(self, iteration, logs):
            return True

    params = dict(max_depth=2, backend="plain", multi_strategy=strategy, runtime=runtime)
    whole = SecureBoostClassifier(n_estimators=3, **params).fit(iris)
    folder = str(tmp_path / "ckpt")
    SecureBoostClassifier(n_estimators=3, callbacks=[StopAfterFirst()], **params).fit(iris, checkpoint_dir=folder)
    with open(f"{folder}/checkpoint.json") as fh:
        assert json.load(fh)["trees"] == 1  # one round saved: the next fit resumes from it
    resumed = SecureBoostClassifier(n_estimators=3, **params).fit(iris, checkpoint_dir=folder)
    np.testing.assert_array_equal(resumed.predict_proba(iris), whole.predict_proba(iris))
    first = SecureBoostClassifier(n_estimators=2, **params).fit(iris)
    more = SecureBoostClassifier(n_estimators=1, **params).fit(iris, xgb_model=first)
    np.testing.assert_allclose(more.predict_proba(iris), whole.predict_proba(iris), atol=1e-12)
