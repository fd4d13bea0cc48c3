"""Diagnostic: FedHSSL's fine-tuned architecture with its pretraining switched off.

FedHSSL fine-tunes VanillaVFL on each party's two encoders side by side (``ray_vfl.splitnn.unaligned.hybrid``).
To separate what the pretraining adds from what the wider bottom models add, this script runs
``unaligned="fedhssl"`` with ``hybrid_pretrain`` replaced by a no-op (a monkeypatch of the driver's
function, for this diagnostic only): the same architecture, initial weights, data and budget, no
self-supervised step. The settings are `fedads_table3`'s for the generator (200,000 rows, 20 % aligned,
batch 256, Adam 1e-3, 1 + 2 epochs, seeds 0-2) and the credit table's for credit (batch 128, Adam 2e-3).
``--embedding-dim`` changes every feature's embedding width (default: SplitNNConfig's, 8). ``--wide-vanilla`` runs instead
VanillaVFL with bottom outputs as wide as FedHSSL's two encoders side by side (label party 128 + 32,
non-label party 32 + 32), which tells the wider layers apart from the second set of embeddings.

    python benchmarks/fedhssl_ablation.py generator --json out.json
    python benchmarks/fedhssl_ablation.py generator --embedding-dim 16
    python benchmarks/fedhssl_ablation.py generator --wide-vanilla
    python benchmarks/fedhssl_ablation.py credit
"""

from __future__ import annotations

import argparse
import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
from unaligned_credit import report  # noqa: E402  (this folder's benchmark: the same table and JSON)

DATA_DIR = None  # $VFL_DATA_DIR if set, then the data shipped in ray_vfl/data/files


def _no_pretraining(runtime, label_name, label, nonlabel, *args, **kwargs):
    report = {"hssl_rows": 0, "ssl_s": 0.0, "hssl_cross_loss": [0.0], "hssl_local_loss": [0.0]}
    return {p: dict(report) for p in [label_name, *nonlabel]}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("dataset", choices=["generator", "credit"])
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--data-dir", default=DATA_DIR)
    p.add_argument("--json", default=None)
    p.add_argument("--embedding-dim", type=int, default=None)
    p.add_argument("--wide-vanilla", action="store_true", help="VanillaVFL with FedHSSL's output widths instead")
    args = p.parse_args(argv)

    import ray_vfl.splitnn as splitnn
    import ray_vfl.splitnn.unaligned_protocol as unaligned
    from ray_vfl import Runtime
    from ray_vfl.splitnn.experiments import unaligned_row

    unaligned.hybrid_pretrain = _no_pretraining
    if args.dataset == "generator":
        data = splitnn.make_fedads_like(200_000, aligned_fraction=1.0, seed=0, n_users=10_000)
        config = splitnn.SplitNNConfig(batch_size=256, epochs=2, learning_rate=1e-3)
    else:
        data = splitnn.load_credit_vfl(args.data_dir)
        config = splitnn.SplitNNConfig(batch_size=128, epochs=2, learning_rate=2e-3)
    if args.embedding_dim is not None:
        config = config.replace(embedding_dim=args.embedding_dim)
    method, name = "fedhssl", "FedHSSL architecture, no pretraining"
    if args.wide_vanilla:
        width = config.embedding_width
        config = config.replace(label_hidden=(*config.label_hidden[:-1], config.label_hidden[-1] + width),
                                nonlabel_hidden=(*config.nonlabel_hidden[:-1], 2 * width))
        method, name = "vanilla", f"VanillaVFL, bottoms {config.label_hidden} / {config.nonlabel_hidden}"
    runtime, rows = Runtime(), []
    for seed in args.seeds:
        partial, oracle = unaligned.split_aligned(data, 0.2, seed)
        row, _ = unaligned_row(runtime, partial, oracle, config, splitnn.UnalignedOptions(), method, seed)
        row["model"] = f"{name}, embedding_dim {config.embedding_dim}"
        print(row, flush=True)
        rows.append(row)
    report(rows, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
