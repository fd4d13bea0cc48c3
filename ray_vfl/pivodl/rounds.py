"""The driver's side of PIVODL's rounds: calls that hand message references from client to client.

The driver never fetches a message: each client method returns a status and one Ray reference per
message (``num_returns``), the driver waits on the statuses only (a failed or silent client is named by
:meth:`~ray_vfl.runtime.actors.Runtime.get`) and passes each reference to its receiver, whose actor
resolves it (a small message still sits in the driver's process, inline, sealed for its receiver:
ciphertext only). Across organisations (:mod:`ray_vfl.runtime.federation.relay`) a serving client's message
for another serving client goes to it directly and the driver passes on a token in its place: the same code.
The rounds themselves (steps 2-7) are described in :mod:`ray_vfl.pivodl.protocol`.
"""

from __future__ import annotations

import secrets

import numpy as np

from ..runtime.calls import Calls
from .config import PIVODLConfig

__all__ = ["other_index", "route", "evaluate", "secure_total", "deal_split_clients", "grow_tree"]


def other_index(order: list[str]):
    """Index of ``receiver`` among ``sender``'s others (messages sent one per other client, in order)."""
    return lambda sender, receiver: [p for p in order if p != sender].index(receiver)


def route(calls: Calls, config: PIVODLConfig, key: str, n_trees: int) -> None:
    """Move the rows of data set ``key`` through the first ``n_trees`` trees, one level per round."""
    calls.value("route_start", calls.order, lambda p: (key, n_trees), "prediction")
    sent: dict[str, list] = {}
    for depth in range(config.max_depth + 1):
        last = depth == config.max_depth
        sent = calls.each("route_step", calls.order,
                          lambda p: (key, calls.to(p, sent, lambda s, r: 0) if depth else [], depth, not last),
                          1, f"prediction round {depth + 1}")


def evaluate(calls: Calls, config: PIVODLConfig, key: str, n_trees: int) -> dict[str, float]:
    """Metrics of eval set ``key`` after ``n_trees`` trees: margins reach each row's label owner only,
    the loss sums reach a random output client masked, and the driver gets the metrics."""
    order = calls.order
    route(calls, config, key, n_trees)
    other = other_index(order)
    nonce = secrets.token_bytes(16)
    shares = calls.each("eval_shares", order, lambda p: (key, nonce), len(order) - 1, f"evaluation of {key!r}")
    output, nonce = secrets.choice(order), secrets.token_bytes(16)
    sums = calls.each("eval_sums", order, lambda p: (key, calls.to(p, shares, other), nonce, output), 1,
                      f"evaluation of {key!r}")
    refs = [sums[p][0] for p in order if p != output]
    return calls.value("eval_metrics", [output], lambda p: (refs,), f"evaluation of {key!r}")[0]


def secure_total(calls: Calls, order: list[str], what: str) -> None:
    """Step 2: every client's sums, added by a random aggregation client, decrypted and broadcast by a
    random encryption client (two different clients, drawn from OS entropy)."""
    a, e = secrets.SystemRandom().sample(order, 2)
    shares = calls.each("total_share", order, lambda p: (what, e, a), 1, f"secure total ({what})")
    summed = calls.each("aggregate", [a], lambda p: ([shares[q][0] for q in order if q != a], e), 1, "aggregation")
    opened = calls.each("open_total", [e], lambda p: (summed[a][0], what), 1, "decryption")
    calls.value("take_total", [p for p in order if p != e], lambda p: (opened[e][0], what), "totals")


def deal_split_clients(n_clients: int, n_nodes: int) -> np.ndarray:
    """``(n_nodes, n_clients)``: the split client of every source at every node, a uniformly random
    derangement per node drawn from OS entropy. Each source's split client is uniform among the other
    clients, as in the paper, and each client scores exactly one source per node: no client decrypts
    two sources' sums over the same rows (which it could subtract), and the work is even.

    Example
    -------
    >>> deal_split_clients(2, 3).tolist()
    [[1, 0], [1, 0], [1, 0]]
    """
    draw = secrets.SystemRandom()
    out = np.empty((n_nodes, n_clients), dtype=np.int64)
    for i in range(n_nodes):
        while True:  # rejection: about e tries
            perm = draw.sample(range(n_clients), n_clients)
            if all(c != s for s, c in enumerate(perm)):
                break
        out[i] = perm
    return out


def grow_tree(calls: Calls, order: list[str], config: PIVODLConfig, tree: int) -> None:
    """One tree, level by level (steps 2-6)."""
    other = other_index(order)
    calls.value("begin_tree", order, lambda p: (), f"tree {tree + 1}")
    secure_total(calls, order, "root")
    open_nodes, next_id, leaves = [0], 1, []
    for depth in range(config.max_depth):
        if not open_nodes:
            break
        last = depth + 1 == config.max_depth
        phase = f"tree {tree + 1}, depth {depth}"
        calls.value("set_open_nodes", order, lambda p: (open_nodes,), phase)
        split = deal_split_clients(len(order), len(open_nodes))
        req = calls.each("propose", order, lambda p: (depth, open_nodes, split[:, order.index(p)].tolist()),
                         len(order) - 1, phase)
        sums = calls.each("sum_candidates", order, lambda p: (depth, calls.to(p, req, other)), len(order) - 1, phase)
        fwd = calls.each("forward", order, lambda p: (depth, calls.to(p, sums, other)), len(order) - 1, phase)
        best = calls.each("score", order, lambda p: (depth, calls.to(p, fwd, other)), 1, phase)
        won = calls.each("decide", order, lambda p: (depth, calls.to(p, best, lambda s, r: 0)), len(order), phase)
        leaves += [won[p][0] for p in order]
        told = calls.each("apply_wins", order, lambda p: (depth, [won[q][1 + other(q, p)] for q in order if q != p]),
                          len(order), phase)
        moves = calls.value("apply_partitions", order, lambda p: (depth, calls.to(p, told, lambda s, r: 0), next_id), phase)
        children = moves[0]
        chosen = calls.each("apply_chosen", order,
                            lambda p: (depth, [told[q][1 + other(q, p)] for q in order if q != p], children, last),
                            1, phase)
        leaves += [chosen[p][0] for p in order]
        open_nodes = [c for _, left, right in children for c in (left, right)]
        next_id += 2 * len(children)
        if last:
            break
    calls.value("finish_tree", order, lambda p: (leaves,), f"tree {tree + 1}")
