"""A party's pool of Ray tasks, pinned to that party's resource: where its heavy crypto runs."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import ray

__all__ = ["TaskPool"]

_REMOTE_CACHE: dict[Callable, Any] = {}


def _import_modules(modules: Sequence[str]) -> int:
    """Warm-up task: load the modules later tasks need, once per worker process."""
    import importlib

    for name in modules:
        importlib.import_module(name)
    return os.getpid()


def _remote(fn: Callable):
    if fn not in _REMOTE_CACHE:
        _REMOTE_CACHE[fn] = ray.remote(fn)
    return _REMOTE_CACHE[fn]


@dataclass(frozen=True)
class TaskPool:
    """A party's pool of Ray tasks, pinned to that party's resource.

    ``map`` runs ``fn(chunk, *shared)`` for every chunk, on ``workers`` Ray
    tasks at most in parallel, or in-process when ``workers == 1`` (or without
    a resource, as in unit tests). Shared arguments are put into the object
    store once, not once per task.

    Example
    -------
    >>> TaskPool(resource=None, workers=1).map(sum, [[1, 2], [3]])
    [3, 3]
    """

    resource: str | None
    workers: int = 1
    timeout_s: float = 600.0

    def chunks(self, n_items: int, min_chunk: int = 256) -> list[slice]:
        """Split ``range(n_items)`` into at most ``workers`` contiguous slices."""
        parts = max(1, min(self.workers, math.ceil(n_items / max(1, min_chunk))))
        bounds = [round(i * n_items / parts) for i in range(parts + 1)]
        return [slice(bounds[i], bounds[i + 1]) for i in range(parts)]

    def warm_up(self, modules: Sequence[str]) -> list:
        """Start the pool's worker processes now, importing ``modules``, instead of on the first real task.

        Returns the task refs (empty when the pool runs in-process); starting
        workers costs seconds, best spent while the label party makes its keys.
        """
        if self.resource is None or self.workers <= 1:
            return []
        remote = _remote(_import_modules).options(num_cpus=1, resources={self.resource: 0.01}, max_retries=0)
        return [remote.remote(list(modules)) for _ in range(self.workers)]

    def balance(self, costs: Sequence[float]) -> list[list[int]]:
        """Items (by index) spread over at most ``workers`` jobs, longest first onto the least loaded
        job; each job's indices ascending, empty jobs dropped.

        Example
        -------
        >>> TaskPool(resource=None, workers=2).balance([3.0, 1.0, 2.0, 2.0])
        [[0, 1], [2, 3]]
        """
        loads, jobs = [0.0] * self.workers, [[] for _ in range(self.workers)]
        for i in sorted(range(len(costs)), key=lambda i: -costs[i]):
            w = loads.index(min(loads))
            jobs[w].append(i)
            loads[w] += costs[i]
        return [sorted(job) for job in jobs if job]

    def map(self, fn: Callable, chunks: Sequence[Any], *shared: Any) -> list[Any]:
        if self.resource is None or self.workers <= 1 or len(chunks) <= 1:
            shared = tuple(ray.get(s, timeout=self.timeout_s) if isinstance(s, ray.ObjectRef) else s for s in shared)
            return [fn(chunk, *shared) for chunk in chunks]
        remote = _remote(fn).options(num_cpus=1, resources={self.resource: 0.01}, max_retries=0)
        shared_refs = [s if isinstance(s, ray.ObjectRef) else ray.put(s) for s in shared]
        refs = [remote.remote(chunk, *shared_refs) for chunk in chunks]
        try:
            return ray.get(refs, timeout=self.timeout_s)
        except BaseException:  # the first failed task raised: the others are fetched by nobody now
            for ref in refs:
                ref.future()  # counts as a fetch for Ray: no "Unhandled error" report of them (waiting.settle)
            raise
