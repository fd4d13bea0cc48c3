"""The label party of Diffu-AT and its baselines: aligned rows with the non-label parties, unaligned rows alone.

:class:`UnalignedLabelParty` is a :class:`~ray_vfl.splitnn.network.parties.LabelParty` that also holds its
unaligned rows (features and labels it has, with no federated embedding). The two branches share the
label party's bottom model and top; FedAds gives them separate batch norms so that real and synthetic
``h_N`` meet the top on one scale. ``options.branch_norm`` says how: by default each synthesis is
matched to the real ``h_N``'s per-dimension moments, or (``"batchnorm"``) one batch norm per branch
over ``h_N`` (see :meth:`UnalignedLabelParty._head`). It adds the three steps of
:func:`ray_vfl.splitnn.unaligned_protocol.train_unaligned` after the VanillaVFL pretraining:

1. :meth:`prepare_unaligned`: each non-label party sends the trained embeddings ``h_N`` of the aligned
   training rows (through its metered mailbox); this party computes ``h_L`` for every row and
   synthesises ``h_N`` for its unaligned rows, alone, from what it holds (``synthesize``).
2. :meth:`run_alternating`: each step picks a branch with probability proportional to its row count;
   the federated branch is a split-NN batch with the non-label parties (embeddings in, defended
   gradients out, as in VanillaVFL), the local branch a batch of unaligned rows with their synthetic
   ``h_N`` (no message). With ``options.refresh`` (Diffu-AT's default) each federated step also keeps
   the ``h_N`` it received, and at the start of every alternating epoch after the first the
   synthesiser is refitted on the previous epoch's ``h_N`` (with the current ``h_L``) and the unaligned
   rows' ``h_N`` resynthesised (:meth:`_refresh`; no message).
3. Prediction uses the federated branch only (with ``"batchnorm"``, its batch norm in evaluation mode).

Its saved part (:meth:`save_part`, through :meth:`~ray_vfl.splitnn.SplitNNModel.save`) holds the bottom,
the top and the branch batch norms if any, and the fitted synthesiser (the last diffusion model or JPL
mapping) with the synthesis report; constructed with ``table=None`` it waits for :meth:`load_part`.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F
from torch import nn

from ...errors import DataError
from ...runtime.actors import gather
from ...runtime.party import resolve_rows
from ..network.config import SplitNNConfig
from ..privacy.defenses import Defense
from .diffusion import ConditionalDiffusion
from ..network.encoding import FeatureEncoder
from .hybrid import HybridEncoder, HybridSSL
from ..network.models import LABEL_BOTTOM_SEED, make_optimizer
from ..network.parties import LabelParty, check_binary_labels
from .synthesis import SELF_SUPERVISED, AttentionEstimate, ImitationMap, UnalignedOptions, branch_sequence, synthesize

__all__ = ["UnalignedLabelParty"]


class UnalignedLabelParty(HybridSSL, LabelParty):
    """Label party with aligned rows (federated) and unaligned rows (local, synthetic ``h_N``; or, for SS-VFL
    and FedHSSL, self-supervised pretraining on them)."""

    role = "UnalignedLabelParty"

    def __init__(self, name: str, table: Any, unaligned: Any, categorical: Sequence[str], config: SplitNNConfig,
                 nonlabel: Sequence[str], defense: Defense | None, options: UnalignedOptions, n_pretrain: int) -> None:
        self.reset(name, table, unaligned, categorical, config, nonlabel, defense, options, n_pretrain)

    def reset(self, name: str, table: Any, unaligned: Any, categorical: Sequence[str],  # type: ignore[override]
              config: SplitNNConfig, nonlabel: Sequence[str], defense: Defense | None, options: UnalignedOptions,
              n_pretrain: int) -> None:
        self.options = options
        self.n_pretrain = n_pretrain  # batches of the shared schedule that pretrain (VanillaVFL)
        LabelParty.reset(self, name, table, categorical, config, nonlabel, defense)
        self.synthesizer: Any = None  # the last fitted ConditionalDiffusion, ImitationMap (jpl) or AttentionEstimate
        self.synthetic: torch.Tensor | None = None
        self.plan: list[tuple[str, int]] = []
        self.local_batches: list[np.ndarray] = []
        self.report: dict[str, Any] = {}
        self.fresh_h_n: torch.Tensor | None = None
        self.epoch_starts: set[int] = set()
        self._pick = np.random.default_rng([config.seed, 4243])
        if table is None:  # no training rows: the models come from load_part
            return
        frame, _ = resolve_rows(table)
        frame_u, labels_u = resolve_rows(unaligned)
        if frame_u is None or len(frame_u) == 0:
            raise DataError(f"party {name!r} holds no unaligned rows; Diffu-AT needs label-party rows outside the "
                            "aligned set (train without unaligned= for VanillaVFL)")
        if labels_u is None:
            raise DataError(f"party {name!r}: the unaligned rows carry no labels; they must come from the label party")
        if list(frame_u.columns) != list(frame.columns):
            raise DataError(f"party {name!r}: the unaligned rows' columns {list(frame_u.columns)} differ from the aligned "
                            f"rows' {list(frame.columns)}")
        self.y_u = torch.as_tensor(check_binary_labels(labels_u), dtype=self.dtype)
        if len(self.y_u) != len(frame_u):
            raise DataError(f"party {name!r}: {len(self.y_u)} labels for {len(frame_u)} unaligned rows")
        # Both row sets are this party's own: one encoder for both, so a category seen only among the
        # unaligned rows still gets its embedding.
        self.encoder = FeatureEncoder(config.n_bins, config.max_categories).fit(
            pd.concat([frame, frame_u], ignore_index=True), categorical, party=name)
        self.rows["train"] = torch.from_numpy(self.encoder.transform(frame, party=name))
        self.rows["unaligned"] = torch.from_numpy(self.encoder.transform(frame_u, party=name))
        self.users = None
        if options.user_column is not None:
            if options.user_column not in frame.columns:
                raise DataError(f"user_column {options.user_column!r} is not a column of party {name!r}: "
                                f"{list(frame.columns)[:20]}")
            self.users = (frame[options.user_column].to_numpy(), frame_u[options.user_column].to_numpy())
        self._build()

    def _new_bottom(self) -> nn.Module:
        if self.options.method == "fedhssl":  # its cross-party and local encoders (ray_vfl.splitnn.unaligned.hybrid)
            return HybridEncoder(self.encoder.vocab_sizes, self.config.label_hidden, self.config, LABEL_BOTTOM_SEED)
        return super()._new_bottom()

    @property
    def nonlabel_width(self) -> int:
        """FedHSSL's non-label parties send both encoders' outputs side by side: twice VanillaVFL's width."""
        return self.config.embedding_width * (2 if self.options.method == "fedhssl" else 1)

    def _build(self) -> None:
        super()._build()
        width = len(self.nonlabel) * self.nonlabel_width  # h_N of every non-label party
        # options.branch_norm="batchnorm": one batch norm per branch over h_N; otherwise none (empty)
        self.bn = nn.ModuleDict({"fed": nn.BatchNorm1d(width), "local": nn.BatchNorm1d(width)}
                                if self.options.branch_norm == "batchnorm" else {}).to(self.dtype)
        params = list(self.bottom.parameters()) + list(self.top.parameters()) + list(self.bn.parameters())
        self.optimizer = make_optimizer(params, self.config)

    def _modules(self) -> nn.Module:
        return nn.ModuleDict({"label_bottom": self.bottom, "top": self.top, "bn": self.bn})

    def _head(self, parts: Sequence[torch.Tensor], branch: str) -> torch.Tensor:
        """Logits from ``[h_L, h_N...]``; with ``options.branch_norm="batchnorm"`` the ``h_N`` part goes
        through the branch's own batch norm first.

        ``h_L`` comes from the one shared bottom model and is left as it is: a batch norm over the whole
        top input cost 0.06 AUC on the FedAds-like generator even with no local step (benchmarks/RESULTS.md,
        "Diffu-AT variants measured with the earlier batch norms"). The default, ``"moments"``, matches
        the synthetic ``h_N`` to the real ones when they are synthesised
        (:func:`~ray_vfl.splitnn.unaligned.synthesis.match_moments`) and adds no layer here.
        """
        if not self.bn:
            return self.top(list(parts))
        bn = self.bn[branch]
        h_n = torch.cat(list(parts[1:]), dim=1)
        if bn.training and len(h_n) < 2:  # batch statistics need two rows: a last batch of one uses the running ones
            bn.eval()
            try:
                return self.top([parts[0], bn(h_n)])
            finally:
                bn.train()
        return self.top([parts[0], bn(h_n)])

    def _federated_logits(self, batch: int, rows: np.ndarray, own: torch.Tensor, embs: list[torch.Tensor]) -> torch.Tensor:
        """The federated branch of :meth:`LabelParty._update`: the federated batch norm before the top."""
        if getattr(self, "fresh_h_n", None) is not None and batch >= self.n_pretrain:
            # options.refresh: the h_N this party receives anyway, kept to refit the synthesiser on
            self.fresh_h_n[torch.as_tensor(rows)] = torch.cat([e.detach() for e in embs], dim=1)
        return self._head([own] + embs, "fed")

    def predict(self, key: str, *messages) -> np.ndarray:
        ids = self.rows[key]
        self.bn.eval()
        try:
            with torch.no_grad():
                embs = [e.detach() for e in self._embeddings(messages, len(ids), -1)]
                return torch.sigmoid(self._head([self.bottom(ids)] + embs, "fed")).numpy().astype(np.float64)
        finally:
            self.bn.train()

    def self_supervise(self, epochs: int, mask_rate: float, other_rows: Any = None) -> dict[str, Any]:
        """SS-VFL's local step on the aligned and unaligned rows (their labels unused); the report is kept."""
        self.ssl_report = super().self_supervise(epochs, mask_rate, other_rows)
        return self.ssl_report

    def hssl_end(self) -> dict[str, Any]:
        """FedHSSL's pretraining is over: its report is kept, as SS-VFL's."""
        self.ssl_report = super().hssl_end()
        return self.ssl_report

    # after pretraining ----------------------------------------------------------------
    def prepare_unaligned(self) -> dict[str, Any]:
        """Receive ``h_N`` of the aligned rows, synthesise it for the unaligned ones, plan the alternation.

        SS-VFL and FedHSSL (``method="ss-vfl"``, ``"fedhssl"``) synthesise nothing and receive nothing: their
        plan is the federated branch alone, the rest of the shared schedule's epochs (VanillaVFL from the
        self-supervised bottoms).
        """
        if self.options.method in SELF_SUPERVISED:
            self.synthesizer, self.fresh_h_n = None, None
            self.plan = [("fed", b) for b in range(self.n_pretrain, len(self.schedule))]
            self.report = {"method": self.options.method, "aligned_rows": len(self.rows["train"]),
                           "unaligned_rows": len(self.rows["unaligned"]), **getattr(self, "ssl_report", {}),
                           "steps": len(self.plan), "federated_steps": len(self.plan), "refreshes": 0}
            return dict(self.report)
        timeout = self.config.timeout_s
        messages = gather([(p, h.send_training_embeddings.remote()) for p, h in zip(self.nonlabel, self.peers)],
                          "trained embeddings", timeout)
        n_a = len(self.rows["train"])
        h_n = torch.cat([torch.as_tensor(np.array(self.mailbox.open(m, "embedding", {"n_rows": n_a,
                         "width": self.nonlabel_width}, senders=(p,))), dtype=self.dtype)
                         for p, m in zip(self.nonlabel, messages)], dim=1)
        self._synthesize(h_n, 0)
        if self.bn:  # FedAds initialises the branches alike: the local branch's batch norm starts as the federated one
            self.bn["local"].load_state_dict(self.bn["fed"].state_dict())
        self.plan = self._plan()
        self.report.update(steps=len(self.plan), federated_steps=sum(b == "fed" for b, _ in self.plan), refreshes=0)
        self.fresh_h_n = torch.zeros_like(h_n) if self.options.refreshes else None
        return dict(self.report)

    def _synthesize(self, h_n: torch.Tensor, refresh: int) -> None:
        """Synthetic ``h_N`` of the unaligned rows from the aligned rows' ``h_n`` and the current bottom's ``h_L``."""
        with torch.no_grad():
            h_l = self.bottom(self.rows["train"])
            h_l_u = self.bottom(self.rows["unaligned"])
        synthetic, report, self.synthesizer = synthesize(self.options, h_n.numpy(), h_l.numpy(), self.y.numpy(),
                                                         h_l_u.numpy(), self.y_u.numpy(), self.users,
                                                         seed_offset=refresh, return_model=True)
        self.synthetic = torch.as_tensor(synthetic, dtype=self.dtype)
        if refresh == 0:
            self.report = report
        else:  # the first synthesis's figures stay; the last refresh's diffusion loss is added
            self.report.update({f"refresh_{k}": v for k, v in report.items() if k.startswith("diffusion_loss")},
                               refreshes=refresh)

    def _refresh(self) -> None:
        """Options.refresh: refit on the ``h_N`` received in the last epoch's federated steps, resynthesise."""
        self._synthesize(self.fresh_h_n.clone(), self.report.get("refreshes", 0) + 1)

    def _plan(self) -> list[tuple[str, int]]:
        """The alternation: per step ``("fed", batch number)`` or ``("local", local batch index)``; per
        epoch every aligned and every unaligned batch once, in a random interleaving."""
        cfg, bs = self.config, self.config.batch_size
        n_u = len(self.rows["unaligned"])
        rng = np.random.default_rng([cfg.seed, 7919])
        fed = iter(range(self.n_pretrain, len(self.schedule)))  # the shared schedule's alternating epochs
        per_epoch = (len(self.schedule) - self.n_pretrain) // (cfg.epochs - self.options.pretrain_epochs)
        self.local_batches, plan = [], []
        self.epoch_starts: set[int] = set()
        for epoch in range(cfg.epochs - self.options.pretrain_epochs):
            if epoch:
                self.epoch_starts.add(len(plan))
            order = rng.permutation(n_u)
            local = [order[i : i + bs] for i in range(0, n_u, bs)]
            for is_fed in branch_sequence(per_epoch, len(local), rng):
                if is_fed:
                    plan.append(("fed", next(fed)))
                else:
                    plan.append(("local", len(self.local_batches)))
                    self.local_batches.append(local.pop(0))
        return plan

    def run_alternating(self, start: int, stop: int) -> int:
        """Run steps ``[start, stop)`` of the plan; a federated step is one split-NN round trip."""
        timeout = self.config.timeout_s
        grads = self._carry or [None] * len(self.nonlabel)
        for step in range(start, stop):
            branch, index = self.plan[step]
            if self.options.refreshes and step in self.epoch_starts:
                self._refresh()
            if branch == "fed":
                pending = [(p, h.step.remote(g, index)) for p, h, g in zip(self.nonlabel, self.peers, grads)]
                rows = self.schedule[index]
                own = self.bottom(self.rows["train"][rows])
                grads = list(self._update(index, rows, own, gather(pending, f"batch {index}", timeout)))
            else:
                rows = self.local_batches[index]
                if self.synthetic.dim() == 3:  # samples_per_row > 1: one of each row's samples at random
                    pick = torch.as_tensor(self._pick.integers(0, len(self.synthetic), len(rows)))
                    h_n = self.synthetic[pick, torch.as_tensor(rows)]
                else:
                    h_n = self.synthetic[rows]
                logits = self._head([self.bottom(self.rows["unaligned"][rows]), h_n], "local")
                loss = F.binary_cross_entropy_with_logits(logits, self.y_u[rows])
                self.optimizer.zero_grad(set_to_none=True)
                (loss * self.options.local_weight).backward()
                self.optimizer.step()
                self.losses.append(float(loss.detach()))
        self._carry = grads
        return stop

    def unaligned_report(self) -> dict[str, Any]:
        """The synthesis report, with the refreshes done during the alternation (``options.refresh``)."""
        return dict(self.report)

    def plan_counts(self) -> dict[str, int]:
        return {"fed": sum(b == "fed" for b, _ in self.plan), "local": sum(b == "local" for b, _ in self.plan)}

    # saved part -------------------------------------------------------------------------
    def _part(self) -> dict[str, Any]:
        """:meth:`LabelParty._part` (bottom, top and both branch batch norms) plus the method, the fitted
        synthesiser (diffusion model, JPL mapping or FedCVT's keys and values; HeuristicVFL fits none) and the
        synthesis report."""
        blob = super()._part()
        blob["unaligned"] = {"method": self.options.method,
                             "synthesizer": None if self.synthesizer is None else self.synthesizer.to_state(),
                             "report": {k: v.item() if hasattr(v, "item") else v for k, v in self.report.items()}}
        return blob

    def _restore(self, blob: dict[str, Any]) -> None:
        saved = blob["unaligned"]
        if saved["method"] != self.options.method:
            raise ValueError(f"it holds a {saved['method']!r} label party, the federation file says {self.options.method!r}")
        super()._restore(blob)
        state = saved["synthesizer"]
        if saved["method"] == "diffu-at":
            self.synthesizer = ConditionalDiffusion.from_state(state)
        elif saved["method"] == "jpl":
            self.synthesizer = ImitationMap.from_state(state)
        elif saved["method"] == "fedcvt":
            self.synthesizer = AttentionEstimate.from_state(state)
        self.report = dict(saved["report"])
