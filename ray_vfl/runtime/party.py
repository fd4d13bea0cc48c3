"""What every party actor shares: its name, its metered mailbox, its data sets by key, its saved part.

A protocol's role classes (SecureBoost's active and passive parties, the split-NN roles) derive
from :class:`PartyActor` and say only what is theirs: how to encode a data set's rows
(:meth:`PartyActor.encode_rows`) and what their model part holds (``model_part`` / ``restore``).
Data sets arrive as *table references* (``ray_vfl.data.store.TableRef``): small handles that the
party resolves inside its own actor, from the store on its own nodes, so rows never pass through
the driver. :func:`save_parts` and :func:`load_meta` are the driver's side of saving a federation:
each party writes its own part on its own machine; the driver writes only ``federation.json``.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from typing import Any, Sequence

from ..errors import DataError
from .comm import Mailbox, Record

__all__ = ["PartyActor", "save_parts", "load_meta", "read_part", "write_atomically", "resolve_rows"]

META_FILE = "federation.json"


def write_atomically(path: str, write: Callable[[Any], None], binary: bool = False) -> str:
    """Write a file through ``write(fh)`` into a temporary file beside ``path``, then rename it over
    ``path``: a reader never sees half a file, and a failed write leaves the old one."""
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)  # on a party's own node the folder may not exist yet
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-", suffix=os.path.basename(path))
    try:
        with os.fdopen(fd, "wb" if binary else "w", **({} if binary else {"encoding": "utf-8"})) as fh:
            write(fh)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path


def resolve_rows(rows: Any) -> tuple[Any, Any]:
    """``(features, labels or None)`` of a data set handed to a party: a table reference is fetched
    from the party's own store (inside this actor); ``None`` stays ``(None, None)``."""
    if rows is None:
        return None, None
    fetch = getattr(rows, "fetch", None)
    if fetch is None:
        raise DataError(f"a party's rows must come as a table reference (ray_vfl.data.store.TableRef), "
                        f"got {type(rows).__name__}")
    return fetch()


class PartyActor:
    """Base of every party role: name, mailbox, data sets kept by key, and the saved part.

    Subclasses set ``self.name`` and ``self.mailbox`` through :meth:`_start_party`, implement
    :meth:`encode_rows` (a data set's rows in the form the role computes on) and ``model_part``
    / ``restore`` (its share of the model, as JSON-able values) or override :meth:`save_part` /
    :meth:`load_part` for another format.
    """

    name: str
    mailbox: Mailbox
    rows: dict[str, Any]
    labels: dict[str, Any]

    def _start_party(self, name: str) -> None:
        self.name = name
        self.mailbox = Mailbox(name)
        self.rows = {}
        self.labels = {}

    # data sets --------------------------------------------------------------
    def encode_rows(self, frame: Any) -> Any:  # pragma: no cover - every role overrides it
        raise NotImplementedError

    def load_rows(self, key: str, table: Any) -> int:
        """Fetch a data set (eval or prediction rows) from this party's store and encode it."""
        frame, label = resolve_rows(table)
        self.rows[key] = self.encode_rows(frame)
        if label is not None:  # only the label party's store hands out labels
            self.labels[key] = label
        return len(frame)

    def drop_rows(self, key: str) -> None:
        self.rows.pop(key, None)
        self.labels.pop(key, None)

    # reporting --------------------------------------------------------------
    def comm_records(self) -> list[Record]:
        """Hand over (and forget) what this party's send path recorded."""
        return self.mailbox.drain()

    # the saved part -----------------------------------------------------------
    def model_part(self) -> dict[str, Any]:  # pragma: no cover - every role overrides it
        raise NotImplementedError

    def restore(self, part: dict[str, Any]) -> None:  # pragma: no cover - every role overrides it
        raise NotImplementedError

    def save_part(self, path: str) -> str:
        """Write this party's model part to ``path`` on this party's own machine (atomically)."""
        part = self.model_part()
        return write_atomically(path, lambda fh: json.dump(part, fh))

    # checkpoints -------------------------------------------------------------
    def training_state(self) -> dict[str, Any]:
        """What this party needs to continue training where it stopped (default: its model part)."""
        return self.model_part()

    def resume_training(self, state: dict[str, Any]) -> None:  # pragma: no cover - roles that checkpoint override it
        raise NotImplementedError

    def save_checkpoint(self, path: str, trees: int) -> str:
        """Write this party's training state after ``trees`` trees to ``path`` on its own machine (atomically)."""
        state = {"party": self.name, "trees": trees, "state": self.training_state()}
        return write_atomically(path, lambda fh: json.dump(state, fh))

    def resume_from(self, path: str) -> int:
        """Restore the training state written by :meth:`save_checkpoint`; returns its tree count."""
        try:
            with open(path, encoding="utf-8") as fh:
                saved = json.load(fh)
        except FileNotFoundError as exc:
            raise DataError(f"party {self.name!r}: its checkpoint {path!r} is not on this node; resume where "
                            "the party wrote it, or start with a new checkpoint_dir") from exc
        except json.JSONDecodeError as exc:
            raise DataError(f"party {self.name!r}: {path!r} is not a checkpoint ({exc})") from exc
        if saved.get("party") != self.name:
            raise DataError(f"{path!r} is the checkpoint of {saved.get('party')!r}, not of {self.name!r}")
        self.resume_training(saved["state"])
        return int(saved["trees"])

    def prune_checkpoints(self, keep: str) -> list[str]:
        """Remove this party's other checkpoint files beside ``keep`` (older ones, or those of a run that
        failed before the driver recorded them); returns the names removed."""
        folder, prefix = os.path.dirname(keep), f"{self.name}.tree-"
        gone = [f for f in os.listdir(folder) if f.startswith(prefix) and f.endswith(".json")
                and f != os.path.basename(keep)]
        for name in gone:
            os.unlink(os.path.join(folder, name))
        return gone

    def load_part(self, path: str) -> None:
        """Read a part written by :meth:`save_part` (on this party's machine)."""
        self.restore(read_part(path, self.name))


def read_part(path: str, party: str) -> dict[str, Any]:
    """A saved model part (JSON) on this party's node, or :class:`DataError` saying what is wrong."""
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except FileNotFoundError as exc:
        raise DataError(f"party {party!r}: no saved part at {path!r} on this node") from exc
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise DataError(f"party {party!r}: {path!r} is not a saved model part ({exc})") from exc


def save_parts(runtime: Any, parties: Sequence[str], directory: str, meta: dict[str, Any], suffix: str) -> dict[str, str]:
    """Have each party write ``<directory>/<party><suffix>`` (its own part only), then write the
    federation's ``federation.json`` (roles and config, nothing secret). Returns the part paths."""
    try:
        os.makedirs(directory, exist_ok=True)
    except OSError as exc:  # a file in the way, a read-only place
        raise DataError(f"cannot save into {directory!r}: {exc}; name a folder (new or existing)") from exc
    paths = {p: os.path.join(directory, f"{p}{suffix}") for p in parties}
    runtime.get([(p, runtime.actor(p).save_part.remote(paths[p])) for p in parties], "save")
    write_atomically(os.path.join(directory, META_FILE), lambda fh: json.dump(meta, fh, indent=2))
    return paths


def load_meta(directory: str, what: str) -> dict[str, Any]:
    """The ``federation.json`` of a saved federation, or :class:`DataError` naming ``what`` wrote it."""
    path = os.path.join(directory, META_FILE)
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except FileNotFoundError as exc:
        raise DataError(f"{path!r} not found; pass the folder {what} wrote") from exc
    except json.JSONDecodeError as exc:
        raise DataError(f"{path!r} is not a federation file written by {what} ({exc})") from exc
