"""FedAds Table 3's methods on credit: 20 % of the training rows aligned, the rest the label party's alone.

FATE's vertical split of UCI credit default (30,000 rows, every one aligned in the data): 24,000
training rows, of which 4,800 aligned and 19,200 label-party only (``split_aligned``, per seed);
6,000 test rows. Split network: FedAds' widths, batch 128, Adam 2e-3; 1 VanillaVFL epoch then 2
more (alternating for the synthesising methods). Prints one row per method and seed, then the mean and
standard deviation over seeds, and writes both as JSON.

    python benchmarks/unaligned_credit.py --methods vanilla ss-vfl fedhssl oracle --json out.json
    python benchmarks/unaligned_credit.py --methods fedhssl --guidance 0.5 0 --ssl-epochs 5
    python benchmarks/unaligned_credit.py --methods vanilla jpl diffu-at oracle --embedding-dim 16
"""

from __future__ import annotations

import argparse
import json
import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
DATA_DIR = None  # $VFL_DATA_DIR if set, then the data shipped in ray_vfl/data/files


def parse_args(argv=None) -> argparse.Namespace:
    from ray_vfl.splitnn.experiments import UNALIGNED_METHODS

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--methods", nargs="+", default=["vanilla", "fedhssl"], choices=[m for m in UNALIGNED_METHODS
                                                                                     if m != "heuristic"])
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--guidance", type=float, nargs="+", default=[0.5], help="FedHSSL's ssl_guidance values")
    p.add_argument("--ssl-epochs", type=int, default=5, help="SS-VFL's and FedHSSL's pretraining epochs")
    p.add_argument("--embedding-dim", type=int, default=None, help="every feature's embedding width (default: SplitNNConfig's)")
    p.add_argument("--data-dir", default=DATA_DIR)
    p.add_argument("--json", default=None)
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    import ray_vfl.splitnn as splitnn
    from ray_vfl import Runtime
    from ray_vfl.splitnn.experiments import unaligned_row
    from ray_vfl.splitnn.unaligned_protocol import split_aligned

    data = splitnn.load_credit_vfl(args.data_dir)
    config = splitnn.SplitNNConfig(batch_size=128, epochs=2, learning_rate=2e-3)
    if args.embedding_dim is not None:
        config = config.replace(embedding_dim=args.embedding_dim)
    runtime, rows = Runtime(), []
    for seed in args.seeds:
        partial, oracle = split_aligned(data, 0.2, seed)
        for method in args.methods:
            for g in args.guidance if method == "fedhssl" else [None]:
                options = splitnn.UnalignedOptions(ssl_epochs=args.ssl_epochs, ssl_guidance=0.5 if g is None else g)
                row, model = unaligned_row(runtime, partial, oracle, config, options, method, seed)
                if g is not None:
                    row["model"] += f" (guidance {g}, {args.ssl_epochs} epochs)"
                    row["cross_loss"] = [round(x, 4) for x in model.unaligned["hssl_cross_loss"]]
                    row["local_loss"] = [round(x, 4) for x in model.unaligned["hssl_local_loss"]]
                print(row, flush=True)
                rows.append(row)
    report(rows, args.json)
    return 0


def report(rows: list[dict], path: str | None) -> None:
    """Print the mean and standard deviation over seeds per model; write rows and summary to ``path`` as JSON."""
    from ray_vfl.splitnn.experiments import summarize_seeds

    summary = summarize_seeds(rows)
    print("\nmodel | AUC | NLL")
    for s in summary:
        print(f"{s['model']} | {s['auc_mean']:.4f} ± {s['auc_std']:.4f} | {s['nll_mean']:.4f} ± {s['nll_std']:.4f}")
    if path:
        with open(path, "w", encoding="utf-8") as fh:
            json.dump({"rows": rows, "summary": summary}, fh, indent=1)


if __name__ == "__main__":
    sys.exit(main())
