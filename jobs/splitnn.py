"""Split-NN (FedAds) tables on Ray: effectiveness (Table 3-like) and utility/privacy (Table 4-like).

Runs on the FedAds-like generator and on one real dataset shipped in ray_vfl/data/files, and writes every
table as CSV and JSON::

    python jobs/splitnn.py                                   # generator (200k rows) + iPinYou
    python jobs/splitnn.py --real credit --rows 100000 --out results/splitnn
    python jobs/splitnn.py --unaligned --real credit --rows 60000   # + Table 3 with unaligned rows (Diffu-AT), PNG
    ray job submit --address http://HEAD:8265 --working-dir . -- python jobs/splitnn.py

Needs torch (``pip install torch==2.13.0``, the CPU build); ``--help`` works without it.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time

from ray_vfl.errors import VFLError

# real dataset -> its loader in ray_vfl.splitnn (imported in main: torch is needed only to run)
REAL = {"ipinyou": "load_ipinyou", "credit": "load_credit_vfl", "open_bandit": "load_open_bandit"}
TORCH_MISSING = "jobs/splitnn.py needs torch: pip install torch==2.13.0 (the CPU build; an unpinned torch pulls CUDA)"


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--rows", type=int, default=200_000, help="rows of the FedAds-like generator (20 %% aligned)")
    p.add_argument("--real", default="ipinyou", choices=sorted(REAL) + ["none"], help="real dataset for the second set of tables (none: generator only)")
    p.add_argument("--data-dir", default=None, help="folder holding your own copies of the real datasets (default: $VFL_DATA_DIR, then the shipped ray_vfl/data/files)")
    p.add_argument("--epochs", type=int, default=1, help="passes over the aligned training rows")
    p.add_argument("--batch-size", type=int, default=256, help="rows per split-NN step")
    p.add_argument("--learning-rate", type=float, default=1e-3, help="Adam learning rate of both parties")
    p.add_argument("--embedding-dim", type=int, default=None, help="every feature's embedding width (the models' capacity; "
                   "default: SplitNNConfig's)")
    p.add_argument("--seed", type=int, default=0, help="seed of the data, the models and the batch order (the defenses' noise comes from the label party's OS entropy)")
    p.add_argument("--out", default="results/splitnn", help="folder for the CSV/JSON tables")
    p.add_argument("--unaligned", action="store_true", help="also FedAds Table 3 with unaligned rows: 20 %% of the "
                   "training rows aligned; Local, VanillaVFL, HeuristicVFL, JPL, FedCVT, SS-VFL, FedHSSL, Diffu-AT, ORACLE (needs diffusers; "
                   "the plot needs matplotlib)")
    p.add_argument("--only-unaligned", action="store_true", help="write the unaligned table alone (skips tables 3 and 4)")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="seeds of the unaligned table")
    p.add_argument("--unaligned-epochs", type=int, default=2, help="alternating epochs of Diffu-AT/JPL/HeuristicVFL "
                   "after one pretraining epoch (every other method trains one epoch more than this)")
    p.add_argument("--diffusion-steps", type=int, default=100, help="diffusion steps T of Diffu-AT (the paper: 1000)")
    return p.parse_args(argv)


# every attack one-sided next to two-sided (max(auc, 1 - auc) per batch: an attacker that inverts its guess)
PRIVACY_COLUMNS = ["dataset", "defense", "auc", "epsilon"] + [
    f"{attack}_leak_auc{side}" for attack in ("norm", "direction", "cluster") for side in ("", "_two_sided")
] + ["two_sided_chance"]


def _print_table(title: str, rows: list[dict], columns: list[str]) -> None:
    print(f"\n{title}")
    print(" | ".join(columns))
    for row in rows:
        print(" | ".join(str(row.get(c, "")) for c in columns))


def _width(args) -> dict:
    """``--embedding-dim`` as SplitNNConfig keyword arguments (none: the config's default width)."""
    return {} if args.embedding_dim is None else {"embedding_dim": args.embedding_dim}


def _unaligned_tables(runtime, splitnn, args, real) -> tuple[list[dict], list[dict]]:
    """Per dataset and seed, FedAds Table 3 with unaligned rows; and its mean/std over seeds."""
    from ray_vfl.splitnn.experiments import summarize_seeds, unaligned_table

    config = splitnn.SplitNNConfig(batch_size=args.batch_size, epochs=args.unaligned_epochs, learning_rate=args.learning_rate,
                                   **_width(args))
    options = splitnn.UnalignedOptions(diffusion=splitnn.DiffusionConfig(steps=args.diffusion_steps))
    # the generator with users (HeuristicVFL needs them), every row aligned before the 20 % split
    gen = splitnn.make_fedads_like(args.rows, aligned_fraction=1.0, seed=args.seed, n_users=max(1, args.rows // 20))
    rows = []
    for data, users in [(gen, "user_id")] + [(d, None) for d in real]:
        for seed in args.seeds:
            rows += unaligned_table(runtime, data, config, options, 0.2, seed, user_column=users)
    return rows, summarize_seeds(rows)


def _plot(summary: list[dict], path: str) -> str | None:
    """Bars of test AUC and NLL (mean, std as error bars) per method, one row of panels per dataset."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ModuleNotFoundError:
        logging.getLogger(__name__).warning("matplotlib is not installed: no plot (pip install 'ray_vfl[plots]')")
        return None
    datasets = list(dict.fromkeys(r["dataset"] for r in summary))
    fig, axes = plt.subplots(len(datasets), 2, figsize=(11, 3.2 * len(datasets)), squeeze=False)
    for row, name in zip(axes, datasets):
        part = [r for r in summary if r["dataset"] == name]
        labels = [r["model"] for r in part]
        for ax, metric in zip(row, ("auc", "nll")):
            means = [r[f"{metric}_mean"] for r in part]
            ax.bar(labels, means, yerr=[r[f"{metric}_std"] for r in part], capsize=3,
                   color=["#d62728" if m == "Diffu-AT" else "#7f7f7f" for m in labels])
            spread = max(means) - min(means)
            ax.set_ylim(min(means) - spread - 0.005, max(means) + spread + 0.005)
            ax.set_title(f"{name}: test {metric.upper()} (mean, std over seeds)")
            ax.tick_params(axis="x", labelrotation=30)
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def main(argv=None) -> int:
    args = parse_args(argv)
    try:
        import ray_vfl.splitnn as splitnn
        from ray_vfl.splitnn.experiments import (
            effectiveness_table,
            privacy_table,
            write_table,
        )
    except ModuleNotFoundError as exc:
        if exc.name != "torch":
            raise
        sys.exit(f"error: {TORCH_MISSING}")
    from ray_vfl import Runtime

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    config = splitnn.SplitNNConfig(epochs=args.epochs, batch_size=args.batch_size, learning_rate=args.learning_rate,
                                   seed=args.seed, **_width(args))
    datasets = [splitnn.make_fedads_like(args.rows, seed=args.seed)]
    if args.real != "none":
        datasets.append(getattr(splitnn, REAL[args.real])(args.data_dir))
    runtime = Runtime()
    started = time.perf_counter()
    summary = {"config": config.to_dict(), "datasets": [], "tables": {}}
    try:
        table3, table4 = [], []
        for data in datasets:
            summary["datasets"].append(data.summary())
            if not args.only_unaligned:
                table3 += effectiveness_table(runtime, data, config)
                table4 += privacy_table(runtime, data, config)
        if not args.only_unaligned:
            summary["tables"]["effectiveness"] = write_table(table3, os.path.join(args.out, "table3_effectiveness"))
            summary["tables"]["privacy"] = write_table(table4, os.path.join(args.out, "table4_privacy"))
        if args.unaligned or args.only_unaligned:
            table5 = _unaligned_tables(runtime, splitnn, args, datasets[1:])
            summary["tables"]["unaligned"] = write_table(table5[0], os.path.join(args.out, "table5_unaligned"))
            summary["tables"]["unaligned_summary"] = write_table(table5[1], os.path.join(args.out, "table5_unaligned_summary"))
            summary["tables"]["unaligned_plot"] = _plot(table5[1], os.path.join(args.out, "table5_unaligned.png"))
    finally:
        runtime.shutdown()
    summary["seconds"] = round(time.perf_counter() - started, 1)
    with open(os.path.join(args.out, "summary.json"), "w", encoding="utf-8") as fh:
        json.dump(summary, fh, indent=2)
    if not args.only_unaligned:
        _print_table("Table 3 (effectiveness)", table3, ["dataset", "model", "train_rows", "auc", "nll", "train_s", "wall_s"])
        _print_table("Table 4 (utility / privacy; LeakAUC one-sided / two-sided)", table4, PRIVACY_COLUMNS)
    if args.unaligned or args.only_unaligned:
        _print_table(f"Table 3 with unaligned rows (20 % aligned; {len(args.seeds)} seeds)", table5[1],
                     ["dataset", "model", "seeds", "auc_mean", "auc_std", "nll_mean", "nll_std"])
    print(f"\nwrote {args.out} in {summary['seconds']} s")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except VFLError as exc:  # bad input or a failed party: the message names the problem and the fix
        sys.exit(f"error: {exc}")
