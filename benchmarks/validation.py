"""What validation on receipt costs: every message of real SecureBoost trees checked and timed.

    python benchmarks/validation.py                               # credit, 2 parties, Paillier 1024, 3 trees
    python benchmarks/validation.py --parties 4 --backend ou --key-bits 2048 --trees 3

The parties run in this process (one worker each, no Ray actors: Ray only carries the replies), so
every :func:`ray_vfl.runtime.validation.check_payload` call can be timed where it runs, on the very
payloads of the protocol (a 24,000-row Enc(g, h), every level's histograms and steps, the prediction
rounds). The table gives the checks' time per kind and per tree, against this process's tree time;
compare the per-tree seconds with ``benchmarks/secureboost.py``'s s/tree (Ray actors, the same data)
for the share of a distributed tree. Opening and decoding are not counted (benchmarks/wire.py measures them).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from types import SimpleNamespace

import numpy as np

DATA_DIR = None  # $VFL_DATA_DIR if set, then the data shipped in ray_vfl/data/files


class Local:
    """A party's actor handle stand-in: ``handle.method.remote(*args)`` runs the method here."""

    def __init__(self, party) -> None:
        self.party = party

    def __getattr__(self, method: str):
        import ray

        def remote(*args):
            args = [ray.get(a, timeout=600) if isinstance(a, ray.ObjectRef) else a for a in args]
            return ray.put(getattr(self.party, method)(*args))
        return SimpleNamespace(remote=remote)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", default="credit")
    ap.add_argument("--parties", type=int, default=2)
    ap.add_argument("--backend", default="paillier")
    ap.add_argument("--key-bits", type=int, default=1024)
    ap.add_argument("--trees", type=int, default=3)
    args = ap.parse_args()

    scratch = tempfile.mkdtemp(prefix="vflv")
    Path(scratch, "ray_bootstrap_config.yaml").write_text("provider: {type: local}\n")
    os.environ.update(RAY_USAGE_STATS_ENABLED="0", RAY_AUTH_MODE="disabled", HOME=scratch,
                      RAY_TMPDIR=tempfile.mkdtemp(prefix="rv", dir="/tmp"))
    import ray

    import ray_vfl.runtime.comm as comm
    from ray_vfl import BoostConfig, vertical_split
    from ray_vfl.data.bundled import load_named
    from ray_vfl.data.store import InlineRows
    from ray_vfl.runtime.task_pool import TaskPool
    from ray_vfl.secureboost import rounds
    from ray_vfl.secureboost.active import ActiveParty
    from ray_vfl.secureboost.passive import PassiveParty

    frame, label, cats, _ = load_named(args.dataset, DATA_DIR)
    train, _ = vertical_split(frame, args.parties, label=label, categorical=cats, seed=0).train_test_split(0.2, seed=0)
    order, active_name = train.party_names, train.label_party
    cfg = BoostConfig(n_trees=args.trees, backend=args.backend, key_bits=args.key_bits,
                      allow_weak_keys=args.key_bits < 2048, timeout_s=600)

    spent: dict[str, list[float]] = defaultdict(list)
    check = comm.check_payload

    def timed(kind, *rest, **kw):
        start = time.perf_counter()
        try:
            return check(kind, *rest, **kw)
        finally:
            spent[kind].append(time.perf_counter() - start)

    comm.check_payload = timed  # Mailbox.open calls it through the module: every receiver here is timed
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False,
             object_store_memory=512 * 1024**2)
    try:
        pool = TaskPool(resource=None, workers=1)
        rows = {p: InlineRows(train.features[p], train.label if p == active_name else None) for p in order}
        active = ActiveParty(active_name, rows[active_name], train.categorical.get(active_name, []), cfg, pool, order)
        handles = {p: Local(PassiveParty(p, rows[p], train.categorical.get(p, []), cfg, pool))
                   for p in order if p != active_name}
        active.set_peers(handles)
        key = active.public_key_message()
        ray.get([h.set_public_key.remote(key) for h in handles.values()], timeout=600)
        active.collect_layouts()
        setup = {k: sum(v) for k, v in spent.items()}
        spent.clear()
        tree_s = []
        for t in range(args.trees):
            start = time.perf_counter()
            active.grow_tree(t)
            tree_s.append(time.perf_counter() - start)
        start = time.perf_counter()
        rounds.route(active, "train", 0, args.trees)
        route_s = time.perf_counter() - start
    finally:
        ray.shutdown()

    trees = sum(tree_s)
    route_kinds = ("route_query", "route_answer")
    tree_checks = sum(sum(v) for k, v in spent.items() if k not in route_kinds)
    route_checks = sum(sum(spent[k]) for k in route_kinds)
    print(f"{args.dataset}, {args.parties} parties, {args.backend} {args.key_bits}, {train.n_rows} rows, "
          f"{args.trees} trees in this process: {trees:.2f} s ({trees / args.trees:.3f} s per tree)")
    print("| kind | messages | checks ms | ms per message |")
    print("|---|---|---|---|")
    for kind in sorted(spent):
        v = spent[kind]
        print(f"| {kind} | {len(v)} | {1e3 * sum(v):.2f} | {1e3 * np.mean(v):.3f} |")
    for kind, s in sorted(setup.items()):
        print(f"| {kind} (set-up, once) | - | {1e3 * s:.2f} | - |")
    print(f"checks per tree: {1e3 * tree_checks / args.trees:.2f} ms = {100 * tree_checks / trees:.3f}% of this "
          f"process's tree; prediction rounds: {1e3 * route_checks:.2f} ms of {route_s:.2f} s")


if __name__ == "__main__":
    main()
