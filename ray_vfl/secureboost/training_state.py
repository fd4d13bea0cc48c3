"""What the label party keeps to go on training: checkpoints to resume, saved models to continue.

A mixin of :class:`~ray_vfl.secureboost.active.ActiveParty`. Resuming a checkpoint restores the
exact state (training margins included, as JSON floats round-trip), so the next trees are those of
an uninterrupted run; continuing a saved model starts from its trees and recomputes the margins by
federated prediction over the training rows and eval sets.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import ConfigError, DataError
from .tree import Tree

__all__ = ["TrainingState"]


class TrainingState:
    """Checkpoint and continuation state of the label party (see the module docstring)."""

    def training_state(self) -> dict[str, Any]:
        """The model part, plus what training needs to go on: the training margins (exact, as JSON
        floats round-trip), split record counters, metrics history and each eval set's margins."""
        state = self.model_part()
        state.update(margin=self.margin.tolist(), record_count=dict(self.record_count),
                     history={k: list(v) for k, v in self.history.items()},
                     eval={k: v["margin"].tolist() for k, v in self.eval.items()})
        return state

    def resume_training(self, state: dict[str, Any]) -> None:
        super().resume_training(state)
        margin = np.asarray(state["margin"], dtype=np.float64)
        if len(margin) != len(self.margin) or state["order"] != self.order:
            raise DataError(f"party {self.name!r}: the checkpoint is of {len(margin)} training rows and parties "
                            f"{state['order']}, this run has {len(self.margin)} rows and {self.order}")
        self.trees = [Tree.from_dict(t) for t in state["trees"]]
        self.base_margin = float(state["base_margin"])
        self.margin = margin
        self.record_count = {p: int(state["record_count"][p]) for p in self.passives}
        self.history = {k: list(v) for k, v in state["history"].items() if k == "train" or k in self.eval}
        for key, saved in state["eval"].items():  # eval sets of the same name and size pick up where they were
            if key in self.eval and len(saved) == len(self.eval[key]["margin"]):
                self.eval[key]["margin"] = np.asarray(saved, dtype=np.float64)
            elif key in self.eval:
                self.history[key] = []

    def continue_from(self, part: dict[str, Any]) -> None:
        """Start from a saved model's trees (its margins follow in :meth:`continue_margins`)."""
        if part.get("objective") != self.config.objective or part.get("order") != self.order:
            raise ConfigError(f"the model to continue is a {part.get('objective')} model of parties {part.get('order')}; "
                              f"this fit is {self.config.objective} over {self.order}")
        self.trees = [Tree.from_dict(t) for t in part["trees"]]
        self.base_margin = float(part["base_margin"])
        for tree in self.trees:  # each passive party's next record id follows the records the trees use
            split = tree.left >= 0
            for owner, record in zip(tree.owner[split].tolist(), tree.record[split].tolist()):
                party = self.order[owner]
                if party in self.record_count:
                    self.record_count[party] = max(self.record_count[party], record + 1)

    def continue_margins(self) -> int:
        """Margins of the continued model's trees on the training rows and every eval set (federated
        prediction rounds with the passive parties); returns the number of trees continued from."""
        n = len(self.trees) // self.per_round  # rounds
        self.margin = self.base_margin + self.predict_margin("train", 0, n)
        for key, state in self.eval.items():
            state["margin"] = self.base_margin + self.predict_margin(key, 0, n)
        return n
