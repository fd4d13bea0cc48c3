"""Split-NN (FedAds) tables on Ray: effectiveness (Table 3-like) and utility/privacy (Table 4-like).

Runs on the FedAds-like generator and on one real dataset shipped in ray_vfl/data/files, and writes every
table as CSV and JSON::

    python jobs/splitnn.py                                   # small: 50,000 generated rows; about a minute
    python jobs/splitnn.py --full                            # the paper's tables: 200,000 generated rows + iPinYou
    python jobs/splitnn.py --full --unaligned                # + Table 3 with unaligned rows (Diffu-AT), 3 seeds, PNG
    python jobs/splitnn.py --real credit --rows 100000 --out results/splitnn
    ray job submit --address http://HEAD:8265 --working-dir . -- python jobs/splitnn.py --full

Each finished run (a dataset's effectiveness table, a defense's row, an unaligned method's row) is saved at
once in ``<out>/runs.jsonl``; after Ctrl-C the same command runs only the others.
Needs torch (``pip install torch==2.13.0``, the CPU build); ``--help`` works without it.
"""

from __future__ import annotations

import argparse
import functools
import json
import logging
import os
import sys
import time


# real dataset -> its loader in ray_vfl.splitnn (imported in main: torch is needed only to run)
REAL = {"ipinyou": "load_ipinyou", "credit": "load_credit_vfl", "open_bandit": "load_open_bandit"}
DEFENSES = ("none", "DP", "Marvell", "MixPro")  # Table 4's rows: the keys of ray_vfl.splitnn.experiments.default_defenses()
TORCH_MISSING = "jobs/splitnn.py needs torch: pip install torch==2.13.0 (the CPU build; an unpinned torch pulls CUDA)"
# With no options the job runs a small version (about a minute); --full runs the paper's tables.
SMALL = {"rows": 50_000, "real": "none", "seeds": [0], "diffusion_steps": 20, "out": "results/splitnn_small"}
FULL = {"rows": 200_000, "real": "ipinyou", "seeds": [0, 1, 2], "diffusion_steps": 100, "out": "results/splitnn"}


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter,
                                allow_abbrev=False, epilog="With no options: tables 3 and 4 on 50,000 generated rows "
                                "(about a minute, into results/splitnn_small). The paper's tables: --full (add "
                                "--unaligned for Table 3 with unaligned rows).")
    p.add_argument("--full", action="store_true", help="the paper's tables: 200,000 generated rows and iPinYou "
                   "(with --unaligned: 3 seeds, 100 diffusion steps), into results/splitnn; explicit flags still apply on top")
    p.add_argument("--rows", type=int, default=SMALL["rows"], help="rows of the FedAds-like generator (20 %% aligned)")
    p.add_argument("--real", default=SMALL["real"], choices=sorted(REAL) + ["none"], help="real dataset for the second set of tables (none: generator only)")
    p.add_argument("--data-dir", default=None, help="folder holding your own copies of the real datasets (default: $VFL_DATA_DIR, then the shipped ray_vfl/data/files)")
    p.add_argument("--epochs", type=int, default=1, help="passes over the aligned training rows")
    p.add_argument("--batch-size", type=int, default=256, help="rows per split-NN step")
    p.add_argument("--learning-rate", type=float, default=1e-3, help="Adam learning rate of both parties")
    p.add_argument("--embedding-dim", type=int, default=None, help="every feature's embedding width (the models' capacity; "
                   "default: SplitNNConfig's)")
    p.add_argument("--seed", type=int, default=0, help="seed of the data, the models and the batch order (the defenses' noise comes from the label party's OS entropy)")
    p.add_argument("--out", default=SMALL["out"], help="folder for the CSV/JSON tables")
    p.add_argument("--unaligned", action="store_true", help="also FedAds Table 3 with unaligned rows: 20 %% of the "
                   "training rows aligned; Local, VanillaVFL, HeuristicVFL, JPL, FedCVT, SS-VFL, FedHSSL, Diffu-AT, ORACLE (needs diffusers; "
                   "the plot needs matplotlib)")
    p.add_argument("--only-unaligned", action="store_true", help="write the unaligned table alone (skips tables 3 and 4)")
    p.add_argument("--seeds", type=int, nargs="+", default=SMALL["seeds"], help="seeds of the unaligned table")
    p.add_argument("--unaligned-epochs", type=int, default=2, help="alternating epochs of Diffu-AT/JPL/HeuristicVFL "
                   "after one pretraining epoch (every other method trains one epoch more than this)")
    p.add_argument("--diffusion-steps", type=int, default=SMALL["diffusion_steps"], help="diffusion steps T of Diffu-AT (the paper: 1000)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    argv = list(sys.argv[1:] if argv is None else argv)
    args = p.parse_args(argv)
    if args.full:
        given = {a.split("=")[0] for a in argv if a.startswith("--")}
        for key, value in FULL.items():
            if "--" + key.replace("_", "-") not in given:
                setattr(args, key, value)
    return args


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


def plan(args) -> list[dict]:
    """Every run of the command with the settings its result depends on: per dataset its effectiveness
    table and each defense's privacy row; then per dataset, seed and method a row of the unaligned table."""
    from ray_vfl.splitnn.experiments import UNALIGNED_METHODS

    common = {"rows": args.rows, "data_dir": args.data_dir, "epochs": args.epochs, "batch_size": args.batch_size,
              "learning_rate": args.learning_rate, "embedding_dim": args.embedding_dim, "seed": args.seed}
    names = ["fedads_like"] + ([args.real] if args.real != "none" else [])
    runs = []
    if not args.only_unaligned:
        for name in names:
            runs.append({"table": "effectiveness", "dataset": name, **common})
            runs += [{"table": "privacy", "dataset": name, "defense": d, **common} for d in DEFENSES]
    if args.unaligned or args.only_unaligned:
        for name in names:
            runs += [{"table": "unaligned", "dataset": name, "split_seed": seed, "method": method,
                      "unaligned_epochs": args.unaligned_epochs, "diffusion_steps": args.diffusion_steps, **common}
                     for seed in args.seeds for method in UNALIGNED_METHODS if method != "heuristic" or name == "fedads_like"]
    return runs


class Tables:
    """The job's datasets (made when a run first needs them) and one run of any table."""

    def __init__(self, args, runtime) -> None:
        import ray_vfl.splitnn as splitnn

        self.args, self.runtime, self.splitnn = args, runtime, splitnn
        self.config = splitnn.SplitNNConfig(epochs=args.epochs, batch_size=args.batch_size, learning_rate=args.learning_rate,
                                            seed=args.seed, **_width(args))

    @functools.lru_cache(maxsize=None)
    def data(self, name: str, users: bool = False):
        """The generator (with users and every row aligned before the 20 % split, for the unaligned table)
        or the real dataset."""
        if name != "fedads_like":
            return getattr(self.splitnn, REAL[name])(self.args.data_dir)
        if users:  # HeuristicVFL needs user IDs
            return self.splitnn.make_fedads_like(self.args.rows, aligned_fraction=1.0, seed=self.args.seed,
                                                 n_users=max(1, self.args.rows // 20))
        return self.splitnn.make_fedads_like(self.args.rows, seed=self.args.seed)

    @functools.lru_cache(maxsize=4)
    def split(self, name: str, seed: int):
        return self.splitnn.split_aligned(self.data(name, users=True), 0.2, seed)

    def run(self, run: dict):
        from ray_vfl.splitnn.experiments import default_defenses, effectiveness_table, privacy_row, unaligned_row

        if run["table"] == "effectiveness":
            return effectiveness_table(self.runtime, self.data(run["dataset"]), self.config)
        if run["table"] == "privacy":
            defense = default_defenses()[run["defense"]]
            return privacy_row(self.runtime, self.data(run["dataset"]), self.config, run["defense"], defense)[0]
        args = self.args
        config = self.splitnn.SplitNNConfig(batch_size=args.batch_size, epochs=args.unaligned_epochs,
                                            learning_rate=args.learning_rate, **_width(args))
        options = self.splitnn.UnalignedOptions(diffusion=self.splitnn.DiffusionConfig(steps=args.diffusion_steps))
        partial, oracle = self.split(run["dataset"], run["split_seed"])
        users = "user_id" if run["dataset"] == "fedads_like" else None
        return unaligned_row(self.runtime, partial, oracle, config, options, run["method"], run["split_seed"], users)[0]


def _with_d_leak(rows: list[dict]) -> list[dict]:
    """Each privacy row with dLeakAUC against its dataset's no-defense row, one- and two-sided."""
    from ray_vfl.splitnn import d_leak_auc

    base = {r["dataset"]: r for r in rows if r["defense"] == "none"}
    for row in rows:
        for attack in ("norm", "direction", "cluster"):
            for side in ("", "_two_sided"):
                key = f"{attack}_leak_auc{side}"
                row[f"{attack}_d_leak_auc{side}"] = round(d_leak_auc(row[key], base[row["dataset"]][key]), 4)
    return rows


def main(argv=None) -> int:
    args = parse_args(argv)
    try:
        import ray_vfl.splitnn  # noqa: F401
        from ray_vfl.splitnn.experiments import summarize_seeds, write_table
    except ModuleNotFoundError as exc:
        if exc.name != "torch":
            raise
        sys.exit(f"error: {TORCH_MISSING}")
    from ray_vfl import Runtime
    from ray_vfl.experiments import RunLog

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    book = RunLog(os.path.join(args.out, "runs.jsonl"), plan(args), "splitnn")
    runtime = Runtime()
    started = time.perf_counter()
    with book.guard():  # Ctrl-C anywhere: one line saying how many runs are saved
        try:
            tables = Tables(args, runtime)
            results = book.run(tables.run, progress=not args.no_progress)
        finally:
            runtime.shutdown()
        by_table: dict[str, list] = {"effectiveness": [], "privacy": [], "unaligned": []}
        for run, result in zip(book.runs, results):
            by_table[run["table"]] += result if isinstance(result, list) else [result]
        names = dict.fromkeys(r["dataset"] for r in book.runs if r["table"] != "unaligned")
        summary = {"config": tables.config.to_dict(), "datasets": [tables.data(n).summary() for n in names], "tables": {},
                   "seconds": round(time.perf_counter() - started, 1)}
        if not args.only_unaligned:
            table3, table4 = by_table["effectiveness"], _with_d_leak(by_table["privacy"])
            summary["tables"]["effectiveness"] = write_table(table3, os.path.join(args.out, "table3_effectiveness"))
            summary["tables"]["privacy"] = write_table(table4, os.path.join(args.out, "table4_privacy"))
        if args.unaligned or args.only_unaligned:
            table5 = (by_table["unaligned"], summarize_seeds(by_table["unaligned"]))
            summary["tables"]["unaligned"] = write_table(table5[0], os.path.join(args.out, "table5_unaligned"))
            summary["tables"]["unaligned_summary"] = write_table(table5[1], os.path.join(args.out, "table5_unaligned_summary"))
            summary["tables"]["unaligned_plot"] = _plot(table5[1], os.path.join(args.out, "table5_unaligned.png"))
        with open(os.path.join(args.out, "summary.json"), "w", encoding="utf-8") as fh:
            json.dump(summary, fh, indent=2)
    if not args.only_unaligned:
        _print_table("Table 3 (effectiveness)", table3, ["dataset", "model", "train_rows", "auc", "nll", "train_s", "wall_s"])
        _print_table("Table 4 (utility / privacy; LeakAUC one-sided / two-sided)", table4, PRIVACY_COLUMNS)
    if args.unaligned or args.only_unaligned:
        _print_table(f"Table 3 with unaligned rows (20 % aligned; {len(args.seeds)} seeds)", table5[1],
                     ["dataset", "model", "seeds", "auc_mean", "auc_std", "nll_mean", "nll_std"])
    print(f"\nwrote {args.out} in {summary['seconds']} s")
    if not args.full:
        print("the paper's tables (200,000 generated rows and iPinYou): python jobs/splitnn.py --full "
              "(add --unaligned for Table 3 with unaligned rows)")
    return 0


def cli(argv=None) -> int:
    """:func:`main` as the command line runs it (:func:`ray_vfl.experiments.progress.run_job`)."""
    from ray_vfl.experiments.progress import run_job

    return run_job(main, argv)


if __name__ == "__main__":
    sys.exit(cli())
