"""SSXGB (two-server outsourced federated XGBoost): the federated run against the plain-numpy
reference with the same first tree, bins, row samples and approximations (split for split, leaf
weights within the stated error), the view table audited on the recorded messages and on what S
decrypted, bad inputs, and a server failing.

Small settings: 1024-bit BCP keys (allow_weak_keys), 240 rows, 3 participants, depth 2, 3 trees.
"""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest
import ray

from ray_vfl import vertical_split
from ray_vfl.crypto.two_server.bcp import keygen, setup
from ray_vfl.crypto.two_server.bcp_arrays import BCP
from ray_vfl.data.binning import PartyBinner
from ray_vfl.errors import ConfigError, DataError, PartyFailedError, ProtocolError
from ray_vfl.metrics import auc, logloss
from ray_vfl.runtime.comm import Mailbox
from ray_vfl.ssxgb import SSXGBClassifier, SSXGBConfig, train
from ray_vfl.ssxgb.approx import FixedPointPlan, leaf_error_units, sigmoid_max_error
from ray_vfl.ssxgb.reference import fit_ssxgb_reference

COLUMNS = {"party0": ["a", "b"], "party1": ["c"], "party2": ["d"]}
CONFIG = SSXGBConfig(n_trees=3, max_depth=2, learning_rate=0.3, max_bin=8, key_bits=1024, allow_weak_keys=True,
                     row_subsample=0.8, feature_subsample=1.0, seed=3)


def _frame(n: int = 240, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 4))
    y = (x[:, 0] + 0.8 * x[:, 2] - 0.6 * x[:, 3] + 0.4 * rng.normal(size=n) > 0).astype(float)
    frame = pd.DataFrame(x, columns=list("abcd"))
    frame["y"] = y
    return frame


@pytest.fixture(scope="module")
def fitted(runtime):
    frame = _frame()
    data = vertical_split(frame, COLUMNS, label="y")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = train(runtime, data, CONFIG, record_view=True)
    bins = [PartyBinner(CONFIG.max_bin).fit_transform(frame[cols], [], party=p) for p, cols in COLUMNS.items()]
    ref = fit_ssxgb_reference(bins, 0, frame["y"].to_numpy(), CONFIG)
    return model, data, frame, bins, ref


def test_sigmoid_approximation_is_as_stated():
    assert sigmoid_max_error(4.0) < 0.0384 and sigmoid_max_error(5.0) < 0.061


def test_equals_the_centralized_reference(fitted):
    model, data, frame, bins, ref = fitted
    assert model.n_trees == CONFIG.n_trees
    assert model.assembled_splits() == ref.splits  # split for split: owner, feature, bin, children
    plan = FixedPointPlan.of(CONFIG, len(frame))
    margins = [model.predict_margin(data, k) for k in range(1, CONFIG.n_trees + 1)]
    np.testing.assert_allclose(margins[0], ref.first.margins(bins[0]), rtol=0, atol=1e-12)  # the LBP's own tree
    drift = 0.0  # how far earlier trees may already have moved the margins (units of 2^-F)
    for t in range(CONFIG.n_trees - 1):
        leaf = ref.leaf_of_rows(bins, t)
        got = np.ldexp(margins[t + 1] - margins[t], plan.frac_bits)  # each row's federated leaf weight, in units
        worst = 0.0
        for node, w in ref.leaves[t].items():
            rows = leaf == node
            if not rows.any():
                continue
            G, H, n_leaf = ref.sums[t][node]
            bound = leaf_error_units(plan, G, H, n_leaf, drift)
            err = np.abs(got[rows] - w).max()
            assert err <= bound + 1e-3, (t, node, err, bound)
            worst = max(worst, bound)
        drift += worst
    np.testing.assert_allclose(margins[-1], ref.predict_margin(bins, 0), rtol=0, atol=drift * 2.0**-plan.frac_bits + 1e-9)
    assert ((margins[-1] > 0) == frame["y"].to_numpy().astype(bool)).mean() > 0.8


def _floats_in(shape) -> bool:
    return "float" in repr(shape)


def test_view_audit(fitted, runtime):
    model, data, *_ = fitted
    model.predict_margin(data)
    records = list(model.comm_stats.records)
    parts = model.order
    # S receives only C's two-server requests, and every argument is ciphertexts (or shifts / public keys)
    to_s = [r for r in records if r.receiver == "server_s"]
    assert to_s and {r.kind for r in to_s} == {"ssxgb_s_request"} and {r.sender for r in to_s} == {"server_c"}
    view = ray.get(runtime.actor("server_s").view.remote(), timeout=60)
    for step, shape in view["received"]:
        if step == "register_step":
            assert "CipherArray" not in repr(shape)  # public keys only
        else:
            assert "CipherArray" in repr(shape) and not _floats_in(shape), step
    bits = CONFIG.value_bits
    for step, values in view["decrypted"]:  # what S decrypted is masked: never a bare small value
        if step == "switch_key":
            assert min(values) >= 2**bits, step  # m + tau, tau uniform mod N
        elif step in ("mult", "trunc"):  # x + r, r of (the operand's bound + kappa) bits: never a bare small value
            assert min(values) >= 2 ** (CONFIG.kappa - 24), step
    assert {s for s, _ in view["decrypted"]} == {"switch_key", "mult", "trunc", "lgt"}  # no D r: the division masks
    # C receives ciphertexts, packed partitions, record numbers and public keys: no plaintext g, gain or leaf
    to_c = [r for r in records if r.receiver == "server_c"]
    assert {r.kind for r in to_c} <= {"ssxgb_params", "ssxgb_user_key", "ssxgb_lbp_init", "ssxgb_left_sums",
                                      "ssxgb_left_branch", "ssxgb_route", "ssxgb_s_reply"}
    assert not any(_floats_in(r.shape) for r in to_c)
    for r in to_c:
        if r.kind in ("ssxgb_lbp_init", "ssxgb_left_sums"):
            assert "CipherArray" in repr(r.shape)
    # participants hear from C only; no participant ever sends a float (a threshold is a float)
    assert {r.sender for r in records if r.receiver in parts} == {"server_c"}
    assert not any(_floats_in(r.shape) for r in records if r.sender in parts)
    assert {r.kind for r in records if r.sender in parts} <= {"ssxgb_user_key", "ssxgb_lbp_init", "ssxgb_left_sums",
                                                               "ssxgb_left_branch", "ssxgb_route"}
    # only the LBP receives, and decrypts, predictions
    assert {r.receiver for r in records if r.kind == "ssxgb_prediction"} <= {"party0"}
    counts = dict(zip(parts, ray.get([runtime.actor(p).op_counts.remote() for p in parts], timeout=60)))
    assert counts["party0"].get("decrypt_prediction", 0) > 0
    assert all(counts[p].get("decrypt_prediction", 0) == 0 for p in parts[1:])


def test_server_s_failing(fitted, runtime):
    model, data, *_ = fitted  # the last use of the fitted model: a failure ends every actor
    ray.kill(runtime.actor("server_s"), no_restart=True)
    with pytest.raises(PartyFailedError, match="server_s"):
        model.predict_margin(data)


def test_bad_inputs(runtime):
    frame = _frame(60)
    with pytest.raises(DataError, match="at least two participants"):
        train(runtime, vertical_split(frame, {"party0": list("abcd")}, label="y"), CONFIG)
    with pytest.raises(DataError, match="exactly one label-bearing"):
        train(runtime, vertical_split(frame.drop(columns="y"), COLUMNS), CONFIG)
    with pytest.raises(DataError, match="exactly one label-bearing"):
        train(runtime, vertical_split(frame, COLUMNS, label="y", label_owners={"party0": 0.5, "party1": 0.5}), CONFIG)
    with pytest.raises(ConfigError, match="key_bits=1024"):
        SSXGBConfig(key_bits=1024)
    with pytest.raises(ConfigError, match="reg_lambda"):
        SSXGBConfig(reg_lambda=0.0)
    with pytest.raises(ConfigError, match="workers_per_server"):
        SSXGBConfig(workers_per_server=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(ConfigError, match="split candidates per node exceed"):
            train(runtime, vertical_split(frame, COLUMNS, label="y"), CONFIG.replace(n_trees=2, max_candidates=4))


def test_a_ciphertext_under_another_joint_key_is_refused():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        params, _ = setup(1024, allow_weak=True)
    (pk1, _), (pk2, _) = keygen(params), keygen(params)
    bcp = BCP(24)
    c = bcp.encrypt_ints(pk2, [1, 2], 24)
    server_c = Mailbox("server_c")
    msg = Mailbox("party1").send("ssxgb_left_sums", ["server_c"], {"node": np.array([0]), "k": 2, "gl": c, "hl": c})
    ctx = {"nodes": np.array([0]), "key": pk1, "frac_bits": 24, "max_candidates": 100}
    with pytest.raises(ProtocolError, match="party 'party1'.*keys must not be mixed"):
        server_c.open(msg, "ssxgb_left_sums", ctx)


def test_estimator_checkpoint_resume_save_load_and_server_c_failing(runtime, tmp_path):
    small = vertical_split(_frame(80, seed=1), COLUMNS, label="y")
    params = {"max_depth": 1, "max_bin": 4, "key_bits": 1024, "allow_weak_keys": True, "runtime": runtime}
    ckpt = str(tmp_path / "ckpt")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        clf = SSXGBClassifier(n_estimators=2, **params).fit(small, checkpoint_dir=ckpt)
        first = clf.model_.structure()
        more = SSXGBClassifier(n_estimators=3, **params).fit(small, checkpoint_dir=ckpt)  # resumes after tree 2
    assert more.n_trees_ == 3 and more.model_.structure()[0] == first[0]
    assert more.model_.round_trips < clf.model_.round_trips  # no set-up, one federated tree
    proba = more.predict_proba(small)
    assert proba.shape == (80, 2) and np.allclose(proba.sum(axis=1), 1.0)
    assert more.comm_stats_.total_bytes > 0
    saved = tmp_path / "model"
    more.save_model(str(saved))
    assert sorted(p.name for p in saved.iterdir()) == sorted(
        ["federation.json", "server_c.json", "server_s.json"] + [f"{p}.json" for p in COLUMNS])
    back = SSXGBClassifier.load_model(str(saved), runtime=runtime)  # every role reads its own part
    np.testing.assert_array_equal(back.predict_proba(small), proba)
    ray.kill(runtime.actor("server_c"), no_restart=True)
    with pytest.raises(PartyFailedError, match="server_c"):
        back.predict(small)


def test_eval_sets_are_scored_by_the_lbp_after_every_tree(runtime):
    """Each tree's metrics come from encrypted prediction opened by the LBP on its own labels; they
    equal the metrics of the margins a prediction with that many trees returns."""
    small = vertical_split(_frame(80, seed=1), COLUMNS, label="y")
    held = vertical_split(_frame(40, seed=2), COLUMNS, label="y")
    params = {"max_depth": 1, "max_bin": 4, "key_bits": 1024, "allow_weak_keys": True, "runtime": runtime}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        clf = SSXGBClassifier(n_estimators=2, **params).fit(small, eval_set=[held])
    history = clf.evals_result_["validation_0"]
    assert len(history) == 2 and set(history[0]) == {"logloss", "auc"}
    y = _frame(40, seed=2)["y"].to_numpy()
    for n, metrics in enumerate(history, start=1):
        p = clf.model_.predict(held, n_trees=n)
        assert metrics["logloss"] == pytest.approx(logloss(y, p), abs=1e-12) and metrics["auc"] == pytest.approx(auc(y, p))
    with pytest.raises(DataError, match="eval set 'validation_0' must hold the participants"):
        other = vertical_split(_frame(40, seed=2), {"party0": ["a", "b", "c"], "party1": ["d"]}, label="y")
        SSXGBClassifier(n_estimators=2, **params).fit(small, eval_set=[other])
