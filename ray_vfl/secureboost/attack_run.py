"""The SecureBoost rows of ``benchmarks/attacks.py``: one recorded run, every attack of :mod:`.attack`.

The run: the credit data split over two parties (``vertical_split(..., 2, seed=0)``: ``party0`` active,
``party1`` passive), Paillier with 1024-bit keys (the key length changes no view the attacks read). The
passive party knows the labels of 2% of the rows (drawn with seed 0); its guesses are scored on the
others. The active party's guesses of a passive feature are scored as the AUC of telling rows above the
feature's median from the others.
"""

from __future__ import annotations

import numpy as np

from ..data.bundled import load_named
from ..data.splitting import vertical_split
from ..errors import VFLError
from ..metrics import AttackResult, auc_both_ways
from ..trees.config import BoostConfig
from .attack import (
    feature_bounds,
    histogram_bins,
    leaf_label_scores,
    route_feature_bounds,
    route_label_scores,
)
from .protocol import train
from .views import RecordViews, recorded_view

__all__ = ["run", "recorded_run", "results", "QUICK", "FULL"]


def recorded_run(runtime, n_rows: int, n_trees: int, max_depth: int, max_bin: int = 16, seed: int = 0,
                 n_test: int = 1000, labels: np.ndarray | None = None):
    """Train on the first ``n_rows`` credit rows (with ``labels`` instead of theirs, if given) and predict
    the next ``n_test``, every party's view recorded from the first tree on; returns ``(train data, test
    data, model, {party: PartyView})``. ``model.comm_stats`` holds the prediction's messages too."""
    frame, label, _, _ = load_named("credit")
    if labels is not None:
        frame = frame.copy()
        frame.loc[frame.index[:n_rows], label] = np.asarray(labels, dtype=frame[label].dtype)
    data = vertical_split(frame, 2, label=label, seed=seed)
    train_data, test_data = data.take(np.arange(n_rows)), data.take(np.arange(n_rows, n_rows + n_test))
    config = BoostConfig(n_trees=n_trees, max_depth=max_depth, max_bin=max_bin, backend="paillier", key_bits=1024,
                         allow_weak_keys=True)
    model = train(runtime, train_data, config, callbacks=[RecordViews(runtime, data.party_names)])
    model.predict_margin(test_data)
    records = runtime.get([(p, runtime.actor(p).comm_records.remote()) for p in data.party_names], "records")
    model.comm_stats.extend(r for party_records in records for r in party_records)
    return train_data, test_data, model, {p: recorded_view(runtime, p) for p in data.party_names}


QUICK, FULL = (2000, 3, 3), (10_000, 5, 4)  # rows, trees, depth


def run(runtime, quick: bool) -> list[AttackResult]:
    """Record a run (:data:`QUICK` or :data:`FULL`) and score every attack on it."""
    n_rows, n_trees, depth = QUICK if quick else FULL
    command = "python benchmarks/attacks.py --only secureboost" + (" --quick" if quick else "")
    return results(*recorded_run(runtime, n_rows, n_trees, depth), command=command)


def results(data, test, model, views, command: str = "") -> list[AttackResult]:
    """Every attack of :mod:`.attack` on the views of one :func:`recorded_run`, against chance."""
    n_rows, max_bin = data.n_rows, model.config.max_bin
    active, passive = model.label_party, model.passives[0]
    y = np.asarray(data.label, dtype=np.float64)
    setting = (f"credit, {n_rows} rows, {model.n_trees} trees of depth {model.config.max_depth}, {max_bin} bins, "
               "Paillier")
    rows = []

    rng = np.random.default_rng(0)
    known = rng.choice(n_rows, max(20, n_rows // 50), replace=False)
    score = leaf_label_scores(views[passive], n_rows, known, y[known])
    unknown = np.setdiff1d(np.arange(n_rows), known)
    one, two = auc_both_ways(y[unknown], score[unknown])
    rows.append(AttackResult("SecureBoost", "passive", "leaf_label_scores", "label AUC", one, 0.5, two,
                             setting + f"; knows {len(known)} labels", command, 0.02))

    y_test = np.asarray(test.label, dtype=np.float64)
    score = route_label_scores(views[passive], n_rows, known, y[known], test.n_rows)
    one, two = auc_both_ways(y_test, score)
    rows.append(AttackResult("SecureBoost", "passive", "route_label_scores", "label AUC (prediction rows)", one, 0.5,
                             two, setting + f"; knows {len(known)} training labels, {test.n_rows} rows predicted",
                             command, 0.02))

    column, lo, hi = _most_split(views[active], passive, n_rows, max_bin)
    truth = data.features[passive].iloc[:, column].to_numpy(dtype=np.float64)
    above = (truth > np.median(truth)).astype(float)
    one, two = auc_both_ways(above, (lo + hi) / 2)
    name = data.features[passive].columns[column]
    rows.append(AttackResult("SecureBoost", "active", "feature_bounds", f"AUC of {name} > median", one, 0.5, two,
                             setting, command, 0.02))
    guess = histogram_bins(views[active], passive, n_rows, max_bin + 1)[column]
    one, two = auc_both_ways(above, guess)
    rows.append(AttackResult("SecureBoost", "active", "histogram_bins", f"AUC of {name} > median", one, 0.5, two,
                             setting, command, 0.02))
    lo, hi = route_feature_bounds(views[active], passive, test.n_rows, max_bin).get(column, (None, None))
    if lo is not None:
        truth = test.features[passive].iloc[:, column].to_numpy(dtype=np.float64)
        one, two = auc_both_ways((truth > np.median(truth)).astype(float), (lo + hi) / 2)
        rows.append(AttackResult("SecureBoost", "active", "route_feature_bounds", f"AUC of {name} > median "
                                 "(prediction rows)", one, 0.5, two, setting + f", {test.n_rows} rows predicted",
                                 command, 0.02))
    return rows


def _most_split(view, passive: str, n_rows: int, max_bin: int) -> tuple[int, np.ndarray, np.ndarray]:
    """The passive feature whose bounds narrow the most rows, and those bounds."""
    bounds = feature_bounds(view, passive, n_rows, max_bin)
    if not bounds:
        raise VFLError(f"the passive party {passive!r} won no split: nothing to attack; train more trees")
    column = max(bounds, key=lambda f: int(np.count_nonzero((bounds[f][1] - bounds[f][0]) < max_bin - 1)))
    return (column, *bounds[column])
