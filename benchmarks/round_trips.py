"""What a plaintext SecureBoost fit costs in actor round trips alone, on this machine.

Replays the rounds of a 2-party plaintext tree (credit, depth 5) between two party actors started
by :class:`~ray_vfl.runtime.actors.Runtime`, through the metered send path, with the real message types and
payload sizes but no computation: the gradient pairs out and the root's histograms back, then per
level a :class:`~ray_vfl.secureboost.messages.LevelStep` out and a partition with the next level's
histograms back, and the last level's partitions. Then it fits the real thing in the same Ray and
prints both. Issue 2 asks for 10 plaintext trees in 0.2 s; this shows how much of that the round trips
take here before any histogram is summed.

    python benchmarks/round_trips.py              # 10 trees, 7 repeats
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import numpy as np
import ray

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from ray_vfl import Runtime, SecureBoostClassifier, vertical_split  # noqa: E402
from ray_vfl.crypto import get_backend  # noqa: E402
from ray_vfl.data.bundled import load_named  # noqa: E402
from ray_vfl.runtime.actors import gather  # noqa: E402
from ray_vfl.runtime.comm import Mailbox  # noqa: E402
from ray_vfl.secureboost.levels import pack_partition  # noqa: E402
from ray_vfl.secureboost.messages import LevelStep, NodeHistograms, SplitOrders  # noqa: E402
from ray_vfl.trees.callbacks import TreeTimer  # noqa: E402

ROWS, CELLS, DEPTH = 19_200, 352, 5  # credit's training rows; a passive party's 11 features x 32 bins


def _plain_key():
    return get_backend("plain").generate_keys()[0]


def _partition(nodes: int) -> object:
    rows = ROWS // max(1, 2 * nodes)  # about half the level's rows sit at the nodes one party split
    return pack_partition(list(range(nodes)), [np.zeros(rows, bool)] * nodes)


class Passive:
    """Answers every round with payloads of the real sizes (made once, up front), computing nothing."""

    def __init__(self) -> None:
        self.box = self.mailbox = Mailbox("passive")  # mailbox: what Runtime.introduce hands the keys to
        be, pk = get_backend("plain"), _plain_key()
        self.hists = {n: NodeHistograms(np.packbits(np.ones(n * CELLS, bool)),
                                        [be.encrypt_gh(pk, np.zeros(CELLS), np.zeros(CELLS)) for _ in range(n)])
                      for n in (2 ** d for d in range(DEPTH))}
        self.parts = {n: _partition(max(1, n // 2)) for n in self.hists}

    def begin_tree(self, message) -> list:
        self.box.open(message, "encrypted_gh")
        return [self.box.send("encrypted_histograms", ["active"], self.hists[1], message.tree, 0)]

    def next_level(self, message) -> list:
        step = self.box.open(message, "level_step")
        splits = len(step.children)  # the next level builds one child per split
        out = [self.box.send("partition", ["active"], self.parts[splits], message.tree, message.depth)]
        if step.advance:  # the last level answers with its partitions only
            out.append(self.box.send("encrypted_histograms", ["active"], self.hists[splits], message.tree, message.depth + 1))
        return out


class Active:
    """Drives the rounds of ``trees`` trees against the passive actor; returns the seconds."""

    def __init__(self, peer) -> None:
        self.box, self.peer = Mailbox("active"), peer
        self.mailbox = self.box
        self.gh = get_backend("plain").encrypt_gh(_plain_key(), np.zeros(ROWS), np.zeros(ROWS))
        self.steps = []
        for depth in range(DEPTH):
            n = 2 ** depth
            orders = SplitOrders(*(np.zeros(n // 2, dtype=np.int32) for _ in range(3)), np.zeros(n // 2, dtype=bool),
                                 np.zeros(n // 2, dtype=np.int32), np.zeros((n // 2, 4), dtype=np.uint8))
            self.steps.append(LevelStep(orders, np.zeros((n, 3), dtype=np.int32), _partition(max(1, n // 2)),
                                        depth + 1 < DEPTH))

    def run(self, trees: int) -> float:
        start = time.perf_counter()
        for tree in range(trees):
            gh = self.box.send("encrypted_gh", ["passive"], self.gh, tree)
            gather([("passive", self.peer.begin_tree.remote(gh))], "histograms", 60.0)
            for depth, step in enumerate(self.steps):
                message = self.box.send("level_step", ["passive"], step, tree, depth)
                gather([("passive", self.peer.next_level.remote(message))], "level", 60.0)
        return time.perf_counter() - start


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trees", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args(argv)
    rt = Runtime()
    rt.connect(["active", "passive"])
    passive = rt.spawn("passive", Passive)
    active = rt.spawn("active", Active, passive)
    rt.introduce(["active", "passive"])  # their public keys: every message is sealed
    ray.get(active.run.remote(2), timeout=120)  # warm both actors
    skeleton = [ray.get(active.run.remote(args.trees), timeout=600) for _ in range(args.repeat)]

    frame, label, cats, _ = load_named("credit")
    train, _ = vertical_split(frame, 2, label=label, categorical=cats, seed=0).train_test_split(0.2, seed=0)
    fits = []
    for _ in range(args.repeat + 1):  # the first fit starts the party actors: not counted
        timer = TreeTimer()
        SecureBoostClassifier(n_estimators=args.trees, backend="plain", runtime=rt, base_score=0.5,
                              callbacks=[timer]).fit(train)
        fits.append(timer.seconds)
    fits = fits[1:]
    rt.shutdown()
    rts = args.trees * (DEPTH + 1)
    print(f"{args.trees} plaintext trees, 2 parties, depth {DEPTH}, median of {args.repeat}:")
    print(f"  round trips only ({rts}, real payloads, no computation): {statistics.median(skeleton):.3f} s "
          f"({min(skeleton):.3f}-{max(skeleton):.3f}), {statistics.median(skeleton) / rts * 1e3:.2f} ms each")
    print(f"  the protocol (training time):                          {statistics.median(fits):.3f} s "
          f"({min(fits):.3f}-{max(fits):.3f})")
    print("  issue 2's target: 0.2 s")


if __name__ == "__main__":
    main()
