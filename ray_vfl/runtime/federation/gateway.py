"""A party's gateway: the one gRPC endpoint other organisations reach it by, over mutual TLS.

Every call names a *role* of this party (``"party"``, ``"store"``, ...) and one of its methods, with
arguments; the gateway answers with the method's result. What it guarantees:

* **Who calls is the certificate, not the message.** TLS is mutual: a caller must present a
  certificate signed by the federation's CA, and the gateway takes the caller's party from that
  certificate's name (:attr:`PartyEndpoint.certificate_name`); no field of a request names its sender.
  A caller checks it reached the party it meant: the gateway's certificate must bear that party's
  name, whatever address answered.
* **An allow-list per role.** The gateway runs a method only if its :class:`GatewayPolicy` lets peers
  call it on that role (on any instance ``"<role>@<session>"`` of it, :func:`~.roles.role_instance`);
  anything else is refused before the request's arguments are used.
* **The typed wire.** Requests and replies are :mod:`ray_vfl.runtime.codec` bytes, checked before any
  object is built, never pickle; they stream in chunks of :data:`CHUNK_BYTES` (no gRPC message-size
  limit applies to an array).

Errors reach the caller as the library's: an unreachable gateway, a handshake that fails (a
certificate of another CA, or one naming another party) or no answer within the timeout raise
:class:`~ray_vfl.errors.PartyFailedError` naming the party called; a request the gateway refuses (a
method off its list, bytes that do not decode) raise :class:`~ray_vfl.errors.ProtocolError`. A method
that raises a :class:`~ray_vfl.errors.ProtocolError` (its party refused a message that does not decode
or breaks its kind's schema) or a :class:`~ray_vfl.errors.PartyFailedError` (a peer of it failed) comes
back as that error with its fields, naming the party that reported it; the user's input refused
(:data:`RAISED_AS_THEMSELVES`) as itself; any other error as a PartyFailedError of the party called.

Example
-------
>>> import tempfile
>>> from .certs import write_test_certificates
>>> from .federation_file import Federation
>>> certs = write_test_certificates(tempfile.mkdtemp(), ["bank", "shop"])
>>> fed = Federation.from_dict({"parties": {"bank": {"gateway": "127.0.0.1:50051"}, "shop": {"gateway": "127.0.0.1:50052"}}})
>>> bank = Gateway("bank", Credentials.from_files(**certs["bank"]), fed, GatewayPolicy({"party": ["ping"]}),
...                lambda sender, role, method, args: f"pong to {sender}")
>>> port = bank.start("127.0.0.1:0")
>>> shop = GatewayClient("shop", Credentials.from_files(**certs["shop"]), fed, addresses={"bank": f"127.0.0.1:{port}"})
>>> shop.call("bank", "party", "ping")
'pong to shop'
>>> shop.close(); bank.stop()
"""

from __future__ import annotations

import logging
import threading
from concurrent import futures
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator, Mapping

import grpc

from ...errors import (ConfigError, CryptoError, DataError, NotFittedError, OverflowEncodingError, PartyFailedError,
                       ProtocolError, VFLError)
from ..codec import decode, encode
from .federation_file import Federation
from .roles import base_role

__all__ = ["Credentials", "GatewayPolicy", "Gateway", "GatewayClient", "CHUNK_BYTES", "Refusal", "RAISED_AS_THEMSELVES"]

log = logging.getLogger(__name__)

CHUNK_BYTES = 1 << 20  # requests and replies stream in pieces of at most 1 MiB
_METHOD = "/ray_vfl.Gateway/Call"
_KIND = "gateway call"
# errors a called party's method raises that reach the caller as themselves (type and text), by type name:
# the user's input or a bound of the library, not a fault of the party
RAISED_AS_THEMSELVES: dict[str, type] = {c.__name__: c for c in (
    DataError, ConfigError, CryptoError, OverflowEncodingError, NotFittedError, VFLError)}


class Refusal(VFLError):
    """Raised by a gateway's handler for a call its party's policy refuses (a role kind it does not serve,
    data it does not serve, an argument it does not accept): the caller gets a ProtocolError saying so."""


@dataclass(frozen=True)
class Credentials:
    """A party's TLS material, PEM-encoded: its certificate and key, and the CA certificate it trusts."""

    cert: bytes
    key: bytes
    ca: bytes

    @classmethod
    def from_files(cls, cert: str, key: str, ca: str) -> "Credentials":
        def read(path: str, what: str) -> bytes:
            try:
                with open(path, "rb") as fh:
                    return fh.read()
            except OSError as exc:
                raise VFLError(f"cannot read the {what} {path!r}: {exc}; make test ones with "
                               "`python -m ray_vfl.certs`, or use your organisation's") from None

        return cls(read(cert, "certificate"), read(key, "private key"), read(ca, "CA certificate"))


class GatewayPolicy:
    """Which methods of each of this party's roles a peer may call; every other call is refused. An
    instance of a role (``"party@<session>"``) has its role's list.

    >>> policy = GatewayPolicy({"party": ["route", "begin_tree"]})
    >>> policy.allows("party", "route"), policy.allows("party@" + "0" * 32, "route"), GatewayPolicy({}).allows("party", "x")
    (True, True, False)
    """

    def __init__(self, allowed: Mapping[str, Iterable[str]]) -> None:
        self.allowed = {str(role): frozenset(map(str, methods)) for role, methods in allowed.items()}

    def allows(self, role: str, method: str) -> bool:
        return method in self.allowed.get(base_role(role), ())

    def refusal(self, role: str, method: str) -> str:
        role = base_role(role)
        if role not in self.allowed:
            return f"it has no role {role!r} open to peers (roles: {sorted(self.allowed)})"
        return f"its role {role!r} does not let peers call {method!r} (allowed: {sorted(self.allowed[role])})"


def _chunks(data: bytes) -> Iterator[bytes]:
    view = memoryview(data)
    for start in range(0, max(len(data), 1), CHUNK_BYTES):
        yield bytes(view[start:start + CHUNK_BYTES])


def _joined(pieces: Iterable[bytes]) -> bytes:
    return b"".join(pieces)


class Gateway:
    """The gRPC server of party ``party``: runs ``handler(sender, role, method, args)`` for the calls its
    ``policy`` allows, ``sender`` being the party the caller's certificate names."""

    def __init__(self, party: str, credentials: Credentials, federation: Federation, policy: GatewayPolicy,
                 handler: Callable[[str, str, str, list], Any], workers: int = 8) -> None:
        federation.party(party)  # raises for a party not in the file
        self.party, self.credentials, self.policy, self.handler = party, credentials, policy, handler
        self.party_of_cert = {p.certificate_name: p.name for p in federation.parties}
        self.federation = federation
        self._server: grpc.Server | None = None
        self._workers = workers

    def start(self, address: str | None = None) -> int:
        """Listen on ``address`` (default: this party's gateway in the federation file); returns the port."""
        address = address or self.federation.party(self.party).address
        creds = grpc.ssl_server_credentials([(self.credentials.key, self.credentials.cert)],
                                            root_certificates=self.credentials.ca, require_client_auth=True)
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=self._workers))
        server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler("ray_vfl.Gateway", {
            "Call": grpc.stream_stream_rpc_method_handler(self._serve)})])
        try:
            port = server.add_secure_port(address, creds)
        except RuntimeError as exc:
            raise VFLError(f"party {self.party!r}: its gateway cannot listen on {address}: {exc}") from None
        server.start()
        self._server = server
        return port

    def stop(self, grace: float | None = None) -> None:
        if self._server is not None:
            self._server.stop(grace).wait()
            self._server = None

    def _sender(self, context) -> str | None:
        names = context.auth_context().get("x509_common_name") or []
        return self.party_of_cert.get(names[0].decode()) if names else None

    def _serve(self, request_iterator, context) -> Iterator[bytes]:
        sender = self._sender(context)
        if sender is None or sender == self.party:
            context.abort(grpc.StatusCode.PERMISSION_DENIED, "the caller's certificate names no other party of the "
                                                             "federation")
        yield from _chunks(self._answer(sender, _joined(request_iterator)))

    def _answer(self, sender: str, wire: bytes) -> bytes:
        """The encoded reply to one call: ``{"ok": result}`` or ``{"error": kind, "what": text}``."""
        try:
            request = decode(wire, sender=sender, kind=_KIND, receiver=self.party)
            if (not isinstance(request, dict) or set(request) != {"role", "method", "args"}
                    or not isinstance(request["role"], str) or not isinstance(request["method"], str)
                    or not isinstance(request["args"], list)):
                raise ProtocolError(sender, _KIND, "a call is {role: str, method: str, args: list}", self.party)
        except ProtocolError as exc:
            log.warning("party %r: refused a malformed call from %r: %s", self.party, sender, exc.what)
            return encode({"error": "malformed", "what": exc.what})
        role, method, args = request["role"], request["method"], request["args"]
        if not self.policy.allows(role, method):
            log.warning("party %r: refused %s.%s from %r", self.party, role, method, sender)
            return encode({"error": "refused", "what": self.policy.refusal(role, method)})
        try:  # a result that cannot travel is this party's failure too, said as such
            return encode({"ok": self.handler(sender, role, method, args)})
        except Refusal as exc:
            log.warning("party %r: refused %s.%s from %r: %s", self.party, role, method, sender, exc)
            return encode({"error": "refused", "what": str(exc)})
        except ProtocolError as exc:  # this party refused a message: the caller learns who sent what
            return encode({"error": "protocol", "what": [str(exc.sender), str(exc.kind), str(exc.what),
                                                         str(exc.receiver or self.party)]})
        except PartyFailedError as exc:  # a peer of this party failed (or this party's own actor)
            return encode({"error": "party_failed", "what": [str(exc.party), str(exc.phase), str(exc.cause),
                                                             str(exc.reason)]})
        except Exception as exc:  # the caller learns the error's type and text, as a Ray actor's caller does
            if type(exc).__name__ in RAISED_AS_THEMSELVES and type(exc) is RAISED_AS_THEMSELVES[type(exc).__name__]:
                return encode({"error": "raised", "what": [type(exc).__name__, str(exc)]})
            return encode({"error": "failed", "what": f"{type(exc).__name__}: {exc}"})


class GatewayClient:
    """Party ``party``'s calls to the other parties' gateways (one TLS channel per party, reused)."""

    def __init__(self, party: str, credentials: Credentials, federation: Federation, timeout_s: float = 600.0,
                 addresses: Mapping[str, str] | None = None) -> None:
        federation.party(party)
        self.party, self.credentials, self.federation, self.timeout_s = party, credentials, federation, timeout_s
        self.addresses = dict(addresses or {})
        self._channels: dict[str, tuple[grpc.Channel, Any]] = {}
        self._lock = threading.Lock()

    def _stub(self, target: str):
        with self._lock:
            if target not in self._channels:
                peer = self.federation.party(target)
                creds = grpc.ssl_channel_credentials(root_certificates=self.credentials.ca,
                                                     private_key=self.credentials.key,
                                                     certificate_chain=self.credentials.cert)
                # the gateway must present a certificate bearing the party's name, whatever address answers
                options = [("grpc.ssl_target_name_override", peer.certificate_name),
                           ("grpc.default_authority", peer.certificate_name)]
                channel = grpc.secure_channel(self.addresses.get(target, peer.address), creds, options=options)
                self._channels[target] = (channel, channel.stream_stream(_METHOD))
            return self._channels[target][1]

    def call(self, target: str, role: str, method: str, *args: Any, timeout_s: float | None = None) -> Any:
        """Run ``method`` of ``target``'s ``role`` with ``args`` and return its result (see the module
        docstring for the errors)."""
        if target == self.party:
            raise VFLError(f"party {self.party!r} calls its own roles directly, not through its gateway")
        phase = f"{role}.{method}"
        wire = encode({"role": role, "method": method, "args": list(args)})
        timeout = self.timeout_s if timeout_s is None else timeout_s
        try:
            reply = _joined(self._stub(target)(_chunks(wire), timeout=timeout))
        except grpc.RpcError as exc:
            code = exc.code()
            address = self.addresses.get(target, self.federation.party(target).address)
            if code == grpc.StatusCode.DEADLINE_EXCEEDED:
                raise PartyFailedError(target, phase, f"no answer within {timeout:g} s", reason="timeout") from None
            if code == grpc.StatusCode.PERMISSION_DENIED:
                raise PartyFailedError(target, phase, f"its gateway refused this party's certificate: {exc.details()}",
                                       reason="error") from None
            raise PartyFailedError(target, phase, f"its gateway at {address} is unreachable or its certificate does not "
                                   f"verify (not signed by the federation's CA, or not named "
                                   f"{self.federation.party(target).certificate_name!r}): {exc.details()}",
                                   reason="silent") from None
        answer = decode(reply, sender=target, kind=f"reply to {phase}", receiver=self.party)
        if not isinstance(answer, dict) or len(answer) not in (1, 2):
            raise ProtocolError(target, f"reply to {phase}", "a reply is {ok: result} or {error, what}", self.party)
        if "ok" in answer:
            if method == "mailbox_key":
                self._check_announced_key(target, phase, answer["ok"])
            return answer["ok"]
        error, what = answer.get("error"), answer.get("what")
        if error == "raised" and isinstance(what, list) and len(what) == 2 and what[0] in RAISED_AS_THEMSELVES:
            text = str(what[1])
            raise RAISED_AS_THEMSELVES[what[0]](text if f"{target!r}" in text else f"party {target!r}: {text}")
        if error in ("protocol", "party_failed"):
            raise self._reported(target, phase, error, what)
        what = str(what)
        if error == "failed":
            raise PartyFailedError(target, phase, what)
        if error in ("malformed", "refused"):
            raise ProtocolError(self.party, phase, f"party {target!r} refused it: {what}", target)
        raise ProtocolError(target, f"reply to {phase}", f"an unknown error kind {error!r}", self.party)

    def _reported(self, target: str, phase: str, error: str, what: Any) -> VFLError:
        """The ProtocolError or PartyFailedError ``target`` reported, rebuilt from its fields; a party it names
        other than itself is said to be named by ``target`` (its word, not a certificate's)."""
        if not (isinstance(what, list) and len(what) == 4 and all(isinstance(w, str) for w in what)):
            return ProtocolError(target, f"reply to {phase}", f"a {error!r} error is four strings", self.party)
        names = set(self.federation.names)
        if error == "protocol":
            sender, kind, text, receiver = what
            if receiver != target:
                text = f"{text} (reported by party {target!r})"
            return ProtocolError(sender, kind, text, receiver if receiver in names else target)
        party, their_phase, cause, reason = what
        if party != target:
            cause = f"{cause} (reported by party {target!r})"
        reason = reason if reason in ("died", "silent", "timeout", "error") else "error"
        return PartyFailedError(party if party in names else target, f"{phase}/{their_phase}", cause, reason)

    def _check_announced_key(self, target: str, phase: str, announced: Any) -> None:
        """A ``mailbox_key`` answer is ``(name, key)`` with ``name`` the party the certificate named."""
        name = announced[0] if isinstance(announced, (list, tuple)) and len(announced) == 2 else None
        if name != target:
            raise ProtocolError(target, f"reply to {phase}", f"a mailbox key announced under the name {name!r}: "
                                f"the party whose certificate is {self.federation.party(target).certificate_name!r} "
                                f"announces its own key only (under {target!r})", self.party)

    def close(self) -> None:
        with self._lock:
            for channel, _ in self._channels.values():
                channel.close()
            self._channels.clear()
