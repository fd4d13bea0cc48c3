"""FedHSSL's view table as data (ray_vfl/splitnn/unaligned/hybrid.py): a run's messages equal the table both ways,
every "nothing" row is a view distributed alike under two secrets (the labels flipped and the non-label party's
feature rows permuted), every admitted leak has an attack that beats chance, one- and two-sided, on the payloads
its receiver recorded; each check shown to fail on a leaky or shuffled variant."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from view_checks import independent_of_secret

torch = pytest.importorskip("torch")

import ray_vfl.splitnn.privacy.attacks as attack_module  # noqa: E402
import ray_vfl.splitnn.unaligned.hybrid as hybrid  # noqa: E402
import ray_vfl.splitnn.unaligned_attack as unaligned_attack  # noqa: E402
from ray_vfl.crypto.privacy.secure_sum import encode_ring  # noqa: E402
from ray_vfl.runtime.view_table import check_views, view_table  # noqa: E402
from ray_vfl.splitnn.attack import label_results  # noqa: E402
from ray_vfl.splitnn.privacy.views import PartyLog  # noqa: E402
from ray_vfl.splitnn.unaligned_attack import (  # noqa: E402
    LABEL,
    OTHER,
    SSL_EPOCHS,
    feature_results,
    feature_views,
    mean_part_result,
    unaligned_run,
)

ROWS = view_table(hybrid.__doc__)
ROLES = {LABEL: "label", OTHER: "non-label", "caller": "caller"}
N_ROWS = unaligned_attack.QUICK  # 2,400: 910 aligned and 852 label-only training rows


@pytest.fixture(scope="module")
def recorded(runtime):
    """FedHSSL (2 SSL epochs, one fine-tuning epoch), every party's view recorded, the test rows predicted."""
    return unaligned_run(runtime, N_ROWS, "fedhssl")


@pytest.fixture(scope="module")
def second(runtime, recorded):
    """The same rows with every label flipped and the non-label party's feature rows permuted: the second secret."""
    return unaligned_run(runtime, N_ROWS, "fedhssl", secret_b=True)


def test_recorded_messages_equal_the_table_both_ways(recorded):
    model = recorded[1]
    records = model.comm_stats.records
    # the one row a run with one non-label party cannot send: keys between non-label parties
    # (tests/test_fedhssl.py's three-party run sends them)
    only_with_two = ["in the table but never sent: non-label -> non-label (hssl_mask_key)"]
    assert check_views(ROWS, records, ROLES) == only_with_two
    labels = [(LABEL, OTHER, "labels")]
    assert check_views(ROWS, list(records) + labels, ROLES) == [
        "recorded but not in the table: label -> non-label (labels)"] + only_with_two
    no_means = [r for r in records if r.kind != "hssl_average"]
    assert check_views(ROWS, no_means, ROLES) == ["in the table but never sent: label -> non-label (hssl_average)"] \
        + only_with_two


def test_nothing_rows_are_the_ones_tested_here():
    nothing = {k for r in ROWS if r.learns_nothing for k in r.kinds}
    assert nothing == {"hssl_mask_key", "hssl_nonce"}  # a new "nothing" row needs its distribution test below
    assert all(row.attacks for row in ROWS if not row.learns_nothing and not row.is_output)


def _bytes(run, kind: str, keep: int) -> list[int]:
    """Every ``kind`` payload either party opened, its first ``keep`` bytes each, as numbers 0-255."""
    logs = run[2]
    return [b for p in (LABEL, OTHER) for e in logs[p].of_kind(kind, "in") for b in e.payload[:keep]]


def _label_bits(run, n: int) -> list[int]:
    """A leaky payload: ``n`` bytes packing the run's training labels."""
    return np.packbits(np.asarray(run[0].train.label, dtype=bool))[:n].tolist()


def test_mask_keys_are_independent_of_the_secrets(recorded, second):
    # X25519 public keys, little-endian: the top bit of the last byte is always 0, so 31 bytes of each
    a, b = _bytes(recorded, "hssl_mask_key", 31), _bytes(second, "hssl_mask_key", 31)
    assert len(a) == len(b) == 2 * 31  # one key each way
    independent_of_secret(a, b, modulus=256)
    with pytest.raises(AssertionError):  # the leaky variant: a "key" carrying the labels' bits
        independent_of_secret(_label_bits(recorded, 62), _label_bits(second, 62), modulus=256)


def test_nonces_are_independent_of_the_secrets(recorded, second):
    a, b = _bytes(recorded, "hssl_nonce", 16), _bytes(second, "hssl_nonce", 16)
    assert len(a) == len(b) == SSL_EPOCHS * 16  # one per aggregation
    independent_of_secret(a, b, modulus=256)
    with pytest.raises(AssertionError):  # the leaky variant: a "nonce" carrying the labels' bits
        independent_of_secret(_label_bits(recorded, 32), _label_bits(second, 32), modulus=256)


def test_a_masked_share_is_uniform_whatever_the_secrets_and_an_unmasked_one_is_not(recorded, second):
    """What hides a share from any party without its masks (with two or more non-label parties, the label
    party too): uniform mod 2^64 under both secrets. The table admits that with one non-label party the
    label party holds the masks (the attack below reads the share's vector)."""
    shares = [np.concatenate([e.payload for e in run[2][OTHER].of_kind("hssl_share", "out")])
              for run in (recorded, second)]
    assert shares[0].dtype == np.uint64 and len(shares[0]) > 500
    independent_of_secret(*shares, modulus=2**64)
    unmasked = [encode_ring(np.concatenate([e.payload for e in run[2][OTHER].of_kind("hssl_shared_vector", "own")]))
                for run in (recorded, second)]
    with pytest.raises(AssertionError):
        independent_of_secret(*unmasked, modulus=2**64)


def _shuffled(view, seed: int = 1):
    """The view with the rows of every batch shuffled: the same values, no longer tied to their rows."""
    rng = np.random.default_rng(seed)
    return dataclasses.replace(view, gradients=[g[rng.permutation(len(g))] for g in view.gradients],
                               embeddings=[e[rng.permutation(len(e))] for e in view.embeddings], final_embeddings=None)


def _mean_shuffled(log: PartyLog, seed: int = 1) -> PartyLog:
    rng = np.random.default_rng(seed)
    return PartyLog(log.party, [dataclasses.replace(e, payload=e.payload[rng.permutation(len(e.payload))])
                                if e.kind == "hssl_average" else e for e in log.events])


def test_every_named_attack_beats_chance_both_ways_and_not_on_a_shuffled_view(recorded):
    data, model, logs, view = recorded
    named = {a for row in ROWS for a in row.attacks}
    modules = {"splitnn.privacy.attacks": attack_module, "splitnn.unaligned_attack": unaligned_attack}
    for name in named:
        module, function = name.rsplit(".", 1)
        assert callable(getattr(modules[module], function)), name
    assert {a.rsplit(".", 1)[1] for a in named} == {"embedding_feature_attack", "mean_part_attack", "norm_attack",
                                                    "direction_attack"}
    train = data.train
    views = feature_views(data, model, logs, "fedhssl")
    assert set(views) == {"federated embeddings", "projections z_L", "projections z_N"}  # the table's three rows
    for name, (role, party, received) in views.items():
        frame, cats = train.features[party], train.categorical[party]
        real = feature_results(frame, cats, received, "FedHSSL", role, name)
        assert all(r.leaks for r in real), [(name, r.metric, r.success, r.chance, r.margin) for r in real]
        fake = feature_results(frame, cats, _shuffled(received), "FedHSSL", role, name)
        assert not any(r.leaks for r in fake), [(name, r.metric, r.success, r.chance, r.margin) for r in fake]
    # the mean (the non-label party's view) and the shares (the label party's): the other's vector, exactly
    for attacker, victim in ((logs[OTHER], logs[LABEL]), (logs[LABEL], logs[OTHER])):
        result = mean_part_result(attacker, victim, "test")
        assert result.success == 1.0 and result.chance < 0.5 and result.leaks, result
        assert not mean_part_result(_mean_shuffled(attacker), victim, "test").leaks
    real = label_results(data, model, view, "none", "test", protocol="FedHSSL")
    fake = label_results(data, model, _shuffled(view), "none", "test", protocol="FedHSSL")
    for name in ("norm_attack", "direction_attack"):
        leaks = [r for r in real if r.attack == name]
        assert len(leaks) == 2 and all(r.leaks for r in leaks), [(r.metric, r.success, r.chance) for r in leaks]
        assert not any(r.leaks for r in fake if r.attack == name), [r for r in fake if r.attack == name]



def test_the_benchmark_rows_run_the_same_attacks_on_the_same_views(recorded):
    """benchmarks/attacks.py's rows (ray_vfl.splitnn.unaligned_attack.results): every named attack leaks there too."""
    named = {a.rsplit(".", 1)[1] for row in ROWS for a in row.attacks}
    rows = unaligned_attack.results(*recorded, "fedhssl", "test")
    assert {r.attack for r in rows} == named | {"cluster_attack"}  # the cluster attack: run, not claimed
    assert len(rows) == 3 * 2 + 2 + 3 * 2 and all(r.leaks for r in rows if r.attack in named), rows
