"""The unaligned-sample split network's view table as data (ray_vfl/splitnn/unaligned_protocol.py): the messages
of a Diffu-AT and an SS-VFL run equal the table both ways, no row claims "nothing", and every attack the table
names beats chance, one- and two-sided, on the payloads its receiver recorded, and not once the rows of every
batch are shuffled (the same values, no longer tied to their rows)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("diffusers")

import ray_vfl.splitnn.privacy.attacks as attack_module  # noqa: E402
import ray_vfl.splitnn.unaligned_protocol as protocol  # noqa: E402
from ray_vfl.runtime.view_table import check_views, view_table  # noqa: E402
from ray_vfl.splitnn.attack import label_results  # noqa: E402
from ray_vfl.splitnn.unaligned_attack import (  # noqa: E402
    LABEL,
    OTHER,
    QUICK,
    feature_results,
    feature_views,
    results,
    unaligned_run,
)

ROWS = view_table(protocol.__doc__)
ROLES = {LABEL: "label", OTHER: "non-label", "caller": "caller"}


@pytest.fixture(scope="module")
def diffu_at(runtime):
    """Diffu-AT on 2,400 FedAds-like rows (910 aligned, 852 label-only training rows), one pretraining and one
    alternating epoch, every party's view recorded, the test rows predicted."""
    return unaligned_run(runtime, QUICK, "diffu-at")


@pytest.fixture(scope="module")
def ss_vfl(runtime):
    return unaligned_run(runtime, 1_200, "ss-vfl")


def test_recorded_messages_equal_the_table_both_ways(diffu_at, ss_vfl):
    for _, model, logs, _ in (diffu_at, ss_vfl):
        records = model.comm_stats.records
        assert check_views(ROWS, records, ROLES) == []
        # the non-label party receives gradients only: no unaligned row, synthetic embedding or model reaches it
        assert {e.kind for e in logs[OTHER].events if e.way == "in"} == {"embedding_grad"}
        assert len(logs[OTHER].of_kind("embedding_grad", "in")) == model.unaligned["pretrain_batches"] + \
            model.unaligned["federated_steps"]
    records = diffu_at[1].comm_stats.records
    assert check_views(ROWS, list(records) + [(LABEL, OTHER, "labels")], ROLES) == [
        "recorded but not in the table: label -> non-label (labels)"]
    assert check_views(ROWS, [r for r in records if r.kind != "embedding_grad"], ROLES) == [
        "in the table but never sent: label -> non-label (embedding_grad)"]
    # Diffu-AT's synthesis is one message of every aligned row; SS-VFL has none, and its pretraining sends
    # nothing: the non-label party's first message is the first federated batch's embedding
    assert [r.shape[2] for r in records if r.kind == "embedding" and r.tree == -2] == [(diffu_at[0].train.n_rows, 8)]
    first = ss_vfl[2][OTHER].events[0]
    assert (first.way, first.kind, first.tree) == ("out", "embedding", 0)
    assert not [r for r in ss_vfl[1].comm_stats.records if r.tree == -2]


def test_no_row_claims_nothing():
    assert not any(row.learns_nothing for row in ROWS)  # a "nothing" row would need a distribution test here
    assert all(row.attacks for row in ROWS if not row.is_output)


def _shuffled(view, seed: int = 1):
    """The view with the rows of every batch shuffled: the same values, no longer tied to their rows."""
    rng = np.random.default_rng(seed)
    return dataclasses.replace(view, gradients=[g[rng.permutation(len(g))] for g in view.gradients],
                               embeddings=[e[rng.permutation(len(e))] for e in view.embeddings], final_embeddings=None)


def test_every_named_attack_beats_chance_both_ways_and_not_on_a_shuffled_view(diffu_at):
    data, model, logs, view = diffu_at
    named = {a.rsplit(".", 1)[1] for row in ROWS for a in row.attacks}
    assert named == {"embedding_feature_attack", "norm_attack", "direction_attack"}
    assert all(callable(getattr(attack_module, name)) for name in named)
    train = data.train
    views = feature_views(data, model, logs, "diffu-at")
    assert set(views) == {"federated embeddings", "trained embeddings (synthesis)"}  # the table's two rows
    for name, (role, party, received) in views.items():
        frame, cats = train.features[party], train.categorical[party]
        real = feature_results(frame, cats, received, "Diffu-AT", role, name)
        assert all(r.leaks for r in real) and real[0].success > 0.55, real  # one- and two-sided
        assert not any(r.leaks for r in feature_results(frame, cats, _shuffled(received), "Diffu-AT", role, name))
    real = label_results(data, model, view, "none", "test", protocol="Diffu-AT")
    fake = label_results(data, model, _shuffled(view), "none", "test", protocol="Diffu-AT")
    for name in named - {"embedding_feature_attack"}:
        leaks = [r for r in real if r.attack == name]
        assert len(leaks) == 2 and all(r.leaks and r.success > 0.9 for r in leaks), [
            (r.metric, r.success, r.chance, r.margin) for r in leaks]  # one- and two-sided
        assert not any(r.leaks for r in fake if r.attack == name), [r for r in fake if r.attack == name]


def test_the_benchmark_rows_run_the_same_attacks_on_the_same_views(diffu_at):
    """benchmarks/attacks.py's rows (ray_vfl.splitnn.unaligned_attack.results): every named attack leaks there too."""
    named = {a.rsplit(".", 1)[1] for row in ROWS for a in row.attacks}
    rows = results(*diffu_at, "diffu-at", "test")
    assert {r.attack for r in rows} == named | {"cluster_attack"}  # the cluster attack: run, not claimed
    assert len(rows) == 2 * 2 + 3 * 2 and all(r.leaks for r in rows if r.attack in named), rows
