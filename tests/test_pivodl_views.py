"""PIVODL's view table as data (ray_vfl/pivodl/protocol.py): the recorded messages equal the table both ways,
with the per-message roles checked against the run (forwarded sums reach only the split client the driver
dealt, as a derangement); every "learns nothing" row's view is distributed the same under two label vectors
(the labels and their flip, the same features), and each check fails on a leaky client; every admitted leak
names an attack that exists and beats chance on the recorded views."""

from __future__ import annotations

import importlib

import numpy as np
import pytest
import ray.cloudpickle
from view_checks import independent_of_secret

import pivodl_leaky
import ray_vfl.pivodl.protocol as protocol
from ray_vfl import vertical_split
from ray_vfl.data.bundled import load_named
from ray_vfl.pivodl import PIVODLConfig, train
from ray_vfl.runtime.view_table import check_views, view_table

CONFIG = PIVODLConfig(n_trees=2, max_depth=2, max_bin=6, backend="paillier", key_bits=1024, allow_weak_keys=True,
                      workers_per_party=1)


def _data(flip: bool):
    frame, label, _, _ = load_named("credit")
    frame = frame.iloc[:1200].reset_index(drop=True)
    if flip:
        frame[label] = 1 - frame[label]
    return vertical_split(frame, 3, label=label, label_owners={"party0": 0.4, "party1": 0.3, "party2": 0.3}, seed=3)


def _run(runtime, flip: bool, config=CONFIG):
    """Train with recorded views, predict 300 rows, and collect every record and every client's view."""
    data = _data(flip)
    model = train(runtime, data, config, record_view=True)
    model.predict_margin(data)
    records = list(model.comm_stats.records)
    records += [r for rs in model._calls().value("comm_records", model.order, lambda p: (), "records") for r in rs]
    views = {p: model.recorded_view(p) for p in model.order}
    return {"order": model.order, "records": records, "views": views, "data": data}


@pytest.fixture(scope="module")
def runs(runtime):
    """One Paillier-1024 run per secret: the credit labels, and the same rows with every label flipped."""
    return {flip: _run(runtime, flip) for flip in (False, True)}


@pytest.fixture(scope="module")
def leaky_runs(runtime):
    """The same two runs with every client leaky (tests/pivodl_leaky.py): unobfuscated Paillier, unmasked
    prediction shares."""
    ray.cloudpickle.register_pickle_by_value(pivodl_leaky)
    saved = protocol.Client
    protocol.Client = pivodl_leaky.LeakyClient
    try:
        yield {flip: _run(runtime, flip) for flip in (False, True)}
    finally:
        protocol.Client = saved


def received(run, kind, receiver=None):
    return [(p, m) for p, v in run["views"].items() if receiver in (None, p) for m in v["received"] if m["kind"] == kind]


# -- the recorded triples against the table ---------------------------------------------------------------------
def roles_of(run) -> list[tuple[str, str, str]]:
    """Every recorded message as (sender role, receiver role, kind), after checking from the run that the
    parties played those roles; raises AssertionError naming what does not fit."""
    order, records = run["order"], run["records"]
    n = len(order)
    by_kind: dict[str, list] = {}
    for r in records:
        by_kind.setdefault(r.kind, []).append(r)
    pairs = {(a, b) for a in order for b in order if a != b}
    out = []

    def fail(msg):
        raise AssertionError(msg)

    for kind in ("pivodl_public_key", "pivodl_mask_key", "pivodl_labelled_rows"):
        if {(r.sender, r.receiver) for r in by_kind.get(kind, [])} != pairs:
            fail(f"{kind} did not go from every client to every other")
        out += [("every", "every", kind)] * len(by_kind[kind])
    aggregator, encryptor = {}, {}
    for r in by_kind.get("pivodl_total_share", []):
        aggregator.setdefault(r.tree, r.receiver)
        if r.receiver != aggregator[r.tree] or r.sender == r.receiver:
            fail(f"total shares of round {r.tree} went to two aggregation clients")
        out.append(("every", "a", r.kind))
    for r in by_kind.get("pivodl_total_sum", []):
        if r.sender != aggregator.get(r.tree):
            fail("the summed shares came from another client than the aggregation client")
        encryptor[r.tree] = r.receiver
        out.append(("a", "e", r.kind))
    for r in by_kind.get("pivodl_totals", []):
        if r.sender != encryptor.get(r.tree):
            fail("the totals came from another client than the encryption client")
        out.append(("e", "every", r.kind))
    # the deal, as each client read it in its candidate requests: per node a derangement
    dealt = {}
    for p, m in received(run, "pivodl_candidate_request"):
        for node, c in zip(m["payload"]["node"].tolist(), m["payload"]["split"].tolist()):
            key = (m["tree"], m["depth"], node, m["sender"])
            if dealt.setdefault(key, c) != c:
                fail(f"source {m['sender']} named two split clients for node {node}")
    for (t, d, node, s), c in dealt.items():
        column = [dealt.get((t, d, node, q)) for q in order]
        if sorted(column) != list(range(n)) or any(c == i for i, c in enumerate(column)):
            fail(f"the deal of node {node} (tree {t}, depth {d}) is not a derangement: {column}")
    for p, m in received(run, "pivodl_forwarded_sums"):
        for node in m["payload"]["node"].tolist():
            if order[dealt[(m["tree"], m["depth"], node, m["sender"])]] != p:
                fail(f"{m['sender']} forwarded the sums of node {node} to {p}, not to the split client dealt")
    won = {(m["tree"], m["depth"], p, m["sender"]) for p, m in received(run, "pivodl_split_won")}
    for r in by_kind.get("pivodl_chosen_record", []):
        if (r.tree, r.depth, r.sender, r.receiver) not in won:
            fail("a chosen record went to a client that did not win the source's split")
    simple = {"pivodl_candidate_request": ("s", "k"), "pivodl_candidate_sums": ("k", "s"),
              "pivodl_forwarded_sums": ("s", "c"), "pivodl_best_gains": ("c", "every"), "pivodl_split_won": ("c", "s"),
              "pivodl_chosen_record": ("s", "c"), "pivodl_partition": ("s", "every"),
              "pivodl_leaf_weights": ("holder", "every"), "pivodl_route_decisions": ("s", "every"),
              "pivodl_prediction_share": ("every", "output"), "pivodl_metric_share": ("every", "output"),
              "pivodl_margins": ("output", "caller")}
    for kind in ("pivodl_candidate_request", "pivodl_candidate_sums", "pivodl_best_gains", "pivodl_partition",
                 "pivodl_route_decisions"):  # every client to every other, per round
        rounds = {}
        for r in by_kind.get(kind, []):
            rounds.setdefault((r.tree, r.depth, r.sender), set()).add(r.receiver)
        if any(len(to) != n - 1 for to in rounds.values()):
            fail(f"{kind} did not reach every other client")
    outputs = {r.receiver for r in by_kind.get("pivodl_prediction_share", [])}
    if len(outputs) > 1:
        fail(f"prediction shares went to {sorted(outputs)}, not one output client")
    for kind, (s, r) in simple.items():
        out += [(s, r, kind)] * len(by_kind.get(kind, []))
    unknown = set(by_kind) - set(simple) - {"pivodl_public_key", "pivodl_mask_key", "pivodl_labelled_rows",
                                            "pivodl_total_share", "pivodl_total_sum", "pivodl_totals"}
    out += [("?", "?", kind) for kind in sorted(unknown)]
    return out


def test_recorded_messages_equal_the_table_both_ways(runs):
    rows = view_table(protocol.__doc__)
    for run in runs.values():
        triples = roles_of(run)
        assert check_views(rows, triples, lambda role: role, optional=["pivodl_metric_share"]) == []
    # the check has teeth: a message the table does not list, a row never sent, a sum forwarded to another client
    run = runs[False]
    triples = roles_of(run)
    assert check_views(rows, triples + [("s", "every", "pivodl_forwarded_sums")], lambda r: r,
                       optional=["pivodl_metric_share"]) == ["recorded but not in the table: s -> every (pivodl_forwarded_sums)"]
    assert check_views(rows, [t for t in triples if t[2] != "pivodl_chosen_record"], lambda r: r,
                       optional=["pivodl_metric_share"]) == ["in the table but never sent: s -> c (pivodl_chosen_record)"]
    order = run["order"]
    p, m = received(run, "pivodl_forwarded_sums")[0]
    wrong = next(q for q in order if q not in (p, m["sender"]))
    moved = {**run, "views": {q: {**v, "received": [x for x in v["received"] if x is not m]
                                  + ([m] if q == wrong else [])} for q, v in run["views"].items()}}
    with pytest.raises(AssertionError, match="not to the split client dealt"):
        roles_of(moved)


def test_every_leak_names_an_attack_that_exists():
    rows = view_table(protocol.__doc__)
    leaks = [r for r in rows if not r.learns_nothing and not r.is_output]
    assert leaks and all(r.attacks for r in leaks), [r.kinds for r in leaks if not r.attacks]
    for row in leaks:
        for name in row.attacks:
            module, function = name.rsplit(".", 1)
            assert callable(getattr(importlib.import_module(module), function)), name


# -- "learns nothing" rows, as distributions under two label vectors ---------------------------------------------
def _digits(run, kind) -> list[int]:
    """Every ciphertext of ``kind`` its receivers got, as 64-bit values that are uniform if the ciphertext is
    uniform mod n^2: its digits below the top one, and ``c mod n`` scaled to 2^64 (``n`` the public key of
    the ciphertext, which the receiver holds)."""
    keys = {pk.key_id: pk.n for _, m in received(run, "pivodl_public_key") for pk in [m["payload"][1]]}
    out = []
    for p, m in received(run, kind):
        payload = m["payload"]
        for c in [payload] if kind == "pivodl_total_share" else payload["ciphers"]:
            n = keys[c.key_id]
            for row in np.asarray(c.data):
                value = int.from_bytes(row.tobytes(), "big")
                out += [(value >> shift) & (2**64 - 1) for shift in range(0, 8 * row.size - 128, 64)]
                out.append(((value % n) << 64) // n)
    return out


@pytest.mark.parametrize("kind", ["pivodl_total_share", "pivodl_candidate_sums"])
def test_ciphertexts_do_not_depend_on_the_labels(runs, leaky_runs, kind):
    """a's view of the total shares, s's view of the candidate sums: uniform digits, the same under both label
    vectors. Unobfuscated Paillier (Enc(m) = 1 + m n) fails the same check."""
    independent_of_secret(_digits(runs[False], kind), _digits(runs[True], kind), modulus=2**64)
    with pytest.raises(AssertionError):
        independent_of_secret(_digits(leaky_runs[False], kind), _digits(leaky_runs[True], kind), modulus=2**64)


def test_refusals_do_not_depend_on_the_labels(runs):
    """s's view of which records each k refused: none from an honest source, under either label vector."""
    bits = {flip: np.concatenate([np.unpackbits(b) for _, m in received(run, "pivodl_candidate_sums")
                                  for b in m["payload"]["refused"]]) for flip, run in runs.items()}
    assert not bits[False].any() and not bits[True].any()
    independent_of_secret(bits[False].astype(float), bits[True].astype(float))


def _deal(run) -> list[int]:
    """The split client the driver dealt to the first source at each node, relative to it: (c - s) mod K,
    read by one receiver so that every node counts once (the deal is one independent draw per node; the copies
    to the other receivers and the other sources' offsets at the same node are not fresh draws)."""
    order = run["order"]
    source, reader = order[0], order[1]
    return [(int(m["payload"]["split"][0]) - order.index(source)) % len(order)
            for _, m in received(run, "pivodl_candidate_request", reader) if m["sender"] == source]


def _deal_run(runtime, flip: bool) -> dict:
    """A plaintext run with enough nodes (12 trees of depth 2) for a distribution test of the deal."""
    model = train(runtime, _data(flip), CONFIG.replace(backend="plain", n_trees=12), record_view=True)
    return {"order": model.order, "views": {p: model.recorded_view(p) for p in model.order}}


def test_the_deal_does_not_depend_on_the_labels(runs, runtime, monkeypatch):
    """The driver's deal as the clients read it: the same distribution under both label vectors, each offset
    drawn often. A driver that picked the deal by the label mean fails the check."""
    assert set(_deal(runs[False])) | set(_deal(runs[True])) <= {1, 2}
    a, b = _deal(_deal_run(runtime, False)), _deal(_deal_run(runtime, True))
    independent_of_secret(a, b)
    assert set(a) == set(b) == {1, 2}
    import ray_vfl.pivodl.rounds as rounds

    honest = rounds.deal_split_clients
    views = []
    for flip in (False, True):
        cycle = 1 + int(_data(flip).label.mean() > 0.5)  # a leak of the label mean through the deal

        def leaky_deal(clients, nodes, cycle=cycle):
            return np.tile((np.arange(clients) + cycle) % clients, (nodes, 1))

        monkeypatch.setattr(rounds, "deal_split_clients", leaky_deal)
        views.append(_deal(_deal_run(runtime, flip)))
    monkeypatch.setattr(rounds, "deal_split_clients", honest)
    with pytest.raises(AssertionError, match="depends on the secret"):
        independent_of_secret(*views)


def _shares(run) -> list[int]:
    return [int(x) for _, m in received(run, "pivodl_prediction_share") for x in np.asarray(m["payload"]).tolist()]


def test_prediction_shares_are_uniform_whatever_the_labels(runs, leaky_runs):
    """The output client's view of one other client's share: uniform mod 2^64 under both label vectors. A
    client that sends its score unmasked fails."""
    independent_of_secret(_shares(runs[False]), _shares(runs[True]), modulus=2**64)
    with pytest.raises(AssertionError):
        independent_of_secret(_shares(leaky_runs[False]), _shares(leaky_runs[True]), modulus=2**64)


# -- admitted leaks: the attacks run on the recorded views and beat chance ------------------------------------
def test_attacks_on_the_recorded_views_beat_chance(runs):
    """Each client's view of the honest run: it reads who labels which row, the others' positive rate, the
    others' label rate in every node (AUC well above 0.5 on the others' rows), and orders its rows along a
    source's feature from its candidate requests."""
    from ray_vfl.metrics import auc_both_ways
    from ray_vfl.pivodl.attack_views import _order_scores, label_count, labelled_rows, membership_order, node_sums_guess

    run = runs[False]
    data = run["data"]
    y, owners = data.label, np.asarray(data.label_owner)
    for p, view in run["views"].items():
        others = ~np.isin(np.arange(view["n_rows"]), view["own"])
        for q, rows in labelled_rows(view).items():
            assert (owners[rows] == q).all() and (owners == q).sum() == len(rows)
        assert label_count(view) == pytest.approx(y[others].mean(), abs=1e-9)
        one, two = auc_both_ways(y[others], node_sums_guess(view)[others])
        assert one > 0.6, (p, one)
        hit, chance = _order_scores(membership_order(view), data.features, np.random.default_rng(0))
        assert hit > chance + 0.2, (p, hit, chance)


def test_attack_results_rows(runtime):
    """benchmarks/attacks.py's PIVODL rows (quick): the differential attack reads labels at threshold 1 and
    none at the default threshold; every other admitted leak shows above chance."""
    from ray_vfl.pivodl.attack_views import attack_results

    rows = attack_results(runtime, quick=True)
    free, held = rows[0], rows[1]
    assert free.leaks and free.two_sided > 0.55 and not held.leaks
    assert all(r.leaks for r in rows[2:]), [(r.attack, r.success, r.chance) for r in rows[2:] if not r.leaks]
