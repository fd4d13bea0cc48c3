"""Draw a sweep's results as PNG: mean over repeats with a min-max band, one line per group.

    python jobs/plot.py --config jobs/configs/pivodl_fig6_9_clients_small.yaml   # the paper figures it declares
    python jobs/plot.py --results results/pivodl_fig6_9_clients_small --x clients --y s_per_tree mb_per_tree auc
    python jobs/plot.py --results results/pivodl_table3_label_guess_small --x epsilon --y guess_auc_two_sided
"""

from __future__ import annotations

import argparse
import os
import sys

from ray_vfl.errors import VFLError


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--config", default=None, help="a sweep's YAML: draw the figures it declares")
    p.add_argument("--out", default="results", help="with --config: the folder jobs/experiment.py wrote into")
    p.add_argument("--results", default=None, help="a sweep's folder (holding results.csv)")
    p.add_argument("--x", default=None, help="the swept setting on the x axis")
    p.add_argument("--y", nargs="+", default=None, help="result columns, one figure each")
    p.add_argument("--group", default=None, help="one line per value of this column")
    args = p.parse_args(argv)
    try:
        import pandas as pd

        from ray_vfl.errors import ConfigError, DataError
        from ray_vfl.experiments import ExperimentConfig
        from ray_vfl.experiments.plots import plot_figures, plot_sweep

        cfg = ExperimentConfig.from_yaml(args.config) if args.config else None
        if cfg is None and not (args.results and args.x and args.y):
            raise ConfigError("give --config (a sweep's YAML), or --results, --x and --y")
        folder = args.results or os.path.join(args.out, cfg.name)
        path = os.path.join(folder, "results.csv")
        if not os.path.exists(path):
            raise DataError(f"{path!r} does not exist; run jobs/experiment.py first")
        table = pd.read_csv(path)
        if cfg is not None and not args.y:
            for out in plot_figures(cfg, table, folder):
                print(out)
            return 0
        args.results = folder
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
