"""Run by tests/test_cluster.py in its own process: training on a Ray cluster with one node per party.

``ray.cluster_utils.Cluster`` on this machine: a head (the driver's node, no party resource) and one
node per client declaring the client's resource, as ``cluster.yaml`` declares them on a real cluster.
A PIVODL model (Paillier, each client with a pool of 2 crypto workers) trains there; the script
reports the node of every client actor (from Ray's GCS actor table), the nodes the clients' crypto
tasks run on (tasks pinned like the protocol's own), and then kills one client's node in the middle
of a second training and reports the error the driver got.
Usage: ``python tests/training_cluster.py``; prints ``RESULT <json>``.
"""

from __future__ import annotations

import json
import os
import warnings

import ray
from ray.cluster_utils import Cluster

from ray_vfl import Runtime, vertical_split
from ray_vfl.data.bundled import load_named
from ray_vfl.errors import PartyFailedError
from ray_vfl.pivodl import PIVODLConfig, train
from ray_vfl.runtime.local_ray import RESOURCE_UNITS, party_resource
from ray_vfl.trees.callbacks import TrainingCallback

CLIENTS = ("bank", "shop", "party0")


def _node_of_task(_chunk) -> str:
    return ray.get_runtime_context().get_node_id()


def main() -> dict:
    warnings.simplefilter("ignore")
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    nodes = {p: cluster.add_node(num_cpus=2, resources={party_resource(p): RESOURCE_UNITS}) for p in CLIENTS}
    ray.init(address=cluster.address, log_to_driver=False)
    try:
        frame, label, _, _ = load_named("credit")
        data = vertical_split(frame.iloc[:1500], {"bank": list(frame.columns[:8]), "shop": list(frame.columns[8:16]),
                                                  "party0": list(frame.columns[16:23])},
                              label=label, label_owners={"bank": 0.5, "shop": 0.3, "party0": 0.2})
        runtime = Runtime(timeout_s=300)
        config = PIVODLConfig(n_trees=2, max_depth=2, max_bin=8, backend="paillier", key_bits=1024,
                              allow_weak_keys=True, workers_per_party=2)
        model = train(runtime, data, config)
        actors = {a["ActorID"]: a for a in ray._private.state.actors().values()}
        actor_node = {}
        for party in CLIENTS:
            actor_id = runtime.actor(party)._actor_id.hex()
            actor_node[party] = actors[actor_id]["Address"]["NodeID"]
        task_nodes = {p: sorted(set(runtime.pool(p, 2).map(_node_of_task, [0, 1, 2, 3]))) for p in CLIENTS}
        margins_ok = bool(len(model.predict_margin(data)) == data.n_rows)

        class KillShop(TrainingCallback):
            def after_iteration(self, iteration, logs):
                if iteration == 0:
                    cluster.remove_node(nodes["shop"], allow_graceful=False)
                return False

        failure = None
        try:
            train(runtime, data, config.replace(n_trees=4), callbacks=[KillShop()])
        except PartyFailedError as exc:
            failure = {"party": exc.party, "reason": exc.reason, "text": str(exc)}
        return {"actor_node": actor_node, "task_nodes": task_nodes,
                "party_node": {p: n.node_id for p, n in nodes.items()}, "head_node": cluster.head_node.node_id,
                "predicted": margins_ok, "failure": failure}
    finally:
        ray.shutdown()
        cluster.shutdown()


if __name__ == "__main__":
    print("RESULT " + json.dumps(main()), flush=True)
    os._exit(0)
