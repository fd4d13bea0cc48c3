"""Split-NN throughput: training samples per second on Ray next to the same model trained centrally in torch.

Both are measured in the same run, on the same FedAds-like rows, with the FedAds architecture:

    python benchmarks/splitnn.py                     # 40,000 aligned rows, batch 256, 1 epoch
    python benchmarks/splitnn.py --rows 100000 --depths 1 8 32 --json results/splitnn_bench.json

"split (loop)" times the batch loop only (actors up, data encoded); "split (end to end)" adds
spawning or resetting the actors and encoding. Centralized torch is timed with 1 thread (what each
party actor uses) and with torch's default thread count.

``--defenses`` measures the defenses instead: per dataset and defense, test AUC, the accounted epsilon
(DP) and every attack's LeakAUC one-sided and two-sided (max(auc, 1 - auc) per batch), as a Markdown
table (the "Split-NN defenses, two-sided" section of benchmarks/RESULTS.md)::

    python benchmarks/splitnn.py --defenses fedads_like ipinyou --json results/splitnn_defenses.json

``--sealing N`` measures what sealed channels cost the split network: N fits of each, alternating
unsealed and sealed in one Ray (the runtime's benchmark-only switch ``Runtime._seal_messages``), with the
batch loop's seconds, the seconds the parties spent on the wire (encoding, sealing, opening, decoding and
checking: the ``wire`` intervals of ``ray_vfl.runtime.timeline``) and the MB metered::

    python benchmarks/splitnn.py --sealing 5 --rows 20000 --depths 32
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import torch

from ray_vfl import Runtime
from ray_vfl.splitnn import InProcessSplitNet, SplitNNConfig, make_fedads_like, train
from ray_vfl.splitnn.experiments import privacy_table

DATA_DIR = None  # $VFL_DATA_DIR if set, then the data shipped in ray_vfl/data/files
ATTACKS = ("norm", "direction", "cluster")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=40_000, help="aligned training rows wanted")
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--depths", type=int, nargs="+", default=[1, 32], help="pipeline depths to measure")
    p.add_argument("--repeats", type=int, default=2, help="timed repetitions (the best is reported)")
    p.add_argument("--json", default=None)
    p.add_argument("--sealing", type=int, default=0, metavar="N",
                   help="measure sealing instead: N fits unsealed and N sealed, alternating (first of --depths)")
    p.add_argument("--defenses", nargs="*", default=None, metavar="DATA",
                   help="measure the defenses on these datasets (fedads_like, ipinyou, credit, open_bandit)")
    p.add_argument("--generator-rows", type=int, default=200_000, help="rows of fedads_like for --defenses")
    p.add_argument("--learning-rate", type=float, default=1e-3, help="Adam learning rate (--defenses)")
    p.add_argument("--top-hidden", type=int, nargs="*", default=[], help="hidden widths of the top model (--defenses; "
                   "none: FedAds' one logistic layer)")
    return p.parse_args(argv)


def _defense_data(name: str, rows: int):
    import ray_vfl.splitnn as splitnn

    if name == "fedads_like":
        return make_fedads_like(rows, seed=0)
    loaders = {"ipinyou": "load_ipinyou", "credit": "load_credit_vfl", "open_bandit": "load_open_bandit"}
    return getattr(splitnn, loaders[name])(DATA_DIR)


def defenses(args) -> int:
    """Every defense against every attack, one-sided and two-sided, on each dataset (a Markdown table)."""
    config = SplitNNConfig(batch_size=args.batch_size, epochs=args.epochs, learning_rate=args.learning_rate,
                           top_hidden=tuple(args.top_hidden))
    runtime = Runtime()
    table = []
    try:
        for name in args.defenses or ["fedads_like", "ipinyou"]:
            table += privacy_table(runtime, _defense_data(name, args.generator_rows), config)
    finally:
        runtime.shutdown()
    head = ["data", "defense", "test AUC", "epsilon"] + [f"{a} {side}" for a in ATTACKS for side in ("1-sided", "2-sided")]
    print("| " + " | ".join(head + ["2-sided chance"]) + " |")
    print("|" + "---|" * (len(head) + 1))
    for row in table:
        cells = [row["dataset"], row["defense"], row["auc"], "" if row["epsilon"] is None else row["epsilon"]]
        cells += [row[f"{a}_leak_auc{side}"] for a in ATTACKS for side in ("", "_two_sided")]
        print("| " + " | ".join(str(c) for c in cells + [row["two_sided_chance"]]) + " |")
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump({"config": config.to_dict(), "rows": table}, fh, indent=2)
    return 0


def sealing(args) -> int:
    """Fits alternating unsealed and sealed: batch-loop seconds, wire seconds, MB (a Markdown table)."""
    import statistics

    data = make_fedads_like(int(args.rows / 0.75) + 200, aligned_fraction=1.0, seed=0).train
    config = SplitNNConfig(batch_size=args.batch_size, epochs=args.epochs, pipeline_depth=args.depths[0])
    runtime = Runtime()
    runs: dict[bool, list[dict]] = {False: [], True: []}
    try:
        runtime.connect(data.party_names)
        train(runtime, data.take(range(min(2048, data.n_rows))), config)  # warm-up: actors up, torch imported
        for r in range(args.sealing):
            for sealed in ((False, True) if r % 2 == 0 else (True, False)):
                runtime._seal_messages = sealed
                runtime.timelines()  # drop what earlier fits measured
                model = train(runtime, data, config)
                wire = sum(end - start for t in runtime.timelines().values()
                           for kind, start, end in t["spans"] if kind == "wire")
                runs[sealed].append({"loop": model.train_seconds, "wire": wire, "mb": model.comm_stats.total_mb,
                                     "load": os.getloadavg()[0]})
                print(f"  {'sealed' if sealed else 'unsealed'}: loop {model.train_seconds:.3f} s, wire {wire:.3f} s, "
                      f"load average {os.getloadavg()[0]:.1f}", flush=True)
    finally:
        runtime._seal_messages = True
        runtime.shutdown()
    med = {s: {k: statistics.median(run[k] for run in runs[s]) for k in runs[s][0]} for s in runs}
    print(f"\nsplit network, {data.n_rows} rows, batch {args.batch_size}, depth {args.depths[0]}: median of "
          f"{args.sealing} fits each, alternating\n")
    print("| | batch loop s (each fit) | wire s (all parties) | MB |\n|---|---|---|---|")
    for s in (False, True):
        each = ", ".join(f"{run['loop']:.2f}" for run in runs[s])
        print(f"| {'sealed' if s else 'unsealed'} | {med[s]['loop']:.3f} ({each}) | {med[s]['wire']:.3f} | {med[s]['mb']:.2f} |")
    print(f"| sealed / unsealed | {(med[True]['loop'] / med[False]['loop'] - 1) * 100:+.1f} % "
          f"| {med[True]['wire'] - med[False]['wire']:+.3f} s | {(med[True]['mb'] / med[False]['mb'] - 1) * 100:+.2f} % |")
    return 0


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.defenses is not None:
        return defenses(args)
    if args.sealing:
        return sealing(args)
    data = make_fedads_like(int(args.rows / 0.75) + 200, aligned_fraction=1.0, seed=0).train  # 3 of 4 weeks are training
    config = SplitNNConfig(batch_size=args.batch_size, epochs=args.epochs)
    samples = data.n_rows * args.epochs
    default_threads = torch.get_num_threads()
    results: dict = {"rows": data.n_rows, "epochs": args.epochs, "batch_size": args.batch_size, "cases": {}}

    def record(name: str, seconds: list[float]) -> None:
        best = min(seconds)
        results["cases"][name] = {"seconds": round(best, 3), "samples_per_s": round(samples / best, 1)}
        print(f"{name:32s} {best:8.2f} s  {samples / best:10.0f} samples/s", flush=True)

    for threads in sorted({1, default_threads}):
        times = [InProcessSplitNet(config, num_threads=threads).fit(data).train_seconds_ for _ in range(args.repeats)]
        record(f"centralized torch ({threads} thread{'s' if threads > 1 else ''})", times)
    torch.set_num_threads(default_threads)

    runtime = Runtime()
    try:
        runtime.connect(data.party_names)
        train(runtime, data.take(range(min(2048, data.n_rows))), config)  # warm-up: start the actors, import torch
        for depth in args.depths:
            cfg = config.replace(pipeline_depth=depth)
            loop, total = [], []
            for _ in range(args.repeats):
                start = time.perf_counter()
                model = train(runtime, data, cfg)
                total.append(time.perf_counter() - start)
                loop.append(model.train_seconds)
            record(f"split on Ray, depth {depth} (loop)", loop)
            record(f"split on Ray, depth {depth} (end to end)", total)
    finally:
        runtime.shutdown()
    cases = results["cases"]
    central = cases[f"centralized torch ({default_threads} thread{'s' if default_threads > 1 else ''})"]["samples_per_s"]
    central_1 = cases["centralized torch (1 thread)"]["samples_per_s"]
    best_split = max(v["samples_per_s"] for k, v in cases.items() if k.endswith("(loop)"))
    results["ratio_vs_central_default_threads"] = round(best_split / central, 3)
    results["ratio_vs_central_1_thread"] = round(best_split / central_1, 3)
    print(f"\nbest split / centralized: {results['ratio_vs_central_default_threads']:.2f}x (default threads), "
          f"{results['ratio_vs_central_1_thread']:.2f}x (1 thread); target >= 0.5x")
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(results, fh, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
