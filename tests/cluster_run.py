"""Run by tests/test_cluster.py in its own process: one Ray cluster on this machine
(``ray.cluster_utils.Cluster``) with a head (the driver's node, no party resource) and one node per party
declaring the party's resource, as ``cluster.yaml`` declares them on a real cluster. Three checks share it
(a cluster takes seconds to start):

1. **Party-held data.** Each party's file is opened by its own store actor; the script reports on which
   node each file was read and the margins of a plaintext SecureBoost model trained from the party-held
   data and from the same data as frames.
2. **Placement.** A PIVODL model (Paillier, each client with a pool of 2 crypto workers) trains; the script
   reports the node of every client actor (from Ray's GCS actor table) and the nodes the clients' crypto
   tasks run on (tasks pinned like the protocol's own).
3. **A killed node.** One client's node is removed in the middle of a second training; the script reports
   the error the driver got.

Usage: ``python tests/cluster_run.py FOLDER``: writes the parties' files into FOLDER (:func:`write_party_files`),
runs the checks and prints ``RESULT <json>``. ``tests/conftest.py`` starts it when the session starts, so the
cluster's start-up overlaps the collection of the tests; ``tests/test_cluster.py`` reads its result.
"""

from __future__ import annotations

import json
import os
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import ray
from ray.cluster_utils import Cluster

from ray_vfl import Runtime, SecureBoostClassifier, VerticalDataset, vertical_split
from ray_vfl.data.bundled import load_named
from ray_vfl.data.sources import PartySource
from ray_vfl.errors import PartyFailedError
from ray_vfl.pivodl import PIVODLConfig, train
from ray_vfl.runtime.local_ray import RESOURCE_UNITS, party_resource
from ray_vfl.trees.callbacks import TrainingCallback

CLIENTS = ("bank", "shop")


def _node_of_task(_chunk) -> str:
    return ray.get_runtime_context().get_node_id()


def write_party_files(folder: Path) -> None:
    """The bank's CSV (600 credit rows with labels) and the shop's Parquet file (500 of those rows)."""
    from ray_vfl.data.bundled import BUNDLED_DIR

    frame = pd.read_csv(Path(BUNDLED_DIR) / "uci_default_credit_card.csv.gz").iloc[:600]
    ids = [f"cust-{i:06d}" for i in frame["ID"]]
    bank = frame[["LIMIT_BAL", "AGE", "PAY_0", "BILL_AMT1", "default.payment.next.month"]]
    bank.assign(id=ids).rename(columns={"default.payment.next.month": "y"}).to_csv(folder / "bank.csv", index=False)
    shop = frame[["PAY_AMT1", "PAY_AMT2", "BILL_AMT2", "EDUCATION"]].assign(id=ids)
    shop.iloc[100:].to_parquet(folder / "shop.parquet")  # 500 rows in common


def party_held(runtime: Runtime, folder: Path) -> dict:
    """Check 1: where each party's file is read, and the same model as from frames."""
    sources = {"bank": PartySource(str(folder / "bank.csv"), id_column="id", label="y"),
               "shop": PartySource(str(folder / "shop.parquet"), id_column="id")}
    held = VerticalDataset.from_sources(sources, align="psi", runtime=runtime)
    reads = held.source_reads()
    params = {"n_estimators": 2, "max_depth": 3, "backend": "plain", "runtime": runtime}
    held_margin = SecureBoostClassifier(**params).fit(held).predict_margin(held)
    frames = {"bank": pd.read_csv(folder / "bank.csv"), "shop": pd.read_parquet(folder / "shop.parquet")}
    local = VerticalDataset.from_frames(frames, label="y", align="psi", runtime=runtime)
    local_margin = SecureBoostClassifier(**params).fit(local).predict_margin(local)
    return {"read_on": {p: [r["node_id"] for r in reads[p]] for p in ("bank", "shop")},
            "driver_node": ray.get_runtime_context().get_node_id(),
            "same_margins": bool(np.array_equal(held_margin, local_margin)), "rows": held.n_rows}


def placement_and_failure(runtime: Runtime, cluster: Cluster, nodes: dict) -> dict:
    """Checks 2 and 3: PIVODL's actors and crypto tasks on their parties' nodes; a node removed mid-training."""
    frame, label, _, _ = load_named("credit")
    data = vertical_split(frame.iloc[:600], {"bank": list(frame.columns[:12]), "shop": list(frame.columns[12:23])},
                          label=label, label_owners={"bank": 0.6, "shop": 0.4})
    config = PIVODLConfig(n_trees=2, max_depth=2, max_bin=8, backend="paillier", key_bits=1024,
                          allow_weak_keys=True, workers_per_party=2)
    model = train(runtime, data, config)
    actors = {a["ActorID"]: a for a in ray._private.state.actors().values()}
    actor_node = {p: actors[runtime.actor(p)._actor_id.hex()]["Address"]["NodeID"] for p in CLIENTS}
    task_nodes = {p: sorted(set(runtime.pool(p, 2).map(_node_of_task, [0, 1, 2, 3]))) for p in CLIENTS}
    margins_ok = bool(len(model.predict_margin(data)) == data.n_rows)

    shop_actor = runtime.actor("shop")._actor_id.hex()

    class KillShop(TrainingCallback):
        """Removes shop's node after the first tree and waits until Ray's actor table says shop's actor is dead
        (a removed raylet's workers exit a moment later; on a loaded machine the next trees could otherwise
        finish first, and the check would prove nothing)."""

        def after_iteration(self, iteration, logs):
            if iteration == 0:
                cluster.remove_node(nodes["shop"], allow_graceful=False)
                deadline = time.monotonic() + 120
                while ray._private.state.actors().get(shop_actor, {}).get("State") != "DEAD":
                    if time.monotonic() > deadline:
                        raise RuntimeError("shop's actor still alive 120 s after its node was removed")
                    time.sleep(0.2)
            return False

    failure = None
    try:
        train(runtime, data, config.replace(n_trees=4), callbacks=[KillShop()])
    except PartyFailedError as exc:
        failure = {"party": exc.party, "reason": exc.reason, "text": str(exc)}
    return {"actor_node": actor_node, "task_nodes": task_nodes, "predicted": margins_ok, "failure": failure}


def main(folder: Path) -> dict:
    warnings.simplefilter("ignore")
    # The GCS declares a silent node dead after health_check_failure_threshold missed checks, every
    # health_check_period_ms: Ray's defaults (5 x 3 s) would keep check 3 waiting 15 s for the removed node.
    health = {"health_check_period_ms": 500, "health_check_timeout_ms": 500, "health_check_failure_threshold": 3}
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False,
                                                            "_system_config": health})
    nodes = {p: cluster.add_node(num_cpus=2, resources={party_resource(p): RESOURCE_UNITS}) for p in CLIENTS}
    ray.init(address=cluster.address, log_to_driver=False)
    try:
        runtime = Runtime(timeout_s=300)
        result = {"party_node": {p: n.node_id for p, n in nodes.items()}, "head_node": cluster.head_node.node_id}
        result["party_held"] = party_held(runtime, folder)
        result.update(placement_and_failure(runtime, cluster, nodes))  # last: it removes a node
        return result
    finally:
        ray.shutdown()
        cluster.shutdown()


if __name__ == "__main__":
    write_party_files(Path(sys.argv[1]))
    print("RESULT " + json.dumps(main(Path(sys.argv[1]))), flush=True)
    os._exit(0)
