"""Tags of ciphertext arrays: what their entries encode, and the layout of compressed arrays.

A tag such as ``"gh:f40:v57:r20:g8"`` names a gradient-pair encoding; a
compressed array appends ``":pack<k>:n<count>"`` (``k`` entries per
ciphertext, ``count`` entries in all, the last ciphertext possibly partial).
"""

from __future__ import annotations

import re

import numpy as np

from ray_vfl.errors import CryptoError

__all__ = ["compressed_tag", "compressed_layout", "take_compressed_tag"]


_COMPRESSED = re.compile(r"^(gh:[^|]*):pack(\d+):n(\d+)$")


def compressed_tag(base: str, per: int, count: int) -> str:
    """Tag of ``count`` packed entries stored ``per`` to a ciphertext.

    Example
    -------
    >>> compressed_tag("gh:f40:v57:r20:g8", 11, 100)
    'gh:f40:v57:r20:g8:pack11:n100'
    """
    return f"{base}:pack{per}:n{count}"


def compressed_layout(tag: str) -> tuple[str, int, int] | None:
    """``(gh tag, entries per ciphertext, entry count)`` of a compressed tag, else ``None``.

    Example
    -------
    >>> compressed_layout("gh:f40:v57:r20:g8:pack11:n100")
    ('gh:f40:v57:r20:g8', 11, 100)
    >>> compressed_layout("num:f40") is None
    True
    """
    m = _COMPRESSED.match(tag)
    return None if m is None else (m.group(1), int(m.group(2)), int(m.group(3)))


def take_compressed_tag(tag: str, n_cts: int, ix: np.ndarray) -> str:
    """Tag of ``c[ix]`` for a compressed ``c``: only the last pick may be the partial ciphertext."""
    base, per, count = compressed_layout(tag)
    last = count - per * (n_cts - 1)  # entries in the last ciphertext
    sel = ix % n_cts if n_cts else ix
    out = per * len(sel)
    if len(sel) and last < per:
        partial = np.flatnonzero(sel == n_cts - 1)
        if partial.size and (partial.size > 1 or partial[0] != len(sel) - 1):
            raise CryptoError(
                "a compressed array's partial last ciphertext can only be taken as the last element: "
                "take contiguous chunks, or compress after selecting"
            )
        if partial.size:
            out -= per - last
    return compressed_tag(base, per, out)
