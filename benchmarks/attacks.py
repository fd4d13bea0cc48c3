"""Every attack on every protocol's recorded view, in one table: role, attack, success, chance.

Each protocol's attack module (``ray_vfl.<protocol>.attack``; PIVODL's ``attack_views``, the split network's ``ray_vfl.splitnn.attack``,
the unaligned-sample split networks' (Diffu-AT, FedHSSL) ``ray_vfl.splitnn.unaligned_attack``)
exposes ``attack_results(runtime, quick)``: it trains the protocol on the setting it names, records the
attacking party's view through the metered send path (what its mailbox received and what it holds itself),
runs each attack on that view alone and returns :class:`ray_vfl.metrics.AttackResult` rows. This script
collects them and prints the markdown table the README's privacy section shows.

    python benchmarks/attacks.py             # the settings the README's table shows (minutes)
    python benchmarks/attacks.py --quick     # the small settings the tests use (seconds)
    python benchmarks/attacks.py --only pivodl ssxgb
    python benchmarks/attacks.py --only unaligned   # Diffu-AT and FedHSSL
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from ray_vfl import Runtime  # noqa: E402
from ray_vfl.metrics import AttackResult  # noqa: E402

MODULES = {
    "secureboost": "ray_vfl.secureboost.attack",
    "pivodl": "ray_vfl.pivodl.attack_views",
    "ssxgb": "ray_vfl.ssxgb.attack",
    "splitnn": "ray_vfl.splitnn.attack",
    "unaligned": "ray_vfl.splitnn.unaligned_attack",
}


def _fmt(x: float | None) -> str:
    return "" if x is None else (f"{x:.3f}" if isinstance(x, float) and not float(x).is_integer() else f"{x:g}")


def markdown(rows: list[AttackResult]) -> str:
    lines = ["| protocol | role | attack | metric | success | two-sided | chance | leaks | setting |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r.protocol} | {r.role} | {r.attack} | {r.metric} | {_fmt(r.success)} | {_fmt(r.two_sided)} "
                     f"| {_fmt(r.chance)} | {'yes' if r.leaks else 'no'} | {r.setting} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="the small settings the tests use")
    parser.add_argument("--only", nargs="+", choices=sorted(MODULES), default=sorted(MODULES))
    parser.add_argument("--json", help="also write the rows to this JSON file")
    args = parser.parse_args(argv)
    runtime = Runtime()
    rows: list[AttackResult] = []
    for name in args.only:
        start = time.perf_counter()
        rows += importlib.import_module(MODULES[name]).attack_results(runtime, quick=args.quick)
        print(f"{name}: {time.perf_counter() - start:.0f} s", file=sys.stderr, flush=True)
    print(markdown(rows))
    if args.json:
        with open(args.json, "w") as f:
            json.dump([r.__dict__ for r in rows], f, indent=1)


if __name__ == "__main__":
    main()
