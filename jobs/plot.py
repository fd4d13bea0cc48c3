"""Draw a sweep's results as PNG: mean over repeats with a min-max band, one line per group.

With no options it draws the figures of the small PIVODL Figs. 6-9 sweep, running that sweep first
(``jobs/experiment.py``'s default, about a minute) if its results are not there yet; ``--config NAME``
draws the figures a config declares from results ``jobs/experiment.py --config NAME`` wrote::

    python jobs/plot.py                                                # small PIVODL Figs. 6-9 (runs it if needed)
    python jobs/plot.py --config pivodl_fig6_9_clients                 # the full paper study's figures
    python jobs/plot.py --results results/pivodl_fig6_9_clients_small --x clients --y s_per_tree mb_per_tree auc
"""

from __future__ import annotations

import argparse
import logging
import os
import sys

from ray_vfl.errors import VFLError
from ray_vfl.experiments.progress import INTERRUPTED_EXIT

CONFIGS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "configs")
DEFAULT = "pivodl_fig6_9_clients_small"


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter,
                                epilog=f"With no options: the figures of {DEFAULT}, after running it if needed (about a "
                                       "minute). The full paper study: python jobs/experiment.py --config "
                                       f"{DEFAULT[:-len('_small')]}, then python jobs/plot.py --config "
                                       f"{DEFAULT[:-len('_small')]}; python jobs/experiment.py --help lists every config.")
    p.add_argument("--config", default=None, help=f"a shipped config's name or a sweep's YAML: draw the figures it "
                   f"declares (with no options: {DEFAULT}, run first if needed)")
    p.add_argument("--out", default="results", help="with --config: the folder jobs/experiment.py wrote into")
    p.add_argument("--results", default=None, help="a sweep's folder (holding results.csv)")
    p.add_argument("--x", default=None, help="the swept setting on the x axis")
    p.add_argument("--y", nargs="+", default=None, help="result columns, one figure each")
    p.add_argument("--group", default=None, help="one line per value of this column")
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        import pandas as pd

        from ray_vfl.errors import ConfigError, DataError
        from ray_vfl.experiments import ExperimentConfig, run_sweep
        from ray_vfl.experiments.catalog import full_study, resolve
        from ray_vfl.experiments.plots import plot_figures, plot_sweep

        default = not (args.config or args.results or args.x or args.y)  # no options: the small sweep
        config = DEFAULT if default else args.config
        cfg = ExperimentConfig.from_yaml(resolve(config, CONFIGS)) if config else None
        if cfg is None and not (args.results and args.x and args.y):
            raise ConfigError("give --config (a sweep's name or YAML), or --results, --x and --y")
        folder = args.results or os.path.join(args.out, cfg.name)
        path = os.path.join(folder, "results.csv")
        if default:  # the small sweep's missing runs first (none when jobs/experiment.py ran it)
            from ray_vfl import Runtime

            runtime = Runtime()
            try:
                run_sweep(cfg, args.out, runtime)
            finally:
                runtime.shutdown()  # also after Ctrl-C, before the interpreter exits
        if not os.path.exists(path):
            how = f": python jobs/experiment.py --config {config} --out {args.out}" if config else ""
            raise DataError(f"{path!r} does not exist; run jobs/experiment.py first{how}")
        table = pd.read_csv(path)
        if cfg is not None and not args.y:
            for out in plot_figures(cfg, table, folder):
                print(out)
            full = full_study(cfg.name, CONFIGS)
            if full:
                print(f"the full study's figures: python jobs/experiment.py --config {full}, then "
                      f"python jobs/plot.py --config {full}")
            return 0
        for y in args.y:
            out = plot_sweep(table, args.x, y, os.path.join(folder, f"{y}_vs_{args.x}.png"), args.group,
                             title=os.path.basename(os.path.normpath(folder)))
            print(out)
    except VFLError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt as exc:  # during the default sweep: it says how many runs are saved
        print(exc if str(exc) else "interrupted", file=sys.stderr)
        return INTERRUPTED_EXIT
    return 0


if __name__ == "__main__":
    sys.exit(main())
