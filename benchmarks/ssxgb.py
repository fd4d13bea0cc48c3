"""SSXGB: where a federated tree's time goes, and the bytes per split, at small settings.

Usage::

    python benchmarks/ssxgb.py                                  # 1024-bit keys, 200 rows, 4 participants, depth 3
    python benchmarks/ssxgb.py --bits 2048 --participants 8 --rows 400

Per federated tree: wall time at the driver, CPU seconds of each role's actor process (the
participants summed, server C, server S; ``time.process_time`` deltas), and the rest (waiting on
messages, Ray and pickling). Bytes per split on the two channels, next to the paper's formulas as
we read them: C <-> participants ``2 zeta d (n / q)`` and C <-> S ``12 zeta + 3 zeta (n / q) D``, with
``zeta`` the bytes of one ciphertext, ``d`` the features, ``n / q`` the split candidates per feature
(bins) and ``D`` the depth. That reading is ours; the measured numbers stand on their own.
BCP's own per-operation table (Setup .. LGT next to Paillier) is ``benchmarks/bcp.py``.

The crypto floor: every role counts the BCP operations it asked for (encryptions with short and with
hiding exponents, user decryptions, mDec in full and modulo ``p``, Exp by exponent bits, additions,
inversions; :func:`ray_vfl.crypto.two_server.bcp_arrays.op_counts`); this script times each operation on one core
in the same run and divides the summed cost by the machine's cores: no schedule could train faster
with these operations on this machine. The table gives the training's wall time over that floor.
``--workers-per-server 1`` runs both servers without task pools (each server on one core).
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import time
import warnings

import numpy as np
import pandas as pd
import ray

from ray_vfl import Runtime, vertical_split
from ray_vfl.ssxgb import SSXGBConfig, train
from ray_vfl.crypto.two_server.bcp import keygen, setup
from ray_vfl.crypto.two_server.bcp_arrays import BCP
from ray_vfl.crypto.he.ciphertexts import CipherArray
from ray_vfl.crypto.he.gmp import set_threads
from ray_vfl.ssxgb.protocol import SERVER_C, SERVER_S
from ray_vfl.trees.callbacks import TrainingCallback

_KINDS = ("encrypt", "encrypt_hiding", "decrypt", "mdec", "mdec_small", "mul_const_bits", "add", "neg")


class Snapshots(TrainingCallback):
    """After every tree: the driver's clock and every role's operation counts (the roles are idle then)."""

    def __init__(self, runtime, roles):
        self.runtime, self.roles, self.at = runtime, roles, []

    def after_iteration(self, iteration, logs):
        ops = ray.get([self.runtime.actor(r).crypto_ops.remote() for r in self.roles], timeout=120)
        self.at.append((time.perf_counter(), dict(zip(self.roles, ops))))
        return False


def unit_costs(bits: int, n: int = 64) -> dict[str, float]:
    """Seconds per operation on one core (``mul_const_bits``: per exponent bit), timed here on fresh
    ciphertexts (parsed from bytes, as a received array is)."""
    old = set_threads(1)
    try:
        params, mk = setup(bits, allow_weak=bits < 2048)
        pk, sk = keygen(params)
        bcp = BCP()
        ms = [secrets.randbits(200) for _ in range(n)]
        bcp._encrypt_residues(pk, ms[:4], 0, hiding=True)  # build the fixed-base tables first
        ks = [secrets.randbits(336) for _ in range(n)]
        jobs = {"encrypt": lambda c: bcp._encrypt_residues(pk, ms, 0),
                "encrypt_hiding": lambda c: bcp._encrypt_residues(pk, ms, 0, hiding=True),
                "decrypt": lambda c: bcp.decrypt_residues(sk, c),
                "mdec": lambda c: bcp.mdecrypt_residues(mk, pk, c),
                "mdec_small": lambda c: bcp.mdecrypt_small(mk, pk, c, 210),
                "mul_const_bits": lambda c: bcp.mul_const(pk, c, ks),
                "add": lambda c: bcp.add(pk, c, c),
                "neg": lambda c: bcp.neg(pk, c)}
        per = {"mul_const_bits": sum(k.bit_length() for k in ks)}
        out = {}
        for kind, job in jobs.items():
            best = float("inf")
            for _ in range(3):
                c = bcp._encrypt_residues(pk, ms, 0)
                c = CipherArray(c.data, c.key_id, c.tag)  # without the cached integers
                t0 = time.perf_counter()
                job(c)
                best = min(best, time.perf_counter() - t0)
            out[kind] = best / per.get(kind, n)
        return out
    finally:
        set_threads(old)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--bits", type=int, default=1024)
    p.add_argument("--rows", type=int, default=200)
    p.add_argument("--participants", type=int, default=4)
    p.add_argument("--depth", type=int, default=3)
    p.add_argument("--max-bin", type=int, default=16)
    p.add_argument("--trees", type=int, default=3, help="trees in all (the LBP's first included)")
    p.add_argument("--workers-per-server", type=int, default=None, help="task pool size of C and S (default: CPUs)")
    args = p.parse_args(argv)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(args.rows, args.participants))
    frame = pd.DataFrame(x, columns=[f"f{i}" for i in range(args.participants)])
    frame["y"] = (x.sum(axis=1) + rng.normal(size=args.rows) > 0).astype(float)
    parts = [f"party{i}" for i in range(args.participants)]
    data = vertical_split(frame, {p: [f"f{i}"] for i, p in enumerate(parts)}, label="y")
    config = SSXGBConfig(n_trees=args.trees, max_depth=args.depth, max_bin=args.max_bin, key_bits=args.bits,
                         allow_weak_keys=args.bits < 2048, feature_subsample=1.0,
                          workers_per_server=args.workers_per_server)
    with Runtime() as runtime, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        roles = parts + [SERVER_C, SERVER_S]
        snaps = Snapshots(runtime, roles)
        t0 = time.perf_counter()
        model = train(runtime, data, config, [snaps])
        wall = time.perf_counter() - t0
        cpu = dict(zip(roles, ray.get([runtime.actor(r).cpu_seconds.remote() for r in roles], timeout=120)))
        ops = dict(zip(roles, ray.get([runtime.actor(r).crypto_ops.remote() for r in roles], timeout=120)))
        stats = model.comm_stats
    units = unit_costs(args.bits)
    cores = os.cpu_count() or 1
    work = {r: sum(ops[r].get(k, 0) * units[k] for k in _KINDS) for r in roles}
    floor = sum(work.values()) / cores
    (t_first, ops_first), (t_last, ops_last) = snaps.at[0], snaps.at[-1]  # after the LBP's tree, after the last
    fed_wall = (t_last - t_first) / max(1, len(snaps.at) - 1)
    fed_work = {r: sum((ops_last[r].get(k, 0) - ops_first[r].get(k, 0)) * units[k] for k in _KINDS) for r in roles}
    fed_floor = sum(fed_work.values()) / cores / max(1, len(snaps.at) - 1)
    federated = args.trees - 1
    splits = federated * (2**args.depth - 1)
    width = 2 * ((2 * args.bits + 7) // 8)  # one BCP ciphertext (A, B), bytes
    by = stats.by_channel()
    c_p = sum(v for k, v in by.items() if SERVER_S not in k) * 1e6
    c_s = sum(v for k, v in by.items() if SERVER_S in k) * 1e6
    candidates = args.participants * (args.max_bin - 1)
    out = {
        "settings": vars(args),
        "wall_seconds_all": round(wall, 2),
        "cpu_seconds": {"participants": round(sum(cpu[p] for p in parts), 2), "server_c": round(cpu[SERVER_C], 2),
                        "server_s": round(cpu[SERVER_S], 2)},
        "crypto_seconds_one_core": {"participants": round(sum(work[p] for p in parts), 2),
                                    "server_c": round(work[SERVER_C], 2), "server_s": round(work[SERVER_S], 2)},
        "crypto_floor_seconds": round(floor, 2), "cores": cores, "wall_over_floor": round(wall / floor, 2),
        "per_federated_tree": {"wall_seconds": round(fed_wall, 2), "crypto_floor_seconds": round(fed_floor, 2),
                               "wall_over_floor": round(fed_wall / fed_floor, 2),
                               "crypto_seconds_one_core": {r: round(v / max(1, len(snaps.at) - 1), 2)
                                                           for r, v in fed_work.items() if v >= 0.005}},
        "operations": {r: ops[r] for r in (SERVER_C, SERVER_S)},
        "unit_costs_ms": {k: round(v * 1e3, 5) for k, v in units.items()},
        "two_server_round_trips": model.round_trips,
        "bytes_per_split": {"c_participants": round(c_p / splits), "c_s": round(c_s / splits)},
        "paper_formula_per_split_our_reading": {"c_participants": 2 * width * candidates,
                                                "c_s": 12 * width + 3 * width * candidates * args.depth},
    }
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
