"""The ray_vfl exception hierarchy.

Every error a user can cause is a :class:`VFLError`; the message says what is
wrong and how to fix it. Ray failures are turned into :class:`PartyFailedError`
at the runtime boundary so the driver never sees a bare ``RayActorError``.
"""

from __future__ import annotations

__all__ = [
    "VFLError",
    "ConfigError",
    "DataError",
    "CryptoError",
    "OverflowEncodingError",
    "PartyFailedError",
    "NotFittedError",
]


class VFLError(Exception):
    """Base class of every ray_vfl error."""


class ConfigError(VFLError, ValueError):
    """A hyper-parameter or option is out of range, unknown, or inconsistent."""


class DataError(VFLError, ValueError):
    """Input data is malformed: misaligned rows, bad labels, bad columns."""


class CryptoError(VFLError):
    """A cryptographic operation was misused: wrong key, mixed keys, bad ciphertext."""


class OverflowEncodingError(CryptoError, OverflowError):
    """A value (or a sum of values) does not fit the fixed-point encoding."""


class NotFittedError(VFLError, AttributeError):
    """A model was used before ``fit``."""


class PartyFailedError(VFLError, RuntimeError):
    """A party (or server) raised, died or timed out during a protocol phase.

    Parameters
    ----------
    party : str
        Name of the party that failed.
    phase : str
        Protocol phase during which it failed (for example ``"histograms"``).
    cause : str
        Short description of the underlying error.

    Example
    -------
    >>> err = PartyFailedError("passive_1", "histograms", "actor died")
    >>> err.party, err.phase
    ('passive_1', 'histograms')
    """

    def __init__(self, party: str, phase: str, cause: str = "") -> None:
        self.party = party
        self.phase = phase
        self.cause = cause
        msg = f"party {party!r} failed during phase {phase!r}"
        if cause:
            msg += f": {cause}"
        super().__init__(msg)

    def __reduce__(self):  # keep the fields when the error crosses a process boundary
        return (PartyFailedError, (self.party, self.phase, self.cause))
