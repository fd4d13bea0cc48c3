"""Run by tests/test_party_data.py in its own process: a Ray cluster of one head (the coordinator, no
party resource) and one node per party, on this machine (``ray.cluster_utils.Cluster``).

Each party's source is opened by party-held data; the script reports on which node each file was
read, which node declares each party's resource, the head's node, and the margins of a plaintext
SecureBoost model trained from the party-held data and from the same data as frames.
Usage: ``python tests/party_cluster.py FOLDER`` (FOLDER holds bank.csv and shop.parquet); prints JSON.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import ray
from ray.cluster_utils import Cluster

from ray_vfl import Runtime, SecureBoostClassifier, VerticalDataset
from ray_vfl.data.sources import PartySource
from ray_vfl.runtime.local_ray import RESOURCE_UNITS, party_resource

PARTIES = ("bank", "shop")


def main(folder: Path) -> dict:
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    nodes = {p: cluster.add_node(num_cpus=1, resources={party_resource(p): RESOURCE_UNITS}) for p in PARTIES}
    ray.init(address=cluster.address, log_to_driver=False)
    try:
        runtime = Runtime(timeout_s=300)
        sources = {"bank": PartySource(str(folder / "bank.csv"), id_column="id", label="y"),
                   "shop": PartySource(str(folder / "shop.parquet"), id_column="id")}
        held = VerticalDataset.from_sources(sources, align="psi", runtime=runtime)
        reads = held.source_reads()
        params = {"n_estimators": 2, "max_depth": 3, "backend": "plain", "runtime": runtime}
        held_margin = SecureBoostClassifier(**params).fit(held).predict_margin(held)
        frames = {"bank": pd.read_csv(folder / "bank.csv"), "shop": pd.read_parquet(folder / "shop.parquet")}
        local = VerticalDataset.from_frames(frames, label="y", align="psi", runtime=runtime)
        local_margin = SecureBoostClassifier(**params).fit(local).predict_margin(local)
        return {
            "read_on": {p: [r["node_id"] for r in reads[p]] for p in PARTIES},
            "party_node": {p: n.node_id for p, n in nodes.items()},
            "head_node": cluster.head_node.node_id,
            "driver_node": ray.get_runtime_context().get_node_id(),
            "same_margins": bool(np.array_equal(held_margin, local_margin)),
            "rows": held.n_rows,
        }
    finally:
        ray.shutdown()
        cluster.shutdown()


if __name__ == "__main__":
    print("RESULT " + json.dumps(main(Path(sys.argv[1]))))
