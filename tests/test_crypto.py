"""Laws every crypto backend must satisfy (hypothesis properties, 1024-bit keys)."""

from __future__ import annotations

import pickle
import secrets

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ray_vfl.crypto import (
    CipherArray,
    FixedPoint,
    GHPacking,
    available_backends,
    get_backend,
)
from ray_vfl.errors import ConfigError, CryptoError, DataError, OverflowEncodingError

BACKENDS = [b for b in ("plain", "phe", "paillier", "ou") if b in available_backends()]
ENCRYPTED = [b for b in BACKENDS if b != "plain"]
KEY_BITS = 1024
ATOL = 2.0**-36  # a few fixed-point roundings of 2**-41 each

_KEYS: dict[tuple[str, int], tuple] = {}


def keys(name: str, which: int = 0):
    """Key pairs generated once per module (keygen is slow)."""
    if (name, which) not in _KEYS:
        _KEYS[(name, which)] = get_backend(name).generate_keys(KEY_BITS, allow_weak=True)
    return _KEYS[(name, which)]


def close(name: str, got: np.ndarray, want: np.ndarray, atol: float = ATOL) -> None:
    if name == "plain":
        np.testing.assert_array_equal(got, want)
    else:
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=atol)


floats = st.floats(-1e3, 1e3, allow_nan=False, width=64)
vectors = st.lists(floats, min_size=1, max_size=8)
FAST = settings(max_examples=12, deadline=None)
SLOW = settings(max_examples=5, deadline=None)


@st.composite
def pairs(draw):
    n = draw(st.integers(1, 8))
    a = draw(st.lists(floats, min_size=n, max_size=n))
    b = draw(st.lists(floats, min_size=n, max_size=n))
    return np.array(a), np.array(b)


@st.composite
def bucket_cases(draw):
    n = draw(st.integers(1, 12))
    f = draw(st.integers(1, 3))
    nb = draw(st.integers(1, 10))
    two_d = draw(st.booleans())
    vals = np.array(draw(st.lists(floats, min_size=n, max_size=n)))
    shape = (n, f) if two_d else (n,)
    ks = np.array(draw(st.lists(st.integers(-1, nb - 1), min_size=int(np.prod(shape)),
                                max_size=int(np.prod(shape))))).reshape(shape)
    return vals, ks.astype(np.int64), nb


def bincount(vals: np.ndarray, ks: np.ndarray, nb: int, width: int = 1) -> np.ndarray:
    k2 = ks.reshape(len(vals), -1)
    keep = k2 >= 0
    rows = np.broadcast_to(np.arange(len(vals))[:, None], k2.shape)[keep]
    return np.bincount(k2[keep], weights=vals[rows], minlength=nb)


# -- homomorphic laws ---------------------------------------------------------------------------
@pytest.mark.parametrize("name", BACKENDS)
@FAST
@given(ab=pairs())
def test_add_sub_are_homomorphic(name, ab):
    a, b = ab
    be = get_backend(name)
    pk, sk = keys(name)
    ca, cb = be.encrypt(pk, a), be.encrypt(sk, b)  # b: the key owner's (CRT) encryption
    close(name, be.decrypt(sk, be.add(pk, ca, cb)), a + b)
    close(name, be.decrypt(sk, be.sub(pk, ca, cb)), a - b)


@pytest.mark.parametrize("name", BACKENDS)
@FAST
@given(a=vectors, data=st.data())
def test_mul_plain(name, a, data):
    a = np.array(a)
    k = np.array(data.draw(st.lists(st.integers(-1000, 1000), min_size=len(a), max_size=len(a))), dtype=np.int64)
    be = get_backend(name)
    pk, sk = keys(name)
    close(name, be.decrypt(sk, be.mul_plain(pk, be.encrypt(pk, a), k)), a * k, atol=1000 * ATOL)


@pytest.mark.parametrize("name", BACKENDS)
@FAST
@given(case=bucket_cases())
def test_bucket_sum_equals_bincount(name, case):
    vals, ks, nb = case
    be = get_backend(name)
    pk, sk = keys(name)
    out = be.bucket_sum(pk, be.encrypt(pk, vals), ks, nb)
    assert len(out) == nb
    close(name, be.decrypt(sk, out), bincount(vals, ks, nb), atol=40 * ATOL)


@pytest.mark.parametrize("name", BACKENDS)
@SLOW
@given(case=bucket_cases(), data=st.data())
def test_gh_round_trip(name, case, data):
    g, ks, nb = case
    g = g / 1e3
    h = np.abs(np.array(data.draw(st.lists(floats, min_size=len(g), max_size=len(g))))) / 1e3
    be = get_backend(name)
    pk, sk = keys(name)
    c = be.encrypt_gh(pk, g, h)
    assert len(c) == len(g)
    parent = be.bucket_sum(pk, c, ks, nb)
    left_rows = np.arange(len(g)) % 2 == 0
    left = be.bucket_sum(pk, be.take(c, np.flatnonzero(left_rows)), ks[left_rows], nb)
    right = be.rerandomize(pk, be.sub(pk, parent, left))  # the histogram subtraction trick
    want = {}
    for v, vals in (("g", g), ("h", h)):
        want[v] = [bincount(vals, ks, nb), bincount(np.where(left_rows, vals, 0.0), ks, nb)]
        want[v].append(want[v][0] - want[v][1])  # numpy does the same float subtraction as plain
    for i, cipher in enumerate((parent, left, right)):
        G, H = be.decrypt_gh(sk, cipher)
        close(name, G, want["g"][i], atol=40 * ATOL)
        close(name, H, want["h"][i], atol=40 * ATOL)
    G, H = be.decrypt_gh(sk, be.concat([be.take(c, [0]), c]))
    close(name, G, np.concatenate([g[:1], g]))
    close(name, H, np.concatenate([h[:1], h]))


@pytest.mark.parametrize("name", ENCRYPTED)
def test_gh_packing_exact_at_edges_and_overflow_raises(name):
    be = get_backend(name, max_rows=4, gradient_bound=1.0)
    pk, sk = keys(name)
    g = np.array([1.0, -1.0, 1.0, 1.0, 1.0, 1.0])
    h = np.array([-1.0, -1.0, -1.0, -1.0, 2.0**-40, 1.0])
    c = be.encrypt_gh(pk, g, h)
    G, H = be.decrypt_gh(sk, be.bucket_sum(pk, c, np.array([0, 0, 1, 1, 1, 1]), 3))
    np.testing.assert_array_equal(G, [0.0, 4.0, 0.0])
    np.testing.assert_array_equal(H, [-2.0, -1.0 + 2.0**-40, 0.0])
    G, H = be.decrypt_gh(sk, be.bucket_sum(pk, c, np.array([1, 1, 1, 1, -1, -1]), 2))
    np.testing.assert_array_equal(G, [0.0, 2.0])
    np.testing.assert_array_equal(H, [0.0, -4.0])
    six = be.bucket_sum(pk, be.concat([c, c]), np.zeros(12, dtype=np.int64), 1)  # 12 rows > max_rows
    with pytest.raises(OverflowEncodingError):
        be.decrypt_gh(sk, be.mul_plain(pk, six, np.array([10])))
    with pytest.raises(OverflowEncodingError):
        be.encrypt_gh(pk, np.array([1.5]), np.array([0.0]))
    with pytest.raises(CryptoError):  # other packing layout
        get_backend(name).decrypt_gh(sk, c)


@pytest.mark.parametrize("name", ENCRYPTED)
def test_scalar_overflow_raises(name):
    be = get_backend(name)
    pk, sk = keys(name)
    bits = be._plain_bound(pk).bit_length() - 1  # public bound 2**bits <= plaintext modulus
    with pytest.raises(OverflowEncodingError):
        be.encrypt(pk, np.array([2.0 ** (bits - 40)]))
    with pytest.raises(OverflowEncodingError):
        be.encrypt(pk, np.array([1e308]))
    with pytest.raises(OverflowEncodingError):
        be.encrypt(pk, np.array([np.inf]))
    with pytest.raises(DataError):
        be.encrypt(pk, np.array([np.nan]))
    big = be.encrypt(sk, np.array([2.0 ** (bits - 3 - 40), -(2.0 ** (bits - 3 - 40))]))
    np.testing.assert_array_equal(be.decrypt(sk, big), [2.0 ** (bits - 43), -(2.0 ** (bits - 43))])
    k = (be._decrypt_modulus(sk) // 2) >> (bits - 3)  # big * k is about M / 2: the middle (overflow) third
    with pytest.raises(OverflowEncodingError):
        be.decrypt(sk, be.mul_plain(pk, big, np.array([k, 1])))
    with pytest.raises(OverflowEncodingError):
        be.decrypt(sk, be.mul_plain(pk, big, np.array([1, -k])))


# -- randomisation and keys -----------------------------------------------------------------------
@pytest.mark.parametrize("name", ENCRYPTED)
def test_encryption_is_randomised_and_rerandomize_keeps_value(name):
    be = get_backend(name)
    pk, sk = keys(name)
    x = np.array([0.5, 0.5, 0.0])
    c1, c2 = be.encrypt(pk, x), be.encrypt(pk, x)
    width = KEY_BITS // 8 if name == "ou" else 2 * KEY_BITS // 8  # OU ciphertexts live mod n, not n^2
    assert c1.data.dtype == np.uint8 and c1.data.shape == (3, width)
    assert not np.array_equal(c1.data[0], c1.data[1])
    assert not np.array_equal(c1.data, c2.data)
    o1, o2 = be.encrypt(sk, x), be.encrypt(sk, x)  # owner (CRT) encryption is randomised too
    assert not np.array_equal(o1.data[0], o1.data[1]) and not np.array_equal(o1.data, o2.data)
    np.testing.assert_array_equal(be.decrypt(sk, o1), x)
    r = be.rerandomize(pk, c1)
    assert not np.any(np.all(r.data == c1.data, axis=1))
    np.testing.assert_array_equal(be.decrypt(sk, r), x)
    empty = be.bucket_sum(pk, c1, np.full(3, -1), 2)
    np.testing.assert_array_equal(be.decrypt(sk, empty), [0.0, 0.0])


@pytest.mark.parametrize("name", ENCRYPTED)
@SLOW
@given(case=bucket_cases())
def test_precomputed_masks_encrypt_and_rerandomize_exactly(name, case):
    """Masks made ahead of time (by the owner or from the public key) give the same plaintexts, fresh ciphertexts."""
    be = get_backend(name)
    pk, sk = keys(name)
    g, _, _ = case
    h = np.abs(g)
    if not be.supports_masks:
        with pytest.raises(CryptoError, match="randomness"):
            be.make_masks(sk, len(g))
        return
    for maker in (pk, sk):
        masks = be.make_masks(maker, len(g))
        assert masks.tag == "mask" and len(masks) == len(g)
        c = be.encrypt_gh(sk, g, h, masks=masks)
        G, H = be.decrypt_gh(sk, c)
        close(name, G, g, atol=2.0**-39)
        close(name, H, h, atol=2.0**-39)
        r = be.rerandomize(pk, c, masks=be.make_masks(maker, len(g)))
        assert not np.any(np.all(r.data == c.data, axis=1))
        close(name, be.decrypt_gh(sk, r)[0], g, atol=2.0**-39)


@pytest.mark.parametrize("name", BACKENDS)
def test_lazily_read_rows_are_decoded_once_and_sum_the_same(name):
    """A lazily read array decodes each row once, on first read, whichever pieces are taken; its sums
    are the eager array's, bit for bit; arrays shared by (slot, version) are reused until the version changes."""
    from ray_vfl.crypto.he.lazy_ints import LazyInts

    be = get_backend(name)
    pk, sk = keys(name)
    g = np.linspace(-1.0, 1.0, 40)
    sent = be.encrypt_gh(sk, g, np.abs(g))
    wire = CipherArray(sent.data.copy(), sent.key_id, sent.tag)  # as a receiver gets it: bytes only
    lazy = be.read_lazily(pk, wire)
    keys_ = np.arange(40) % 3
    for rows in (np.arange(0, 40, 2), np.arange(10, 30), np.array([39, 0, 39])):
        want = be.bucket_sum(pk, be.take(CipherArray(wire.data, wire.key_id, wire.tag), rows), keys_[rows], 3)
        got = be.bucket_sum(pk, be.take(lazy, rows), keys_[rows], 3)
        np.testing.assert_array_equal(got.data, want.data)
    if name == "plain":
        assert lazy is wire  # nothing to decode
        return
    ints = lazy._ints[1]
    assert isinstance(ints, LazyInts) and ints.decoded == len(set(range(0, 40, 2)) | set(range(10, 30)) | {39})
    assert be.read_lazily(pk, lazy) is lazy
    one = be.read_lazily(pk, wire, share=("party_x", "tree-1"))._ints[1]
    assert be.read_lazily(pk, wire, share=("party_x", "tree-1"))._ints[1] is one
    assert be.read_lazily(pk, wire, share=("party_x", "tree-2"))._ints[1] is not one
    with pytest.raises(CryptoError, match="malformed"):
        be.read_lazily(pk, CipherArray(wire.data[:, :-1], wire.key_id, wire.tag))


@pytest.mark.parametrize("name", BACKENDS)
def test_prepare_for_masks_only_then_rerandomize(name):
    """A party that never encrypts builds only the masks' tables; re-randomising still works."""
    be = get_backend(name)
    if name == "ou":  # a key no other test has encrypted with: its message tables must stay unbuilt
        from ray_vfl.crypto.he.ou import _public_context

        pk, sk = be.generate_keys(KEY_BITS, allow_weak=True)
        be.prepare(pk, encrypt=False)
        tables = _public_context(pk).tables
        assert tables.h.small._rows and not tables.h.big._rows  # a public-key holder: 8-bit windows first
        assert not tables.g._rows and not tables.g_inv._rows
        be.prepare(sk, encrypt=False)  # the key owner (a mask reserve): the 12-bit table at once
        assert tables.h.big._rows and tables.h.many
    else:
        pk, sk = keys(name)
        be.prepare(pk, encrypt=False)
    c = be.encrypt(sk, np.array([0.5, -0.25]))
    np.testing.assert_array_equal(be.decrypt(sk, be.rerandomize(pk, c)), [0.5, -0.25])


@pytest.mark.parametrize("name", [n for n in ENCRYPTED if get_backend(n).supports_masks])
def test_masks_must_match_key_count_and_kind(name):
    be = get_backend(name)
    pk, sk = keys(name)
    other_pk, _ = keys(name, 1)
    g = np.array([0.5, -0.5])
    with pytest.raises(CryptoError, match="one mask per value"):
        be.encrypt_gh(pk, g, np.abs(g), masks=be.make_masks(pk, 3))
    with pytest.raises(CryptoError):
        be.encrypt_gh(pk, g, np.abs(g), masks=be.make_masks(other_pk, 2))
    with pytest.raises(CryptoError):  # a ciphertext is not a mask
        be.encrypt_gh(pk, g, np.abs(g), masks=be.encrypt(pk, g))
    with pytest.raises(CryptoError, match="count"):
        be.make_masks(pk, -1)


@pytest.mark.parametrize("name", BACKENDS)
def test_wrong_or_mixed_keys_raise(name):
    be = get_backend(name)
    pk, sk = keys(name)
    pk2, sk2 = keys(name, 1)
    assert pk.key_id != pk2.key_id and sk.public_key == pk
    a, b = be.encrypt(pk, np.array([1.0])), be.encrypt(pk2, np.array([1.0]))
    with pytest.raises(CryptoError):
        be.decrypt(sk2, a)
    with pytest.raises(CryptoError):
        be.add(pk, a, b)
    with pytest.raises(CryptoError):
        be.bucket_sum(pk2, a, np.array([0]), 1)
    with pytest.raises(CryptoError):
        be.concat([a, b])
    with pytest.raises(CryptoError):
        be.decrypt_gh(sk, a)
    with pytest.raises(DataError):
        be.add(pk, a, be.encrypt(pk, np.array([1.0, 2.0])))


@pytest.mark.parametrize("name", BACKENDS)
def test_key_size_and_registry_validation(name):
    with pytest.raises(ConfigError, match="key_bits must be >= 1024"):
        get_backend(name).generate_keys(key_bits=512)
    with pytest.raises(ConfigError, match="frac_bits"):
        get_backend(name, frac_bits=0)
    with pytest.raises(ConfigError, match="unknown option"):
        get_backend(name, frac_bitz=40)
    with pytest.raises(ConfigError, match="'paillier'"):
        get_backend("rsa")


@pytest.mark.parametrize("name", BACKENDS)
def test_keys_and_ciphertexts_pickle_small_and_read_only_ok(name):
    be = get_backend(name)
    pk, sk = keys(name)
    assert len(pickle.dumps(pk)) < 1024 and len(pickle.dumps(sk)) < 2048
    pk2, sk2 = pickle.loads(pickle.dumps((pk, sk)))
    assert pk2.key_id == pk.key_id and be.is_encrypted == (name != "plain") and be.name == name
    c = be.encrypt(pk, np.array([1.0, -2.0, 3.0]))
    c2 = pickle.loads(pickle.dumps(c))
    assert isinstance(c2, CipherArray) and c2._ints is None and c2.nbytes == c.nbytes
    c2.data.flags.writeable = False  # arrays coming out of Ray are read-only
    out = be.add(pk2, be.take(c2, np.array([2, 0])), be.take(c2, np.array([True, False, True])))
    close(name, be.decrypt(sk2, out), np.array([4.0, 4.0]))


# -- cipher compression ----------------------------------------------------------------------------
EDGE = [-1.0, 1.0, 0.0, 2.0**-40, -(2.0**-40)]
gh_values = st.one_of(st.sampled_from(EDGE), st.floats(-1, 1, allow_nan=False))


def small(name: str):
    """Backend with narrow slots (max_rows=8, |g|, |h| <= 1): several slots per ciphertext even for OU-1024."""
    return get_backend(name, max_rows=8, gradient_bound=1.0)


@st.composite
def compress_cases(draw, per: int):
    n_entries = draw(st.integers(1, 2 * per + 1))
    n_rows = draw(st.integers(n_entries, min(8 * n_entries, 40)))
    bucket = np.array(draw(st.permutations(list(range(n_rows)))), dtype=np.int64) % n_entries  # <= 8 rows each
    g = np.array(draw(st.lists(gh_values, min_size=n_rows, max_size=n_rows)))
    h = np.array(draw(st.lists(gh_values, min_size=n_rows, max_size=n_rows)))
    return g, h, bucket, n_entries


@pytest.mark.parametrize("name", ENCRYPTED)
@SLOW
@given(data=st.data())
def test_compressed_decrypts_to_exactly_the_entries(name, data):
    be = small(name)
    pk, sk = keys(name)
    per = be.slots_per_ciphertext(pk)
    assert per >= 3
    g, h, bucket, n = data.draw(compress_cases(per))
    maker = small("paillier") if name == "phe" else be  # same keys and layout; python-paillier is slow
    hist = be.bucket_sum(pk, maker.encrypt_gh(pk, g, h), bucket, n)  # sums of <= max_rows edge values
    want = be.decrypt_gh(sk, hist)
    z = be.compress_gh(pk, hist)
    assert len(z) == -(-n // per) and z.tag.endswith(f":pack{per}:n{n}")
    r = be.rerandomize(pk, z)
    assert not np.any(np.all(r.data == z.data, axis=1))
    for got in (be.decrypt_gh(sk, z), be.decrypt_gh(sk, r), be.decrypt_gh(sk, pickle.loads(pickle.dumps(r)))):
        np.testing.assert_array_equal(got[0], want[0])
        np.testing.assert_array_equal(got[1], want[1])
    np.testing.assert_allclose(want[0], bincount(g, bucket, n), atol=8 * ATOL)
    cut = data.draw(st.integers(0, len(z)))  # contiguous chunks, as a parallel decryption takes them
    parts = [be.take(z, np.arange(cut)), be.take(z, np.arange(cut, len(z)))]
    G = np.concatenate([be.decrypt_gh(sk, p)[0] for p in parts])
    np.testing.assert_array_equal(G, want[0])
    np.testing.assert_array_equal(be.decrypt_gh(sk, be.concat(parts))[1], want[1])


@pytest.mark.parametrize("name", ENCRYPTED)
def test_compression_exact_at_the_slot_bounds_and_overflow_raises(name):
    be = small(name)
    pk, sk = keys(name)
    per = be.slots_per_ciphertext(pk)
    # entry i sums 8 = max_rows rows of +-1 (+-2**-40): every slot at +-bound, the extreme legal value
    signs = np.array([1.0, -1.0, 1.0, -1.0, 1.0])
    g = np.repeat(signs, 8)
    h = np.repeat(-signs, 8)
    h[-1] = 2.0**-40
    c = be.encrypt_gh(sk, g, h)
    hist = be.bucket_sum(pk, c, np.arange(40) // 8, 5)
    want_g, want_h = 8 * signs, -8 * signs
    want_h[-1] = -7.0 + 2.0**-40
    z = be.compress_gh(pk, be.concat([hist] * per))  # every slot position, full ciphertexts and a partial one
    G, H = be.decrypt_gh(sk, z)
    np.testing.assert_array_equal(G, np.tile(want_g, per))
    np.testing.assert_array_equal(H, np.tile(want_h, per))
    over = be.bucket_sum(pk, be.concat([c, c]), np.arange(80) // 9, 9)  # 9 > max_rows rows of +-1
    with pytest.raises(OverflowEncodingError):
        be.decrypt_gh(sk, be.compress_gh(pk, over))


@pytest.mark.parametrize("name", ENCRYPTED)
def test_compressed_arrays_support_sibling_subtraction_but_not_the_other_ops(name):
    be = small(name)
    pk, sk = keys(name)
    rng = np.random.default_rng(0)
    g, h = rng.uniform(-1, 1, 16), rng.uniform(0, 1, 16)
    c = be.encrypt_gh(pk, g, h)
    ks = np.arange(16) % 4
    parent = be.bucket_sum(pk, c, ks, 4)
    left = be.bucket_sum(pk, be.take(c, np.arange(8)), ks[:8], 4)
    right = be.sub(pk, be.compress_gh(pk, parent), be.compress_gh(pk, left))  # the subtraction trick, compressed
    want = be.decrypt_gh(sk, be.sub(pk, parent, left))
    np.testing.assert_array_equal(be.decrypt_gh(sk, right)[0], want[0])
    z = be.compress_gh(pk, parent)
    for op in (lambda: be.mul_plain(pk, z, np.ones(len(z), dtype=np.int64)),
               lambda: be.bucket_sum(pk, z, np.zeros(len(z), dtype=np.int64), 1),
               lambda: be.compress_gh(pk, z),
               lambda: be.decrypt(sk, z),
               lambda: be.add(pk, z, be.take(parent, np.arange(len(z)))),
               lambda: be.add(pk, z, be.compress_gh(pk, be.take(parent, [0])))):
        with pytest.raises(CryptoError):
            op()
    per = be.slots_per_ciphertext(pk)
    wide = be.concat([parent] * per)
    odd = be.compress_gh(pk, be.take(wide, np.arange(per + 1)))  # second ciphertext holds one entry
    with pytest.raises(CryptoError, match="partial last ciphertext"):
        be.take(odd, [1, 0])
    with pytest.raises(CryptoError, match="partial"):
        be.concat([odd, odd])
    forged = CipherArray(z.data, z.key_id, z.tag.replace(f"pack{per}", f"pack{per + 1}"))
    with pytest.raises(CryptoError, match="do not fit"):
        be.decrypt_gh(sk, forged)
    with pytest.raises(CryptoError, match="must have"):
        be.decrypt_gh(sk, CipherArray(z.data, z.key_id, z.tag.replace(":n4", ":n40")))
    with pytest.raises(CryptoError):  # other packing options
        get_backend(name).decrypt_gh(sk, z)


def test_slots_per_ciphertext_for_default_options():
    assert GHPacking(FixedPoint(40)).total_bits == 173
    for bits, per in ((1024, 5), (2048, 11), (3072, 17)):
        assert GHPacking(FixedPoint(40)).max_entries(2**(bits - 1)) == per
    be = get_backend("plain")
    pk, _ = be.generate_keys()
    c = be.encrypt_gh(pk, np.array([1.0]), np.array([2.0]))
    assert be.slots_per_ciphertext(pk) == 1 and be.compress_gh(pk, c) is c


# -- plain fast path --------------------------------------------------------------------------------
def test_plain_bucket_sum_fast_path_is_bincount_bit_for_bit():
    be = get_backend("plain")
    pk, _ = be.generate_keys()
    rng = np.random.default_rng(1)
    n, f, nb = 500, 6, 40
    ks = rng.integers(0, nb, (n, 2 * f))
    c = pickle.loads(pickle.dumps(be.encrypt_gh(pk, rng.normal(size=n), rng.random(n))))
    c.data.flags.writeable = False
    for k in (ks, ks[:, ::2], ks.astype(np.int32), ks[:, 0]):  # contiguous, strided, int32, 1-D
        out = be.bucket_sum(pk, c, k, nb)
        for j in range(2):
            np.testing.assert_array_equal(out.data[:, j], bincount(c.data[:, j], k, nb))
    with pytest.raises(DataError, match="n_buckets"):
        be.bucket_sum(pk, c, ks, nb - 1 if ks.max() == nb - 1 else ks.max())
    assert len(be.bucket_sum(pk, be.take(c, []), np.zeros((0, 3), dtype=np.int64), 4)) == 4


# -- OU keys ---------------------------------------------------------------------------------------------
@pytest.mark.skipif("ou" not in BACKENDS, reason="gmpy2 needed")
def test_ou_key_structure():
    from ray_vfl.crypto.he.ou import OUPrivateKey

    pk, sk = keys("ou")
    assert pk.n == sk.p**2 * sk.q and pk.key_bits == KEY_BITS and (sk.p - 1) % sk.t == 0
    assert sk.p.bit_length() == pk.p_bits == KEY_BITS // 3
    with pytest.raises(CryptoError):
        OUPrivateKey(pk, sk.q, sk.p, sk.t)


# -- interoperability with python-paillier -----------------------------------------------------------
needs_phe = pytest.mark.skipif(not {"phe", "paillier"} <= set(BACKENDS), reason="phe and gmpy2 needed")


@needs_phe
@SLOW
@given(a=vectors)
def test_phe_and_fast_paillier_interoperate(a):
    from phe import paillier as phe_paillier

    from ray_vfl.crypto.he.phe_backend import (
        from_phe_ciphertexts,
        from_phe_keypair,
        to_phe_ciphertexts,
        to_phe_keypair,
    )

    a = np.array(a)
    fast, slow = get_backend("paillier"), get_backend("phe")
    pk, sk = keys("paillier")
    # ours -> native python-paillier
    phe_pk, phe_sk = to_phe_keypair(pk, sk)
    got = [phe_sk.decrypt(e) for e in to_phe_ciphertexts(pk, fast.encrypt(pk, a))]
    np.testing.assert_allclose(got, a, atol=ATOL)
    # native python-paillier -> ours (a phe key pair, phe's own encryption and addition)
    phe_pk2, phe_sk2 = keys("phe_native") if ("phe_native", 0) in _KEYS else _KEYS.setdefault(
        ("phe_native", 0), phe_paillier.generate_paillier_keypair(n_length=KEY_BITS))
    pk2, sk2 = from_phe_keypair(phe_pk2, phe_sk2)
    nums = [phe_pk2.encrypt(float(v), precision=2.0**-40) + phe_pk2.encrypt(1) for v in a]
    np.testing.assert_allclose(fast.decrypt(sk2, from_phe_ciphertexts(pk2, nums)), a + 1, atol=ATOL)
    # the two backends share keys and byte layout
    c = fast.add(pk, fast.encrypt(pk, a), slow.encrypt(pk, a))
    np.testing.assert_allclose(slow.decrypt(sk, c), 2 * a, atol=ATOL)
    gh = slow.encrypt_gh(pk, a / 1e3, a / 1e3)
    G, H = fast.decrypt_gh(sk, fast.bucket_sum(pk, gh, np.zeros(len(a), dtype=np.int64), 1))
    np.testing.assert_allclose([G[0], H[0]], [a.sum() / 1e3] * 2, atol=ATOL * len(a))


# -- the encodings alone ----------------------------------------------------------------------------
@settings(max_examples=50, deadline=None)
@given(x=st.lists(st.floats(-1e6, 1e6, allow_nan=False), min_size=1, max_size=20),
       frac_bits=st.sampled_from([8, 24, 40, 52]))
def test_fixed_point_round_trip_and_negatives(x, frac_bits):
    fp = FixedPoint(frac_bits)
    modulus = 2**127 - 1
    x = np.array(x)
    ints = fp.encode(x, modulus)
    assert all(0 <= v < modulus for v in ints)
    assert all((v > modulus // 2) == (s < 0) for v, s in zip(ints, fp.to_ints(x)) if s != 0)
    np.testing.assert_array_equal(fp.decode(ints, modulus), np.ldexp(np.rint(np.ldexp(x, frac_bits)), -frac_bits))


@settings(max_examples=50, deadline=None)
@given(g=st.lists(st.floats(-4, 4), min_size=1, max_size=10), data=st.data())
def test_gh_packing_is_linear(g, data):
    packing = GHPacking(FixedPoint(40), gradient_bound=4.0, max_rows=16)
    g = np.array(g)
    h = np.array(data.draw(st.lists(st.floats(-4, 4), min_size=len(g), max_size=len(g))))
    k = data.draw(st.lists(st.integers(-1, 1), min_size=len(g), max_size=len(g)))
    total = sum(ki * p for ki, p in zip(k, packing.pack(g, h)))
    G, H = packing.unpack([total])
    fp = FixedPoint(40)
    assert G[0] == fp.from_ints([sum(ki * v for ki, v in zip(k, fp.to_ints(g)))])[0]
    assert H[0] == fp.from_ints([sum(ki * v for ki, v in zip(k, fp.to_ints(h)))])[0]


def test_mask_powers_switch_to_the_large_table_once_it_pays(monkeypatch):
    """Masks come from 8-bit windows until a process has made enough of them, then from 12-bit ones;
    either way they are ``base^e`` for the exponents drawn."""
    from ray_vfl.crypto.he.gmp import MaskPowers

    monkeypatch.setattr(MaskPowers, "MANY", 5)
    modulus = (1 << 127) - 1
    mp = MaskPowers(7, modulus, 4)
    exps = bytes(range(1, 13))  # three 4-byte exponents
    expect = [pow(7, int.from_bytes(exps[i:i + 4], "little"), modulus) for i in range(0, 12, 4)]
    assert mp.pow_bytes(exps, 4) == expect and not mp.many and not mp.big._rows
    assert mp.pow_bytes(exps, 4) == expect and mp.many and mp.big._rows  # 6 made: past MANY


@pytest.mark.parametrize("name", ["plain", "paillier", "ou"])
def test_sums_pack_straight_into_ciphertexts_and_decrypt_in_one_batch(name):
    """encrypt_gh_sums packs plaintext sums (beyond one row's bound) into the compressed layout; several
    arrays decrypt in one batch exactly as one by one; add works on them."""
    import warnings

    from ray_vfl.crypto import get_backend

    be = get_backend(name, gradient_bound=1.0, frac_bits=32, max_rows=4096, guard_bits=2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pk, sk = be.generate_keys(1024, allow_weak=True)
    rng = np.random.default_rng(0)
    arrays, plain = [], []
    for n in (1, 7, 23):
        g = np.round(rng.normal(size=n) * 300, 6)
        h = np.round(np.abs(rng.normal(size=n)) * 300, 6)
        arrays.append(be.add(pk, be.encrypt_gh_sums(pk, g, h), be.encrypt_gh_sums(sk if name == "paillier" else pk, g, h)))
        plain.append((2 * g, 2 * h))
    many = be.decrypt_gh_many(sk, arrays)
    for (G, H), one, (g, h) in zip(many, arrays, plain):
        G1, H1 = be.decrypt_gh(sk, one)
        np.testing.assert_array_equal(G, G1)
        np.testing.assert_array_equal(H, H1)
        np.testing.assert_allclose(G, g, atol=1e-8)
        np.testing.assert_allclose(H, h, atol=1e-8)


def _distinct_rows(c) -> int:
    return len({row.tobytes() for row in c.data})


@pytest.mark.parametrize("name", [b for b in ENCRYPTED if b != "phe"])  # phe (python-paillier, a reference): 18 s
def test_masks_never_repeat_over_two_trees_and_low_entropy_masks_are_caught(name, monkeypatch):
    """One plaintext encrypted 6,000 times (two trees' worth of one gradient pair per row, by the key's
    owner) and re-randomised 6,000 times from the public key (a passive party's obfuscation): every
    ciphertext differs, so every mask does (c = Enc_0(m) * mask). A uniformity test cannot see masks drawn
    from a small set (each still looks uniform mod n^2); this birthday check does: with 16-bit mask
    exponents it finds about 270 repeats among 6,000, and fails (a mask space below ~2^30 is caught)."""
    be = get_backend(name)
    pk, sk = keys(name)
    zeros = np.zeros(3000)
    trees = be.concat([be.encrypt_gh(sk, zeros, zeros), be.encrypt_gh(sk, zeros, zeros)])
    assert _distinct_rows(trees) == 6000
    one = be.take(trees, np.zeros(6000, dtype=np.int64))
    assert _distinct_rows(be.rerandomize(pk, one)) == 6000
    if name != "paillier":
        return
    import ray_vfl.crypto.he.paillier as paillier

    width = paillier._public_context(pk.n).exp_bytes  # bytes of one mask exponent
    real = secrets.token_bytes

    def low(n: int) -> bytes:  # every exponent keeps 2 random bytes, the rest zero
        return bytes(b if i % width < 2 else 0 for i, b in enumerate(real(n)))

    monkeypatch.setattr(paillier.secrets, "token_bytes", low)
    weak = be.encrypt_gh(sk, np.zeros(6000), np.zeros(6000))
    assert _distinct_rows(weak) < 6000  # the check above would fail on this backend
