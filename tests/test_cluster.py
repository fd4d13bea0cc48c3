"""A multi-node cluster (one node per party, ``ray.cluster_utils.Cluster``): placement and a killed node."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path


def test_parties_run_on_their_own_nodes_and_a_killed_node_is_named():
    script = Path(__file__).with_name("training_cluster.py")
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=600)
    lines = [line for line in out.stdout.splitlines() if line.startswith("RESULT ")]
    assert lines, out.stdout[-2000:] + out.stderr[-4000:]
    result = json.loads(lines[-1][len("RESULT "):])
    for party, node in result["party_node"].items():
        assert node != result["head_node"]
        assert result["actor_node"][party] == node, party      # each client's actor on its own node
        assert result["task_nodes"][party] == [node], party    # and its crypto tasks
    assert result["predicted"]
    assert result["failure"] is not None and result["failure"]["party"] == "shop", result["failure"]
