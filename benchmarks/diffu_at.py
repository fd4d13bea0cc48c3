"""Diffu-AT (FedAds): synthesis speed and FedAds Table 3 with unaligned rows on the generator.

Two measurements, printed as the Markdown of the "Diffu-AT at 60,000 rows (benchmarks/diffu_at.py)" section of
benchmarks/RESULTS.md::

    python benchmarks/diffu_at.py                        # speed + generator table, 3 seeds
    python benchmarks/diffu_at.py --speed-only
    python benchmarks/diffu_at.py --rows 60000 --users 3000 --seeds 0 1 2 --json results/diffu_at.json

- Synthesis: embeddings per second of the trained conditional diffusion model at T steps (default
  100), FedAds' shapes (h_N of width 32, condition [y ; h_L] of width 129), 1 and 2 torch threads.
- Table: Local, VanillaVFL, HeuristicVFL (user IDs), JPL, FedCVT, Diffu-AT and ORACLE (every row aligned) on
  the FedAds-like generator with users, 20 % of the training rows aligned; AUC and NLL, mean and
  std over seeds, and the share of the VanillaVFL -> ORACLE gap each method closes. ``--refresh``:
  whether the synthesiser is refitted every alternating epoch (default: Diffu-AT and FedCVT).
"""

from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np
import torch

from ray_vfl import Runtime
from ray_vfl.splitnn import SplitNNConfig, make_fedads_like
from ray_vfl.splitnn.unaligned.diffusion import ConditionalDiffusion, DiffusionConfig
from ray_vfl.splitnn.experiments import summarize_seeds, unaligned_table
from ray_vfl.splitnn.unaligned.synthesis import UnalignedOptions


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=100, help="diffusion steps T")
    p.add_argument("--hidden", type=int, nargs="+", default=[64, 64], help="denoiser widths")
    p.add_argument("--synth-rows", type=int, default=20_000, help="embeddings synthesised per timing")
    p.add_argument("--repeats", type=int, default=3, help="timings per thread count (the best is reported)")
    p.add_argument("--speed-only", action="store_true")
    p.add_argument("--rows", type=int, default=60_000, help="generator rows (train days: 3/4)")
    p.add_argument("--users", type=int, default=3_000, help="generator users (HeuristicVFL needs them)")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--epochs", type=int, default=2, help="alternating epochs (after 1 pretraining epoch)")
    p.add_argument("--refresh", choices=["auto", "on", "off"], default="auto",
                   help="refit the synthesiser every alternating epoch: auto = Diffu-AT and FedCVT (the default), "
                        "on = every method, off = none (the 2026-12-01 table)")
    p.add_argument("--diffusion-epochs", type=int, default=20)
    p.add_argument("--branch-norm", choices=["moments", "batchnorm", "none"], default="moments",
                   help="how real and synthetic h_N meet the top (UnalignedOptions.branch_norm)")
    p.add_argument("--no-clip", action="store_true", help="the unclipped sampler (DiffusionConfig.clip_sample=False)")
    p.add_argument("--methods", nargs="+", default=None,
                   help="methods of the table (default: all of ray_vfl.splitnn.experiments.UNALIGNED_METHODS)")
    p.add_argument("--json", default=None)
    return p.parse_args(argv)


def synthesis_speed(args) -> list[dict]:
    rng = np.random.default_rng(0)
    cond = np.column_stack([rng.random(args.synth_rows) < 0.03, np.maximum(rng.normal(size=(args.synth_rows, 128)), 0)])
    h_n = np.maximum(rng.normal(size=(4_000, 32)), 0)
    model = ConditionalDiffusion(DiffusionConfig(steps=args.steps, epochs=1, hidden=tuple(args.hidden)))
    model.fit(h_n, cond[:4_000])
    rows = []
    for threads in (1, 2):
        torch.set_num_threads(threads)
        best = min(_timed(model, cond) for _ in range(args.repeats))
        rows.append({"steps": args.steps, "hidden": list(args.hidden), "threads": threads, "rows": args.synth_rows,
                     "seconds": round(best, 3), "embeddings_per_s": int(args.synth_rows / best)})
    return rows


def _timed(model, cond) -> float:
    start = time.perf_counter()
    model.sample(cond)
    return time.perf_counter() - start


def generator_table(args) -> tuple[list[dict], list[dict]]:
    full = make_fedads_like(args.rows, aligned_fraction=1.0, seed=0, n_users=args.users)
    config = SplitNNConfig(batch_size=128, epochs=args.epochs, learning_rate=2e-3)
    options = UnalignedOptions(diffusion=DiffusionConfig(steps=args.steps, epochs=args.diffusion_epochs,
                                                         hidden=tuple(args.hidden), clip_sample=not args.no_clip),
                               refresh={"auto": None, "on": True, "off": False}[args.refresh],
                               branch_norm=args.branch_norm)
    runtime = Runtime()
    rows: list[dict] = []
    try:
        for seed in args.seeds:
            rows += unaligned_table(runtime, full, config, options, 0.2, seed, user_column="user_id", methods=args.methods)
            print(f"seed {seed} done", flush=True)
    finally:
        runtime.shutdown()
    summary = summarize_seeds(rows)
    by = {r["model"]: r["auc_mean"] for r in summary}
    gap = by["ORACLE"] - by["VanillaVFL"] if {"ORACLE", "VanillaVFL"} <= set(by) else 0.0
    for r in summary:
        r["gap_closed"] = round((r["auc_mean"] - by["VanillaVFL"]) / gap, 3) if gap > 0 else None
    return rows, summary


def main(argv=None) -> int:
    args = parse_args(argv)
    out: dict = {"speed": synthesis_speed(args)}
    print("\n| T | denoiser | torch threads | embeddings | seconds | embeddings/s |")
    print("|---|---|---|---|---|---|")
    for r in out["speed"]:
        print(f"| {r['steps']} | {r['hidden']} | {r['threads']} | {r['rows']} | {r['seconds']} | {r['embeddings_per_s']:,} |")
    if not args.speed_only:
        out["rows"], out["summary"] = generator_table(args)
        print(f"\n| model | AUC (mean ± std, {len(args.seeds)} seeds) | NLL (mean ± std) | VanillaVFL -> ORACLE gap closed |")
        print("|---|---|---|---|")
        for r in out["summary"]:
            print(f"| {r['model']} | {r['auc_mean']:.4f} ± {r['auc_std']:.4f} | {r['nll_mean']:.4f} ± {r['nll_std']:.4f} | "
                  f"{r['gap_closed']} |")
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(out, fh, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
