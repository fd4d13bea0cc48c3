"""FedHSSL's pretraining: two encoders per party, a cross-party SimSiam, a guided local SimSiam, a secure average.

FedHSSL (He, Kang, Zhang et al., "A Hybrid Self-Supervised Learning Framework for Vertical Federated
Learning", 2022), as its authors' code runs it on CTR data (jorghyq2016/FedHSSL, ``main_pretrain.py``
and ``SSClient``), gives every party two encoders, a *cross-party* one and a *local* one (a lower part of
its own, then an upper part whose shape is the same at every party), and pretrains them before the
supervised VFL training. Each pretraining epoch:

1. **Cross-party SSL** over the aligned rows, in the shared batch order: each party projects its
   cross-party encoder's output (``z_k``, SimSiam's projector, to a width common to all parties) and
   sends it to the others: the label party to every non-label party, each non-label party to the
   label party. A party's loss is SimSiam's ``D(p_k, sg(z_j))`` (negative cosine, stop-gradient on the
   received projection; the label party averages over the non-label parties): the parties' views of
   one row are SimSiam's two views. Each party updates its own encoder and heads; no gradient crosses.
2. **Cross-party-guided local SSL** over every row the party holds (the label party's aligned and
   unaligned rows, labels unused; a non-label party's rows and those PSI left out, if it kept them):
   SimSiam between a row and a copy with 30 % of its fields masked (the repo's ``CtrDataTransform``: the
   row and one masked view), plus a pull of each view's local prediction towards the party's own frozen
   cross-party projection of the same view: ``(1 - g) * local + g * guidance`` with ``g`` =
   ``UnalignedOptions.ssl_guidance``. No message.
3. **Partial model aggregation**: the local encoders' upper part and the local projector and predictor
   (the same shapes at every party, initialised alike) are replaced by their mean over the parties,
   computed by secure aggregation (:mod:`ray_vfl.crypto.privacy.secure_sum`, pairwise masks) with the label
   party as aggregator.

Fine-tuning is then VanillaVFL on the aligned rows (:func:`ray_vfl.splitnn.unaligned_protocol.train_unaligned`),
with each party's bottom model its two encoders side by side (:class:`HybridEncoder`; the repo's
``pool='concat'``): the embedding a non-label party sends is twice as wide as VanillaVFL's.

Where this differs from the authors' code, and why
    * Widths: the cross-party encoder is the party's usual bottom model (the config's
      ``label_hidden`` / ``nonlabel_hidden``); the local one is the party's own embeddings and a layer
      to ``W``, then the shared upper part ``Linear(W, W)`` and ReLU, with ``W`` the non-label parties'
      embedding width (the repo: 512 everywhere, and a batch norm in the upper part; here no bottom
      model has one, and a non-label party's bottom would need switching to evaluation mode at every
      prediction). The fusion is the repo's ``concat``: its default ``mean`` needs both encoders of a
      party at one width, and the parties' widths differ here.
    * Optimiser: Adam at the split network's learning rate, as SS-VFL here, not SGD (momentum 0.9,
      lr 0.1, cosine annealing).
    * Guidance weight: the paper's method pulls the local encoder towards the cross-party one; the
      repo's default weight is 0 and no command it documents sets another. ``ssl_guidance=0.5``
      (default) weighs the two terms equally, the repo's ``local_ratio`` 0.5 and ``constraint_ratio`` 0.5.
    * Aggregation: a secure sum to the label party, which sends back the mean; the repo sends every
      party's weights in plaintext to a server.

View table (``P`` non-label parties, ``n_a`` aligned rows, ``W`` the common width, ``m`` the number of
aggregated parameters; ``ssl_epochs`` epochs; then fine-tuning and prediction as VanillaVFL). The table is
data: ``tests/test_fedhssl_views.py`` checks a run's messages against it both ways, tests every "nothing"
row as a distribution under two secrets, and runs each named attack on the payloads the receiver recorded.

=========  ==============================  ================================  =========================================
round      sender -> receiver              payload                           what the receiver learns
=========  ==============================  ================================  =========================================
set-up     label -> non-label              X25519 public key, 32 bytes,      nothing (a fresh key pair from OS
           (hssl_mask_key)                 once                              entropy in the sender's actor)
set-up     non-label -> label, non-label   the same, to every other party    nothing (a fresh key pair from OS
           (hssl_mask_key)                                                   entropy in the sender's actor)
cross      label -> non-label              ``z_L``: projection of its        a learned ``W``-wide function of the
           (ssl_projection)                cross-party encoder's output      label party's features of each aligned
                                           for a batch's aligned rows        row (no label enters it): with some
                                                                             rows' values known, the others' are
                                                                             guessed
                                                                             [attack: splitnn.privacy.attacks.embedding_feature_attack]
cross      non-label -> label              ``z_N``, the same of its own      as much as an embedding of the batch
           (ssl_projection)                features                          (VanillaVFL's first message)
                                                                             [attack: splitnn.privacy.attacks.embedding_feature_attack]
aggregate  label -> non-label              nonce, 16 bytes, per epoch        nothing (public, fresh per sum)
           (hssl_nonce)
aggregate  non-label -> label              masked share, ``m`` uint64, per   the sender's local upper part and heads
           (hssl_share)                    epoch                             when ``P = 1``: the label party holds
                                                                             the one mask on it (the pair's); with
                                                                             more non-label parties, a uniformly
                                                                             distributed vector, the sum alone
                                                                             [attack: splitnn.unaligned_attack.mean_part_attack]
aggregate  label -> non-label              the mean of the parties' local    the mean; with ``P = 1`` the label
           (hssl_average)                  upper parts and heads, ``m``      party's own part (2 x mean minus its
                                           floats, per epoch                 own), with more the others' sum
                                                                             [attack: splitnn.unaligned_attack.mean_part_attack]
finetune   non-label -> label              embeddings ``(B, 2W)`` of a       as VanillaVFL (:mod:`..protocol`): a
           (embedding)                     batch; at prediction, of every    function of its features
                                           row to score                      [attack: splitnn.privacy.attacks.embedding_feature_attack]
finetune   label -> non-label              d loss / d embedding, wrapped     as VanillaVFL: the labels of the batch
           (embedding_grad)                by the defense                    [attack: splitnn.privacy.attacks.norm_attack]
                                                                             [attack: splitnn.privacy.attacks.direction_attack]
predict    label -> caller                 probabilities, sealed to a key    the predictions it asked for
           (splitnn_proba)                 the caller made for this call
=========  ==============================  ================================  =========================================

The cross-party projections are a message VanillaVFL does not carry: the non-label parties receive
a representation of the label party's features, row by row (the label party's representation is
never sent in VanillaVFL). The secure sum protects a share only from parties that do not hold its masks:
with one non-label party the aggregator holds them all, and learns what the mean tells it anyway (its
part in the sum is the other half). The masks of the local views come from the configuration's seed (they
hide nothing: the rows never leave the party); the secure sum's keys from OS entropy in each party.

Example
-------
>>> SplitNNClassifier(unaligned="fedhssl", ssl_epochs=5).fit(data)        # doctest: +SKIP
"""

from __future__ import annotations

import hashlib
import secrets
import time
from typing import Any, Sequence

import numpy as np
import torch
from torch import nn

from ...crypto.privacy.secure_sum import NONCE_BYTES, PUBLIC_KEY_BYTES, PairwiseMasker, combine
from ...runtime.actors import Runtime, gather
from ...runtime.comm import Message
from ...runtime.validation import Array, Rule, register
from ..network.config import SplitNNConfig
from ..network.models import batch_schedule, build_bottom, make_optimizer, nonlabel_seed, seeded, torch_dtype
from ..network.parties import NonLabelParty
from ..network.selfsupervised import SimSiamHead, mask_fields, negative_cosine, output_spread

__all__ = ["HybridEncoder", "HybridSSL", "HybridNonLabelParty", "hybrid_pretrain", "cross_schedule"]

register("ssl_projection", Array("", "float", ("n_rows", "width"), finite=True))
register("hssl_mask_key", Rule(lambda p, c: None if isinstance(p, bytes) and len(p) == PUBLIC_KEY_BYTES
                               else f"is not a {PUBLIC_KEY_BYTES}-byte key"))
register("hssl_nonce", Rule(lambda p, c: None if isinstance(p, bytes) and len(p) == NONCE_BYTES
                            else f"is not a {NONCE_BYTES}-byte nonce"))
register("hssl_share", Array("", "int", ("n_params",)),
         Rule(lambda p, c: None if p.dtype == np.uint64 else f"has dtype {p.dtype}; expected uint64"))
register("hssl_average", Array("", "float", ("n_params",), finite=True))

SHARED_SEED = 31  # offset of the parts every party initialises alike (the aggregated ones)
CROSS_HEAD_SEED = 37


def cross_schedule(n_rows: int, config: SplitNNConfig, ssl_epochs: int) -> list[np.ndarray]:
    """The cross-party batches over ``n_rows`` aligned rows: every party derives them from the shared seed.

    >>> [len(b) for b in cross_schedule(5, SplitNNConfig(batch_size=2), 1)]
    [2, 2, 1]
    """
    return batch_schedule(n_rows, config.batch_size, ssl_epochs, config.seed * 1009 + 8111)


class HybridEncoder(nn.Module):
    """A party's FedHSSL bottom model: its cross-party encoder and its local encoder, outputs side by side.

    ``cross`` is the party's usual bottom model (``hidden``); the local encoder is ``local_bottom`` (the
    party's embeddings, a layer to ``width`` and ReLU; its own) then ``local_top`` (``Linear(width,
    width)`` and ReLU), which has the same shape and initial weights at every party and is averaged
    over them during pretraining.

    Example
    -------
    >>> enc = HybridEncoder([5, 5], [16, 8], SplitNNConfig(embedding_dim=4, nonlabel_hidden=(8,)), 0)
    >>> enc(torch.ones(3, 2, dtype=torch.int64)).shape, enc.out_width
    (torch.Size([3, 16]), 16)
    """

    def __init__(self, vocab_sizes: Sequence[int], hidden: Sequence[int], config: SplitNNConfig, seed_offset: int) -> None:
        super().__init__()
        width = config.embedding_width
        self.cross = build_bottom(vocab_sizes, hidden, config, seed_offset)
        self.local_bottom = build_bottom(vocab_sizes, (width,), config, seed_offset + 1000)
        self.local_top = seeded(config.seed * 1009 + SHARED_SEED,
                                lambda: nn.Sequential(nn.Linear(width, width), nn.ReLU())).to(torch_dtype(config.dtype))
        self.out_width = self.cross.out_width + width

    def local(self, ids: torch.Tensor) -> torch.Tensor:
        return self.local_top(self.local_bottom(ids))

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return torch.cat([self.cross(ids), self.local(ids)], dim=1)


class HybridSSL:
    """FedHSSL's pretraining steps on one party's side; mixed into the split-NN party actors.

    Needs the party's ``bottom`` (a :class:`HybridEncoder`), ``rows``, ``config``, ``mailbox`` and
    ``name``. The label party drives the cross-party batches (:meth:`hssl_cross_epoch`, calling each
    non-label party's :meth:`hssl_cross_step`) and the secure average (:meth:`hssl_aggregate`).
    """

    def hssl_begin(self, parties: Sequence[str], ssl_epochs: int, mask_rate: float, guidance: float,
                   other_rows: Any = None) -> Message:
        """Heads, optimisers and the rows of the local step; returns this party's mask key for every other party."""
        cfg, width = self.config, self.config.embedding_width
        dtype = torch_dtype(cfg.dtype)
        self.hssl_parties = sorted(parties)
        self.hssl_cross_head = seeded(cfg.seed * 1009 + CROSS_HEAD_SEED + self._hssl_index(),
                                      lambda: SimSiamHead(width, self.bottom.cross.out_width)).to(dtype)
        self.hssl_local_head = seeded(cfg.seed * 1009 + SHARED_SEED + 1, lambda: SimSiamHead(width)).to(dtype)
        cross = list(self.bottom.cross.parameters()) + list(self.hssl_cross_head.parameters())
        local = (list(self.bottom.local_bottom.parameters()) + list(self.bottom.local_top.parameters())
                 + list(self.hssl_local_head.parameters()))
        self.hssl_optimizers = {"cross": torch.optim.Adam(cross, lr=cfg.learning_rate),
                                "local": torch.optim.Adam(local, lr=cfg.learning_rate)}
        self.hssl_settings = {"mask_rate": mask_rate, "guidance": guidance}
        self.hssl_schedule = cross_schedule(len(self.rows["train"]), cfg, ssl_epochs)
        self.hssl_per_epoch = len(self.hssl_schedule) // ssl_epochs
        self._hssl_running: dict[str, tuple[float, int]] = {}
        self.hssl_rng = np.random.default_rng([cfg.seed, 8117])
        self.hssl_local_rows = self.own_rows(other_rows)
        self.hssl_losses: dict[str, list[float]] = {"cross": [], "local": []}
        self.hssl_seconds = 0.0
        self.hssl_masker = PairwiseMasker(self.name)  # X25519 keys from OS entropy, in this actor
        return self.mailbox.send("hssl_mask_key", [p for p in self.hssl_parties if p != self.name],
                                 self.hssl_masker.public_key())

    def _hssl_index(self) -> int:
        return getattr(self, "index", -1) + 1

    def hssl_agree(self, messages: Sequence[Message]) -> None:
        """Pair keys from the other parties' mask keys (the messages addressed to this party)."""
        others = [p for p in self.hssl_parties if p != self.name]
        mine = [m for m in messages if self.name in m.receivers]
        self.hssl_masker.agree({m.sender: self.mailbox.open(m, "hssl_mask_key", None, others) for m in mine})

    def _project(self, batch: int) -> tuple[np.ndarray, torch.Tensor, torch.Tensor]:
        rows = self.hssl_schedule[batch]
        self.hssl_cross_head.train()
        z, p = self.hssl_cross_head(self.bottom.cross(self.rows["train"][rows]))
        return rows, z, p

    def _received(self, message: Message, n_rows: int, senders: Sequence[str]) -> torch.Tensor:
        z = self.mailbox.open(message, "ssl_projection", {"n_rows": n_rows, "width": self.config.embedding_width},
                              senders=tuple(senders))
        return torch.as_tensor(np.array(z), dtype=torch_dtype(self.config.dtype))

    def _cross_update(self, p: torch.Tensor, targets: Sequence[torch.Tensor]) -> float:
        loss = sum(negative_cosine(p, t) for t in targets) / len(targets)
        self.hssl_optimizers["cross"].zero_grad(set_to_none=True)
        loss.backward()
        self.hssl_optimizers["cross"].step()
        return float(loss.detach())

    def hssl_cross_step(self, message: Message, batch: int) -> Message:
        """A non-label party's cross-party batch: its projection out, its loss against the label party's."""
        start = time.perf_counter()
        target = self._received(message, len(self.hssl_schedule[batch]), [self.label_party])
        _, z, p = self._project(batch)
        reply = self.mailbox.send("ssl_projection", [self.label_party], z.detach().numpy(), tree=batch)
        self._hssl_loss("cross", self._cross_update(p, [target]))
        self.hssl_seconds += time.perf_counter() - start
        return reply

    def _hssl_loss(self, stage: str, loss: float) -> None:
        total, count = self._hssl_running.get(stage, (0.0, 0))
        self._hssl_running[stage] = (total + loss, count + 1)

    def _hssl_close(self, stage: str) -> float:
        total, count = self._hssl_running.pop(stage, (0.0, 0))
        if count:
            self.hssl_losses[stage].append(total / count)
        return total / max(count, 1)

    def hssl_cross_epoch(self, epoch: int) -> float:
        """The label party's side of one cross-party epoch over the aligned rows; returns its mean loss."""
        timeout, n = self.config.timeout_s, self.hssl_per_epoch
        for batch in range(epoch * n, (epoch + 1) * n):
            if len(self.hssl_schedule[batch]) < 2:  # the projector's batch norm needs two rows: skipped by both sides
                continue
            start = time.perf_counter()
            rows, z, p = self._project(batch)
            message = self.mailbox.send("ssl_projection", self.nonlabel, z.detach().numpy(), tree=batch)
            pending = [(q, h.hssl_cross_step.remote(message, batch)) for q, h in zip(self.nonlabel, self.peers)]
            replies = gather(pending, f"cross-party SSL batch {batch}", timeout)
            targets = [self._received(m, len(rows), [q]) for q, m in zip(self.nonlabel, replies)]
            self._hssl_loss("cross", self._cross_update(p, targets))
            self.hssl_seconds += time.perf_counter() - start
        gather([(q, h.hssl_close.remote("cross")) for q, h in zip(self.nonlabel, self.peers)], "cross-party SSL", timeout)
        return self._hssl_close("cross")

    def hssl_close(self, stage: str) -> float:
        return self._hssl_close(stage)

    def hssl_local_epoch(self) -> float:
        """One epoch of the cross-party-guided local SimSiam over every row this party holds; no message."""
        start = time.perf_counter()
        ids, bs = self.hssl_local_rows, self.config.batch_size
        rate, g = self.hssl_settings["mask_rate"], self.hssl_settings["guidance"]
        enc, head, cross_head = self.bottom, self.hssl_local_head, self.hssl_cross_head
        head.train()
        cross_head.eval()
        order = self.hssl_rng.permutation(len(ids))
        for first in range(0, len(ids), bs):
            rows = torch.as_tensor(order[first : first + bs])
            if len(rows) < 2:  # batch norm needs two rows
                continue
            x1 = ids[rows]
            x2 = mask_fields(x1, rate, self.hssl_rng)
            z1, p1 = head(enc.local(x1))
            z2, p2 = head(enc.local(x2))
            loss = (negative_cosine(p1, z2) + negative_cosine(p2, z1)) / 2
            if g > 0:
                with torch.no_grad():  # the party's own cross-party projections, frozen here
                    c1, c2 = cross_head.projector(enc.cross(x1)), cross_head.projector(enc.cross(x2))
                loss = (1 - g) * loss + g * (negative_cosine(p1, c1) + negative_cosine(p2, c2)) / 2
            self.hssl_optimizers["local"].zero_grad(set_to_none=True)
            loss.backward()
            self.hssl_optimizers["local"].step()
            self._hssl_loss("local", float(loss.detach()))
        self.hssl_seconds += time.perf_counter() - start
        return self._hssl_close("local")

    def _shared(self) -> list[torch.Tensor]:
        """The aggregated tensors, in a fixed order: local upper part, local projector and predictor
        (weights and batch-norm statistics; the batch counters stay each party's own)."""
        modules = nn.ModuleDict({"top": self.bottom.local_top, "head": self.hssl_local_head})
        return [t for k, t in modules.state_dict(keep_vars=True).items() if not k.endswith("num_batches_tracked")]

    def hssl_share(self, nonce_message: Message) -> Message:
        """A non-label party's masked share of its aggregated tensors, for the label party."""
        nonce = self.mailbox.open(nonce_message, "hssl_nonce", None, senders=(self.label_party,))
        return self.mailbox.send("hssl_share", [self.label_party], self._masked_share(nonce))

    def _shared_vector(self) -> np.ndarray:
        return np.concatenate([t.detach().numpy().astype(np.float64).ravel() for t in self._shared()])

    def _masked_share(self, nonce: bytes) -> np.ndarray:
        return self.hssl_masker.share(self._shared_vector(), nonce, self.hssl_parties)

    def hssl_set_average(self, message: Message) -> None:
        """Load the mean the label party sent into this party's aggregated tensors."""
        self._load_average(self.mailbox.open(message, "hssl_average", {"n_params": self._n_shared()},
                                             senders=(self.label_party,)))

    def _n_shared(self) -> int:
        return sum(t.numel() for t in self._shared())

    def _load_average(self, mean: np.ndarray) -> None:
        at = 0
        with torch.no_grad():
            for t in self._shared():
                t.copy_(torch.as_tensor(mean[at : at + t.numel()], dtype=t.dtype).reshape(t.shape))
                at += t.numel()

    def hssl_aggregate(self) -> None:
        """The label party as aggregator: a fresh nonce out, masked shares in, the mean back to everyone."""
        timeout = self.config.timeout_s
        nonce = secrets.token_bytes(NONCE_BYTES)
        nonce_message = self.mailbox.send("hssl_nonce", self.nonlabel, nonce)
        shares = gather([(q, h.hssl_share.remote(nonce_message)) for q, h in zip(self.nonlabel, self.peers)],
                        "partial model aggregation", timeout)
        ctx = {"n_params": self._n_shared()}
        received = [np.array(self.mailbox.open(m, "hssl_share", ctx, senders=(q,))) for q, m in zip(self.nonlabel, shares)]
        total = combine([self._masked_share(nonce)] + received)
        mean = total / len(self.hssl_parties)
        average = self.mailbox.send("hssl_average", self.nonlabel, mean)
        gather([(q, h.hssl_set_average.remote(average)) for q, h in zip(self.nonlabel, self.peers)],
               "partial model aggregation", timeout)
        self._load_average(mean)

    def hssl_end(self) -> dict[str, Any]:
        """Drop the heads and their optimisers (fine-tuning uses the encoders alone); returns the report:
        rows of the local step, the cross-party and local losses per epoch, the collapse check of
        :func:`~ray_vfl.splitnn.network.selfsupervised.simsiam_pretrain` on the local encoder, the seconds spent,
        and a SHA-256 of the aggregated tensors (the same at every party once the mean is loaded)."""
        spread = output_spread(self.bottom.local, self.hssl_local_head, self.hssl_local_rows, self.hssl_rng)
        report = {"hssl_rows": len(self.hssl_local_rows), "hssl_cross_loss": list(self.hssl_losses["cross"]),
                  "hssl_shared_sha256": hashlib.sha256(self._shared_vector().tobytes()).hexdigest(),
                  "hssl_local_loss": list(self.hssl_losses["local"]), "ssl_output_std": spread,
                  "ssl_s": round(self.hssl_seconds, 3)}
        del self.hssl_cross_head, self.hssl_local_head, self.hssl_optimizers, self.hssl_local_rows, self.hssl_masker
        return report


class HybridNonLabelParty(HybridSSL, NonLabelParty):
    """A non-label party whose bottom model is a :class:`HybridEncoder` (FedHSSL)."""

    role = "HybridNonLabelParty"

    def _build(self) -> None:
        self.bottom = HybridEncoder(self.encoder.vocab_sizes, self.config.nonlabel_hidden, self.config,
                                    nonlabel_seed(self.index))
        self.optimizer = make_optimizer(self.bottom.parameters(), self.config)


def hybrid_pretrain(runtime: Runtime, label_name: str, label: Any, nonlabel: Sequence[str], handles: Sequence[Any],
                    others: Sequence[Any], ssl_epochs: int, mask_rate: float, guidance: float,
                    timeout_s: float | None) -> dict[str, dict[str, Any]]:
    """Run FedHSSL's pretraining between the party actors (the driver only sequences the rounds).

    ``others``: per non-label party, a reference to its own rows outside the aligned set (or None).
    Returns each party's report (losses per epoch, rows, seconds, collapse check).
    """
    parties = [label_name, *nonlabel]
    actors = [label, *handles]
    keys = runtime.get([(p, a.hssl_begin.remote(parties, ssl_epochs, mask_rate, guidance, o))
                        for p, a, o in zip(parties, actors, [None, *others])], "FedHSSL set-up", timeout_s)
    runtime.get([(p, a.hssl_agree.remote(keys)) for p, a in zip(parties, actors)], "FedHSSL set-up", timeout_s)
    for epoch in range(ssl_epochs):
        runtime.get([(label_name, label.hssl_cross_epoch.remote(epoch))], "cross-party SSL", timeout_s)
        runtime.get([(p, a.hssl_local_epoch.remote()) for p, a in zip(parties, actors)], "local SSL", timeout_s)
        runtime.get([(label_name, label.hssl_aggregate.remote())], "partial model aggregation", timeout_s)
    reports = runtime.get([(p, a.hssl_end.remote()) for p, a in zip(parties, actors)], "FedHSSL end", timeout_s)
    return dict(zip(parties, reports))
