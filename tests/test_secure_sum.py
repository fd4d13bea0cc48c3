"""Laws of pairwise-mask secure aggregation: exact totals, uniform shares, refusals."""

from __future__ import annotations

import math
import pickle
import secrets
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from ray_vfl.crypto.privacy.secure_sum import (
    NONCE_BYTES,
    PairwiseMasker,
    combine,
    decode_ring,
    encode_ring,
    ring_bound,
)
from ray_vfl.errors import ConfigError, CryptoError, DataError, OverflowEncodingError

FRAC = 32
FALSE_ALARM = 1e-4  # per test function; the shares come from OS entropy, so this is its flake rate
ROWS = 4096  # 16 expected per bin of a byte's 256 values


def federation(names: list[str], frac_bits: int = FRAC) -> dict[str, PairwiseMasker]:
    """Maskers that have exchanged public keys, as round 1 of the protocol does."""
    maskers = {name: PairwiseMasker(name, frac_bits) for name in names}
    keys = {name: m.public_key() for name, m in maskers.items()}
    for name, m in maskers.items():
        m.agree({peer: key for peer, key in keys.items() if peer != name})
    return maskers


def shares_of(maskers: dict[str, PairwiseMasker], values: dict[str, np.ndarray], nonce: bytes | None = None):
    nonce = secrets.token_bytes(NONCE_BYTES) if nonce is None else nonce
    names = list(maskers)
    return [maskers[name].share(values[name], nonce, names) for name in names]


def uniform_p(byte_values: np.ndarray) -> float:
    """p-value of 'these bytes are uniform on 0..255'."""
    counts = np.bincount(byte_values.astype(np.int64), minlength=256)
    return float(stats.chisquare(counts).pvalue)


# -- exactness ---------------------------------------------------------------------------------------------

values_strategy = st.floats(min_value=-(2.0**20), max_value=2.0**20, allow_nan=False, allow_infinity=False)


@settings(max_examples=60, deadline=None)
@given(data=st.data(), k=st.integers(2, 6), n=st.integers(0, 12))
def test_shares_sum_to_the_exact_fixed_point_total(data, k, n):
    names = data.draw(st.lists(st.text(min_size=1, max_size=4), min_size=k, max_size=k, unique=True))
    values = {name: np.array(data.draw(st.lists(values_strategy, min_size=n, max_size=n))) for name in names}
    maskers, nonce = federation(names), secrets.token_bytes(NONCE_BYTES)
    # each party may get the list in its own order: the string order of the names fixes the signs
    shares = [maskers[name].share(values[name], nonce, data.draw(st.permutations(names))) for name in names]
    total = combine(shares, FRAC)

    ints = [[int(v) for v in np.rint(np.ldexp(values[name], FRAC)).tolist()] for name in names]
    exact_ints = [sum(col) for col in zip(*ints, strict=True)] if n else []
    want = np.array([math.ldexp(float(t), -FRAC) for t in exact_ints], dtype=np.float64)
    np.testing.assert_array_equal(total, want)  # the integer total, rounded once to float64
    for row in range(n):  # and close to the real sum: one rounding per party, one at the end
        real = sum(Fraction(float(values[name][row])) for name in names)
        slack = Fraction(k, 2 ** (FRAC + 1)) + Fraction(math.ulp(total[row])) / 2
        assert abs(Fraction(float(total[row])) - real) <= slack


@settings(max_examples=100, deadline=None)
@given(x=st.lists(values_strategy, max_size=20), frac_bits=st.integers(1, 40))
def test_encode_then_decode_rounds_to_the_grid(x, frac_bits):
    x = np.array(x, dtype=np.float64)
    want = np.ldexp(np.rint(np.ldexp(x, frac_bits)), -frac_bits)
    np.testing.assert_array_equal(decode_ring(encode_ring(x, frac_bits), frac_bits), want)


def test_rounding_is_half_to_even_like_fixed_point():
    from ray_vfl.crypto.he.fixed_point import FixedPoint

    x = np.array([0.5, 1.5, 2.5, -0.5, -1.5]) * 2.0**-FRAC
    np.testing.assert_array_equal(decode_ring(encode_ring(x)), FixedPoint(FRAC).rounded(x))


def test_totals_at_the_bound_are_exact():
    k = 4
    names = [f"p{i}" for i in range(k)]
    # (2**63 - 1) // 4 = 2**61 - 1 is no float; the largest float below it is 2**61 - 256
    edge = math.ldexp(2.0**61 - 256, -FRAC)
    for sign in (1.0, -1.0):
        values = {name: np.full(3, sign * edge) for name in names}
        total = combine(shares_of(federation(names), values))
        np.testing.assert_array_equal(total, np.full(3, sign * k * edge))  # 2**63 - 1024: no wrap
    with pytest.raises(OverflowEncodingError):
        encode_ring(np.array([math.ldexp(2.0**61, -FRAC)]), FRAC, n_parties=k)  # the next float up


def test_any_shape_round_trips():
    names = ["a", "b", "c"]
    values = {name: np.arange(12, dtype=np.float64).reshape(3, 4) * (i + 1) for i, name in enumerate(names)}
    shares = shares_of(federation(names), values)
    assert shares[0].shape == (3, 4)
    np.testing.assert_array_equal(combine(shares), np.arange(12.0).reshape(3, 4) * 6)


# -- privacy: a share alone is uniform --------------------------------------------------------------------


@pytest.mark.parametrize("k", [2, 3])
def test_one_share_is_uniform_whatever_the_input(k):
    names = [f"p{i}" for i in range(k)]
    rows = np.arange(ROWS)
    inputs = {"zeros": np.zeros(ROWS), "large": np.where(rows % 2 == 0, 2.0**28, -(2.0**20) - 0.125)}
    p_values = []
    seen = {}
    for kind, hidden in inputs.items():
        values = {name: np.zeros(ROWS) for name in names} | {"p0": hidden}
        shares = shares_of(federation(names), values)
        seen[kind] = shares[0]
        for share in (shares[0], shares[-1]):  # the first name adds its masks, the last subtracts them
            p_values += [uniform_p(share >> np.uint64(56)), uniform_p(share & np.uint64(0xFF))]
    # and the two inputs' shares of p0 are alike (chi-square homogeneity of their top bytes)
    top = [np.bincount((seen[kind] >> np.uint64(56)).astype(np.int64), minlength=256) for kind in inputs]
    p_values.append(float(stats.chi2_contingency(np.array(top)).pvalue))
    assert min(p_values) > FALSE_ALARM / len(p_values), p_values  # Bonferroni: 1e-4 for the whole test


def test_the_chi_square_test_sees_an_unmasked_vector():
    """The uniformity test has power: the encoding alone fails it."""
    rows = np.arange(ROWS)
    plain = encode_ring(np.where(rows % 2 == 0, 2.0**28, -(2.0**20) - 0.125), n_parties=2)
    assert uniform_p(plain >> np.uint64(56)) < FALSE_ALARM
    assert uniform_p(plain & np.uint64(0xFF)) < FALSE_ALARM


def test_shares_are_randomised_per_nonce_and_per_session():
    names = ["a", "b"]
    values = {name: np.ones(8) for name in names}
    first = shares_of(federation(names), values)[0]
    again = shares_of(federation(names), values)[0]  # new key pairs
    maskers = federation(names)
    one, two = shares_of(maskers, values)[0], shares_of(maskers, values)[0]  # same keys, new nonces
    assert not np.array_equal(first, again)
    assert not np.array_equal(one, two)


def test_masks_cancel_only_when_every_party_takes_part():
    names = ["a", "b", "c", "d"]
    values = {name: np.full(64, float(i)) for i, name in enumerate(names)}
    shares = shares_of(federation(names), values)
    np.testing.assert_array_equal(combine(shares), np.full(64, 6.0))
    for left_out in range(len(names)):
        partial = combine(shares[:left_out] + shares[left_out + 1 :])
        want = 6.0 - left_out
        assert not np.any(partial == want)  # every row still masked: garbage, not the partial sum


def test_shares_of_different_nonces_do_not_combine():
    names = ["a", "b", "c"]
    maskers = federation(names)
    values = {name: np.ones(64) for name in names}
    first = shares_of(maskers, values)
    second = shares_of(maskers, values)
    mixed = combine([first[0], second[1], second[2]])
    assert not np.any(mixed == 3.0)


def test_a_two_party_sum_of_zeros_is_a_mask_and_its_negative():
    a, b = federation(["a", "b"]).values()
    nonce = secrets.token_bytes(NONCE_BYTES)
    ya, yb = a.share(np.zeros(16), nonce, ["a", "b"]), b.share(np.zeros(16), nonce, ["b", "a"])
    assert np.all(ya != 0)
    np.testing.assert_array_equal(ya + yb, np.zeros(16, dtype=np.uint64))


# -- refusals ----------------------------------------------------------------------------------------------


def test_nonce_reuse_is_refused_and_a_refused_call_spends_no_nonce():
    a, _ = federation(["a", "b"]).values()
    nonce = secrets.token_bytes(NONCE_BYTES)
    with pytest.raises(OverflowEncodingError):
        a.share(np.array([2.0**40]), nonce, ["a", "b"])
    a.share(np.ones(3), nonce, ["a", "b"])  # the refused call did not spend it
    with pytest.raises(CryptoError, match="already made a share with this nonce"):
        a.share(np.zeros(3), nonce, ["a", "b"])
    with pytest.raises(CryptoError, match="already made a share with this nonce"):
        a.share(np.zeros(3), bytearray(nonce), ["a", "b"])


@pytest.mark.parametrize("nonce", [b"", b"x" * 12, b"x" * 32, "x" * 16, None])
def test_a_nonce_of_the_wrong_length_or_type_is_refused(nonce):
    a, _ = federation(["a", "b"]).values()
    with pytest.raises(CryptoError, match="nonce must be 16 bytes"):
        a.share(np.ones(2), nonce, ["a", "b"])


def test_a_party_without_an_agreed_key_is_refused():
    maskers = federation(["a", "b"])
    stranger = PairwiseMasker("c")
    with pytest.raises(CryptoError, match=r"no agreed key with \['c'\]"):
        maskers["a"].share(np.ones(2), secrets.token_bytes(NONCE_BYTES), ["a", "b", "c"])
    fresh = PairwiseMasker("a")
    with pytest.raises(CryptoError, match="call agree"):
        fresh.share(np.ones(2), secrets.token_bytes(NONCE_BYTES), ["a", "b"])
    maskers["a"].agree({"c": stranger.public_key()})  # agreeing later adds the peer
    assert maskers["a"].peers == ["b", "c"]


@pytest.mark.parametrize(
    ("parties", "match"),
    [
        (["b", "c"], "must include this party"),
        (["a"], "at least two"),
        (["a", "b", "a"], "distinct"),
        ("ab", "not one str"),
    ],
)
def test_a_bad_party_list_is_refused(parties, match):
    a = federation(["a", "b", "c"])["a"]
    with pytest.raises(ConfigError, match=match):
        a.share(np.ones(2), secrets.token_bytes(NONCE_BYTES), parties)


def test_agree_refuses_its_own_name_bad_keys_and_a_changed_key():
    a, b = PairwiseMasker("a"), PairwiseMasker("b")
    with pytest.raises(ConfigError, match="itself"):
        a.agree({"a": b.public_key()})
    for bad in (b.public_key()[:31], b.public_key() + b"\0", "k" * 32):
        with pytest.raises(CryptoError, match="must be 32 bytes"):
            a.agree({"b": bad})
    with pytest.raises(CryptoError, match="not a valid X25519 key"):
        a.agree({"b": bytes(32)})  # a low-order point: the shared secret would be zero
    assert a.peers == []  # nothing kept from refused calls
    a.agree({"b": b.public_key()})
    a.agree({"b": b.public_key()})  # the same key again is fine
    with pytest.raises(CryptoError, match="different public key"):
        a.agree({"b": PairwiseMasker("b").public_key()})


def test_public_keys_are_fresh_32_bytes_and_maskers_do_not_pickle():
    a, b = PairwiseMasker("a"), PairwiseMasker("a")
    assert len(a.public_key()) == 32 and a.public_key() != b.public_key()
    with pytest.raises(TypeError, match="cannot be pickled"):
        pickle.dumps(a)


def test_overflow_is_refused_with_the_bound_for_the_party_count():
    bound_4 = ring_bound(4) / 2.0**FRAC  # about 2**29
    assert bound_4 == pytest.approx(2.0 ** (63 - FRAC) / 4)
    names = ["a", "b", "c", "d"]
    maskers = federation(names)
    with pytest.raises(OverflowEncodingError, match="4 parties"):
        maskers["a"].share(np.array([0.0, 1.01 * bound_4]), secrets.token_bytes(NONCE_BYTES), names)
    with pytest.raises(OverflowEncodingError, match="4 parties"):
        maskers["a"].share(np.array([-1.01 * bound_4]), secrets.token_bytes(NONCE_BYTES), names)
    with pytest.raises(OverflowEncodingError):
        encode_ring(np.array([np.inf]))
    with pytest.raises(DataError, match="NaN"):
        encode_ring(np.array([1.0, np.nan]))
    encode_ring(np.array([1.01 * bound_4]), n_parties=2)  # fine with fewer parties


def test_combine_refuses_mismatched_or_foreign_shares():
    with pytest.raises(CryptoError, match="at least one share"):
        combine([])
    with pytest.raises(CryptoError, match="shape"):
        combine([np.zeros(3, dtype=np.uint64), np.zeros(4, dtype=np.uint64)])
    with pytest.raises(CryptoError, match="uint64"):
        combine([np.zeros(3, dtype=np.uint64), np.zeros(3)])


def test_frac_bits_is_checked():
    for bad in (0, 63, 2.5, True):
        with pytest.raises(ConfigError, match="frac_bits"):
            PairwiseMasker("a", frac_bits=bad)
