"""SecureBoost (Cheng et al., "SecureBoost: A Lossless Federated Learning Framework", 2019/2021).

One active party holds the labels (and some features); passive parties hold
other features of the same rows. The active party encrypts gradients with its
Paillier key; passive parties sum ciphertexts into their own bins; the active
party decrypts the bin sums and finds every split. Trees grow level by level,
with histogram subtraction: a passive party sums and sends only the smaller
child of each split; the active party derives the sibling from the parent
histogram it decrypted one level up, so siblings cost no ciphertext work.
A passive party may sum through joint cells of groups of its own features
(:mod:`ray_vfl.trees.feature_groups`): fewer ciphertext products, the same sums.
With ciphertexts, it never sums the most populated bin of each feature: the
active party knows every node's gradient sums and derives that bin's sums as
the node's minus the feature's other bins (credit, 4 parties: 9% fewer
products, 6% fewer bin sums compressed, sent and decrypted).

Rounds per tree (``P`` passive parties, ``D`` = max_depth); the active party's
actor runs them with the passive parties' actors (:mod:`.rounds`). The table is
data: ``tests/test_secureboost_views.py`` checks a run's messages against it both
ways, tests each "nothing" row as a distribution independent of the labels, and
runs each named attack (:mod:`.attack`) on the recorded views:

=======  ======================  =================================  ==============================================
round    sender -> receiver      payload                            what the receiver learns
=======  ======================  =================================  ==============================================
once     active -> passive       the Paillier public key            nothing: the key is drawn before any label is
         (public_key)                                               read
once     passive -> active       which (feature, bin) cells hold    which bins of its features are empty, and each
         (histogram_layout)      any training row; with             feature's most populated bin: what the root
                                 ciphertexts, each feature's most   histogram shows anyway (hessian sums are zero
                                 populated bin, never sent: the     in empty cells; in the first tree every row
                                 active party derives it (node      has one hessian, so they are row counts);
                                 sums minus the other cells); with  with enable_categorical, the number of
                                 enable_categorical, the number of  categories (its non-empty cells at the root)
                                 categories of each feature         [attack: secureboost.attack.histogram_bins]
1        active -> passive       Enc(g), Enc(h) per row (packed,    nothing: uniform ciphertexts mod n^2 whatever
         (encrypted_gh)          one ciphertext per row; with       the labels (semantic security)
                                 multi-output trees the row's K
                                 classes' pairs in that one; with
                                 sample weights, of w * g and w * h)
per d    passive -> active       Enc(bin sums) per built node (the  bin sums of g and h of every node (not per
         (encrypted_histograms)  root, then the smaller child of    row; K of each with multi-output trees), the
                                 each split), feature and bin       siblings derived as parent - built; with the
                                                                    rows of each node, the distribution of the
                                                                    passive features over them
                                                                    [attack: secureboost.attack.histogram_bins]
per d    active -> passive       the splits p won (node, p's        which of its own bins won, the children of
         (level_step)            feature, p's bin, record id; for   each split and the instance space of each
                                 a categorical split the bins it    node down to level D - 1 (as in SecureBoost):
                                 sends left, packed bits);          which rows share a node chosen to separate
                                 children of every split; rows      the labels (a categorical split's set follows
                                 going left at nodes others split   from its rows' sides); never a threshold or
                                                                    another party's feature
                                                                    [attack: secureboost.attack.leaf_label_scores]
per d    passive -> active       left/right of the rows of the      the partition of those nodes' rows: each row's
         (partition)             nodes p split                      bin of p's feature is at most or above the
                                                                    split's bin, or in or out of a categorical
                                                                    split's set (bins numbered in an order p drew:
                                                                    never which categories)
                                                                    [attack: secureboost.attack.feature_bounds]
predict  active -> passive       (row, record id) of the rows       which of its records each row reaches, hence
         (route_query)           waiting at p's nodes               (with its answer) the training node it shares
                                                                    [attack: secureboost.attack.route_label_scores]
predict  passive -> active       one bit per query: left or right   the path of each row at p's nodes: bounds on
         (route_answer)                                             its bins of p's features
                                                                    [attack: secureboost.attack.route_feature_bounds]
predict  active -> caller        the margins, sealed to a key the   the predictions it asked for (the caller is the
         (margins)               caller made for this call          label party's side)
=======  ======================  =================================  ==============================================

Multi-class (``num_class`` = K, :mod:`ray_vfl.trees.multiclass`): with one tree per class a round is K
trees of the rounds above, tree k on class k's pairs (each its own ``encrypted_gh``: a row's pairs of
one class cannot be cut out of a ciphertext holding all K, and summing such ciphertexts over tree k's
nodes would hand the active party every class's bin sums over them and fill each compressed
ciphertext with K sums per cell, K times the histogram bytes). With multi-output trees a round is one
tree and one ``encrypted_gh`` whose ciphertexts hold each row's K pairs (``GHPacking(pairs=K)``):
K times fewer encryptions, encrypted bytes and ciphertext products, the histograms as large as the
K trees' (``benchmarks/multiclass.py``).

Prediction (at most ``D`` rounds): the active party sends each passive party
the (row, record id) pairs waiting at its nodes and gets one bit per pair
back; it learns the path, never a threshold. The driver makes one call
per tree; the label party waits for its peers itself, so a level costs one
actor round trip (two with several passive parties that won splits).
"""

from __future__ import annotations

import logging
import os
from collections import Counter
from typing import Mapping, Sequence


from ..crypto import get_backend
from ..crypto.he.mask_reserve import MaskReserve
from ..data.dataset import VerticalDataset
from ..errors import ConfigError, DataError
from ..runtime.actors import Runtime
from ..runtime.comm import CommStats
from ..runtime.party import load_meta, warn_unseen_categories
from ..trees.callbacks import CallbackList, TrainingCallback
from ..trees.checkpoint import checkpoint_of, take_up
from ..trees.config import BoostConfig
from .active import ActiveParty
from .model import FederatedModel
from .passive import PassiveParty

__all__ = ["train", "FederatedModel"]

# What the parties' crypto tasks import; loaded while the label party generates its keys.
_TASK_MODULES = ("ray_vfl.secureboost.label_crypto", "ray_vfl.secureboost.passive", "ray_vfl.crypto.he.paillier",
                 "ray_vfl.crypto.he.ou")

log = logging.getLogger(__name__)


def train(
    runtime: Runtime,
    data: VerticalDataset,
    config: BoostConfig,
    eval_sets: Mapping[str, VerticalDataset] | None = None,
    callbacks: Sequence[TrainingCallback] = (),
    init_model: str | None = None,
) -> FederatedModel:
    """Train SecureBoost on ``data`` with one actor per party.

    Parameters
    ----------
    runtime : Runtime
        Owns the Ray connection and the actors.
    data : VerticalDataset
        Training rows; ``data.label_party`` becomes the active party.
    config : BoostConfig
        Hyper-parameters and the crypto backend.
    eval_sets : mapping of str to VerticalDataset, optional
        Labelled data sets evaluated after every tree (federated prediction).
    callbacks : sequence of TrainingCallback
        Progress bar, evaluation logging, early stopping, checkpoints
        (:class:`~ray_vfl.trees.checkpoint.Checkpoint`: a run started again resumes from it).
    init_model : str, optional
        A folder :meth:`FederatedModel.save` wrote: training continues from that model (its bins,
        split records and trees; each party reads its own part), adding ``config.n_trees`` trees.

    Returns
    -------
    FederatedModel

    Example
    -------
    >>> from ray_vfl import Runtime, BoostConfig, vertical_split, load_credit   # doctest: +SKIP
    >>> data = vertical_split(load_credit(), 2, label="default.payment.next.month")  # doctest: +SKIP
    >>> model = train(Runtime(), data, BoostConfig(n_trees=3, backend="plain"))      # doctest: +SKIP
    >>> multi = BoostConfig(n_trees=3, objective="multi:softprob", num_class=3)      # doctest: +SKIP
    >>> train(Runtime(), iris, multi).predict(iris).shape     # (rows, 3) probabilities   # doctest: +SKIP
    """
    _check_training_input(data, config, eval_sets or {})
    config.warn_if_weak(stacklevel=2)  # a key under 2048 bits, or no encryption: said once per fit
    if config.timeout_s is None:  # the one timeout: the config's if set, else the runtime's
        config = config.replace(timeout_s=runtime.timeout_s)
    order = data.party_names
    active_name = data.label_party
    passive_names = [p for p in order if p != active_name]
    runtime.connect(order)
    pools = {p: runtime.pool(p, config.workers_per_party or _default_workers(runtime, p, passive_names)) for p in order}
    warm = [(p, ref) for p in order for ref in pools[p].warm_up(_TASK_MODULES)] if config.backend != "plain" else []
    cats = data.categorical
    tables = data.tables(runtime)  # references: each party's actor fetches its rows from its own store
    init = _init_parts(init_model, order, active_name)
    active = runtime.spawn(active_name, ActiveParty, active_name, tables[active_name], cats.get(active_name, []),
                           config, pools[active_name], order, init[active_name])
    passives = [(p, runtime.spawn(p, PassiveParty, p, tables[p], cats.get(p, []), config, pools[p], init[p]))
                for p in passive_names]
    runtime.introduce(order, config.timeout_s)  # the parties' public keys, before the first sealed message
    key_msg = active.public_key_message.remote()
    setup = warm + [(active_name, key_msg), (active_name, active.set_peers.remote(dict(passives)))]
    setup += [(p, h.set_public_key.remote(key_msg)) for p, h in passives]
    setup.append((active_name, active.collect_layouts.remote()))
    setup.append((active_name, active.prepare_tables.remote()))
    if config.precompute_masks and get_backend(config.backend).supports_masks:  # the label party's encryptions
        setup.append((active_name, active.set_mask_reserve.remote(runtime.spawn_helper(active_name, "masks", MaskReserve))))
    model = FederatedModel(runtime, order, active_name, config, 0)
    loads = {}  # eval set -> index of its parties' load_rows calls in setup
    for key, eval_data in (eval_sets or {}).items():
        eval_tables = eval_data.tables(runtime)
        loads[key] = len(setup)
        setup += [(p, runtime.actor(p).load_rows.remote(key, eval_tables[p])) for p in order]
        setup.append((active_name, active.set_eval_labels.remote(key)))
    done = runtime.get(setup, "setup", config.timeout_s)
    for key, at in loads.items():
        warn_unseen_categories(order, done[at:at + len(order)], f"eval set {key!r}")
    first = runtime.get([(active_name, active.continue_margins.remote())], "continue", config.timeout_s)[0] if init_model else 0
    end = first + config.n_trees
    model.n_trees = first
    start = _resume(runtime, model, callbacks, end)

    cb = CallbackList(callbacks)
    cb.before_training(config)
    eval_keys = tuple(eval_sets or {})
    for t in range(start, end):
        logs = runtime.get([(active_name, active.grow_tree.remote(t, eval_keys))], f"tree {t + 1}", config.timeout_s)[0]
        model.n_trees = t + 1
        if cb.after_iteration(t, logs):
            break
    cb.after_training(model)
    if cb.best_iteration is not None:
        model.best_iteration = cb.best_iteration
        model.n_trees = cb.best_iteration + 1
        runtime.get([(active_name, active.truncate.remote(model.n_trees))], "truncate", config.timeout_s)
    model.history = runtime.get([(active_name, active.history_snapshot.remote())], "history", config.timeout_s)[0]
    records = runtime.get([(p, runtime.actor(p).comm_records.remote()) for p in order], "communication statistics", config.timeout_s)
    model.comm_stats = CommStats(r for party_records in records for r in party_records)
    counts = runtime.get([(p, runtime.actor(p).op_counts.remote()) for p in order], "operation counts", config.timeout_s)
    model.op_counts = dict(sum((Counter(c) for c in counts), Counter()))
    for key in eval_sets or {}:
        runtime.get([(p, runtime.actor(p).drop_rows.remote(key)) for p in order], "cleanup", config.timeout_s)
    return model


def _init_parts(init_model: str | None, order: list[str], label_party: str) -> dict[str, str | None]:
    """Each party's saved part of the model to continue from (None for every party without one)."""
    if init_model is None:
        return {p: None for p in order}
    meta = load_meta(init_model, "FederatedModel.save", kind="secureboost")
    if sorted(meta.get("order", [])) != sorted(order) or meta.get("label_party") != label_party:
        raise ConfigError(f"the model in {init_model!r} is of parties {meta.get('order')} with label party "
                          f"{meta.get('label_party')!r}; this data has {order} with {label_party!r}")
    return {p: os.path.join(init_model, f"{p}.json") for p in order}


def _resume(runtime: Runtime, model: FederatedModel, callbacks: Sequence[TrainingCallback], end: int) -> int:
    """Have every party take up the run's checkpoint, if a :class:`Checkpoint` callback has one;
    returns the number of trees grown so far (``model.n_trees`` for a new run)."""
    checkpoint = checkpoint_of(callbacks)
    if checkpoint is None:
        return model.n_trees
    trees = take_up(checkpoint, model, after=model.n_trees)
    if trees <= model.n_trees:
        return model.n_trees
    start = min(trees, end)
    if start < trees:  # the checkpoint holds more trees than this run asks for
        label = runtime.actor(model.label_party)
        runtime.get([(model.label_party, label.truncate.remote(start))], "truncate", model.config.timeout_s)
    log.info("resuming from tree %d of %d (%s)", start, end, checkpoint.directory)
    model.n_trees = start
    return start


def _default_workers(runtime: Runtime, party: str, passives: Sequence[str]) -> int:
    """Passive parties sum ciphertexts at the same time: those whose nodes overlap (all of them in a
    one-machine simulation) split those nodes' CPUs; the active party's encryption and decryption run
    while the passive parties wait, on every CPU of its nodes."""
    nodes = runtime.party_nodes(party)
    cpus = max(1, sum(nodes.values()))
    if party not in passives:
        return cpus
    sharing = sum(1 for q in passives if q == party or runtime.party_nodes(q).keys() & nodes.keys())
    return max(1, cpus // sharing)


def _check_training_input(data: VerticalDataset, config: BoostConfig, eval_sets: Mapping[str, VerticalDataset]) -> None:
    VerticalDataset.ensure(data, "train")
    if not isinstance(config, BoostConfig):
        raise ConfigError(f"config must be a BoostConfig, got {type(config).__name__}")
    for role, checked in [("", data)] + [(f"eval set {k!r}: ", e) for k, e in eval_sets.items()]:
        if getattr(checked, "labels_spread", False):  # PIVODL's data: each row's label at one of several parties
            raise DataError(f"{role}labels are spread over parties {checked.label_parties}; SecureBoost needs one "
                            "label party: use PIVODL, or give all labels to one party")
    if data.label_party is None:
        raise DataError("no party holds labels; build the dataset with label= naming the label column")
    data.check_labels(config.objective)  # at the label party for party-held data; the label party checks the bound
    if len(data.party_names) < 2:
        raise DataError("SecureBoost needs the label party and at least one passive party; got one party")
    for key, eval_data in eval_sets.items():
        VerticalDataset.ensure(eval_data, f"eval set {key!r}")
        if eval_data.party_names != data.party_names or eval_data.label_party != data.label_party:
            raise DataError(f"eval set {key!r} must have the training parties {data.party_names} and the same label party")
        try:
            eval_data.check_labels(config.objective)
        except DataError as exc:  # one class: its AUC is undefined and early stopping could not watch it
            raise DataError(f"eval set {key!r}: {exc}") from None
        for p in data.party_names:
            if eval_data.columns(p) != data.columns(p):
                raise DataError(f"eval set {key!r}: party {p!r} has columns {eval_data.columns(p)}, "
                                f"training had {data.columns(p)}")
