"""SSXGB's two-server arithmetic on the BCP engine (2048-bit, per value) and on the lattice engine (BFV
slots, per array), alternating in one run: per-op cost (Mult, Trunc, LGT) and SSXGB's own array
algorithm ``clamped_gradients`` (ray_vfl/ssxgb/secure_math.py) run unchanged on both.

    python benchmarks/lattice_engines.py                      # 1,600 and 8,192 rows, BCP on 24 rows
    python benchmarks/lattice_engines.py --rows 1600 --bcp-rows 16 --repeats 1

Both engines use SSXGB's default configuration (frac_bits 24, value_bits 256, kappa 80) and the
in-process link (payloads pickled as between actors). BCP's cost is linear in the number of values
(each value its own exponentiations), so it is timed on ``--bcp-rows`` values and reported per value;
the lattice engine's cost is per block of 8,192 slots, so it is timed at the sizes asked for.
"""

from __future__ import annotations

import argparse
import random
import time

from ray_vfl.crypto.lattice.keys import LatticeKeys, LatticePublic
from ray_vfl.crypto.lattice.two_server import LatticeServerC, LatticeServerS, ring_for
from ray_vfl.crypto.two_server.bcp import keygen, setup
from ray_vfl.crypto.two_server.server_c import ServerC
from ray_vfl.crypto.two_server.server_s import LocalLink, ServerS, TwoServerConfig
from ray_vfl.ssxgb.approx import FixedPointPlan
from ray_vfl.ssxgb.config import SSXGBConfig
from ray_vfl.ssxgb.secure_math import clamped_gradients


def engines(cfg: SSXGBConfig, bits: int):
    tcfg = TwoServerConfig(cfg.value_bits, cfg.kappa)
    params, mk = setup(bits, allow_weak=bits < 2048)
    bcp = ServerC(params, LocalLink(ServerS(mk, tcfg, cfg.frac_bits)), tcfg, cfg.frac_bits)
    bcp_pk = bcp.register([keygen(params)[0]])
    ring = ring_for(tcfg)
    keys = LatticeKeys(ring)
    lat = LatticeServerC(LatticePublic(ring, keys.exported), LocalLink(LatticeServerS(keys, tcfg)), tcfg)
    return {"bcp": (bcp, bcp_pk), "seal": (lat, lat.pub)}, ring


def _time(fn, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def per_op(c, pk, n: int, f: int, repeats: int) -> dict[str, float]:
    rnd = random.Random(1)
    x = c.encrypt_ints(pk, [rnd.randrange(-(1 << 40), 1 << 40) for _ in range(n)], f)
    y = c.encrypt_ints(pk, [rnd.randrange(-(1 << 40), 1 << 40) for _ in range(n)], f)
    return {"Mult": _time(lambda: c.mult_many([(x, y)], [(41, 41)]), repeats) / n,
            "Trunc": _time(lambda: c.trunc(x, f), repeats) / n,
            "LGT": _time(lambda: c.lgt(x, y), repeats) / n}


def gradients(c, pk, plan: FixedPointPlan, rows: int, repeats: int) -> float:
    rnd, f = random.Random(2), plan.frac_bits
    x = c.encrypt_ints(pk, [rnd.randrange(-6 << f, 6 << f) for _ in range(rows)], f)
    y = c.encrypt_ints(pk, [rnd.choice([0, 1 << f]) for _ in range(rows)], f)
    return _time(lambda: clamped_gradients(c, plan, x, y), repeats) / rows


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, nargs="+", default=[1600, 8192])
    p.add_argument("--bcp-rows", type=int, default=24)
    p.add_argument("--bits", type=int, default=2048)
    p.add_argument("--repeats", type=int, default=2)
    args = p.parse_args(argv)
    cfg = SSXGBConfig()
    plan = FixedPointPlan.of(cfg, max(args.rows))
    eng, ring = engines(cfg, args.bits)
    print(f"BCP {args.bits}-bit; lattice: BFV N={ring.degree}, {ring.n_primes} plaintext primes "
          f"(T of {ring.modulus.bit_length()} bits), value_bits {cfg.value_bits}, kappa {cfg.kappa}")
    ops = {}
    for name in ("bcp", "seal") * args.repeats:  # alternating: a load change hits both
        c, pk = eng[name]
        sizes = [args.bcp_rows] if name == "bcp" else args.rows
        for n in sizes:
            got = per_op(c, pk, n, cfg.frac_bits, 1)
            got["clamped_gradients"] = gradients(c, pk, plan, n, 1)
            key = (name, n)
            ops[key] = {k: min(v, ops.get(key, {}).get(k, float("inf"))) for k, v in got.items()}
    base = ops[("bcp", args.bcp_rows)]
    print("| engine | values per array | Mult ms/value | Trunc ms/value | LGT ms/value | clamped_gradients ms/row | ratio to BCP (gradients) |")
    print("|---|---|---|---|---|---|---|")
    for (name, n), v in ops.items():
        ratio = base["clamped_gradients"] / v["clamped_gradients"]
        print(f"| {name} | {n:,} | {v['Mult'] * 1e3:.2f} | {v['Trunc'] * 1e3:.2f} | {v['LGT'] * 1e3:.2f} | "
              f"{v['clamped_gradients'] * 1e3:.2f} | {ratio:.1f}x |")


if __name__ == "__main__":
    main()
