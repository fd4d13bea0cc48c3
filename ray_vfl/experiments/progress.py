"""A long job's runs: a bar with an ETA, each finished run saved at once, Ctrl-C reported in one line.

A study of hours is many runs (a setting, a backend, a repeat). :class:`RunLog` runs a list of them,
appends each result to a JSON-lines file the moment it finishes, and skips the runs that file already
holds when the same command starts again (a run is known by a hash of its settings, :func:`run_id`);
an interrupted job therefore loses at most the run in flight. Ctrl-C during the runs becomes
:class:`Interrupted`, whose message is the one line a job prints before it exits with status 130.
:func:`~ray_vfl.experiments.run_sweep` keeps its rows in a results table instead and raises the same
exception. :class:`TreeProgress` is the bar under the bar: one run's trees, with a log line for every
tree that took a minute or more.

Example
-------
>>> import os, tempfile
>>> path = os.path.join(tempfile.mkdtemp(), "runs.jsonl")
>>> squares = RunLog(path, [{"n": 1}, {"n": 2}], "squares")
>>> squares.run(lambda run: {"square": run["n"] ** 2}, progress=False)
[{'square': 1}, {'square': 4}]
>>> again = RunLog(path, [{"n": 2}, {"n": 3}], "squares")   # n=2 is in the file: only n=3 runs
>>> again.finished, again.run(lambda run: {"square": -1}, progress=False)
(1, [{'square': 4}, {'square': -1}])
>>> print(again.interrupted())  # doctest: +ELLIPSIS
interrupted: 2 of 2 runs saved in ...; rerun the same command to resume
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import sys
from typing import Any, Callable, Sequence

from ..errors import DataError, VFLError
from ..trees.callbacks import TrainingCallback

__all__ = ["RunLog", "Interrupted", "TreeProgress", "close_bars", "run_id", "run_job", "INTERRUPTED_EXIT"]

log = logging.getLogger(__name__)
INTERRUPTED_EXIT = 130  # what a shell reports for a process ended by SIGINT (128 + 2)


class Interrupted(KeyboardInterrupt):
    """Ctrl-C during a job's runs: how many of them are saved, and where. Still a
    :class:`KeyboardInterrupt` for code that does not know it; ``str()`` is the line a job prints."""

    def __init__(self, saved: int, total: int, folder: str) -> None:
        self.saved, self.total, self.folder = saved, total, folder
        super().__init__(f"interrupted: {saved} of {total} runs saved in {folder}; rerun the same command to resume")

    def __str__(self) -> str:
        return str(self.args[0])


def _plain(value: Any) -> Any:
    """numpy scalars and arrays as JSON values (anything else as its text)."""
    if hasattr(value, "tolist"):
        return value.tolist()
    return str(value)


def run_id(settings: dict[str, Any]) -> str:
    """A run's name: a hash of its settings (key order does not matter).

    >>> run_id({"a": 1, "b": None}) == run_id({"b": None, "a": 1}) != run_id({"a": 2, "b": None})
    True
    """
    text = json.dumps(settings, sort_keys=True, default=_plain)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


class RunLog:
    """Runs ``runs`` (each a dict of JSON settings) through :meth:`run`, saving each result as it finishes.

    Parameters
    ----------
    path : str
        The JSON-lines file (one ``{"run_id", "run", "result"}`` object per finished run); its folder is
        created. Lines of other settings stay in the file; a last line cut short by a killed process is
        skipped with a warning.
    runs : sequence of dict
        Every run's settings, in the order to run them; a run's :func:`run_id` is a hash of its dict, so
        put every setting that changes a result into it.
    desc : str
        The progress bar's label.
    """

    def __init__(self, path: str, runs: Sequence[dict[str, Any]], desc: str = "runs") -> None:
        self.path, self.desc = path, desc
        self.runs = [dict(r) for r in runs]
        self.ids = [run_id(r) for r in self.runs]
        try:
            os.makedirs(self.folder, exist_ok=True)
        except OSError as exc:
            raise DataError(f"cannot write results into {self.folder!r}: {exc}") from exc
        self.saved: dict[str, Any] = {}
        if os.path.exists(path):
            with open(path, encoding="utf-8") as fh:
                for number, line in enumerate(fh, 1):
                    try:
                        entry = json.loads(line)
                        self.saved[entry["run_id"]] = entry["result"]
                    except (ValueError, KeyError, TypeError):
                        log.warning("%s line %d is not a saved run (cut short?): skipped", path, number)

    @property
    def folder(self) -> str:
        return os.path.dirname(os.path.abspath(self.path))

    @property
    def finished(self) -> int:
        """How many of this log's runs are saved."""
        return sum(i in self.saved for i in self.ids)

    def interrupted(self) -> Interrupted:
        """The exception (and one-line message) for Ctrl-C now."""
        return Interrupted(self.finished, len(self.runs), os.path.relpath(self.folder))

    @contextlib.contextmanager
    def guard(self):
        """Ctrl-C anywhere inside (starting Ray, writing the tables) becomes :meth:`interrupted` too."""
        try:
            yield self
        except Interrupted:
            raise
        except KeyboardInterrupt:
            raise self.interrupted() from None

    def _save(self, ident: str, run: dict[str, Any], result: Any) -> None:
        line = json.dumps({"run_id": ident, "run": run, "result": result}, default=_plain)
        with open(self.path, "a", encoding="utf-8") as fh:
            fh.write(line + "\n")
        self.saved[ident] = result

    def run(self, work: Callable[[dict[str, Any]], Any], progress: bool = True) -> list[Any]:
        """``work(run)`` for every run not saved yet, each result saved as it returns; the results of
        every run, in order. A bar over the runs (tqdm: done, rate, ETA) if ``progress``, with log lines
        printed above it; Ctrl-C raises :class:`Interrupted`."""
        todo = [(i, r) for i, r in zip(self.ids, self.runs) if i not in self.saved]
        if len(todo) < len(self.runs):
            log.info("%s: %d of %d runs already saved in %s; running the other %d", self.desc,
                     len(self.runs) - len(todo), len(self.runs), os.path.relpath(self.path), len(todo))
        bar, redirect = None, contextlib.nullcontext()
        if progress and todo:
            from tqdm.auto import tqdm
            from tqdm.contrib.logging import logging_redirect_tqdm

            bar, redirect = tqdm(total=len(todo), desc=self.desc, unit="run"), logging_redirect_tqdm()
        try:
            with redirect:
                for ident, run in todo:
                    self._save(ident, run, work(dict(run)))
                    if bar is not None:
                        bar.update(1)
        except KeyboardInterrupt:
            close_bars()
            raise self.interrupted() from None
        finally:
            if bar is not None:
                bar.close()
        return [self.saved[i] for i in self.ids]


_OPEN_BARS: set = set()  # bars of runs in flight: closed when Ctrl-C ends their run before its last tree


def close_bars() -> None:
    """Close the tree bars of interrupted runs (so the line a job prints next is not drawn over)."""
    for bar in list(_OPEN_BARS):
        bar.close()
    _OPEN_BARS.clear()


class TreeProgress(TrainingCallback):
    """The trees of one run: a bar under the bar over the runs (tqdm with its ETA; gone when the run
    ends) if ``progress``, and a log line per tree that took a minute or more (``timer``'s last lap, a
    :class:`~ray_vfl.trees.callbacks.TreeTimer` listed before this callback; quicker trees log at DEBUG)."""

    def __init__(self, desc: str, timer: Any, progress: bool) -> None:
        self.desc, self.timer, self.progress, self.bar, self.total = desc, timer, progress, None, 0

    def before_training(self, config: Any) -> None:
        self.total = config.n_trees
        if self.progress:
            from tqdm.auto import tqdm

            self.bar = tqdm(total=config.n_trees, desc=self.desc, unit="tree", position=1, leave=False)
            _OPEN_BARS.add(self.bar)

    def after_iteration(self, iteration: int, logs: dict[str, dict[str, float]]) -> bool:
        lap = self.timer.laps[-1] if getattr(self.timer, "laps", None) else float("nan")
        log.log(logging.INFO if lap >= 60.0 else logging.DEBUG, "%s: tree %d of %d in %.1f s", self.desc,
                iteration + 1, self.total, lap)
        if self.bar is not None:
            self.bar.update(iteration + 1 - self.bar.n)
        return False

    def after_training(self, model: Any) -> None:
        if self.bar is not None:
            self.bar.close()
            _OPEN_BARS.discard(self.bar)


def run_job(main: Callable[[Any], int], argv: Sequence[str] | None = None) -> int:
    """A job's ``main(argv)`` as the command line runs it: bad input is one ``error:`` line (status 1),
    Ctrl-C one line saying how many runs are saved (status 130)."""
    try:
        return main(argv)
    except VFLError as exc:  # bad input or a failed party: the message names the problem and the fix
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt as exc:  # Interrupted (from the run log) says what is saved
        print(str(exc) or "interrupted: no run started", file=sys.stderr)
        return INTERRUPTED_EXIT
