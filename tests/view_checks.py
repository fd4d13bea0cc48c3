"""Shared checks for the privacy tests: a view table against a run, and a view's independence of a secret.

``independent_of_secret`` is the test every "learns nothing" row of a view table gets: the receiver's view
(numbers it received: ciphertexts, masked shares, refusals) under one secret and under another must be
drawn from the same distribution. Big integers are read as fractions of their modulus (their top 53 bits),
so a ciphertext or a share mod N is compared where a leak would show: an unobfuscated Paillier ciphertext
``1 + m n`` sits near 0 or 1, a share with a short mask near 0.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
from scipy.stats import ks_2samp


def as_fractions(values: Sequence, modulus: int | None = None) -> np.ndarray:
    """Values as floats in [0, 1): big ints divided by ``modulus`` (exactly, by their top bits)."""
    values = list(values)
    if modulus is None:
        return np.asarray(values, dtype=float)
    shift = max(modulus.bit_length() - 53, 0)
    top = float(modulus >> shift)
    return np.array([float((int(v) % modulus) >> shift) / top for v in values])


def independent_of_secret(view_a: Sequence, view_b: Sequence, modulus: int | None = None,
                          alpha: float = 1e-3) -> float:
    """Two-sample Kolmogorov-Smirnov p-value of two views (under two secrets); raises if below ``alpha``.

    With ``modulus``, each view must also be indistinguishable from uniform mod ``modulus`` (a view that
    does not depend on the secret but is not uniform, e.g. ``Enc(0)`` unobfuscated, fails too).
    """
    a, b = as_fractions(view_a, modulus), as_fractions(view_b, modulus)
    if len(a) < 20 or len(b) < 20:
        raise ValueError(f"a distribution test needs at least 20 values per view, got {len(a)} and {len(b)}")
    p = float(ks_2samp(a, b).pvalue)
    if p < alpha:
        raise AssertionError(f"the view depends on the secret: KS p-value {p:.2e} < {alpha}")
    if modulus is not None:
        for name, x in (("first", a), ("second", b)):
            q = float(ks_2samp(x, np.linspace(0, 1, 2001)).pvalue)
            if q < alpha:
                raise AssertionError(f"the {name} view is not uniform mod its modulus: KS p-value {q:.2e}")
    return p
