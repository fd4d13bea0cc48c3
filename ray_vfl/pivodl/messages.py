"""What each PIVODL message carries, checked by its receiver before use (:mod:`ray_vfl.runtime.validation`).

Payloads are dicts of numpy arrays (and lists of ciphertext arrays); the context names are the
receiver's own values, given where it opens the message (:mod:`ray_vfl.pivodl.client`,
:mod:`ray_vfl.pivodl.roles`, :mod:`ray_vfl.pivodl.prediction`). The public key reuses
SecureBoost's ``public_key`` kind (same payload, same checks).
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import ray

from ..crypto.privacy.secure_sum import PUBLIC_KEY_BYTES
from ..runtime.comm import Message
from ..runtime.validation import Array, Ciphers, Is, Packed, Ref, Rule, Size, length, not_in, register
from ..trees.encoding import public_key_problem

__all__ = ["fetch"]


def fetch(messages: Sequence[Any]) -> list[Message]:
    """The messages handed to a client as Ray references (each resolved in the client's own actor),
    without the ``None`` of senders that had nothing for it."""
    refs = [m for m in messages if m is not None]
    values = ray.get(refs) if refs and isinstance(refs[0], ray.ObjectRef) else refs
    return [m for m in values if m is not None]


def _packed_each(path: str, bits_of):
    """Item ``i`` of list ``path`` packs ``bits_of(p, c)[i]`` bits."""
    def problem(p, c):
        for i, (item, bits) in enumerate(zip(p[path], bits_of(p, c))):
            want = -(-int(bits) // 8)
            if not isinstance(item, np.ndarray) or item.dtype != np.uint8 or item.shape != (want,):
                return f"{path}[{i}] is not {want} packed bytes ({bits} bits)"
        return None
    return Rule(problem)


def _ciphers(keys_of, entries_of):
    """Every item of ``ciphers`` is a compressed array (plain arrays with the ``plain`` backend) under
    the key ``keys_of(payload, ctx)[i]``, holding ``entries_of(payload, ctx)[i]`` entries."""
    def problem(p, c):
        backend = c["backend"]
        for i, (ct, pk, entries) in enumerate(zip(p["ciphers"], keys_of(p, c), entries_of(p, c))):
            bad = backend.peer_problem(pk, ct, compressed=True if backend.is_encrypted else None)
            if bad:
                return f"ciphers[{i}] {bad}"
            if backend.entry_count(ct) != entries:
                return f"ciphers[{i}] holds {backend.entry_count(ct)} entries; expected {entries}"
        return None
    return Rule(problem)


def _open(path: str = "node"):
    return Rule(lambda p, c: None if not not_in(p[path], c["open_nodes"]).any()
                else f"{path} names a node that is not open at the receiver")


def _member_bits(p, c) -> str | None:
    """Per node, a packed ``(records, receiver's rows of the node)`` bit matrix."""
    for i, (node, bits) in enumerate(zip(p["node"].tolist(), p["bits"])):
        want = -(-int(c["own_rows"][node]) // 8)
        if not isinstance(bits, np.ndarray) or bits.dtype != np.uint8 or bits.ndim != 2 or bits.shape[1] != want:
            return f"bits[{i}] is not a (records, {want}) packed bit matrix of the receiver's {c['own_rows'][node]} rows"
    return None


def _records(p, c) -> list[int]:
    """The number of records of each node the sender forwards (the receiver counted them as a member)."""
    return [c["records_of"][n] for n in p["node"].tolist()]


def _groups(p, c) -> str | None:
    """Per node, each record's partition group (-1: a candidate), groups numbered 0 .. g - 1."""
    for i, (group, n) in enumerate(zip(p["group"], _records(p, c))):
        if not isinstance(group, np.ndarray) or group.dtype.kind not in "iu" or group.shape != (n,):
            return f"group[{i}] is not {n} integers"
        used = np.unique(group[group >= 0])
        if group.size and (group.min() < -1 or not np.array_equal(used, np.arange(len(used)))):
            return f"group[{i}] numbers its groups other than 0 .. g - 1 (or below -1)"
    return None


def _cuts(p, c) -> str | None:
    """Per node a ``(cuts, records + 2)`` int array: codes 0/1/2 of one partition feature's category records
    (not every one of the feature's categories left), how many of the 2s go left (0 without 2s, else 1 to
    their count less one), missing left 0/1; and at least one record or cut per node."""
    for i, (node, cuts, records) in enumerate(zip(p["node"].tolist(), p["cuts"], p["records"])):
        n = c["records"][node]
        if not isinstance(cuts, np.ndarray) or cuts.dtype.kind not in "iu" or cuts.ndim != 2 or cuts.shape[1] != n + 2:
            return f"cuts[{i}] is not a (cuts, {n + 2}) integer array"
        if not len(cuts) and not len(records):
            return f"node {node} names neither a record nor a cut"
        feature = c["category_feature"][node]
        for row in cuts:
            codes, take, left = row[:n], int(row[n]), int(row[n + 1])
            chosen = np.flatnonzero(codes)
            if ((codes < 0) | (codes > 2)).any() or not chosen.size or left not in (0, 1):
                return f"cuts[{i}] holds codes outside 0, 1, 2, no record, or a missing side other than 0/1"
            if feature[chosen[0]] < 0 or (feature[chosen] != feature[chosen[0]]).any():
                return f"cuts[{i}] names records that are not one partition feature's category records"
            run = int((codes == 2).sum())
            if not (take == 0 if run == 0 else 1 <= take < run):
                return f"cuts[{i}] takes {take} of a run of {run} records"
            if int((codes == 1).sum()) + take >= int((feature == feature[chosen[0]]).sum()):
                return f"cuts[{i}] sends every category of its feature left"
    return None


def _mask_key(p, c) -> str | None:
    return None if isinstance(p, bytes) and len(p) == PUBLIC_KEY_BYTES else f"is not a {PUBLIC_KEY_BYTES}-byte key"


register(  # every client -> every other, once: its backend, options and public key
    "pivodl_public_key", Is("", tuple), Size("", 2), Rule(public_key_problem),
)
register("pivodl_mask_key", Rule(_mask_key))  # every client -> every other, once
register("pivodl_labelled_rows", Packed("", "n_rows"))  # every client -> every other, once (step 1)
register("pivodl_total_share", Ciphers("", entries=1))  # every client -> aggregation client (step 2)
register("pivodl_total_sum", Ciphers("", entries=1))  # aggregation client -> encryption client
register("pivodl_totals", Array("", "float", (2,), finite=True))  # encryption client -> every client
register(  # source -> each other client, per level (step 3): per node its split client, the receiver's rows' memberships
    "pivodl_candidate_request",
    Is("", dict),
    Array("node", "int", (None,), unique=True), _open(),
    Array("split", "int", (length("node"),), low=0, high="n_clients"),
    Rule(lambda p, c: "split names the source itself" if (p["split"] == c["sender_index"]).any() else None),
    Is("bits", list), Size("bits", length("node")), Rule(_member_bits),
)
register(  # every client -> source, per level (step 4): in the source's record order, node total last
    "pivodl_candidate_sums",
    Is("", dict),
    Array("node", "int", (None,), equals=Ref(lambda p, c: c["nodes"], "the source's open nodes")),
    Is("ciphers", list), Size("ciphers", length("node")),
    _ciphers(lambda p, c: c["public_keys"], lambda p, c: [n + 1 for n in c["records"]]),
    Is("refused", list), Size("refused", length("node")), _packed_each("refused", lambda p, c: c["records"]),
)
register(  # source -> split client, per level: by record number only
    "pivodl_forwarded_sums",
    Is("", dict),
    Array("node", "int", (None,), unique=True), _open(),
    Rule(lambda p, c: None if all(n in c["records_of"] for n in p["node"].tolist())
         else "node names a node the sender offered no records of"),
    Is("ciphers", list), Size("ciphers", length("node")),
    _ciphers(lambda p, c: [c["public_key"]] * len(p["ciphers"]), lambda p, c: [n + 1 for n in _records(p, c)]),
    Is("dropped", list), Size("dropped", length("node")), _packed_each("dropped", _records),
    Is("group", list), Size("group", length("node")), Rule(_groups),
)
register(  # split client -> every client, per level (step 5)
    "pivodl_best_gains",
    Is("", dict),
    Array("source", "int", (None,), low=0, high="n_clients"),
    Array("node", "int", (length("source"),)), _open(),
    Array("gain", "float", (length("source"),)),
    Rule(lambda p, c: "gain holds NaN or +inf" if (np.isnan(p["gain"]) | (p["gain"] == np.inf)).any() else None),
)
register(  # winning split client -> source: the tied records, and the tied partition cuts (codes per record)
    "pivodl_split_won",
    Is("", dict),
    Array("node", "int", (None,), unique=True, among=Ref(lambda p, c: c["nodes"], "the source's open nodes")),
    Is("records", list), Size("records", length("node")),
    Rule(lambda p, c: next((f"records[{i}] is not record numbers below {c['records'][n]}"
                            for i, (n, r) in enumerate(zip(p["node"].tolist(), p["records"]))
                            if not isinstance(r, np.ndarray) or r.ndim != 1 or r.dtype.kind not in "iu"
                            or (r.size and (r.min() < 0 or r.max() >= c["records"][n]))), None)),
    Is("cuts", list), Size("cuts", length("node")), Rule(_cuts),
)
register(  # source -> winning split client: the record (or, past the records, the cut) chosen among the tied ones
    "pivodl_chosen_record",
    Array("", "int", (None, 2), low=0),
    Rule(lambda p, c: None if not not_in(p[:, 0], c["open_nodes"]).any() else "names a node that is not open"),
    Rule(lambda p, c: next((f"row {i} chooses {r} at node {n}, not one of the records and cuts this client told"
                            for i, (n, r) in enumerate(p.tolist()) if r >= c["choices"].get(n, 0)), None)),
)
register(  # source -> every client: where the rows of the nodes it split go
    "pivodl_partition",
    Is("", dict),
    Array("node", "int", (None,), unique=True, among=Ref(lambda p, c: list(c["node_rows"]), "the open nodes")),
    Array("record", "int", (length("node"),), low=0),
    Packed("bits", Ref(lambda p, c: sum(c["node_rows"][n] for n in p["node"].tolist()), "the rows of those nodes")),
)
register(  # leaf holder -> every client: released (exact, or clipped and noised) leaf weights
    "pivodl_leaf_weights",
    Is("", dict), Array("node", "int", (None,), low=0, unique=True), Array("weight", "float", (length("node"),), finite=True),
)
register(  # source -> every client, per prediction round: left/right of the rows waiting at its nodes
    "pivodl_route_decisions",
    Is("", dict),
    Array("tree", "int", (None,), low=0, high="n_trees"), Array("node", "int", (length("tree"),), low=0),
    Packed("bits", Ref(lambda p, c: c["waiting"](p["tree"], p["node"]), "the rows waiting at those nodes")),
)
register(  # every client -> output client: its masked share (uint64 in the ring Z_2^64) of the scores,
    # (rows,) or (rows, K) with K classes
    "pivodl_prediction_share",
    Array("", "int", "shape"),
    Rule(lambda p, c: None if p.dtype == np.uint64 else f"has dtype {p.dtype}; expected uint64"),
)
register(  # output client -> the caller (sealed to the key the caller made for this prediction): the margins
    "pivodl_margins",
    Array("", "float", "shape"),  # (rows,), or (rows, K) with K classes
)
register(  # every client -> output client: its masked share of the eval loss sums (3 values)
    "pivodl_metric_share",
    Array("", "int", (3,)),
    Rule(lambda p, c: None if p.dtype == np.uint64 else f"has dtype {p.dtype}; expected uint64"),
)
