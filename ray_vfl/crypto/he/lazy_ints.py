"""Ciphertext integers decoded from their bytes on first use, row by row.

A passive party reads one tree's encrypted gradient pairs at every level,
each time for the rows of that level's nodes. Decoding a 2048-bit ciphertext
from bytes costs about 1.9 us, three quarters of a ciphertext product, so
decoding those rows again at every level cost a passive party of a 4-party
run on credit about a third as much time as its ciphertext products.
:class:`LazyInts` decodes each row once, when it is first read, and keeps it.
"""

from __future__ import annotations

from typing import Any, Callable, Hashable, Iterable, Iterator

import numpy as np

__all__ = ["LazyInts", "shared_lazy_ints"]

# Per process, the one array last shared: ``((slot, version), rows)``. One is enough where a worker
# serves one party (a cluster; a local simulation runs several parties' sums in their actors), and it
# bounds what a worker keeps after a fit to one tree's gradient pairs.
_shared: tuple | None = None


class LazyInts:
    """The big integers of a ``uint8 (n, width)`` ciphertext matrix, each decoded on first read.

    Reads go through :meth:`gather` (a list of rows), indexing, slicing or
    iteration; all of them decode only the rows not read before.

    Example
    -------
    >>> rows = LazyInts(np.array([[0, 1], [1, 0]], dtype=np.uint8), lambda b: int.from_bytes(b, "big"))
    >>> rows.gather([1, 1]), rows.decoded, rows[0], len(rows)
    ([256, 256], 1, 1, 2)
    """

    __slots__ = ("_buf", "_width", "_conv", "_values", "_done")

    def __init__(self, data: np.ndarray, conv: Callable[[bytes], Any]) -> None:
        self._buf = data.tobytes()  # a private copy: never pins the (shared-memory) source array
        self._width = int(data.shape[1])
        self._conv = conv
        self._values: list = [None] * int(data.shape[0])
        self._done = np.zeros(int(data.shape[0]), dtype=bool)

    def __len__(self) -> int:
        return len(self._values)

    @property
    def decoded(self) -> int:
        """How many rows have been decoded so far."""
        return int(self._done.sum())

    def gather(self, rows: Iterable[int]) -> list:
        """The integers of ``rows`` (any order, repeats allowed), decoding those not read before."""
        ix = np.asarray(rows if isinstance(rows, np.ndarray) else list(rows), dtype=np.int64)
        if ix.size == 0:
            return []
        ix = np.where(ix < 0, ix + len(self._values), ix)
        need = np.zeros(len(self._values), dtype=bool)  # a mask, not np.unique: no sort of ix
        need[ix] = True
        need &= ~self._done
        missing = np.flatnonzero(need)
        if missing.size:
            buf, w, conv, values = self._buf, self._width, self._conv, self._values
            for i in missing.tolist():
                values[i] = conv(buf[i * w:(i + 1) * w])
            self._done[missing] = True
        values = self._values
        return [values[i] for i in ix.tolist()]

    def __getitem__(self, key):
        if isinstance(key, slice):
            return self.gather(range(*key.indices(len(self._values))))
        return self.gather([key])[0]

    def __iter__(self) -> Iterator:
        return iter(self.gather(range(len(self._values))))


def shared_lazy_ints(slot: Hashable, version: Hashable, data: np.ndarray, conv: Callable[[bytes], Any]) -> LazyInts:
    """This process's :class:`LazyInts` of ``data`` for ``(slot, version)``, shared by every call
    (task) with that key; another key replaces it, so a process keeps at most one such array.
    Callers must give a new ``version`` whenever ``data`` changes.

    Example
    -------
    >>> a = shared_lazy_ints("party", 1, np.zeros((2, 1), dtype=np.uint8), bytes)
    >>> a is shared_lazy_ints("party", 1, np.zeros((2, 1), dtype=np.uint8), bytes)
    True
    """
    global _shared
    if _shared is None or _shared[0] != (slot, version):
        _shared = ((slot, version), LazyInts(data, conv))
    return _shared[1]
