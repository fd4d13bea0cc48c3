"""The two split-NN roles as plain classes; :meth:`Runtime.spawn` makes them actors.

Both roles hold one party's feature block, encoded on its own (see
:class:`~ray_vfl.splitnn.network.encoding.FeatureEncoder`), a bottom model, an
optimizer and a :class:`~ray_vfl.runtime.comm.Mailbox`. The label party adds the labels,
the top model, the loss and the defense that wraps what it sends. Batches are
named by their number in the shared schedule (both sides derive it from the
seed), so no row index ever travels.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F

from ...crypto.privacy.gaussian_dp import GaussianNoise
from ...data.binning import check_encodable
from ...errors import DataError
from ...metrics import auc, logloss
from ...runtime.actors import gather
from ...runtime.comm import Message
from ...runtime.party import PartyActor, resolve_rows, write_atomically
from ...runtime.validation import Array, register
from ..privacy.attacks import NonLabelView
from .config import SplitNNConfig
from ..privacy.defenses import Defense, NoDefense
from .encoding import FeatureEncoder
from .models import (
    LABEL_BOTTOM_SEED,
    batch_schedule,
    build_bottom,
    build_top,
    make_optimizer,
    nonlabel_seed,
    torch_dtype,
)
from .selfsupervised import simsiam_pretrain

__all__ = ["NonLabelParty", "LabelParty", "check_binary_labels"]

# The fix every refused saved part names: parts load only with the federation.json they were saved with.
PART_FIX = ("load the folder SplitNNModel.save / SplitNNClassifier.save_model wrote, its files unchanged "
            "and together, or train and save the model again")

# What crosses between the parties, checked on receipt (see ray_vfl.runtime.validation): a batch's
# embeddings, one row per batch row (context: n_rows, width), and their gradients, the shape of the
# embedding they are for (context: shape). Neither may hold NaN or infinity: one would spread through
# every weight of the receiver's model at the next step.
register("embedding", Array("", "float", ("n_rows", "width"), finite=True))
register("embedding_grad", Array("", "float", "shape", finite=True))
register("splitnn_proba", Array("", "float", ("n_rows",)))  # label party -> the caller, sealed to its key


def check_binary_labels(labels: Any) -> np.ndarray:
    """Labels as float64 0/1, or :class:`DataError` naming the offending values."""
    y = np.asarray(labels, dtype=np.float64)
    if y.ndim != 1:
        raise DataError(f"labels must be one value per row (1-d), got shape {y.shape}")
    bad = ~np.isin(y, (0.0, 1.0))
    if bad.any():
        raise DataError(
            f"split-NN labels must be 0 or 1 (binary conversion); found {np.unique(y[bad])[:5].tolist()}; "
            "map the classes to 0/1 first"
        )
    return y


class _SplitParty(PartyActor):
    """What both roles have: a feature block, its encoder, a bottom model, a mailbox."""

    role = "split-NN party"  # each role's own name, the same in-process and in its actor (saved parts carry it)

    def _setup(self, name: str, frame: pd.DataFrame | None, categorical: Sequence[str], config: SplitNNConfig) -> None:
        """``frame=None``: no training rows; the models come from :meth:`load_part`."""
        if frame is not None:
            check_encodable(frame, categorical, name)
        torch.set_num_threads(1)  # two cores shared by every party: one thread each, no oversubscription
        self._start_party(name)
        self.config = config
        self.dtype = torch_dtype(config.dtype)
        self.encoder = FeatureEncoder(config.n_bins, config.max_categories)
        self.schedule: list[np.ndarray] = []
        if frame is not None:
            self.encoder.fit(frame, categorical, party=name)
            self.rows["train"] = torch.from_numpy(self.encoder.transform(frame, party=name))
            self.schedule = batch_schedule(len(frame), config.batch_size, config.epochs, config.seed)

    def encode_rows(self, frame: pd.DataFrame) -> torch.Tensor:
        """A data set (test or prediction rows) encoded with the training encoder."""
        return torch.from_numpy(self.encoder.transform(frame, party=self.name))

    def unseen_categories(self) -> dict[str, int]:
        """Rows of the data set last encoded whose category training never saw, per column."""
        return {c: n for c, n in self.encoder.unseen_counts.items() if n}

    def n_batches(self) -> int:
        return len(self.schedule)

    def vocab_sizes(self) -> list[int]:
        return list(self.encoder.vocab_sizes)

    def self_supervise(self, epochs: int, mask_rate: float, other_rows: Any = None) -> dict[str, Any]:
        """SS-VFL's local step: pretrain this party's bottom model with SimSiam on every row it holds.

        The rows: its training rows, its unaligned rows if it keeps them (the label party of
        :mod:`~ray_vfl.splitnn.unaligned.label_party`), and ``other_rows``, a reference to more of its own rows
        (a non-label party's rows PSI left out), encoded with its training encoder. Labels are not used;
        nothing is sent. Returns :func:`~ray_vfl.splitnn.network.selfsupervised.simsiam_pretrain`'s report.
        """
        return simsiam_pretrain(self.bottom, self.own_rows(other_rows), epochs, self.config.batch_size,
                                self.config.learning_rate, self.config.seed * 1009 + 97, mask_rate)

    def own_rows(self, other_rows: Any = None) -> torch.Tensor:
        """Every row this party holds, encoded: training rows, its unaligned rows if it keeps them, and the
        rows of the reference ``other_rows`` (a non-label party's rows PSI left out), for self-supervision."""
        ids = [self.rows[k] for k in ("train", "unaligned") if k in self.rows]
        if other_rows is not None:
            frame, _ = resolve_rows(other_rows)
            if frame is not None and len(frame):
                ids.append(self.encode_rows(frame))
        return torch.cat(ids)

    def param_grads(self) -> dict[str, np.ndarray]:
        """Gradients of this party's parameters from its latest backward pass."""
        return {k: p.grad.detach().numpy().copy() for k, p in self._modules().named_parameters() if p.grad is not None}

    def state(self) -> dict[str, np.ndarray]:
        return {k: v.detach().numpy().copy() for k, v in self._modules().state_dict().items()}

    def ping(self) -> str:
        return self.name

    def save_part(self, path: str) -> str:
        """Write this party's own part (encoder and model weights) to ``path``; nothing else leaves the party."""
        return write_atomically(path, lambda fh: torch.save(self._part(), fh), binary=True)

    def _part(self) -> dict[str, Any]:
        """What :meth:`save_part` writes: tensors and plain values only (read back with ``weights_only``)."""
        return {"role": self.role, "party": self.name, "encoder": self.encoder.to_dict(),
                "state": {k: v.detach().clone() for k, v in self._modules().state_dict().items()}}

    def load_part(self, path: str) -> str:
        """Read a part written by :meth:`save_part` (tensors and plain values only: ``weights_only``)."""
        try:
            blob = torch.load(path, weights_only=True)
        except FileNotFoundError as exc:
            raise DataError(f"party {self.name!r}: saved part {path!r} not found") from exc
        except Exception as exc:  # torch raises several types for a damaged or foreign file
            # (torch's own text for a file its safe loader refuses suggests weights_only=False: not repeated here)
            detail = ("not a torch file of tensors and plain values" if "weights_only" in str(exc)
                      else (str(exc).splitlines() or [""])[0][:160])
            raise DataError(f"party {self.name!r}: {path!r} is not a saved split-NN part ({type(exc).__name__}: {detail}); "
                            f"{PART_FIX}") from exc
        # (parts saved before roles had their own name carry the actor class's, "<role>Actor")
        role = str(blob.get("role")).removesuffix("Actor") if isinstance(blob, dict) else None
        if role != self.role or blob.get("party") != self.name:
            found = (role, blob.get("party")) if isinstance(blob, dict) else type(blob).__name__
            hint = ""
            if {role, self.role} == {"LabelParty", "UnalignedLabelParty"}:
                hint = (" (a model trained with unaligned= (Diffu-AT, JPL, HeuristicVFL) and one without have "
                        "different label-party parts: the folder's federation.json and this file come from different models)")
            raise DataError(f"{path!r} is not the {self.role} part of {self.name!r} (found {found}){hint}; {PART_FIX}")
        try:
            self._restore(blob)
        except DataError:
            raise
        except (KeyError, TypeError, ValueError, AttributeError) as exc:  # a part cut short, edited, or of another model
            raise DataError(f"party {self.name!r}: {path!r} is not a complete saved split-NN part of this model "
                            f"({type(exc).__name__}: {exc}); {PART_FIX}") from exc
        except RuntimeError as exc:
            raise DataError(f"party {self.name!r}: the weights in {path!r} do not fit the saved configuration: {exc}; "
                            f"{PART_FIX}") from exc
        return path

    def _restore(self, blob: dict[str, Any]) -> None:
        """This party's models from a part :meth:`load_part` read and checked."""
        self.encoder = FeatureEncoder.from_dict(blob["encoder"])
        self._build()
        self._modules().load_state_dict(blob["state"])


class NonLabelParty(_SplitParty):
    """A feature holder: sends federated embeddings, receives their gradients.

    Its view (kept in :attr:`view`) is exactly what it received plus what it
    computed itself: embedding gradients, the embeddings it sent, and its
    trained bottom model's output for its training rows.
    """

    role = "NonLabelParty"

    def __init__(self, name: str, table: Any, categorical: Sequence[str], config: SplitNNConfig,
                 label_party: str, index: int = 0) -> None:
        self.reset(name, table, categorical, config, label_party, index)

    def reset(self, name: str, table: Any, categorical: Sequence[str], config: SplitNNConfig,
              label_party: str, index: int = 0) -> None:
        frame, _ = resolve_rows(table)
        self._setup(name, frame, categorical, config)
        self.label_party = label_party
        self.index = index
        self.view = NonLabelView(name)
        self._pending: tuple[int, torch.Tensor] | None = None
        if frame is not None:
            self._build()

    def _build(self) -> None:
        self.bottom = build_bottom(self.encoder.vocab_sizes, self.config.nonlabel_hidden, self.config, nonlabel_seed(self.index))
        self.optimizer = make_optimizer(self.bottom.parameters(), self.config)

    def _modules(self) -> torch.nn.Module:
        return self.bottom

    def step(self, grad_message: Message | None, batch: int | None) -> Message | None:
        """Apply the gradient of the previous batch (if any), then embed ``batch`` (if any).

        One call per batch: the backward pass of batch ``b`` and the forward
        pass of batch ``b + 1`` travel together, halving the round trips.
        """
        if grad_message is not None:
            self._backward(grad_message)
        if batch is None:  # training is over: what the trained model outputs for every training row
            ids = self.rows["train"]
            with torch.no_grad():  # in chunks: the hidden layers of every row at once could be large
                self.view.final_embeddings = np.concatenate(
                    [self.bottom(ids[i : i + 65_536]).numpy() for i in range(0, len(ids), 65_536)])
            return None
        rows = self.schedule[batch]
        emb = self.bottom(self.rows["train"][rows])
        self._pending = (batch, emb)
        payload = emb.detach().numpy()
        self.view.rows.append(rows)
        self.view.embeddings.append(payload.copy())
        return self.mailbox.send("embedding", [self.label_party], payload, tree=batch)

    def _backward(self, message: Message) -> None:
        if self._pending is None or self._pending[0] != message.tree:
            raise DataError(f"party {self.name!r} got the gradient of batch {message.tree} but no embedding is waiting for it")
        _, emb = self._pending
        grad = self.mailbox.open(message, "embedding_grad", {"shape": tuple(emb.shape)}, senders=(self.label_party,))
        self.view.gradients.append(np.array(grad))
        self.optimizer.zero_grad(set_to_none=True)
        emb.backward(torch.as_tensor(grad, dtype=self.dtype))
        self.optimizer.step()
        self._pending = None

    def send_training_embeddings(self) -> Message:
        """The trained bottom model's output for every training row (computed by the last ``step(_, None)``),
        sent to the label party: what a Diffu-AT label party learns its diffusion model from."""
        if self.view.final_embeddings is None:
            raise DataError(f"party {self.name!r} has no trained embeddings yet; finish a training phase first")
        return self.mailbox.send("embedding", [self.label_party], self.view.final_embeddings, tree=-2)

    def embed(self, key: str) -> Message:
        """Embeddings of every row of a loaded data set, for prediction (no gradient comes back)."""
        with torch.no_grad():
            payload = self.bottom(self.rows[key]).numpy()
        return self.mailbox.send("embedding", [self.label_party], payload)

    def recorded_view(self) -> NonLabelView:
        """What this party saw during training (the only input attacks get)."""
        return self.view


class LabelParty(_SplitParty):
    """The label holder: own bottom model, the top model, the loss, and the defense on what it sends."""

    role = "LabelParty"

    def __init__(self, name: str, table: Any, categorical: Sequence[str], config: SplitNNConfig,
                 nonlabel: Sequence[str], defense: Defense | None = None) -> None:
        self.reset(name, table, categorical, config, nonlabel, defense)

    def reset(self, name: str, table: Any, categorical: Sequence[str], config: SplitNNConfig,
              nonlabel: Sequence[str], defense: Defense | None = None) -> None:
        frame, labels = resolve_rows(table)  # from this party's own store
        y = None
        if frame is not None:
            y = check_binary_labels(labels)
            if len(y) != len(frame):
                raise DataError(f"party {name!r}: {len(y)} labels for {len(frame)} feature rows")
        self._setup(name, frame, categorical, config)
        self.y = None if y is None else torch.as_tensor(y, dtype=self.dtype)
        self.nonlabel = list(nonlabel)
        self.defense = defense if defense is not None else NoDefense()
        # The defense's randomness: OS entropy drawn inside this actor, never config.seed (the non-label
        # parties know it: it orders the batches), so no other party can regenerate the noise and subtract it.
        self.noise = GaussianNoise()
        self.losses: list[float] = []
        if frame is not None:
            self._build()

    def _build(self) -> None:
        cfg = self.config
        self.bottom = self._new_bottom()
        self.top = build_top(self.bottom.out_width + len(self.nonlabel) * self.nonlabel_width, cfg)
        self.optimizer = make_optimizer(list(self.bottom.parameters()) + list(self.top.parameters()), cfg)

    def _new_bottom(self) -> torch.nn.Module:
        return build_bottom(self.encoder.vocab_sizes, self.config.label_hidden, self.config, LABEL_BOTTOM_SEED)

    @property
    def nonlabel_width(self) -> int:
        """Width of the embedding each non-label party sends (its bottom model's output)."""
        return self.config.embedding_width

    def _modules(self) -> torch.nn.Module:
        return torch.nn.ModuleDict({"label_bottom": self.bottom, "top": self.top})

    def _embeddings(self, messages: Sequence[Message], n_rows: int, batch: int) -> list[torch.Tensor]:
        if len(messages) != len(self.nonlabel):
            raise DataError(f"party {self.name!r} expected embeddings from {self.nonlabel}, got {len(messages)}")
        out = []
        for party, message in zip(self.nonlabel, messages):
            # a shape that differs means the parties disagree on the batch rows or on nonlabel_hidden
            emb = self.mailbox.open(message, "embedding", {"n_rows": n_rows, "width": self.nonlabel_width},
                                    senders=(party,))
            out.append(torch.as_tensor(np.array(emb), dtype=self.dtype).requires_grad_(True))
        return out

    def set_peers(self, handles: dict[str, Any]) -> None:
        """The non-label parties' actor handles: :meth:`run_batches` calls them directly."""
        self.peers = [handles[p] for p in self.nonlabel]
        self._carry: list | None = None

    def run_batches(self, start: int, stop: int) -> int:
        """Train batches ``[start, stop)`` with the non-label parties, one round trip per batch.

        Each round sends the previous batch's embedding gradients and asks
        for the next batch's embeddings; while the non-label parties work, this
        party runs its own bottom model on the batch (with the weights of the
        previous batch's update: exactly sequential SGD).
        """
        timeout = self.config.timeout_s
        grads = self._carry or [None] * len(self.nonlabel)
        for batch in range(start, stop):
            pending = [(p, h.step.remote(g, batch)) for p, h, g in zip(self.nonlabel, self.peers, grads)]
            rows = self.schedule[batch]
            own = self.bottom(self.rows["train"][rows])
            messages = gather(pending, f"batch {batch}", timeout)
            grads = list(self._update(batch, rows, own, messages))
        self._carry = grads
        return stop

    def finish_batches(self) -> None:
        """Send the last batch's gradients; each non-label party then computes its trained model's outputs."""
        grads = self._carry or [None] * len(self.nonlabel)
        gather([(p, h.step.remote(g, None)) for p, h, g in zip(self.nonlabel, self.peers, grads)], "last backward",
               self.config.timeout_s)
        self._carry = None

    def _federated_logits(self, batch: int, rows: np.ndarray, own: torch.Tensor, embs: list[torch.Tensor]) -> torch.Tensor:
        """The top model over this party's bottom output and the received embeddings (a hook for subclasses)."""
        return self.top([own] + embs)

    def _update(self, batch: int, rows: np.ndarray, own: torch.Tensor, messages: Sequence[Message]) -> tuple[Message, ...]:
        """Top model, loss, backward and update given this party's bottom output ``own``; the defended gradients out."""
        embs = self._embeddings(messages, len(rows), batch)
        loss = F.binary_cross_entropy_with_logits(self._federated_logits(batch, rows, own, embs), self.y[rows])
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()
        self.losses.append(float(loss.detach()))
        y = self.y[rows].numpy()
        # The defense wraps what leaves this party; the party's own models trained on the true gradients above.
        return tuple(
            self.mailbox.send("embedding_grad", [party], self.defense.protect(e.grad.numpy(), y, self.noise), tree=batch)
            for party, e in zip(self.nonlabel, embs)
        )

    def predict(self, key: str, *messages: Message) -> np.ndarray:
        """Probabilities for every row of a loaded data set, from the non-label parties' embeddings."""
        ids = self.rows[key]
        with torch.no_grad():
            embs = [e.detach() for e in self._embeddings(messages, len(ids), -1)]
            return torch.sigmoid(self.top([self.bottom(ids)] + embs)).numpy().astype(np.float64)

    def predict_for_caller(self, key: str, caller_key: bytes, *messages: Message) -> Message:
        """:meth:`predict`, sealed to the caller (the key it made for this call)."""
        return self.mailbox.send_to_caller("splitnn_proba", caller_key, self.predict(key, *messages))

    def evaluate(self, key: str, *messages: Message) -> dict[str, float]:
        """Test AUC and NLL of a loaded data set, from this party's own labels of it."""
        if key not in self.labels:
            raise DataError(f"party {self.name!r} holds no labels for these rows; evaluate needs labelled data")
        y = check_binary_labels(self.labels[key])
        p = self.predict(key, *messages)
        return {"auc": auc(y, p), "nll": logloss(y, p)}

    def training_losses(self) -> list[float]:
        return list(self.losses)
