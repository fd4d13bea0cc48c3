"""The split network's view table as data (ray_vfl/splitnn/protocol.py): a run's messages equal the table
both ways, and every attack the table names beats chance on the recorded view and scores chance on a view
with the leak shuffled away."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import ray_vfl.splitnn.privacy.attacks as attack_module  # noqa: E402
import ray_vfl.splitnn.protocol as protocol  # noqa: E402
from ray_vfl.runtime.view_table import check_views, view_table  # noqa: E402
from ray_vfl.splitnn.attack import LABEL, OTHER, feature_result, label_results, recorded_run  # noqa: E402

ROWS = view_table(protocol.__doc__)
ROLES = {LABEL: "label", OTHER: "non-label", "caller": "caller"}


@pytest.fixture(scope="module")
def recorded(runtime):
    """No defense, 6,000 training rows, two epochs; test rows evaluated (the prediction's embeddings)."""
    return recorded_run(runtime, 8_000, 2)


def test_recorded_messages_equal_the_table_both_ways(recorded):
    _, model, view = recorded
    records = model.comm_stats.records
    assert check_views(ROWS, records, ROLES) == []
    assert sum(r.kind == "embedding_grad" for r in records) == view.n_batches
    assert check_views(ROWS, list(records) + [(LABEL, OTHER, "labels")], ROLES) == [
        "recorded but not in the table: label -> non-label (labels)"]
    assert check_views(ROWS, [r for r in records if r.kind != "embedding_grad"], ROLES) == [
        "in the table but never sent: label -> non-label (embedding_grad)"]
    assert not any(row.learns_nothing for row in ROWS)  # a "nothing" row would need a distribution test here


def _shuffled(view, seed: int = 1):
    """The view with every batch's gradient rows and every row's embeddings shuffled among the rows: the
    same values, no longer tied to the rows they belong to."""
    rng = np.random.default_rng(seed)
    final = None if view.final_embeddings is None else view.final_embeddings[rng.permutation(len(view.final_embeddings))]
    return dataclasses.replace(view, gradients=[g[rng.permutation(len(g))] for g in view.gradients],
                               embeddings=[e[rng.permutation(len(e))] for e in view.embeddings], final_embeddings=final)


def test_every_named_attack_beats_chance_and_not_on_a_shuffled_view(recorded):
    data, model, view = recorded
    named = {a.rsplit(".", 1)[1] for row in ROWS for a in row.attacks}
    assert named == {"embedding_feature_attack", "norm_attack", "direction_attack", "cluster_attack"}
    assert all(callable(getattr(attack_module, name)) for name in named)
    real = label_results(data, model, view, "none", "test") + [feature_result(data, view, "test")]
    fake = label_results(data, model, _shuffled(view), "none", "test") + [feature_result(data, _shuffled(view), "test")]
    for name in named:
        leaks = [r for r in real if r.attack == name]
        assert leaks and any(r.leaks for r in leaks), leaks
        assert not any(r.leaks for r in fake if r.attack == name), [r for r in fake if r.attack == name]
