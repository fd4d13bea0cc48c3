"""What every validated, frozen hyper-parameter set shares: strict construction and range checks.

A config checks itself on construction and names the fix in its message::

    >>> check_int("max_depth", 0, 1, 16)
    Traceback (most recent call last):
    ...
    ray_vfl.errors.ConfigError: max_depth must be an integer in [1, 16], got 0
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Mapping

from .errors import ConfigError

__all__ = ["ValidatedConfig", "check_int", "check_float"]

def check_int(name: str, value: Any, lo: int, hi: int) -> None:
    """Raise :class:`ConfigError` unless ``value`` is an integer in ``[lo, hi]``."""
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise ConfigError(f"{name} must be an integer in [{lo}, {hi}], got {value!r}")


def check_float(name: str, value: Any, lo: float, hi: float, lo_open: bool = False) -> None:
    """Raise :class:`ConfigError` unless ``value`` is a finite number in ``[lo, hi]`` (``(lo, hi]`` if ``lo_open``)."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if ok:
        ok = (lo < value if lo_open else lo <= value) and value <= hi
    if not ok:
        bracket = "(" if lo_open else "["
        raise ConfigError(f"{name} must be a finite number in {bracket}{lo}, {hi}], got {value!r}")


class ValidatedConfig:
    """Mixin of frozen config dataclasses: strict construction from a mapping, validated copies."""

    @classmethod
    def from_dict(cls, params: Mapping[str, Any]):
        """Build from a mapping; unknown keys are an error, not silently ignored."""
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(params) - known)
        if unknown:
            raise ConfigError(f"unknown {cls.__name__} parameter(s) {unknown}; valid names are {sorted(known)}")
        return cls(**dict(params))

    def replace(self, **changes: Any):
        """Return a copy with some fields changed (validated again)."""
        return self.from_dict({**dataclasses.asdict(self), **changes})

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)
