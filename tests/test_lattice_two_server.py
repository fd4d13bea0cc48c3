"""Lattice (BFV, SIMD) two-server engine: every op equals the plain-integer reference, S's view is
masked (uniform for Mult, blinded for LGT) and flooded, and SSXGB's gradients run on it unchanged."""

from __future__ import annotations

import random

import numpy as np
import pytest
from scipy import stats

pytest.importorskip("tenseal")
pytest.importorskip("zstandard")

from ray_vfl.crypto.lattice import two_server as lat  # noqa: E402
from ray_vfl.crypto.lattice.keys import HIDE_BITS, LatticeKeys, LatticePublic, flood, save_ct, _raw_body  # noqa: E402
from ray_vfl.crypto.lattice.ring import RingParams, uniform_residues  # noqa: E402
from ray_vfl.crypto.two_server.server_s import LocalLink, TwoServerConfig  # noqa: E402
from ray_vfl.errors import CryptoError  # noqa: E402

CFG = TwoServerConfig(value_bits=64, kappa=40)
P_MIN = 1e-4


@pytest.fixture(scope="module")
def world():
    ring = lat.ring_for(CFG)
    keys = LatticeKeys(ring)
    s = lat.LatticeServerS(keys, CFG, record_view=True)
    c = lat.LatticeServerC(LatticePublic(ring, keys.exported), LocalLink(s), CFG)
    return keys, s, c


def _ints(n, bits, seed):
    rnd = random.Random(seed)
    return [rnd.randrange(-(1 << bits) + 1, 1 << bits) for _ in range(n)]


def test_ring_crt_round_trip():
    ring = RingParams.for_bits(200)
    vals = [0, 1, -1, 2**199, -(2**199) + 7]
    assert ring.from_residues(ring.to_residues(vals)) == vals
    assert ring.modulus > 2**201


def test_ops_equal_plain_reference(world):
    keys, s, c = world
    xs, ys = _ints(300, 30, 1), _ints(300, 30, 2)
    x, y = c.encrypt_ints(c.pub, xs), c.encrypt_ints(c.pub, ys)
    p, q = c.mult_many([(x, y), (x, x)], [(30, 30), (30, 30)])
    assert lat.decrypt_ints(keys, p) == [a * b for a, b in zip(xs, ys)]
    assert lat.decrypt_ints(keys, q) == [a * a for a in xs]
    assert lat.decrypt_ints(keys, c.lgt(x, y)) == [int(a < b) for a, b in zip(xs, ys)]
    t = lat.decrypt_ints(keys, c.trunc(c.bcp.with_scale(x, 12), 12))
    assert all(v - (a >> 12) in (0, 1) for v, a in zip(t, xs))
    # take / concat / sub only rewrite slot maps; S sums the terms it opens
    bcp = c.bcp
    ev, od = bcp.take(x, slice(0, 300, 2)), bcp.take(x, slice(1, 300, 2))
    diff = bcp.sub(c.pub, od, ev)
    assert len(diff.terms) == 2
    want = [xs[i + 1] - xs[i] for i in range(0, 300, 2)]
    assert lat.decrypt_ints(keys, diff) == want
    (pd,) = c.mult_many([(diff, bcp.take(y, slice(0, 150)))])
    assert lat.decrypt_ints(keys, pd) == [d * b for d, b in zip(want, ys)]
    assert lat.decrypt_ints(keys, c.regroup(diff)) == want
    assert lat.decrypt_ints(keys, bcp.concat([x, diff])) == xs + want
    # an operand whose terms cover different elements (a 2-term part, then a 1-term part)
    mixed = bcp.concat([diff, bcp.take(x, [5, 7])])
    (pm,) = c.mult_many([(mixed, mixed)])
    assert lat.decrypt_ints(keys, pm) == [v * v for v in want + [xs[5], xs[7]]]
    assert lat.decrypt_ints(keys, c.exp(x, [-3] * 300)) == [-3 * a for a in xs]
    assert lat.decrypt_ints(keys, c.exp(x, list(range(300)))) == [i * a for i, a in enumerate(xs)]


def test_view_is_masked_and_flooded(world):
    """Teeth: fails if C drops Mult's masks (S would open x), LGT's blinding (|v| would be |2d - 1|)
    or the flooding (S's ciphertexts would keep ~100 bits of noise budget)."""
    keys, s, c = world
    xs = _ints(400, 20, 3)
    x = c.encrypt_ints(c.pub, xs)
    s.view.clear()
    s.budgets.clear()
    c.mult(x, x)
    (step, opened), = s.view
    assert step == "mult" and sum(a == b for a, b in zip(opened, xs)) == 0
    # uniform in Z_T: the opened residues mod the first prime fill 16 equal bins as a uniform draw does
    p0 = keys.ring.primes[0]
    counts = np.bincount([(v % p0) * 16 // p0 for v in opened], minlength=16)
    assert stats.chisquare(counts).pvalue > P_MIN
    s.view.clear()
    c.lgt(x, c.encrypt_ints(c.pub, [0] * 400))
    (step, v), = s.view
    assert step == "lgt" and min(abs(t) for t in v) >= 2 ** (CFG.kappa - 2)
    assert max(s.budgets) <= 12, "every ciphertext S decrypts must be flooded (budget left ~ 3 + 3 bits)"


def test_uniform_residues_and_flood_distribution(world):
    keys, _, c = world
    ring = keys.ring
    draws = uniform_residues(ring, 20000)
    for p, row in zip(ring.primes, draws):
        assert row.max() < p
        assert stats.chisquare(np.bincount((row * 10 // p).astype(np.int64), minlength=10)).pvalue > P_MIN
    ct = c.pub.encrypt(0, np.arange(ring.slots, dtype=np.uint64))
    blob = save_ct(ct)
    bits = c.pub.flood_bits
    out = flood(blob, c.pub.moduli, bits)
    start = 32 + 1 + 24 + 16 + 16 + 8
    n = ring.slots
    before = np.frombuffer(_raw_body(blob), np.uint64, count=n, offset=start).astype(object)
    after = np.frombuffer(_raw_body(out), np.uint64, count=n, offset=start).astype(object)
    q = c.pub.moduli[0]
    f = [(int(a) - int(b)) % q for a, b in zip(after, before)]
    f = [v - q if v > q // 2 else v for v in f]  # f mod q0, centered: q0 < 2^bits, so a check of spread only
    assert len(set(f)) > n - 5
    assert c.pub.hide_limit == bits - HIDE_BITS >= 80
    dec = keys.decrypt(0, __import__("ray_vfl.crypto.lattice.keys", fromlist=["load_ct"]).load_ct(keys.contexts[0], out))
    assert np.array_equal(dec, np.arange(n, dtype=np.uint64))


def test_refusals(world):
    keys, s, c = world
    x = c.encrypt_ints(c.pub, [1 << 110])  # far past value_bits = 64 (and past the mask)
    with pytest.raises(CryptoError, match="Trunc input outside"):
        c.trunc(c.bcp.with_scale(x, 8), 8)
    with pytest.raises(CryptoError, match="bounds"):
        c.mult_many([(x, x)], [(65, 1)])


def test_clamped_gradients_run_unchanged(world):
    from ray_vfl.ssxgb.approx import FixedPointPlan, gradient_ints
    from ray_vfl.ssxgb.config import SSXGBConfig
    from ray_vfl.ssxgb.secure_math import clamped_gradients
    keys, _, _ = world
    plan = FixedPointPlan.of(SSXGBConfig(frac_bits=16, kappa=40, key_bits=1024, allow_weak_keys=True), 3)
    cfg = TwoServerConfig(64, 40)
    c = lat.LatticeServerC(LatticePublic(keys.ring, keys.exported), LocalLink(lat.LatticeServerS(keys, cfg)), cfg)
    xm = [-9 << 16, 0, 20 << 16, 3 << 15]
    ym = [0, 1 << 16, 1 << 16, 0]
    g, h = clamped_gradients(c, plan, c.encrypt_ints(c.pub, xm, 16), c.encrypt_ints(c.pub, ym, 16))
    rg, rh = gradient_ints(plan, xm, ym)
    assert all(abs(a - b) <= 3 for a, b in zip(lat.decrypt_ints(keys, g), rg))
    assert all(abs(a - b) <= 3 for a, b in zip(lat.decrypt_ints(keys, h), rh))
