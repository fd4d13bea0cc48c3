"""SSXGB's split finding on the lattice engine: ``gain_fractions`` then the tournament
``best_candidates`` (ray_vfl/ssxgb/splits.py, unchanged) for ``--nodes`` nodes of ``--k`` candidates,
at SSXGB's defaults (frac 24, value_bits 256, kappa 80; BFV N=8192, 12 plaintext primes). Reports
wall time per candidate, rounds with S, and the ciphertexts C masked and sent (``sent``) and S
decrypted (``opened``), which do not depend on the machine's load.

    python benchmarks/lattice_split.py --nodes 2 --k 16
    PYTHONPATH=/path/to/other/checkout python benchmarks/lattice_split.py ...   # another version, same setting
"""

from __future__ import annotations

import argparse
import random
import time

import ray_vfl.crypto.lattice.two_server as lat
from ray_vfl.crypto.lattice.keys import LatticeKeys, LatticePublic
from ray_vfl.crypto.two_server.server_s import LocalLink, TwoServerConfig
from ray_vfl.ssxgb.approx import FixedPointPlan
from ray_vfl.ssxgb.config import SSXGBConfig
from ray_vfl.ssxgb.splits import best_candidates, gain_fractions


class CountingLink(LocalLink):
    def __init__(self, server):
        super().__init__(server)
        self.rounds = 0

    def ask(self, step, *payload):
        self.rounds += 1
        return super().ask(step, *payload)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nodes", type=int, default=2)
    p.add_argument("--k", type=int, default=16)
    args = p.parse_args(argv)
    cfg = SSXGBConfig()
    plan = FixedPointPlan.of(cfg, 2000)
    tcfg = TwoServerConfig(cfg.value_bits, cfg.kappa)
    keys = LatticeKeys(lat.ring_for(tcfg))
    counts = {"sent": 0, "opened": 0}
    flood, decrypt = lat.flood, keys.decrypt

    def counted_flood(*a, **kw):
        counts["sent"] += 1
        return flood(*a, **kw)

    def counted_decrypt(*a, **kw):
        counts["opened"] += 1
        return decrypt(*a, **kw)
    lat.flood, keys.decrypt = counted_flood, counted_decrypt
    link = CountingLink(lat.LatticeServerS(keys, tcfg))
    c = lat.LatticeServerC(LatticePublic(keys.ring, keys.exported), link, tcfg)
    rnd, f, m = random.Random(0), cfg.frac_bits, args.nodes * args.k
    hl = [rnd.randrange(1, 200 << f) for _ in range(m)]
    gl = [rnd.randrange(-(200 << f), 200 << f) for _ in range(m)]
    enc = [c.encrypt_ints(c.pub, v, f) for v in (gl, hl, [400 << f] * m, [500 << f] * m)]
    t0 = time.perf_counter()
    num, den = gain_fractions(c, *enc, plan.lam, plan.sum_bits)
    t1 = time.perf_counter()
    gain_rounds, gain_counts = link.rounds, dict(counts)
    best_candidates(c, num, den, args.nodes, args.k, plan.sum_bits, [j % 2 for j in range(args.k)])
    t2 = time.perf_counter()
    print(f"{args.nodes} nodes x {args.k} candidates, {keys.ring.n_primes} primes")
    print("| step | ms per candidate | rounds | ciphertexts sent by C | ciphertexts opened by S |")
    print("|---|---|---|---|---|")
    print(f"| gain_fractions | {(t1 - t0) / m * 1e3:.1f} | {gain_rounds} | {gain_counts['sent']} | {gain_counts['opened']} |")
    print(f"| best_candidates | {(t2 - t1) / m * 1e3:.1f} | {link.rounds - gain_rounds} | "
          f"{counts['sent'] - gain_counts['sent']} | {counts['opened'] - gain_counts['opened']} |")


if __name__ == "__main__":
    main()
