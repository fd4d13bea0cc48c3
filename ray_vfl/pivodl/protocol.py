"""PIVODL (Zhu, Wang, Jin & Liang, "PIVODL: Privacy-preserving vertical federated learning over
distributed labels", IEEE TAI 2021): federated XGBoost when the labels are spread over the clients.

Every client holds some features of every row and the labels of some rows; each row's label is at
exactly one client. There is no label party: every client sums the gradients of its own labelled
rows, in plaintext, and encrypts only sums. Each client is a *source* of its own features and picks,
per node, a random *split client* among the others, which scores its candidates by record numbers
alone. Trees grow level by level; the driver is a coordinator: it calls the clients' actors and hands
each message (a Ray reference) to its receiver, and never fetches one (it sees node ids and
statuses only).

Rounds (``K`` clients; ``s`` a source, ``c`` its split client for a node, ``a``/``e`` random
aggregation and encryption clients; every message through the metered send path):

=========  ====================  ======================================  ============================================
step       sender -> receiver    payload                                 what the receiver learns
=========  ====================  ======================================  ============================================
1, once    every -> every        public key, key-agreement key,          which rows each client labels (the paper's
                                 the set of rows it labels               exchange of labelled ID sets); keys
1, once    s -> every k          s's bins at k's labelled rows, and      s's bin of every feature at k's own rows: what
                                 s's feature spec (top bin, missing?)    the root's per-threshold left sets show
                                                                         anyway. Bins per feature carry the same
                                                                         information as the paper's ID lists per
                                                                         threshold, in far fewer bytes, once.
2, once    every -> a -> e       Enc_e(sum of own labels, own count)     a: nothing (ciphertexts); e: the label mean,
           e -> every            the base score                          which it broadcasts (the base score)
2, tree    every -> a -> e       Enc_e(G_k, H_k) of the root             a: nothing; every client: the root's G, H
           e -> every            G, H of the root
3, level   s -> every            per node: split client c, a random      the candidates' order (record numbers) and
                                 order of s's candidates                 who scores each node
4, level   every k -> s          per node: Enc_c(left sums of k's rows   s: nothing (ciphertexts under c's key), and
                                 per record, then k's node total),       which records k refused (s can count k's rows
                                 refused records                         itself: it knows the node and k's rows)
4, level   s -> c                per node: the sum of every client's     c: the left sums and node totals of all
                                 ciphertexts, dropped records            clients together, per record number; never
                                                                         which feature or threshold a record is
5, level   c -> every            best gain per (source, node)            the best gains (the paper: split clients
                                                                         compare their gains)
5, level   winning c -> s        the records tied with the best gain     s: which of its candidates won
5, level   s -> every            partition of the split nodes' rows,     the instance space of every node (as in the
                                 s's record id                           paper); never the feature or threshold
5, level   s -> winning c        the record chosen among ties            c: which record's sums are the children's
6          holder -> every       leaf weights: exact, or clipped to C    the released weights; under partial DP a
                                 with Gaussian noise (partial DP)        Gaussian mechanism's output per leaf
7          s -> every            left/right of prediction rows at s's    the path of every prediction row
                                 nodes
7          every -> output       Enc-free masked share of the scores     output: the sum (the prediction); one share
                                 (pairwise masks)                        alone is uniform
=========  ====================  ======================================  ============================================

Departures from the paper, and why:

- The paper's split client broadcasts a new child's G and H. Then every client could compute every
  leaf's exact weight, and the partial DP of the leaf weights would protect nothing. Here every
  client appends its node total to its encrypted candidate sums, so a node's totals reach only the
  split clients that score it (who need them for the gains) and, for a child, the split client that
  chose its split.
- Ties: the split client returns every record whose gain ties the best (within ``1e-9``), and the
  source picks the first in the reference order, so that the trees equal the centralized ones
  split for split, thresholds included.
- A node whose best gain passes no split is a leaf held by the split client of its first source;
  every split client that scored it knows its totals (a small leak the view audit lists).

What DP covers: with ``epsilon`` set, each released leaf weight is a Gaussian mechanism on the labels
of the rows in the leaf, given the model so far (each row's label reaches one leaf per tree:
``n_trees`` releases, accounted by :func:`ray_vfl.crypto.gaussian_dp.accounted_epsilon`). It does not
cover the split clients' decrypted gradient sums (the paper's protection there is the instance
threshold), nor the label's influence on the structure of later trees. The exact weights stay at
their holders for prediction, so DP costs accuracy only through the training margins.
"""

from __future__ import annotations

import logging
import os
import secrets
import uuid
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np

from ..crypto.gaussian_dp import accounted_epsilon
from ..data.dataset import VerticalDataset
from ..errors import ConfigError, DataError
from ..runtime.actors import Runtime
from ..runtime.comm import CommStats
from ..runtime.party import load_meta, save_parts, warn_unseen_categories
from ..trees.callbacks import CallbackList, TrainingCallback
from ..trees.checkpoint import Checkpoint
from ..trees.kernels import transform_margin
from .client import Client
from .config import PIVODLConfig

__all__ = ["train", "PIVODLModel"]

log = logging.getLogger(__name__)


class _Calls:
    """The driver's side of the rounds: calls with one reference per message, waits on statuses only."""

    def __init__(self, runtime: Runtime, order: list[str], timeout_s: float) -> None:
        self.runtime, self.order, self.timeout_s = runtime, order, timeout_s

    def each(self, method: str, parties: Sequence[str], args_of, n_messages: int, phase: str) -> dict[str, list]:
        """Call ``method(*args_of(p))`` on every party, expecting a status and ``n_messages`` message
        references back; wait for every status; return each party's message references."""
        out, statuses = {}, []
        for p in parties:
            refs = getattr(self.runtime.actor(p), method).options(num_returns=1 + n_messages).remote(*args_of(p))
            refs = refs if isinstance(refs, list) else [refs]
            statuses.append((p, refs[0]))
            out[p] = refs[1:]
        self.runtime.get(statuses, phase, self.timeout_s)
        return out

    def value(self, method: str, parties: Sequence[str], args_of, phase: str) -> list:
        """Call a method that returns a plain value (statuses, counts, structure) on every party."""
        calls = [(p, getattr(self.runtime.actor(p), method).remote(*args_of(p))) for p in parties]
        return self.runtime.get(calls, phase, self.timeout_s)

    def to(self, receiver: str, sent: dict[str, list], index_of) -> list:
        """The references every other party sent ``receiver`` (``index_of(sender, receiver)`` picks one)."""
        return [sent[p][index_of(p, receiver)] for p in self.order if p != receiver]


def _other_index(order: list[str]):
    """Index of ``receiver`` among ``sender``'s others (messages sent one per other client, in order)."""
    return lambda sender, receiver: [p for p in order if p != sender].index(receiver)


@dataclass
class PIVODLModel:
    """A trained PIVODL model, spread over the client actors: every client holds its lookup table and
    the exact weights of the leaves it holds; the tree shapes are known to every client.

    Example
    -------
    >>> model = train(Runtime(), data, PIVODLConfig(backend="plain"))  # doctest: +SKIP
    >>> model.predict(test)[:3]                                         # doctest: +SKIP
    """

    runtime: Runtime
    order: list[str]
    config: PIVODLConfig
    n_trees: int
    comm_stats: CommStats = field(default_factory=CommStats)
    op_counts: dict[str, int] = field(default_factory=dict)
    op_counts_by_client: dict[str, dict[str, int]] = field(default_factory=dict)
    history: dict[str, list[dict[str, float]]] = field(default_factory=dict)
    epsilon: float | None = None
    best_iteration: int | None = None
    label_party: None = None  # no single label party (what checkpoints record of a federation)

    def _calls(self) -> _Calls:
        return _Calls(self.runtime, self.order, self.config.timeout_s or self.runtime.timeout_s)

    def predict_margin(self, data: VerticalDataset, n_trees: int | None = None, output: str | None = None) -> np.ndarray:
        """Margins by secure prediction (step 7); ``output`` is the client that sums the masked shares
        (the first client by default) and hands the margins to the caller."""
        n_trees = self.n_trees if n_trees is None else int(n_trees)
        if not 1 <= n_trees <= self.n_trees:
            raise ConfigError(f"n_trees must be in [1, {self.n_trees}], got {n_trees}")
        VerticalDataset.ensure(data, "predict")
        if sorted(data.party_names) != sorted(self.order):
            raise DataError(f"prediction data must hold the clients {self.order}, got {data.party_names}")
        output = output or self.order[0]
        if output not in self.order:
            raise ConfigError(f"output must be one of the clients {self.order}, got {output!r}")
        calls, key = self._calls(), f"predict-{uuid.uuid4().hex[:8]}"
        tables = data.tables(self.runtime)
        try:
            reports = calls.value("load_rows", self.order, lambda p: (key, tables[p]), "load prediction rows")
            warn_unseen_categories(self.order, reports, "prediction data")
            _route(calls, self.config, key, n_trees)
            nonce = secrets.token_bytes(16)
            shares = calls.each("prediction_share", self.order, lambda p: (key, nonce, output), 1, "prediction shares")
            refs = [shares[p][0] for p in self.order if p != output]
            margins = self.runtime.get([(output, self.runtime.actor(output).combine_shares.remote(key, refs))],
                                       "prediction")[0]
        finally:
            calls.value("drop_rows", self.order, lambda p: (key,), "cleanup")
        return margins

    def predict(self, data: VerticalDataset, n_trees: int | None = None) -> np.ndarray:
        """Predictions (probabilities for the logistic objective)."""
        return transform_margin(self.config.objective, self.predict_margin(data, n_trees))

    def evaluate(self, data: VerticalDataset, n_trees: int | None = None) -> dict[str, float]:
        """Metrics on labelled ``data`` (logloss and error, or RMSE and MAE): each client scores the rows
        it labels from margins only it receives; the driver gets the totals (AUC needs every label in
        one place and is not computed: use :meth:`predict` where the labels are)."""
        n_trees = self.n_trees if n_trees is None else int(n_trees)
        VerticalDataset.ensure(data, "evaluate")
        calls, key = self._calls(), f"evaluate-{uuid.uuid4().hex[:8]}"
        tables = data.tables(self.runtime)
        try:
            calls.value("load_rows", self.order, lambda p: (key, tables[p]), "load evaluation rows")
            owned = calls.each("eval_labelled", self.order, lambda p: (key,), 1, "evaluation")
            calls.value("take_eval_labelled", self.order, lambda p: (key, calls.to(p, owned, lambda s, r: 0)), "evaluation")
            return _evaluate(calls, self.config, key, n_trees)
        finally:
            calls.value("drop_rows", self.order, lambda p: (key,), "cleanup")

    def save(self, directory: str) -> dict[str, str]:
        """Each client writes ``<directory>/<client>.json``, its own part only (lookup table, tree shapes,
        the exact weights of the leaves it holds); the driver writes ``federation.json``."""
        meta = {"order": self.order, "n_trees": self.n_trees, "config": self.config.to_dict(), "epsilon": self.epsilon}
        return save_parts(self.runtime, self.order, directory, meta, ".json", kind="pivodl")

    @classmethod
    def load(cls, directory: str, runtime: Runtime | None = None, objective: str | None = None) -> "PIVODLModel":
        """One actor per client, each reading its own saved part; the clients agree on fresh mask keys."""
        meta = load_meta(directory, "PIVODLModel.save", kind="pivodl")
        try:
            config, order, n_trees = PIVODLConfig.from_dict(meta["config"]), list(meta["order"]), int(meta["n_trees"])
        except (KeyError, TypeError, ValueError) as exc:
            raise DataError(f"{directory!r} holds no complete PIVODL federation file ({type(exc).__name__}: {exc}); "
                            "save the model again") from exc
        if objective is not None and config.objective != objective:
            raise DataError(f"{directory!r} holds a model with objective {config.objective!r}, not {objective!r}: "
                            "load it with the estimator of that objective")
        runtime = runtime or Runtime(timeout_s=config.timeout_s or 600.0)
        runtime.connect(order)
        for p in order:
            runtime.spawn(p, Client, p, None, [], config, runtime.pool(p, 1), order)
        model = cls(runtime, order, config, n_trees, epsilon=meta.get("epsilon"))
        calls = model._calls()
        calls.value("load_part", order, lambda p: (os.path.join(directory, f"{p}.json"),), "load")
        keys = calls.each("mask_key", order, lambda p: (), 1, "load")
        calls.value("agree", order, lambda p: (calls.to(p, keys, lambda s, r: 0),), "load")
        return model

    def skeleton(self) -> list[dict[int, tuple]]:
        """The tree shapes (owner of every split, holder of every leaf), as every client knows them."""
        return self._calls().value("skeleton", self.order[:1], lambda p: (), "trees")[0]

    def assembled_trees(self, n_features: dict[str, int]) -> list[dict[str, np.ndarray]]:
        """Diagnostic only (tests, benchmarks): the trees put together from every client's private
        part -- split features as global indices (clients' features concatenated in client order, as
        ``n_features`` counts them), bins, missing directions and exact leaf weights, in the centralized
        reference's layout. In a deployment no one can do this: each part stays with its client."""
        parts = self._calls().value("model_part", self.order, lambda p: (), "model parts")
        lookup = {p: part["lookup"] for p, part in zip(self.order, parts)}
        held = {(t, n): w for part in parts for t, n, w in part["held"]}
        offset = dict(zip(self.order, np.cumsum([0] + [n_features[p] for p in self.order])))
        out = []
        for t, tree in enumerate(self.skeleton()):
            size = max(tree) + 1
            arrays = {"left": np.full(size, -1), "right": np.full(size, -1), "feature": np.full(size, -1),
                      "bin": np.full(size, -1), "default_left": np.zeros(size, dtype=bool), "weight": np.zeros(size)}
            for node, kind in tree.items():
                if kind[0] == "split":
                    _, source, record, left, right = kind
                    f, b, dl, _ = lookup[source][record]
                    arrays["left"][node], arrays["right"][node] = left, right
                    arrays["feature"][node], arrays["bin"][node], arrays["default_left"][node] = offset[source] + f, b, dl
                else:
                    arrays["weight"][node] = held[(t, node)]
            out.append(arrays)
        return out

    def label_guess_scores(self) -> dict[str, dict[str, np.ndarray]]:
        """Every client's label-guess scores of the training rows from its own view (the paper's attack).
        For experiments in simulation only: it returns what a curious client could compute."""
        views = self._calls().value("guess_scores", self.order, lambda p: (), "label guess")
        return dict(zip(self.order, views))


def train(runtime: Runtime, data: VerticalDataset, config: PIVODLConfig,
          eval_sets: Mapping[str, VerticalDataset] | None = None, callbacks: Sequence[TrainingCallback] = ()
          ) -> PIVODLModel:
    """Train PIVODL with one actor per client.

    Parameters
    ----------
    runtime : Runtime
        Owns the Ray connection and the actors.
    data : VerticalDataset
        Training rows with labels spread over the clients (``label_owner``), or held by one client.
    config : PIVODLConfig
    eval_sets : mapping of str to VerticalDataset, optional
        Labelled data sets scored after every tree (logloss and error, or RMSE and MAE): each client
        gets the margins of the eval rows it labels, and only masked sums leave it.
    callbacks : sequence of TrainingCallback
        Progress bar, evaluation logging, early stopping, checkpoints
        (:class:`~ray_vfl.trees.checkpoint.Checkpoint`: a run started again resumes from it).

    Example
    -------
    >>> data = vertical_split(frame, 4, label="y", label_owners={"party0": .5, "party1": .5})  # doctest: +SKIP
    >>> model = train(Runtime(), data, PIVODLConfig(backend="plain", n_trees=3))              # doctest: +SKIP
    """
    eval_sets = dict(eval_sets or {})
    _check_input(data, config, eval_sets)
    config.warn_if_weak(stacklevel=2)
    if config.timeout_s is None:
        config = config.replace(timeout_s=runtime.timeout_s)
    order = data.party_names
    runtime.connect(order)
    tables = data.tables(runtime)
    cats = data.categorical
    for p in order:
        workers = config.workers_per_party or max(1, runtime.party_cpus(p) // len(order))
        runtime.spawn(p, Client, p, tables[p], cats.get(p, []), config, runtime.pool(p, workers), order)
    calls = _Calls(runtime, order, config.timeout_s)
    other = _other_index(order)
    # step 1: keys, key-agreement keys, labelled rows; then every source's bins at every client's rows
    hello = calls.each("make_keys", order, lambda p: (), 3, "keys")
    bins = calls.each("meet", order, lambda p: tuple(calls.to(p, hello, lambda s, r: i) for i in range(3)),
                      len(order) - 1, "set-up")
    calls.value("take_bins", order, lambda p: (calls.to(p, bins, other),), "set-up")
    _secure_total(calls, order, "base")
    for key, eval_data in eval_sets.items():
        eval_tables = eval_data.tables(runtime)
        reports = calls.value("load_rows", order, lambda p: (key, eval_tables[p]), f"eval set {key!r}")
        warn_unseen_categories(order, reports, f"eval set {key!r}")
        owned = calls.each("eval_labelled", order, lambda p: (key,), 1, f"eval set {key!r}")
        calls.value("take_eval_labelled", order, lambda p: (key, calls.to(p, owned, lambda s, r: 0)), f"eval set {key!r}")
    model = PIVODLModel(runtime, order, config, 0)
    start = _resume(calls, model, callbacks)
    cb = CallbackList(callbacks)
    cb.before_training(config)
    for t in range(start, config.n_trees):
        _grow_tree(calls, order, config, t)
        model.n_trees = t + 1
        logs = {key: _evaluate(calls, config, key, t + 1) for key in eval_sets}
        for key, metrics in logs.items():
            model.history.setdefault(key, []).append(metrics)
        if cb.after_iteration(t, logs):
            break
    cb.after_training(model)
    if cb.best_iteration is not None:
        model.best_iteration = cb.best_iteration
        model.n_trees = cb.best_iteration + 1
        calls.value("truncate", order, lambda p: (model.n_trees,), "truncate")
    for key in eval_sets:
        calls.value("drop_rows", order, lambda p: (key,), "cleanup")
    records = calls.value("comm_records", order, lambda p: (), "communication statistics")
    model.comm_stats = CommStats(r for rs in records for r in rs)
    counts = calls.value("op_counts", order, lambda p: (), "counts")
    model.op_counts_by_client = dict(zip(order, counts))
    model.op_counts = dict(sum((Counter(c) for c in counts), Counter()))
    if config.dp:
        model.epsilon = accounted_epsilon(config.noise_multiplier, model.n_trees, config.delta)
    return model


def _route(calls: _Calls, config: PIVODLConfig, key: str, n_trees: int) -> None:
    """Move the rows of data set ``key`` through the first ``n_trees`` trees, one level per round."""
    calls.value("route_start", calls.order, lambda p: (key, n_trees), "prediction")
    sent: dict[str, list] = {}
    for depth in range(config.max_depth + 1):
        last = depth == config.max_depth
        sent = calls.each("route_step", calls.order,
                          lambda p: (key, calls.to(p, sent, lambda s, r: 0) if depth else [], depth, not last),
                          1, f"prediction round {depth + 1}")


def _evaluate(calls: _Calls, config: PIVODLConfig, key: str, n_trees: int) -> dict[str, float]:
    """Metrics of eval set ``key`` after ``n_trees`` trees: margins reach each row's label owner only,
    the loss sums reach a random output client masked, and the driver gets the metrics."""
    order = calls.order
    _route(calls, config, key, n_trees)
    other = _other_index(order)
    nonce = secrets.token_bytes(16)
    shares = calls.each("eval_shares", order, lambda p: (key, nonce), len(order) - 1, f"evaluation of {key!r}")
    output, nonce = secrets.choice(order), secrets.token_bytes(16)
    sums = calls.each("eval_sums", order, lambda p: (key, calls.to(p, shares, other), nonce, output), 1,
                      f"evaluation of {key!r}")
    refs = [sums[p][0] for p in order if p != output]
    return calls.value("eval_metrics", [output], lambda p: (refs,), f"evaluation of {key!r}")[0]


def _resume(calls: _Calls, model: PIVODLModel, callbacks: Sequence[TrainingCallback]) -> int:
    """Every client takes up the run's checkpoint, if a :class:`Checkpoint` callback has one; returns
    the number of trees already grown (0 for a new run)."""
    checkpoints = [cb for cb in callbacks if isinstance(cb, Checkpoint)]
    if len(checkpoints) > 1:
        raise ConfigError("give at most one Checkpoint callback (one checkpoint folder per run)")
    if not checkpoints:
        return 0
    trees, files = checkpoints[0].resume_point(model)
    if not trees:
        return 0
    paths = {p: os.path.join(checkpoints[0].directory, files[p]) for p in model.order}
    calls.value("resume_from", model.order, lambda p: (paths[p],), "resume from checkpoint")
    start = min(trees, model.config.n_trees)
    if start < trees:
        calls.value("truncate", model.order, lambda p: (start,), "truncate")
    log.info("resuming from tree %d of %d (%s)", start, model.config.n_trees, checkpoints[0].directory)
    model.n_trees = start
    return start


def _secure_total(calls: _Calls, order: list[str], what: str) -> None:
    """Step 2: every client's sums, added by a random aggregation client, decrypted and broadcast by a
    random encryption client (two different clients, drawn from OS entropy)."""
    a, e = secrets.SystemRandom().sample(order, 2)
    shares = calls.each("total_share", order, lambda p: (what, e, a), 1, f"secure total ({what})")
    summed = calls.each("aggregate", [a], lambda p: ([shares[q][0] for q in order if q != a], e), 1, "aggregation")
    opened = calls.each("open_total", [e], lambda p: (summed[a][0], what), 1, "decryption")
    calls.value("take_total", [p for p in order if p != e], lambda p: (opened[e][0], what), "totals")


def _grow_tree(calls: _Calls, order: list[str], config: PIVODLConfig, tree: int) -> None:
    """One tree, level by level (steps 2-6)."""
    other = _other_index(order)
    calls.value("begin_tree", order, lambda p: (), f"tree {tree + 1}")
    _secure_total(calls, order, "root")
    open_nodes, next_id, leaves = [0], 1, []
    for depth in range(config.max_depth):
        if not open_nodes:
            break
        last = depth + 1 == config.max_depth
        phase = f"tree {tree + 1}, depth {depth}"
        calls.value("set_open_nodes", order, lambda p: (open_nodes,), phase)
        req = calls.each("propose", order, lambda p: (depth, open_nodes), 1, phase)
        sums = calls.each("sum_candidates", order, lambda p: (depth, calls.to(p, req, lambda s, r: 0)), len(order) - 1, phase)
        fwd = calls.each("forward", order, lambda p: (depth, calls.to(p, sums, other)), len(order) - 1, phase)
        best = calls.each("score", order, lambda p: (depth, calls.to(p, fwd, other)), 1, phase)
        won = calls.each("decide", order, lambda p: (depth, calls.to(p, best, lambda s, r: 0)), len(order), phase)
        leaves += [won[p][0] for p in order]
        told = calls.each("apply_wins", order, lambda p: (depth, [won[q][1 + other(q, p)] for q in order if q != p]),
                          len(order), phase)
        moves = calls.value("apply_partitions", order, lambda p: (depth, calls.to(p, told, lambda s, r: 0), next_id), phase)
        children = moves[0]
        chosen = calls.each("apply_chosen", order,
                            lambda p: (depth, [told[q][1 + other(q, p)] for q in order if q != p], children, last),
                            1, phase)
        leaves += [chosen[p][0] for p in order]
        open_nodes = [c for _, left, right in children for c in (left, right)]
        next_id += 2 * len(children)
        if last:
            break
    calls.value("finish_tree", order, lambda p: (leaves,), f"tree {tree + 1}")


def _check_input(data: VerticalDataset, config: PIVODLConfig, eval_sets: Mapping[str, VerticalDataset]) -> None:
    VerticalDataset.ensure(data, "train")
    if not isinstance(config, PIVODLConfig):
        raise ConfigError(f"config must be a PIVODLConfig, got {type(config).__name__}")
    if len(data.party_names) < 2:
        raise DataError(f"PIVODL needs at least two clients (a split client is another client than the source); "
                        f"got {data.party_names}")
    if not data.label_parties:
        raise DataError("no client holds labels; build the dataset with label= (and label_owners= to spread them)")
    data.check_labels(config.objective)
    for key, eval_data in eval_sets.items():
        VerticalDataset.ensure(eval_data, f"eval set {key!r}")
        if eval_data.party_names != data.party_names:
            raise DataError(f"eval set {key!r} must have the training clients {data.party_names}, "
                            f"got {eval_data.party_names}")
        if not eval_data.label_parties:
            raise DataError(f"eval set {key!r} holds no labels; build it with label= as the training data")
        for p in data.party_names:
            if eval_data.columns(p) != data.columns(p):
                raise DataError(f"eval set {key!r}: client {p!r} has columns {eval_data.columns(p)}, "
                                f"training had {data.columns(p)}")
