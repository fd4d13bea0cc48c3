"""Checkpoints of a federated boosting run, and resuming from them.

Every ``every`` trees (and after the last), each party writes its own training state on its own
nodes (:meth:`ray_vfl.runtime.party.PartyActor.save_checkpoint`: its model part, and for the label
party the trees, the training margins and the evaluation state), atomically: write, then rename.
Only when every party has written does the driver record the tree count in ``checkpoint.json``
(atomically too), so the file always names a state that every party completed; each party's older
files go after that. A run started again with the same folder resumes from that state: each
party checks that its training data still bins as before and restores it, and training continues
with the next tree. Nothing in a checkpoint file leaves its party's machine; ``checkpoint.json``
holds the roles, the config and the tree count.

Training is deterministic given the data and the config (encryption randomness never changes a
sum), so a resumed run grows the same trees as an uninterrupted one.
"""

from __future__ import annotations

import json
import os
from typing import Any

from ..errors import ConfigError, DataError
from ..runtime.party import write_atomically
from .callbacks import TrainingCallback

__all__ = ["Checkpoint", "CHECKPOINT_FILE", "checkpoint_of", "take_up"]

CHECKPOINT_FILE = "checkpoint.json"
FORMAT = 1
# Settings that change neither the trees nor their order: a run may resume with other values.
_FREE_SETTINGS = {"n_trees", "timeout_s", "workers_per_party", "precompute_masks"}


class Checkpoint(TrainingCallback):
    """Have every party save its training state after every ``every`` trees, and resume from it.

    Parameters
    ----------
    directory : str
        The checkpoint folder: each party writes its file there on its own machine (the same path
        on every node), the driver writes ``checkpoint.json``.
    every : int
        Trees between checkpoints (the last tree is always saved).

    Example
    -------
    >>> clf = SecureBoostClassifier(n_estimators=100)                           # doctest: +SKIP
    >>> clf.fit(train, checkpoint_dir="ckpt", checkpoint_every=5)               # doctest: +SKIP
    >>> # after a failure, the same call continues from the last saved tree
    >>> clf.fit(train, checkpoint_dir="ckpt", checkpoint_every=5)               # doctest: +SKIP
    """

    def __init__(self, directory: str | os.PathLike, every: int = 1) -> None:
        if isinstance(every, bool) or not isinstance(every, int) or every < 1:
            raise ConfigError(f"checkpoint_every must be a positive integer, got {every!r}")
        self.directory = os.fspath(directory)
        self.every = every
        self.model: Any = None
        self._saved = 0
        self._files: dict[str, str] = {}

    # the driver's record ---------------------------------------------------------
    @property
    def meta_path(self) -> str:
        return os.path.join(self.directory, CHECKPOINT_FILE)

    def _meta(self, model: Any, trees: int) -> dict[str, Any]:
        config = {k: v for k, v in model.config.to_dict().items() if k not in _FREE_SETTINGS}
        return {"format": FORMAT, "trees": trees, "order": list(model.order), "label_party": model.label_party,
                "config": config, "files": dict(self._files)}

    def resume_point(self, model: Any) -> tuple[int, dict[str, str]]:
        """The tree count every party completed and each party's file, or ``(0, {})`` for a new folder.

        Raises :class:`ConfigError` when the folder holds a checkpoint of another federation or config.
        """
        self.model = model
        try:
            os.makedirs(self.directory, exist_ok=True)
        except OSError as exc:
            raise DataError(f"cannot use {self.directory!r} as a checkpoint folder: {exc}") from exc
        if not os.path.exists(self.meta_path):
            return 0, {}
        try:
            with open(self.meta_path, encoding="utf-8") as fh:
                meta = json.load(fh)
            trees, files = int(meta["trees"]), dict(meta["files"])
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise DataError(f"{self.meta_path!r} is not a ray_vfl checkpoint ({exc}); remove it or choose another "
                            "checkpoint_dir") from exc
        expected = self._meta(model, trees)
        for field in ("format", "order", "label_party", "config"):
            if meta.get(field) != expected[field]:
                diff = _difference(meta.get(field), expected[field])
                raise ConfigError(f"the checkpoint in {self.directory!r} is of another run ({field} differs: {diff}); "
                                  "resume with the same parties and settings, or choose a new checkpoint_dir")
        self._files, self._saved = files, trees
        return trees, files

    # saving ---------------------------------------------------------------------
    def after_iteration(self, iteration: int, logs: dict[str, dict[str, float]]) -> bool:
        if (iteration + 1) % self.every == 0:
            self.save(iteration + 1)
        return False

    def after_training(self, model: Any) -> None:
        if model.n_trees != self._saved:
            self.save(model.n_trees)

    def save(self, trees: int) -> None:
        """Every party writes its state after ``trees`` trees; then the driver records the count."""
        model = self.model
        if model is None:
            raise ConfigError("a Checkpoint callback saves only inside a training run that resumed it")
        runtime = model.runtime
        files = {p: f"{p}.tree-{trees:05d}.json" for p in model.order}
        paths = {p: os.path.join(self.directory, name) for p, name in files.items()}
        runtime.get([(p, runtime.actor(p).save_checkpoint.remote(paths[p], trees)) for p in model.order],
                    f"checkpoint after tree {trees}")
        self._files, self._saved = files, trees
        meta = self._meta(model, trees)
        write_atomically(self.meta_path, lambda fh: json.dump(meta, fh, indent=2))
        # Each party removes its own older files, now that the record names the new ones.
        runtime.get([(p, runtime.actor(p).prune_checkpoints.remote(paths[p])) for p in model.order], "checkpoint cleanup")


def _difference(saved: Any, now: Any) -> str:
    if isinstance(saved, dict) and isinstance(now, dict):
        keys = sorted(k for k in set(saved) | set(now) if saved.get(k) != now.get(k))
        return ", ".join(f"{k}: {saved.get(k)!r} then, {now.get(k)!r} now" for k in keys)
    return f"{saved!r} then, {now!r} now"


def checkpoint_of(callbacks: Any) -> "Checkpoint | None":
    """The run's :class:`Checkpoint` callback, if any; :class:`ConfigError` for more than one."""
    checkpoints = [cb for cb in callbacks if isinstance(cb, Checkpoint)]
    if len(checkpoints) > 1:
        raise ConfigError("give at most one Checkpoint callback (one checkpoint folder per run)")
    return checkpoints[0] if checkpoints else None


def take_up(checkpoint: Checkpoint, model: Any, after: int = 0) -> int:
    """Every party of ``model`` (its ``runtime``, ``order`` and ``config.timeout_s``) restores its own
    file of the checkpoint, on its own machine, if the checkpoint holds more than ``after`` trees;
    returns the checkpoint's tree count (``after`` when there is nothing to take up)."""
    trees, files = checkpoint.resume_point(model)
    if trees <= after:
        return after
    runtime = model.runtime
    paths = {p: os.path.join(checkpoint.directory, files[p]) for p in model.order}
    runtime.get([(p, runtime.actor(p).resume_from.remote(paths[p])) for p in model.order], "resume from checkpoint",
                model.config.timeout_s)
    return trees
