"""SSXGB's secure steps, in process (server C and S over a LocalLink): what each receiver can infer.

- the winning index: a non-owner's note is distributed the same wherever the winner sits;

Small settings: 1024-bit BCP keys, ``kappa = 40``.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from scipy import stats

from ray_vfl.crypto.two_server.bcp import keygen, setup
from ray_vfl.crypto.two_server.server_c import ServerC
from ray_vfl.crypto.two_server.server_s import LocalLink, ServerS, TwoServerConfig
from ray_vfl.ssxgb.splits import best_candidates, winner_notes

P_MIN = 1e-4  # KS tests: a false alarm once in 10,000 runs


@pytest.fixture(scope="module")
def world():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        params, mk = setup(1024, allow_weak=True)
    users = [keygen(params) for _ in range(3)]
    s = ServerS(mk, TwoServerConfig(value_bits=256, kappa=40), frac_bits=24, record_view=True)
    c = ServerC(params, LocalLink(s), TwoServerConfig(value_bits=256, kappa=40), frac_bits=24)
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
