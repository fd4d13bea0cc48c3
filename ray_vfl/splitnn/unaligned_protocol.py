"""Split-NN training with the label party's unaligned rows: Diffu-AT (FedAds, Wei et al., SIGIR 2023, Sec. 5).

In real VFL only some of the label party's rows are aligned with the other parties; the rest carry
labels and the label party's features but no federated embedding. Diffu-AT

1. pretrains VanillaVFL on the aligned rows (:func:`ray_vfl.splitnn.train`'s rounds);
2. has the label party learn ``p(h_N | y, h_L)`` with a conditional diffusion model from what it holds
   (:mod:`ray_vfl.splitnn.unaligned.diffusion`) and synthesise ``h_N`` for its unaligned rows;
3. trains alternately a federated branch (aligned rows, both parties) and a local branch (unaligned
   rows with synthetic ``h_N``): shared label-party bottom model and top, the synthetic ``h_N``
   brought to the real ones' scale (``UnalignedOptions.branch_norm``: their per-dimension moments by
   default, or one batch norm per branch), each step's branch drawn with probability proportional to
   its row count; only the federated branch serves predictions. By default (``UnalignedOptions.refresh``) Diffu-AT refits its
   diffusion model and resynthesises the unaligned rows' ``h_N`` at the start of every alternating
   epoch after the first, from the ``h_N`` the label party received in the previous epoch's federated
   steps and the current ``h_L``: the synthetic embeddings follow the non-label bottom model as it
   keeps training, instead of staying those of the pretrained one.

The baselines HeuristicVFL, JPL and FedCVT replace step 2 (:mod:`ray_vfl.splitnn.unaligned.synthesis`). SS-VFL
replaces steps 2 and 3: before step 1 every party pretrains its bottom model alone with SimSiam on all
the rows it holds (:mod:`ray_vfl.splitnn.network.selfsupervised`; the label party's unaligned rows without their
labels, a non-label party's rows PSI left out if it kept them), then VanillaVFL runs every epoch.
FedHSSL replaces them the same way, its pretraining between the parties (:mod:`ray_vfl.splitnn.unaligned.hybrid`:
a cross-party SimSiam over the aligned rows, a local SimSiam guided by it, a secure average of the local
encoders' upper layers). Local, VanillaVFL and the all-aligned ORACLE are
:class:`~ray_vfl.splitnn.network.baselines.InProcessSplitNet` and :func:`~ray_vfl.splitnn.train` (see :func:`ray_vfl.splitnn.experiments.unaligned_table`).

Messages (``P`` non-label parties ``p``, ``n_a`` aligned and ``n_u`` unaligned training rows). The table is
data: ``tests/test_unaligned_views.py`` checks the messages of a Diffu-AT and an SS-VFL run against it both
ways and runs each named attack on the payloads the receiver recorded (no row claims "nothing"). A
``federated`` row is a step with the non-label parties: every batch of the pretraining, and every federated
step of the alternation.

=========  ==================  =================================  ==================================================
phase      sender -> receiver  payload                            what the receiver learns
=========  ==================  =================================  ==================================================
federated  non-label -> label  federated embedding (B, d) of the  p's bottom-model output for the rows, a function
           (embedding)         batch's aligned rows; at           of p's features: with some rows' values known, the
                               prediction, of every row to score  others' are guessed
                                                                  [attack: splitnn.privacy.attacks.embedding_feature_attack]
federated  label -> non-label  d loss / d embedding (B, d),       the gradient of its own output, which leaks the
           (embedding_grad)    wrapped by the defense             labels of the batch's rows (Li et al., 2022); in
                                                                  the alternation the top model has also learned
                                                                  from the unaligned rows
                                                                  [attack: splitnn.privacy.attacks.norm_attack]
                                                                  [attack: splitnn.privacy.attacks.direction_attack]
synthesis  non-label -> label  p's trained embeddings (n_a, d)    p's pretrained model output for every aligned row
           (embedding)         of every aligned row, once (not    at once (the label party received each row's
                               SS-VFL)                            embedding in the last pretraining epoch, from a
                                                                  model a few steps older): as the federated ones
                                                                  [attack: splitnn.privacy.attacks.embedding_feature_attack]
predict    label -> caller     probabilities, sealed to a key     the predictions it asked for (the caller is the
           (splitnn_proba)     the caller made for this call      label party's side)
=========  ==================  =================================  ==================================================

No message carries an unaligned row, a synthetic embedding or the diffusion model: they never leave the label
party, and the refresh adds no message (the label party keeps the ``h_N`` of each aligned row from the
federated step that carried it and refits on them). SS-VFL's self-supervised pretraining sends nothing, and
its alternation is federated steps only. What the table leaves out, because no payload carries it, is timing:
in SS-VFL the wait before the first pretraining batch hints at how long the other parties' local pretraining
took (their row counts); in Diffu-AT the pauses between an alternation's federated steps (the label party's
local steps) hint at ``n_u``, and a longer pause per epoch (refresh) at the synthesis time. The cluster attack on a non-label
party's own embeddings (:mod:`.protocol`'s table) is not named here: after one pretraining and one
alternating epoch it does not beat chance on the tests' 910 aligned rows, and on 7,466 only one-sided
(``benchmarks/RESULTS.md``, "Privacy: attacks on recorded views"). FedHSSL's pretraining between the parties
has its own table (:mod:`.unaligned.hybrid`).
"""

from __future__ import annotations

import logging
import time
from typing import Any, Callable

from ..data.dataset import VerticalDataset
from ..errors import DataError
from ..runtime.actors import Runtime
from ..runtime.comm import CommStats
from .network.config import SplitNNConfig
from .data import SplitNNData
from .privacy.defenses import Defense, NoDefense
from .privacy.views import keep_views
from .network.models import batch_schedule
from .unaligned.hybrid import HybridNonLabelParty, hybrid_pretrain
from .network.parties import NonLabelParty
from .protocol import SplitNNModel, _check_input
from .unaligned.synthesis import UnalignedOptions
from .unaligned.label_party import UnalignedLabelParty

__all__ = ["train_unaligned", "unaligned_rows_of", "own_unaligned_rows", "split_aligned", "aligned_mask"]

log = logging.getLogger(__name__)


def unaligned_rows_of(data: Any, runtime: Runtime, unaligned: Any = None) -> tuple[Any, int | None]:
    """A reference to the label party's unaligned rows, which only its own actor resolves, and their count.

    ``unaligned``: a :class:`VerticalDataset` of the label party alone (e.g. ``SplitNNData.label_only``);
    else the rows PSI left out: ``PartyHeldDataset.unaligned_table`` (``from_files(..., align="psi")``)
    or ``AlignedDataset.unaligned`` (``from_frames(..., align="psi")``).
    """
    label = data.label_party
    if unaligned is not None:
        if not isinstance(unaligned, VerticalDataset) or unaligned.party_names != [label]:
            raise DataError(f"unaligned= must be a VerticalDataset of the label party {label!r} alone "
                            f"(features and labels), got {type(unaligned).__name__}")
        if unaligned.label is None:
            raise DataError("the unaligned rows need their labels (build them with label=)")
        if isinstance(data, VerticalDataset) and unaligned.columns(label) != data.columns(label):
            raise DataError(f"the unaligned rows' columns {unaligned.columns(label)} differ from the aligned rows' "
                            f"{data.columns(label)} of party {label!r}")
        return unaligned.tables(runtime)[label], unaligned.n_rows
    if hasattr(data, "unaligned_table"):  # party-held: the rows stay in the label party's store
        if label not in getattr(data, "unaligned_keys", {}):
            raise DataError("the dataset keeps no unaligned rows; open it with align='psi' (from_files/from_sources) "
                            "or pass unaligned= rows of the label party")
        return data.unaligned_table(label), int(data.unaligned.get(label, 0))
    frames = getattr(data, "unaligned", None)
    if isinstance(frames, dict) and label in frames:  # AlignedDataset (in-process PSI)
        frame = frames[label]
        if len(frame) == 0:
            return None, 0
        label_col = getattr(data, "label_column", None)
        if label_col is None or label_col not in frame.columns:
            raise DataError("the aligned dataset does not name its label column; pass unaligned= rows instead")
        return _party_table(data, runtime, label, frame, frame[label_col].to_numpy(dtype=float)), len(frame)
    raise DataError("Diffu-AT needs the label party's unaligned rows: open the data with align='psi' "
                    "(from_files/from_sources/from_frames) or pass unaligned= rows of the label party")


def own_unaligned_rows(data: Any, runtime: Runtime, party: str) -> Any:
    """A reference to ``party``'s own rows outside the aligned set, which only its actor resolves, or None.

    SS-VFL's non-label parties pretrain on them too: the rows PSI left out of a party-held dataset
    (``align="psi"``) or of an :class:`~ray_vfl.data.dataset.AlignedDataset`; other datasets keep none.
    """
    if hasattr(data, "unaligned_table"):
        return data.unaligned_table(party) if party in getattr(data, "unaligned_keys", {}) else None
    frames = getattr(data, "unaligned", None)
    if isinstance(frames, dict) and party in frames and len(frames[party]):
        return _party_table(data, runtime, party, frames[party])
    return None


def _party_table(data: Any, runtime: Runtime, party: str, frame: Any, labels: Any = None) -> Any:
    """An :class:`AlignedDataset`'s unaligned ``frame`` of ``party`` (its feature columns, with ``labels`` if
    given) as a table reference for that party's actor."""
    rows = VerticalDataset({party: frame[data.columns(party)].reset_index(drop=True)}, frame.index.to_numpy(),
                           labels, party if labels is not None else None, {party: data.categorical.get(party, [])})
    return rows.tables(runtime)[party]


def train_unaligned(
    runtime: Runtime,
    data: VerticalDataset,
    unaligned: Any = None,
    config: SplitNNConfig | None = None,
    options: UnalignedOptions | None = None,
    defense: Defense | None = None,
    on_window: Callable[[str, int], None] | None = None,
    record_views: bool = False,
) -> SplitNNModel:
    """Train a split network on the aligned rows of ``data`` and the label party's unaligned rows.

    Parameters
    ----------
    runtime : Runtime
    data : VerticalDataset or PartyHeldDataset
        Aligned training rows (``data.label_party`` holds the labels).
    unaligned : VerticalDataset, optional
        The label party's unaligned rows; default: the rows PSI left out of ``data`` (``align="psi"``).
    config : SplitNNConfig
        The network; ``epochs`` counts the alternating epochs (the pretraining's are in ``options``).
    options : UnalignedOptions
        Method (``diffu-at``, ``heuristic``, ``jpl``, ``fedcvt``, ``ss-vfl``, ``fedhssl``), pretraining epochs,
        diffusion model.
    defense : Defense
        Wraps the gradients the label party sends, in both phases.
    on_window : callable, optional
        Called with the phase and the steps done after every window of ``config.pipeline_depth`` steps.
    record_views : bool
        Every party's actor keeps each payload it opens and sends, from the first message on
        (:func:`ray_vfl.splitnn.privacy.views.recorded_events` reads them): for the view tests and
        :mod:`ray_vfl.splitnn.unaligned_attack`, never needed to train.

    Returns
    -------
    SplitNNModel
        ``model.unaligned`` reports the synthesis (method, rows, diffusion loss, embeddings per second)
        and the alternation (steps, federated steps, ``refreshes``: resyntheses during it, with the last
        one's diffusion loss as ``refresh_diffusion_loss_*``).

    Example
    -------
    >>> data = make_fedads_like(20_000, seed=0)                                        # doctest: +SKIP
    >>> model = train_unaligned(Runtime(), data.train, data.label_only, SplitNNConfig())  # doctest: +SKIP
    >>> model.evaluate(data.test)                                                       # doctest: +SKIP
    """
    config = config or SplitNNConfig()
    options = options or UnalignedOptions()
    defense = defense if defense is not None else NoDefense()
    if not isinstance(options, UnalignedOptions):
        raise DataError(f"options must be UnalignedOptions, got {type(options).__name__}")
    if isinstance(data, VerticalDataset) and data.n_rows < 2:  # (a party-held dataset cannot be empty)
        raise DataError(f"Diffu-AT needs aligned rows to learn the federated embeddings from (at least 2); "
                        f"got {data.n_rows}: do the parties share any IDs?")
    _check_input(data, config, defense)
    if config.timeout_s is None:
        config = config.replace(timeout_s=runtime.timeout_s)
    label_name = data.label_party
    nonlabel = [p for p in data.party_names if p != label_name]
    runtime.connect(data.party_names)
    unaligned_ref, n_unaligned = unaligned_rows_of(data, runtime, unaligned)
    if n_unaligned is not None and n_unaligned < 1:
        raise DataError(f"party {label_name!r} has no unaligned rows; Diffu-AT needs label-party rows outside the "
                        "aligned set (use ray_vfl.splitnn.train for aligned rows only)")
    # Both parties build the shared schedule over pretraining + alternating epochs of the aligned rows.
    total = config.replace(epochs=options.pretrain_epochs + config.epochs)
    defense = defense.for_releases(total.epochs * len(nonlabel))  # each aligned batch once per epoch, both phases
    n_pretrain = len(batch_schedule(data.n_rows, config.batch_size, options.pretrain_epochs, config.seed))
    cats = data.categorical
    tables = data.tables(runtime)
    label = runtime.spawn(label_name, UnalignedLabelParty, label_name, tables[label_name], unaligned_ref,
                          cats.get(label_name, []), total, nonlabel, defense, options, n_pretrain)
    role = HybridNonLabelParty if options.method == "fedhssl" else NonLabelParty
    handles = [runtime.spawn(p, role, p, tables[p], cats.get(p, []), total, label_name, i) for i, p in enumerate(nonlabel)]
    runtime.get([(p, h.ping.remote()) for p, h in zip([label_name] + nonlabel, [label] + handles)], "setup", total.timeout_s)
    runtime.introduce([label_name] + nonlabel, total.timeout_s)  # public keys, before the first sealed message
    runtime.get([(label_name, label.set_peers.remote(dict(zip(nonlabel, handles))))], "setup", total.timeout_s)
    if record_views:
        runtime.get([(p, h.__ray_call__.remote(keep_views)) for p, h in zip([label_name] + nonlabel, [label] + handles)],
                    "record views", total.timeout_s)

    start = time.perf_counter()
    nonlabel_ssl = {}
    if options.method == "ss-vfl":  # SS-VFL: every party pretrains its bottom alone, in parallel; no message
        others = [own_unaligned_rows(data, runtime, p) for p in nonlabel]
        reports = runtime.get([(label_name, label.self_supervise.remote(options.ssl_epochs, options.ssl_mask_rate))]
                              + [(p, h.self_supervise.remote(options.ssl_epochs, options.ssl_mask_rate, o))
                                 for p, h, o in zip(nonlabel, handles, others)],
                              "self-supervised pretraining", total.timeout_s)
        nonlabel_ssl = dict(zip(nonlabel, reports[1:]))
        for party, rep in zip([label_name] + nonlabel, reports):
            log.info("ss-vfl: %s pretrained on %d rows in %.1f s (SimSiam loss %.3f -> %.3f)", party, rep["ssl_rows"],
                     rep["ssl_s"], rep["ssl_loss_first"], rep["ssl_loss_last"])
    elif options.method == "fedhssl":  # FedHSSL: cross-party SSL, local SSL and aggregation, between the actors
        others = [own_unaligned_rows(data, runtime, p) for p in nonlabel]
        reports = hybrid_pretrain(runtime, label_name, label, nonlabel, handles, others, options.ssl_epochs,
                                  options.ssl_mask_rate, options.ssl_guidance, total.timeout_s)
        nonlabel_ssl = {p: reports[p] for p in nonlabel}
        for party, rep in reports.items():
            log.info("fedhssl: %s pretrained (%d local rows, %.1f s; cross loss %.3f -> %.3f, local %.3f -> %.3f)",
                     party, rep["hssl_rows"], rep["ssl_s"], rep["hssl_cross_loss"][0], rep["hssl_cross_loss"][-1],
                     rep["hssl_local_loss"][0], rep["hssl_local_loss"][-1])
    _windows(runtime, label_name, label.run_batches, n_pretrain, "pretrain", total, on_window)
    runtime.get([(label_name, label.finish_batches.remote())], "last pretraining backward", total.timeout_s)
    report = runtime.get([(label_name, label.prepare_unaligned.remote())], "synthesis", total.timeout_s)[0]
    _windows(runtime, label_name, label.run_alternating, report["steps"], "alternate", total, on_window)
    runtime.get([(label_name, label.finish_batches.remote())], "last backward", total.timeout_s)
    seconds = time.perf_counter() - start
    report = runtime.get([(label_name, label.unaligned_report.remote())], "report", total.timeout_s)[0]

    parties = [label_name] + nonlabel
    records = runtime.get([(p, runtime.actor(p).comm_records.remote()) for p in parties], "records")
    losses = runtime.get([(label_name, label.training_losses.remote())], "losses")[0]
    log.info("%s: %d pretraining batches, %d alternating steps (%d federated)", options.method, n_pretrain,
             report["steps"], report["federated_steps"])
    model = SplitNNModel(runtime, label_name, nonlabel, total, defense, data.n_rows,
                         CommStats(r for batch in records for r in batch), losses, seconds, defense.accounting())
    model.unaligned = {**report, "pretrain_batches": n_pretrain}
    if nonlabel_ssl:  # (the label party's own SimSiam figures are in its report, saved with its part)
        model.unaligned["nonlabel_ssl"] = nonlabel_ssl
    model.unaligned_options = options
    return model


def _windows(runtime: Runtime, party: str, method, n_steps: int, phase: str, config: SplitNNConfig, on_window) -> None:
    for first in range(0, n_steps, config.pipeline_depth):
        stop = min(first + config.pipeline_depth, n_steps)
        runtime.get([(party, method.remote(first, stop))], f"{phase} steps {first}-{stop - 1}", config.timeout_s)
        if on_window is not None:
            on_window(phase, stop)


def aligned_mask(n_rows: int, aligned_fraction: float, seed: int):
    """Which of ``n_rows`` training rows :func:`split_aligned` keeps aligned (a boolean array; at least 2).

    Example
    -------
    >>> m = aligned_mask(1_000, 0.2, seed=0)
    >>> int(m.sum()), bool((m == aligned_mask(1_000, 0.2, seed=0)).all())
    (200, True)
    """
    import numpy as np

    aligned = np.zeros(n_rows, dtype=bool)
    aligned[np.random.default_rng([seed, 31]).choice(n_rows, max(2, int(round(aligned_fraction * n_rows))), replace=False)] = True
    return aligned


def split_aligned(full: SplitNNData, aligned_fraction: float = 0.2, seed: int = 0) -> tuple[SplitNNData, SplitNNData]:
    """FedAds Table 3's setting from all-aligned data: ``(partial, oracle)``.

    ``partial``: a random ``aligned_fraction`` of ``full``'s training rows aligned, the rest label-party
    only (``label_only``); ``oracle``: every training row aligned. Both keep ``full``'s test rows.

    Example
    -------
    >>> from ray_vfl.splitnn import make_fedads_like
    >>> partial, oracle = split_aligned(make_fedads_like(5_000, aligned_fraction=1.0, seed=0), 0.2, seed=0)
    >>> round(partial.train.n_rows / oracle.train.n_rows, 1), partial.label_only.n_rows > partial.train.n_rows
    (0.2, True)
    """
    import numpy as np

    if not 0.0 < aligned_fraction < 1.0:
        raise DataError(f"aligned_fraction must be in (0, 1), got {aligned_fraction!r}")
    n = full.train.n_rows
    aligned = aligned_mask(n, aligned_fraction, seed)
    if aligned.all():
        raise DataError(f"aligned_fraction={aligned_fraction} of {n} rows leaves no unaligned row")
    rest = full.train.take(np.flatnonzero(~aligned))
    label = full.label_party
    label_only = VerticalDataset({label: rest.features[label]}, rest.ids, rest.label, label,
                                 {label: full.train.categorical.get(label, [])})
    partial = SplitNNData(full.name, full.train.take(np.flatnonzero(aligned)), full.test, label_only)
    return partial, SplitNNData(full.name, full.train, full.test)
