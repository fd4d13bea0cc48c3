"""Draw a sweep's results as PNG: mean over repeats with a min-max band, one line per group.

    python jobs/plot.py --results results/pivodl_clients_small --x clients --y s_per_tree mb_per_tree auc
    python jobs/plot.py --results results/pivodl_epsilon_small --x epsilon --y guess_auc_two_sided --group backend
"""

from __future__ import annotations

import argparse
import os
import sys

from ray_vfl.errors import VFLError


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--results", required=True, help="a sweep's folder (holding results.csv)")
    p.add_argument("--x", required=True, help="the swept setting on the x axis")
    p.add_argument("--y", nargs="+", required=True, help="result columns, one figure each")
    p.add_argument("--group", default=None, help="one line per value of this column")
    args = p.parse_args(argv)
    try:
        import pandas as pd

        from ray_vfl.errors import DataError
        from ray_vfl.experiments.plots import plot_sweep

        path = os.path.join(args.results, "results.csv")
        if not os.path.exists(path):
            raise DataError(f"{path!r} does not exist; run jobs/experiment.py first")
        table = pd.read_csv(path)
        for y in args.y:
            out = plot_sweep(table, args.x, y, os.path.join(args.results, f"{y}_vs_{args.x}.png"), args.group,
                             title=os.path.basename(os.path.normpath(args.results)))
            print(out)
    except VFLError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
