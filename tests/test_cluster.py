"""A multi-node cluster (one node per party, ``ray.cluster_utils.Cluster``, in a process of its own, run once
by ``tests/cluster_run.py``, started with the session): party-held data, placement, and a killed node."""

from __future__ import annotations

import json

import pytest
from conftest import background_result


@pytest.fixture(scope="module")
def cluster_result():
    """The result line of ``tests/cluster_run.py``, started in a process of its own when the session started."""
    out, _ = background_result("cluster")
    lines = [line for line in out.stdout.splitlines() if line.startswith("RESULT ")]
    assert lines, out.stdout[-2000:] + out.stderr[-4000:]
    return json.loads(lines[-1][len("RESULT "):])


def test_each_partys_file_is_read_on_its_own_node(cluster_result):
    """Each store reads its party's file on that party's node, never on the head, where the driver runs."""
    held = cluster_result["party_held"]
    assert held["driver_node"] == cluster_result["head_node"] and held["rows"] == 500
    for party in ("bank", "shop"):
        assert held["read_on"][party] == [cluster_result["party_node"][party]]
        assert cluster_result["party_node"][party] != cluster_result["head_node"]
    assert held["same_margins"]


def test_parties_run_on_their_own_nodes_and_a_killed_node_is_named(cluster_result):
    result = cluster_result
    for party, node in result["party_node"].items():
        assert node != result["head_node"]
        assert result["actor_node"][party] == node, party      # each client's actor on its own node
        assert result["task_nodes"][party] == [node], party    # and its crypto tasks
    assert result["predicted"]
    assert result["failure"] is not None and result["failure"]["party"] == "shop", result["failure"]
