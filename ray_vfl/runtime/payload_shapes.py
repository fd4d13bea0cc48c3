"""What the send path records of a payload: its types, dtypes and shapes, never its values.

:func:`describe` turns a message payload (arrays, dataclasses, dicts, lists,
ciphertext arrays) into a nested tuple of type names and shapes; the send
path (:mod:`ray_vfl.runtime.comm`) keeps it in every record, so privacy tests can
audit what each party received. It lives apart from the transport so that
payload types elsewhere (the crypto layer's ciphertext arrays) can describe
themselves without importing it.

Example
-------
>>> import numpy as np
>>> describe({"g": np.zeros((2, 3))})
('dict', {'g': ('ndarray', 'float64', (2, 3))})
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import numpy as np

__all__ = ["describe", "dtype_name"]


_FIELDS: dict[type, tuple[str, ...]] = {}


@functools.lru_cache(maxsize=None)
def dtype_name(dtype: np.dtype) -> str:
    """``dtype.name``, cached: numpy builds that string in Python on every access, and the send
    path asks for it for every array of every message."""
    return dtype.name


def _public_fields(cls: type) -> tuple[str, ...]:
    names = _FIELDS.get(cls)
    if names is None:  # private caches (leading "_") never travel
        names = _FIELDS[cls] = tuple(f.name for f in dataclasses.fields(cls) if not f.name.startswith("_"))
    return names


def describe(payload: Any) -> Any:
    """Types and shapes of a payload, without its values (for audits)."""
    if isinstance(payload, np.ndarray):
        return ("ndarray", dtype_name(payload.dtype), payload.shape)
    if dataclasses.is_dataclass(payload) and not isinstance(payload, type):
        describe_self = getattr(payload, "describe", None)
        if describe_self is not None:
            return describe_self()
        return (type(payload).__name__, {name: describe(getattr(payload, name)) for name in _public_fields(type(payload))})
    if isinstance(payload, dict):
        return ("dict", {str(k): describe(v) for k, v in payload.items()})
    if isinstance(payload, (list, tuple)):
        return (type(payload).__name__, [describe(v) for v in payload])
    return type(payload).__name__
