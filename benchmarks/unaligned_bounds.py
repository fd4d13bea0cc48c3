"""How far a label-side method can get with unaligned rows, and what a batch norm over ``h_N`` costs.

FedAds Table 3's setting on the FedAds-like generator (as ``benchmarks/diffu_at.py``: 60,000 rows, 3,000
users, 20 % of the training rows aligned, batch 128, Adam 2e-3, 3 passes), trained in one process with
the federation's models and seeds (:class:`~ray_vfl.splitnn.network.models.SplitNet`; VanillaVFL and ORACLE
reproduce the federated runs' AUC). Rows:

- ``vanilla`` / ``oracle``: the aligned rows / every training row, 3 epochs.
- ``oracle-stopped``: every row, but the non-label bottom learns from the aligned rows only (its
  gradient is stopped on the others): the true ``h_N`` of every row reaches the top. An upper bound for
  any method in which, as in Diffu-AT, the non-label party trains on the aligned rows alone.
- ``alternating-true``: Diffu-AT's schedule (1 VanillaVFL epoch, then 2 epochs alternating aligned and
  unaligned batches at random, each batch once) with the unaligned rows' *true* ``h_N`` from the live
  non-label bottom, its gradient stopped: Diffu-AT with a perfect synthesiser. ``alternating-true-bn``:
  the same with one batch norm per branch over ``h_N`` (``UnalignedOptions(branch_norm="batchnorm")``).
- ``vanilla-bn`` / ``oracle-bn``: a batch norm over ``h_N`` before the top, nothing else changed.

    python benchmarks/unaligned_bounds.py                       # every row, seeds 0-2
    python benchmarks/unaligned_bounds.py --modes oracle-stopped --seeds 3 4 5
    python benchmarks/unaligned_bounds.py --fidelity            # the sampler, clipped and not

``--fidelity``: after the VanillaVFL pretraining epoch (seed 0), Diffu-AT's diffusion model is fitted on
the aligned rows' ``h_N`` given ``[y ; h_L]`` and samples the unaligned rows' ``h_N``, with and without
``clip_sample``; printed: the mean absolute value of ``h_N``, the spread of the top model's score
``w_N . h_N`` and its shift between positive and negative rows, for the real ``h_N`` of the unaligned rows
(which the label party never sees) and the samples.

The label party could never hold the true ``h_N`` of its unaligned rows: these are diagnostics, not methods.
"""

from __future__ import annotations

import argparse
import json

import numpy as np
import torch
import torch.nn.functional as F

from ray_vfl.metrics import auc, logloss
from ray_vfl.splitnn import SplitNNConfig, make_fedads_like
from ray_vfl.splitnn.network.encoding import FeatureEncoder
from ray_vfl.splitnn.network.models import SplitNet, batch_schedule, make_optimizer
from ray_vfl.splitnn.unaligned.synthesis import branch_sequence
from ray_vfl.splitnn.unaligned_protocol import aligned_mask

MODES = ("vanilla", "oracle", "oracle-stopped", "alternating-true", "alternating-true-bn", "vanilla-bn", "oracle-bn")


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--rows", type=int, default=60_000)
    p.add_argument("--users", type=int, default=3_000)
    p.add_argument("--fidelity", action="store_true", help="the diffusion sampler's fidelity instead of the table")
    p.add_argument("--json", default=None)
    return p.parse_args(argv)


def _schedule(mode: str, aligned: np.ndarray, cfg: SplitNNConfig) -> list[np.ndarray]:
    """Batches of training-row indices: every row shuffled per epoch, or Diffu-AT's
    alternation (one epoch of aligned batches, then per epoch every aligned and unaligned batch once, interleaved)."""
    if not mode.startswith("alternating"):
        return batch_schedule(len(aligned), cfg.batch_size, cfg.epochs, cfg.seed)
    ia, iu = np.flatnonzero(aligned), np.flatnonzero(~aligned)
    plan = [ia[b] for b in batch_schedule(len(ia), cfg.batch_size, 1, cfg.seed)]
    rng = np.random.default_rng([cfg.seed, 7919])
    for epoch in range(1, cfg.epochs):
        fed = [ia[b] for b in batch_schedule(len(ia), cfg.batch_size, 1, cfg.seed * 100 + epoch)]
        local = [iu[b] for b in batch_schedule(len(iu), cfg.batch_size, 1, cfg.seed * 100 + 50 + epoch)]
        for is_fed in branch_sequence(len(fed), len(local), rng):  # Diffu-AT's own interleaving
            plan.append(fed.pop() if is_fed else local.pop())
    return plan


def _network(data, cfg: SplitNNConfig):
    """The federation's network for ``data`` (label party first) and a function encoding a dataset's
    features per party, as the parties' encoders fitted on ``data`` do."""
    order = [data.label_party] + [p for p in data.party_names if p != data.label_party]
    enc = {p: FeatureEncoder(cfg.n_bins, cfg.max_categories).fit(data.features[p], data.categorical.get(p, []), party=p)
           for p in order}
    ids = lambda d: [torch.from_numpy(enc[p].transform(d.features[p], party=p)) for p in order]  # noqa: E731
    return SplitNet(enc[order[0]].vocab_sizes, [enc[p].vocab_sizes for p in order[1:]], cfg), ids


def run(full, mode: str, seed: int) -> dict:
    cfg = SplitNNConfig(batch_size=128, epochs=3, learning_rate=2e-3, seed=seed)
    torch.set_num_threads(1)
    data = full.train
    aligned = aligned_mask(data.n_rows, 0.2, seed)  # the rows split_aligned keeps aligned
    if mode.startswith("vanilla"):  # the aligned rows alone, as split_aligned hands them to VanillaVFL
        data, aligned = data.take(np.flatnonzero(aligned)), np.ones(int(aligned.sum()), dtype=bool)
    net, ids = _network(data, cfg)
    x, y = ids(data), torch.as_tensor(data.label, dtype=torch.float32)
    width = net.nonlabel_bottoms[0].out_width
    bn = torch.nn.ModuleDict({"fed": torch.nn.BatchNorm1d(width), "local": torch.nn.BatchNorm1d(width)})
    use_bn = mode.endswith("-bn")
    optimizer = make_optimizer(list(net.parameters()) + list(bn.parameters()), cfg)
    stop = torch.from_numpy(~aligned) if mode in ("oracle-stopped", "alternating-true", "alternating-true-bn") else None
    for rows in _schedule(mode, aligned, cfg):
        h_l, h_n = net.label_bottom(x[0][rows]), net.nonlabel_bottoms[0](x[1][rows])
        if stop is not None:  # the non-label bottom learns from the aligned rows only
            h_n = torch.where(stop[rows].unsqueeze(1), h_n.detach(), h_n)
        if use_bn:
            h_n = bn["fed" if aligned[rows[0]] or not mode.startswith("alternating") else "local"](h_n)
        loss = F.binary_cross_entropy_with_logits(net.top([h_l, h_n]), y[rows])
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    net.eval(), bn.eval()
    test = ids(full.test)
    with torch.no_grad():
        h_n = net.nonlabel_bottoms[0](test[1])
        p = torch.sigmoid(net.top([net.label_bottom(test[0]), bn["fed"](h_n) if use_bn else h_n])).numpy()
    p = p.astype(np.float64)
    return {"mode": mode, "seed": seed, "auc": round(auc(full.test.label, p), 4), "nll": round(logloss(full.test.label, p), 4)}


def fidelity(full) -> list[dict]:
    """The diffusion model's samples of the unaligned rows' ``h_N`` against their true values (seed 0)."""
    from ray_vfl.splitnn.unaligned.diffusion import ConditionalDiffusion, DiffusionConfig

    cfg = SplitNNConfig(batch_size=128, epochs=1, learning_rate=2e-3, seed=0)
    torch.set_num_threads(1)
    data = full.train
    aligned = aligned_mask(data.n_rows, 0.2, 0)
    ia, iu = np.flatnonzero(aligned), np.flatnonzero(~aligned)
    net, ids = _network(data, cfg)
    x, y = ids(data), torch.as_tensor(data.label, dtype=torch.float32)
    optimizer = make_optimizer(net.parameters(), cfg)
    for b in batch_schedule(len(ia), cfg.batch_size, 1, 0):
        loss = F.binary_cross_entropy_with_logits(net(x[0][ia[b]], [x[1][ia[b]]]), y[ia[b]])
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    with torch.no_grad():
        h_n = {k: net.nonlabel_bottoms[0](x[1][i]).numpy() for k, i in (("a", ia), ("u", iu))}
        h_l = {k: net.label_bottom(x[0][i]).numpy() for k, i in (("a", ia), ("u", iu))}
        w = net.top.linear.weight[0, -h_n["a"].shape[1]:].numpy()
    y_a, y_u = data.label[ia], data.label[iu]

    def stats(name: str, h: np.ndarray) -> dict:
        score = h @ w
        return {"h_N": name, "mean_abs": round(float(np.abs(h).mean()), 3), "score_std": round(float(score.std()), 3),
                "score_shift": round(float(score[y_u == 1].mean() - score[y_u == 0].mean()), 3)}

    rows = [stats("true (unaligned rows)", h_n["u"])]
    for clip in (True, False):
        model = ConditionalDiffusion(DiffusionConfig(clip_sample=clip)).fit(h_n["a"], np.column_stack([y_a, h_l["a"]]))
        rows.append(stats(f"Diffu-AT samples, clip_sample={clip}", model.sample(np.column_stack([y_u, h_l["u"]]))))
    return rows


def main(argv=None) -> int:
    args = parse_args(argv)
    full = make_fedads_like(args.rows, aligned_fraction=1.0, seed=0, n_users=args.users)
    if args.fidelity:
        print("| h_N | mean abs value | spread of the top's score w_N . h_N | its shift, positive - negative |")
        print("|---|---|---|---|")
        for r in fidelity(full):
            print(f"| {r['h_N']} | {r['mean_abs']} | {r['score_std']} | {r['score_shift']} |")
        return 0
    rows = []
    for mode in args.modes:
        for seed in args.seeds:
            rows.append(run(full, mode, seed))
            print(rows[-1], flush=True)
    by = {m: [r["auc"] for r in rows if r["mode"] == m] for m in args.modes}
    base, top = np.mean(by.get("vanilla", [np.nan])), np.mean(by.get("oracle", [np.nan]))
    print(f"\n| model | AUC (mean ± std, {len(args.seeds)} seeds) | NLL | VanillaVFL -> ORACLE gap closed |")
    print("|---|---|---|---|")
    for m, aucs in by.items():
        nll = np.mean([r["nll"] for r in rows if r["mode"] == m])
        gap = (np.mean(aucs) - base) / (top - base) if top > base else float("nan")
        print(f"| {m} | {np.mean(aucs):.4f} ± {np.std(aucs, ddof=1) if len(aucs) > 1 else 0:.4f} | {nll:.4f} | {gap:.2f} |")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(rows, fh, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
