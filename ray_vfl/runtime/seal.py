"""Sealed channels: every message is readable by its receivers only, and proves its sender.

Each party's actor makes an X25519 key pair (OS entropy) the first time it opens a mailbox; the
private key never leaves that process. At set-up the driver collects the parties' public keys and
hands every party the others' (:meth:`ray_vfl.runtime.actors.Runtime.introduce`). Sender ``s``
and receiver ``r`` share ``K(s -> r) = HKDF-SHA256(X25519(sk_s, pk_r))``, a key only the two of
them can compute (static-static Diffie-Hellman; the HKDF info binds both names, both public keys
and the direction). A message's encoded payload (:mod:`ray_vfl.runtime.codec`) is sealed once for
all its receivers, with ChaCha20-Poly1305 (RFC 8439) and the message's *header* as associated data
(kind, sender, receivers, tree, depth and a random 16-byte message id, whose first 12 bytes are
the nonce under a pair key):

- to one receiver: the payload is encrypted under ``K(s -> r)``;
- to several: a fresh random content key ``ck`` encrypts the payload (a key used once, so a fixed
  nonce), and ``ck`` is wrapped for each receiver under ``K(s -> r)``. A wrap authenticates the
  encrypted payload too, so one receiver, who knows ``ck``, cannot hand another a payload of its
  own under the sender's name.

The receiver recomputes ``K(claimed sender -> itself)``: a message whose seal does not open was not
sealed by the party it names, was altered on the way, or was meant for another party; one whose
id it has opened before is a replay: the ids are kept with the party's key pair, which lives as long
as its actor, so a message of an earlier fit between the same actors (a fit's mailbox is new, its key
pair not) is refused too. Both raise :class:`~ray_vfl.errors.ProtocolError`. The
sender is thus proven by the seal, not by a field the sender fills in. The driver, Ray's object
store and any relay see headers and ciphertext only.

Trust. The driver is honest but curious: it may read what passes through it (ciphertext now),
but follows the protocol, so it hands out the real public keys. A malicious driver could hand
out its own keys and read or alter every message (a man in the middle); against that, the
cross-organisation mode (still to come) is to pin each party's key by a certificate instead of
taking it from the driver. Nonces under a pair key are random (96 bits): safe for 2**32 messages per direction of a pair.

Example
-------
>>> bank, shop = Seal("bank"), Seal("shop")        # in one process, each knows the other
>>> sealed = bank.seal("hello", ("shop",), 0, -1, b"payload")
>>> bytes(shop.unseal("hello", "bank", ("shop",), 0, -1, sealed))
b'payload'
>>> shop.unseal("hello", "bank", ("shop",), 0, -1, sealed)
Traceback (most recent call last):
...
ray_vfl.errors.ProtocolError: party 'bank' sent a malformed 'hello' to 'shop': the message was opened before (a replay)
"""

from __future__ import annotations

import os
import struct
from typing import Mapping, Sequence

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from ..errors import ProtocolError, VFLError

__all__ = ["Seal", "SEAL_MAGIC", "PUBLIC_KEY_BYTES", "CALLER", "sealed_size"]

CALLER = "caller"
"""The receiver name of what a protocol hands back to whoever called it (predictions): the driver's
process makes a key pair for one call (``Seal(CALLER, ephemeral=True)``), hands its public key with
the call, and the party that computed the result seals it to that key
(:meth:`ray_vfl.runtime.comm.Mailbox.send_to_caller`); Ray's object store and any relay hold
ciphertext, and the caller proves which party sealed it."""

SEAL_MAGIC = b"RVS\x01"  # format version 1
PUBLIC_KEY_BYTES = 32
_ID = 16  # message id
_WRAP = 32 + 16  # a wrapped content key and its tag
_TAG = 16
_ZERO_NONCE = bytes(12)  # the content key encrypts one payload only
_INFO = b"ray_vfl/seal/v1"


def sealed_size(plain_bytes: int, receivers: int) -> int:
    """Bytes of a sealed message: the payload's plus 36, and 48 per receiver if there are several.

    Example
    -------
    >>> sealed_size(1000, 1), sealed_size(1000, 2)
    (1036, 1132)
    """
    return len(SEAL_MAGIC) + _ID + (_WRAP * receivers if receivers != 1 else 0) + plain_bytes + _TAG


def _lp(text: str) -> bytes:
    raw = text.encode()
    return len(raw).to_bytes(2, "big") + raw


_ROUTE = struct.Struct(">qq")
_PREFIXES: dict[tuple, bytes] = {}  # (kind, sender, receivers) -> the header's first part, built once


def _header(kind: str, sender: str, receivers: Sequence[str], tree: int, depth: int, msg_id: bytes) -> bytes:
    """What a seal authenticates besides the payload (unambiguous: every part length-prefixed)."""
    route = (kind, sender, tuple(receivers))
    prefix = _PREFIXES.get(route)
    if prefix is None:
        prefix = b"".join([SEAL_MAGIC, _lp(kind), _lp(sender), len(receivers).to_bytes(2, "big"), *map(_lp, receivers)])
        if len(_PREFIXES) < 4096:
            _PREFIXES[route] = prefix
    return prefix + _ROUTE.pack(tree, depth) + msg_id


class _KeyPair:
    """A party's X25519 key pair in this process, and the pair keys derived from it."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._private = X25519PrivateKey.generate()  # OS entropy
        self.public = self._private.public_key().public_bytes_raw()
        self._pairs: dict[tuple[str, str, bytes], ChaCha20Poly1305] = {}
        # ids of every message opened under this key pair, by every mailbox of this party in this process
        # (one per fit): a message of an earlier fit is a replay too (16-byte ids, ~100 bytes of memory each)
        self.seen: set[bytes] = set()

    def pair(self, sender: str, receiver: str, peer_public: bytes) -> ChaCha20Poly1305:
        """The AEAD under ``K(sender -> receiver)``; this party is one of the two."""
        cache = (sender, receiver, peer_public)
        aead = self._pairs.get(cache)
        if aead is None:
            shared = self._private.exchange(X25519PublicKey.from_public_bytes(peer_public))
            keys = (self.public, peer_public) if sender == self.name else (peer_public, self.public)
            info = _INFO + _lp(sender) + _lp(receiver) + keys[0] + keys[1]
            key = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=info).derive(shared)
            aead = self._pairs[cache] = ChaCha20Poly1305(key)
        return aead


# One key pair per party name in this process. A party's actor holds its own only; a test that
# runs several roles in one process holds theirs, and they know each other without introduction.
_LOCAL: dict[str, _KeyPair] = {}


def _local(name: str) -> _KeyPair:
    pair = _LOCAL.get(name)
    if pair is None:
        pair = _LOCAL[name] = _KeyPair(name)
    return pair


class Seal:
    """One mailbox's seal: its party's key pair and the public keys of the parties it talks to.

    ``trust`` records the keys the driver handed out at set-up; a party whose key was made in this
    same process needs none. Sealing to, or opening from, any other party is refused.
    """

    def __init__(self, name: str, ephemeral: bool = False) -> None:
        self.name = name
        self._keys = _KeyPair(name) if ephemeral else _local(name)  # ephemeral: a key pair kept by no one else
        self._trusted: dict[str, bytes] = {}
        self._seen = self._keys.seen  # as long as the key pair: across this party's fits, not one mailbox's

    @property
    def public_key(self) -> bytes:
        """This party's X25519 public key (32 bytes), for the driver to hand to the others."""
        return self._keys.public

    def trust(self, keys: Mapping[str, bytes]) -> None:
        """Take the other parties' public keys (name -> 32 bytes; this party's own entry, if
        given, must be its own key)."""
        for name, key in keys.items():
            if not isinstance(name, str) or not isinstance(key, bytes) or len(key) != PUBLIC_KEY_BYTES:
                raise VFLError(f"party {self.name!r} was handed a public key that is not {PUBLIC_KEY_BYTES} bytes "
                               f"for {name!r}")
            if name == self.name:
                if key != self.public_key:
                    raise VFLError(f"party {self.name!r} was handed another key as its own: the key exchange was "
                                   "tampered with, or two actors use this party's name")
                continue
            self._trusted[name] = key
        # A peer's new key replaces the old; pair keys of the old stay cached under the old key.

    def _peer(self, name: str) -> bytes | None:
        key = self._trusted.get(name)
        if key is None and name in _LOCAL:
            key = _LOCAL[name].public
        return key

    def seal(self, kind: str, receivers: Sequence[str], tree: int, depth: int, plain: bytes,
             keys: Mapping[str, bytes] | None = None) -> bytes:
        """``plain`` sealed for ``receivers`` (see the module docstring); ``keys``: public keys for this
        message only (a caller's key made for one call, :data:`CALLER`), taken before the trusted ones."""
        peers = []
        for r in receivers:
            key = (keys or {}).get(r) or self._peer(r)
            if key is None:
                raise VFLError(f"party {self.name!r} has no public key of {r!r} to seal a {kind!r} for it: the "
                               "driver hands out the keys at set-up (Runtime.introduce)")
            peers.append(key)
        msg_id = os.urandom(_ID)
        header = _header(kind, self.name, receivers, tree, depth, msg_id)
        if len(receivers) == 1:
            return b"".join([SEAL_MAGIC, msg_id, self._keys.pair(self.name, receivers[0], peers[0]).encrypt(
                msg_id[:12], plain, header)])
        content_key = os.urandom(32)
        body = ChaCha20Poly1305(content_key).encrypt(_ZERO_NONCE, plain, header)
        wraps = [self._keys.pair(self.name, r, key).encrypt(msg_id[:12], content_key, body)
                 for r, key in zip(receivers, peers)]
        return b"".join([SEAL_MAGIC, msg_id, *wraps, body])

    def unseal(self, kind: str, sender: str, receivers: Sequence[str], tree: int, depth: int,
               sealed: bytes) -> bytes:
        """The payload of a message sealed by ``sender`` for this party (among ``receivers``);
        :class:`~ray_vfl.errors.ProtocolError` if the seal does not prove that."""
        def refuse(what: str) -> ProtocolError:
            return ProtocolError(sender, kind, what, self.name)

        n = len(receivers)
        if not isinstance(sealed, bytes) or len(sealed) < sealed_size(0, n) or sealed[:4] != SEAL_MAGIC:
            raise refuse("the message is not sealed")
        if sender == self.name or self.name not in receivers:
            raise refuse(f"the message is not from another party to {self.name!r}")
        key = self._peer(sender)
        if key is None:
            raise refuse(f"{self.name!r} has no public key of {sender!r}: the driver did not introduce it")
        msg_id = sealed[4:4 + _ID]
        if msg_id in self._seen:
            raise refuse("the message was opened before (a replay)")
        header = _header(kind, sender, receivers, tree, depth, msg_id)
        pair = self._keys.pair(sender, self.name, key)
        try:
            if n == 1:
                plain = pair.decrypt(msg_id[:12], memoryview(sealed)[4 + _ID:], header)
            else:
                start = 4 + _ID + _WRAP * receivers.index(self.name)
                body = memoryview(sealed)[4 + _ID + _WRAP * n:]
                content_key = pair.decrypt(msg_id[:12], sealed[start:start + _WRAP], body)
                plain = ChaCha20Poly1305(content_key).decrypt(_ZERO_NONCE, body, header)
        except InvalidTag:
            raise refuse(f"the seal does not verify: the message was not sealed by {sender!r} for {self.name!r}, "
                         "or it was altered on the way") from None
        self._seen.add(msg_id)
        return plain
