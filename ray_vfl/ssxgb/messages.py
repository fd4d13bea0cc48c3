"""What each SSXGB message carries, checked by its receiver before use (:mod:`ray_vfl.runtime.validation`).

Ciphertext fields are BCP :class:`~ray_vfl.crypto.he.base.CipherArray` values; the receiver names the key
they must be under (``ctx["key"]``: the joint key, or its own user key) and checks layout, key and
scale (:func:`ray_vfl.crypto.two_server.bcp_arrays.check`): a ciphertext under another (joint) key is refused
with a :class:`~ray_vfl.errors.ProtocolError` naming the sender.
"""

from __future__ import annotations

from ..crypto.two_server.bcp_arrays import check
from ..errors import CryptoError
from ..runtime.validation import (
    Array,
    Is,
    Packed,
    Ref,
    Rule,
    Scalar,
    length,
    not_in,
    register,
)

__all__ = ["S_STEPS"]

# The ServerS steps C may ask for (ray_vfl.crypto.two_server.server_s), with what their arguments are.
# The lattice engine's S (ray_vfl.crypto.lattice.server_s) answers the last six as well.
S_STEPS = ("register_step", "switch_key_step", "mult_step", "lgt_step", "trunc_step",
           "regroup_step", "user_keys_step", "tile_step", "tile_sum_step", "broadcast_step", "switch_step")


def _bcp(path: str, n=None, key: str = "key", frac: str | None = "frac_bits"):
    """Field ``path`` is a BCP ciphertext array under ``ctx[key]`` (``n`` values, scale ``ctx[frac]``)."""
    def problem(p, c):
        value = p[path] if path else p
        try:
            scale = check(c[key], value)
        except CryptoError as exc:
            return f"{path or 'payload'}: {exc}"
        want = n.fn(p, c) if isinstance(n, Ref) else (c[n] if isinstance(n, str) else n)
        if want is not None and len(value) != want:
            return f"{path or 'payload'} holds {len(value)} ciphertexts; expected {want}"
        if frac is not None and scale != c[frac]:
            return f"{path or 'payload'} carries scale 2^{scale}; expected 2^{c[frac]}"
        return None
    return Rule(problem)


def _int(path: str, lo: int = 0):
    return Rule(lambda p, c: None if isinstance(p[path], int) and not isinstance(p[path], bool) and p[path] >= lo
                else f"{path} is not an integer >= {lo}")


def _open(path: str = "node"):
    return Rule(lambda p, c: None if not not_in(p[path], c["open_nodes"]).any()
                else f"{path} names a node that is not open at the receiver")


register(  # S -> C, once: the public parameters (N, g) of BCP Setup
    "ssxgb_params", Is("", dict), _int("n", 3), _int("g", 2),
)
register(  # C -> every participant, once: the same public parameters, forwarded
    "ssxgb_public_params", Is("", dict), _int("n", 3), _int("g", 2),
)
register(  # participant -> C, once: its user public key h_i
    "ssxgb_user_key", Rule(lambda p, c: None if isinstance(p, int) and 1 < p < c["n_square"] else "is not a key h below N^2"),
)
register(  # C -> every participant, once: the joint key prod h_i
    "ssxgb_joint_key", Rule(lambda p, c: None if isinstance(p, int) and 1 < p < c["n_square"] else "is not a key h below N^2"),
)
register(  # LBP -> C, once: Enc_pk_LBP(first margins), Enc_pk_LBP(labels), scale 2^F
    "ssxgb_lbp_init", Is("", dict), _bcp("margin"), _bcp("label", length("margin")),
)
register(  # C -> every participant, per tree: the sampled rows, Enc(g), Enc(h) under the joint key
    "ssxgb_gradients", Is("", dict),
    Array("rows", "int", (None,), low=0, high="n_rows", increasing=True),
    _bcp("g", length("rows")), _bcp("h", length("rows")),
)
register(  # participant -> C, per level: Enc(left sums) of its k candidates at every open node
    "ssxgb_left_sums", Is("", dict),
    Array("node", "int", (None,), equals=Ref(lambda p, c: c["nodes"], "the open nodes")),
    Scalar("k", low=0, high="max_candidates"),
    _bcp("gl", Ref(lambda p, c: len(p["node"]) * p["k"], "len(node) * k")),
    _bcp("hl", Ref(lambda p, c: len(p["node"]) * p["k"], "len(node) * k")),
)
register(  # C -> every participant, per level: Enc_pk_i(local index of the winner, or uniform mod N if not i's)
    "ssxgb_win", Is("", dict),
    Array("node", "int", (None,), unique=True), _open(),
    _bcp("idx", length("node"), frac=None),
    Scalar("count", low=0),
)
register(  # owner -> C, per level: the left branch of each node it won (all training rows of the node)
    "ssxgb_left_branch", Is("", dict),
    Array("node", "int", (None,), unique=True), _open(),
    Array("record", "int", (length("node"),), low=0),
    Packed("bits", Ref(lambda p, c: sum(c["node_rows"][n] for n in p["node"].tolist()), "the rows of those nodes")),
)
register(  # C -> every participant, per level: children ids and where each node's rows go
    "ssxgb_partition", Is("", dict),
    Array("node", "int", (None,), unique=True), _open(),
    Array("left", "int", (length("node"),), low=1), Array("right", "int", (length("node"),), low=1),
    Packed("bits", Ref(lambda p, c: sum(c["node_rows"][n] for n in p["node"].tolist()), "the rows of those nodes")),
)
register(  # owner -> C, per prediction: left/right of every prediction row at each split node it owns
    "ssxgb_route", Is("", dict),
    Array("tree", "int", (None,), low=0, high="n_trees"), Array("node", "int", (length("tree"),), low=0),
    Packed("bits", Ref(lambda p, c: len(p["tree"]) * c["n_rows"], "len(tree) * rows")),
)
register(  # C -> LBP, per prediction: Enc_pk_LBP(sum of the federated trees' leaf weights) per row
    "ssxgb_prediction", _bcp("", "n_rows"),
)
register(  # LBP -> the caller (sealed to the key the caller made for this prediction): the margins
    "ssxgb_margins", Array("", "float", ("n_rows",)),
)
register(  # C -> S, per two-server round: a ServerS step and its (masked, encrypted) arguments
    "ssxgb_s_request", Is("", dict),
    Rule(lambda p, c: None if p.get("step") in S_STEPS else f"step {p.get('step')!r} is not one of {S_STEPS}"),
    Is("args", tuple),
)
register(  # S -> C, per two-server round: fresh encryptions by S (or key ids for register_step)
    "ssxgb_s_reply", Rule(lambda p, c: None if isinstance(p, (list, tuple)) or hasattr(p, "key_id")
                          else f"is a {type(p).__name__}; expected ciphertexts or key ids"),
)
