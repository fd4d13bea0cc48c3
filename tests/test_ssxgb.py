"""SSXGB (two-server outsourced federated XGBoost): the federated run against the plain-numpy
reference with the same first tree, bins, row samples and approximations (split for split, leaf
weights within the stated error), the encrypted sigmoid against a first-principles fit, bad inputs,
and a server failing. The view table is tested in ``tests/test_ssxgb_views.py``.

Small settings: 1024-bit BCP keys (allow_weak_keys), 240 rows, 3 participants, depth 2, 3 trees.
"""

from __future__ import annotations

import dataclasses
import re
import warnings

import numpy as np
import pandas as pd
import pytest
import ray
from scipy.integrate import quad
from scipy.special import expit

from ray_vfl import vertical_split
from ray_vfl.crypto.two_server.bcp import keygen, setup
from ray_vfl.crypto.two_server.bcp_arrays import BCP
from ray_vfl.data.binning import PartyBinner
from ray_vfl.errors import ConfigError, DataError, PartyFailedError, ProtocolError
from ray_vfl.metrics import auc, logloss
from ray_vfl.runtime.comm import Mailbox
from ray_vfl.ssxgb import SSXGBClassifier, SSXGBConfig, train
from ray_vfl.crypto.two_server.server_c import ServerC
from ray_vfl.crypto.two_server.server_s import LocalLink, ServerS, TwoServerConfig
from ray_vfl.ssxgb import approx
from ray_vfl.ssxgb.approx import FixedPointPlan, gradient_ints, leaf_error_units
from ray_vfl.ssxgb.secure_math import clamped_gradients
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
    frame = _frame(160)
    data = vertical_split(frame, COLUMNS, label="y")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = train(runtime, data, CONFIG)
    bins = [PartyBinner(CONFIG.max_bin).fit_transform(frame[cols], [], party=p) for p, cols in COLUMNS.items()]
    ref = fit_ssxgb_reference(bins, 0, frame["y"].to_numpy(), CONFIG)
    return model, data, frame, bins, ref


def _first_principles_cubic(r: float) -> tuple[float, float]:
    """The least-squares odd cubic ``1/2 + a1 x + a3 x^3`` to the sigmoid on ``[-r, r]``, by its normal
    equations with the integrals done by quadrature (not the library's grid fit)."""
    moment = [2 * r ** (k + 1) / (k + 1) for k in (2, 4, 6)]  # integrals of x^2, x^4, x^6 over [-r, r]
    rhs = [quad(lambda x, k=k: x**k * (expit(x) - 0.5), -r, r)[0] for k in (1, 3)]
    return tuple(np.linalg.solve([[moment[0], moment[1]], [moment[1], moment[2]]], rhs))


MARGINS = [-9.0, -4.6, -4.0, -3.3, -1.7, -0.5, 0.0, 0.3, 1.0, 2.2, 3.3, 4.0, 5.5, 12.0]


def _sigmoid_problems(p: np.ndarray, r: float, stated: float) -> list[str]:
    """How probabilities ``p`` computed for :data:`MARGINS` differ from the first-principles cubic of the
    clamped margin (beyond 1e-3) or from the sigmoid (beyond the stated error)."""
    a1, a3 = _first_principles_cubic(r)
    x = np.clip(MARGINS, -r, r)
    want = 0.5 + a1 * x + a3 * x**3
    bad = [f"p({m}) = {got:.5f}, the cubic of the clamped margin {w:.5f}" for m, got, w in zip(MARGINS, p, want)
           if abs(got - w) > 1e-3]
    return bad + [f"p({m}) = {got:.5f} is {abs(got - s):.4f} from the sigmoid, past the stated {stated}"
                  for m, got, s in zip(MARGINS, p, expit(x)) if abs(got - s) > stated + 1e-3]


def test_the_encrypted_sigmoid_is_the_clamped_least_squares_cubic_within_its_stated_error():
    """C's clamp and cubic on ciphertexts (with S), for margins inside and far outside [-R, R], against
    an independent least-squares fit and the error the docstring states; the same check rejects a
    pipeline with a wrong coefficient or without the clamp."""
    r = CONFIG.sigmoid_range
    stated = float(re.search(r"largest error ``([0-9.]+)``", approx.__doc__).group(1))
    a1, a3 = _first_principles_cubic(r)
    grid = np.linspace(-r, r, 200001)
    assert round(float(np.abs(0.5 + a1 * grid + a3 * grid**3 - expit(grid)).max()), 4) == stated
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        params, mk = setup(1024, allow_weak=True)
    two = TwoServerConfig(CONFIG.value_bits, CONFIG.kappa)
    c = ServerC(params, LocalLink(ServerS(mk, two, CONFIG.frac_bits)), two, CONFIG.frac_bits)
    jpk = c.register([keygen(params)[0]])
    plan = FixedPointPlan.of(CONFIG, len(MARGINS))
    f = plan.frac_bits
    x = c.encrypt_ints(jpk, plan.encode(MARGINS), f)
    g, h = clamped_gradients(c, plan, x, c.encrypt_ints(jpk, [0] * len(MARGINS), f))  # label 0: g = p
    p = np.ldexp(np.array(c.bcp.mdecrypt_ints(mk, jpk, g), dtype=float), -f)
    assert _sigmoid_problems(p, r, stated) == []
    np.testing.assert_allclose(np.ldexp(np.array(c.bcp.mdecrypt_ints(mk, jpk, h), dtype=float), -f), p * (1 - p),
                               atol=1e-5)
    for wrong in (dataclasses.replace(plan, a3=round(-0.0062 * 2**f)), dataclasses.replace(plan, clamp=1 << 60)):
        p_wrong = np.ldexp(np.array(gradient_ints(wrong, plan.encode(MARGINS), [0] * len(MARGINS))[0], dtype=float), -f)
        assert _sigmoid_problems(p_wrong, r, stated)


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
