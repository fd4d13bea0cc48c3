"""Two-server sub-protocols: correct results, one round trip per array, and S's view hides the inputs."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from ray_vfl.crypto import CipherArray
from ray_vfl.crypto.two_server.bcp import BCPPublicKey, keygen, setup
from ray_vfl.crypto.two_server.reciprocal import Newton, reciprocal
from ray_vfl.crypto.two_server.server_s import LocalLink, ServerS, TwoServerConfig
from ray_vfl.crypto.two_server.server_c import ServerC
from ray_vfl.errors import ConfigError, CryptoError

KEY_BITS = 1024
CFG = TwoServerConfig(value_bits=64, kappa=40)
L = CFG.value_bits
FAST = settings(max_examples=8, deadline=None)
small = st.integers(-(2**L) + 1, 2**L - 1)
P_MIN = 1e-4  # KS / binomial tests: a false alarm once in 10,000 runs


@pytest.fixture(scope="module")
def world():
    params, mk = setup(KEY_BITS, allow_weak=True)
    users = [keygen(params) for _ in range(3)]
    s = ServerS(mk, CFG, record_view=True)
    c = ServerC(params, LocalLink(s), CFG)
    jpk = c.register([pk for pk, _ in users])
    return params, mk, users, s, c, jpk


def opened(world, c_arr):
    _, mk, _, _, c, _ = world
    return c.bcp.mdecrypt_ints(mk, c.key_of(c_arr), c_arr)


def trips(c, fn, *args):
    before = c.link.round_trips
    out = fn(*args)
    return out, c.link.round_trips - before


# -- correctness ------------------------------------------------------------------------------------
@FAST
@given(data=st.data())
def test_mult_and_lgt_on_random_inputs(world, data):
    c, jpk = world[4], world[5]
    n = data.draw(st.integers(1, 6))
    x = data.draw(st.lists(small, min_size=n, max_size=n))
    y = data.draw(st.lists(st.one_of(small, st.sampled_from([0, 2**L - 1, -(2**L) + 1])), min_size=n, max_size=n))
    y[0] = x[0]  # an equal pair in every example
    ex, ey = c.encrypt_ints(jpk, x), c.encrypt_ints(jpk, y)
    prod, rounds = trips(c, c.mult, ex, ey)
    assert opened(world, prod) == [a * b for a, b in zip(x, y)] and rounds == 1
    lt, rounds = trips(c, c.lgt, ex, ey)
    assert opened(world, lt) == [int(a < b) for a, b in zip(x, y)] and rounds == 1
    assert opened(world, c.lgt(ey, ex)) == [int(a > b) for a, b in zip(x, y)]


def test_edges_and_local_ops(world):
    c, jpk = world[4], world[5]
    top = 2**L - 1
    x = [0, 0, top, -top, top, -top, 1, -1]
    y = [0, 1, top, -top, -top, top, -1, 1]
    ex, ey = c.encrypt_ints(jpk, x), c.encrypt_ints(jpk, y)
    assert opened(world, c.lgt(ex, ey)) == [int(a < b) for a, b in zip(x, y)]
    assert opened(world, c.mult(ex, ey)) == [a * b for a, b in zip(x, y)]
    assert opened(world, c.add(ex, ey)) == [a + b for a, b in zip(x, y)]
    assert opened(world, c.sub(ex, ey)) == [a - b for a, b in zip(x, y)]
    assert opened(world, c.neg(ex)) == [-a for a in x]
    assert opened(world, c.exp(ex, [3] * len(x))) == [3 * a for a in x]


def test_fixed_point_scales(world):
    c, jpk = world[4], world[5]
    a, b = c.encrypt(jpk, np.array([1.5, -0.25])), c.encrypt(jpk, np.array([2.0, 4.0]))
    prod = c.mult(a, b)
    assert prod.tag == "bcp:f80"
    np.testing.assert_array_equal(c.bcp.mdecrypt(world[1], jpk, prod), [3.0, -1.0])
    assert opened(world, c.lgt(a, b)) == [1, 1]


def test_key_prod_and_trans_dec(world):
    _, _, users, _, c, jpk = world
    arrays = [c.encrypt_ints(pk, [i, -i, 10**30]) for i, (pk, _) in enumerate(users)]
    joint, rounds = trips(c, c.key_prod, arrays)
    assert rounds == 1 and all(j.key_id == jpk.key_id for j in joint)
    assert [opened(world, j) for j in joint] == [[i, -i, 10**30] for i in range(3)]
    total = c.add(c.add(joint[0], joint[1]), joint[2])
    for pk, sk in users:
        back, rounds = trips(c, c.trans_dec, total, pk)
        assert rounds == 1 and back.key_id == pk.key_id
        assert c.bcp.decrypt_ints(sk, back) == [3, -3, 3 * 10**30]


@pytest.mark.parametrize("k", [1, 2, 5, 8])
def test_sargmax(world, k):
    c, jpk = world[4], world[5]
    rng = np.random.default_rng(k)
    v = [int(x) for x in rng.integers(-50, 50, size=k)]
    if k >= 5:
        v[1] = v[4] = max(v) + 1  # a tie: the first index wins, as numpy.argmax
    (idx, mx), rounds = trips(c, c.sargmax, c.encrypt_ints(jpk, v))
    assert opened(world, idx) == [int(np.argmax(v))] and opened(world, mx) == [max(v)]
    assert rounds == 2 * int(np.ceil(np.log2(k)))


def test_one_round_trip_per_array(world):
    c, jpk = world[4], world[5]
    x = c.encrypt_ints(jpk, list(range(-20, 20)))
    for fn in (lambda: c.mult(x, x), lambda: c.lgt(x, x), lambda: c.trans_dec(x, world[2][0][0]),
               lambda: c.mult_many([(x, x), (x, x)])):
        assert trips(c, fn)[1] == 1


# -- refusals ---------------------------------------------------------------------------------------
def test_out_of_range_and_unknown_keys_are_refused(world):
    params, _, _, s, c, jpk = world
    big = c.encrypt_ints(jpk, [2 ** (L + 2)])
    one = c.encrypt_ints(jpk, [0])
    with pytest.raises(CryptoError, match="LGT input outside"):
        c.lgt(big, one)
    with pytest.raises(CryptoError, match="Mult input outside"):
        c.mult(c.encrypt_ints(jpk, [-(2 ** CFG.mask_bits) - 2**L]), one)  # beyond what any mask covers
    stranger, _ = keygen(params)
    with pytest.raises(CryptoError, match="does not know"):
        c.mult(c.encrypt_ints(stranger, [1]), c.encrypt_ints(stranger, [1]))
    c.keys.pop(stranger.key_id, None)
    with pytest.raises(CryptoError, match="does not know key"):  # S refuses even if C forwards it
        s.lgt_step(c.encrypt_ints(stranger, [1]))
    with pytest.raises(CryptoError, match="not an element of <g>"):
        s.register_step([params.nsquare - 1])
    with pytest.raises(CryptoError, match="equal length"):
        c.mult(one, c.encrypt_ints(jpk, [1, 2]))
    with pytest.raises(CryptoError, match="outside its bound"):  # a mask of 16 + kappa bits cannot cover 2^60
        c.mult_many([(big := c.encrypt_ints(jpk, [2**60]), big)], [(16, 16)])
    with pytest.raises(CryptoError, match="bits must hold"):
        s.mult_step([one], [(0, 0)], bits=[L + 1])
    with pytest.raises(ConfigError, match="exceeds the 1024-bit key"):
        ServerC(params, LocalLink(s), TwoServerConfig(value_bits=1000, kappa=40))
    with pytest.raises(ConfigError):
        TwoServerConfig(kappa=20)


# -- what S sees ------------------------------------------------------------------------------------
def _view(s, step, fn):
    s.view.clear()
    fn()
    return [v for name, vals in s.view if name == step for v in vals]


def test_mult_view_is_independent_of_the_inputs(world):
    """S opens x + r1 with r1 uniform in [0, 2^(l+kappa)): for the extreme inputs -2^l+1 and 2^l-1 the
    opened values are indistinguishable (KS), and each is uniform on its mask range."""
    _, _, _, s, c, jpk = world
    n, top, span = 400, 2**L - 1, 2 ** CFG.mask_bits
    seen = {}
    for x in (-top, top):
        ex = c.encrypt_ints(jpk, [x] * n)
        opened_vals = _view(s, "mult", lambda ex=ex: c.mult(ex, ex))
        seen[x] = np.array([(v - x) / span for v in opened_vals[:n]], dtype=float)
        assert stats.kstest(seen[x], "uniform").pvalue > P_MIN
    raw = {x: np.array([float(v) for v in seen[x] * span + x]) for x in seen}
    assert stats.ks_2samp(raw[-top], raw[top]).pvalue > P_MIN


def test_mult_with_bounds_masks_each_operand_by_its_bound_plus_kappa(world):
    """Mult with stated bounds: the products are exact (negatives and the bounds' edges included), S opens
    x + r with r uniform in [0, 2^(b + kappa)) for each operand's own bound b, and bounds outside [1, l]
    are refused."""
    _, _, _, s, c, jpk = world
    n = 300
    xs = [1, -1, 0, 2**9 - 1, -(2**9) + 1] + [int(v) for v in np.random.default_rng(3).integers(-511, 512, n - 5)]
    bits = [0, 1] * (n // 2)
    ex, eb = c.encrypt_ints(jpk, xs), c.encrypt_ints(jpk, bits)
    opened_vals = _view(s, "mult", lambda: c.mult_many([(eb, ex)], [(1, 10)]))
    assert len(opened_vals) == 2 * n  # both operands were opened: the bits first, then xs
    mask_b = np.array([(v - b) / 2 ** (1 + CFG.kappa) for v, b in zip(opened_vals[:n], bits)], dtype=float)
    mask_x = np.array([(v - x) / 2 ** (10 + CFG.kappa) for v, x in zip(opened_vals[n:2 * n], xs)], dtype=float)
    for m in (mask_b, mask_x):
        assert m.min() >= 0 and m.max() < 1 and stats.kstest(m, "uniform").pvalue > P_MIN
    assert opened(world, c.mult_many([(eb, ex)], [(1, 10)])[0]) == [b * x for b, x in zip(bits, xs)]
    for bad in ([(0, 10)], [(1, L + 1)], [(1, 10), (1, 10)], [(1.5, 10)]):
        with pytest.raises(CryptoError, match="Mult bounds"):
            c.mult_many([(eb, ex)], bad)


def test_an_array_in_several_products_is_masked_and_opened_once(world):
    """A square and a selection bit in three products (once on the right) in one Mult round: the products are exact,
    S opens each distinct array once (4 arrays, not 8), and S refuses index pairs that do not fit."""
    _, _, _, s, c, jpk = world
    n = 50
    rng = np.random.default_rng(7)
    x, bits, ys = [int(v) for v in rng.integers(-999, 1000, n)], [int(v) for v in rng.integers(0, 2, n)], \
        [[int(v) for v in rng.integers(-999, 1000, n)] for _ in range(2)]
    ex, eb, ey0, ey1 = (c.encrypt_ints(jpk, v) for v in (x, bits, *ys))
    pairs = [(ex, ex), (eb, ey0), (eb, ey1), (ey0, eb)]
    out = []
    opened_vals = _view(s, "mult", lambda: out.extend(c.mult_many(pairs, [(10, 10), (1, 10), (1, 10), (10, 1)])))
    assert len(opened_vals) == 4 * n
    assert opened(world, out[0]) == [v * v for v in x]
    for got, y in zip(out[1:], (ys[0], ys[1], ys[0])):
        assert opened(world, got) == [b * v for b, v in zip(bits, y)]
    for bad in ([(0, 2)], [(0, 0)], [(0, 1.0)], [(0,)]):
        with pytest.raises(CryptoError, match="mult_step"):
            s.mult_step([ex, ey0], bad)


def test_an_array_kept_for_the_next_mult_is_masked_and_opened_once(world):
    """``keep``: an array of one Mult that the next multiplies again is masked and opened in the first
    call only, the second call's products are exact, what is kept lasts one call, and bad keep/reuse
    requests are refused."""
    _, _, _, s, c, jpk = world
    n = 40
    rng = np.random.default_rng(11)
    x, y, z = ([int(v) for v in rng.integers(-999, 1000, n)] for _ in range(3))
    ex, ey, ez = (c.encrypt_ints(jpk, v) for v in (x, y, z))
    first, second, third = [], [], []
    seen = _view(s, "mult", lambda: first.extend(c.mult_many([(ex, ey)], [(10, 10)], keep=(ey,))))
    seen += _view(s, "mult", lambda: second.extend(c.mult_many([(ez, ey), (ey, ey)], [(10, 10)] * 2)))
    assert len(seen) == 3 * n  # ex, ey, ez: ey is not sent again
    assert opened(world, first[0]) == [a * b for a, b in zip(x, y)]
    assert opened(world, second[0]) == [a * b for a, b in zip(z, y)] and opened(world, second[1]) == [b * b for b in y]
    again = _view(s, "mult", lambda: third.extend(c.mult_many([(ez, ey)], [(10, 10)])))
    assert len(again) == 2 * n and opened(world, third[0]) == [a * b for a, b in zip(z, y)]  # kept for one call only
    with pytest.raises(CryptoError, match="keep only arrays it multiplies"):
        c.mult_many([(ex, ey)], [(10, 10)], keep=(ez,))
    with pytest.raises(CryptoError, match="did not keep"):
        s.mult_step([ex], [(0, 1)], [], [10**6])
    with pytest.raises(CryptoError, match="keep must be"):
        s.mult_step([ex, ey], [(0, 1)], [(5, 1)], [])


def test_key_switch_view_is_uniform(world):
    _, _, users, s, c, jpk = world
    n = 300
    for m in (0, 10**40):
        ex = c.encrypt_ints(jpk, [m] * n)
        vals = _view(s, "switch_key", lambda ex=ex: c.trans_dec(ex, users[0][0]))
        assert stats.kstest(np.array(vals, dtype=float) / float(c.params.n), "uniform").pvalue > P_MIN


def test_lgt_view_hides_the_outcome(world):
    """The sign S sees is a fair coin whatever [x < y] is, and inputs with the same |2(y - x) - 1| but
    opposite outcomes give S identically distributed values (KS). (Its magnitude does follow
    |x - y|: the leakage stated in the module docstring.)"""
    _, _, _, s, c, jpk = world
    n = 400
    views = {}
    for x, y in ((0, 5), (4, 0)):  # d = 9 (x < y) and d = -9 (x > y)
        ex, ey = c.encrypt_ints(jpk, [x] * n), c.encrypt_ints(jpk, [y] * n)
        views[(x, y)] = np.array([float(v) for v in _view(s, "lgt", lambda ex=ex, ey=ey: c.lgt(ex, ey))])
        positives = int((views[(x, y)] > 0).sum())
        assert stats.binomtest(positives, n, 0.5).pvalue > P_MIN
    assert stats.ks_2samp(views[(0, 5)], views[(4, 0)]).pvalue > P_MIN
    assert np.all(np.abs(views[(0, 5)]) < CFG.lgt_bound)


def test_lgt_elements_reach_s_in_a_shuffled_order(world):
    """The magnitude S reads off each LGT value belongs to no element S can name: 31 comparisons whose
    differences grow by a factor 4 each (bit lengths 2 apart, more than the blinding's spread) arrive in
    an order that is not theirs (a sorted arrival has probability 1 / 31!), and the results come back in
    C's order."""
    _, _, _, s, c, jpk = world
    y = [4**i for i in range(31)]
    ex, ey = c.encrypt_ints(jpk, [0] * 31), c.encrypt_ints(jpk, y)
    seen = _view(s, "lgt", lambda: opened(world, c.lgt(ex, ey)))
    sizes = [abs(v).bit_length() for v in seen]
    assert sizes != sorted(sizes)
    assert opened(world, c.lgt(ex, ey)) == [1] * 31 and opened(world, c.lgt(ey, ex)) == [0] * 31


def test_payloads_are_plain_values(world):
    """Everything C sends S is a CipherArray (bytes, key id, tag), a key id or an int: no secrets."""
    _, _, _, s, c, jpk = world
    sent = []

    class Spy(LocalLink):
        def ask(self, step, *payload):
            sent.append(payload)
            return super().ask(step, *payload)

    spy = ServerC(c.params, Spy(s), CFG)
    spy.keys, spy.joint = dict(c.keys), c.joint
    x = spy.encrypt_ints(jpk, [1, 2])
    spy.mult(x, x), spy.lgt(x, x), spy.trans_dec(x, world[2][0][0])

    def plain(v):
        if isinstance(v, (list, tuple)):
            return all(plain(u) for u in v)
        return isinstance(v, (CipherArray, bytes, int))
    assert sent and all(plain(p) for p in sent)
    assert all(isinstance(k, BCPPublicKey) for k in c.keys.values())


def test_randomness_s_can_compute_is_uniform(world):
    """S can compute the encryption exponent r mod p of anything it receives (ell_p(A) / ell_p(g));
    for LGT and Mult requests it must be uniform, not a function of C's secret sign and masks."""
    from ray_vfl.crypto.two_server.bcp import _ell
    from ray_vfl.crypto.two_server.bcp_master import master_context
    from ray_vfl.crypto.two_server.bcp_arrays import unwrap
    _, mk, _, s, c, jpk = world
    ctx = master_context(mk)
    p, p2 = ctx.p, ctx.p2
    got = []

    class Spy(LocalLink):
        def ask(self, step, *payload):
            if step in (ServerS.lgt_step, ServerS.mult_step):
                arrays = [payload[0]] if step is ServerS.lgt_step else payload[0]
                for arr in arrays:
                    for a in unwrap(jpk, arr)[0]:
                        got.append(float(_ell(a, p, p2) * ctx.gp_inv % p) / float(p))
            return super().ask(step, *payload)

    spy = ServerC(c.params, Spy(s), CFG)
    spy.keys, spy.joint = dict(c.keys), c.joint
    x, y = spy.encrypt_ints(jpk, [0] * 200), spy.encrypt_ints(jpk, [5] * 200)
    spy.lgt(x, y), spy.lgt(y, x), spy.mult(spy.mult(x, y), y)
    assert len(got) == 1200 and stats.kstest(np.array(got), "uniform").pvalue > P_MIN  # every Mult operand


# -- Trunc and Reciprocal (SSXGB's fixed point and secure division) ---------------------------------
@FAST
@given(xs=st.lists(small, min_size=1, max_size=6), k=st.integers(1, 30))
def test_trunc_is_floor_within_one_unit(world, xs, k):
    c, jpk = world[4], world[5]
    (out,), n = trips(c, c.trunc_many, [c.encrypt_ints(jpk, xs, 30)], k)
    assert n == 1 and out.tag == f"bcp:f{30 - k}"
    assert all(v - (x >> k) in (0, 1) for v, x in zip(opened(world, out), xs))


def test_trunc_view_is_masked_and_refusals(world):
    c, s, jpk = world[4], world[3], world[5]
    s.view.clear()
    c.trunc(c.encrypt_ints(jpk, [0, 1, -1, 2**L - 1], 10), 5)
    (step, vals), = s.view
    assert step == "trunc" and min(vals) >= 2**L  # x + r with r of l + kappa bits: never the bare value
    with pytest.raises(CryptoError, match="shift"):
        c.trunc(c.encrypt_ints(jpk, [1], 3), 4)


@FAST
@given(ds=st.lists(st.integers(1, 2**10), min_size=1, max_size=4), data=st.data())
def test_reciprocal_within_its_stated_error(world, ds, data):
    """Newton's reciprocal on masked values: within the proven relative error of 2^J / d for divisors in
    their stated ranges, in 3 rounds per step."""
    c, jpk = world[4], world[5]
    lo = [data.draw(st.integers(-(-d // 8), d)) for d in ds]
    hi = [data.draw(st.integers(d, a * 8)) for d, a in zip(ds, lo)]
    newton = Newton(1, 2**13, 8, 12, scale_bits=28)  # l = 64 leaves room for Y E below 2^(2 J + 3)
    y, n = trips(c, reciprocal, c, c.encrypt_ints(jpk, ds), newton, lo, hi, 7)
    assert n == newton.rounds and y.tag == "bcp:f7" and newton.error <= 2**-12
    assert all(abs(v * d / 2**28 - 1) <= newton.error for v, d in zip(opened(world, y), ds))


def test_reciprocal_refuses_what_it_cannot_bound(world):
    c, jpk = world[4], world[5]
    with pytest.raises(CryptoError, match="1 <= lo <= hi"):
        Newton(0, 10, 2, 20)
    with pytest.raises(CryptoError, match="not within"):  # an element's range wider than the ratio
        reciprocal(c, c.encrypt_ints(jpk, [5]), Newton(1, 100, 2, 10, scale_bits=30), [1], [5])
    with pytest.raises(CryptoError, match="value_bits"):
        reciprocal(c, c.encrypt_ints(jpk, [5]), Newton(1, 100, 2, 10, scale_bits=40), [4], [5])
