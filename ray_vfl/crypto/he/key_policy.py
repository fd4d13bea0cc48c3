"""The key-size policy of every backend.

2048 bits by default and at least; 1024-bit keys (about 80 bits of security, NIST SP 800-57) only
when the caller opts in (``allow_weak=True`` to :meth:`~ray_vfl.crypto.he.base.Backend.generate_keys`,
``allow_weak_keys=True`` in :class:`~ray_vfl.trees.config.BoostConfig`), with a
:class:`~ray_vfl.errors.SecurityWarning` that names the level; never below 1024.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from ray_vfl.errors import ConfigError, SecurityWarning

__all__ = ["MIN_KEY_BITS", "DEFAULT_KEY_BITS", "SECURITY_LEVELS", "security_level", "check_key_bits", "weak_key_warning"]

MIN_KEY_BITS = 1024  # the floor, even for a caller who opts into weak keys
DEFAULT_KEY_BITS = 2048  # the default, and the smallest size accepted without opting in
# (modulus bits, security level in bits), NIST SP 800-57 part 1, table 2.
SECURITY_LEVELS = ((1024, 80), (2048, 112), (3072, 128), (7680, 192), (15360, 256))


def security_level(key_bits: int) -> int:
    """Security level in bits of a ``key_bits``-bit modulus (NIST SP 800-57 part 1, table 2).

    Example
    -------
    >>> security_level(1024), security_level(2048), security_level(3072)
    (80, 112, 128)
    """
    return max(lvl for bits, lvl in SECURITY_LEVELS if bits <= max(int(key_bits), MIN_KEY_BITS))


def weak_key_warning(key_bits: int, opt_in: str = "allow_weak=True") -> str | None:
    """The :class:`~ray_vfl.errors.SecurityWarning` text for an accepted key under 2048 bits, naming
    its security level; ``None`` for a key of 2048 bits or more.

    Example
    -------
    >>> weak_key_warning(1024)[:52]
    'key_bits=1024 gives about 80 bits of security (112 a'
    >>> weak_key_warning(2048) is None
    True
    """
    if key_bits >= DEFAULT_KEY_BITS:
        return None
    return (f"key_bits={key_bits} gives about {security_level(key_bits)} bits of security "
            f"({security_level(DEFAULT_KEY_BITS)} at {DEFAULT_KEY_BITS} bits, NIST SP 800-57): accepted because of "
            f"{opt_in}; use it for tests and benchmarks only")


def check_key_bits(key_bits: Any, allow_weak: bool = False, opt_in: str = "allow_weak=True",
                   stacklevel: int = 2, warn: bool = True) -> int:
    """The key-size policy: ``key_bits`` as an int, or :class:`ConfigError` naming the fix.

    At least :data:`DEFAULT_KEY_BITS` (2048); from :data:`MIN_KEY_BITS` (1024) up only if the
    caller opts in (``allow_weak``), and then (if ``warn``) with a
    :class:`~ray_vfl.errors.SecurityWarning` that names the security level
    (:func:`weak_key_warning`). ``opt_in`` is how the caller's API spells the opt-in.

    Example
    -------
    >>> check_key_bits(2048)
    2048
    >>> check_key_bits(1024)
    Traceback (most recent call last):
    ...
    ray_vfl.errors.ConfigError: key_bits=1024 gives about 80 bits of security, below the 112 bits of 2048-bit keys (NIST SP 800-57): use key_bits=2048 (the default) or more, or pass allow_weak=True to accept it (tests and benchmarks only)
    """
    if isinstance(key_bits, bool) or not isinstance(key_bits, (int, np.integer)):
        raise ConfigError(f"key_bits must be an integer such as 2048, got {key_bits!r}")
    key_bits = int(key_bits)
    if key_bits < MIN_KEY_BITS:
        raise ConfigError(f"key_bits must be >= {MIN_KEY_BITS} for any security (2048 recommended), got {key_bits}; "
                          "smaller keys are breakable")
    if key_bits < DEFAULT_KEY_BITS:
        level, default_level = security_level(key_bits), security_level(DEFAULT_KEY_BITS)
        if not allow_weak:
            raise ConfigError(
                f"key_bits={key_bits} gives about {level} bits of security, below the {default_level} bits of "
                f"{DEFAULT_KEY_BITS}-bit keys (NIST SP 800-57): use key_bits={DEFAULT_KEY_BITS} (the default) or more, "
                f"or pass {opt_in} to accept it (tests and benchmarks only)")
        if warn:
            warnings.warn(weak_key_warning(key_bits, opt_in), SecurityWarning, stacklevel=stacklevel + 1)
    return key_bits
