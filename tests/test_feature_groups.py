"""Joint bucket sums over feature groups give exactly the histograms of one bucket sum per feature."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from ray_vfl.crypto import get_backend
from ray_vfl.trees.feature_groups import plan_feature_groups
from ray_vfl.trees.kernels import build_histograms, feature_keys

_KEYS: dict = {}


def _keys(name):
    if name not in _KEYS:
        _KEYS[name] = get_backend(name).generate_keys(1024, allow_weak=True)
    return _KEYS[name]


def _random_case(seed: int, n: int, n_features: int, n_bins: int, n_nodes: int):
    rng = np.random.default_rng(seed)
    bins = rng.integers(0, n_bins, (n, n_features))
    bins[:, -1] = bins[:, 0] // 2  # a feature that follows another: a group worth making
    node = rng.integers(-1, n_nodes, n)
    rows_of_nodes = [np.flatnonzero(node == k) for k in range(n_nodes)]
    order = rng.permutation(n_features).tolist()
    cuts = sorted(rng.choice(np.arange(1, n_features), rng.integers(0, n_features), replace=False).tolist()) if n_features > 1 else []
    groups = [tuple(order[a:b]) for a, b in zip([0] + cuts, cuts + [n_features])]
    return rng, bins, rows_of_nodes, groups


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**31 - 1), st.integers(1, 60), st.integers(1, 5), st.integers(2, 6), st.integers(1, 3))
def test_grouped_histograms_equal_per_feature_sums_plain(seed, n, n_features, n_bins, n_nodes):
    rng, bins, rows_of_nodes, groups = _random_case(seed, n, n_features, n_bins, n_nodes)
    be = get_backend("plain")
    pk, sk = be.generate_keys()
    gh = be.encrypt_gh(pk, rng.normal(size=n), rng.uniform(0, 1, n))
    fk = feature_keys(bins, n_bins)
    plan = plan_feature_groups(bins, n_bins, max_depth=3, groups=groups)
    grouped, products = plan.histograms(be, pk, gh, fk, rows_of_nodes, n_bins)
    direct = build_histograms(be, pk, gh, fk, rows_of_nodes, n_bins)
    assert len(grouped) == len(direct) == n_nodes
    for a, b in zip(grouped, direct):
        np.testing.assert_allclose(a.data, b.data, atol=1e-12)
    # never more products than one bucket sum per feature (which adds every row once per feature)
    assert products <= sum(len(r) for r in rows_of_nodes) * n_features


@settings(max_examples=8, deadline=None)
@given(st.sampled_from(["ou", "paillier"]), st.integers(0, 2**31 - 1), st.integers(2, 30), st.integers(2, 4))
def test_grouped_histograms_are_exact_under_encryption(name, seed, n, n_features):
    rng, bins, rows_of_nodes, groups = _random_case(seed, n, n_features, 4, 2)
    be = get_backend(name)
    pk, sk = _keys(name)
    gh = be.encrypt_gh(pk, rng.uniform(-1, 1, n), rng.uniform(0, 1, n))
    fk = feature_keys(bins, 4)
    grouped, _ = plan_feature_groups(bins, 4, max_depth=2, groups=groups).histograms(be, pk, gh, fk, rows_of_nodes, 4)
    for a, b in zip(grouped, build_histograms(be, pk, gh, fk, rows_of_nodes, 4)):
        for x, y in zip(be.decrypt_gh(sk, a), be.decrypt_gh(sk, b)):
            np.testing.assert_array_equal(x, y)


def test_plan_groups_features_that_move_together_and_saves_products():
    rng = np.random.default_rng(0)
    status = rng.integers(0, 4, 5000)
    bins = np.column_stack([status, np.minimum(status + rng.integers(0, 2, 5000), 4), rng.integers(0, 32, 5000), status // 2])
    plan = plan_feature_groups(bins, 33, max_depth=4)
    grouped = [g for g in plan.groups if len(g) > 1]
    assert any({0, 1} <= set(g) for g in grouped)
    be = get_backend("plain")
    pk, _ = be.generate_keys()
    gh = be.encrypt_gh(pk, rng.normal(size=5000), np.ones(5000))
    _, products = plan.histograms(be, pk, gh, feature_keys(bins, 33), [np.arange(5000)], 33)
    assert products < 0.6 * 5000 * 4


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**31 - 1), st.integers(1, 60), st.integers(1, 5), st.integers(2, 6), st.integers(1, 3))
def test_skipped_bins_are_left_out_and_the_rest_unchanged(seed, n, n_features, n_bins, n_nodes):
    """One bin per feature the label party derives: never summed, every other cell the same sum, and
    no more products than without skipping (the rows of a group's all-skipped joint cell are left out)."""
    rng, bins, rows_of_nodes, groups = _random_case(seed, n, n_features, n_bins, n_nodes)
    be = get_backend("plain")
    pk, _ = be.generate_keys()
    gh = be.encrypt_gh(pk, rng.normal(size=n), rng.uniform(0, 1, n))
    fk = feature_keys(bins, n_bins)
    skip = rng.integers(0, n_bins, n_features)
    skipped = np.arange(n_features) * n_bins + skip
    sum_keys = np.where(bins == skip, -1, fk)
    full, products = plan_feature_groups(bins, n_bins, 3, groups=groups).histograms(be, pk, gh, fk, rows_of_nodes, n_bins)
    kept, fewer = plan_feature_groups(bins, n_bins, 3, groups=groups, skip_bins=skip).histograms(
        be, pk, gh, sum_keys, rows_of_nodes, n_bins)
    direct = build_histograms(be, pk, gh, sum_keys, rows_of_nodes, n_bins)  # negative keys are skipped
    for a, b, c in zip(full, kept, direct):
        expect = a.data.copy()
        expect[skipped] = 0.0
        np.testing.assert_allclose(b.data, expect, atol=1e-12)
        np.testing.assert_allclose(c.data, expect, atol=1e-12)
    assert fewer <= products
