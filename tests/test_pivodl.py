"""PIVODL: lossless against the centralized reference, the instance threshold, the view audit,
partial DP, secure prediction, failures and bad input."""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from ray_vfl import vertical_split
from ray_vfl.data.binning import PartyBinner
from ray_vfl.data.bundled import load_named
from ray_vfl.errors import ConfigError, DataError, PartyFailedError
from ray_vfl.pivodl import PIVODLConfig, train
from ray_vfl.pivodl.reference import fit_reference as fit_pivodl_reference
from ray_vfl.trees.kernels import base_margin
from ray_vfl.trees.reference import fit_reference, predict_reference


def party_bins(data, max_bin, fitted_on=None):
    """Every client's bins, binned as the client bins its own columns."""
    fitted_on = fitted_on or data
    return [PartyBinner(max_bin).fit(fitted_on.features[p], [], p).transform(data.features[p], p)
            for p in data.party_names]


def reference_bins(data, max_bin, fitted_on=None):
    return np.concatenate(party_bins(data, max_bin, fitted_on), axis=1)


def client_of_row(data):
    return np.array([data.party_names.index(o) for o in data.label_owner])


def base_of(data, config):
    y = data.label
    return float(np.clip(y.mean(), 1e-6, 1 - 1e-6)) if config.objective == "binary:logistic" else float(y.mean())


def assert_lossless(model, train_data, test_data, config):
    """Every tree equals the centralized reference (the same candidates, instance threshold and bins), split
    for split and leaf for leaf; secure prediction equals the reference's margins."""
    base = base_of(train_data, config)
    ref = fit_pivodl_reference(party_bins(train_data, config.max_bin), client_of_row(train_data), train_data.label,
                               config, base)
    fed = model.assembled_trees({p: train_data.n_features(p) for p in train_data.party_names})
    assert len(fed) == len(ref) == config.n_trees
    splits = 0
    for f, r in zip(fed, ref):
        np.testing.assert_array_equal(f["left"], r.left)
        np.testing.assert_array_equal(f["right"], r.right)
        inner = r.left >= 0
        np.testing.assert_array_equal(f["feature"][inner], r.feature[inner])
        np.testing.assert_array_equal(f["bin"][inner], r.bin[inner])
        np.testing.assert_array_equal(f["default_left"][inner], r.default_left[inner])
        np.testing.assert_array_equal(f["weight"], r.weight)
        splits += int(inner.sum())
    assert splits > 0
    expect = predict_reference(ref, reference_bins(test_data, config.max_bin, train_data),
                               base_margin(config.objective, base), config.max_bin)
    np.testing.assert_allclose(model.predict_margin(test_data), expect, atol=1e-7)


@pytest.fixture(scope="module")
def credit_frame():
    frame, label, _, _ = load_named("credit")
    return frame.iloc[:2400].reset_index(drop=True), label


def spread(frame, label, clients, fractions, seed=0):
    owners = dict(zip([f"party{i}" for i in range(clients)], fractions))
    return vertical_split(frame, clients, label=label, label_owners=owners, seed=seed)


@pytest.mark.parametrize("clients, fractions, threshold", [
    (2, (0.5, 0.5), 1),
    (3, (0.7, 0.0, 0.3), None),       # a client with no labels at all; the default threshold
    (5, (0.1, 0.2, 0.3, 0.15, 0.25), 20),
])
def test_lossless_plain(runtime, credit_frame, clients, fractions, threshold):
    frame, label = credit_frame
    train_data, test_data = spread(frame, label, clients, fractions, seed=clients).train_test_split(0.25, seed=1)
    config = PIVODLConfig(n_trees=3, max_depth=3, max_bin=16, backend="plain")
    if threshold is not None:
        config = config.replace(instance_threshold=threshold)
    model = train(runtime, train_data, config)
    assert_lossless(model, train_data, test_data, config)


def test_reference_with_threshold_one_is_the_centralized_boosting(credit_frame):
    """Threshold 1 keeps every candidate: the PIVODL reference is then the plain histogram boosting on the
    clients' bins side by side, split for split (no Ray)."""
    frame, label = credit_frame
    data = spread(frame.iloc[:1200], label, 3, (0.5, 0.2, 0.3))
    config = PIVODLConfig(n_trees=3, max_depth=4, max_bin=16, backend="plain", instance_threshold=1)
    base = base_of(data, config)
    ours = fit_pivodl_reference(party_bins(data, 16), client_of_row(data), data.label, config, base)
    plain = fit_reference(reference_bins(data, 16), data.label, config, base)
    for a, b in zip(ours, plain):
        for key in ("left", "right", "feature", "bin", "default_left", "weight"):
            np.testing.assert_array_equal(getattr(a, key), getattr(b, key))
    held = fit_pivodl_reference(party_bins(data, 16), client_of_row(data), data.label,
                                config.replace(instance_threshold=40), base)
    assert sum(int((t.left >= 0).sum()) for t in held) < sum(int((t.left >= 0).sum()) for t in plain)


def test_lossless_paillier_regression(runtime):
    """Encrypted sums, squared error (labels of the appliances energy data), uneven spread over 4 clients."""
    frame, label, _, _ = load_named("energy")
    frame = frame.iloc[:1500].reset_index(drop=True)
    data = spread(frame, label, 4, (0.4, 0.3, 0.2, 0.1), seed=2)
    train_data, test_data = data.train_test_split(0.25, seed=0)
    config = PIVODLConfig(n_trees=2, max_depth=3, max_bin=8, backend="paillier", key_bits=1024, allow_weak_keys=True,
                          objective="reg:squarederror", gradient_bound=4096.0)
    model = train(runtime, train_data, config)
    assert_lossless(model, train_data, test_data, config)
    assert model.op_counts["encrypt"] > 0 and model.op_counts["decrypt"] > 0


def test_instance_threshold_offers_exactly_the_admissible_splits(runtime):
    """A hand-built case: client bank labels rows 0-5, shop rows 6-11. With threshold 3 a source offers a
    candidate only if its left and right branches, and its differences with every candidate offered before
    it, hold 0 or at least 3 of each client's rows (written here with Python sets, apart from
    pivodl/threshold.py); the best offered split wins."""
    x = np.arange(12, dtype=float)
    frame = pd.DataFrame({"xa": x, "xb": (x * 7) % 12, "y": [0] * 7 + [1] * 5})
    owners = ["bank"] * 6 + ["shop"] * 6
    data = vertical_split(frame, {"bank": ["xa"], "shop": ["xb"]}, label="y", label_owners=owners)
    base = dict(n_trees=1, max_depth=1, max_bin=16, backend="plain", min_child_weight=0.0, learning_rate=1.0)
    feats = {"bank": 1, "shop": 1}
    f_free = train(runtime, data, PIVODLConfig(**base, instance_threshold=1)).assembled_trees(feats)[0]
    f_held = train(runtime, data, PIVODLConfig(**base, instance_threshold=3)).assembled_trees(feats)[0]
    bins = reference_bins(data, 16)
    y = data.label
    g = 5 / 12 - y  # the base score is the label mean: p - y
    clients = [set(range(6)), set(range(6, 12))]

    def fine(n):
        return n == 0 or n >= 3

    def left_of(f, b):
        return {i for i in range(12) if bins[i, f] <= b}

    def gain(f, b):
        left = bins[:, f] <= b
        p = 5 / 12
        gl, gr, hl, hr = g[left].sum(), g[~left].sum(), p * (1 - p) * left.sum(), p * (1 - p) * (~left).sum()
        if hl == 0 or hr == 0:
            return -np.inf
        return gl**2 / (hl + 1) + gr**2 / (hr + 1) - g.sum()**2 / (12 * p * (1 - p) + 1)

    offered = []
    for f in range(2):  # each source lists its own candidates; each feature is one source's here
        kept = []
        for b in range(int(bins[:, f].max())):
            left = left_of(f, b)
            ok = all(fine(len(left & c)) and fine(len(c - left)) for c in clients)
            ok = ok and all(fine(len((left ^ other) & c)) and fine(len(c - (left ^ other))) for other in kept for c in clients)
            if ok:
                kept.append(left)
                offered.append((f, b))
    cands = [(f, b) for f in range(2) for b in range(int(bins[:, f].max()))]
    assert len(offered) < len(cands)
    best_free = max(cands, key=lambda c: (gain(*c), -c[0], -c[1]))
    best_held = max(offered, key=lambda c: (gain(*c), -c[0], -c[1]))
    assert best_free != best_held  # the case is built so that the threshold matters
    assert (f_free["feature"][0], f_free["bin"][0]) == best_free
    assert (f_held["feature"][0], f_held["bin"][0]) == best_held


def _noise(runtime, data, config, client_class=None):
    """The standardised noise of every leaf weight a run released: (released - kept) / (z * sensitivity), the
    kept weights being the clipped exact ones the holders keep for prediction."""
    import pivodl_leaky
    import ray.cloudpickle

    import ray_vfl.pivodl.protocol as protocol

    saved = protocol.Client
    if client_class is not None:
        ray.cloudpickle.register_pickle_by_value(pivodl_leaky)
        protocol.Client = getattr(pivodl_leaky, client_class)
    try:
        model = train(runtime, data, config)
    finally:
        protocol.Client = saved
    kept = model.assembled_trees({p: data.n_features(p) for p in data.party_names})
    released = model._calls().value("released_weights", model.order[:1], lambda p: (), "released")[0]
    sigma = config.noise_multiplier * float(config.leaf_sensitivity(np.array([1.0]))[0])
    return np.array([(w - kept[t]["weight"][node]) / sigma for t in range(len(kept)) for node, w in released[t].items()])


def _check_noise(z_a, z_b):
    """The released noise, from runs under two label vectors: each has unit variance (chi-square, false-alarm
    rate 1e-4) and mean near 0; the two have the same distribution (KS) and share no draw."""
    from view_checks import independent_of_secret

    for z in (z_a, z_b):
        lo, hi = stats.chi2.ppf([5e-5, 1 - 5e-5], len(z))
        if not lo < float((z**2).sum()) < hi:
            raise AssertionError(f"the released noise has variance {np.mean(z**2):.3f} x the configured one")
        if abs(z.mean()) > 4.0 / np.sqrt(len(z)):
            raise AssertionError(f"the released noise has mean {z.mean():.3f} (in units of sigma)")
    independent_of_secret(z_a, z_b)
    shared = np.intersect1d(np.round(z_a, 9), np.round(z_b, 9))
    if len(shared):
        raise AssertionError(f"{len(shared)} noise draws repeat across runs (a fixed seed)")


def test_released_leaf_noise_of_a_run_has_the_deviation_and_ignores_the_labels(runtime, credit_frame):
    """Partial DP as a run releases it: on credit (logistic loss), every released leaf weight minus the kept
    (clipped) one, divided by z * sensitivity, is unit-variance noise with mean 0, the same under the labels
    and their flip, and never the same draw twice. A client releasing without noise, and one drawing from a
    fixed seed, fail the same check."""
    frame, label = credit_frame
    flipped = frame.assign(**{label: 1 - frame[label]})
    data = [spread(f, label, 3, (0.4, 0.3, 0.3)) for f in (frame, flipped)]
    config = PIVODLConfig(n_trees=6, max_depth=4, max_bin=16, backend="plain", epsilon=4.0, instance_threshold=1)
    z = [_noise(runtime, d, config) for d in data]
    assert min(len(z[0]), len(z[1])) > 60
    _check_noise(*z)
    short = dataclasses.replace(config, n_trees=2)  # the leaky clients fail on fewer leaves (about 25 a run)
    with pytest.raises(AssertionError, match="variance"):
        _check_noise(_noise(runtime, data[0], short, "NoNoiseClient"), z[1])
    seeded = [_noise(runtime, d, short, "SeededNoiseClient") for d in data]
    with pytest.raises(AssertionError, match="fixed seed"):
        _check_noise(*seeded)


def test_secure_prediction_sums_the_holders_clipped_leaves(runtime, credit_frame):
    """Under partial DP the clients trained on noisy released weights, yet the masked shares of secure
    prediction sum to the margins of the weights the holders keep: clipped to C, without noise. The
    first tree (grown before any noise) is the centralized reference's, its weights clipped."""
    from ray_vfl.trees.reference import ReferenceTree

    frame, label = credit_frame
    data = spread(frame, label, 3, (0.4, 0.4, 0.2))
    config = PIVODLConfig(n_trees=2, max_depth=2, max_bin=16, backend="plain", epsilon=1.0, leaf_clip=0.05)
    model = train(runtime, data, config)
    assembled = model.assembled_trees({p: data.n_features(p) for p in data.party_names})
    trees = [ReferenceTree(t["left"], t["right"], t["feature"], t["bin"], t["default_left"], t["weight"])
             for t in assembled]
    base = base_of(data, config)
    first = fit_pivodl_reference(party_bins(data, config.max_bin), client_of_row(data), data.label,
                                 config.replace(n_trees=1), base)[0]
    np.testing.assert_array_equal(assembled[0]["left"], first.left)
    assert np.abs(first.weight).max() > 0.05  # the clip binds somewhere
    np.testing.assert_array_equal(assembled[0]["weight"], np.clip(first.weight, -0.05, 0.05))
    assert all(np.abs(t["weight"]).max() <= 0.05 for t in assembled)
    expect = predict_reference(trees, reference_bins(data, config.max_bin), base_margin(config.objective, base),
                               config.max_bin)
    np.testing.assert_allclose(model.predict_margin(data), expect, atol=1e-8)


def test_bad_inputs(runtime, credit_frame):
    frame, label = credit_frame
    with pytest.raises(ConfigError, match="instance_threshold"):
        PIVODLConfig(instance_threshold=0)
    with pytest.raises(ConfigError, match="epsilon"):
        PIVODLConfig(epsilon=0.0)
    with pytest.raises(ConfigError, match="epsilon"):
        PIVODLConfig(epsilon=-1.0)
    with pytest.raises(ConfigError, match="leaf_clip must be given"):
        PIVODLConfig(epsilon=1.0, objective="reg:squarederror")
    one = vertical_split(frame, 1, label=label)
    with pytest.raises(DataError, match="at least two clients"):
        train(runtime, one, PIVODLConfig(backend="plain"))
    few = spread(frame.iloc[:400], label, 2, (0.9, 0.1))  # party1 labels about 40 rows
    with pytest.raises(DataError, match="client 'party1' labels .* fewer than instance_threshold 50"):
        train(runtime, few, PIVODLConfig(n_trees=1, backend="plain"))
    train(runtime, few, PIVODLConfig(n_trees=1, backend="plain", instance_threshold=20))  # enough at 20


def test_failed_client_is_named(runtime, credit_frame):
    import ray

    from ray_vfl import Runtime

    frame, label = credit_frame
    data = spread(frame, label, 3, (0.4, 0.4, 0.2))
    rt = Runtime(timeout_s=60)
    try:
        config = PIVODLConfig(n_trees=50, max_depth=3, backend="plain")
        from ray_vfl.trees.callbacks import TrainingCallback

        class KillAfterFirst(TrainingCallback):
            def after_iteration(self, iteration, logs):
                if iteration == 0:
                    ray.kill(rt.actor("party1"), no_restart=True)
                return False

        with pytest.raises(PartyFailedError) as info:
            train(rt, data, config, callbacks=[KillAfterFirst()])
        assert info.value.party == "party1"
    finally:
        rt.kill_all()


def test_estimator_eval_early_stopping_save_load(runtime, credit_frame, tmp_path):
    from ray_vfl import PIVODLClassifier

    frame, label = credit_frame
    train_data, test_data = spread(frame, label, 3, (0.5, 0.25, 0.25)).train_test_split(0.25, seed=0)
    clf = PIVODLClassifier(n_estimators=6, max_depth=3, backend="plain", early_stopping_rounds=2, runtime=runtime)
    clf.fit(train_data, eval_set=[test_data])
    history = clf.evals_result_["validation_0"]
    assert len(history) >= 1 and {"logloss", "error"} <= set(history[0])
    # the secure evaluation equals the metrics computed where all labels are
    p = clf.predict_proba(test_data)[:, 1]
    y = test_data.label
    expect = -np.mean(y * np.log(p) + (1 - y) * np.log(1 - p))
    assert clf.evaluate(test_data)["logloss"] == pytest.approx(expect, rel=1e-6)
    clf.save_model(str(tmp_path / "model"))
    loaded = PIVODLClassifier.load_model(str(tmp_path / "model"), runtime=runtime)
    np.testing.assert_allclose(loaded.predict_proba(test_data), clf_proba := np.column_stack([1 - p, p]), atol=1e-9)
    assert clf_proba.shape == (test_data.n_rows, 2)


def test_checkpoint_resume_gives_the_same_model(runtime, credit_frame, tmp_path):
    from ray_vfl.trees.callbacks import TrainingCallback
    from ray_vfl.trees.checkpoint import Checkpoint

    frame, label = credit_frame
    data = spread(frame, label, 3, (0.4, 0.4, 0.2))
    config = PIVODLConfig(n_trees=4, max_depth=3, backend="plain")
    feats = {p: data.n_features(p) for p in data.party_names}
    whole = train(runtime, data, config).assembled_trees(feats)

    class Stop(Exception):
        pass

    class FailAfter(TrainingCallback):
        def after_iteration(self, iteration, logs):
            if iteration == 1:
                raise Stop()
            return False

    folder = str(tmp_path / "ckpt")
    with pytest.raises(Stop):
        train(runtime, data, config, callbacks=[Checkpoint(folder), FailAfter()])
    resumed = train(runtime, data, config, callbacks=[Checkpoint(folder)]).assembled_trees(feats)
    assert len(resumed) == len(whole) == 4
    for a, b in zip(whole, resumed):
        for key in a:
            np.testing.assert_array_equal(a[key], b[key])


def test_released_leaf_noise_has_the_configured_deviation(runtime):
    """Under partial DP with squared error every released weight is clip(exact, C) + N(0, (z 2C)^2):
    the standardised differences over every leaf pass a chi-square test of their variance (false-alarm
    rate 1e-4) and have mean near 0; the accountant's epsilon is the configured one."""
    frame, label, _, _ = load_named("energy")
    data = spread(frame.iloc[:3000].reset_index(drop=True), label, 3, (0.5, 0.3, 0.2))
    config = PIVODLConfig(n_trees=8, max_depth=5, backend="plain", objective="reg:squarederror", gradient_bound=4096.0,
                          epsilon=2.0, leaf_clip=5.0, instance_threshold=1)  # every leaf depth 5 allows: > 100 leaves
    model = train(runtime, data, config)
    exact = model.assembled_trees({p: data.n_features(p) for p in data.party_names})
    released = model._calls().value("released_weights", model.order[:1], lambda p: (), "released")[0]
    z = []
    for t, tree in enumerate(exact):
        for node, w in released[t].items():
            z.append((w - np.clip(tree["weight"][node], -5.0, 5.0)) / (config.noise_multiplier * 2 * 5.0))
    z = np.asarray(z)
    assert len(z) > 100
    lo, hi = stats.chi2.ppf([5e-5, 1 - 5e-5], len(z))
    assert lo < float((z**2).sum()) < hi
    assert abs(z.mean()) < 4.0 / np.sqrt(len(z))
    assert model.epsilon == pytest.approx(2.0, rel=1e-2)


def test_label_guess_reads_the_partitions_that_partial_dp_leaves_alone(runtime, credit_frame):
    """The attack's second score (pivodl/attack.py) uses only what a client holds: the public partitions
    and its own labels. A client with no labels scores every row 0; the others rank the rows they do not
    label far above chance even at epsilon 0.1, where the released weights are mostly noise."""
    from ray_vfl.pivodl import label_guess_report

    frame, label = credit_frame
    data = spread(frame, label, 3, (0.6, 0.0, 0.4))
    model = train(runtime, data, PIVODLConfig(n_trees=3, max_depth=4, max_bin=16, backend="plain", epsilon=0.1))
    scores = model.label_guess_scores()
    assert not scores["party1"]["partition"].any() and not scores["party1"]["own"].any()
    report = label_guess_report(scores, data.label)
    assert report["party1"]["partition_auc_two_sided"] == 0.5
    assert min(report[p]["partition_auc_two_sided"] for p in ("party0", "party2")) > 0.65, report


def test_a_row_labelled_at_two_clients_is_refused_by_the_clients(runtime, tmp_path):
    """Party-held data: the driver never sees who labels what; the clients' set-up exchange finds the
    row labelled twice (and a row labelled nowhere) and names the fix."""
    from ray_vfl import VerticalDataset

    ids = np.arange(40)
    rng = np.random.default_rng(0)
    y = (rng.random(40) > 0.5).astype(float)
    bank = pd.DataFrame({"id": ids, "a": rng.random(40), "y": np.where(ids < 25, y, np.nan)})
    shop = pd.DataFrame({"id": ids, "b": rng.random(40), "y": np.where(ids >= 20, y, np.nan)})  # rows 20-24 twice
    bank.to_csv(tmp_path / "bank.csv", index=False)
    shop.to_csv(tmp_path / "shop.csv", index=False)
    data = VerticalDataset.from_files({"bank": str(tmp_path / "bank.csv"), "shop": str(tmp_path / "shop.csv")},
                                      id_column="id", label="y", runtime=runtime)
    with pytest.raises(DataError, match="labelled at both .* exactly one client"):
        train(runtime, data, PIVODLConfig(n_trees=1, backend="plain"))
    shop.assign(y=np.where(ids >= 30, y, np.nan)).to_csv(tmp_path / "shop.csv", index=False)  # rows 25-29 nowhere
    data = VerticalDataset.from_files({"bank": str(tmp_path / "bank.csv"), "shop": str(tmp_path / "shop.csv")},
                                      id_column="id", label="y", runtime=runtime)
    with pytest.raises(DataError, match="labelled at no client"):
        train(runtime, data, PIVODLConfig(n_trees=1, backend="plain"))


def test_ou_backend_is_lossless(runtime, credit_frame):
    frame, label = credit_frame
    train_data, test_data = spread(frame.iloc[:1200], label, 2, (0.6, 0.4)).train_test_split(0.25, seed=0)
    config = PIVODLConfig(n_trees=2, max_depth=2, max_bin=8, backend="ou", key_bits=1024, allow_weak_keys=True)
    assert_lossless(train(runtime, train_data, config), train_data, test_data, config)
