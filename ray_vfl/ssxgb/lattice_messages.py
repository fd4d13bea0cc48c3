"""What each SSXGB message of the lattice engine carries, checked by its receiver before use
(:mod:`ray_vfl.runtime.validation`; the rounds and what each receiver learns:
:mod:`ray_vfl.ssxgb.lattice_roles`).

Ciphertexts travel as SEAL's serialization: a *block* is a list of ``n_primes`` ``bytes`` (one BFV
ciphertext per plaintext prime, ``N`` slots), an array a list of blocks; the receiver checks the
counts here and SEAL checks each ciphertext against the parameters when it loads it.
"""

from __future__ import annotations

from ..crypto.lattice.slot_sums import row_block
from ..runtime.validation import Array, Is, Rule, Scalar, register

__all__ = ["blocks_problem"]


def blocks_problem(value, n_primes: int, count: int | None, name: str) -> str | None:
    """What is wrong with ``value`` as ``count`` blocks of ``n_primes`` serialized ciphertexts, or None."""
    if not isinstance(value, (list, tuple)) or (count is not None and len(value) != count):
        return f"{name} must be a list of {count} blocks"
    for row in value:
        if not isinstance(row, (list, tuple)) or len(row) != n_primes or not all(isinstance(b, bytes) for b in row):
            return f"{name}: every block must hold {n_primes} serialized ciphertexts (bytes)"
    return None


def _blocks(path: str, count=None):
    def problem(p, c):
        want = count(p, c) if callable(count) else count
        return blocks_problem(p[path] if path else p, c["n_primes"], want, path or "payload")
    return Rule(problem)


def _keys(path: str):
    return Rule(lambda p, c: None if isinstance(p[path] if path else p, (list, tuple)) and
                len(p[path] if path else p) == c["n_primes"] and all(isinstance(b, bytes) for b in (p[path] if path else p))
                else f"{path or 'payload'} must hold {c['n_primes']} serialized public keys")


def _per_block(n_of):
    return lambda p, c: -(-max(n_of(p, c), 1) // c["slots"])


register(  # S -> C, once: the ring (number of primes) and S's public keys, one per prime
    "ssxgb_lattice_params", Is("", dict), Scalar("n_primes", low=1, high=65), Is("public_keys", list),
    Rule(lambda p, c: None if len(p["public_keys"]) == p["n_primes"] else "public_keys must hold one key per prime"),
)
register(  # C -> every participant, once: the same, forwarded
    "ssxgb_lattice_public_params", Is("", dict), Scalar("n_primes", low=1, high=65), Is("public_keys", list),
    Rule(lambda p, c: None if len(p["public_keys"]) == p["n_primes"] else "public_keys must hold one key per prime"),
)
register(  # participant -> C, and C -> S (inside a request): its own public keys, one per prime
    "ssxgb_lattice_user_key", _keys(""),
)
register(  # LBP -> C, once: Enc_S(base + first-tree margins), Enc_S(labels), scale 2^F, dense
    "ssxgb_lattice_init", Is("", dict), Scalar("n_rows", low=1),
    _blocks("margin", _per_block(lambda p, c: p["n_rows"])), _blocks("label", _per_block(lambda p, c: p["n_rows"])),
)
register(  # C -> every participant, per tree: the sampled rows, Enc(g) and Enc(h) tiled (``ceil(m / B)`` blocks each)
    "ssxgb_lattice_gradients", Is("", dict),
    Array("rows", "int", (None,), low=0, high="n_rows", increasing=True),
    _blocks("g", lambda p, c: -(-len(p["rows"]) // row_block(max(len(p["rows"]), 1), c["slots"]))),
    _blocks("h", lambda p, c: -(-len(p["rows"]) // row_block(max(len(p["rows"]), 1), c["slots"]))),
)
register(  # participant -> C, per level: masked tile products of its row sets, minus their masks' sums
    "ssxgb_lattice_left_sums", Is("", dict),
    Array("node", "int", (None,)),
    Rule(lambda p, c: None if p["node"].tolist() == list(c["nodes"]) else "node must list the open nodes"),
    Scalar("k", low=0, high="max_candidates"),
    _blocks("g", lambda p, c: -(-len(p["node"]) * p["k"] // c["tiles"])),
    _blocks("h", lambda p, c: -(-len(p["node"]) * p["k"] // c["tiles"])),
    _blocks("g_mask", _per_block(lambda p, c: len(p["node"]) * p["k"])),
    _blocks("h_mask", _per_block(lambda p, c: len(p["node"]) * p["k"])),
)
register(  # C -> every participant, per level: Enc_i(local index of the winner, or uniform mod T if not i's)
    "ssxgb_lattice_win", Is("", dict), Array("node", "int", (None,), unique=True),
    _blocks("idx", _per_block(lambda p, c: len(p["node"]))), Scalar("count", low=0),
)
register(  # C -> LBP, per prediction: Enc_LBP(sum of the federated trees' leaf weights) per row, dense
    "ssxgb_lattice_prediction", _blocks("", _per_block(lambda p, c: c["n_rows"])),
)
