"""Sealed channels (ray_vfl.runtime.seal): a message opens only at its receivers, proves its sender, and
cannot be altered, replayed or re-addressed; metering counts the sealed bytes."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305

from ray_vfl import ProtocolError
from ray_vfl.errors import VFLError
from ray_vfl.runtime import seal as seal_module
from ray_vfl.runtime.codec import decode, encode
from ray_vfl.runtime.comm import CallerBox, Mailbox, Message, payload_nbytes
from ray_vfl.runtime.seal import SEAL_MAGIC, Seal, sealed_size


@pytest.fixture
def boxes():
    return Mailbox("bank"), Mailbox("shop"), Mailbox("mall")


def _refused(box: Mailbox, message: Message, words: str, kind: str = "note") -> ProtocolError:
    with pytest.raises(ProtocolError) as err:
        box.open(message, kind)
    assert (err.value.sender, err.value.kind, err.value.receiver) == (message.sender, kind, box.name)
    assert words in err.value.what, err.value.what
    return err.value


def test_a_message_opens_at_each_receiver_and_is_metered_sealed(boxes):
    bank, shop, mall = boxes
    rows = np.arange(7)
    message = bank.send("note", ["shop", "mall"], rows)
    assert message.wire.startswith(SEAL_MAGIC) and rows.tobytes() not in message.wire
    assert shop.open(message, "note").tolist() == mall.open(message, "note").tolist() == rows.tolist()
    assert [r.nbytes for r in bank.records] == [len(message.wire)] * 2
    assert len(message.wire) == sealed_size(len(encode(rows)), 2) == payload_nbytes(rows, 2)
    with pytest.raises(ProtocolError):
        decode(message.wire)  # without a receiver's key, the wire is not a payload


def test_the_seal_proves_the_sender(boxes):
    bank, shop, _ = boxes
    forged = Mailbox("mallory").send("note", ["shop"], np.arange(3))
    claimed = dataclasses.replace(forged, sender="bank")  # mallory's seal, bank's name on it
    _refused(shop, claimed, "the seal does not verify: the message was not sealed by 'bank' for 'shop'")
    other = Seal("shop")
    other.trust({"bank": Mailbox("mallory").public_key})  # a key the driver swapped: bank's messages fail
    with pytest.raises(ProtocolError, match="does not verify"):
        m = bank.send("note", ["shop"], np.arange(3))
        other.unseal(m.kind, m.sender, m.receivers, m.tree, m.depth, m.wire)


@pytest.mark.parametrize("change", [
    {"kind": "psi_result"}, {"tree": 3}, {"depth": 1}, {"receivers": ("shop", "bank2")},
])
def test_every_header_field_is_authenticated(boxes, change):
    bank, shop, _ = boxes
    Mailbox("bank2")
    message = dataclasses.replace(bank.send("note", ["shop"], np.arange(40)), **change)
    _refused(shop, message, "does not verify", kind=message.kind)


def test_an_altered_or_truncated_or_replayed_message_is_refused(boxes):
    bank, shop, _ = boxes
    message = bank.send("note", ["shop"], np.arange(40))
    for at in (len(message.wire) - 1, len(message.wire) // 2, 30):
        wire = bytearray(message.wire)
        wire[at] ^= 1
        _refused(shop, dataclasses.replace(message, wire=bytes(wire)), "does not verify")
    _refused(shop, dataclasses.replace(message, wire=message.wire[:-1]), "does not verify")
    _refused(shop, dataclasses.replace(message, wire=message.wire[:20]), "the message is not sealed")
    shop.open(message, "note")
    _refused(shop, message, "the message was opened before (a replay)")


def test_a_message_of_an_earlier_fit_is_a_replay_too(boxes):
    """A fit gives every party a new mailbox (Party._start_party) over the same key pair: a message
    opened in an earlier fit between the same parties is refused in the next one (the opened ids live
    with the key pair), not taken again because the new mailbox has seen nothing."""
    bank, shop, _ = boxes
    message = bank.send("note", ["shop"], np.arange(3))
    shop.open(message, "note")
    next_fit = Mailbox("shop")  # what the shop's actor makes when the next fit resets it
    assert next_fit.public_key == shop.public_key
    _refused(next_fit, message, "the message was opened before (a replay)")
    fresh = bank.send("note", ["shop"], np.arange(3))
    assert next_fit.open(fresh, "note").tolist() == [0, 1, 2]


def test_one_receiver_cannot_pass_its_own_payload_to_another_under_the_senders_name(boxes):
    """Every receiver of a message learns its content key; its wrap for the others also covers the
    encrypted payload, so a new payload under that key does not open at another receiver."""
    bank, shop, mall = boxes
    message = bank.send("note", ["shop", "mall"], np.arange(5))
    n, msg_id = 2, message.wire[4:20]
    header = seal_module._header(message.kind, "bank", message.receivers, message.tree, message.depth, msg_id)
    body = message.wire[20 + 48 * n:]
    pair = shop.seal._keys.pair("bank", "shop", bank.public_key)  # shop opens its own wrap
    key = pair.decrypt(msg_id[:12], message.wire[20:68], body)
    evil = ChaCha20Poly1305(key).encrypt(bytes(12), encode(np.arange(5) + 1), header)
    forged = dataclasses.replace(message, wire=message.wire[:20 + 48 * n] + evil)
    _refused(mall, forged, "does not verify")
    assert mall.open(message, "note").tolist() == list(range(5))


def test_a_party_not_addressed_or_not_introduced_cannot_open():
    bank, _shop = Mailbox("bank"), Mailbox("shop")
    message = bank.send("note", ["shop"], np.arange(3))
    with pytest.raises(VFLError, match="expected a 'note' message for itself"):
        Mailbox("mall").open(message, "note")
    stranger = Seal("shop")
    stranger._keys = seal_module._KeyPair("shop")  # shop's name, another process's key pair
    with pytest.raises(ProtocolError, match="does not verify"):
        stranger.unseal(message.kind, "bank", ("shop",), message.tree, message.depth, message.wire)
    with pytest.raises(VFLError, match="has no public key of 'nobody'"):
        bank.send("note", ["nobody"], np.arange(3))


def test_keys_handed_out_are_checked():
    bank = Mailbox("bank")
    with pytest.raises(VFLError, match="another key as its own"):
        bank.trust({"bank": bytes(32)})
    with pytest.raises(VFLError, match="not 32 bytes"):
        bank.trust({"shop": b"short"})


def test_an_unsealed_message_is_refused_unless_both_sides_measure_without_seals():
    bank, shop = Mailbox("bank"), Mailbox("shop")
    bank.trust({}, sealed=False)
    message = bank.send("note", ["shop"], np.arange(3))
    assert message.wire == encode(np.arange(3))  # the benchmark's unsealed wire: the encoded payload
    _refused(shop, message, "the message is not sealed")
    shop.trust({}, sealed=False)
    assert shop.open(message, "note").tolist() == [0, 1, 2]


def test_a_result_for_the_caller_opens_with_that_calls_key_only():
    """Predictions go back to the caller sealed to a key made for that call: another call's key, or a
    process that only knows the name ``caller``, cannot open them, and the box proves the sender."""
    bank, shop = Mailbox("bank"), Mailbox("shop")
    box = CallerBox({"bank": bank.public_key, "shop": shop.public_key})
    message = bank.send_to_caller("result", box.public_key, np.arange(4.0))
    assert message.receivers == ("caller",) and message.wire.startswith(SEAL_MAGIC)
    assert bank.records[-1].receiver == "caller" and bank.records[-1].nbytes == len(message.wire)
    other_call = CallerBox({"bank": bank.public_key})
    with pytest.raises(ProtocolError, match="does not verify"):
        other_call.open(message, "result")
    with pytest.raises(ProtocolError, match="does not verify"):  # the name alone opens nothing
        Seal("caller").unseal("result", "bank", ("caller",), -1, -1, message.wire)
    with pytest.raises(ProtocolError, match="only from"):
        box.open(message, "result", senders=["shop"])
    forged = dataclasses.replace(shop.send_to_caller("result", box.public_key, np.zeros(4)), sender="bank")
    with pytest.raises(ProtocolError, match="does not verify"):
        box.open(forged, "result")
    assert box.open(message, "result", senders=["bank"]).tolist() == [0.0, 1.0, 2.0, 3.0]
    with pytest.raises(VFLError, match="caller key that is not 32 bytes"):
        bank.send_to_caller("result", b"short", np.zeros(2))
