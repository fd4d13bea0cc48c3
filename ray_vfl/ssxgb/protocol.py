"""SSXGB: "Scalable Multi-Party Privacy-Preserving Gradient Tree Boosting over Vertically Partitioned
Dataset with Outsourced Computations" (the paper's Algorithms 2-5): federated XGBoost among many
participants, outsourced to two non-colluding, honest-but-curious servers.

Participants each hold some features of every row; exactly one, the label-bearing participant (LBP),
holds the labels. Server C talks to everyone and computes on BCP ciphertexts under the joint key;
server S holds the BCP master key, talks only to C, and answers the two-server steps
(:mod:`ray_vfl.crypto.two_server.server_s`) on values C has masked. The driver is a coordinator: it calls the
actors and hands each message (a Ray reference) to its receiver, never fetching one; small messages
still come back to it inline, sealed for their receivers (:mod:`ray_vfl.runtime.seal`): ciphertext.
The table below is the BCP engine's; ``SSXGBConfig(engine="lattice")`` (BFV with SIMD slots) runs the
same tree with the roles and messages of :mod:`ray_vfl.ssxgb.lattice_roles` (its own view table).

Rounds (every message through the metered send path). Roles: ``LBP``; ``i``, every other participant
(the LBP sends what every ``i`` sends too: its rows are listed apart); ``C``; ``S``. Under each
``sender -> receiver`` are the message kinds of the row; a row whose learns cell starts with "nothing"
is tested as a distribution that does not depend on the labels (``tests/test_ssxgb_views.py``), and
every other names the attack that measures what it admits
(:func:`ray_vfl.ssxgb.attack.attack_results` runs them all; ``python benchmarks/attacks.py --only ssxgb``).

=========  ======================  =========================================  ==============================================
when       sender -> receiver      payload                                    what the receiver learns
=========  ======================  =========================================  ==============================================
once       S -> C                  BCP public parameters ``(N, g)``           nothing (public parameters, drawn before
           (ssxgb_params)                                                     S sees any message)
once       C -> LBP, i             the same, forwarded                        nothing (public parameters)
           (ssxgb_public_params)
once       i -> C                  user public key ``h_i``                    nothing (a public key, drawn before any
           (ssxgb_user_key)                                                   data is read)
once       LBP -> C                the LBP's user public key                  nothing (a public key)
           (ssxgb_user_key)
once       C -> LBP, i             joint key ``prod h_i``                     nothing (a public key)
           (ssxgb_joint_key)
once       LBP -> C                ``Enc_LBP(base + first-tree margin)``,     nothing (ciphertexts); the LBP's first tree
           (ssxgb_lbp_init)        ``Enc_LBP(label)`` per row                 and base score stay with the LBP
once       C -> S                  the user keys and the joint key; KeyProd:  nothing (public keys; ``m + tau`` uniform
           (ssxgb_s_request)       ``Enc(m + tau)``, ``tau`` uniform mod N    mod N)
every      S -> C                  fresh encryptions by S (key ids for the    nothing (ciphertexts under keys of which C
           (ssxgb_s_reply)         keys)                                      holds no secret)
tree       C -> S                  clamp of the margins into ``[-R, R]`` (2   from LGT, how far the rows' margins lie
           (ssxgb_s_request)       rounds): LGT of ``x`` against ``-R`` and   from ``-R`` and ``R`` (bit lengths, in a
                                   ``R`` (shuffled), Mult                     shuffled order: a multiset of ``|x|``, not
                                                                              whose, not their sign); Mult: masked values
                                                                              [attack: ssxgb.attack_views.lgt_magnitudes]
                                                                              [attack: ssxgb.attack_views.lgt_signs]
tree       C -> S                  Mult / Trunc on masked margins (sigmoid,   nothing (``x + r``, uniform mod ``2^(b +
           (ssxgb_s_request)       7 rounds)                                  kappa)`` for an operand of bound ``b``)
tree       C -> LBP, i             sampled rows (public: shared seed),        nothing (ciphertexts; the row sample is
           (ssxgb_gradients)       ``Enc(g)``, ``Enc(h)`` of those rows       public)
level      i -> C                  per open node, ``Enc`` of the left sums    nothing (ciphertexts, re-randomised) but
           (ssxgb_left_sums)       of ``g`` and ``h`` for each of i's         how many candidates i has
                                   candidates (its sampled features' bins)
level      LBP -> C                the same, of the LBP's candidates          nothing (ciphertexts, re-randomised) but
           (ssxgb_left_sums)                                                  how many candidates the LBP has
level      C -> S                  gain fractions ``d^2``, ``DL DR`` (2 Mult  masked values, and from LGT the bit length
           (ssxgb_s_request)       rounds) and the tournament (3 rounds per   of the masked cross-product differences
                                   halving: Mult, LGT, Mult; selections       (shuffled): a label-skew signal of the
                                   with a public difference are no Mult);     training (the gains shrink with ``p (1 -
                                   TransDec of the winners                    p)``), not a row's label; not a
                                                                              comparison's outcome (uniform sign); each
                                                                              round's size: a function of ``k``, the
                                                                              nodes and the number of participants
                                                                              [attack: ssxgb.attack_views.lgt_outcomes]
                                                                              [attack: ssxgb.attack_views.tournament_balance]
level      C -> LBP, i             per node ``Enc_i(v_i)``: the winner's      owner: which of its candidates won (its
           (ssxgb_win)             local index at its owner, a uniform        split); others: only that the node is not
                                   value of ``Z_N`` at everyone else          theirs (``v_i`` is uniform)
                                                                              [attack: ssxgb.attack.winner_notes_attack]
                                                                              [attack: ssxgb.attack_views.partition_labels]
level      i -> C                  the won node's left branch (all rows),     C: the partition and the owner of the
           (ssxgb_left_branch)     the owner's record number                  split (a record number; no feature, no
                                                                              threshold)
                                                                              [attack: ssxgb.attack_views.partition_labels]
level      LBP -> C                the same, of the nodes the LBP won         C: as from i
           (ssxgb_left_branch)                                                [attack: ssxgb.attack_views.partition_labels]
level      C -> LBP, i             children ids and where each node's rows    the instance space of every node (as in
           (ssxgb_partition)       go (after the previous level)              the paper); never a feature or threshold
                                                                              [attack: ssxgb.attack_views.partition_labels]
leaves     C -> S                  secure division: Newton's iteration for    nothing (masked values, within
           (ssxgb_s_request)       ``1 / D``, ``D = H + lambda`` (Mult,       ``4 k 2^(1 - kappa)`` of independent of
                                   Mult, Trunc per step), then Mult, Trunc    ``D`` per leaf)
                                   (``3 k + 2`` rounds, ``k = 6`` at the
                                   defaults)
predict    i -> C                  left/right of every prediction row at      C: each row's leaf in every federated tree
           (ssxgb_route)           each split i owns                          [attack: ssxgb.attack_views.partition_labels]
predict    LBP -> C                the same, at the LBP's splits              C: as from i
           (ssxgb_route)                                                      [attack: ssxgb.attack_views.partition_labels]
predict    C -> S                  TransDec of ``Enc(sum of leaf weights)``   nothing (``m + tau`` uniform mod N)
           (ssxgb_s_request)       per row
predict    C -> LBP                ``Enc_LBP(sum of leaf weights)`` per row   the margins (it adds its first tree); no
           (ssxgb_prediction)                                                 one else decrypts
                                                                              [attack: ssxgb.attack_views.margin_features]
predict    LBP -> caller           the margins, sealed to a key the caller    the predictions it asked for (the caller is
           (ssxgb_margins)         made for this call                         the LBP's side)
=========  ======================  =========================================  ==============================================

Approximations (details and bounds in :mod:`ray_vfl.ssxgb.approx`): fixed point with ``F`` fractional
bits; every margin clamped into ``[-R, R]`` and the sigmoid replaced there by the least-squares odd cubic
(R = 4: max error 0.0383); every truncation ``|error| < 1`` unit of ``2^-F``; leaf weights by the secure
division within ``1.5 * 2^-F`` of ``-eta G / (H + lambda)`` for the same encrypted sums ``G``, ``H``.
Split choice: exact comparisons of the gain fractions. Departures from the paper: trees are grown full
to ``max_depth`` (no ``gamma`` or ``min_child_weight``: deciding them needs more comparisons); missing
values always go right in the federated trees; the LBP's first tree is plain XGBoost (exact sigmoid,
learned missing direction); every margin is clamped into the cubic's range (the paper lets it leave).
"""

from __future__ import annotations

import contextlib
import logging
import os
import uuid
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..data.dataset import VerticalDataset
from ..errors import ConfigError, DataError
from ..runtime.actors import Runtime
from ..runtime.calls import Calls
from ..runtime.comm import CommStats
from ..runtime.task_pool import TaskPool
from ..runtime.party import load_meta, save_parts, warn_unseen_categories
from ..trees.callbacks import CallbackList, TrainingCallback
from ..trees.checkpoint import checkpoint_of, take_up
from ..trees.kernels import transform_margin
from .config import SSXGBConfig, check_engine_runs
from .participant import Participant
from .server_c import ServerCRole
from .server_s import ServerSRole

__all__ = ["SERVER_C", "SERVER_S", "SSXGBModel", "train"]

log = logging.getLogger(__name__)
SERVER_C, SERVER_S = "server_c", "server_s"


@dataclass
class SSXGBModel:
    """A trained SSXGB model, spread over the actors: the LBP holds the base score and first tree, each
    participant the lookup table of its splits, C the tree structure and the encrypted leaf weights."""

    runtime: Runtime
    order: list[str]
    lbp: str
    config: SSXGBConfig
    n_trees: int
    comm_stats: CommStats = field(default_factory=CommStats)
    op_counts: dict[str, int] = field(default_factory=dict)
    round_trips: int = 0
    history: dict[str, list[dict[str, float]]] = field(default_factory=dict)  # eval set -> metrics per tree
    best_iteration: int | None = None

    def _calls(self) -> Calls:
        return Calls(self.runtime, self.order, self.config.timeout_s or self.runtime.timeout_s)

    def predict_margin(self, data: VerticalDataset, n_trees: int | None = None) -> np.ndarray:
        """Margins by encrypted federated prediction; only the LBP decrypts (and adds its first tree), and
        hands them to the caller (whoever calls this method, on the LBP's side) sealed to a key the
        caller's process made for this call (:meth:`ray_vfl.runtime.actors.Runtime.caller_box`)."""
        n_trees = self.n_trees if n_trees is None else int(n_trees)
        if not 1 <= n_trees <= self.n_trees:
            raise ConfigError(f"n_trees must be in [1, {self.n_trees}], got {n_trees}")
        VerticalDataset.ensure(data, "predict")
        if data.party_names != self.order:
            raise DataError(f"prediction data must hold the participants {self.order}, got {data.party_names}")
        calls, key = self._calls(), f"predict-{uuid.uuid4().hex[:8]}"
        try:
            _load(calls, self.order, key, data)
            margins = _predicted(calls, self.order, self.lbp, key, data.n_rows, n_trees, "open_prediction")
        except BaseException:
            with contextlib.suppress(Exception):  # after a failure the runtime may have ended the actors
                calls.value("drop_rows", self.order, lambda p: (key,), "cleanup")
            raise
        calls.value("drop_rows", self.order, lambda p: (key,), "cleanup")
        return margins

    def predict(self, data: VerticalDataset, n_trees: int | None = None) -> np.ndarray:
        """Probabilities (the exact sigmoid of the decrypted margins, at the LBP)."""
        return transform_margin("binary:logistic", self.predict_margin(data, n_trees))

    def save(self, directory: str) -> dict[str, str]:
        """Each role writes ``<directory>/<role>.json``, its own part only: every participant its binner,
        lookup table and key pair (the LBP also its first tree), C the tree structure, public keys and
        encrypted leaves, S the master key; the driver writes ``federation.json``. In a deployment each
        file is on its role's own machine."""
        meta = {"order": self.order, "lbp": self.lbp, "n_trees": self.n_trees, "config": self.config.to_dict()}
        return save_parts(self.runtime, self.order + [SERVER_C, SERVER_S], directory, meta, ".json", kind="ssxgb")

    @classmethod
    def load(cls, directory: str, runtime: Runtime | None = None) -> SSXGBModel:
        """One actor per role, each reading its own saved part."""
        meta = load_meta(directory, "SSXGBModel.save", kind="ssxgb")
        try:
            config, order = SSXGBConfig.from_dict(meta["config"]), list(meta["order"])
            lbp, n_trees = str(meta["lbp"]), int(meta["n_trees"])
        except (KeyError, TypeError, ValueError) as exc:
            raise DataError(f"{directory!r} holds no complete SSXGB federation file ({type(exc).__name__}: {exc}); "
                            "save the model again") from exc
        runtime = runtime or Runtime(timeout_s=config.timeout_s or 600.0)
        timeout = config.timeout_s or runtime.timeout_s
        runtime.connect(order + [SERVER_C, SERVER_S])
        s_handle = runtime.spawn(SERVER_S, ServerSRole, SERVER_S, config, SERVER_C, _pool(runtime, SERVER_S, config))
        runtime.spawn(SERVER_C, ServerCRole, SERVER_C, config, order, lbp, SERVER_S, s_handle, timeout,
                      _pool(runtime, SERVER_C, config))
        for p in order:
            runtime.spawn(p, Participant, p, None, [], config, lbp, SERVER_C)
        roles = order + [SERVER_C, SERVER_S]
        runtime.introduce(roles, timeout)
        Calls(runtime, [], timeout).value("load_part", roles, lambda p: (os.path.join(directory, f"{p}.json"),), "load")
        return cls(runtime, order, lbp, config, n_trees)

    def structure(self) -> list[dict[int, tuple]]:
        """The federated trees as C knows them: node -> ("split", owner, record, left, right)."""
        return self._calls().value("structure", [SERVER_C], lambda p: (), "structure")[0]

    def assembled_splits(self) -> list[dict[int, tuple]]:
        """Diagnostic only (tests, benchmarks): every federated split as ``node -> (participant index,
        feature, bin, left, right)``, put together from C's structure and each owner's private lookup
        table, in the layout of :class:`~ray_vfl.ssxgb.reference.ReferenceModel`. In a deployment no
        one can do this: each lookup table stays with its owner."""
        lookups = dict(zip(self.order, self._calls().value("lookup_part", self.order, lambda p: (), "lookup")))
        out = []
        for tree in self.structure():
            out.append({node: (self.order.index(owner), *lookups[owner][record], left, right)
                        for node, (_, owner, record, left, right) in tree.items()})
        return out


def train(runtime: Runtime, data: VerticalDataset, config: SSXGBConfig, callbacks: Sequence[TrainingCallback] = (),
          record_view: bool = False, eval_sets: Mapping[str, VerticalDataset] | None = None) -> SSXGBModel:
    """Train SSXGB with one actor per participant, one for server C and one for server S.

    Parameters
    ----------
    runtime : Runtime
    data : VerticalDataset
        At least two participants; exactly one holds the labels (0/1): the LBP.
    config : SSXGBConfig
    callbacks : sequence of TrainingCallback
        Called after every tree with each eval set's metrics (progress bar, logging, early stopping).
    record_view : bool
        Let S keep what it received and decrypted, and C the ciphertexts it received and sent and each
        tree's instance spaces (for audits: ``runtime.actor("server_s").view``, ``...("server_c").view``).
    eval_sets : mapping of str to VerticalDataset, optional
        Scored after every tree (the first tree, the LBP's own, included) by encrypted federated
        prediction: the LBP decrypts the margins and compares them with its own labels of those rows;
        only logloss and AUC leave it.

    Example
    -------
    >>> data = vertical_split(frame, 4, label="y")                                   # doctest: +SKIP
    >>> model = train(Runtime(), data, SSXGBConfig(n_trees=3, max_depth=3))         # doctest: +SKIP
    >>> model.predict(data)[:3]                                                      # doctest: +SKIP
    """
    check_engine_runs(config)
    lbp = _check_input(data, config)
    eval_sets = dict(eval_sets or {})
    for key, eval_data in eval_sets.items():
        VerticalDataset.ensure(eval_data, f"eval set {key!r}")
        if eval_data.party_names != data.party_names or eval_data.label_parties != [lbp]:
            raise DataError(f"eval set {key!r} must hold the participants {data.party_names} with the labels at "
                            f"{lbp!r}, got {eval_data.party_names} with labels at {eval_data.label_parties}")
    config.check_key_policy()
    timeout = config.timeout_s or runtime.timeout_s
    order = data.party_names
    runtime.connect(order + [SERVER_C, SERVER_S])
    tables = data.tables(runtime)
    cats = data.categorical
    s_role, c_role, p_role = _role_classes(config)
    s_handle = runtime.spawn(SERVER_S, s_role, SERVER_S, config, SERVER_C, _pool(runtime, SERVER_S, config),
                             record_view)
    runtime.spawn(SERVER_C, c_role, SERVER_C, config, order, lbp, SERVER_S, s_handle, timeout,
                  _pool(runtime, SERVER_C, config), record_view)
    for p in order:
        runtime.spawn(p, p_role, p, tables[p], cats.get(p, []), config, lbp, SERVER_C)
    runtime.introduce(order + [SERVER_C, SERVER_S], timeout)  # public keys, before the first sealed message
    calls = Calls(runtime, order, timeout)
    C, parts = [SERVER_C], order
    model = SSXGBModel(runtime, order, lbp, config, 1)
    start = _resume(calls, model, callbacks)
    if not start:
        params = calls.each("setup", [SERVER_S], lambda p: (), 1, "BCP setup")[SERVER_S][0]
        fwd = calls.each("take_params", C, lambda p: ([params],), 1, "parameters")[SERVER_C][0]
        keys = calls.each("make_key", parts, lambda p: ([fwd],), 1, "user keys")
        joint = calls.each("register", C, lambda p: ([keys[q][0] for q in order],), 1, "joint key")[SERVER_C][0]
        calls.value("take_joint_key", parts, lambda p: ([joint],), "joint key")
        init = calls.each("lbp_init", [lbp], lambda p: (), 1, "LBP's first tree")[lbp][0]
        calls.value("take_init", C, lambda p: ([init],), "KeyProd")
    model.n_trees = max(1, start)
    for key, eval_data in eval_sets.items():
        _load(calls, order, key, eval_data)

    def scores(n: int) -> dict[str, dict[str, float]]:
        logs = {key: _predicted(calls, order, lbp, key, d.n_rows, n, "score_prediction") for key, d in eval_sets.items()}
        for key, metrics in logs.items():
            model.history.setdefault(key, []).append(metrics)
        return logs

    cb = CallbackList(callbacks)
    cb.before_training(config)
    stop = False if start else cb.after_iteration(0, scores(1))
    for t in range(max(1, start), config.n_trees):
        if stop:
            break
        _grow_tree(calls, order, config, t)
        model.n_trees = t + 1
        stop = cb.after_iteration(t, scores(t + 1))
    cb.after_training(model)
    if cb.best_iteration is not None:  # early stopping: predictions use the trees up to the best one
        model.best_iteration = cb.best_iteration
        model.n_trees = cb.best_iteration + 1
    for key in eval_sets:
        calls.value("drop_rows", order, lambda p, k=key: (k,), "cleanup")
    records = calls.value("comm_records", order + [SERVER_C, SERVER_S], lambda p: (), "communication statistics")
    model.comm_stats = CommStats(r for rs in records for r in rs)
    counts = calls.value("op_counts", order, lambda p: (), "counts")
    model.op_counts = dict(sum((Counter(c) for c in counts), Counter()))
    model.round_trips = calls.value("round_trips", C, lambda p: (), "counts")[0]
    return model


def _role_classes(config: SSXGBConfig) -> tuple[type, type, type]:
    """Server S's, server C's and the participants' classes for ``config.engine``."""
    if config.engine == "lattice":
        from .lattice_roles import LatticeParticipant, LatticeServerSRole
        from .lattice_server_c import LatticeServerCRole
        return LatticeServerSRole, LatticeServerCRole, LatticeParticipant
    return ServerSRole, ServerCRole, Participant


def _pool(runtime: Runtime, server: str, config: SSXGBConfig) -> TaskPool:
    """The server's task pool on its own nodes (``config.workers_per_server``; default one per CPU)."""
    return runtime.pool(server, config.workers_per_server)


@dataclass
class _Roles:
    """What a :class:`~ray_vfl.trees.checkpoint.Checkpoint` saves: every role, the servers included."""

    runtime: Runtime
    order: list[str]
    label_party: str
    config: SSXGBConfig


def _resume(calls: Calls, model: SSXGBModel, callbacks: Sequence[TrainingCallback]) -> int:
    """Every role takes up the run's checkpoint, if a :class:`Checkpoint` callback has one (participants,
    C with the encrypted margins, S with the master key, each from its own file); returns the trees
    already grown (0 for a new run). Feature samples come from fresh entropy after a resume."""
    checkpoint = checkpoint_of(callbacks)
    if checkpoint is None:
        return 0
    roles = _Roles(model.runtime, model.order + [SERVER_C, SERVER_S], model.lbp, model.config)
    trees = take_up(checkpoint, roles)
    if trees > model.config.n_trees:
        raise ConfigError(f"the checkpoint holds {trees} trees, more than n_trees = {model.config.n_trees}")
    if trees:
        log.info("resuming from tree %d of %d (%s)", trees, model.config.n_trees, checkpoint.directory)
    return trees


def _load(calls: Calls, order: list[str], key: str, data: VerticalDataset) -> None:
    """Every participant fetches its columns of ``data`` from its own store (the LBP also the labels)."""
    tables = data.tables(calls.runtime)
    reports = calls.value("load_rows", order, lambda p: (key, tables[p]), f"load {key} rows")
    warn_unseen_categories(order, reports, f"{key} data")


def _predicted(calls: Calls, order: list[str], lbp: str, key: str, n_rows: int, n_trees: int, method: str) -> Any:
    """Encrypted federated prediction of loaded data set ``key`` with the first ``n_trees`` trees: the
    participants' routes, C's encrypted sums, then the LBP's ``method`` (``open_prediction``: margins;
    ``score_prediction``: metrics on its labels)."""
    routes = calls.each("route", order, lambda p: (key, n_trees - 1), 1, f"{key}: routes")
    out = calls.each("predict", [SERVER_C], lambda p: ([routes[q][0] for q in order], n_rows, n_trees - 1), 1,
                     f"{key}: encrypted sums")[SERVER_C][0]
    if method == "score_prediction":
        return calls.value(method, [lbp], lambda p: (key, [out]), f"{key}: prediction")[0]
    box = calls.runtime.caller_box()  # the margins come back sealed to a key made for this call
    sealed = calls.value(method, [lbp], lambda p: (key, [out], box.public_key), f"{key}: prediction")[0]
    return box.open(sealed, "ssxgb_margins", {"n_rows": n_rows}, [lbp])


def _grow_tree(calls: Calls, order: list[str], config: SSXGBConfig, tree: int) -> None:
    """One federated tree (Algorithms 3-5): gradients at C, then level by level, then the leaves."""
    grads = calls.each("begin_tree", [SERVER_C], lambda p: (tree,), 1, f"tree {tree + 1}: gradients")[SERVER_C][0]
    calls.value("take_gradients", order, lambda p: ([grads],), f"tree {tree + 1}: gradients")
    for depth in range(config.max_depth):  # the lambdas run at once, inside each call: no late binding
        phase = f"tree {tree + 1}, depth {depth}"
        sums = calls.each("left_sums", order, lambda p, d=depth: (d,), 1, phase)
        wins = calls.each("find_splits", [SERVER_C], lambda p, d=depth, s=sums: (d, [s[q][0] for q in order]),
                          len(order), phase)[SERVER_C]
        branches = calls.each("take_win", order, lambda p, d=depth, w=wins: (d, [w[order.index(p)]]), 1, phase)
        part = calls.each("apply_branches", [SERVER_C], lambda p, d=depth, b=branches: (d, [b[q][0] for q in order]),
                          1, phase)[SERVER_C][0]
        calls.value("take_partition", order, lambda p, m=part: ([m],), phase)
    calls.value("finish_tree", [SERVER_C], lambda p: (), f"tree {tree + 1}: leaves")


def _check_input(data: VerticalDataset, config: SSXGBConfig) -> str:
    VerticalDataset.ensure(data, "train")
    if not isinstance(config, SSXGBConfig):
        raise ConfigError(f"config must be an SSXGBConfig, got {type(config).__name__}")
    if len(data.party_names) < 2:
        raise DataError(f"SSXGB needs at least two participants (features split over several parties), got "
                        f"{data.party_names}")
    for name in (SERVER_C, SERVER_S):
        if name in data.party_names:
            raise DataError(f"a participant may not be called {name!r}: that is a server's name")
    if data.labels_spread or len(data.label_parties) != 1:
        found = data.label_parties
        raise DataError(f"SSXGB needs exactly one label-bearing participant (LBP), found {len(found)}: {found}; "
                        "give every label to one participant (label_party=...)")
    try:
        data.check_labels("binary:logistic")
    except DataError as exc:
        if "0 or 1" not in str(exc):
            raise
        raise DataError(f"SSXGB is binary, as its paper (its secure sigmoid has no softmax counterpart): {exc}. "
                        "For more classes train SecureBoostClassifier, which takes multi-class labels") from None
    return data.label_parties[0]
