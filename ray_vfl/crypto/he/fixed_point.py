"""The one fixed-point encoding shared by every encrypted backend.

A real ``x`` is represented by the integer ``v = round(x * 2**frac_bits)``.
Homomorphic schemes compute modulo a plaintext modulus ``M`` (``n`` for
Paillier), so negative integers are mapped explicitly to ``v mod M``.
Following python-paillier, the modulus is cut into three parts::

    [0, max_int]              non-negative values
    (max_int, M - max_int)    overflow: decoding RAISES
    [M - max_int, M)          negative values (v - M)

with ``max_int = M // 3``. A sum that grows past ``max_int`` therefore lands
in the middle third and is reported as :class:`OverflowEncodingError` instead
of silently wrapping into a value of the other sign. Because
``2**frac_bits = 16**(frac_bits / 4)``, the encoding is bit-for-bit
python-paillier's ``EncodedNumber`` with ``exponent = -frac_bits / 4``
whenever ``frac_bits`` is a multiple of 4 (the default, 40, is).

Invariant: ``decode(encode(a) + encode(b)) == a + b`` up to ``2**-frac_bits``
rounding of each operand, as long as no overflow is raised.
"""

from __future__ import annotations

from typing import Iterable, Sequence

import numpy as np

from ray_vfl.errors import ConfigError, DataError, OverflowEncodingError

__all__ = ["FixedPoint", "center"]

# Largest |v| converted through int64 (vectorised); above it we go through Python ints.
_INT64_SAFE = float(2**62)


def center(values: Iterable[int], modulus: int) -> list[int]:
    """Map residues in ``[0, modulus)`` to signed integers, raising on the middle third.

    Parameters
    ----------
    values : iterable of int
        Residues modulo ``modulus``.
    modulus : int
        The plaintext modulus.

    Returns
    -------
    list of int
        Signed integers in ``[-modulus // 3, modulus // 3]``.

    Raises
    ------
    OverflowEncodingError
        If a residue lies strictly between ``modulus // 3`` and ``modulus - modulus // 3``.

    Example
    -------
    >>> center([5, 96], 101)
    [5, -5]
    """
    max_int = modulus // 3
    low_neg = modulus - max_int
    out = []
    for v in values:
        v = int(v)
        if v <= max_int:
            out.append(v)
        elif v >= low_neg:
            out.append(v - modulus)
        else:
            raise OverflowEncodingError(
                "decrypted value lies in the overflow band of the plaintext space: a sum or "
                "product exceeded the encodable range (use larger keys, fewer rows, or smaller values)"
            )
    return out


class FixedPoint:
    """Fixed-point encoding of float64 arrays into signed integers.

    Parameters
    ----------
    frac_bits : int, default 40
        Number of fractional bits; the resolution is ``2**-frac_bits``.
        Must be in ``[1, 512]``.

    Example
    -------
    >>> fp = FixedPoint(frac_bits=8)
    >>> fp.to_ints(np.array([1.5, -0.25]))
    [384, -64]
    >>> fp.decode(fp.encode(np.array([1.5, -0.25]), modulus=2**64 + 13), modulus=2**64 + 13)
    array([ 1.5 , -0.25])
    """

    def __init__(self, frac_bits: int = 40) -> None:
        if isinstance(frac_bits, bool) or not isinstance(frac_bits, (int, np.integer)):
            raise ConfigError(f"frac_bits must be an int, got {type(frac_bits).__name__}")
        if not 1 <= int(frac_bits) <= 512:
            raise ConfigError(f"frac_bits must be in [1, 512], got {frac_bits}")
        self.frac_bits = int(frac_bits)
        self.scale = 1 << self.frac_bits

    def __repr__(self) -> str:
        return f"FixedPoint(frac_bits={self.frac_bits})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, FixedPoint) and other.frac_bits == self.frac_bits

    def __hash__(self) -> int:
        return hash(("FixedPoint", self.frac_bits))

    # -- float <-> signed int ------------------------------------------------------------
    def rounded(self, x: np.ndarray) -> np.ndarray:
        """``x`` rounded to the encoding's grid, as floats: ``decode(encode(x))`` without the ints.

        Example
        -------
        >>> FixedPoint(frac_bits=2).rounded(np.array([0.3, -0.6])).tolist()
        [0.25, -0.5]
        """
        return np.ldexp(np.rint(np.ldexp(np.asarray(x, dtype=np.float64), self.frac_bits)), -self.frac_bits)

    def to_ints(self, x: np.ndarray, max_abs_int: int | None = None) -> list[int]:
        """Round ``x * 2**frac_bits`` to signed Python ints.

        Parameters
        ----------
        x : array_like of float
            1-D values.
        max_abs_int : int, optional
            Largest allowed ``|v|``; larger values raise :class:`OverflowEncodingError`.

        Returns
        -------
        list of int
        """
        x = as_float_vector(x, "x")
        if not np.all(np.isfinite(x)):
            if np.any(np.isnan(x)):
                raise DataError("cannot encode NaN")
            raise OverflowEncodingError("cannot encode +/-inf")
        with np.errstate(over="ignore"):
            scaled = np.rint(np.ldexp(x, self.frac_bits))
        if not np.all(np.isfinite(scaled)):
            raise OverflowEncodingError(f"value too large for the fixed-point encoding with frac_bits={self.frac_bits}")
        if scaled.size and float(np.max(np.abs(scaled))) < _INT64_SAFE:
            ints = scaled.astype(np.int64).tolist()
        else:  # exact: every float here is an integer value
            ints = [int(v) for v in scaled.tolist()]
        if max_abs_int is not None and ints:
            worst = max(max(ints), -min(ints))
            if worst > max_abs_int:
                raise OverflowEncodingError(
                    f"value {worst / self.scale:.6g} does not fit the fixed-point encoding "
                    f"(|x| must be <= {max_abs_int / self.scale:.6g} with frac_bits={self.frac_bits})"
                )
        return ints

    def from_ints(self, ints: Sequence[int]) -> np.ndarray:
        """Convert signed integers back to float64 (correctly rounded).

        Parameters
        ----------
        ints : sequence of int
            Signed fixed-point integers.

        Returns
        -------
        numpy.ndarray of float64
        """
        n = len(ints)
        if n == 0:
            return np.zeros(0, dtype=np.float64)
        if max(ints) < 2**62 and min(ints) > -(2**62):
            return np.ldexp(np.array(ints, dtype=np.int64).astype(np.float64), -self.frac_bits)
        # float(int) is correctly rounded; scaling by a power of two is exact.
        return np.ldexp(np.fromiter((float(v) for v in ints), dtype=np.float64, count=n), -self.frac_bits)

    # -- float <-> residues mod M ----------------------------------------------------------
    def encode(self, x: np.ndarray, modulus: int) -> list[int]:
        """Encode floats as residues modulo ``modulus`` (negatives as ``v mod M``).

        Raises
        ------
        OverflowEncodingError
            If ``|round(x * 2**frac_bits)| > modulus // 3``.
        """
        ints = self.to_ints(x, max_abs_int=modulus // 3)
        return [v % modulus for v in ints]

    def decode(self, residues: Iterable[int], modulus: int) -> np.ndarray:
        """Decode residues modulo ``modulus`` to float64.

        Raises
        ------
        OverflowEncodingError
            If a residue lies in the overflow band (see module docstring).
        """
        return self.from_ints(center(residues, modulus))


def as_float_vector(x: object, name: str) -> np.ndarray:
    """Return ``x`` as a 1-D float64 array or raise :class:`DataError`."""
    try:
        arr = np.asarray(x, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise DataError(f"{name} must be a 1-D array of floats: {exc}") from None
    if arr.ndim != 1:
        raise DataError(f"{name} must be 1-D, got shape {arr.shape}")
    return arr
