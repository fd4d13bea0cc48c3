"""SSXGB's split search, counted per candidate and node on both engines: the gains
(:func:`~ray_vfl.ssxgb.splits.gain_fractions`) and the tournament
(:func:`~ray_vfl.ssxgb.splits.best_candidates`) run in process with server S behind a counting link.

Usage::

    python benchmarks/ssxgb_split_ops.py                          # 4 nodes, 2 participants of 15 candidates
    python benchmarks/ssxgb_split_ops.py --nodes 7 --counts 15 15 15 15 --engines bcp --bits 2048

Per engine and step: Mult products S computed, masked operands S opened for them, LGT values,
rounds, all divided by ``nodes x candidates``; for BCP also the operation counters of
:func:`~ray_vfl.crypto.two_server.bcp_arrays.op_counts` (C and S share this process) and the wall time.
The left sums are drawn at random, with empty bins (a candidate whose left sums equal its
neighbour's) at ``--empty``; each node's winner is checked against the exact fractions of
:mod:`ray_vfl.ssxgb.reference` (ties to the lower index).
"""

from __future__ import annotations

import argparse
import json
import random
import time
import warnings
from fractions import Fraction

from ray_vfl.crypto.two_server.bcp import setup
from ray_vfl.crypto.two_server.bcp_arrays import op_counts
from ray_vfl.crypto.two_server.server_c import ServerC
from ray_vfl.crypto.two_server.server_s import LocalLink, ServerS, TwoServerConfig
from ray_vfl.ssxgb.approx import FixedPointPlan
from ray_vfl.ssxgb.config import SSXGBConfig
from ray_vfl.ssxgb.splits import best_candidates, gain_fractions


class CountingLink(LocalLink):
    """A local link that counts, per step, the values S opens and the products it returns."""

    def __init__(self, server):
        super().__init__(server)
        self.counts = {"rounds": 0, "mult_products": 0, "mult_opened": 0, "lgt": 0}

    def ask(self, step, *payload):
        self.counts["rounds"] += 1
        reply = super().ask(step, *payload)
        name = step.__name__
        if name == "mult_step" and isinstance(payload[1], list) and payload[1] and isinstance(payload[1][0], int):
            lengths, index = payload[1], payload[2]  # lattice: (operands, lengths, index, back)
            self.counts["mult_opened"] += sum(lengths)
            self.counts["mult_products"] += sum(lengths[i] for i, _ in index)
        elif name == "mult_step":  # BCP: (masked, pairs, ...), one reply array per product
            self.counts["mult_opened"] += sum(len(m) for m in payload[0])
            self.counts["mult_products"] += sum(len(r) for r in reply)
        elif name == "lgt_step":
            self.counts["lgt"] += payload[1] if len(payload) > 1 else len(payload[0])
        return reply


def draw(plan: FixedPointPlan, nodes: int, k: int, empty: float, rnd: random.Random):
    """Per node: ``G``, ``H`` and ``k`` left sums growing bin by bin (empty bins repeat the last)."""
    f = plan.frac_bits
    gl, hl, gn, hn = [], [], [], []
    for _ in range(nodes):
        rows = 40
        g = [rnd.randrange(-(1 << f), 1 << f) for _ in range(rows)]
        h = [rnd.randrange(1, 1 << (f - 2)) for _ in range(rows)]
        cut, a, b = 0, 0, 0
        for _ in range(k):
            if rnd.random() >= empty and cut < rows:
                step = rnd.randrange(1, 4)
                a += sum(g[cut:cut + step])
                b += sum(h[cut:cut + step])
                cut += step
            gl.append(a)
            hl.append(b)
        gn += [sum(g)] * k
        hn += [sum(h)] * k
    return gl, hl, gn, hn


def expected(plan, gl, hl, gn, hn, nodes, k):
    out = []
    for n in range(nodes):
        best, best_gain = 0, None
        for j in range(k):
            i = n * k + j
            gr, hr = gn[i] - gl[i], hn[i] - hl[i]
            gain = Fraction(gl[i] ** 2, hl[i] + plan.lam) + Fraction(gr ** 2, hr + plan.lam)
            if best_gain is None or gain > best_gain:
                best, best_gain = j, gain
        out.append(best)
    return out


def servers(engine: str, bits: int, cfg: SSXGBConfig):
    tcfg = TwoServerConfig(cfg.value_bits, cfg.kappa)
    if engine == "bcp":
        params, mk = setup(bits, allow_weak=bits < 2048)
        link = CountingLink(ServerS(mk, tcfg, cfg.frac_bits))
        c = ServerC(params, link, tcfg, cfg.frac_bits)
        from ray_vfl.crypto.two_server.bcp import keygen
        jpk = c.register([keygen(params)[0]])

        def reveal(x):
            return c.bcp.mdecrypt_ints(mk, jpk, x)
        return c, jpk, link, reveal
    from ray_vfl.crypto.lattice import two_server as lat
    from ray_vfl.crypto.lattice.keys import LatticeKeys, LatticePublic
    keys = LatticeKeys(lat.ring_for(tcfg))
    link = CountingLink(lat.LatticeServerS(keys, tcfg))
    c = lat.LatticeServerC(LatticePublic(keys.ring, keys.exported), link, tcfg)

    def reveal_lattice(x):
        return lat.decrypt_ints(keys, x)
    return c, c.pub, link, reveal_lattice


def run(engine: str, args) -> dict:
    cfg = SSXGBConfig(frac_bits=args.frac_bits, kappa=args.kappa, value_bits=args.value_bits,
                      key_bits=max(args.bits, 1024), allow_weak_keys=True)
    plan = FixedPointPlan.of(cfg, args.rows)
    c, pk, link, reveal = servers(engine, args.bits, cfg)
    k, nodes, f = sum(args.counts), args.nodes, cfg.frac_bits
    gl, hl, gn, hn = draw(plan, nodes, k, args.empty, random.Random(args.seed))
    enc = [c.encrypt_ints(pk, v, f) for v in (gl, hl, gn, hn)]
    owner = [j for j, m in enumerate(args.counts) for _ in range(m)]
    m = nodes * k
    out = {"engine": engine, "nodes": nodes, "candidates": k}
    steps = {}
    before, ops0, t0 = dict(link.counts), op_counts(), time.perf_counter()
    num, den = gain_fractions(c, *enc, plan.lam, plan.sum_bits)
    mid, ops1, t1 = dict(link.counts), op_counts(), time.perf_counter()
    idx, who = best_candidates(c, num, den, nodes, k, plan.sum_bits, owner)
    after, ops2, t2 = dict(link.counts), op_counts(), time.perf_counter()
    for name, (a, b, oa, ob, ta, tb) in {"gains": (before, mid, ops0, ops1, t0, t1),
                                         "tournament": (mid, after, ops1, ops2, t1, t2)}.items():
        row = {key: round((b[key] - a[key]) / m, 3) for key in b}
        row["rounds"] = b["rounds"] - a["rounds"]
        if engine == "bcp":
            row.update({key: round((ob.get(key, 0) - oa.get(key, 0)) / m, 2)
                        for key in ("encrypt", "encrypt_hiding", "mdec_small", "mul_const_bits")})
        row["ms"] = round((tb - ta) / m * 1e3, 2)
        steps[name] = row
    out["per_candidate_and_node"] = steps
    out["total_products"] = round(steps["gains"]["mult_products"] + steps["tournament"]["mult_products"], 3)
    got = reveal(idx)
    want = expected(plan, gl, hl, gn, hn, nodes, k)
    owners = reveal(who)
    out["winners_equal_reference"] = [int(v) for v in got] == want and [int(v) for v in owners] == [owner[j] for j in want]
    return out


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nodes", type=int, default=4)
    p.add_argument("--counts", type=int, nargs="+", default=[15, 15], help="candidates per participant")
    p.add_argument("--rows", type=int, default=2000, help="rows of the fixed-point plan (sum bounds)")
    p.add_argument("--empty", type=float, default=0.3, help="share of empty bins")
    p.add_argument("--bits", type=int, default=1024)
    p.add_argument("--frac-bits", type=int, default=24)
    p.add_argument("--value-bits", type=int, default=256)
    p.add_argument("--kappa", type=int, default=80)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--engines", nargs="+", default=["bcp", "lattice"])
    args = p.parse_args(argv)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        print(json.dumps([run(e, args) for e in args.engines], indent=1))


if __name__ == "__main__":
    main()
