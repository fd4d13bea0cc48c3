"""SSXGB's secure steps, in process (server C and S over a LocalLink): what each receiver can infer.

- the winning index: a non-owner's note is distributed the same wherever the winner sits;
- the clamp: margins past the cubic's range train on, every Mult operand within its declared bound;
- the division: S's view of a leaf weight gives the factoring attack nothing (it pins D from ``D r``).

Small settings: 1024-bit BCP keys, ``kappa = 40``.
"""

from __future__ import annotations

import dataclasses
import random
import warnings
from collections import Counter

import numpy as np
import pytest
from scipy import stats

from ray_vfl.crypto.two_server.bcp import keygen, setup
from ray_vfl.crypto.two_server.server_c import ServerC
from ray_vfl.crypto.two_server.server_s import LocalLink, ServerS, TwoServerConfig
from ray_vfl.errors import ConfigError
from ray_vfl.ssxgb.approx import FixedPointPlan, gradient_error_units, gradient_ints, leaf_error_units, leaf_ints
from ray_vfl.ssxgb.attack import factoring_attack
from ray_vfl.ssxgb.config import SSXGBConfig
from ray_vfl.ssxgb.secure_math import clamped_gradients, leaf_weights
from ray_vfl.ssxgb.server_c import sum_rows
from ray_vfl.ssxgb.splits import best_candidates, winner_notes

P_MIN = 1e-4  # KS tests: a false alarm once in 10,000 runs


TWO = TwoServerConfig(value_bits=256, kappa=40)


class Audited(ServerC):
    """Server C that, for the tests only, also holds the master key and checks before every step what no
    real server can: each Mult operand within the bound declared for it, each LGT and Trunc input
    within ``2^l`` (the masks' premises). :attr:`checked` counts the operands checked."""

    def __init__(self, params, link, config, mk):
        super().__init__(params, link, config)
        self.mk, self.checked = mk, Counter()

    def _within(self, step: str, arr, bits: int) -> None:
        vals = self.bcp.mdecrypt_ints(self.mk, self.key_of(arr), arr)
        assert max(map(abs, vals)) < 1 << bits, f"{step} operand past its bound 2^{bits}: {max(map(abs, vals))}"
        self.checked[step] += 1

    def mult_many(self, pairs, bounds=None, keep=()):
        for (a, b), (ba, bb) in zip(pairs, bounds or [(self.config.value_bits,) * 2] * len(pairs)):
            self._within("mult", a, ba)
            self._within("mult", b, bb)
        return super().mult_many(pairs, bounds, keep)

    def lgt(self, a, b):
        self._within("lgt", a, self.config.value_bits)
        self._within("lgt", b, self.config.value_bits)
        return super().lgt(a, b)

    def trunc_many(self, arrays, k):
        for arr in arrays:
            self._within("trunc", arr, self.config.value_bits)
        return super().trunc_many(arrays, k)


@pytest.fixture(scope="module")
def world():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        params, mk = setup(1024, allow_weak=True)
    users = [keygen(params) for _ in range(3)]
    s = ServerS(mk, TWO, frac_bits=24, record_view=True)
    c = Audited(params, LocalLink(s), TWO, mk)
    jpk = c.register([pk for pk, _ in users])
    return params, mk, users, s, c, jpk


# -- 3d: the winning index reaches its owner only -----------------------------------------------------
COUNTS = [4, 3, 5]  # candidates of participants 0, 1, 2 in every node
OFFSETS = [0, 4, 7]


def _notes(world, winners: list[int]) -> list[list[int]]:
    """What each participant decrypts from nodes won by the global candidates ``winners``, one node each."""
    _, _, users, _, c, jpk = world
    owner = [j for j, k in enumerate(COUNTS) for _ in range(k)]
    idx = c.encrypt_ints(jpk, winners)
    who = c.encrypt_ints(jpk, [owner[w] for w in winners])
    notes = winner_notes(c, idx, who, OFFSETS, [pk for pk, _ in users])
    return [c.bcp.decrypt_residues(sk, note) for (_, sk), note in zip(users, notes)]


def test_a_non_owner_learns_nothing_of_where_the_winner_sits(world):
    n, trials = world[0].n, 60
    got = _notes(world, [1] * trials + [10] * trials)  # participant 0's 2nd candidate, then participant 2's 4th
    a, b = [v[:trials] for v in got], [v[trials:] for v in got]
    assert a[0] == [1] * trials and b[2] == [3] * trials  # the owner reads its local index
    for view in (a[1], b[1], a[2], b[0]):  # a non-owner: uniform in Z_N, never an index of its own
        assert min(view) >= max(COUNTS)
        assert stats.kstest(np.array(view, dtype=float) / n, "uniform").pvalue > P_MIN
    # participant 1 owns neither winner: its view is the same for both positions
    assert stats.ks_2samp(np.array(a[1], dtype=float), np.array(b[1], dtype=float)).pvalue > P_MIN
    assert len(set(got[1])) == 2 * trials  # fresh per node: no value repeats


def test_the_tournament_names_the_owner_of_the_best_candidate(world):
    _, mk, users, _, c, jpk = world
    gains = [[3, 9, 1, 4, 2, 8, 7, 5, 6, 0, 9, 1], [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]]
    k = sum(COUNTS)
    num = c.encrypt_ints(jpk, [g for node in gains for g in node])
    den = c.encrypt_ints(jpk, [1] * (2 * k))
    owner = [j for j, m in enumerate(COUNTS) for _ in range(m)]
    idx, who = best_candidates(c, num, den, 2, k, 8, owner)
    assert c.bcp.mdecrypt_ints(mk, jpk, idx) == [1, 11] and c.bcp.mdecrypt_ints(mk, jpk, who) == [0, 2]
    notes = winner_notes(c, idx, who, OFFSETS, [pk for pk, _ in users])
    got = [c.bcp.decrypt_residues(sk, note) for (_, sk), note in zip(users, notes)]
    assert got[0][0] == 1 and got[2][1] == 11 - OFFSETS[2]
    assert got[0][1] >= COUNTS[0] and got[1][0] >= COUNTS[1] and got[1][1] >= COUNTS[1] and got[2][0] >= COUNTS[2]


# -- 3c: margins past the cubic's range ---------------------------------------------------------------
PURE = SSXGBConfig(frac_bits=16, kappa=40, learning_rate=0.3, reg_lambda=1 / 32)
LEAF = np.array([0, 0, 1, 1])  # two pure leaves: labels 1, 1 and 0, 0


def _sums(v: list[int]) -> list[int]:
    return [sum(a for a, lf in zip(v, LEAF) if lf == leaf) for leaf in (0, 1)]


def _reference(plan: FixedPointPlan, trees: int) -> int:
    """How many trees the plain-integer pipeline grows on the two pure leaves before ``H + lambda <= 0``."""
    x, y = [0] * 4, [1 << 16, 1 << 16, 0, 0]
    for t in range(trees):
        g, h = gradient_ints(plan, x, y)
        if min(_sums(h)) + plan.lam <= 0:
            return t
        w = leaf_ints(plan, _sums(g), _sums(h))
        x = [v + w[lf] for v, lf in zip(x, LEAF)]
    return trees


@pytest.mark.parametrize("frac_bits, r", [(10, 4.5), (10, 4.0), (12, 1.0)])
def test_the_plans_p_and_h_ranges_hold_for_every_clamped_margin_and_carry(frac_bits, r):
    """Every integer margin in [-C, C] and every carry of the pipeline's four truncations: p and h stay
    inside the plan's ranges (the premise of every mask bound and of the division's start)."""
    plan = FixedPointPlan.of(SSXGBConfig(frac_bits=frac_bits, sigmoid_range=r), 10)
    f, one = frac_bits, plan.one
    xs = np.arange(-plan.clamp, plan.clamp + 1, dtype=object)
    ps, hs = [], []
    for e1, e2, e3, e4 in np.ndindex(2, 2, 2, 2):
        x3 = (((xs * xs >> f) + e1) * xs >> f) + e2
        p = ((plan.a1 * xs + plan.a3 * x3) >> f) + e3 + (one >> 1)
        ps += [min(p), max(p)]
        hs += [min((p * (one - p) >> f) + e4), max((p * (one - p) >> f) + e4)]
    (p_lo, p_hi), (h_lo, h_hi) = plan.p_range(), plan.h_range()
    assert p_lo <= min(ps) and max(ps) <= p_hi and 1 <= h_lo <= min(hs) and max(hs) <= h_hi


def test_a_range_past_where_the_cubic_stays_a_probability_is_refused():
    with pytest.raises(ConfigError, match="sigmoid_range"):
        SSXGBConfig(sigmoid_range=5.0)
    with pytest.raises(ConfigError, match="hessian"):
        SSXGBConfig(frac_bits=8, sigmoid_range=4.5)


def test_pure_leaves_train_30_trees_at_learning_rate_0_3_with_every_bound_checked(world):
    _, mk, _, _, c, jpk = world
    plan = FixedPointPlan.of(PURE, 4)
    # without the clamp the cubic turns (p falls past 3.3, h < 0 past 6.6) and H + lambda reaches 0
    assert _reference(dataclasses.replace(plan, clamp=1 << 200), 30) < 30
    assert _reference(plan, 30) == 30
    c.checked.clear()
    e_g, e_h = gradient_error_units(plan)
    y_int = [1 << 16, 1 << 16, 0, 0]
    x, y = c.encrypt_ints(jpk, [0] * 4, 16), c.encrypt_ints(jpk, y_int, 16)
    groups = [np.flatnonzero(LEAF == lf) for lf in (0, 1)]
    for _ in range(30):  # each tree against the plain-integer pipeline on the same margins
        xs = c.bcp.mdecrypt_ints(mk, jpk, x)
        g_ref, h_ref = gradient_ints(plan, xs, y_int)
        g, h = clamped_gradients(c, plan, x, y)
        assert all(abs(a - b) <= e_g for a, b in zip(c.bcp.mdecrypt_ints(mk, jpk, g), g_ref))
        assert all(abs(a - b) <= e_h for a, b in zip(c.bcp.mdecrypt_ints(mk, jpk, h), h_ref))
        w = leaf_weights(c, plan, sum_rows(jpk, g, groups), sum_rows(jpk, h, groups), [2, 2])
        G, H = _sums(g_ref), _sums(h_ref)
        for got, want, lf in zip(c.bcp.mdecrypt_ints(mk, jpk, w), leaf_ints(plan, G, H), (0, 1)):
            assert abs(got - want) <= leaf_error_units(plan, G[lf], H[lf], 2), (got, want)
        x = c.bcp.add(jpk, x, c.bcp.take(w, LEAF))
    final = np.asarray(c.bcp.mdecrypt_ints(mk, jpk, x)) / 2.0**16
    assert final[0] > PURE.sigmoid_range + 3 and final[2] < -PURE.sigmoid_range - 3  # far past the clamp
    # every two-server step of every tree had its operands checked: 2 LGT, 8 Mult, 4 Trunc operands per tree
    assert c.checked["lgt"] == 2 * 30 and c.checked["mult"] >= 8 * 30 and c.checked["trunc"] >= 4 * 30



# -- 3b: the secure division ------------------------------------------------------------------------
def _leaves(trials: int, seed: int) -> tuple[FixedPointPlan, list[int], list[int], int, int]:
    """Leaves of 30 sampled rows at the default F = 24: a plan, their G and D = H + lambda, D's range."""
    plan = FixedPointPlan.of(SSXGBConfig(kappa=40), 240)
    lo, hi = plan.leaf_range(30)
    rng = random.Random(seed)
    gs = [rng.randrange(-30 << 24, 30 << 24) for _ in range(trials)]
    return plan, gs, [rng.randrange(lo, hi + 1) for _ in range(trials)], lo, hi


def test_the_factoring_attack_pins_d_from_the_old_divisions_d_r():
    """The division SSXGB used to run opened M = D r, r uniform in [2^79, 2^80): D is always among the
    candidates the attack lists, and often the only one (so the attack has teeth)."""
    _, _, ds, lo, hi = _leaves(40, seed=1)
    rng = random.Random(2)
    views = [[d * ((1 << 79) | rng.getrandbits(79))] for d in ds]
    got = factoring_attack(views, ds, lo, hi, 80)
    assert got.found == 40 and got.pinned >= 4 and got.at_most_3 >= 12, got


def test_the_division_shows_s_nothing_the_factoring_attack_can_use(world):
    """40 leaves' weights by Newton's division: the attack, run on every value S opened, finds D in no
    trial (for the old blinding's 80-bit and this run's 40-bit cofactors); what S opened for the 20
    smallest D and the 20 largest is alike at every opening (KS); and every weight is within 1.5 units
    of the exact -eta G / D."""
    _, mk, _, s, c, jpk = world
    plan, gs, ds, lo, hi = _leaves(40, seed=3)
    s.view.clear()
    big_h = c.encrypt_ints(jpk, [d - plan.lam for d in ds], 24)
    w = leaf_weights(c, plan, c.encrypt_ints(jpk, gs, 24), big_h, [30] * 40)
    opened = [vals for _, vals in s.view]
    assert {step for step, _ in s.view} == {"mult", "trunc"}
    assert len(opened) == 4 * plan.newton().iterations + 3  # d, Y, E and a Trunc per step; a, Y and a Trunc
    views = [[vals[t] for vals in opened] for t in range(40)]
    for rho in (80, 40):
        assert factoring_attack(views, ds, lo, hi, rho).found == 0
    order = np.argsort(ds)
    for vals in opened:
        small, large = (np.array([float(vals[t]) for t in order[part]]) for part in (slice(0, 20), slice(20, 40)))
        assert stats.ks_2samp(small, large).pvalue > P_MIN / len(opened)
    exact = [-plan.eta * g / d for g, d in zip(gs, ds)]
    assert all(abs(a - b) <= 1.5 for a, b in zip(c.bcp.mdecrypt_ints(mk, jpk, w), exact))
