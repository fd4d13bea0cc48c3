"""A multi-node cluster (one node per party, ``ray.cluster_utils.Cluster``, in a process of its own, run once
for the module by ``tests/cluster_run.py``): party-held data, placement, and a killed node."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from conftest import data_file


@pytest.fixture(scope="module")
def cluster_result(tmp_path_factory):
    folder = tmp_path_factory.mktemp("cluster")
    frame = pd.read_csv(data_file("uci_default_credit_card.csv.gz")).iloc[:600]
    ids = [f"cust-{i:06d}" for i in frame["ID"]]
    bank = frame[["LIMIT_BAL", "AGE", "PAY_0", "BILL_AMT1", "default.payment.next.month"]]
    bank.assign(id=ids).rename(columns={"default.payment.next.month": "y"}).to_csv(folder / "bank.csv", index=False)
    shop = frame[["PAY_AMT1", "PAY_AMT2", "BILL_AMT2", "EDUCATION"]].assign(id=ids)
    shop.iloc[100:].to_parquet(folder / "shop.parquet")  # 500 rows in common
    script = Path(__file__).with_name("cluster_run.py")
    out = subprocess.run([sys.executable, str(script), str(folder)], capture_output=True, text=True, timeout=600)
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
