"""Typed payloads of the SecureBoost rounds (see :mod:`ray_vfl.secureboost.protocol`), and what
each message kind may carry (its schema, checked by the receiver on
:meth:`~ray_vfl.runtime.comm.Mailbox.open`; see :mod:`ray_vfl.runtime.validation`)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..runtime.validation import (
    Array,
    Ciphers,
    Is,
    Packed,
    Ref,
    Rule,
    Scalar,
    Size,
    length,
    not_in,
    register,
    total,
)
from ..trees.encoding import public_key_problem

__all__ = ["SplitOrders", "Partition", "LevelStep", "NodeHistograms", "RouteQuery", "RouteAnswer"]


@dataclass(frozen=True)
class SplitOrders:
    """Active -> one passive: the splits it won (node, its feature, its bin, missing left), and for a
    native categorical split the bins it sends left (``left_bins``: one row of packed bits per order,
    ``n_bins - 1`` bits; all zero for a threshold split)."""

    node: np.ndarray
    feature: np.ndarray
    bin: np.ndarray
    default_left: np.ndarray
    record: np.ndarray  # ids the passive files these splits under in its lookup table
    left_bins: np.ndarray


@dataclass(frozen=True)
class Partition:
    """Passive -> active: for each ordered node, which of its rows go left (packed bits, row order)."""

    node: np.ndarray
    bits: np.ndarray
    counts: np.ndarray  # rows per node, to unpack ``bits``


@dataclass(frozen=True)
class LevelStep:
    """Active -> one passive once a level's splits are decided.

    ``orders`` are the splits this passive won; ``children`` rows are
    ``(node, left child, right child)`` for every split of the level;
    ``partition`` says which rows go left at the split nodes this passive
    does not own (the instance spaces SecureBoost shares). With ``advance``
    the passive moves its rows to the children, ready for the next level.
    """

    orders: SplitOrders
    children: np.ndarray
    partition: Partition
    advance: bool


@dataclass(frozen=True)
class NodeHistograms:
    """Passive -> active: the encrypted histograms of the nodes built at a level, in build order.

    Node ``i``'s array holds, in layout order, only the cells (of the
    passive's :meth:`~ray_vfl.secureboost.passive.PassiveParty.histogram_layout`)
    that any of the node's rows fall in: ``occupied`` packs one bit per
    (node, layout cell), row-major.
    """

    occupied: np.ndarray
    ciphers: list

    def occupied_cells(self, n_cells: int) -> np.ndarray:
        """``(nodes, n_cells)`` bool, for a layout of ``n_cells`` cells."""
        n = len(self.ciphers)
        return np.unpackbits(self.occupied, count=n * n_cells).astype(bool).reshape(n, n_cells)


@dataclass(frozen=True)
class RouteQuery:
    """Active -> passive at prediction: rows waiting at this passive's records."""

    row: np.ndarray
    record: np.ndarray


@dataclass(frozen=True)
class RouteAnswer:
    """Passive -> active: one packed bit per query, 1 = go left."""

    bits: np.ndarray
    count: int


# ---------------------------------------------------------------------------
# What each kind carries. Context names are the receiver's own values, given where it opens the message.

def _layout_problem(p, ctx) -> str | None:
    """A feature's derived cell is never also sent."""
    both = np.intersect1d(p["cells"], p["derived"])
    return f"cells and derived both hold cell {both[0]}" if both.size else None


def _rows_of(path: str) -> Ref:
    """The receiver's row count of each node named by field ``path`` (context: node_rows)."""
    def rows(p, ctx):
        nodes = p
        for part in path.split("."):
            nodes = getattr(nodes, part)
        return np.asarray([ctx["node_rows"][n] for n in nodes.tolist()], dtype=np.int64)
    return Ref(rows, f"the receiver's row count of each node of {path}")


def _level_step_problem(p: LevelStep, ctx) -> str | None:
    """Orders and partitions are about the level's splits; split nodes are open at the receiver,
    their children new; when told to advance, the receiver knows how every split node's rows go."""
    parents, new = p.children[:, 0], p.children[:, 1:]
    bad = np.flatnonzero(not_in(parents, ctx["open_nodes"]))
    if bad.size:
        return f"children[{bad[0]}, 0] = {parents[bad[0]]} is not an open node at the receiver"
    if len(np.unique(parents)) != len(parents) or len(np.unique(new)) != new.size:
        return "children splits a node twice or gives two splits the same child"
    if not not_in(new.ravel(), np.concatenate([ctx["open_nodes"], parents])).all():
        return "children gives a split a child that is an existing node"
    for path, nodes in (("orders.node", p.orders.node), ("partition.node", p.partition.node)):
        out = np.flatnonzero(not_in(nodes, parents))
        if out.size:
            return f"{path}[{out[0]}] = {nodes[out[0]]} is split in no row of children"
    if p.advance:
        known = set(p.orders.node.tolist()) | set(p.partition.node.tolist()) | set(ctx["known"])
        missing = [i for i, n in enumerate(parents.tolist()) if n not in known]
        if missing:
            return f"children[{missing[0]}, 0] = {parents[missing[0]]} is split, but no partition says where its rows go"
    return None


def _category_sets_problem(p: LevelStep, ctx) -> str | None:
    """A category set only on a feature the receiver splits natively, over its categories, with at
    least one category on each side (context: n_categories, each feature's, 0 where split at thresholds)."""
    o = p.orders
    sets = np.unpackbits(o.left_bins, axis=1, count=ctx["n_bins"] - 1).astype(bool)
    for i, (feature, left) in enumerate(zip(o.feature.tolist(), sets)):
        k = int(ctx["n_categories"][feature])
        if left.any() and (k == 0 or left[k:].any() or left[:k].all()):
            return (f"orders.left_bins[{i}] is not a split of feature {feature}'s categories "
                    f"({k} at the receiver)")
    return None


_N_ORDERS = length("orders.node")

register(  # active -> passive, once (context: backend_spec, backend, key_bits)
    "public_key",
    Is("", tuple), Size("", 2), Rule(public_key_problem),
)
register(  # passive -> active, once (context: n_bins, encrypted)
    "histogram_layout",
    Is("", dict),
    Scalar("n_features", low=0),
    Array("cells", "int", (None,), low=0, high=Ref(lambda p, c: p["n_features"] * c["n_bins"], "n_features * n_bins"),
          increasing=True),
    Array("derived", "int", (Ref(lambda p, c: p["n_features"] if c["encrypted"] else 0,
                                 "n_features with ciphertexts, else 0"),),
          low=Ref(lambda p, c: np.arange(p["n_features"]) * c["n_bins"], "its feature's first cell"),
          high=Ref(lambda p, c: np.arange(1, p["n_features"] + 1) * c["n_bins"], "its feature's last cell + 1")),
    Array("n_categories", "int", (Ref(lambda p, c: p["n_features"], "n_features"),), low=0,
          high=Ref(lambda p, c: c["n_bins"], "n_bins")),
    Rule(_layout_problem),
)
register(  # active -> passive, per tree (context: backend, public_key, n_rows)
    "encrypted_gh",
    Ciphers("", entries="n_rows", compressed=False),
)
register(  # passive -> active, per level (context: backend, public_key, n_nodes built, n_cells of the sender's layout)
    "encrypted_histograms",
    Is("", NodeHistograms), Is("ciphers", list), Size("ciphers", "n_nodes"),
    Packed("occupied", Ref(lambda p, c: c["n_nodes"] * c["n_cells"], "n_nodes * n_cells")),
    Ciphers("ciphers", each=True,
            entries=Ref(lambda p, c: p.occupied_cells(c["n_cells"]).sum(axis=1), "the node's occupied cells")),
)
register(  # active -> passive, per level (context: open_nodes, node_rows, n_features, n_bins, next_record,
    "level_step",  # max_nodes, known: the nodes whose partition the receiver already has)
    Is("", LevelStep), Is("orders", SplitOrders), Is("partition", Partition), Scalar("advance", "bool"),
    Array("orders.node", "int", (None,), among="open_nodes", unique=True),
    Array("orders.feature", "int", (_N_ORDERS,), low=0, high="n_features"),
    Array("orders.bin", "int", (_N_ORDERS,), low=0, high="n_bins"),
    Array("orders.default_left", "bool", (_N_ORDERS,)),
    Array("orders.record", "int", (_N_ORDERS,),
          equals=Ref(lambda p, c: c["next_record"] + np.arange(len(p.orders.node)), "the receiver's next record ids")),
    Array("orders.left_bins", "uint8", (_N_ORDERS, Ref(lambda p, c: (c["n_bins"] + 6) // 8, "(n_bins - 1) / 8 rounded up"))),
    Rule(_category_sets_problem),
    Array("children", "int", (None, 3), low=0, high="max_nodes"),
    Array("partition.node", "int", (None,), among="open_nodes", unique=True),
    Array("partition.counts", "int", (length("partition.node"),), equals=_rows_of("partition.node")),
    Packed("partition.bits", total("partition.counts")),
    Rule(_level_step_problem),
)
register(  # passive -> active, per level it won splits (context: node_rows of the nodes it won)
    "partition",
    Is("", Partition),
    Array("node", "int", (Ref(lambda p, c: len(c["node_rows"]), "the number of nodes the sender won"),),
          among="node_rows", unique=True),
    Array("counts", "int", (length("node"),), equals=_rows_of("node")),
    Packed("bits", total("counts")),
)
register(  # active -> passive, per prediction round (context: n_rows of the data set, n_records)
    "route_query",
    Is("", RouteQuery),
    Array("row", "int", (None,), low=0, high="n_rows"),
    Array("record", "int", (length("row"),), low=0, high="n_records"),
)
register(  # passive -> active, per prediction round (context: n_queries sent to the sender)
    "route_answer",
    Is("", RouteAnswer), Scalar("count", equals="n_queries"), Packed("bits", "n_queries"),
)
register(  # active -> the caller (sealed to the key the caller made for this prediction): the margins
    "margins", Array("", "float", Ref(lambda p, c: (c["n_rows"],) + ((c["n_outputs"],) if c.get("n_outputs") else ()),
                                      "(n_rows,), or (n_rows, K) for K classes")),
)
