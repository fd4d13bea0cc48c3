"""The rounds of one SecureBoost tree and of federated prediction, as the label party runs them.

The active (label) party's actor drives each tree: it calls the passive
parties' actors directly and waits for their replies, one round trip per
level instead of a chain of calls through the driver. Every payload still
goes through the parties' metered :class:`~ray_vfl.runtime.comm.Mailbox`; a passive
party that dies, fails or stays silent past ``config.timeout_s`` ends the
tree with :class:`~ray_vfl.errors.PartyFailedError` naming it.

Per level, with one passive party (or when no passive party won a split of
the level): one round trip, ``level_step`` out (the splits the passive won,
the children, the active party's partitions) and the passive's partition
with the next level's encrypted histograms back. With several passive
parties, those that won splits first send their partitions (every passive
party needs them to move its rows): two round trips.

Why not other shapes of these rounds (a second, pipelined call per level;
Ray compiled graphs, whose readers spin at 100% CPU while they wait; asking
for the next tree before the last one's logs; partitions handed between
passive parties as Ray arguments): none was faster, see
``benchmarks/RESULTS.md``, "Round shapes measured and not kept".
"""

from __future__ import annotations

import numpy as np
import ray

from ..runtime.actors import gather

__all__ = ["grow_tree", "route"]


def grow_tree(active, tree: int) -> None:
    """Grow one tree level by level with every passive party (inside the active party)."""
    peers, timeout = active.peers, active.config.timeout_s
    max_depth = active.config.max_depth
    gh = active.start_tree(tree)
    gh = ray.put(gh) if len(peers) > 1 else gh  # one copy in the object store for every passive party
    pending = [(p, h.begin_tree.remote(gh)) for p, h in peers.items()]        # Enc(g), Enc(h) out
    active.own_histograms()  # the root's, while the passive parties sum theirs
    active.count_repeated_pairs()  # bookkeeping, also while they sum
    for depth in range(max_depth):
        sums = active.receive(gather(pending, f"histograms at depth {depth}", timeout))  # Enc(bin sums) back
        if depth:
            active.advance()
            active.own_histograms()
        if not active.choose_splits(depth, sums):                                   # decrypt, best splits
            return
        last = depth + 1 == max_depth
        winners = active.winners()
        if len(peers) > 1 and winners:  # passive parties need each other's partitions: collect them first
            first = [(p, peers[p].next_level.remote(active.level_step(p, depth, advance=False))) for p in winners]
            active.receive(gather(first, f"partitions at depth {depth}", timeout))
            targets = [] if last else list(peers)
        else:
            targets = winners if last else list(peers)
        pending = [(p, peers[p].next_level.remote(active.level_step(p, depth, advance=not last))) for p in targets]
        if last:
            active.receive(gather(pending, f"partitions at depth {depth}", timeout))
            active.advance()
        else:
            active.prebuild_own_histograms()  # meanwhile: the children of its own splits


def route(active, key: str, first_tree: int, end_tree: int) -> np.ndarray:
    """Federated prediction of data set ``key`` through trees ``[first_tree, end_tree)``.

    Each round the active party moves rows through its own nodes and asks the
    passive parties about the rows waiting at theirs; a row passes at most
    ``max_depth`` internal nodes per tree, so at most ``max_depth`` rounds.
    """
    queries = active.route_start(key, first_tree, end_tree)
    for depth in range(active.config.max_depth + 1):
        if not queries:
            return active.route_finish(key)
        calls = [(p, active.peers[p].route.remote(key, q)) for p, q in queries.items()]
        queries = active.route_step(key, depth + 1, gather(calls, f"prediction round {depth}", active.config.timeout_s))
    return active.route_finish(key)
