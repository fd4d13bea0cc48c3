"""PIVODL (Zhu, Wang, Jin & Liang, "PIVODL: Privacy-preserving vertical federated learning over
distributed labels", IEEE TAI 2021): federated XGBoost when the labels are spread over the clients.

Every client holds some features of every row and the labels of some rows; each row's label is at
exactly one client. There is no label party: every client sums the gradients of its own labelled
rows, in plaintext, and encrypts only sums. Each client is a *source* of its own features; per node,
a *split client* among the others scores its candidates by record numbers alone. Trees grow level by
level; the driver is a coordinator: it calls the clients' actors and hands each message (a Ray
reference) to its receiver, and never fetches one (it sees node ids and statuses only), and it deals
the split clients. Small messages come back to it inline all the same; each is sealed for its
receivers (:mod:`ray_vfl.runtime.seal`), so the driver holds their ciphertext only.

Multi-class (``multi:softprob`` / ``multi:softmax``, ``num_class`` classes, labels ``0 .. num_class-1``
at every client): a boosting round grows one tree per class, each through the same steps and
message kinds below; tree ``t`` of a round fits class ``t % num_class``'s softmax gradient pairs of
each client's own rows (taken at the round's start) and its released weights move that class's
margins. Step 2's base exchange is skipped (the base score is 0.5 for every class, XGBoost's), the
prediction shares are ``(rows, num_class)``, and evaluation reports ``mlogloss`` and ``merror``.

Rounds (``K`` clients; ``s`` a source, ``k`` any other client, ``c`` the split client the driver dealt
for ``s`` at a node, ``a``/``e`` random aggregation and encryption clients, ``holder`` a leaf's holder,
``output`` the client that sums prediction shares; every message through the metered send path, its kinds
in parentheses; ``tests/test_pivodl_views.py`` reads this table):

=========  ===========================  ======================================  ================================================
step       sender -> receiver           payload                                 what the receiver learns
=========  ===========================  ======================================  ================================================
1, once    every -> every               public key, key-agreement key,          which rows each client labels (the paper's
           (pivodl_public_key,          the set of rows it labels               exchange of labelled ID sets); public keys
           pivodl_mask_key,                                                     [attack: ray_vfl.pivodl.attack_views.labelled_rows]
           pivodl_labelled_rows)
2          every -> a                   Enc_e(sum of own labels, own count),    nothing: ciphertexts under e's key, uniform
           (pivodl_total_share)         then Enc_e(G_k, H_k) of each root       mod e's n^2 whatever the labels
                                        (weighted: the weighted label sum and
                                        the weights' sum)
2          a -> e                       the sum of every client's               e: every client's label count (once; weighted:
           (pivodl_total_sum)           ciphertexts                             their weighted label sum and weight sum) and each
                                                                                root's G, H [attack: ray_vfl.pivodl.attack_views.label_count]
2          e -> every                   the label mean (the base score), each   the same [attack: ray_vfl.pivodl.attack_views.label_count]
           (pivodl_totals)              root's G, H
3, level   driver -> every              per node, the split client of every     nothing of the data: a random derangement per
                                        source (call arguments)                 node, from the driver's OS entropy
3, level   s -> k                       per node: c, and for each record        k: which of its own rows go left at each record;
           (pivodl_candidate_request)   (fresh numbers, random order, over      no feature, threshold or order, but k can order
                                        the candidates the instance             its rows along one of s's features by set
                                        threshold admits) which of k's          inclusion [attack:
                                        labelled rows of the node go left       ray_vfl.pivodl.attack_views.membership_order];
                                        (a category record: those of one        of a categorical feature, which of its rows
                                        category)                               share a category (disjoint records), never
                                                                                which category
4, level   k -> s                       per node: Enc_c(left sums of k's rows   nothing: ciphertexts under c's key, and which
           (pivodl_candidate_sums)      per record, then k's node total),       records k refused (none from an honest s, which
                                        refused records                         can count k's rows of a set itself)
4, level   s -> c                       per node: the sum of every client's     c: per record number, every client's left sums
           (pivodl_forwarded_sums)      ciphertexts, dropped records, the       and node totals together; every such set, and
                                        group of each category record (one      every difference of two of one node, sums 0 or
                                        group per partition feature, numbered   at least ``instance_threshold`` rows of each
                                        afresh per node)                        client [attack: ray_vfl.pivodl.attack.differential_guesses];
                                                                                of a partition feature (no feature, value or
                                                                                bin): its number of records (categories; the
                                                                                ones of 1 to t - 1 rows of a client pooled),
                                                                                each one's sums (empty ones: 0), so any
                                                                                union's and the missing rows'; each record,
                                                                                the missing rows, every union and its
                                                                                difference with every other set offered hold
                                                                                0 or at least the threshold of each client
                                                                                (:mod:`ray_vfl.pivodl.threshold`);
                                                                                the others' label count in every node it scores
                                                                                [attack: ray_vfl.pivodl.attack_views.node_sums_guess]
5, level   c -> every                   best gain per (source, node)            the best gains (the paper: split clients compare
           (pivodl_best_gains)                                                  them); every client scores a source at every node
                                                                                and so holds every node's totals already; a
                                                                                gain adds the split's children's, which the
                                                                                attack does not invert yet
                                                                                [attack: ray_vfl.pivodl.attack_views.node_sums_guess]
5, level   c -> s                       the records tied with the best gain,    s: which of its candidates won (the split every
           (pivodl_split_won)           and the tied partition cuts: per        client learns from the partition next), and
                                        record left / in the cut's run of       ties; of a partition cut, its category set,
                                        equal sums / not, how many of the run,  and which of its categories have equal sums
                                        the missing side                        where the cut falls among them
                                                                                [attack: ray_vfl.pivodl.attack.label_guess_report]
5, level   s -> every                   partition of the split nodes' rows,     the instance space of every node (as in the
           (pivodl_partition)           s's record id                           paper), never the feature or threshold; with
                                                                                the receiver's own labels, each leaf's label
                                                                                rate [attack: ray_vfl.pivodl.attack.label_guess_report]
5, level   s -> c                       the record (or partition cut) chosen    c: which record's sums are the children's, so
           (pivodl_chosen_record)       among ties                              the children's totals (a held leaf's)
                                                                                [attack: ray_vfl.pivodl.attack_views.node_sums_guess]
6          holder -> every              leaf weights: exact, or clipped to C    the released weights; under partial DP a
           (pivodl_leaf_weights)        with Gaussian noise (partial DP)        Gaussian mechanism's output per leaf
                                                                                [attack: ray_vfl.pivodl.attack.label_guess_report]
7          s -> every                   left/right of prediction rows at s's    the path of every prediction row, hence its
           (pivodl_route_decisions)     nodes                                   released-weight score, as the partitions give
                                                                                it for training rows
                                                                                [attack: ray_vfl.pivodl.attack.label_guess_report]
7          every -> output              masked share of the scores (pairwise    nothing: one share alone is uniform mod 2^64;
           (pivodl_prediction_share,    masks), of eval rows' scores to their   output learns the sum (the prediction, or the
           pivodl_metric_share)         label holders, of eval loss sums        metrics)
7          output -> caller             the margins, sealed to a key the        the predictions it asked for (the caller is
           (pivodl_margins)             caller made for this call               the label holders' side)
=========  ===========================  ======================================  ================================================

Departures from the paper, and why:

- The paper's split client broadcasts a new child's G and H. Then every client could compute every
  leaf's exact weight, and the partial DP of the leaf weights would protect nothing. Here every
  client appends its node total to its encrypted candidate sums, so a node's totals reach only the
  split clients that score it (who need them for the gains) and, for a child, the split client that
  chose its split.
- The paper's source sends every client the instance space (ID list) of every candidate under a
  temporary record number. Here it sends each client only its own labelled rows' membership, per
  node, under fresh record numbers in a random order; the split client learns no feature, threshold
  or candidate order. The instance threshold covers every set a split client decrypts or derives
  (left, right, node) and every difference of two of them (:mod:`ray_vfl.pivodl.threshold`); the
  paper's covers left sets alone, which leaves one bin's sum (adjacent thresholds subtracted) to the
  split client (:func:`~ray_vfl.pivodl.attack.differential_guesses`).
- The paper's sources each pick a random split client; here the driver deals them as a random
  derangement per node (each source's split client still uniform among the others), so that no
  client holds two sources' sums over the same node's rows.
- Ties: the split client returns every record whose gain ties the best (within ``1e-9``), and the
  source picks the first in the reference order, so that the trees equal the centralized ones
  split for split, thresholds included.
- Native categorical splits (``enable_categorical``; the paper splits thresholds only): a feature of
  fewer than ``max_cat_to_onehot`` categories is offered as one candidate per category (one against
  the rest); a bigger one as one record per category, which the split client sorts by leaf weight
  and cuts into prefixes (:mod:`ray_vfl.pivodl.partition`), telling the source the winning set of
  its records. The category values stay in the source's lookup table; prediction routes by the set.
- A node whose best gain passes no split is a leaf held by the split client of its first source;
  every split client that scored it knows its totals (a small leak the view audit lists).
- Multi-class (the paper trains binary labels): one tree per class per round, as XGBoost's
  ``one_output_per_tree``; every sum a split client decrypts is one class's ``G`` and ``H`` over the
  same row sets the instance threshold admits.

What DP covers: with ``epsilon`` set, each released leaf weight is a Gaussian mechanism on the labels
of the rows in the leaf, given the model so far (each row's label reaches one leaf per tree: one
release per tree grown -- ``num_class`` per round with several classes -- early stopping or not, accounted by
:func:`ray_vfl.crypto.privacy.gaussian_dp.accounted_epsilon`). It does not cover the split clients'
decrypted gradient sums (the paper's protection there is the instance threshold), nor the trees'
structure. The partitions (step 5) reach every client and were chosen on
every client's labels, so a client that holds labels reads the other clients' label rates off its own
labels in each leaf: on credit that guess ranks the others' rows with two-sided AUC about 0.77 at every
epsilon from 0.1 to 64, against 0.79 without DP (:mod:`ray_vfl.pivodl.attack`, ``partition``; measured
in ``benchmarks/RESULTS.md``, "PIVODL Table III: label guess under partial DP
(pivodl_table3_label_guess)"). The holders keep the clipped
weights without noise for prediction, so DP costs accuracy through the training margins and the clip
(the exact weights of later trees would correct noise that prediction never sees: see ``_release``).
"""

from __future__ import annotations

import logging
from collections import Counter
from typing import Mapping, Sequence

from ..crypto.privacy.gaussian_dp import accounted_epsilon
from ..data.dataset import VerticalDataset
from ..errors import ConfigError, DataError
from ..runtime.actors import Runtime
from ..runtime.comm import CommStats
from ..runtime.party import warn_unseen_categories
from ..trees.callbacks import CallbackList, TrainingCallback
from ..trees.checkpoint import checkpoint_of, take_up
from .client import Client
from .config import PIVODLConfig
from .model import PIVODLModel
from ..runtime.calls import Calls
from .rounds import evaluate, grow_tree, secure_total

__all__ = ["train", "PIVODLModel"]

log = logging.getLogger(__name__)


def train(runtime: Runtime, data: VerticalDataset, config: PIVODLConfig,
          eval_sets: Mapping[str, VerticalDataset] | None = None, callbacks: Sequence[TrainingCallback] = (),
          record_view: bool = False) -> PIVODLModel:
    """Train PIVODL with one actor per client.

    Parameters
    ----------
    runtime : Runtime
        Owns the Ray connection and the actors.
    data : VerticalDataset
        Training rows with labels spread over the clients (``label_owner``), or held by one client.
    config : PIVODLConfig
    eval_sets : mapping of str to VerticalDataset, optional
        Labelled data sets scored after every round (logloss and error, mlogloss and merror, or RMSE
        and MAE): each client
        gets the margins of the eval rows it labels, and only masked sums leave it.
    callbacks : sequence of TrainingCallback
        Progress bar, evaluation logging, early stopping, checkpoints
        (:class:`~ray_vfl.trees.checkpoint.Checkpoint`: a run started again resumes from it).
    record_view : bool
        Let every client keep the sums it decrypted as a split client, for audits and attacks
        (:meth:`PIVODLModel.recorded_view`, :mod:`ray_vfl.pivodl.attack`).

    Returns
    -------
    PIVODLModel
        With ``epsilon``, under partial DP, accounted over every tree grown (a checkpoint's run
        included): early stopping keeps the best trees, but every grown tree's noisy weights were
        released.

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
        runtime.spawn(p, Client, p, tables[p], cats.get(p, []), config, runtime.pool(p, workers), order,
                      record_view)
    runtime.introduce(order, config.timeout_s)  # the clients' public keys, before the first sealed message
    calls = Calls(runtime, order, config.timeout_s)
    # step 1: keys, key-agreement keys, labelled rows
    hello = calls.each("make_keys", order, lambda p: (), 3, "keys")
    calls.value("meet", order, lambda p: tuple(calls.to(p, hello, lambda s, r: i) for i in range(3)), "set-up")
    if config.trees_per_round == 1:
        secure_total(calls, order, "base")
    else:  # multi-class: base score 0.5 (or the one given) for every class, nothing to exchange
        calls.value("start_margins", order, lambda p: (), "base score")
    for key, eval_data in eval_sets.items():
        eval_tables = eval_data.tables(runtime)
        reports = calls.value("load_rows", order, lambda p: (key, eval_tables[p]), f"eval set {key!r}")
        warn_unseen_categories(order, reports, f"eval set {key!r}")
        owned = calls.each("eval_labelled", order, lambda p: (key,), 1, f"eval set {key!r}")
        calls.value("take_eval_labelled", order, lambda p: (key, calls.to(p, owned, lambda s, r: 0)), f"eval set {key!r}")
    model = PIVODLModel(runtime, order, config, 0)
    start, released = _resume(calls, model, callbacks)
    cb = CallbackList(callbacks)
    cb.before_training(config)
    for t in range(start, config.n_trees):  # rounds: one tree, or one per class
        for k in range(config.trees_per_round):
            grow_tree(calls, order, config, t * config.trees_per_round + k)
        model.n_trees = t + 1
        released = max(released, t + 1)
        logs = {key: evaluate(calls, config, key, t + 1) for key in eval_sets}
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
    if config.dp:  # every grown tree released its noisy weights, kept by early stopping or not
        model.epsilon = accounted_epsilon(config.noise_multiplier, released * config.trees_per_round, config.delta)
    return model


def _resume(calls: Calls, model: PIVODLModel, callbacks: Sequence[TrainingCallback]) -> tuple[int, int]:
    """Every client takes up the run's checkpoint, if a :class:`Checkpoint` callback has one; returns
    the tree to grow next and the number of trees the checkpoint's run grew (0, 0 for a new run)."""
    checkpoint = checkpoint_of(callbacks)
    trees = 0 if checkpoint is None else take_up(checkpoint, model)
    start = min(trees, model.config.n_trees)
    if start < trees:
        calls.value("truncate", model.order, lambda p: (start,), "truncate")
    if trees:
        log.info("resuming from tree %d of %d (%s)", start, model.config.n_trees, checkpoint.directory)
    model.n_trees = start
    return start, trees


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
