"""Which leaf weights should PIVODL predict with under partial DP? A centralized study, many repeats.

Under partial DP the clients' training margins move by the *released* leaf weights (clipped to C, plus
Gaussian noise), so every later tree is grown on gradients that also carry that noise. Three ways to
predict afterwards, compared on the same trees:

- ``exact``: the holders' exact weights (what ray_vfl did up to the fifteenth session);
- ``clipped``: the exact weights clipped to ``[-C, C]``, without noise (what the holders keep now);
- ``released``: the noisy weights every client received.

The trees come from :func:`ray_vfl.trees.reference.fit_reference` with ``released=`` (the protocol is
lossless, so its trees are these, up to the noise draws), on the bins PIVODL uses, with the sweep's data
split and configuration (``jobs/configs/pivodl_fig15_epsilon.yaml``: 4 clients, 6 trees of depth 6,
32 bins). Plaintext and in one process: seconds per run, so 20 repeats per setting are cheap.

    python benchmarks/pivodl_dp_prediction.py                       # credit and bank, 20 repeats
    python benchmarks/pivodl_dp_prediction.py --datasets bank --repeats 5 --epsilons 0.1 1 4
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))  # jobs/pivodl.py

from jobs.pivodl import load_split, pivodl_config  # noqa: E402
from ray_vfl.crypto.privacy.gaussian_dp import GaussianNoise  # noqa: E402
from ray_vfl.data.binning import PartyBinner  # noqa: E402
from ray_vfl.metrics import auc  # noqa: E402
from ray_vfl.trees.kernels import base_margin  # noqa: E402
from ray_vfl.trees.reference import fit_reference, predict_reference  # noqa: E402

RULES = ("exact", "clipped", "released")


def party_bins(train, test, max_bin: int) -> tuple[np.ndarray, np.ndarray]:
    """Every client's bins (fitted on its training rows), clients' columns side by side."""
    fitted = {p: PartyBinner(max_bin).fit(train.features[p], train.categorical.get(p, []), p) for p in train.party_names}
    return tuple(np.concatenate([fitted[p].transform(d.features[p], p) for p in train.party_names], axis=1)
                 for d in (train, test))


def one_run(dataset: str, clients: int, epsilon: float | None, repeat: int, leaf_clip: float | None = None
            ) -> dict[str, float]:
    """Test accuracy, AUC and the largest kept |weight| of each prediction rule, for one split and noise draw."""
    train, test, objective = load_split(dataset, clients, seed=repeat)
    config = pivodl_config(objective, trees=6, depth=6, epsilon=epsilon)
    if leaf_clip is not None and config.dp:
        config = config.replace(leaf_clip=leaf_clip)
    bins_train, bins_test = party_bins(train, test, config.max_bin)
    base = float(np.clip(train.label.mean(), 1e-6, 1 - 1e-6))
    noise, released = GaussianNoise(), []  # per tree, in the order fit_reference grows them

    def release(tree):
        w = tree.weight
        if config.dp:
            leaf = tree.left < 0
            sigma = config.noise_multiplier * float(config.leaf_sensitivity(np.zeros(1))[0])  # global sensitivity
            w = np.where(leaf, np.clip(w, -config.leaf_clip, config.leaf_clip) + noise.sample(len(w), sigma), 0.0)
        released.append(w)
        return w

    trees = fit_reference(bins_train, train.label, config, base, released=release)
    C = config.leaf_clip if config.dp else np.inf
    weights = {"exact": [t.weight for t in trees], "clipped": [np.clip(t.weight, -C, C) for t in trees],
               "released": released}
    row = {}
    for rule, ws in weights.items():
        model = [type(t)(t.left, t.right, t.feature, t.bin, t.default_left, w) for t, w in zip(trees, ws)]
        margin = predict_reference(model, bins_test, base_margin(objective, base), config.max_bin)
        p = 1.0 / (1.0 + np.exp(-np.clip(margin, -500, 500)))
        row[f"{rule}_acc"] = float(np.mean((p > 0.5) == (test.label == 1)))
        row[f"{rule}_auc"] = auc(test.label, p)
        row[f"{rule}_max_w"] = float(max(np.abs(w).max() for w in ws))
    return row


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--datasets", nargs="+", default=["credit", "bank"], choices=["credit", "bank"])
    p.add_argument("--epsilons", nargs="+", type=float, default=[0.1, 0.3, 1.0, 2.0, 4.0, 16.0, 64.0])
    p.add_argument("--repeats", type=int, default=20)
    p.add_argument("--clients", type=int, default=4)
    p.add_argument("--leaf-clip", type=float, default=None, help="C under DP (default: PIVODL's, 1 for logistic)")
    args = p.parse_args(argv)
    if args.repeats < 1:
        p.error("--repeats must be at least 1")
    if args.leaf_clip is not None and not args.leaf_clip > 0:
        p.error("--leaf-clip must be positive")
    print("| dataset | epsilon | " + " | ".join(f"{r} acc | {r} AUC" for r in RULES) + " | exact max abs(w) |")
    print("|---|---|" + "---|---|" * len(RULES) + "---|")
    for dataset in args.datasets:
        for eps in [*args.epsilons, None]:
            runs = [one_run(dataset, args.clients, eps, r, args.leaf_clip) for r in range(args.repeats)]
            cells = []
            for rule in RULES:
                for key in ("acc", "auc"):
                    v = np.array([r[f"{rule}_{key}"] for r in runs])
                    cells.append(f"{v.mean():.3f} ± {v.std(ddof=1) if len(v) > 1 else 0:.3f}")
            big = np.median([r["exact_max_w"] for r in runs])
            label = "none" if eps is None else f"{eps:g}"
            print(f"| {dataset} | {label} | " + " | ".join(cells) + f" | {big:.1f} |", flush=True)


if __name__ == "__main__":
    main()
