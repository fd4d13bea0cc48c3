"""Run a sweep from a YAML config: one result row per run, saved as it finishes, with a progress bar.

With no options it runs the small twin of PIVODL Figs. 6-9 (about a minute); ``--config NAME`` runs any
shipped config (``--help`` lists them: every paper study next to its ``_small`` twin), ``--config FILE`` a
sweep of your own::

    python jobs/experiment.py                                              # small PIVODL Figs. 6-9, about a minute
    python jobs/experiment.py --config pivodl_fig6_9_clients               # the full paper study (hours)
    python jobs/experiment.py --config pivodl_fig6_9_clients --max-runs 1  # its first run only
    ray job submit --address http://HEAD:8265 --working-dir . -- python jobs/experiment.py --config ...

Results go to ``<out>/<name>/results.csv`` (and ``.parquet``). Ctrl-C loses at most the run in flight;
the same command again runs only the unfinished runs. ``jobs/plot.py`` draws them.
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


class _Help(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Defaults after each option, and the list of configs as written."""


def config_list() -> str:
    """The shipped configs, one line each: name and description."""
    from ray_vfl.experiments.catalog import describe

    configs = describe(CONFIGS)
    width = max(map(len, configs)) + 2
    lines = [f"  {name:<{width}}{text}" for name, text in configs.items()]
    return (f"With no options: {DEFAULT} ({configs[DEFAULT]}).\n{full_study_hint(DEFAULT)}.\n\n"
            "Shipped configs (--config NAME; NAME_small is the small twin of the paper study NAME):\n" + "\n".join(lines))


def full_study_hint(name: str) -> str:
    """Which command runs the full study behind ``name`` (or where to find the others)."""
    from ray_vfl.experiments.catalog import describe, full_study

    full = full_study(name, CONFIGS)
    if full is None:
        return "every shipped config: python jobs/experiment.py --help"
    return f"the full study ({describe(CONFIGS)[full]}): python jobs/experiment.py --config {full}"


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0], formatter_class=_Help, epilog=config_list())
    p.add_argument("--config", default=DEFAULT, help="a shipped config's name (listed below) or a sweep's YAML file")
    p.add_argument("--out", default="results", help="folder of the results (one subfolder per sweep name)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar (logs only)")
    p.add_argument("--max-runs", type=int, default=None, help="run at most this many of the unfinished runs "
                   "(the same command later continues with the next ones)")
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    import pandas as pd

    from ray_vfl import Runtime
    from ray_vfl.experiments import ExperimentConfig, Interrupted, run_sweep
    from ray_vfl.experiments.catalog import resolve
    from ray_vfl.experiments.plots import brief

    runtime = Runtime()  # started by the first run; stopped here, also after Ctrl-C (not at interpreter exit)
    try:
        cfg = ExperimentConfig.from_yaml(resolve(args.config, CONFIGS))
        table = run_sweep(cfg, args.out, runtime, progress=not args.no_progress, max_runs=args.max_runs)
    except VFLError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt as exc:  # Interrupted says how many runs are saved; before the first run, none are
        print(exc if isinstance(exc, Interrupted) else "interrupted: no run started", file=sys.stderr)
        return INTERRUPTED_EXIT
    finally:
        runtime.shutdown()
    with pd.option_context("display.width", 160, "display.max_columns", 20, "display.precision", 4):
        print(brief(cfg, table).to_string(index=False))
    folder = os.path.join(args.out, cfg.name)
    print(f"\n{cfg.name}: {len(brief(cfg, table))} of {len(cfg.runs())} runs in {folder}/results.csv; "
          f"figures: python jobs/plot.py --config {args.config} --out {args.out}")
    print(full_study_hint(cfg.name))
    return 0


if __name__ == "__main__":
    sys.exit(main())
