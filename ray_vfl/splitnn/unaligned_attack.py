"""The unaligned-sample split networks' rows of ``benchmarks/attacks.py``: Diffu-AT and FedHSSL, recorded runs,
every attack their view tables name.

The setting: FedAds-like data (:func:`ray_vfl.splitnn.make_fedads_like`, 5% positives, half the training
rows aligned, seed 0), the label party ``bank`` and the non-label party ``shop``, batches of 64, one
pretraining and one alternating (fine-tuning) epoch, each party's view recorded
(:func:`~ray_vfl.splitnn.unaligned_protocol.train_unaligned` with ``record_views=True``). Each attack runs on
the payloads one party recorded for one row of the table:

- the federated embeddings and the synthesis's trained embeddings (:mod:`.unaligned_protocol`), FedHSSL's
  projections ``z_N`` and fine-tuning embeddings (:mod:`.unaligned.hybrid`): the label party's
  :func:`~ray_vfl.splitnn.privacy.attacks.embedding_feature_attack`, knowing 10% of the rows' values of
  each ``shop`` feature (:func:`feature_results`: per feature an indicator, the most common category or
  above the median; the AUC averaged over the features, one- and two-sided, each against random guesses
  on the same rows);
- FedHSSL's projections ``z_L``: the same attack by ``shop`` on the label party's 16 features;
- the embedding gradients: the norm, direction and cluster attacks, per batch against the labels, one-
  and two-sided (:func:`ray_vfl.splitnn.attack.label_results`; the view tables do not name the cluster
  attack: after these epochs it beats chance one-sided at most);
- FedHSSL's secure average: :func:`mean_part_attack` by ``shop`` on the mean it receives and by the label
  party on the mean it computes from the shares, scored as the share of the other party's aggregated
  parameters recovered to 1e-6, against the share its own part (the best guess without the mean: the
  parts start alike) gets right.

Example
-------
>>> data, model, logs, view = unaligned_run(Runtime(), QUICK, "fedhssl")      # doctest: +SKIP
>>> [r.leaks for r in results(data, model, logs, view, "fedhssl", "quick")]   # doctest: +SKIP
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..data.dataset import VerticalDataset
from ..metrics import AttackResult, auc_both_ways
from .attack import label_results
from .data import SplitNNData, make_fedads_like
from .network.config import SplitNNConfig
from .network.models import batch_schedule
from .privacy.attacks import NonLabelView, embedding_feature_attack
from .privacy.views import PartyLog, recorded_events
from .unaligned.diffusion import DiffusionConfig
from .unaligned.hybrid import cross_schedule
from .unaligned.synthesis import UnalignedOptions
from .unaligned_protocol import train_unaligned

__all__ = ["LABEL", "OTHER", "QUICK", "FULL", "unaligned_run", "received_view", "hssl_batches", "mean_part_attack",
           "feature_results", "mean_part_result", "feature_views", "results", "attack_results"]

LABEL, OTHER = "bank", "shop"
QUICK, FULL = 2_400, 20_000  # rows (3 in 4 train, half of them aligned): the tests run QUICK
SSL_EPOCHS = 2


def unaligned_run(runtime, n_rows: int, method: str, seed: int = 0, secret_b: bool = False):
    """``(data, model, logs, view)``: ``method`` (``"diffu-at"``, a baseline, ``"ss-vfl"`` or ``"fedhssl"``) trained
    on ``n_rows`` FedAds-like rows, every party's view recorded, the test rows predicted; ``logs`` maps
    each party to its :class:`~ray_vfl.splitnn.privacy.views.PartyLog`, ``view`` is ``shop``'s
    :class:`~ray_vfl.splitnn.privacy.attacks.NonLabelView` (read now: the actors' next fit resets them).
    ``secret_b``: the same rows with every label flipped and ``shop``'s feature rows permuted (a second
    secret of both parties)."""
    data = make_fedads_like(n_rows, positive_rate=0.05, aligned_fraction=0.5, seed=seed, label_party=LABEL,
                            nonlabel_party=OTHER)
    if secret_b:
        data = _second_secret(data, seed)
    options = UnalignedOptions(method=method, pretrain_epochs=1, ssl_epochs=SSL_EPOCHS,
                               diffusion=DiffusionConfig(steps=20, epochs=5, hidden=(32, 32)))
    config = SplitNNConfig(batch_size=64, learning_rate=3e-3, epochs=1, nonlabel_hidden=(16, 8), label_hidden=(16, 12))
    model = train_unaligned(runtime, data.train, data.label_only, config, options, record_views=True)
    model.predict_proba(data.test)  # the prediction's rows too: embeddings in, probabilities to the caller
    return data, model, {p: recorded_events(runtime, p) for p in (LABEL, OTHER)}, model.recorded_view(OTHER)


def _second_secret(data: SplitNNData, seed: int) -> SplitNNData:
    train = data.train
    shop = train.features[OTHER]
    shop = shop.iloc[np.random.default_rng([seed, 5]).permutation(len(shop))].reset_index(drop=True)
    flipped = VerticalDataset({LABEL: train.features[LABEL], OTHER: shop}, train.ids, 1 - np.asarray(train.label),
                              LABEL, train.categorical)
    only = data.label_only
    label_only = VerticalDataset(dict(only.features), only.ids, 1 - np.asarray(only.label), LABEL, only.categorical)
    return SplitNNData(data.name, flipped, data.test, label_only)


def received_view(log: PartyLog, kind: str, rows_of, way: str = "in", trees=None) -> NonLabelView:
    """The payloads of ``kind`` a party recorded (``way``), as a :class:`NonLabelView` whose embeddings are
    those payloads: ``rows_of(tree)`` gives the rows of each (the batch of the shared schedule, or every
    row for a message about all of them); ``trees`` keeps the messages of those batch numbers only."""
    events = [e for e in log.of_kind(kind, way) if trees is None or e.tree in trees]
    rows = [np.asarray(rows_of(e.tree)) for e in events]
    payloads = [np.asarray(e.payload, dtype=np.float64) for e in events]
    return NonLabelView(log.party, rows=rows, embeddings=payloads, gradients=[np.zeros((len(r), 0)) for r in rows])


def hssl_batches(n_rows: int, config: SplitNNConfig, ssl_epochs: int = SSL_EPOCHS) -> list[np.ndarray]:
    """FedHSSL's cross-party batches over ``n_rows`` aligned rows: the schedule every party derives from the
    shared seed (:meth:`ray_vfl.splitnn.unaligned.hybrid.HybridSSL.hssl_begin`)."""
    return cross_schedule(n_rows, config, ssl_epochs)


def mean_part_attack(mean: np.ndarray, own: np.ndarray, n_parties: int) -> np.ndarray:
    """What a party reads from the mean of ``n_parties`` parties' vectors and its own: the sum of the
    others' (``n_parties * mean - own``); with two parties, the other party's vector itself.

    >>> mean_part_attack(np.array([1.0, 2.0]), np.array([0.5, 3.0]), 2).tolist()
    [1.5, 1.0]
    """
    return n_parties * np.asarray(mean, dtype=np.float64) - np.asarray(own, dtype=np.float64)


def feature_results(frame: pd.DataFrame, categorical, view: NonLabelView, protocol: str, role: str, setting: str,
                    command: str = "", seed: int = 0, repeats: int = 20) -> list[AttackResult]:
    """:func:`~ray_vfl.splitnn.privacy.attacks.embedding_feature_attack` on ``view``, for every column of
    ``frame`` (the attacked party's features, row ``i`` = position ``i``), the attacker knowing 10% of the
    rows' values. Per column it guesses an indicator: for a ``categorical`` column, that the row holds the
    category most common among the known rows, else that its value is above their median. Two rows: the
    AUC of the guesses against the other rows' indicators, averaged over the columns, one-sided and
    two-sided, each against what ``repeats`` random guesses on the same rows score (its mean the chance
    level, three of its standard deviations the margin)."""
    rows = np.unique(np.concatenate(view.rows))
    known = np.random.default_rng(seed).choice(rows, max(len(rows) // 10, 2), replace=False)
    categorical = set(categorical)
    truths, scores = [], []
    for column in frame.columns:
        values = frame[column].to_numpy(dtype=np.float64)
        if column in categorical:
            seen, counts = np.unique(values[known], return_counts=True)
            truth = (values == seen[np.argmax(counts)]).astype(np.float64)
        else:
            truth = (values > np.median(values[known])).astype(np.float64)
        ids, guess = embedding_feature_attack(view, known, truth[known])
        other = ~np.isin(ids, known)
        if 0 < truth[ids[other]].mean() < 1:
            truths.append(truth[ids[other]])
            scores.append(guess[other])
    found = np.mean([auc_both_ways(t, g) for t, g in zip(truths, scores)], axis=0)
    rng = np.random.default_rng([seed, 1])
    null = np.array([np.mean([auc_both_ways(t, rng.random(len(t))) for t in truths], axis=0) for _ in range(repeats)])
    metric = f"AUC of a feature indicator (top category or above median), mean of {len(truths)}"
    where = f"{setting}; knows {len(known)} rows' values"
    return [AttackResult(protocol, role, "embedding_feature_attack", f"{metric}, {side}", float(found[i]),
                         float(null[:, i].mean()), None, where, command, float(3 * null[:, i].std()))
            for i, side in enumerate(("one-sided", "two-sided"))]


def mean_part_result(attacker: PartyLog, victim: PartyLog, setting: str, command: str = "") -> AttackResult:
    """:func:`mean_part_attack` by ``attacker`` on every mean of the FedHSSL aggregation it saw (the non-label
    party receives it, the label party computes it from the shares and sends it): the share of the
    ``victim``'s aggregated parameters recovered to 1e-6, against the share its own part (the best guess
    without the mean: the parts start alike) gets right."""
    way = "in" if attacker.of_kind("hssl_average", "in") else "out"
    means = [np.asarray(e.payload) for e in attacker.of_kind("hssl_average", way)]
    own = [np.asarray(e.payload) for e in attacker.of_kind("hssl_shared_vector", "own")]
    truth = np.concatenate([np.asarray(e.payload) for e in victim.of_kind("hssl_shared_vector", "own")])
    guess = np.concatenate([mean_part_attack(m, o, 2) for m, o in zip(means, own)])
    success = float(np.mean(np.abs(guess - truth) <= 1e-6))
    chance = float(np.mean(np.abs(np.concatenate(own) - truth) <= 1e-6))
    role = "label" if way == "out" else "non-label"
    return AttackResult("FedHSSL", role, "mean_part_attack",
                        f"share of the {'non-label' if role == 'label' else 'label'} party's aggregated parameters "
                        "recovered to 1e-6", success, chance, None,
                        f"{setting}; {len(means)} means of {len(means[0])} values", command, 0.0)


def feature_views(data: SplitNNData, model, logs: dict, method: str) -> dict[str, tuple]:
    """The per-row vectors each feature attack of ``method``'s view table runs on: ``{name: (attacker role,
    attacked party, view)}``, each view the payloads of one row as the receiver recorded them."""
    label_log, other_log = logs[LABEL], logs[OTHER]
    n_rows, cfg = data.train.n_rows, model.config  # cfg: pretraining and alternating epochs
    batches = batch_schedule(n_rows, cfg.batch_size, cfg.epochs, cfg.seed)  # the schedule both parties derive
    out = {"federated embeddings": ("label", OTHER, received_view(label_log, "embedding", lambda t: batches[t],
                                                                  trees=set(range(len(batches)))))}
    if method not in ("ss-vfl", "fedhssl"):  # the synthesis's trained embeddings of every aligned row
        out["trained embeddings (synthesis)"] = ("label", OTHER, received_view(
            label_log, "embedding", lambda t: np.arange(n_rows), trees={-2}))
    if method == "fedhssl":
        cross = hssl_batches(n_rows, cfg)
        out["projections z_L"] = ("non-label", LABEL, received_view(other_log, "ssl_projection", lambda t: cross[t]))
        out["projections z_N"] = ("label", OTHER, received_view(label_log, "ssl_projection", lambda t: cross[t]))
    return out


def results(data: SplitNNData, model, logs: dict, view: NonLabelView, method: str, setting: str,
            command: str = "") -> list[AttackResult]:
    """Every attack the view table of ``method`` names, each on the recorded payloads of its row (and the
    cluster attack, which the tables do not name: see :mod:`.unaligned_protocol`)."""
    protocol = {"fedhssl": "FedHSSL", "diffu-at": "Diffu-AT", "ss-vfl": "SS-VFL"}.get(method, method)
    train = data.train
    out = []
    for name, (role, party, received) in feature_views(data, model, logs, method).items():
        out += feature_results(train.features[party], train.categorical.get(party, []), received, protocol, role,
                               f"{setting}, {name}", command)
    if method == "fedhssl":
        out.append(mean_part_result(logs[OTHER], logs[LABEL], setting, command))
        out.append(mean_part_result(logs[LABEL], logs[OTHER], setting, command))
    return out + label_results(data, model, view, "none", setting, command, protocol=protocol)


def attack_results(runtime, quick: bool = True) -> list[AttackResult]:
    """Diffu-AT and FedHSSL trained on :data:`QUICK` or :data:`FULL` rows, every party's view recorded, every
    attack their view tables name run on it."""
    n_rows = QUICK if quick else FULL
    command = "python benchmarks/attacks.py --only unaligned" + (" --quick" if quick else "")
    out = []
    for method in ("diffu-at", "fedhssl"):
        data, model, logs, view = unaligned_run(runtime, n_rows, method)
        setting = (f"FedAds-like, 5% positives, {data.train.n_rows} aligned + {data.label_only.n_rows} label-only "
                   "training rows, batches of 64")
        out += results(data, model, logs, view, method, setting, command)
    return out
