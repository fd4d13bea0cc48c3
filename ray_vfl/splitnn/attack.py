"""The split-NN rows of ``benchmarks/attacks.py``: recorded runs with and without defenses, every attack.

The setting: FedAds-like data (:func:`ray_vfl.splitnn.make_fedads_like`, 3% positives, every row
aligned, seed 0), the
label party ``bank`` and the non-label party ``shop``, batches of 64. Per defense one training; the
non-label party's recorded view (:meth:`ray_vfl.splitnn.protocol.SplitNNModel.recorded_view`) feeds
the label attacks (norm, direction, cluster), scored per batch against the labels, one-sided and
two-sided: one row each, the one-sided against 0.5, the two-sided against the level random scores
reach on the same batches, each with a margin of three standard errors of the batches' mean. The
embeddings in that view are the ones the label party received:
:func:`~ray_vfl.splitnn.privacy.attacks.embedding_feature_attack` runs on them (the label party knows
10% of the rows' values of each non-label feature), scored as the AUC of telling the rows above the
feature's median from the others, averaged over the non-label party's 7 features.
"""

from __future__ import annotations

import numpy as np

from ..metrics import AttackResult, auc, auc_both_ways
from .data import make_fedads_like
from .network.config import SplitNNConfig
from .protocol import train
from .privacy.attacks import ATTACKS, cluster_attack, embedding_feature_attack, leak_aucs, two_sided_chance
from .privacy.defenses import GaussianDP, Marvell, MixPro, NoDefense

__all__ = ["attack_results", "recorded_run", "label_results", "feature_result", "QUICK", "FULL"]

LABEL, OTHER = "bank", "shop"
QUICK, FULL = (8_000, 1), (40_000, 2)  # rows (3 in 4 train, the rest test), epochs


def recorded_run(runtime, n_rows: int, epochs: int, defense=None, seed: int = 0):
    """``(data, model, view)``: one training on ``n_rows`` FedAds-like rows, the test rows evaluated and predicted,
    and the non-label party's recorded view."""
    data = make_fedads_like(n_rows, positive_rate=0.03, aligned_fraction=1.0, seed=seed, label_party=LABEL,
                            nonlabel_party=OTHER)
    config = SplitNNConfig(batch_size=64, learning_rate=3e-3, epochs=epochs)
    model = train(runtime, data.train, config, defense=defense)
    model.evaluate(data.test)
    model.predict_proba(data.test)  # the predictions' row too: probabilities sealed to the caller
    return data, model, model.recorded_view(OTHER)


def _margin(scores: list, rows: list, y: np.ndarray, two_sided: bool) -> float:
    """Three standard errors of a per-batch LeakAUC (the spread of the batches' AUCs over their number)."""
    values = np.array([auc(y[r], s) for s, r in zip(scores, rows)])
    values = values[np.isfinite(values)]
    values = np.maximum(values, 1 - values) if two_sided else values
    return float(3 * values.std() / np.sqrt(len(values)))


def label_results(data, model, view, defense_name: str, setting: str, command: str = "",
                  protocol: str = "split NN") -> list[AttackResult]:
    """The label attacks on one recorded view, per batch against the labels: two rows per attack, the
    one-sided LeakAUC against 0.5 and the two-sided one against the level random scores reach on the
    same batches, each with a margin of three standard errors (``protocol`` names the rows)."""
    y = np.asarray(data.train.label)
    chance = two_sided_chance(view.rows, y)
    out = []
    for name, attack in ATTACKS.items():
        scores = attack(view, seed=0) if attack is cluster_attack else attack(view)
        both = leak_aucs(scores, view.rows, y)
        for side, level in (("one_sided", 0.5), ("two_sided", chance)):
            out.append(AttackResult(protocol, "non-label", f"{name}_attack",
                                    f"LeakAUC per batch, {side.replace('_', '-')}", both[side], level, None,
                                    f"{setting}, defense {defense_name}", command,
                                    _margin(scores, view.rows, y, side == "two_sided")))
    return out


def feature_result(data, view, setting: str, command: str = "", seed: int = 0) -> AttackResult:
    """The label party's feature attack, averaged over the non-label party's features (the label party
    knows 10% of the rows' values)."""
    frame = data.train.features[OTHER]
    columns = list(frame.columns)
    rng = np.random.default_rng(seed)
    known = rng.choice(data.train.n_rows, data.train.n_rows // 10, replace=False)
    ones, twos = [], []
    for column in columns:
        truth = frame[column].to_numpy(dtype=np.float64)
        ids, guess = embedding_feature_attack(view, known, truth[known])
        other = ~np.isin(ids, known)
        one, two = auc_both_ways((truth[ids[other]] > np.median(truth)).astype(float), guess[other])
        ones.append(one)
        twos.append(two)
    return AttackResult("split NN", "label", "embedding_feature_attack",
                        f"AUC of feature > median, mean of {len(columns)}", float(np.mean(ones)), 0.5,
                        float(np.mean(twos)), f"{setting}, defense none; knows {len(known)} rows' values", command, 0.02)


def attack_results(runtime, quick: bool = True) -> list[AttackResult]:
    """Train the split network with and without defenses (:data:`QUICK` or :data:`FULL`), each non-label
    view recorded, and run every attack of :mod:`ray_vfl.splitnn.privacy.attacks` on it."""
    n_rows, epochs = QUICK if quick else FULL
    command = "python benchmarks/attacks.py --only splitnn" + (" --quick" if quick else "")
    setting = f"FedAds-like, 3% positives, {epochs} epoch(s) of batches of 64"
    defenses = {"none": NoDefense(), "DP": GaussianDP(), "Marvell": Marvell(), "MixPro": MixPro()}
    rows = []
    for name, defense in defenses.items():
        data, model, view = recorded_run(runtime, n_rows, epochs, defense)
        where = f"{data.train.n_rows} training rows, " + setting
        rows += label_results(data, model, view, name, where, command)
        if name == "none":
            rows.append(feature_result(data, view, where, command))
    return rows
