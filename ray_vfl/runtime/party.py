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

import inspect
import json
import logging
import os
import tempfile
import warnings
from collections.abc import Callable
from typing import Any, Sequence

from ..errors import DataError, DataWarning
from .comm import Mailbox, Record

__all__ = ["PartyActor", "save_parts", "load_meta", "read_part", "write_atomically", "resolve_rows", "resolve_weights",
           "warn_unseen_categories", "FORMAT_VERSION"]

log = logging.getLogger(__name__)

META_FILE = "federation.json"
# Version of the saved layout (federation.json and the parts): load_meta refuses any other, so a model
# written by another layout fails with a message instead of loading wrong.
FORMAT_VERSION = 1


def write_atomically(path: str, write: Callable[[Any], None], binary: bool = False) -> str:
    """Write a file through ``write(fh)`` into a temporary file beside ``path``, then rename it over
    ``path``: a reader never sees half a file, and a failed write leaves the old one."""
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)  # on a party's own node the folder may not exist yet
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{os.path.basename(path)}.", suffix=".tmp")
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


def resolve_weights(rows: Any) -> Any:
    """The sample weights that come with a data set's labels (see :func:`resolve_rows`), or None:
    unweighted data, a party without labels, or a reference that carries no weights."""
    fetch = getattr(rows, "fetch_weights", None)
    return None if fetch is None else fetch()


class PartyActor:
    """Base of every party role: name, mailbox, data sets kept by key, and the saved part.

    Subclasses set ``self.name`` and ``self.mailbox`` (whose key pair is made here, in the party's
    own actor; :mod:`ray_vfl.runtime.seal`) through :meth:`_start_party`, implement
    :meth:`encode_rows` (a data set's rows in the form the role computes on) and ``model_part``
    / ``restore`` (its share of the model, as JSON-able values) or override :meth:`save_part` /
    :meth:`load_part` for another format.
    """

    name: str
    mailbox: Mailbox
    rows: dict[str, Any]
    labels: dict[str, Any]
    weights: dict[str, Any]

    def _start_party(self, name: str) -> None:
        self.name = name
        self.mailbox = Mailbox(name)
        self.rows = {}
        self.labels = {}
        self.weights = {}  # sample weights of a data set, held with its labels

    # data sets --------------------------------------------------------------
    def encode_rows(self, frame: Any) -> Any:  # pragma: no cover - every role overrides it
        raise NotImplementedError

    def unseen_categories(self) -> dict[str, int]:
        """Per categorical column, how many rows of the data set last encoded hold a category unseen
        in training (encoded as missing). Roles whose encoders count them override this."""
        return {}

    def load_rows(self, key: str, table: Any) -> dict[str, Any]:
        """Fetch a data set (eval or prediction rows) from this party's store and encode it.

        Returns its row count and :meth:`unseen_categories`. Those counts go to the driver, which
        warns the user (:func:`warn_unseen_categories`): a count of rows per column says nothing
        about any row's value, so it is not a secret the party must keep.
        """
        frame, label = resolve_rows(table)
        self.rows[key] = self.encode_rows(frame)
        if label is not None:  # only the label party's store hands out labels
            self.labels[key] = label
            weight = resolve_weights(table)
            if weight is not None:
                self.weights[key] = weight
        return {"rows": len(frame), "unseen_categories": self.unseen_categories()}

    def drop_rows(self, key: str) -> None:
        self.rows.pop(key, None)
        self.labels.pop(key, None)
        getattr(self, "weights", {}).pop(key, None)

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
        # Half-written files too: a party stopped while writing leaves ".<name>.<random>.tmp" behind.
        gone = [f for f in os.listdir(folder) if f != os.path.basename(keep)
                and ((f.startswith(prefix) and f.endswith(".json")) or (f.startswith("." + prefix) and f.endswith(".tmp")))]
        for name in gone:
            os.unlink(os.path.join(folder, name))
        return gone

    def load_part(self, path: str) -> None:
        """Read a part written by :meth:`save_part` (on this party's machine)."""
        part = read_part(path, self.name)
        if not isinstance(part, dict) or part.get("party", self.name) != self.name:
            found = part.get("party") if isinstance(part, dict) else type(part).__name__
            raise DataError(f"party {self.name!r}: {path!r} is not its saved part (it belongs to {found!r})")
        # The role's own restore, not the actor's guarded one, which would report a damaged file's
        # KeyError as a fault of the party instead of the user's error it is.
        restore = inspect.unwrap(type(self).restore)
        try:
            restore(self, part)
        except (KeyError, TypeError, ValueError, IndexError) as exc:
            raise DataError(f"party {self.name!r}: {path!r} is not a complete saved model part "
                            f"({type(exc).__name__}: {exc}); save the model again") from exc


def read_part(path: str, party: str) -> dict[str, Any]:
    """A saved model part (JSON) on this party's node, or :class:`DataError` saying what is wrong."""
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except FileNotFoundError as exc:
        raise DataError(f"party {party!r}: no saved part at {path!r} on this node") from exc
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise DataError(f"party {party!r}: {path!r} is not a saved model part ({exc})") from exc


_warned: set[str] = set()  # the unseen-category warnings this process has given (each is given once)


def warn_unseen_categories(parties: Sequence[str], reports: Sequence[dict[str, Any]], what: str) -> None:
    """At the driver: one :class:`~ray_vfl.errors.DataWarning` per party whose
    :meth:`PartyActor.load_rows` counted categories unseen in training, naming each column
    with its count (counts only, never a value).

    A process gives each such warning once: a study that scores several models on the same
    test set would otherwise repeat the same lines for every model (and Python's own
    once-per-place filter forgets what it said whenever a library changes the warning filters).
    A repeat is logged at DEBUG instead.

    Example
    -------
    >>> import warnings
    >>> with warnings.catch_warnings(record=True) as said:
    ...     warnings.simplefilter("always")
    ...     for _ in range(2):
    ...         warn_unseen_categories(["shop"], [{"rows": 50, "unseen_categories": {"city": 7, "zip": 2, "tier": 0}}],
    ...                                "doctest data")
    >>> [str(w.message) for w in said]  # doctest: +NORMALIZE_WHITESPACE
    ["party 'shop', columns 'city', 'zip': 7 and 2 of 50 rows of the doctest data hold categories unseen in
    training; they are treated as missing values"]
    """
    for party, report in zip(parties, reports):
        counts = {col: n for col, n in (report or {}).get("unseen_categories", {}).items() if n}
        if not counts:
            continue
        cols, ns = ", ".join(map(repr, counts)), [str(n) for n in counts.values()]
        numbers = ns[0] if len(ns) == 1 else f"{', '.join(ns[:-1])} and {ns[-1]}"
        message = (f"party {party!r}, column{'s' if len(counts) > 1 else ''} {cols}: {numbers} of {report['rows']} rows "
                   f"of the {what} hold categories unseen in training; they are treated as missing values")
        if message in _warned:
            log.debug("%s (said before)", message)
            continue
        _warned.add(message)
        warnings.warn(message, DataWarning, stacklevel=3)


def save_parts(runtime: Any, parties: Sequence[str], directory: str, meta: dict[str, Any], suffix: str,
               kind: str = "") -> dict[str, str]:
    """Have each party write ``<directory>/<party><suffix>`` (its own part only), then write the
    federation's ``federation.json`` (roles and config, nothing secret; with the model ``kind`` and
    :data:`FORMAT_VERSION`, which :func:`load_meta` checks). Returns the part paths."""
    meta = {"kind": kind, "format_version": FORMAT_VERSION, **meta}
    try:
        os.makedirs(directory, exist_ok=True)
    except OSError as exc:  # a file in the way, a read-only place
        raise DataError(f"cannot save into {directory!r}: {exc}; name a folder (new or existing)") from exc
    paths = {p: os.path.join(directory, f"{p}{suffix}") for p in parties}
    runtime.get([(p, runtime.actor(p).save_part.remote(paths[p])) for p in parties], "save")
    write_atomically(os.path.join(directory, META_FILE), lambda fh: json.dump(meta, fh, indent=2))
    return paths


def load_meta(directory: str, what: str, kind: str | None = None) -> dict[str, Any]:
    """The ``federation.json`` of a saved federation of ``kind``, or :class:`DataError` naming
    ``what`` wrote it: a missing, empty or wrong folder, a damaged file, another format version or
    another kind of model."""
    if not isinstance(directory, (str, os.PathLike)):
        raise DataError(f"pass the folder {what} wrote, as a path; got {type(directory).__name__}")
    if not os.path.isdir(directory):
        state = "is a file, not a folder" if os.path.exists(directory) else "does not exist"
        raise DataError(f"{os.fspath(directory)!r} {state}; pass the folder {what} wrote")
    path = os.path.join(directory, META_FILE)
    try:
        with open(path, encoding="utf-8") as fh:
            meta = json.load(fh)
    except FileNotFoundError as exc:
        raise DataError(f"{path!r} not found: the folder holds no saved model; pass the folder {what} wrote") from exc
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise DataError(f"{path!r} is not a federation file written by {what} ({exc})") from exc
    except OSError as exc:
        raise DataError(f"cannot read {path!r}: {exc}") from exc
    if not isinstance(meta, dict):
        raise DataError(f"{path!r} is not a federation file written by {what}")
    version = meta.get("format_version")
    if version != FORMAT_VERSION:
        found = "no format version (an older ray_vfl wrote it)" if version is None else f"format version {version!r}"
        raise DataError(f"{path!r} has {found}; this ray_vfl reads format version {FORMAT_VERSION}: "
                        "train the model again and save it with this version")
    if kind is not None and meta.get("kind") != kind:
        raise DataError(f"{path!r} holds a {meta.get('kind') or 'different'} model, not a {kind} model as "
                        f"{what} writes; load it with the load_model of the estimator that saved it")
    return meta
