"""ECDH-PSI on Ray actors: exact, deterministic, private, robust; SecureBoost after PSI is unchanged."""

import hashlib
import pickle
import threading
import time
import uuid

import gmpy2
import numpy as np
import pandas as pd
import pytest
import rbcl
from cryptography.hazmat.primitives.asymmetric.x25519 import (
    X25519PrivateKey,
    X25519PublicKey,
)
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from ray_vfl import (
    ConfigError,
    CryptoError,
    DataError,
    PartyFailedError,
    Runtime,
    SecureBoostClassifier,
    VerticalDataset,
    VFLError,
)
from ray_vfl.data.dataset import AlignedDataset
from ray_vfl.data.bundled import load_named
from ray_vfl.psi.party import (
    DIGEST_BYTES,
    DOMAIN,
    POINT_BYTES,
    PsiParty,
    blind,
    encode_ids,
    hash_and_blind,
    match_digests,
    new_scalar,
)
from ray_vfl.psi.protocol import private_set_intersection
from ray_vfl.runtime.task_pool import TaskPool
from ray_vfl.runtime.comm import Mailbox

from conftest import introduce, read_payload

PARTIES = ["party0", "party1", "party2", "party3", "party4"]


def aligned_ids(ids, result):
    return {p: [ids[p][i] for i in result.rows[p]] for p in ids}


def test_blinding_commutes_and_separates_types():
    a, b = new_scalar(), new_scalar()
    ints, strs = np.array([7, 8, 9]), np.array(["7", "8", "9"], dtype=object)
    ab = blind(hash_and_blind(ints, "int", a), b)
    assert (ab == blind(hash_and_blind(ints, "int", b), a)).all()
    assert len({row.tobytes() for row in ab}) == 3
    assert not (hash_and_blind(ints, "int", a) == hash_and_blind(strs, "str", a)).all(axis=1).any()
    assert hash_and_blind(ints, "int", a).shape == (3, POINT_BYTES)


P = 2**255 - 19  # Curve25519's field
OLD_DOMAIN = b"ray_vfl/psi/x25519-sha512/v1\x00"  # the hash-to-u-coordinate encoding ristretto255 replaced
Z_MAX = 7.0  # |z| above this flags a bias; P(|N(0,1)| > 7) = 2.6e-12 per test, < 1e-6 over all tests below


def _twist_bit(rows: np.ndarray) -> np.ndarray:
    """1 where a row, read as an X25519 u-coordinate, lies on Curve25519's twist (what X25519 blinding kept)."""
    u = [int.from_bytes(r.tobytes(), "little") & (2**255 - 1) for r in rows]
    return np.array([gmpy2.legendre(x * x * x + 486662 * x * x + x, P) == -1 for x in u], np.uint8)


def _features(rows: np.ndarray) -> np.ndarray:
    """Every bit of each row (little-endian), then its twist bit."""
    return np.column_stack([np.unpackbits(rows, axis=1, bitorder="little"), _twist_bit(rows)])


def _max_abs_z(x: np.ndarray, y: np.ndarray) -> float:
    """Largest |z| of the correlations between the columns of x and those of y (constant columns skipped)."""
    x, y = x[:, x.std(axis=0) > 0].astype(float), y[:, y.std(axis=0) > 0].astype(float)
    x, y = (x - x.mean(0)) / x.std(0), (y - y.mean(0)) / y.std(0)
    return float(np.abs(x.T @ y).max() / np.sqrt(len(x)))  # correlation * sqrt(n) ~ N(0, 1) when independent


def test_blinded_encoding_is_independent_of_the_id():
    n = 4096
    ids = np.array([f"cust-{i:09d}" for i in range(n)], dtype=object)
    encoded = encode_ids(ids, "str")
    old_u = np.frombuffer(b"".join(hashlib.sha512(OLD_DOMAIN + e).digest()[:32] for e in encoded), np.uint8)
    new_h = np.frombuffer(b"".join(hashlib.sha512(DOMAIN + e).digest() for e in encoded), np.uint8)
    # Features of the ID: the bits of the old hash and whether it lay on the twist (column 256), and the new hash's bits
    id_features = np.column_stack([_features(old_u.reshape(n, 32)), np.unpackbits(new_h.reshape(n, 64), axis=1)])

    points = hash_and_blind(ids, "str", new_scalar())
    bits = np.unpackbits(points, axis=1, bitorder="little")
    constant = np.flatnonzero(bits.min(0) == bits.max(0))
    assert constant.tolist() == [0, 255]  # a canonical encoding is even and below 2**255, whatever the ID
    z_balance = np.abs(bits.mean(0) - 0.5) * 2 * np.sqrt(n)  # binomial(n, 1/2), as a z-score
    z_balance[constant] = 0
    assert z_balance.max() < Z_MAX, f"bit {z_balance.argmax()} is biased (z = {z_balance.max():.1f})"
    assert _max_abs_z(_features(points), id_features) < Z_MAX

    # The same detector flags the old construction: X25519 keeps the twist bit of H(id) through blinding.
    key = X25519PrivateKey.generate()
    old = np.frombuffer(b"".join(key.exchange(X25519PublicKey.from_public_bytes(old_u[32 * i:32 * i + 32].tobytes()))
                                 for i in range(n)), np.uint8).reshape(n, 32)
    leaky = _features(old)
    assert (leaky[:, -1] == id_features[:, 256]).all()
    assert _max_abs_z(leaky, id_features) > 50


@st.composite
def one_kind_ids(draw):
    values = st.integers(-2**70, 2**70) if draw(st.booleans()) else st.text(max_size=12)
    mine = draw(st.lists(values, min_size=1, max_size=15, unique=True))
    theirs = draw(st.lists(values, min_size=1, max_size=15, unique=True))
    kind = "int" if isinstance(mine[0], int) else "str"
    return np.array(mine, dtype=object), np.array(theirs, dtype=object), kind


@settings(max_examples=40, deadline=None)
@given(one_kind_ids())
def test_double_blinded_digests_match_exactly_the_common_ids(case):
    mine, theirs, kind = case
    a, b = new_scalar(), new_scalar()
    ab = blind(hash_and_blind(mine, kind, a), b, DIGEST_BYTES)
    ba = blind(hash_and_blind(theirs, kind, b), a, DIGEST_BYTES)
    found = match_digests(ab, ba)
    expected = [list(theirs).index(v) if v in set(theirs) else -1 for v in mine]
    assert found.tolist() == expected
    assert (blind(hash_and_blind(mine, kind, b), a, DIGEST_BYTES) == ab).all()  # [b][a]H == [a][b]H


def _valid_point(seed: bytes) -> bytes:
    return rbcl.crypto_core_ristretto255_from_hash(hashlib.sha512(seed).digest())


@st.composite
def peer_points(draw):
    """32 bytes a peer might send: arbitrary, a valid encoding, or a valid encoding with one bit flipped."""
    choice = draw(st.integers(0, 2))
    if choice == 0:
        return draw(st.binary(min_size=32, max_size=32))
    point = bytearray(_valid_point(draw(st.binary(max_size=8))))
    if choice == 2:
        bit = draw(st.integers(0, 255))
        point[bit // 8] ^= 1 << (bit % 8)
    return bytes(point)


@settings(max_examples=200, deadline=None)
@given(peer_points())
@example(bytes(32))                                                  # the identity
@example((2**255 - 19).to_bytes(32, "little"))                       # p: not canonical (equals 0)
@example((2**255 - 1).to_bytes(32, "little"))                        # top bit set
@example(bytes([_valid_point(b"x")[0] | 1]) + _valid_point(b"x")[1:])  # a "negative" (odd) encoding
def test_blind_refuses_exactly_the_invalid_points(point):
    a, b = new_scalar(), new_scalar()
    rows = np.frombuffer(_valid_point(b"ok") + point, np.uint8).reshape(2, 32)
    if rbcl.crypto_core_ristretto255_is_valid_point(point) and any(point):
        assert (blind(blind(rows, a), b) == blind(blind(rows, b), a)).all()
        assert all(rbcl.crypto_core_ristretto255_is_valid_point(r.tobytes()) for r in blind(rows, a))
    else:
        with pytest.raises(CryptoError, match=r"party 'shop' sent an invalid point \(" + point.hex()[:16]):
            blind(rows, a, sender="shop")


def test_bad_scalars_and_shapes_are_refused():
    points = hash_and_blind(np.array([1, 2]), "int", new_scalar())
    order = 2**252 + 27742317777372353535851937790883648493
    for scalar in (bytes(32), order.to_bytes(32, "little"), b"short", "x" * 32):
        with pytest.raises(CryptoError, match="new_scalar"):
            blind(points, scalar)
    with pytest.raises(CryptoError, match=r"party 'bank' sent points of shape \(2, 16\)"):
        blind(points[:, :16], new_scalar(), sender="bank")


def test_a_party_refuses_invalid_points_naming_the_sender():
    pool = TaskPool(resource=None, workers=1)
    leader = PsiParty("party0", np.arange(10), "int", pool)
    follower = PsiParty("party1", np.arange(5, 15), "int", pool)
    theirs = read_payload(follower.blind_own(["party0"], shuffle=True))
    assert leader.blind_theirs(Mailbox("party1").send("psi_points", ["party0"], theirs)) == 10
    ours = read_payload(leader.blind_own(["party1"], shuffle=False)).copy()
    ours[3] = 0  # the identity
    with pytest.raises(CryptoError, match="party 'party0' sent an invalid point"):
        follower.reblind(Mailbox("party0").send("psi_points", ["party1"], ours))
    theirs = theirs.copy()
    theirs[7, 0] |= 1  # no longer canonical
    with pytest.raises(CryptoError, match="party 'party1' sent an invalid point"):
        leader.blind_theirs(Mailbox("party1").send("psi_points", ["party0"], theirs))


def test_invalid_points_on_ray_are_refused_by_the_receiver_naming_the_sender(ray_session):
    """A peer's invalid point is refused where it arrives; the error names receiver and sender, and the
    receiver's actor stays (nothing failed but that message)."""
    rt = Runtime(timeout_s=60)
    try:
        rt.connect(["party1"])
        handle = rt.spawn("party1", PsiParty, "party1", np.arange(3), "int", rt.pool("party1", 2))
        box = Mailbox("party0")
        introduce(rt, "party1", box)
        points = hash_and_blind(np.arange(2048), "int", new_scalar())
        points[1500] = 0  # in the second pool task's chunk
        bad = box.send("psi_points", ["party1"], points)
        with pytest.raises(CryptoError) as err:
            rt.get([("party1", handle.reblind.remote(bad))], "psi")
        assert str(err.value).startswith("party 'party1': party 'party0' sent an invalid point (0000000000000000...)")
        assert rt.get([("party1", handle.alive.remote())], "probe")[0][0] == "party1"
    finally:
        rt.kill_all()


@st.composite
def id_sets(draw):
    n = draw(st.integers(2, 5))
    as_str = draw(st.booleans())
    sets = [draw(st.lists(st.integers(0, 30), min_size=1, max_size=20, unique=True)) for _ in range(n)]
    ids = {PARTIES[i]: [f"u{v}" for v in s] if as_str else s for i, s in enumerate(sets)}
    return ids, PARTIES[draw(st.integers(0, n - 1))]


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(id_sets())
@example(({p: [3, 1, 2, 5] for p in PARTIES}, "party2"))  # first: all five actors start at once
def test_intersection_equals_set_intersection(runtime, case):
    ids, leader = case
    common = set.intersection(*(set(v) for v in ids.values()))
    if not common:
        with pytest.raises(DataError, match="no common ID"):
            private_set_intersection(runtime, ids, leader=leader, workers=1)
        return
    result = private_set_intersection(runtime, ids, leader=leader, workers=1)
    assert result.leader == leader
    for party, order in aligned_ids(ids, result).items():
        assert order == sorted(common)  # every party, one order: ascending ID
        kept = [ids[party][i] for i in result.unaligned_rows[party]]
        assert kept == [v for v in ids[party] if v not in common]  # unaligned rows kept, input order


def test_order_is_deterministic(runtime):
    rng = np.random.default_rng(1)
    ids = {"party0": rng.permutation(60), "party1": rng.permutation(np.arange(20, 90))}
    first = private_set_intersection(runtime, ids, workers=1)
    shuffled = {p: rng.permutation(v) for p, v in ids.items()}
    again = private_set_intersection(runtime, shuffled, workers=1)  # fresh keys, other input order
    a, b = aligned_ids(ids, first), aligned_ids(shuffled, again)
    assert a == b and a["party0"] == a["party1"] == list(range(20, 60))


@pytest.mark.parametrize("kind", ["str", "int"])
def test_no_raw_id_reaches_another_party(runtime, kind):
    rng = np.random.default_rng(2)
    universe = ([f"cust-{uuid.uuid4().hex}" for _ in range(90)] if kind == "str"
                else rng.integers(2**40, 2**62, 90).tolist())
    ids = {"party0": universe[:60], "party1": universe[20:80], "party2": universe[10:50] + universe[80:]}
    result = private_set_intersection(runtime, ids, workers=1, audit=True)
    assert result.n_aligned == 30

    def raw_forms(v):
        if isinstance(v, str):
            return [v.encode()]
        return [str(v).encode(), int(v).to_bytes(8, "little"), int(v).to_bytes(8, "big")]

    forms = [f for values in ids.values() for v in values for f in raw_forms(v)]
    for party in ids:
        inbox = runtime.get([(party, runtime.actor(party).received.remote())], "audit")[0]
        records = result.comm_stats.received_by(party)
        assert len(inbox) == len(records) > 0  # every message it opened went through the metered send path
        for (message, payload), record in zip(sorted(inbox, key=lambda m: (m[0].kind, m[0].sender)),
                                              sorted(records, key=lambda r: (r.kind, r.sender))):
            assert message.sender != party and (message.kind, message.sender) == (record.kind, record.sender)
            assert record.nbytes == len(message.wire) >= payload.nbytes  # metered at its sealed size
            assert record.shape[0] == "ndarray" and record.shape[1] in ("uint8", "int64")
            blob = pickle.dumps(payload) + np.asarray(payload).tobytes() + message.wire
            leaked = [f for f in forms if f in blob]
            assert not leaked, f"{party} received raw IDs in {message.kind}: {leaked[:3]}"


def test_bad_input_gives_clear_errors(runtime):
    def frames(a, b, col="id"):
        return {"party0": pd.DataFrame({col: a, "x": np.arange(len(a), dtype=float)}),
                "party1": pd.DataFrame({"id": b, "z": np.arange(len(b), dtype=float)})}

    with pytest.raises(DataError, match="duplicate ID"):
        VerticalDataset.from_frames(frames([1, 2, 2], [1, 2]), align="psi", runtime=runtime)
    with pytest.raises(DataError, match="no ID column 'id'"):
        VerticalDataset.from_frames(frames([1, 2], [1, 2], col="key"), align="psi", runtime=runtime)
    with pytest.raises(DataError, match="different ID kinds"):
        VerticalDataset.from_frames(frames([1, 2], ["1", "2"]), align="psi", runtime=runtime)
    with pytest.raises(DataError, match="floats"):
        VerticalDataset.from_frames(frames([1.0, 2.0], [1, 2]), align="psi", runtime=runtime)
    with pytest.raises(DataError, match="missing ID"):
        VerticalDataset.from_frames(frames(["a", None], ["a"]), align="psi", runtime=runtime)
    with pytest.raises(DataError, match="no common ID"):
        VerticalDataset.from_frames(frames(["a", "b"], ["c"]), align="psi", runtime=runtime)
    with pytest.raises(ConfigError, match="align"):
        VerticalDataset.from_frames(frames([1], [1]), align="sort")
    data = VerticalDataset.from_frames(frames(["b", "a", "c"], ["c", "d", "b"]), align="psi", runtime=runtime)
    assert isinstance(data, AlignedDataset) and data.ids.tolist() == ["b", "c"]
    assert data.features["party0"]["x"].tolist() == [0.0, 2.0] and data.features["party1"]["z"].tolist() == [2.0, 0.0]
    assert data.unaligned["party0"]["id"].tolist() == ["a"] and data.unaligned["party1"]["id"].tolist() == ["d"]


def test_from_files_aligns_by_psi(runtime, tmp_path):
    pd.DataFrame({"id": [3, 1, 2], "x": [3.0, 1.0, 2.0], "y": [1, 0, 1]}).to_csv(tmp_path / "bank.csv", index=False)
    pd.DataFrame({"id": [2, 4, 3], "z": [20.0, 40.0, 30.0]}).to_parquet(tmp_path / "shop.parquet")
    data = VerticalDataset.from_files({"party0": tmp_path / "bank.csv", "party1": tmp_path / "shop.parquet"},
                                      label="y", align="psi", runtime=runtime)
    # The driver holds a handle: sizes and schemas. What each party holds, fetched here as the party would:
    assert data.n_rows == 2 and data.label_party == "party0" and data.unaligned == {"party0": 1, "party1": 1}
    assert data.columns("party0") == ["x"] and data.columns("party1") == ["z"]
    (bank, y), (shop, _) = (data.tables()[p].fetch() for p in ("party0", "party1"))
    assert y.tolist() == [1.0, 1.0] and bank["x"].tolist() == [2.0, 3.0] and shop["z"].tolist() == [20.0, 30.0]
    assert data.unaligned_table("party1").fetch_ids().tolist() == [4]


def test_secureboost_after_psi_equals_prealigned(runtime):
    frame, label, _, _ = load_named("credit")
    frame = frame.iloc[:2000].reset_index(drop=True)
    frame.insert(0, "ID", np.arange(2000) * 7 + 100)  # ascending: the pre-aligned order is the PSI order
    cols = [c for c in frame.columns if c not in ("ID", label)]
    bank_cols, shop_cols = ["ID", label] + cols[: len(cols) // 2], ["ID"] + cols[len(cols) // 2:]
    rng = np.random.default_rng(3)
    bank = frame.iloc[rng.permutation(1700)][bank_cols]                  # rows 0..1699, shuffled
    shop = frame.iloc[300 + rng.permutation(1700)][shop_cols]            # rows 300..1999, shuffled
    psi = VerticalDataset.from_frames({"bank": bank, "shop": shop}, id_column="ID", label=label, align="psi",
                                      runtime=runtime)
    common = frame.iloc[300:1700]
    pre = VerticalDataset.from_frames({"bank": common[bank_cols], "shop": common[shop_cols]}, id_column="ID",
                                      label=label)
    np.testing.assert_array_equal(psi.ids, pre.ids)
    np.testing.assert_array_equal(psi.label, pre.label)
    for p in ("bank", "shop"):
        pd.testing.assert_frame_equal(psi.features[p], pre.features[p])
    assert sorted(psi.unaligned["bank"]["ID"]) == frame["ID"].iloc[:300].tolist()
    assert sorted(psi.unaligned["shop"]["ID"]) == frame["ID"].iloc[1700:].tolist()
    assert label in psi.unaligned["bank"].columns  # the label party's unaligned rows keep their labels

    models = [SecureBoostClassifier(n_estimators=2, max_depth=3, backend="plain", runtime=runtime).fit(d)
              for d in (psi, pre)]
    margins = [m.predict_margin(pre) for m in models]
    np.testing.assert_array_equal(margins[0], margins[1])
    for t0, t1 in zip(models[0].model_.trees(), models[1].model_.trees()):
        np.testing.assert_array_equal(t0.left, t1.left)
        np.testing.assert_array_equal(t0.weight, t1.weight)


def test_party_dying_mid_psi_raises_party_failed(ray_session):
    rt = Runtime(timeout_s=60)
    ids = {"bank": np.arange(3000), "shop": np.arange(1000, 4000)}

    def kill_shop():
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                handle = rt.actor("shop")
            except VFLError:
                time.sleep(0.01)
                continue
            time.sleep(0.3)  # the protocol is under way: calls are queued on both actors
            ray_session.kill(handle, no_restart=True)
            return

    killer = threading.Thread(target=kill_shop)
    killer.start()
    try:
        with pytest.raises(PartyFailedError) as err:
            private_set_intersection(rt, ids, workers=1)
    finally:
        killer.join()
        rt.kill_all()
    assert err.value.party == "shop"
