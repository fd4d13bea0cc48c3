"""Cross-organisation gateways (issue 39, the first part): certificates, the federation file, and in-process
gateways over mutual TLS on loopback: the caller named by its certificate, a certificate of another CA or
of another party refused, the allow-list, bytes that do not decode refused before the handler runs,
arrays streamed in chunks, an unreachable party named."""

from __future__ import annotations

import os
import pickle
import socket
import stat

import numpy as np
import pytest

from ray_vfl import ConfigError, DataError, PartyFailedError, ProtocolError
from ray_vfl.errors import VFLError
from ray_vfl.certs import main as certs_main
from ray_vfl.runtime.federation.certs import certificate_name, write_test_certificates
from ray_vfl.runtime.federation.federation_file import Federation
from ray_vfl.runtime.federation.gateway import CHUNK_BYTES, Credentials, Gateway, GatewayClient, GatewayPolicy


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """bank and shop in one federation (one CA), mall with a certificate of the same CA but in no federation,
    and an outsider whose CA the federation does not trust; bank's gateway is up."""
    folder = tmp_path_factory.mktemp("certs")
    certs = write_test_certificates(str(folder / "ours"), ["bank", "shop", "mall"])
    other = write_test_certificates(str(folder / "theirs"), ["shop"])
    ports = {"bank": _free_port(), "shop": _free_port()}
    fed = Federation.from_dict({"parties": {p: {"gateway": f"127.0.0.1:{port}"} for p, port in ports.items()}})
    calls = []

    def handler(sender, role, method, args):
        calls.append((sender, role, method))
        if method == "fail":
            raise ValueError("the bank's own error")
        if method == "bad_data":
            raise DataError("column 'age' is missing from bank.csv")
        if method == "bad_config":
            raise ConfigError("max_bin must be in [2, 256], got 1")
        if method == "bad_message":  # bank's role refusing a message of shop's that breaks its kind
            raise ProtocolError("shop", "level_step", "orders.bin[3] = 40 is outside [0, 33)", "bank")
        if method == "peer_failed":  # one of bank's own actors failed under the call
            raise PartyFailedError("bank", "histograms", "ValueError: boom", reason="died")
        if method == "mailbox_key":  # bank announcing a key under shop's name
            return ["shop", bytes(32)]
        return {"sender": sender, "sum": float(np.sum(args[0])), "back": args[0]}

    bank = Gateway("bank", Credentials.from_files(**certs["bank"]), fed, GatewayPolicy({"party": ["total", "fail", "bad_data", "bad_config", "mailbox_key",
                                                                                   "bad_message", "peer_failed"]}),
                   handler)
    bank.start()
    clients = []

    def client(creds, name="shop", **kw):
        c = GatewayClient(name, creds, fed, timeout_s=10, **kw)
        clients.append(c)
        return c

    yield {"certs": certs, "other": other, "fed": fed, "calls": calls, "client": client, "ports": ports}
    for c in clients:
        c.close()
    bank.stop()


def test_a_call_streams_arrays_and_names_the_caller_by_its_certificate(world):
    shop = world["client"](Credentials.from_files(**world["certs"]["shop"]))
    big = np.arange(3 * CHUNK_BYTES // 8, dtype=np.int64)  # 3 MiB: three chunks each way
    reply = shop.call("bank", "party", "total", big)
    assert reply["sender"] == "shop" and reply["sum"] == float(big.sum())
    np.testing.assert_array_equal(reply["back"], big)
    assert world["calls"][-1] == ("shop", "party", "total")


def test_a_method_off_the_list_is_refused_before_the_handler_runs(world):
    shop = world["client"](Credentials.from_files(**world["certs"]["shop"]))
    before = len(world["calls"])
    with pytest.raises(ProtocolError, match="party 'bank' refused it: its role 'party' does not let peers call 'dump'"):
        shop.call("bank", "party", "dump")
    with pytest.raises(ProtocolError, match="it has no role 'store' open to peers"):
        shop.call("bank", "store", "total", np.zeros(2))
    assert len(world["calls"]) == before


def test_bytes_that_do_not_decode_are_refused_before_the_handler_runs(world):
    """A pickle (which would run code in a receiver that unpickled it) and a request of the wrong shape."""
    shop = world["client"](Credentials.from_files(**world["certs"]["shop"]))
    before = len(world["calls"])
    from ray_vfl.runtime.codec import decode, encode

    for wire in (pickle.dumps({"role": "party", "method": "total", "args": [os.system]}),
                 encode({"role": "party", "method": "total"})):
        reply = decode(b"".join(shop._stub("bank")(iter([wire]), timeout=10)))
        assert reply["error"] == "malformed", reply
    assert len(world["calls"]) == before


def test_a_failing_method_names_the_party(world):
    shop = world["client"](Credentials.from_files(**world["certs"]["shop"]))
    with pytest.raises(PartyFailedError, match="party 'bank' failed during phase 'party.fail': ValueError: the bank's own"):
        shop.call("bank", "party", "fail")


def test_a_remote_data_or_config_error_arrives_as_itself_naming_the_party(world):
    """The user's input refused at another organisation is the same error type at the caller, not a party failure."""
    shop = world["client"](Credentials.from_files(**world["certs"]["shop"]))
    with pytest.raises(DataError, match="party 'bank': column 'age' is missing") as caught:
        shop.call("bank", "party", "bad_data")
    assert type(caught.value) is DataError
    with pytest.raises(ConfigError, match="party 'bank': max_bin must be") as caught:
        shop.call("bank", "party", "bad_config")
    assert type(caught.value) is ConfigError


def test_a_protocol_error_or_failure_at_the_called_party_arrives_as_itself_naming_it(world):
    """A message the called party refused (ProtocolError) and a failure under the call (PartyFailedError)
    come back with their fields, not as a PartyFailedError of the text (as they did)."""
    shop = world["client"](Credentials.from_files(**world["certs"]["shop"]))
    with pytest.raises(ProtocolError, match=r"party 'shop' sent a malformed 'level_step' to 'bank': orders.bin\[3\] = 40 "
                                            r"is outside \[0, 33\)$") as caught:
        shop.call("bank", "party", "bad_message")
    assert type(caught.value) is ProtocolError and caught.value.receiver == "bank"
    with pytest.raises(PartyFailedError, match="party 'bank' failed during phase 'party.peer_failed/histograms': "
                                               "ValueError: boom$") as failed:
        shop.call("bank", "party", "peer_failed")
    assert failed.value.reason == "died"


def test_mailbox_keys_are_pinned_to_certificate_names(world):
    """Whose key a key announcement is, is decided by the certificate the gateway authenticated: bank's
    gateway answering ``mailbox_key`` with a key under shop's name is refused at the caller; a serving party
    takes from a caller keys under the caller's name and its own only."""
    shop = world["client"](Credentials.from_files(**world["certs"]["shop"]))
    with pytest.raises(ProtocolError, match="party 'bank' sent a malformed 'reply to party.mailbox_key'.*under the "
                                            "name 'shop'"):
        shop.call("bank", "party", "mailbox_key")
    from ray_vfl.runtime.federation.gateway import Refusal

    server, key = _server(), bytes(32)
    for keys in ({"mall": key}, {"bank": key, "mall": key}, {"bank": key, "shop": key, "party1": key}):
        with pytest.raises(Refusal, match=r"only from the party it belongs to: 'bank' \(by its certificate\) "
                                          r"announced keys for \["):
            server.handle("bank", "secureboost", "trust_mailboxes", [keys, True])
    with pytest.raises(Refusal, match="runs no role"):  # the caller's own key and the party's pass the pin
        server.handle("bank", "secureboost", "trust_mailboxes", [{"bank": key, "shop": key}, True])
    # through the gateway: mall (a party of the federation below) announcing a key for bank to shop
    certs = world["certs"]
    ports = {"bank": _free_port(), "shop": _free_port(), "mall": _free_port()}
    fed = Federation.from_dict({"parties": {p: {"gateway": f"127.0.0.1:{port}"} for p, port in ports.items()}})
    gateway = Gateway("shop", Credentials.from_files(**certs["shop"]), fed,
                      GatewayPolicy(server.policy.gateway_allow_list()), server.handle)
    gateway.start()
    mall = GatewayClient("mall", Credentials.from_files(**certs["mall"]), fed, timeout_s=10)
    try:
        with pytest.raises(ProtocolError, match="party 'shop' refused it: .*'mall' \\(by its certificate\\) "
                                                "announced keys for \\['bank'\\]"):
            mall.call("shop", "secureboost", "trust_mailboxes", {"bank": key}, True)
    finally:
        mall.close()
        gateway.stop()


def test_a_certificate_of_another_ca_is_refused(world):
    outsider = world["client"](Credentials.from_files(**world["other"]["shop"]))  # named shop, signed by another CA
    before = len(world["calls"])
    with pytest.raises(PartyFailedError, match="party 'bank' failed.*does not verify"):
        outsider.call("bank", "party", "total", np.zeros(2), timeout_s=5)
    assert len(world["calls"]) == before


def test_a_party_outside_the_federation_is_refused_and_a_gateway_must_bear_its_partys_name(world):
    certs, fed = world["certs"], world["fed"]
    mall = GatewayClient("shop", Credentials.from_files(**certs["mall"]), fed, timeout_s=5)  # the CA's, but no party's
    with pytest.raises(PartyFailedError, match="refused this party's certificate: the caller's certificate names no"):
        mall.call("bank", "party", "total", np.zeros(2))
    mall.close()
    # mall's gateway listening where shop's should be: bank reaching "shop" there must not take it for shop
    impostor = Gateway("shop", Credentials.from_files(**certs["mall"]), fed, GatewayPolicy({"party": ["total"]}),
                       lambda *a: "impostor")
    impostor.start()
    try:
        bank = world["client"](Credentials.from_files(**certs["bank"]), name="bank")
        with pytest.raises(PartyFailedError, match="party 'shop' failed.*not named 'shop'"):
            bank.call("shop", "party", "total", np.zeros(2), timeout_s=5)
    finally:
        impostor.stop()


def test_an_unreachable_gateway_names_its_party_within_the_timeout(world):
    bank = world["client"](Credentials.from_files(**world["certs"]["bank"]), name="bank")  # shop's gateway is down
    with pytest.raises(PartyFailedError, match="party 'shop' failed during phase 'party.total'") as caught:
        bank.call("shop", "party", "total", np.zeros(2), timeout_s=3)
    assert caught.value.party == "shop"


def test_the_federation_file_and_certificates(tmp_path):
    path = tmp_path / "federation.yaml"
    path.write_text("parties:\n  bank: {gateway: 'bank.example.org:50051'}\n  shop: {gateway: '10.0.0.7:50051'}\n")
    fed = Federation.from_yaml(str(path))
    assert fed.names == ["bank", "shop"] and fed.party("bank").certificate_name == "bank"
    for content, message in (
        ({"parties": {"bank": {"gateway": "a:1"}}}, "at least 2 parties"),
        ({"parties": {"Bank": {"gateway": "a:1"}, "shop": {"gateway": "b:1"}}}, "party name 'Bank'"),
        ({"parties": {"bank": {"gateway": "a:1"}, "shop": {"gateway": "a:1"}}}, "both name gateway a:1"),
        ({"parties": {"bank": {"gateway": "a:1", "port": 3}, "shop": {"gateway": "b:1"}}}, "unknown key"),
        ({"parties": {"bank": {"gateway": "a:99999"}, "shop": {"gateway": "b:1"}}}, "not HOST:PORT"),
        ({"members": {}}, "one key, 'parties'"),
    ):
        with pytest.raises(ConfigError, match=message):
            Federation.from_dict(content)
    with pytest.raises(ConfigError, match="does not exist"):
        Federation.from_yaml(str(tmp_path / "none.yaml"))
    with pytest.raises(ConfigError, match="not in the federation file"):
        fed.party("mall")
    assert certs_main(["--out", str(tmp_path / "c"), "bank", "shop"]) == 0
    assert certificate_name((tmp_path / "c" / "shop.pem").read_bytes()) == "shop"
    assert stat.S_IMODE(os.stat(tmp_path / "c" / "shop.key").st_mode) == 0o600
    assert certs_main(["--out", str(tmp_path / "d"), "Bank!"]) == 1


def test_remote_handles_have_the_surface_of_actor_handles(world, runtime):
    """A role of a party on another cluster called as an actor handle: ``.method.remote(*args)`` returns an
    ObjectRef of the caller's cluster (a Ray task sends it through the caller's gateway client); a top-level
    reference's value travels; at the called party the gateway's dispatcher runs the method on its own actor."""
    import ray

    from ray_vfl.runtime.federation.stubs import ClientSpec, RemoteHandle, dispatcher

    @ray.remote(num_cpus=0)
    class Ledger:
        def total(self, values, scale):
            return float(np.sum(values)) * scale

        def secret(self):
            return "never"

        def pair(self, x):
            return x, 2 * x

        def check(self, entry):
            raise ProtocolError("shop", "ledger_entry", f"{entry!r} is not a finite number", "bank")

    certs, ports = world["certs"], world["ports"]
    port = _free_port()
    fed = Federation.from_dict({"parties": {"bank": {"gateway": f"127.0.0.1:{port}"},
                                            "shop": {"gateway": f"127.0.0.1:{ports['shop']}"}}})
    ledger = Ledger.remote()
    gateway = Gateway("bank", Credentials.from_files(**certs["bank"]), fed, GatewayPolicy({"party": ["total", "check", "pair"]}),
                      dispatcher({"party": ledger}, timeout_s=10, party="bank"))
    gateway.start()
    try:
        spec = ClientSpec("shop", certs["shop"], {"parties": {p.name: {"gateway": p.address} for p in fed.parties}},
                          timeout_s=10)
        bank = RemoteHandle(spec, "bank", "party")
        ref = bank.total.remote(ray.put(np.arange(10.0)), 2.0)
        assert isinstance(ref, ray.ObjectRef) and ray.get(ref, timeout=30) == 90.0
        with pytest.raises(ProtocolError, match="does not let peers call 'secret'"):
            ray.get(bank.secret.remote(), timeout=30)
        # the bank's actor refusing a message: a ProtocolError naming it at the caller, through Ray on both sides
        from ray_vfl.runtime.waiting import gather

        with pytest.raises(ProtocolError, match="malformed 'ledger_entry' to 'bank': 'nan' is not a finite") as caught:
            gather([("bank", bank.check.remote("nan"))], "check", 30)
        assert type(caught.value) is ProtocolError
        # a sealed protocol message crosses as it is: the receiver's mailbox checks the seal, not the gateway
        from ray_vfl.runtime.codec import decode, encode
        from ray_vfl.runtime.comm import Mailbox

        bank_box = Mailbox("bank")
        sealed = Mailbox("shop").send("note", ["bank"], np.arange(3))
        assert bank_box.open(decode(encode(sealed)), "note").tolist() == [0, 1, 2]
        # references nested in an argument are resolved on the caller's cluster and their values travel
        assert ray.get(bank.total.remote((ray.put(1.0), ray.put(2.0), 3.0), 1.0), timeout=30) == 6.0
        # num_returns, as an actor method's: one reference per item of the tuple the method returns
        first, second = bank.pair.options(num_returns=2).remote(4.0)
        assert ray.get([first, second], timeout=30) == [4.0, 8.0]
        with pytest.raises(VFLError, match="num_returns only"):
            bank.pair.options(num_returns=2, num_cpus=1)
    finally:
        gateway.stop()
        ray.kill(ledger)


def _server(kinds=None):
    from ray_vfl.data.sources import PartySource
    from ray_vfl.runtime.federation.roles import ROLE_KINDS, ServePolicy
    from ray_vfl.runtime.federation.serving import PartyServer

    policy = ServePolicy("shop", {"shop.parquet": PartySource("/srv/shop/shop.parquet", id_column="cid")},
                         tuple(kinds or ROLE_KINDS))
    return PartyServer(policy, runtime=None, timeout_s=5)


def test_a_serving_party_refuses_what_its_policy_does_not_allow():
    """The policy checks of ``python -m ray_vfl.serve``, before anything starts (no Ray): role kinds it does
    not serve, another party's name, IDs sent instead of its own table, an audit log, a saved model to
    continue, data it does not serve, a role it does not run for the caller, a class no party serves."""
    from ray_vfl.data.sources import PartySource
    from ray_vfl.runtime.federation.gateway import Refusal
    from ray_vfl.runtime.federation.roles import ROLE_KINDS, PoolSpec, ServePolicy, StartRole, TableKey, kind_of_class
    from ray_vfl.secureboost.active import ActiveParty
    from ray_vfl.trees.config import BoostConfig

    server, table = _server(kinds=("store", "psi", "secureboost-passive")), TableKey("data", "source-1")
    config = BoostConfig(n_trees=1, backend="plain")
    refused = [
        (_server(kinds=("store",)), StartRole("psi", ["shop", table, None, PoolSpec(), False, True]),
         "does not serve role kind 'psi'"),
        (server, StartRole("store", ["bank"]), "under its own name only"),
        (server, {"kind": "store"}, "takes a StartRole record"),
        (server, StartRole("psi", ["shop", np.arange(3), "int", PoolSpec(), False, True]), "IDs of its own table"),
        (server, StartRole("psi", ["shop", table, None, PoolSpec(), True, True]), "no PSI audit log"),
        (server, StartRole("secureboost-passive", ["shop", table, [], config, PoolSpec(), "/home/shop/model.json"]),
         "continuing a saved model"),
        (server, StartRole("ssxgb", ["shop"]), "does not serve role kind 'ssxgb'"),
        (_server(), StartRole("splitnn-nonlabel", ["shop", table, [], None, "mall", 0], "0" * 32),
         "sends its embeddings to the party that starts its role only \\('bank'\\), not to 'mall'"),
        (_server(), StartRole("splitnn-nonlabel", ["shop", np.zeros((2, 3)), [], None, "bank", 0], "0" * 32),
         "trains on its own table only"),
    ]
    for srv, request, message in refused:
        with pytest.raises(Refusal, match=message):
            srv.handle("bank", "control", "start_role", [request])
    for source in (PartySource("/etc/passwd"), PartySource.sql("sqlite:///shop.db", "SELECT * FROM t")):
        with pytest.raises(Refusal, match="does not serve"):
            server._served_open(["k", source])
    served = server._served_open(["k", PartySource("shop.parquet", id_column="other")])[1]
    assert served.location == "/srv/shop/shop.parquet" and served.id_column == "cid"
    with pytest.raises(Refusal, match="runs no role 'data' for party 'bank'"):
        server.handle("bank", "data", "schema", ["k"])
    with pytest.raises(ConfigError, match="can be asked to run.*not a ActiveParty"):
        kind_of_class(ActiveParty, "shop")
    with pytest.raises(ConfigError, match="unknown role kind"):
        ServePolicy("shop", {}, ("store", "splitnn"))
    assert "rows" not in server.policy.gateway_allow_list()["data"]  # a store's raw rows never leave it
    assert ROLE_KINDS["splitnn-nonlabel"].cls == "ray_vfl.splitnn.network.parties:NonLabelParty"  # torch not imported here
    assert not {"state", "param_grads", "recorded_view", "save_part", "load_part"} & set(
        _server().policy.gateway_allow_list()["splitnn"])  # a feature party's weights and view never leave it


def test_refusals_reach_the_caller_as_protocol_errors_naming_the_party(world):
    """Through a gateway run by a serving party's handler: a policy refusal and a method off a role's list
    (a store's ``rows``, which would hand over its table) both come back as ProtocolError."""
    from ray_vfl.runtime.federation.roles import StartRole
    from ray_vfl.runtime.federation.stubs import ClientSpec, RemoteHandle, wire_arg

    certs, ports = world["certs"], world["ports"]
    server = _server(kinds=("store",))
    gateway = Gateway("shop", Credentials.from_files(**certs["shop"]), world["fed"],
                      GatewayPolicy(server.policy.gateway_allow_list()), server.handle)
    gateway.start()
    try:
        bank = world["client"](Credentials.from_files(**certs["bank"]), name="bank")
        with pytest.raises(ProtocolError, match="party 'shop' refused it: party 'shop' does not serve role kind 'psi'"):
            bank.call("shop", "control", "start_role", StartRole("psi", ["shop"]))
        with pytest.raises(ProtocolError, match="party 'shop' refused it: its role 'data' does not let peers call 'rows'"):
            bank.call("shop", "data", "rows", "source-1")
        assert bank.call("shop", "control", "hello")["data"] == ["shop.parquet"]
    finally:
        gateway.stop()
    spec = ClientSpec("bank", certs["bank"], {"parties": {p: {"gateway": f"127.0.0.1:{port}"} for p, port in ports.items()}})
    with pytest.raises(VFLError, match="cannot be handed to party 'shop'"):
        wire_arg([RemoteHandle(spec, "mall", "data")], "shop")


def test_each_coordinator_runtime_runs_and_stops_its_own_roles(world, runtime):
    """Two runtimes of one coordinating party (two jobs of the bank) start the same role kind at the shop:
    each gets its own instance (``data@<its session>``), and one shutting down leaves the other's roles
    running. The session names a role, never grants it: another party's certificate reaching the instance
    by name is refused, and a request without a session is too. A start the shop refuses fails the role's
    first call, naming the shop."""
    from ray_vfl.data.sources import PartySource
    from ray_vfl.data.store import PartyStore, TableRef
    from ray_vfl.runtime.federation.coordinator import FederatedRuntime
    from ray_vfl.runtime.federation.roles import SESSION, ServePolicy, StartRole
    from ray_vfl.runtime.federation.serving import PartyServer
    from ray_vfl.runtime.federation.stubs import RemoteHandle

    certs = world["certs"]
    fed = Federation.from_dict({"parties": {p: {"gateway": f"127.0.0.1:{_free_port()}"} for p in ("bank", "shop", "mall")}})
    server = PartyServer(ServePolicy("shop", {"shop.parquet": PartySource("/srv/shop.parquet")}, ("store",)),
                         runtime, timeout_s=10, make_table=TableRef)
    gateway = Gateway("shop", Credentials.from_files(**certs["shop"]), fed,
                      GatewayPolicy(server.policy.gateway_allow_list()), server.handle)
    gateway.start()
    first, second = (FederatedRuntime(fed, "bank", certs["bank"], timeout_s=10) for _ in range(2))
    mall = GatewayClient("mall", Credentials.from_files(**certs["mall"]), fed, timeout_s=10)
    try:
        assert SESSION.match(first.session) and SESSION.match(second.session) and first.session != second.session
        stores = [rt.spawn_helper("shop", "data", PartyStore, "shop") for rt in (first, second)]
        assert [s.role for s in stores] == [f"data@{first.session}", f"data@{second.session}"]
        assert [r[0] for r in second.get([("shop", s.alive.remote()) for s in stores], "alive")] == ["shop", "shop"]
        first.shutdown()  # stops the first runtime's store at the shop, and only it
        assert second.get([("shop", stores[1].alive.remote())], "alive")[0][0] == "shop"
        gone = RemoteHandle(second.spec, "shop", stores[0].role, second._client)  # the first's role, by name
        with pytest.raises(ProtocolError, match=f"runs no role 'data@{first.session}' for party 'bank'"):
            second.get([("shop", gone.alive.remote())], "alive")
        with pytest.raises(ProtocolError, match=f"runs no role 'data@{second.session}' for party 'mall'"):
            mall.call("shop", stores[1].role, "alive")
        with pytest.raises(ProtocolError, match="names its coordinator runtime's session"):
            mall.call("shop", "control", "start_role", StartRole("store", ["shop"]))
        # a start is not waited for (parties start their roles side by side): a refused one fails the role's first call
        from ray_vfl.psi.party import PsiParty

        refused = second.spawn("shop", PsiParty, "shop", np.arange(3), "int")
        with pytest.raises(ProtocolError, match="party 'shop' refused it: party 'shop' does not serve role kind 'psi'"):
            second.get([("shop", refused.alive.remote())], "alive")
    finally:
        mall.close()
        first.shutdown()
        second.shutdown()
        gateway.stop()


def test_pivodl_clients_talk_to_each_other_directly_and_only_as_fellows():
    """A PIVODL client served across organisations: its start names the run's clients (distinct, with the
    serving party and its starter), keeps no recorded view, and its model, labels and view stay off the
    allow-list. The other clients (its fellows) may deliver their messages for it and fetch its mailbox key,
    nothing else; a message for a third party goes to it directly (the sender's party delivers it, the caller
    gets a token) and is taken by that token once."""
    from ray_vfl.pivodl.config import PIVODLConfig
    from ray_vfl.runtime.comm import Message
    from ray_vfl.runtime.federation.gateway import Refusal
    from ray_vfl.runtime.federation.relay import Posted, Relay, digest, posted_for
    from ray_vfl.runtime.federation.roles import PoolSpec, StartRole, TableKey, role_instance

    table, config, session = TableKey("data", "source-1"), PIVODLConfig(n_trees=1, backend="plain"), "0" * 32
    for order, view, message in [(["bank", "mall"], False, "'shop' and its starter 'bank' among them"),
                                 (["bank", "shop", "shop"], False, "distinct party names"),
                                 (["bank", "shop"], True, "keeps no recorded view")]:
        with pytest.raises(Refusal, match=message):
            _server().handle("bank", "control", "start_role",
                             [StartRole("pivodl-client", ["shop", table, [], config, PoolSpec(), order, view], session)])
    with pytest.raises(Refusal, match="trains on its own table only"):
        _server().check_start("bank", StartRole("pivodl-client", ["shop", np.arange(3), [], config, PoolSpec(),
                                                                  ["bank", "shop"], False], session))
    assert _server().check_start("bank", StartRole("pivodl-client", ["shop", table, [], config, PoolSpec(),
                                                                     ["bank", "shop", "mall"], False], session))
    allowed = set(_server().policy.gateway_allow_list()["pivodl"])
    assert {"propose", "sum_candidates", "deliver", "mailbox_key"} <= allowed
    assert not {"model_part", "recorded_view", "skeleton", "released_weights", "importance_stats", "guess_scores",
                "training_state", "save_part", "load_part", "save_checkpoint", "restore"} & allowed

    # the shop's role started by the bank, with the mall as its fellow (no Ray here: the relay alone)
    server, instance = _server(), role_instance("pivodl", session)
    server._roles[("bank", instance)] = "shop:bank-pivodl"
    server._fellows[("bank", instance)] = frozenset({"mall"})
    server.relay.open(("bank", instance))
    to_shop = Message("pivodl_candidate_request", "mall", ("shop",), 0, 0, b"sealed for the shop")
    assert server.handle("mall", instance, "deliver", [[to_shop]]) == 1
    with pytest.raises(Refusal, match="lets it call \\['deliver', 'mailbox_key'\\] only, not 'propose'"):
        server.handle("mall", instance, "propose", [0, [0], [1]])
    with pytest.raises(Refusal, match="runs no role"):  # a party the start did not name
        server.handle("outsider", instance, "deliver", [[to_shop]])
    with pytest.raises(Refusal, match="only its messages for 'shop'"):  # the mall delivering the bank's message
        server.handle("mall", instance, "deliver", [[Message("k", "bank", ("shop",), 0, 0, b"x")]])
    with pytest.raises(Refusal, match="as arguments"):  # the starter hands its messages in its calls
        server.handle("bank", instance, "deliver", [[to_shop]])
    token = posted_for(to_shop, "bank", "shop")  # what the bank's gateway client hands the shop in its place
    assert token == Posted("mall", digest(to_shop)) and server._resolved(token, "bank", instance) is to_shop
    with pytest.raises(Refusal, match="never delivered"):  # each delivered message is taken once
        server._resolved(token, "bank", instance)
    with pytest.raises(Refusal, match="more than 1 messages wait"):
        small = Relay("shop", max_pending=1)
        small.open(("bank", instance))
        small.deliver(("bank", instance), "mall", [to_shop, to_shop])

    class Recorder:  # the shop's gateway client, recording its deliveries
        calls = []

        def call(self, *args):
            self.calls.append(args)

    sender = Relay("shop", Recorder())
    mine = [Message("k", "shop", receivers, 0, 0, bytes([i])) for i, receivers in
            enumerate([("bank",), ("mall",), ("bank", "mall"), ("caller",)])]
    result = sender.send_on(instance, "bank", {"mall", "bank"}, (None, *mine))
    assert Recorder.calls == [("mall", instance, "deliver", [mine[1], mine[2]])]  # one call per fellow
    assert result == (None, mine[0], Posted("shop", digest(mine[1])), mine[2], mine[3])  # the bank reads no mall's
