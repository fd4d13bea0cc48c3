"""Run a sweep from a YAML config: one result row per run, resumable, with a progress bar.

    python jobs/experiment.py --config jobs/configs/pivodl_fig6_9_clients_small.yaml
    python jobs/experiment.py --config jobs/configs/secureboost_scaling_parties.yaml --out results
    python jobs/experiment.py --config jobs/configs/pivodl_fig6_9_clients.yaml --max-runs 1   # a first run only
    ray job submit --address http://HEAD:8265 --working-dir . -- python jobs/experiment.py --config ...

Results go to ``<out>/<name>/results.csv`` (and ``.parquet``); run the same command again after an
interruption and only the unfinished runs run. ``jobs/plot.py`` draws them.
"""

from __future__ import annotations

import argparse
import logging
import sys

from ray_vfl.errors import VFLError


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--config", required=True, help="a sweep's YAML file (see jobs/configs/)")
    p.add_argument("--out", default="results", help="folder of the results (one subfolder per sweep name)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar (logs only)")
    p.add_argument("--max-runs", type=int, default=None, help="run at most this many of the unfinished runs "
                   "(the same command later continues with the next ones)")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        from ray_vfl.experiments import ExperimentConfig, run_sweep

        cfg = ExperimentConfig.from_yaml(args.config)
        table = run_sweep(cfg, args.out, progress=not args.no_progress, max_runs=args.max_runs)
    except VFLError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    logging.info("%s: %d runs in %s/%s/results.csv", cfg.name, len(table), args.out, cfg.name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
