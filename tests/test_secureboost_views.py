"""SecureBoost's view table as data (ray_vfl/secureboost/protocol.py): a run's messages equal the table both
ways, every "nothing" row is a view distributed alike under two label vectors, every admitted leak has an
attack that beats chance on the recorded view; each check shown to fail on a leaky or wrong variant."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from view_checks import independent_of_secret

import ray_vfl.secureboost.attack as attack_module
import ray_vfl.secureboost.protocol as protocol
from ray_vfl.crypto import get_backend
from ray_vfl.crypto.he import paillier
from ray_vfl.metrics import auc_both_ways
from ray_vfl.runtime.view_table import check_views, view_table
from ray_vfl.secureboost.attack import QUICK, feature_bounds, leaf_label_scores, recorded_run, results
from ray_vfl.secureboost.views import PartyView
from ray_vfl.trees.kernels import base_margin, encoded_gradients

ROWS = view_table(protocol.__doc__)
ROLES = {"party0": "active", "party1": "passive", "caller": "caller"}
COMMON = 1 << 2048  # ciphertexts of two runs (two keys) compared as fractions of their n^2, on one scale


@pytest.fixture(scope="module")
def recorded(runtime):
    """The quick setting of benchmarks/attacks.py: trained, predicted, every party's view recorded."""
    n_rows, n_trees, depth = QUICK
    return recorded_run(runtime, n_rows, n_trees, depth)


@pytest.fixture(scope="module")
def flipped(runtime, recorded):
    """One tree of depth 1 on the same rows with every label flipped: the second secret."""
    data = recorded[0]
    return recorded_run(runtime, data.n_rows, 1, 1, n_test=50, labels=1 - np.asarray(data.label))


@pytest.fixture(scope="module")
def attack_rows(recorded):
    return results(*recorded)


def test_recorded_messages_equal_the_table_both_ways(recorded):
    model = recorded[2]
    records = model.comm_stats.records
    assert check_views(ROWS, records, ROLES) == []
    # the same check refuses a run that sends more, or less, than the table says
    labels = [(model.label_party, model.passives[0], "labels")]
    assert check_views(ROWS, list(records) + labels, ROLES) == ["recorded but not in the table: active -> passive (labels)"]
    no_routes = [r for r in records if r.kind != "route_answer"]
    assert check_views(ROWS, no_routes, ROLES) == ["in the table but never sent: passive -> active (route_answer)"]


def _fractions(cipher_array, n: int) -> list[int]:
    """Each ciphertext mod n^2 as an integer fraction of COMMON (its value * COMMON // n^2)."""
    nsq = n * n
    return [int.from_bytes(row.tobytes(), "big") * COMMON // nsq for row in cipher_array.data]


def _first_gh(view: PartyView):
    return next(e.payload for e in view.events if e.kind == "encrypted_gh" and e.way == "in")


def test_nothing_rows_are_the_ones_tested_here():
    nothing = {k for r in ROWS if r.learns_nothing for k in r.kinds}
    assert nothing == {"public_key", "encrypted_gh"}  # a new "nothing" row needs its distribution test below


def test_encrypted_gradients_are_uniform_whatever_the_labels(recorded, flipped, monkeypatch):
    (data, _, model, views), (_, _, _, views_b) = recorded, flipped
    passive = model.passives[0]
    view_a, view_b = views[passive], views_b[passive]
    a = _fractions(_first_gh(view_a), view_a.public_key.n)
    b = _fractions(_first_gh(view_b), view_b.public_key.n)
    assert len(a) == len(b) == data.n_rows
    independent_of_secret(a, b, modulus=COMMON)

    # the leaky variant: Paillier without its random mask, c = 1 + m n; the same check raises
    monkeypatch.setattr(paillier._PrivateContext, "encrypt", lambda self, ms: [1 + (m % self.n) * self.n for m in ms])
    backend = get_backend("paillier")
    pk, sk = backend.generate_keys(1024, allow_weak=True)
    y = np.asarray(data.label, dtype=np.float64)
    leaky = []
    for labels in (y, 1 - y):
        g, h = encoded_gradients("binary:logistic", labels, np.full(len(labels), base_margin("binary:logistic", labels.mean())))
        leaky.append(_fractions(backend.encrypt_gh(sk, g, h), pk.n))
    with pytest.raises(AssertionError):
        independent_of_secret(*leaky, modulus=COMMON)


def test_public_key_is_independent_of_the_labels(recorded, flipped):
    keys = [v[3][recorded[2].passives[0]].public_key.n for v in (recorded, flipped)]
    middle = [list(n.to_bytes(128, "big")[1:-1]) for n in keys]  # the top and bottom bytes are fixed by key making
    independent_of_secret(*middle, modulus=256)
    # a leaky variant: a "key" carrying the labels' bits
    y = np.asarray(recorded[0].label, dtype=bool)
    leaky = [np.packbits(labels)[:126].tolist() for labels in (y, ~y)]
    with pytest.raises(AssertionError):
        independent_of_secret(*leaky, modulus=256)


def test_every_admitted_leak_has_an_attack_that_beats_chance(attack_rows):
    ran = {r.attack: r for r in attack_rows}
    named = {a for row in ROWS if not row.learns_nothing for a in row.attacks}
    assert named and all(row.attacks for row in ROWS if not row.learns_nothing and not row.is_output)
    for name in named:
        module, function = name.rsplit(".", 1)
        assert module == "secureboost.attack" and callable(getattr(attack_module, function)), name
        result = ran[function]
        assert result.two_sided is not None and result.chance == 0.5
        assert result.leaks and min(result.success, result.two_sided) > 0.6, result


def _scrambled(view: PartyView, seed: int = 1) -> PartyView:
    """The view with the rows of every partition shuffled within their node: as many go left as did
    (so every node keeps its size, children and orders), but which ones is a coin's choice."""
    rng = np.random.default_rng(seed)

    def scramble(part):
        bits = np.unpackbits(part.bits, count=int(part.counts.sum()))
        pieces = np.split(bits, np.cumsum(part.counts)[:-1]) if len(part.counts) else []
        return dataclasses.replace(part, bits=np.packbits(np.concatenate([rng.permutation(b) for b in pieces] or [bits])))

    events = []
    for e in view.events:
        if e.kind == "partition":
            e = dataclasses.replace(e, payload=scramble(e.payload))
        elif e.kind == "level_step":
            e = dataclasses.replace(e, payload=dataclasses.replace(e.payload, partition=scramble(e.payload.partition)))
        events.append(e)
    return dataclasses.replace(view, events=events)


def test_attacks_score_chance_on_a_view_without_the_leak(recorded):
    """The attacks read the leak, not something else: on views whose partitions are shuffled within
    their nodes they score chance, on the recorded ones well above."""
    data, _, model, views = recorded
    passive, active = model.passives[0], model.label_party
    n = data.n_rows
    y = np.asarray(data.label, dtype=np.float64)
    known = np.random.default_rng(0).choice(n, 40, replace=False)
    unknown = np.setdiff1d(np.arange(n), known)
    for view, low in ((views[passive], False), (_scrambled(views[passive]), True)):
        _, two = auc_both_ways(y[unknown], leaf_label_scores(view, n, known, y[known])[unknown])
        assert (two < 0.56) if low else (two > 0.65), two
    max_bin = model.config.max_bin
    real = feature_bounds(views[active], passive, n, max_bin)
    column = max(real, key=lambda f: int(np.count_nonzero(real[f][1] - real[f][0] < max_bin - 1)))
    truth = data.features[passive].iloc[:, column].to_numpy(dtype=np.float64)
    above = (truth > np.median(truth)).astype(float)
    for bounds, low in ((real, False), (feature_bounds(_scrambled(views[active]), passive, n, max_bin), True)):
        lo, hi = bounds[column]
        _, two = auc_both_ways(above, (lo + hi) / 2)
        assert (two < 0.56) if low else (two > 0.9), two


def test_layout_shows_what_the_root_histogram_shows(recorded):
    """The histogram_layout row's claim: the cells the passive party says hold rows are the non-empty
    cells of the first tree's root histogram, and each feature's derived cell its largest (all rows
    share one hessian there, so hessian sums are row counts times one constant)."""
    _, _, model, views = recorded
    active, passive = views[model.label_party], model.passives[0]
    n_features, cells, derived = active.layouts[passive]
    root = next(e.payload[0] for e in active.events if e.kind == "decrypted_histograms" and e.tree == 0 and 0 in e.payload)
    H = root[1].reshape(n_features, -1)
    assert derived.tolist() == (np.arange(n_features) * H.shape[1] + H.argmax(axis=1)).tolist()
    assert sorted(cells.tolist() + derived.tolist()) == np.flatnonzero(H.ravel() > 0).tolist()
    # a layout that named one more cell, or another derived cell, would fail these checks
    assert (H.ravel() > 0).sum() < H.size
