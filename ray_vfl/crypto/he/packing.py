"""GH packing: one plaintext carries a gradient and a hessian.

Layout (balanced, offset-free)::

    P = G + H * 2**s          with  -2**(s-1) <= G, H < 2**(s-1)

where ``G``, ``H`` are the signed fixed-point integers of ``g`` and ``h`` and
``s = slot_bits``. ``P`` is encrypted as ``P mod n``. Because the map is
linear over the integers, every homomorphic operation (sum, difference,
multiplication by an integer, of either sign) acts slot-wise, and no offset
has to be undone, so a packed entry never needs to know how many rows were
summed into it. Unpacking reads the low slot as a *signed* digit::

    G = ((P + 2**(s-1)) mod 2**s) - 2**(s-1),   H = (P - G) / 2**s

Slot width: ``s = 1 (sign) + value_bits + count_bits + guard_bits`` where
``2**value_bits >= gradient_bound * 2**frac_bits`` and ``2**count_bits >= max_rows``.
A legitimate sum of at most ``max_rows`` encoded values has
``|G|, |H| <= bound = value_bound * max_rows``; a decoded slot in the guard
band ``(bound, 2**(s-1))`` can only come from an overflow and raises
:class:`OverflowEncodingError`. (Sums more than ``2**guard_bits`` times past
the bound can wrap undetected; ``max_rows`` is the contract.)

Cipher compression stacks ``k`` packed entries into one plaintext, entry
``i`` shifted by ``i * 2 * slot_bits`` bits::

    C = P_0 + P_1 * 2**(2s) + ... + P_(k-1) * 2**(2s (k-1))

``C`` is again a balanced base-``2**s`` number (its ``2k`` digits are the
``G``, ``H`` slots), so :meth:`GHPacking.unpack_compressed` reads the slots
back exactly, signs included. ``|C| < 2**(2sk)``, so ``k`` is the largest
count with ``2sk + 1 < bitlen(M // 3)`` for a plaintext modulus ``M``: the
same safe range (``|C| <= M // 3``) as single entries (:meth:`max_entries`).

With ``pairs = K`` (multi-class: a row's ``K`` gradient pairs, one per class) one entry is ``K`` pairs
in the same layout, ``P = P_0 + P_1 2**(2s) + ... + P_(K-1) 2**(2s (K-1))``: one ciphertext per row,
its ``K`` pairs summed slot-wise by every homomorphic sum, and compression stacks whole entries
``2 s K`` bits apart (:attr:`GHPacking.entry_bits`).
"""

from __future__ import annotations

import math

import numpy as np

from ray_vfl.crypto.he.fixed_point import FixedPoint, as_float_vector
from ray_vfl.errors import ConfigError, DataError, OverflowEncodingError

__all__ = ["GHPacking"]


class GHPacking:
    """Pack (gradient, hessian) pairs into one signed integer.

    Parameters
    ----------
    fixed_point : FixedPoint
        Encoding of each slot.
    gradient_bound : float, default 2**16
        Largest ``|g|`` or ``|h|`` accepted by :meth:`pack`.
    max_rows : int, default 2**20
        Largest number of rows whose sum must unpack exactly.
    guard_bits : int, default 8
        Extra bits per slot used to detect overflow.
    pairs : int, default 1
        Gradient pairs per entry (``K`` classes: ``g`` and ``h`` are ``(n, K)``, and so are the
        unpacked sums).

    Example
    -------
    >>> pk = GHPacking(FixedPoint(40))
    >>> p = pk.pack(np.array([0.5, -1.0]), np.array([0.25, 0.125]))
    >>> pk.unpack([p[0] + p[1]])
    (array([-0.5]), array([0.375]))
    """

    def __init__(
        self,
        fixed_point: FixedPoint,
        gradient_bound: float = 2.0**16,
        max_rows: int = 2**20,
        guard_bits: int = 8,
        pairs: int = 1,
    ) -> None:
        if not (isinstance(gradient_bound, (int, float)) and math.isfinite(gradient_bound) and gradient_bound > 0):
            raise ConfigError(f"gradient_bound must be a positive finite number, got {gradient_bound!r}")
        if isinstance(max_rows, bool) or not isinstance(max_rows, int) or max_rows < 1:
            raise ConfigError(f"max_rows must be a positive int, got {max_rows!r}")
        if isinstance(guard_bits, bool) or not isinstance(guard_bits, int) or not 1 <= guard_bits <= 64:
            raise ConfigError(f"guard_bits must be an int in [1, 64], got {guard_bits!r}")
        if isinstance(pairs, bool) or not isinstance(pairs, int) or not 1 <= pairs <= 1000:
            raise ConfigError(f"pairs must be an int in [1, 1000], got {pairs!r}")
        self.pairs = pairs
        self.fixed_point = fixed_point
        self.gradient_bound = float(gradient_bound)
        self.max_rows = max_rows
        self.guard_bits = guard_bits
        self.value_bound = int(math.floor(self.gradient_bound * fixed_point.scale))  # as a fixed-point integer
        self.value_bits = max(self.value_bound.bit_length(), 1)
        self.count_bits = (max_rows - 1).bit_length()
        self.slot_bits = 1 + self.value_bits + self.count_bits + guard_bits
        self.bound = self.value_bound * max_rows
        self.entry_bits = 2 * self.slot_bits * pairs  # one entry's width: compression's shift
        self.total_bits = self.entry_bits + 1
        self.tag = (
            f"gh:f{fixed_point.frac_bits}:v{self.value_bits}:r{self.count_bits}:g{guard_bits}"
        ) + (f":k{pairs}" if pairs > 1 else "")

    def __repr__(self) -> str:
        return (
            f"GHPacking(frac_bits={self.fixed_point.frac_bits}, gradient_bound={self.gradient_bound}, "
            f"max_rows={self.max_rows}, slot_bits={self.slot_bits})"
        )

    def check_modulus(self, modulus: int) -> None:
        """Raise :class:`ConfigError` unless packed sums stay below ``modulus // 3``."""
        if self.total_bits >= (modulus // 3).bit_length():
            raise ConfigError(
                f"GH packing needs {self.total_bits} bits but the plaintext modulus has "
                f"{modulus.bit_length()}: lower max_rows / gradient_bound / frac_bits or use larger keys"
            )

    def max_entries(self, modulus: int) -> int:
        """How many packed entries fit one plaintext modulo ``modulus`` (0 if none).

        Example
        -------
        >>> GHPacking(FixedPoint(40)).max_entries(2**2048)  # 173-bit entries, 172 bits apart
        11
        """
        return max(0, ((modulus // 3).bit_length() - 2) // self.entry_bits)

    def pack(self, g: np.ndarray, h: np.ndarray, sums: bool = False) -> list[int]:
        """Return the signed packed integers ``G + H * 2**slot_bits``.

        ``sums=True`` packs sums of up to ``max_rows`` values (``|g|, |h| <= bound``) instead of single
        values: what a party that sums its own gradients in plaintext encrypts (PIVODL).

        Raises
        ------
        DataError
            If ``g`` and ``h`` differ in length.
        OverflowEncodingError
            If ``|g|`` or ``|h|`` exceeds ``gradient_bound``.
        """
        if self.pairs > 1:
            return self._pack_rows(g, h, sums)
        g = as_float_vector(g, "g")
        h = as_float_vector(h, "h")
        if g.shape != h.shape:
            raise DataError(f"g and h must have the same length, got {len(g)} and {len(h)}")
        limit = self.bound if sums else self.value_bound
        gi = self.fixed_point.to_ints(g, max_abs_int=limit)
        hi = self.fixed_point.to_ints(h, max_abs_int=limit)
        s = self.slot_bits
        return [a + (b << s) for a, b in zip(gi, hi)]

    def _pack_rows(self, g: np.ndarray, h: np.ndarray, sums: bool) -> list[int]:
        """``(n, K)`` pairs as ``n`` entries of ``K`` pairs each (class 0 in the lowest slots)."""
        g, h = np.asarray(g, dtype=np.float64), np.asarray(h, dtype=np.float64)
        if g.ndim != 2 or g.shape != h.shape or g.shape[1] != self.pairs:
            raise DataError(f"g and h must both be (n, {self.pairs}) arrays, got {g.shape} and {h.shape}")
        flat = self.pack(g.ravel(), h.ravel(), sums) if self.pairs == 1 else _Single(self).pack(g.ravel(), h.ravel(), sums)
        shift, k = 2 * self.slot_bits, self.pairs
        out = []
        for lo in range(0, len(flat), k):
            acc = 0
            for p in reversed(flat[lo:lo + k]):
                acc = (acc << shift) + p
            out.append(acc)
        return out

    def unpack(self, packed: list[int]) -> tuple[np.ndarray, np.ndarray]:
        """Split signed packed integers into float64 ``(G, H)`` arrays.

        Raises
        ------
        OverflowEncodingError
            If a slot exceeds the sum bound (a sum of more than ``max_rows``
            rows or values larger than ``gradient_bound``).
        """
        if self.pairs > 1:
            return self._unpack_rows(packed)
        s = self.slot_bits
        half = 1 << (s - 1)
        mask = (1 << s) - 1
        bound = self.bound
        gs, hs = [], []
        for p in packed:
            lo = ((p + half) & mask) - half
            hi = (p - lo) >> s
            if not (-bound <= lo <= bound and -bound <= hi <= bound):
                raise OverflowEncodingError(
                    "packed gradient/hessian slot overflowed: more than max_rows="
                    f"{self.max_rows} rows of |value| <= {self.gradient_bound:g} were summed"
                )
            gs.append(lo)
            hs.append(hi)
        fp = self.fixed_point
        return fp.from_ints(gs), fp.from_ints(hs)

    def _unpack_rows(self, packed: list[int]) -> tuple[np.ndarray, np.ndarray]:
        """Entries of ``K`` pairs back to ``(n, K)`` sums."""
        return self.unpack_compressed(packed, 1, len(packed))

    def unpack_compressed(self, values: list[int], per: int, count: int) -> tuple[np.ndarray, np.ndarray]:
        """Split signed compressed plaintexts into the float64 ``(G, H)`` of ``count`` entries.

        Parameters
        ----------
        values : list of int
            Signed plaintexts, each holding ``per`` entries (the last one the
            remaining ``count - per * (len(values) - 1)``).
        per : int
            Entries per plaintext.
        count : int
            Total number of entries.

        Raises
        ------
        OverflowEncodingError
            If a slot exceeds the sum bound or a plaintext does not fit its entries.

        Example
        -------
        >>> pk = GHPacking(FixedPoint(40))
        >>> a, b = pk.pack(np.array([0.5, -1.0]), np.array([-0.25, 2.0]))
        >>> pk.unpack_compressed([a + (b << 2 * pk.slot_bits)], per=2, count=2)
        (array([ 0.5, -1. ]), array([-0.25,  2.  ]))
        """
        s = self.slot_bits
        half, mask = 1 << (s - 1), (1 << s) - 1
        if count > per * len(values) or (values and count <= per * (len(values) - 1)):
            raise DataError(f"{len(values)} plaintexts of {per} entries cannot hold {count} entries")
        offsets: dict[int, int] = {}
        digits: list[int] = []
        left = count
        for v in values:
            r = min(per, left)
            left -= r
            nbits = r * self.entry_bits
            if r not in offsets:  # half in every digit: makes each digit a plain bit field
                offsets[r] = half * (((1 << nbits) - 1) // mask)
            x = v + offsets[r]
            if x < 0 or x >> nbits:
                raise OverflowEncodingError(
                    "compressed gradient/hessian plaintext overflowed: a slot exceeded its range")
            digits.extend(((x >> shift) & mask) - half for shift in range(0, nbits, s))
        if digits and max(max(digits), -min(digits)) > self.bound:
            raise OverflowEncodingError(
                "packed gradient/hessian slot overflowed: more than max_rows="
                f"{self.max_rows} rows of |value| <= {self.gradient_bound:g} were summed"
            )
        fp = self.fixed_point
        G, H = fp.from_ints(digits[0::2]), fp.from_ints(digits[1::2])
        return (G, H) if self.pairs == 1 else (G.reshape(count, self.pairs), H.reshape(count, self.pairs))


class _Single(GHPacking):
    """The one-pair packing of a :class:`GHPacking` of several pairs (same slots): packs the pairs
    that :meth:`GHPacking._pack_rows` stacks."""

    def __init__(self, multi: GHPacking) -> None:
        super().__init__(multi.fixed_point, multi.gradient_bound, multi.max_rows, multi.guard_bits)
