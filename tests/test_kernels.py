"""Laws of the pure kernels (bucket sums, split gains, leaf weights), checked against independent
implementations: a brute-force loop over raw rows, and XGBoost's own trees."""

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ray_vfl.crypto.he.fixed_point import FixedPoint
from ray_vfl.trees.config import BoostConfig
from ray_vfl.trees.kernels import (
    GRADIENT_FRAC_BITS,
    best_splits,
    bucket_sum,
    encoded_gradients,
    feature_keys,
    gradients,
    histogram_keys,
    leaf_weights,
    slot_of_rows,
)
from ray_vfl.trees.reference import fit_reference


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 60), st.integers(1, 4), st.integers(2, 6), st.integers(0, 2**31 - 1))
def test_bucket_sum_is_bincount_per_feature(n, n_features, n_bins, seed):
    rng = np.random.default_rng(seed)
    bins = rng.integers(0, n_bins, (n, n_features))
    slot = rng.integers(-1, 3, n)
    values = rng.normal(size=(n, 2))
    rows = np.flatnonzero(slot >= 0)
    keys = histogram_keys(feature_keys(bins, n_bins)[rows], slot[rows], n_bins)
    hist = bucket_sum(values[rows], keys, 3 * n_features * n_bins).reshape(3, n_features, n_bins, 2)
    for s in range(3):
        for f in range(n_features):
            in_slot = slot == s
            expect = np.stack([np.bincount(bins[in_slot, f], weights=values[in_slot, j], minlength=n_bins) for j in range(2)], 1)
            np.testing.assert_allclose(hist[s, f], expect, atol=1e-12)


def _brute_force_from_rows(x, node, g, h, n_nodes, max_bin, lam, gamma, mcw):
    """Per node, every (feature, missing direction, threshold) tried on the raw rows.

    First principles (Chen & Guestrin 2016, eq. 7): a split's score is
    ``1/2 [G_L^2/(H_L+lambda) + G_R^2/(H_R+lambda) - G^2/(H+lambda)] - gamma_paper``, where
    ``gamma`` (XGBoost's ``min_split_loss``, ours) is compared with the bracket, un-halved:
    ``gamma_paper = gamma / 2``. A row goes left iff ``x <= t``, or ``x`` is missing and the
    missing values go left; both children need a hessian sum >= ``min_child_weight`` (and > 0).
    Candidates are listed in the kernel's order: feature, missing left then right, ``t`` ascending.
    Returns per node the candidates as ``(bracket, score, (feature, t, missing_left))``.
    """
    out = []
    for s in range(n_nodes):
        rows = node == s
        G, H = float(np.sum(g[rows])), float(np.sum(h[rows]))
        candidates = []
        for f in range(x.shape[1]):
            col = x[rows, f]
            for missing_left in (True, False):
                for t in range(max_bin):
                    left = (col <= t) | (np.isnan(col) & missing_left)
                    gl, hl = float(np.sum(g[rows][left])), float(np.sum(h[rows][left]))
                    gr, hr = float(np.sum(g[rows][~left])), float(np.sum(h[rows][~left]))
                    if hl < mcw or hr < mcw or hl <= 0 or hr <= 0:
                        continue
                    bracket = gl**2 / (hl + lam) + gr**2 / (hr + lam) - G**2 / (H + lam)
                    candidates.append((bracket, 0.5 * bracket - gamma / 2, (f, t, missing_left)))
        out.append(candidates)
    return out


@settings(max_examples=80, deadline=None)
@given(st.integers(1, 3), st.integers(2, 5), st.integers(0, 2**31 - 1), st.sampled_from([0.0, 1.0, 2.5]),
       st.sampled_from([0.0, 0.5, 3.0]), st.sampled_from([0.0, 0.05]), st.sampled_from([0.0, 0.2]), st.booleans())
def test_best_splits_equal_brute_force_on_raw_rows(n_features, n_values, seed, lam, mcw, gamma, missing, coarse):
    """``best_splits`` on histograms equals an independent loop over the rows of two nodes: the best
    split, its gain and whether it is made, with missing values and empty bins (ties) in play.
    Coarse gradient pairs (multiples of 1/8 and 1/4) make exact ties between different partitions
    and children whose hessian sum is exactly ``min_child_weight``."""
    rng = np.random.default_rng(seed)
    n, max_bin = 60, n_values + 1  # the top bin stays empty: thresholds t and t + 1 part the rows alike
    x = rng.integers(0, n_values, (n, n_features)).astype(float)
    x[rng.random(x.shape) < missing] = np.nan
    node = rng.integers(0, 2, n)
    if coarse:
        g, h = rng.integers(-8, 9, n) / 8, rng.choice([0.25, 0.5, 1.0], n)
    else:
        g, h = rng.normal(size=n), rng.uniform(0.05, 1.0, n)
    bins = np.where(np.isnan(x), max_bin, np.nan_to_num(x)).astype(np.int64)
    G, H = np.zeros((2, n_features, max_bin + 1)), np.zeros((2, n_features, max_bin + 1))
    for f in range(n_features):  # histograms by np.add.at, not by the module's bucket_sum
        np.add.at(G[:, f], (node, bins[:, f]), g)
        np.add.at(H[:, f], (node, bins[:, f]), h)
    choice = best_splits(G, H, lam, mcw)
    splittable = choice.splittable(gamma)
    for s, candidates in enumerate(_brute_force_from_rows(x, node, g, h, 2, max_bin, lam, gamma, mcw)):
        if not candidates:
            assert choice.gain[s] == -np.inf and not splittable[s]
            continue
        top = max(c[0] for c in candidates)
        # the kernel's tie rule: the first candidate within a relative 1e-9 of the best
        bracket, score, where = next(c for c in candidates if c[0] >= top - 1e-9 * abs(top))
        assert (int(choice.feature[s]), int(choice.bin[s]), bool(choice.default_left[s])) == where
        np.testing.assert_allclose(choice.gain[s], bracket, rtol=1e-9, atol=1e-12)
        assert bool(splittable[s]) == (score > 0 and bracket > 1e-10)


def test_histogram_subtraction_equals_direct_build():
    rng = np.random.default_rng(1)
    bins = rng.integers(0, 5, (200, 3))
    values = rng.normal(size=(200, 2))
    child = rng.random(200) < 0.3
    fk = feature_keys(bins, 5)
    parent = bucket_sum(values, histogram_keys(fk, np.zeros(200, np.int64), 5), 15)
    left = bucket_sum(values[child], histogram_keys(fk[child], np.zeros(child.sum(), np.int64), 5), 15)
    right = bucket_sum(values[~child], histogram_keys(fk[~child], np.zeros((~child).sum(), np.int64), 5), 15)
    np.testing.assert_allclose(parent - left, right, atol=1e-12)


def test_gradients_and_leaf_weights():
    y = np.array([0.0, 1.0])
    g, h = gradients("binary:logistic", y, np.zeros(2))
    np.testing.assert_allclose(g, [0.5, -0.5])
    np.testing.assert_allclose(h, [0.25, 0.25])
    np.testing.assert_allclose(leaf_weights(np.array([2.0]), np.array([3.0]), 1.0, 0.5), [-0.25])
    assert slot_of_rows(np.array([3, -1, 5]), np.array([5, 3])).tolist() == [1, -1, 0]


def test_best_splits_float_ties_go_to_the_first_candidate():
    """Gains equal but for float rounding are a tie (first candidate); a real difference still wins."""
    base = np.array([-3.0, 1.0, 2.5, 0.0])
    H = np.ones((1, 2, 4))
    for scale, expect in ((1 + 1e-14, 0), (1 + 1e-6, 1)):
        G = np.stack([base, base * scale])[None]
        assert int(best_splits(G, H, reg_lambda=1.0, min_child_weight=0.0).feature[0]) == expect


def test_min_child_weight_admits_a_child_at_exactly_the_bound():
    """XGBoost's rule: a child whose hessian sum equals ``min_child_weight`` is allowed."""
    G, H = np.array([[[-1.0, 1.0, 0.0]]]), np.array([[[1.0, 1.0, 0.0]]])
    assert best_splits(G, H, reg_lambda=1.0, min_child_weight=1.0).gain[0] == 1.0
    assert best_splits(G, H, reg_lambda=1.0, min_child_weight=1.0 + 1e-12).gain[0] == -np.inf


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 500), st.integers(0, 2**31 - 1))
def test_encoded_gradient_sums_are_exact_in_any_order(n, seed):
    """Encoded pairs are the fixed-point encoding's own values, so their float sums are the exact
    integer sums in any order: directly, reversed, or as a total minus the other rows."""
    rng = np.random.default_rng(seed)
    y, margin = rng.integers(0, 2, n).astype(float), rng.normal(0.0, 4.0, n)
    fp = FixedPoint(GRADIENT_FRAC_BITS)
    for v in encoded_gradients("binary:logistic", y, margin):
        np.testing.assert_array_equal(fp.from_ints(fp.to_ints(v)), v)  # decode(encode(v)) == v
        part = rng.random(n) < 0.5
        exact = fp.from_ints([sum(fp.to_ints(v[part]))])[0]  # Python ints: no rounding
        assert np.sum(v[part]) == np.sum(v[part][::-1]) == np.sum(v) - np.sum(v[~part]) == exact


def test_encoded_gradients_round_to_the_grid_half_to_even():
    step = 2.0**-GRADIENT_FRAC_BITS
    y = -np.array([0.5 * step, 1.5 * step, 1 + 0.49 * step, -(2 + 0.51 * step)])  # margin 0: g = -y
    g, h = encoded_gradients("reg:squarederror", y, np.zeros(4))
    assert g.tolist() == [0.0, 2 * step, 1.0, -(2 + step)]
    assert h.tolist() == [1.0] * 4
    raw_g, _ = gradients("reg:squarederror", y, np.zeros(4))
    assert not np.array_equal(raw_g, g)


# --- XGBoost's own first tree ------------------------------------------------------------------


def xgboost_comparable_data(seed: int, n: int = 800, n_features: int = 6, n_values: int = 7):
    """Integer features ``0 .. n_values - 1`` (every value present; 8% missing) and labels in
    eighths: XGBoost's cut points are the distinct values, our bins are those values, and every
    gradient is exact in float32 (XGBoost's) and on our grid, so both sum the same numbers."""
    rng = np.random.default_rng(seed)
    x = rng.integers(0, n_values, (n, n_features)).astype(float)
    x[:n_values] = np.arange(n_values)[:, None]
    x[n_values:][rng.random((n - n_values, n_features)) < 0.08] = np.nan
    signal = 1.5 * (np.nan_to_num(x[:, 0], nan=3.0) > 2) - 1.0 * (np.nan_to_num(x[:, 1], nan=0.0) < 2) + 0.5 * (x[:, 2] == 4)
    y = signal + rng.integers(-6, 7, n) / 8
    return x, y


def xgboost_first_tree(x: np.ndarray, y: np.ndarray, config: BoostConfig, base_score: float) -> dict:
    """XGBoost's first tree on ``x`` (hist, cut points at the distinct values), as
    ``{path: ("split", feature, threshold, default_left) or ("leaf", weight)}``, with our threshold
    convention (left iff ``x <= threshold``): XGBoost's ``x < c`` on integers is ``x <= c - 1``."""
    xgb = pytest.importorskip("xgboost")
    params = {"tree_method": "hist", "max_bin": 256, "max_depth": config.max_depth, "eta": config.learning_rate,
              "reg_lambda": config.reg_lambda, "gamma": config.gamma, "min_child_weight": config.min_child_weight,
              "base_score": base_score, "objective": config.objective, "nthread": 1}
    booster = xgb.train(params, xgb.DMatrix(x, label=y, missing=np.nan), num_boost_round=1)
    out = {}

    def walk(node: dict, path: str) -> None:
        if "leaf" in node:
            out[path] = ("leaf", node["leaf"])
            return
        out[path] = ("split", int(node["split"][1:]), node["split_condition"] - 1, node["missing"] == node["yes"])
        children = {c["nodeid"]: c for c in node["children"]}
        walk(children[node["yes"]], path + "L")
        walk(children[node["no"]], path + "R")

    walk(json.loads(booster.get_dump(dump_format="json")[0]), "")
    return out


def tree_by_path(left, right, weight, split_of) -> dict:
    """A tree in :func:`xgboost_first_tree`'s form, from its node arrays; ``split_of(node)`` gives
    an internal node's ``(feature, threshold, default_left)``."""
    out = {}

    def walk(node: int, path: str) -> None:
        if left[node] < 0:
            out[path] = ("leaf", float(weight[node]))
            return
        out[path] = ("split", *split_of(node))
        walk(int(left[node]), path + "L")
        walk(int(right[node]), path + "R")

    walk(0, "")
    return out


def reference_tree_by_path(tree) -> dict:
    """A :class:`~ray_vfl.trees.reference.ReferenceTree` on integer-valued bins (bin = value) in
    :func:`xgboost_first_tree`'s form."""
    return tree_by_path(tree.left, tree.right, tree.weight,
                        lambda n: (int(tree.feature[n]), int(tree.bin[n]), bool(tree.default_left[n])))


def assert_same_tree(ours: dict, theirs: dict) -> None:
    """Same splits (feature, threshold, missing direction) at the same places; leaf weights equal
    to XGBoost's float32 ones."""
    assert sorted(ours) == sorted(theirs)
    for path, node in ours.items():
        if node[0] == "leaf":
            assert theirs[path][0] == "leaf", path
            np.testing.assert_allclose(node[1], theirs[path][1], rtol=1e-6, atol=1e-7, err_msg=path)
        else:
            assert node == theirs[path], path


@pytest.mark.parametrize("objective, seed, depth, reg_lambda, gamma, min_child_weight, eta", [
    ("reg:squarederror", 0, 3, 1.0, 0.0, 1.0, 0.3),
    ("reg:squarederror", 1, 3, 5.0, 2.0, 10.0, 1.0),
    ("reg:squarederror", 2, 2, 0.0, 0.0, 0.0, 0.5),
    ("binary:logistic", 3, 3, 1.0, 0.0, 1.0, 0.3),
    ("binary:logistic", 4, 3, 2.0, 0.5, 5.0, 0.7),
])
def test_reference_first_tree_equals_xgboost(objective, seed, depth, reg_lambda, gamma, min_child_weight, eta):
    """Our centralized reference grows XGBoost's first tree on data where the cut points agree:
    the same split features, thresholds and missing directions, the same leaf weights."""
    x, y = xgboost_comparable_data(seed)
    if objective == "binary:logistic":
        y = (y > np.median(y)).astype(float)
    base = 0.5 if objective == "binary:logistic" else 0.25
    config = BoostConfig(n_trees=1, max_depth=depth, learning_rate=eta, reg_lambda=reg_lambda, gamma=gamma,
                         min_child_weight=min_child_weight, objective=objective, max_bin=32)
    bins = np.where(np.isnan(x), config.max_bin, np.nan_to_num(x)).astype(np.uint8)
    ours = reference_tree_by_path(fit_reference(bins, y, config, base)[0])
    theirs = xgboost_first_tree(x, y, config, base)
    assert sum(kind == "split" for kind, *_ in ours.values()) >= depth
    assert_same_tree(ours, theirs)


def test_a_child_without_rows_is_never_a_candidate():
    """The right child of the top threshold (missing values right, none missing) has no rows: its
    sums are exactly 0, not the float residue of total minus left (here 1.1e-16), so it is refused
    even when every real split has a negative gain."""
    G = np.append(np.full(8, 0.1), 0.0)[None, None]  # 8 bins of 0.1, no missing value
    choice = best_splits(G, G.copy(), reg_lambda=1.0, min_child_weight=0.0)
    assert int(choice.bin[0]) < 7 and choice.gain[0] < -0.05
