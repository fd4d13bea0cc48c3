"""Laws of the pure kernels: bucket sums, split gains, leaf weights."""

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


def _brute_force_best(G, H, lam, mcw):
    """Every (feature, missing direction, threshold) tried one by one."""
    best = (-np.inf, None)
    n_features, n_bins = G.shape
    g_tot, h_tot = G[0].sum(), H[0].sum()
    for f in range(n_features):
        for direction, missing_left in enumerate((True, False)):
            for b in range(n_bins - 1):
                gl = G[f, : b + 1].sum() + (G[f, -1] if missing_left else 0.0)
                hl = H[f, : b + 1].sum() + (H[f, -1] if missing_left else 0.0)
                gr, hr = g_tot - gl, h_tot - hl
                if hl < mcw or hr < mcw or hl <= 0 or hr <= 0:
                    continue
                gain = gl**2 / (hl + lam) + gr**2 / (hr + lam) - g_tot**2 / (h_tot + lam)
                if gain > best[0] + 1e-12:
                    best = (gain, (f, b, missing_left))
    return best


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 4), st.integers(3, 7), st.integers(0, 2**31 - 1), st.sampled_from([0.0, 1.0]), st.sampled_from([0.0, 0.5]))
def test_best_split_matches_brute_force(n_features, n_bins, seed, lam, mcw):
    rng = np.random.default_rng(seed)
    n = 50
    bins = rng.integers(0, n_bins, (n, n_features))
    g, h = rng.normal(size=n), rng.uniform(0.05, 0.3, n)
    G = np.stack([np.bincount(bins[:, f], weights=g, minlength=n_bins) for f in range(n_features)])
    H = np.stack([np.bincount(bins[:, f], weights=h, minlength=n_bins) for f in range(n_features)])
    choice = best_splits(G[None], H[None], lam, mcw)
    gain, where = _brute_force_best(G, H, lam, mcw)
    if where is None:
        assert choice.gain[0] == -np.inf
        return
    np.testing.assert_allclose(choice.gain[0], gain, rtol=1e-9)
    assert (int(choice.feature[0]), int(choice.bin[0]), bool(choice.default_left[0])) == where


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
