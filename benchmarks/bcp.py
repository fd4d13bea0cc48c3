"""BCP and the two-server sub-protocols: cost per value, next to our Paillier and a textbook BCP, in one run.

Usage::

    python benchmarks/bcp.py                      # 1024 and 2048 bits
    python benchmarks/bcp.py --bits 1024 --n 10000 --loop 10000

All times are CPU seconds of this process (``time.process_time``; both servers run in it, one thread:
``set_threads(1)``), so a machine shared with other work slows them less than wall time.

Table 1 (per value, single-core costs): Setup and KeyGen
(one-off, per call), BCP Enc (short exponent), Enc with the ``|N| + 128``-bit exponent C uses for
what it sends S, Enc with the paper's full-length exponent, Dec (user key) / mDec (master key), KeyProd and TransDec (the two-server
key switch, C's and S's work together), Add, Mult and LGT (both servers' work, in-process link),
our Paillier (``get_backend("paillier")``) encryption and decryption, and a textbook BCP encryption:
``pow(g, r, N^2)``, ``pow(h, r, N^2) (1 + m N)`` with Python ints on fresh full-length ``r`` in
``[1, N^2 / 4]`` (square-and-multiply, no tables). ``ratio`` is textbook / ours.

Table 2: Mult and LGT on arrays of ``n`` values (one round trip per array) against a loop of one
round trip per value (the per-value path: ``ServerC.mult`` / ``lgt`` on one-element arrays through
the same in-process link), measured over ``--loop`` values and scaled to ``n``. In process, a round
trip costs only pickling, so the crypto (equal on both paths) dominates; the "RTT x ms" columns add a
network round trip of x milliseconds per message to both paths (``--rtt-ms``; a Ray actor call is
about 0.5 ms on one machine, RAY_NOTES; a WAN round trip tens of ms): computed, not measured.

Table 3 (``--ray``): the same comparison measured over Ray, in wall seconds: server S is an actor on
its own party resource with its task pool, server C runs in this process with its own pool, and every
round trip is an actor call. The array path cuts its work over both pools (all cores); the per-value
path cannot (one value per call), and pays one actor call per value.
"""

from __future__ import annotations

import argparse
import os
import secrets
import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ray_vfl.crypto import get_backend
from ray_vfl.crypto.two_server.bcp import keygen, set_exponents, setup
from ray_vfl.crypto.two_server.bcp_arrays import BCP
from ray_vfl.crypto.he.gmp import set_threads
from ray_vfl.crypto.two_server.server_s import LocalLink, ServerS, TwoServerConfig
from ray_vfl.crypto.two_server.server_c import ServerC


def per_value(fn, count: int, repeats: int = 2) -> float:
    """Best-of-``repeats`` seconds per value of ``fn()``, which handles ``count`` values."""
    best = float("inf")
    for _ in range(repeats):
        t = time.process_time()
        fn()
        best = min(best, time.process_time() - t)
    return best / count


def textbook_encrypt(params, pk, ms: list[int]) -> list[tuple[int, int]]:
    n, n2, g, h = params.n, params.nsquare, params.g, pk.h
    out = []
    for m in ms:
        r = secrets.randbelow(n2 // 4) + 1
        out.append((pow(g, r, n2), pow(h, r, n2) * (1 + (m % n) * n) % n2))
    return out


def full_length_encrypt(bcp: BCP, pk, m: list[int]) -> float:
    """Per-value cost of encryption with the paper's full-length ``r`` (fixed-base, 8-bit windows)."""
    old = set_exponents(False)
    try:
        bcp.encrypt_ints(pk, m[:1])  # build the tables first
        return per_value(lambda: bcp.encrypt_ints(pk, m), len(m), 1)
    finally:
        set_exponents(old)


def table1(bits: int, small: int) -> tuple[list, tuple]:
    t = time.process_time()
    params, mk = setup(bits, allow_weak=True)
    t_setup = time.process_time() - t
    t_keygen = per_value(lambda: keygen(params), 1)
    users = [keygen(params) for _ in range(3)]
    cfg = TwoServerConfig()
    s = ServerS(mk, cfg)
    c = ServerC(params, LocalLink(s), cfg)
    jpk = c.register([pk for pk, _ in users])
    bcp = BCP()
    (upk, usk) = users[0]
    m = [secrets.randbits(64) - 2**63 for _ in range(small)]
    c.encrypt_ints(jpk, m), bcp.encrypt_ints(upk, m)  # warm the fixed-base tables
    x, y = c.encrypt_ints(jpk, m), c.encrypt_ints(jpk, m[::-1])
    ux = bcp.encrypt_ints(upk, m)
    few = max(4, small // 8)
    rows = [
        ("Setup (s, once)", t_setup),
        ("KeyGen", t_keygen),
        ("Enc", per_value(lambda: bcp.encrypt_ints(jpk, m), small)),
        ("Enc, hiding r (|N| + 128 bits)", per_value(lambda: bcp._encrypt_residues(jpk, m, 0, hiding=True), small)),
        ("Enc, full-length r (the paper's)", full_length_encrypt(bcp, jpk, m)),
        ("Dec (user key)", per_value(lambda: bcp.decrypt_ints(usk, bcp.take(ux, slice(0, few))), few)),
        ("mDec (master key)", per_value(lambda: bcp.mdecrypt_ints(mk, jpk, x), small)),
        ("KeyProd", per_value(lambda: c.key_prod([ux]), small)),
        ("TransDec", per_value(lambda: c.trans_dec(x, upk), small)),
        ("Add", per_value(lambda: c.add(x, y), small, 3)),
        ("Mult", per_value(lambda: c.mult(x, y), small)),
        ("LGT", per_value(lambda: c.lgt(x, y), small)),
    ]
    pai = get_backend("paillier")
    ppk, psk = pai.generate_keys(bits, allow_weak=True)
    xs = np.linspace(-1, 1, small)
    pai.encrypt(ppk, xs)
    pc = pai.encrypt(ppk, xs)
    rows += [("Paillier Enc", per_value(lambda: pai.encrypt(ppk, xs), small)),
             ("Paillier Dec", per_value(lambda: pai.decrypt(psk, pc), small))]
    tb_count = 24 if bits <= 1024 else 6
    t_text = per_value(lambda: textbook_encrypt(params, jpk, m[:tb_count]), tb_count, 1)
    rows.append(("Enc, textbook (Python pow, full r)", t_text))
    return rows, (params, mk, c, jpk)


def array_vs_loop(c: ServerC, jpk, n: int, loop: int, clock=time.process_time, warm: bool = False) -> list:
    """``(op, n, k, array seconds, per-value loop seconds scaled to n)`` for Mult and LGT on ``n`` values,
    the loop timed on ``k = min(loop, n)`` one-value calls; ``clock``: CPU or wall time."""
    vals = [secrets.randbits(64) - 2**63 for _ in range(n)]
    x, y = c.encrypt_ints(jpk, vals), c.encrypt_ints(jpk, vals[::-1])
    if warm:  # build the task pools' fixed-base tables before timing
        c.mult(c.bcp.take(x, slice(0, 256)), c.bcp.take(y, slice(0, 256)))
    out = []
    for name, op in (("Mult", c.mult), ("LGT", c.lgt)):
        t = clock()
        op(x, y)
        batch = clock() - t
        k = min(loop, n)
        xs = [c.bcp.take(x, slice(i, i + 1)) for i in range(k)]
        ys = [c.bcp.take(y, slice(i, i + 1)) for i in range(k)]
        t = clock()
        for a, b in zip(xs, ys):
            op(a, b)
        out.append((name, n, k, batch, (clock() - t) * n / k))
    return out


class _SHost:
    """Server S as a bare actor for Table 3: one method per round trip."""

    def __init__(self, mk, config, pool) -> None:
        self.server = ServerS(mk, config, pool=pool)

    def step(self, name: str, *payload):
        return getattr(ServerS, name)(self.server, *payload)


class _RayLink:
    def __init__(self, handle) -> None:
        self.handle, self.round_trips = handle, 0

    def ask(self, step, *payload):
        import ray
        self.round_trips += 1
        return ray.get(self.handle.step.remote(step.__name__, *payload))


def table3(rt, bits: int, n: int, loop: int) -> list:
    """Mult and LGT over Ray: one actor call per array (pools on) vs one per value; wall seconds."""
    params, mk = setup(bits, allow_weak=True)
    users = [keygen(params) for _ in range(2)]
    config = TwoServerConfig()
    handle = rt.spawn("server_s", _SHost, mk, config, rt.pool("server_s"))
    c = ServerC(params, _RayLink(handle), config, pool=rt.pool("server_c"))
    jpk = c.register([pk for pk, _ in users])
    return [(bits, *row) for row in array_vs_loop(c, jpk, n, loop, time.perf_counter, warm=True)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bits", type=int, nargs="+", default=[1024, 2048])
    ap.add_argument("--small", type=int, default=200, help="values per Table 1 measurement")
    ap.add_argument("--n", type=int, default=10_000, help="array length for Table 2")
    ap.add_argument("--n-2048", type=int, default=1_000, help="array length for Table 2 at >= 2048 bits")
    ap.add_argument("--loop", type=int, default=1_000, help="values the per-value loop is timed on")
    ap.add_argument("--rtt-ms", type=float, nargs="+", default=[0.5, 20.0])
    ap.add_argument("--ray", action="store_true", help="also Table 3: Mult and LGT measured over Ray actors")
    ap.add_argument("--only-ray", action="store_true", help="Table 3 alone")
    args = ap.parse_args()
    if args.only_ray:
        _print_table3(args)
        return
    warnings.simplefilter("ignore")
    set_threads(1)
    results = {}
    for bits in args.bits:
        rows, (_, _, c, jpk) = table1(bits, args.small)
        n = args.n if bits < 2048 else args.n_2048
        results[bits] = (rows, array_vs_loop(c, jpk, n, args.loop if bits < 2048 else min(args.loop, 200)))
        print(f"... {bits} bits done", file=sys.stderr, flush=True)
    print(f"Table 1: CPU microseconds per value, one thread (Setup: seconds); load average {os.getloadavg()[0]:.1f} "
          f"on {os.cpu_count()} cores")
    print(f"{'operation':<36}" + "".join(f"{b:>14}" for b in args.bits))
    for i, (name, _) in enumerate(results[args.bits[0]][0]):
        cells = []
        for b in args.bits:
            v = results[b][0][i][1]
            cells.append(f"{v:>14.2f}" if name.startswith("Setup") else f"{v * 1e6:>14.0f}")
        print(f"{name:<36}" + "".join(cells))
    ratio = [dict(results[b][0])["Enc, textbook (Python pow, full r)"] / dict(results[b][0])["Enc"] for b in args.bits]
    print(f"{'Enc: textbook / ours':<36}" + "".join(f"{r:>13.0f}x" for r in ratio))
    print("\nTable 2: one round trip per array vs one per value (loop timed on k values, scaled to n); "
          "'RTT x ms': the ratio when each round trip also costs x ms")
    rtts = "".join(f"{f'RTT {r:g} ms':>12}" for r in args.rtt_ms)
    print(f"{'bits':>5} {'op':<5} {'n':>6} {'k':>6} {'array s':>9} {'loop s':>9} {'ratio':>7}{rtts}")
    for b in args.bits:
        for name, n, k, batch, looped in results[b][1]:
            at = "".join(f"{(looped + n * r / 1e3) / (batch + r / 1e3):>11.2f}x" for r in args.rtt_ms)
            print(f"{b:>5} {name:<5} {n:>6} {k:>6} {batch:>9.2f} {looped:>9.2f} {looped / batch:>6.2f}x{at}")

    if args.ray:
        _print_table3(args)


def _print_table3(args) -> None:
    from ray_vfl import Runtime

    print("\nTable 3: over Ray (S an actor, C here, both with task pools over all cores); wall seconds; "
          "one actor call per array vs one per value (loop timed on k values, scaled to n)")
    print(f"{'bits':>5} {'op':<5} {'n':>6} {'k':>6} {'array s':>9} {'loop s':>9} {'ratio':>7}")
    with Runtime() as rt:  # one Ray for every key size
        rt.connect(["server_c", "server_s"])
        rows = [row for b in args.bits for row in table3(rt, b, args.n if b < 2048 else args.n_2048,
                                                          min(args.loop, 300))]
    for b, name, n, k, batch, looped in rows:
        print(f"{b:>5} {name:<5} {n:>6} {k:>6} {batch:>9.2f} {looped:>9.2f} {looped / batch:>6.2f}x")


if __name__ == "__main__":
    main()
