"""Laws of the pure kernels (bucket sums, split gains, leaf weights), checked against an independent
brute-force loop over raw rows."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from ray_vfl.crypto.fixed_point import FixedPoint
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
