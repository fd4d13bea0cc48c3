"""Validation on receipt: every message kind that crosses parties is checked against its schema by the
receiver, and a malformed payload raises ProtocolError naming the sender, the kind and the field.

Each test builds a malformed message with ``Mailbox(sender).send(kind, [receiver], bad_payload)`` and
hands it to the receiving role object: SecureBoost parties run a real tree in this process, with a
man-in-the-middle handle that rewrites one kind of message on its way; PSI, store and split-NN
roles get the message directly; one PSI party runs as a Ray actor, so the error crosses a process.
"""

from __future__ import annotations

import dataclasses
import pickle
import re
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
import ray

from ray_vfl import BoostConfig, ProtocolError, Runtime
from ray_vfl.crypto.he.ciphertexts import CipherArray
from ray_vfl.crypto.he.plain import PlainPublicKey
from ray_vfl.data.store import InlineRows, PartyStore
from ray_vfl.psi.party import PsiParty
from ray_vfl.runtime.task_pool import TaskPool
from ray_vfl.runtime.comm import Mailbox, Message
from ray_vfl.runtime.validation import registered_kinds
from ray_vfl.secureboost import rounds
from ray_vfl.secureboost.active import ActiveParty
from ray_vfl.secureboost.passive import PassiveParty

from conftest import introduce, read_payload

REPO = Path(__file__).resolve().parents[1]
ACTIVE, PASSIVE = "party0", "party1"
N_ROWS = 300


def test_every_kind_sent_or_opened_has_a_schema():
    # each of these modules registers its protocol's schemas
    import ray_vfl.data.store
    import ray_vfl.pivodl.messages
    import ray_vfl.ssxgb.messages
    import ray_vfl.psi.party
    import ray_vfl.secureboost.messages
    import ray_vfl.splitnn.network.parties  # noqa: F401 - registers the split-NN schemas

    lines = [line for p in (REPO / "ray_vfl").rglob("*.py") for line in p.read_text().splitlines()]
    source = "\n".join(line for line in lines if ">>>" not in line)  # doctest examples send ad-hoc kinds
    sent = set(re.findall(r"\.send\(\s*\"(\w+)\"", source))
    opened = set(re.findall(r"open\(\s*(?:message|m|msg),\s*\"(\w+)\"", source))
    assert len(sent) >= 14 and opened <= sent
    assert sent <= set(registered_kinds()), sorted(sent - set(registered_kinds()))


def test_protocol_error_keeps_its_fields_across_processes():
    err = ProtocolError("party1", "level_step", "orders.bin[0] = 40 is outside [0, 33)", "party0")
    back = pickle.loads(pickle.dumps(err))
    assert (back.sender, back.kind, back.what, back.receiver, str(back)) == (
        "party1", "level_step", "orders.bin[0] = 40 is outside [0, 33)", "party0", str(err))
    assert str(err) == "party 'party1' sent a malformed 'level_step' to 'party0': orders.bin[0] = 40 is outside [0, 33)"


def test_bytes_that_are_not_sealed_or_not_wire_are_the_senders_fault():
    receiver = Mailbox("party0")
    message = Message("psi_points", "party1", ("party0",), -1, -1, pickle.dumps(np.zeros((2, 32), np.uint8)))
    with pytest.raises(ProtocolError, match="party 'party1' sent a malformed 'psi_points'.*the message is not sealed"):
        receiver.open(message, "psi_points")
    sealed = Mailbox("party1").seal.seal("psi_points", ("party0",), -1, -1, b"not wire bytes")
    with pytest.raises(ProtocolError, match="party 'party1' sent a malformed 'psi_points'.*not ray_vfl wire bytes"):
        receiver.open(Message("psi_points", "party1", ("party0",), -1, -1, sealed), "psi_points")


# ---------------------------------------------------------------------------
# SecureBoost: a real tree in this process, one kind of message rewritten on its way
class Local:
    """An in-process stand-in for a party's actor handle: ``handle.method.remote(*args)`` runs the
    role object's method here (its errors surface at once) and returns a Ray reference to the reply.
    Messages of ``kind``, in either direction, go through ``bad`` on the way."""

    def __init__(self, party, kind: str, bad) -> None:
        self.party, self.kind, self.bad = party, kind, bad

    def tamper(self, value):
        if isinstance(value, list):
            return [self.tamper(v) for v in value]
        if isinstance(value, Message) and value.kind == self.kind:
            return Mailbox(value.sender).send(value.kind, value.receivers, self.bad(read_payload(value)), value.tree,
                                              value.depth)
        return value

    def __getattr__(self, method: str):
        def remote(*args):
            args = [self.tamper(ray.get(a, timeout=60) if isinstance(a, ray.ObjectRef) else a) for a in args]
            return ray.put(self.tamper(getattr(self.party, method)(*args)))
        return SimpleNamespace(remote=remote)


def federation_run(backend: str, kind: str, bad) -> None:
    """Set-up, one tree (depth 2) and its prediction rounds, with messages of ``kind`` made ``bad``.

    The passive party holds the informative feature, so it wins the root's split (a level step with
    orders, a partition) and prediction asks it about every row."""
    rng = np.random.default_rng(0)
    y = (rng.random(N_ROWS) < 0.4).astype(float)
    passive_rows = pd.DataFrame({"x": y * 2 + rng.normal(0, 0.5, N_ROWS), "z": rng.normal(size=N_ROWS)})
    active_rows = pd.DataFrame({"a": rng.normal(size=N_ROWS)})
    cfg = BoostConfig(n_trees=1, max_depth=2, backend=backend, key_bits=1024, allow_weak_keys=True, timeout_s=60)
    pool = TaskPool(resource=None, workers=1)
    active = ActiveParty(ACTIVE, InlineRows(active_rows, y), [], cfg, pool, [ACTIVE, PASSIVE])
    handle = Local(PassiveParty(PASSIVE, InlineRows(passive_rows), [], cfg, pool), kind, bad)
    active.set_peers({PASSIVE: handle})
    ray.get(handle.set_public_key.remote(active.public_key_message()), timeout=60)
    active.collect_layouts()
    active.grow_tree(0)
    rounds.route(active, "train", 0, 1)


def _with(obj, **fields):
    return dataclasses.replace(obj, **fields)


def _set(a: np.ndarray, index, value) -> np.ndarray:
    a = np.array(a)
    a[index] = value
    return a


def _above_modulus(c: CipherArray, row: int = 0) -> CipherArray:
    return CipherArray(_set(c.data, row, 255), c.key_id, c.tag)


SECUREBOOST_CASES = [
    # (backend, kind, bad payload, sender, the words the error must contain)
    ("plain", "public_key", lambda p: ((p[0][0], {**p[0][1], "gradient_bound": 8.0}), p[1]), ACTIVE,
     "payload[0] (backend and options)"),
    ("paillier", "public_key", lambda p: (p[0], PlainPublicKey()), ACTIVE, "payload[1] (public key) is a PlainPublicKey"),
    ("plain", "histogram_layout", lambda p: {**p, "cells": _set(p["cells"], -1, p["n_features"] * 33)}, PASSIVE,
     "cells["),
    ("paillier", "histogram_layout", lambda p: {**p, "derived": _set(p["derived"], 0, 40)}, PASSIVE,
     "derived[0] = 40 is outside [0, 33)"),
    ("paillier", "histogram_layout", lambda p: {**p, "derived": p["derived"][:1]}, PASSIVE, "derived has shape (1,)"),
    ("paillier", "encrypted_gh", lambda c: _above_modulus(c, 3), ACTIVE, "row 3 is not below the ciphertext modulus"),
    ("ou", "encrypted_gh", lambda c: _above_modulus(c, 5), ACTIVE, "row 5 is not below the ciphertext modulus"),
    ("paillier", "encrypted_gh", lambda c: CipherArray(c.data[:-1], c.key_id, c.tag), ACTIVE,
     f"holds {N_ROWS - 1} entries"),
    ("plain", "encrypted_gh", lambda c: CipherArray(_set(c.data, (7, 1), np.nan), c.key_id, c.tag), ACTIVE,
     "row 7 is not finite"),
    ("paillier", "encrypted_histograms", lambda h: _with(h, ciphers=h.ciphers + h.ciphers), PASSIVE, "ciphers has 2 items"),
    ("paillier", "encrypted_histograms", lambda h: _with(h, occupied=h.occupied[:-1]), PASSIVE, "occupied has"),
    ("paillier", "encrypted_histograms", lambda h: _with(h, ciphers=[_above_modulus(h.ciphers[0])]), PASSIVE,
     "ciphers[0] row 0 is not below the ciphertext modulus"),
    ("paillier", "encrypted_histograms", lambda h: _with(h, ciphers=[CipherArray(h.ciphers[0].data, bytes(16), h.ciphers[0].tag)]),
     PASSIVE, "ciphers[0] is under another key"),
    ("plain", "level_step", lambda s: _with(s, orders=_with(s.orders, bin=_set(s.orders.bin, 0, 33))), ACTIVE,
     "orders.bin[0] = 33 is outside [0, 33) (the receiver's n_bins = 33)"),
    ("plain", "level_step", lambda s: _with(s, orders=_with(s.orders, feature=_set(s.orders.feature, 0, 2))), ACTIVE,
     "orders.feature[0] = 2 is outside [0, 2)"),
    ("plain", "level_step", lambda s: _with(s, orders=_with(s.orders, record=s.orders.record + 3)), ACTIVE,
     "orders.record[0] = 3; the receiver expects 0"),
    ("plain", "level_step", lambda s: _with(s, children=_set(s.children, (0, 0), 5)), ACTIVE,
     "children[0, 0] = 5 is not an open node"),
    ("plain", "level_step", lambda s: _with(s, orders=_with(s.orders, node=_set(s.orders.node, 0, 9))), ACTIVE,
     "orders.node[0] = 9 is not one of the receiver's open_nodes"),
    ("plain", "partition", lambda p: _with(p, counts=p.counts + 1), PASSIVE, f"counts[0] = {N_ROWS + 1}; the receiver expects {N_ROWS}"),
    ("plain", "partition", lambda p: _with(p, bits=p.bits[:-1]), PASSIVE, "bits has"),
    ("plain", "route_query", lambda q: _with(q, row=_set(q.row, 0, N_ROWS)), ACTIVE,
     f"row[0] = {N_ROWS} is outside [0, {N_ROWS}) (the receiver's n_rows = {N_ROWS})"),
    ("plain", "route_query", lambda q: _with(q, record=_set(q.record, 0, -1)), ACTIVE, "record[0] = -1 is outside"),
    ("plain", "route_answer", lambda a: _with(a, count=a.count - 1), PASSIVE,
     f"count = {N_ROWS - 1}; the receiver expects the receiver's n_queries = {N_ROWS}"),
    ("plain", "route_answer", lambda a: _with(a, bits=a.bits.astype(np.int64)), PASSIVE, "bits has dtype int64"),
]


@pytest.mark.parametrize("backend, kind, bad, sender, words", SECUREBOOST_CASES,
                         ids=[f"{c[1]}-{i}" for i, c in enumerate(SECUREBOOST_CASES)])
def test_secureboost_receiver_refuses_a_malformed_message(ray_session, backend, kind, bad, sender, words):
    with pytest.raises(ProtocolError) as err:
        federation_run(backend, kind, bad)
    assert (err.value.sender, err.value.kind) == (sender, kind)
    assert words in err.value.what
    assert str(err.value).startswith(f"party {sender!r} sent a malformed {kind!r} to ")


def test_secureboost_untampered_run_passes(ray_session):
    federation_run("paillier", "no such kind", None)


def test_every_secureboost_payload_type_is_refused_when_replaced(ray_session):
    """A payload of the wrong type altogether (say, a dict) is refused before any field is read."""
    for kind, sender in (("level_step", ACTIVE), ("encrypted_histograms", PASSIVE), ("route_answer", PASSIVE)):
        with pytest.raises(ProtocolError, match=f"party '{sender}' sent a malformed '{kind}'.*is a dict") as err:
            federation_run("plain", kind, lambda p: {"x": 1})
        assert err.value.kind == kind


# ---------------------------------------------------------------------------
# PSI
def _psi_pair():
    pool = TaskPool(resource=None, workers=1)
    return PsiParty("party0", np.arange(10), "int", pool), PsiParty("party1", np.arange(5, 15), "int", pool)


def test_psi_points_of_the_wrong_width_are_refused():
    leader, follower = _psi_pair()
    theirs = read_payload(follower.blind_own(["party0"], shuffle=True))
    with pytest.raises(ProtocolError) as err:
        leader.blind_theirs(Mailbox("party1").send("psi_points", ["party0"], theirs[:, :16]))
    assert (err.value.sender, err.value.kind) == ("party1", "psi_points")
    assert "the payload has shape (10, 16); expected (n, 32)" in err.value.what
    with pytest.raises(ProtocolError, match="has dtype int64"):
        leader.blind_theirs(Mailbox("party1").send("psi_points", ["party0"], theirs.astype(np.int64)))


def test_psi_double_blinded_must_answer_every_point():
    leader, follower = _psi_pair()
    ours = leader.blind_own(["party1"], shuffle=False)
    leader.blind_theirs(follower.blind_own(["party0"], shuffle=True))
    digests = read_payload(follower.reblind(ours))
    with pytest.raises(ProtocolError) as err:
        leader.match(Mailbox("party1").send("psi_double_blinded", ["party0"], digests[:-1]))
    assert (err.value.sender, err.value.kind) == ("party1", "psi_double_blinded")
    assert "has shape (9, 16); expected (the receiver's n_points = 10, 16)" in err.value.what


@pytest.mark.parametrize("positions, words", [(np.array([0, 10]), "payload[1] = 10 is outside [0, 10)"),
                                              (np.array([3, 3]), "holds 3 more than once"),
                                              (np.array([0.0, 1.0]), "has dtype float64")])
def test_psi_result_positions_are_checked(positions, words):
    _, follower = _psi_pair()
    follower.blind_own(["party0"], shuffle=True)
    with pytest.raises(ProtocolError) as err:
        follower.apply_result(Mailbox("party0").send("psi_result", ["party1"], positions))
    assert (err.value.sender, err.value.kind) == ("party0", "psi_result") and words in err.value.what


def test_a_psi_actor_refuses_a_malformed_message_and_the_error_crosses_the_process(ray_session):
    rt = Runtime(timeout_s=60)
    try:
        rt.connect(["party1"])
        handle = rt.spawn("party1", PsiParty, "party1", np.arange(3), "int", rt.pool("party1", 1))
        box = Mailbox("party0")
        introduce(rt, "party1", box)
        bad = box.send("psi_points", ["party1"], np.zeros((4, 31), np.uint8))
        with pytest.raises(ProtocolError) as err:
            rt.get([("party1", handle.reblind.remote(bad))], "psi")
        assert (err.value.sender, err.value.kind, err.value.receiver) == ("party0", "psi_points", "party1")
        assert "has shape (4, 31)" in err.value.what
        assert rt.get([("party1", handle.alive.remote())], "probe")[0][0] == "party1"  # the actor stays
    finally:
        rt.kill_all()


# ---------------------------------------------------------------------------
# the label party's train/test split
@pytest.mark.parametrize("test, words", [(np.array([0, 50]), "payload[1] = 50 is outside [0, 50)"),
                                         (np.array([[1, 2]]), "has shape (1, 2)"),
                                         (np.array([4, 4]), "holds 4 more than once")])
def test_split_rows_are_checked(test, words):
    store = PartyStore("shop")
    store.put("all", pd.DataFrame({"x": np.arange(50.0)}), None, None, [])
    with pytest.raises(ProtocolError) as err:
        store.apply_split(Mailbox("bank").send("split_rows", ["shop"], test), "all", ("train", "test"))
    assert (err.value.sender, err.value.kind) == ("bank", "split_rows") and words in err.value.what


# ---------------------------------------------------------------------------
# split-NN
@pytest.fixture(scope="module")
def splitnn_pair():
    pytest.importorskip("torch")
    from ray_vfl.splitnn import LabelParty, SplitNNConfig, make_fedads_like
    from ray_vfl.splitnn.network.parties import NonLabelParty

    data = make_fedads_like(1_000, seed=3, label_party="bank", nonlabel_party="shop").train.take(np.arange(128))
    cfg = SplitNNConfig(batch_size=32, epochs=1)
    label = LabelParty("bank", InlineRows(data.features["bank"], data.label), data.categorical["bank"], cfg, ["shop"])
    other = NonLabelParty("shop", InlineRows(data.features["shop"]), data.categorical["shop"], cfg, "bank")
    return label, other, cfg


def test_embeddings_with_nan_or_the_wrong_shape_are_refused(splitnn_pair):
    label, other, cfg = splitnn_pair
    emb = read_payload(other.step(None, 0))
    rows = label.schedule[0]
    own = label.bottom(label.rows["train"][rows])
    for bad, words in ((_set(emb, (2, 1), np.nan), "payload[2, 1] = nan is not finite"),
                       (emb[:-1], f"has shape ({len(rows) - 1}, {cfg.embedding_width}); expected (the receiver's n_rows = {len(rows)}"),
                       (emb.astype(np.int64), "has dtype int64")):
        with pytest.raises(ProtocolError) as err:
            label._update(0, rows, own, [Mailbox("shop").send("embedding", ["bank"], bad, tree=0)])
        assert (err.value.sender, err.value.kind) == ("shop", "embedding") and words in err.value.what
    with pytest.raises(ProtocolError, match="expects this message only from"):
        label._update(0, rows, own, [Mailbox("mallory").send("embedding", ["bank"], emb, tree=0)])


def test_embedding_gradients_with_inf_or_the_wrong_shape_are_refused(splitnn_pair):
    _, other, cfg = splitnn_pair
    emb = read_payload(other.step(None, 0))
    for bad, words in ((_set(np.zeros_like(emb), (0, 0), np.inf), "payload[0, 0] = inf is not finite"),
                       (np.zeros((len(emb), cfg.embedding_width + 1), emb.dtype), "has shape")):
        with pytest.raises(ProtocolError) as err:
            other.step(Mailbox("bank").send("embedding_grad", ["shop"], bad, tree=0), 1)
        assert (err.value.sender, err.value.kind) == ("bank", "embedding_grad") and words in err.value.what
