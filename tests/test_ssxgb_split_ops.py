"""SSXGB's split search counted per candidate and node on both engines: the products, opened operands
and LGT values of :mod:`ray_vfl.ssxgb.splits` equal their closed form, and each node's winner (index and
owner) is the exact fractions' argmax with ties to the lower index, on left sums with empty bins."""

from __future__ import annotations

import random
from fractions import Fraction

import pytest

from ray_vfl.crypto.two_server.bcp import keygen, setup
from ray_vfl.crypto.two_server.server_c import ServerC
from ray_vfl.crypto.two_server.server_s import LocalLink, ServerS, TwoServerConfig
from ray_vfl.ssxgb.approx import FixedPointPlan
from ray_vfl.ssxgb.config import SSXGBConfig
from ray_vfl.ssxgb.splits import best_candidates, gain_fractions

CONFIG = SSXGBConfig(frac_bits=8, kappa=40, value_bits=100, key_bits=1024, allow_weak_keys=True)
COUNTS = [5, 4, 3]  # candidates of 3 participants (node-major owners, as the protocol sends them)
NODES, ROWS = 3, 40


class Counted(LocalLink):
    """Per step: the values S opens for Mult, the products it returns, the LGT values."""

    def __init__(self, server):
        super().__init__(server)
        self.n = {"products": 0, "opened": 0, "lgt": 0}

    def ask(self, step, *payload):
        reply = super().ask(step, *payload)
        if step.__name__ == "mult_step" and payload[1] and isinstance(payload[1][0], int):  # lattice
            self.n["opened"] += sum(payload[1])
            self.n["products"] += sum(payload[1][i] for i, _ in payload[2])
        elif step.__name__ == "mult_step":  # BCP: one reply array per product
            self.n["opened"] += sum(len(m) for m in payload[0])
            self.n["products"] += sum(len(r) for r in reply)
        elif step.__name__ == "lgt_step":
            self.n["lgt"] += payload[1] if len(payload) > 1 else len(payload[0])
        return reply


def _engine(name):
    two = TwoServerConfig(CONFIG.value_bits, CONFIG.kappa)
    if name == "bcp":
        params, mk = setup(1024, allow_weak=True)
        link = Counted(ServerS(mk, two, CONFIG.frac_bits))
        c = ServerC(params, link, two, CONFIG.frac_bits)
        pk = c.register([keygen(params)[0]])
        return c, pk, link, lambda x: c.bcp.mdecrypt_ints(mk, pk, x)
    pytest.importorskip("tenseal")
    pytest.importorskip("zstandard")
    from ray_vfl.crypto.lattice import two_server as lat
    from ray_vfl.crypto.lattice.keys import LatticeKeys, LatticePublic
    keys = LatticeKeys(lat.ring_for(two))
    link = Counted(lat.LatticeServerS(keys, two))
    c = lat.LatticeServerC(LatticePublic(keys.ring, keys.exported), link, two)
    return c, c.pub, link, lambda x: lat.decrypt_ints(keys, x)


def _left_sums(plan, k, rnd):
    """Per node: its sums and ``k`` left sums growing bin by bin, a third of the bins empty (ties)."""
    f, out = plan.frac_bits, ([], [], [], [])
    for _ in range(NODES):
        g = [rnd.randrange(-(1 << f), 1 << f) for _ in range(ROWS)]
        h = [rnd.randrange(1, 1 << (f - 2)) for _ in range(ROWS)]
        cut = 0
        for _ in range(k):
            if rnd.random() > 1 / 3:
                cut = min(ROWS, cut + rnd.randrange(1, 5))
            for arr, v in zip(out, (sum(g[:cut]), sum(h[:cut]), sum(g), sum(h))):
                arr.append(v)
    return out


def _argmax(plan, gl, hl, gn, hn, k):
    best = []
    for n in range(NODES):
        gains = [Fraction(gl[i] ** 2, hl[i] + plan.lam) + Fraction((gn[i] - gl[i]) ** 2, hn[i] - hl[i] + plan.lam)
                 for i in range(n * k, n * k + k)]
        best.append(gains.index(max(gains)))  # the first of equal maxima, as the reference's strict <
    return best


def tournament_products(k: int, participants: int) -> int:
    """Products of one node's tournament: 2 per comparison, num and den but at the last level, the
    index and min(P - 1, pairs) owners from the second level on."""
    total, width, level = 0, k, 0
    while width > 1:
        half = width // 2
        total += 2 * half + (2 * half if width != 2 else 0)
        if level:
            total += half + min(participants - 1, half)
        width, level = half + width % 2, level + 1
    return total


def test_closed_form_per_candidate():
    # 30 candidates of 2 participants: 120 products for the gains, 132 for the tournament, 8.4 per candidate
    assert 4 * 30 + tournament_products(30, 2) == 252
    # the form GL^2 (HR + L) + GR^2 (HL + L) and four selections per comparison took 5 k + 6 (k - 1)
    assert 5 * 30 + 6 * 29 == 324


@pytest.mark.parametrize("engine", ["bcp", "lattice"])
def test_split_search_counts_and_winners(engine):
    c, pk, link, reveal = _engine(engine)
    plan = FixedPointPlan.of(CONFIG, ROWS)
    k, f = sum(COUNTS), CONFIG.frac_bits
    gl, hl, gn, hn = _left_sums(plan, k, random.Random(7))
    assert any(a == b for a, b in zip(gl[1:], gl[:-1]))  # empty bins: neighbours with equal left sums
    owner = [j for j, m in enumerate(COUNTS) for _ in range(m)]
    num, den = gain_fractions(c, *(c.encrypt_ints(pk, v, f) for v in (gl, hl, gn, hn)), plan.lam, plan.sum_bits)
    gains = dict(link.n)
    assert gains == {"products": 4 * NODES * k, "opened": 5 * NODES * k, "lgt": 0}
    idx, who = best_candidates(c, num, den, NODES, k, plan.sum_bits, owner, len(COUNTS))
    assert link.n["products"] - gains["products"] == NODES * tournament_products(k, len(COUNTS))
    assert link.n["lgt"] == NODES * (k - 1)
    want = _argmax(plan, gl, hl, gn, hn, k)
    assert [int(v) for v in reveal(idx)] == want
    assert [int(v) for v in reveal(who)] == [owner[j] for j in want]
