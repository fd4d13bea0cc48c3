"""Laws of the BCP cryptosystem (hypothesis properties, 1024-bit keys by explicit opt-in)."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ray_vfl.crypto import CipherArray
from ray_vfl.crypto.two_server.bcp import BCPMasterKey, joint_key, keygen, random_safe_prime, setup
from ray_vfl.crypto.two_server.bcp_arrays import BCP
from ray_vfl.errors import (
    ConfigError,
    CryptoError,
    OverflowEncodingError,
    SecurityWarning,
)

KEY_BITS = 1024
FAST = settings(max_examples=10, deadline=None)
floats = st.floats(-1e6, 1e6, allow_nan=False, width=64)
ints = st.integers(-(2**200), 2**200)


@pytest.fixture(scope="module")
def world():
    """One Setup, three user keys, and a second Setup (keygen is the slow part)."""
    params, mk = setup(KEY_BITS, allow_weak=True)
    users = [keygen(params) for _ in range(3)]
    other_params, other_mk = setup(KEY_BITS, allow_weak=True)
    return params, mk, users, keygen(other_params), other_mk


@st.composite
def pairs(draw):
    n = draw(st.integers(1, 6))
    return (np.array(draw(st.lists(floats, min_size=n, max_size=n))),
            np.array(draw(st.lists(floats, min_size=n, max_size=n))))


bcp = BCP(frac_bits=40)


@FAST
@given(ab=pairs())
def test_add(world, ab):
    _, mk, users, _, _ = world
    (pk, sk), (a, b) = users[0], ab
    c = bcp.add(pk, bcp.encrypt(pk, a), bcp.encrypt(pk, b))
    want = bcp.fixed_point.rounded(a) + bcp.fixed_point.rounded(b)
    np.testing.assert_array_equal(bcp.decrypt(sk, c), want)
    np.testing.assert_array_equal(bcp.mdecrypt(mk, pk, c), want)


@FAST
@given(a=st.lists(ints, min_size=1, max_size=6), data=st.data())
def test_scalar_multiple_negation_and_sub(world, a, data):
    (pk, sk) = world[2][1]
    k = data.draw(st.lists(st.integers(-(2**64), 2**64), min_size=len(a), max_size=len(a)))
    c = bcp.encrypt_ints(pk, a)
    assert bcp.decrypt_ints(sk, bcp.mul_const(pk, c, np.array(k, dtype=object))) == [x * y for x, y in zip(a, k)]
    assert bcp.decrypt_ints(sk, bcp.neg(pk, c)) == [-x for x in a]
    assert bcp.decrypt_ints(sk, bcp.sub(pk, c, bcp.neg(pk, c))) == [2 * x for x in a]


@FAST
@given(m=st.lists(ints, min_size=1, max_size=4))
def test_mdec_decrypts_every_user_key_and_the_joint_key(world, m):
    _, mk, users, _, _ = world
    for pk, _ in [*users, (joint_key([u[0] for u in users]), None)]:
        assert bcp.mdecrypt_ints(mk, pk, bcp.encrypt_ints(pk, m)) == m


def test_joint_key_decrypts_with_the_sum_of_secrets(world):
    _, _, users, _, _ = world
    from ray_vfl.crypto.two_server.bcp import BCPSecretKey
    jpk = joint_key([u[0] for u in users])
    jsk = BCPSecretKey(jpk, sum(u[1].a for u in users))
    assert bcp.decrypt_ints(jsk, bcp.encrypt_ints(jpk, [7, -7])) == [7, -7]


def test_encryption_is_randomised_and_pickles_compactly(world):
    pk, sk = world[2][0]
    a, b = bcp.encrypt_ints(pk, [1, 1]), bcp.encrypt_ints(pk, [1])
    assert not np.array_equal(a.data[0], a.data[1]) and not np.array_equal(a.data[0], b.data[0])
    r = bcp.rerandomize(pk, b)
    assert not np.array_equal(r.data, b.data) and bcp.decrypt_ints(sk, r) == [1]
    back = pickle.loads(pickle.dumps(a))
    assert isinstance(back, CipherArray) and back._ints is None and back.tag == "bcp:f0"
    assert a.data.shape == (2, 2 * 256) and len(pickle.dumps(a)) < a.nbytes + 300
    assert bcp.decrypt_ints(sk, back) == [1, 1]


def test_wrong_key_and_unknown_key_are_refused(world):
    params, mk, users, (opk, _), _ = world
    (pk, sk), (pk2, sk2) = users[0], users[1]
    c = bcp.encrypt_ints(pk, [3])
    with pytest.raises(CryptoError, match="keys must not be mixed"):
        bcp.decrypt(sk2, c)
    forged = CipherArray(c.data, pk2.key_id, c.tag)  # relabelled: the decryption itself fails
    with pytest.raises(CryptoError, match="does not decrypt under this secret key"):
        bcp.decrypt_ints(sk2, forged)
    with pytest.raises(CryptoError, match="another BCP Setup"):
        bcp.mdecrypt_ints(mk, opk, bcp.encrypt_ints(opk, [3]))
    minus_one = type(pk)(params, params.nsquare - 1)  # order 2: -1 is not a square mod p = 3 (mod 4)
    with pytest.raises(CryptoError, match="not an element of <g>"):
        bcp.mdecrypt_ints(mk, minus_one, CipherArray(c.data, minus_one.key_id, c.tag))
    with pytest.raises(CryptoError, match="keys must not be mixed"):
        bcp.add(pk, c, bcp.encrypt_ints(pk2, [1]))
    with pytest.raises(CryptoError, match="tag"):
        bcp.decrypt_ints(sk, CipherArray(c.data, c.key_id, "num:f40"))
    with pytest.raises(CryptoError, match="does not match N"):
        BCPMasterKey(params, mk.p1, mk.q1 + 2)


def test_ranges_and_key_policy(world):
    pk, sk = world[2][0]
    n = pk.params.n
    top = n // 3
    assert bcp.decrypt_ints(sk, bcp.encrypt_ints(pk, [top, -top, 0])) == [top, -top, 0]
    with pytest.raises(CryptoError, match="N // 3"):
        bcp.encrypt_ints(pk, [top + 1])
    with pytest.raises(OverflowEncodingError):
        bcp.decrypt_ints(sk, bcp.add(pk, *(bcp.encrypt_ints(pk, [top]),) * 2))
    with pytest.raises(ConfigError, match="allow_weak=True"):
        setup(1024)
    with pytest.warns(SecurityWarning, match="80 bits"):
        setup(1024, allow_weak=True)
    with pytest.raises(ConfigError):
        setup(512, allow_weak=True)


def test_safe_primes_and_order_of_g(world):
    params, mk, _, _, _ = world
    import gmpy2
    for x in (mk.p, mk.q):
        assert gmpy2.is_prime(x) and gmpy2.is_prime((x - 1) // 2)
    n2, order = params.nsquare, params.n * mk.p1 * mk.q1
    assert pow(params.g, order, n2) == 1  # order divides p p' q q' ...
    for f in (mk.p, mk.q, mk.p1, mk.q1):  # ... and no maximal divisor of it kills g
        assert pow(params.g, order // f, n2) != 1
    assert random_safe_prime(80).bit_length() == 80


class _ListPool:
    """A stand-in for TaskPool: chunks and maps in-process (the pool contract)."""

    def __init__(self):
        self.calls = 0

    def chunks(self, n, min_chunk=256):
        return [slice(0, n // 2), slice(n // 2, n)]

    def map(self, fn, chunks, *shared):
        self.calls += 1
        return [fn(c, *shared) for c in chunks]


def test_pool_paths_agree(world, monkeypatch):
    import ray_vfl.crypto.two_server.bcp_arrays as arrays
    monkeypatch.setattr(arrays, "min_chunk", lambda pk: 4)  # small arrays take the pool path too
    _, mk, users, _, _ = world
    pk, sk = users[0]
    pool = _ListPool()
    m = list(range(-5, 6))
    c = bcp.encrypt_ints(pk, m, pool=pool)
    assert bcp.decrypt_ints(sk, c, pool=pool) == m
    assert bcp.mdecrypt_ints(mk, pk, c, pool=pool) == m
    assert bcp.mdecrypt_small(mk, pk, c, 8, pool=pool) == m
    ks = [3, -2, 0, 1, 7, -1, 2, 5, -4, 6, 1]
    assert bcp.decrypt_ints(sk, bcp.mul_const(pk, c, ks, pool=pool)) == [a * b for a, b in zip(m, ks)]
    assert pool.calls == 5


def test_small_mdec_reads_bounded_values_mod_p_and_says_when_it_cannot(world):
    """mDec mod p alone equals the full mDec on values below the stated bound; a bound near |p| falls
    back to the full mDec; a value beyond the bound comes out reduced (callers range-check)."""
    from ray_vfl.crypto.two_server.bcp_master import master_context
    _, mk, users, _, _ = world
    pk, _ = users[1]
    top = master_context(mk).small_bound_bits()
    m = [0, 1, -1, (1 << 200) - 3, -(1 << 200) + 5, 12345]
    c = bcp.encrypt_ints(pk, m)
    assert bcp.mdecrypt_small(mk, pk, c, 201) == m == bcp.mdecrypt_small(mk, pk, c, top)
    big = [pk.params.n // 3]
    assert bcp.mdecrypt_small(mk, pk, bcp.encrypt_ints(pk, big), top) == big  # full mDec: still right
    assert bcp.mdecrypt_small(mk, pk, bcp.encrypt_ints(pk, big), 201) != big


def test_batched_calls_keep_each_jobs_key_and_order(world):
    """bcp_batches: jobs under two keys, interleaved, come back in the order given, each under its own
    key, in one BCP call per key."""
    from ray_vfl.crypto.two_server.bcp_batches import encrypt_many, mdecrypt_small_many, mul_const_many
    _, mk, users, _, _ = world
    (pa, sa), (pb, sb) = users[0], users[1]
    jobs = [(pa, [1, -2]), (pb, [3]), (pa, [4, 5, -6]), (pb, [])]
    out = encrypt_many(bcp, jobs)
    assert [c.key_id for c in out] == [pk.key_id for pk, _ in jobs]
    assert [bcp.decrypt_ints(sk, c) for c, sk in zip(out, [sa, sb, sa, sb])] == [m for _, m in jobs]
    assert mdecrypt_small_many(bcp, mk, [(pk, c) for (pk, _), c in zip(jobs, out)], 8) == [m for _, m in jobs]
    scaled = mul_const_many(bcp, [(pa, out[0], [2, 3]), (pb, out[1], [-1]), (pa, out[2], [0, 1, 2])])
    assert [bcp.decrypt_ints(sk, c) for c, sk in zip(scaled, [sa, sb, sa])] == [[2, -6], [-3], [0, 5, -12]]
