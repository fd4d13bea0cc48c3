"""The ray_vfl exception and warning hierarchies.

Every error a user can cause is a :class:`VFLError`; the message says what is
wrong and how to fix it. Ray failures are turned into :class:`PartyFailedError`
at the runtime boundary so the driver never sees a bare ``RayActorError``.
What is allowed but deserves a word is a :class:`VFLWarning`: a weaker security
setting the caller opted into (:class:`SecurityWarning`) or data handled in a way
the caller may not expect (:class:`DataWarning`).
"""

from __future__ import annotations

__all__ = [
    "VFLError",
    "ConfigError",
    "DataError",
    "CryptoError",
    "OverflowEncodingError",
    "PartyFailedError",
    "ProtocolError",
    "NotFittedError",
    "VFLWarning",
    "SecurityWarning",
    "DataWarning",
]


class VFLError(Exception):
    """Base class of every ray_vfl error: catch it to handle any of them.

    Example
    -------
    >>> from ray_vfl import BoostConfig
    >>> try:
    ...     BoostConfig(max_depth=0)
    ... except VFLError as err:
    ...     print(type(err).__name__, "-", err)
    ConfigError - max_depth must be an integer in [1, 16], got 0
    """


class ConfigError(VFLError, ValueError):
    """A hyper-parameter or option is out of range, unknown, or inconsistent.

    Example
    -------
    >>> from ray_vfl import BoostConfig
    >>> BoostConfig(learning_rate=0)
    Traceback (most recent call last):
    ...
    ray_vfl.errors.ConfigError: learning_rate must be a finite number in (0.0, 1.0], got 0
    """


class DataError(VFLError, ValueError):
    """Input data is malformed: misaligned rows, bad labels, bad columns, a missing file.

    Example
    -------
    >>> from ray_vfl import read_table
    >>> read_table("no_such_file.csv")
    Traceback (most recent call last):
    ...
    ray_vfl.errors.DataError: data file 'no_such_file.csv' does not exist on this node (...)
    """


class CryptoError(VFLError):
    """A cryptographic operation was misused: wrong key, mixed keys, bad ciphertext.

    Example
    -------
    >>> import numpy as np
    >>> from ray_vfl.crypto import get_backend
    >>> be = get_backend("plain")
    >>> (pk, _), (_, other_sk) = be.generate_keys(), be.generate_keys()
    >>> try:
    ...     be.decrypt(other_sk, be.encrypt(pk, np.array([1.0])))
    ... except CryptoError as err:
    ...     print("keys must not be mixed" in str(err))
    True
    """


class OverflowEncodingError(CryptoError, OverflowError):
    """A value (or a sum of values) does not fit the fixed-point encoding."""


class NotFittedError(VFLError, AttributeError):
    """A model was used before ``fit``.

    Example
    -------
    >>> from ray_vfl import SecureBoostClassifier
    >>> SecureBoostClassifier().predict(None)
    Traceback (most recent call last):
    ...
    ray_vfl.errors.NotFittedError: this SecureBoostClassifier is not fitted yet; call fit(vertical_data) first
    """


class PartyFailedError(VFLError, RuntimeError):
    """A party raised, died or timed out during a protocol phase.

    Parameters
    ----------
    party : str
        Name of the party that failed.
    phase : str
        Protocol phase during which it failed (for example ``"histograms"``).
    cause : str
        Short description of the underlying error.
    reason : str
        ``"died"`` (the actor is gone), ``"silent"`` (it answers nothing, not even a probe),
        ``"timeout"`` (no reply within the timeout, though every party still answers probes: it is
        busy; the runtime keeps the federation) or ``"error"`` (an unexpected exception inside it).

    Example
    -------
    >>> err = PartyFailedError("passive_1", "histograms", "actor died")
    >>> err.party, err.phase
    ('passive_1', 'histograms')
    """

    def __init__(self, party: str, phase: str, cause: str = "", reason: str = "error") -> None:
        self.party = party
        self.phase = phase
        self.cause = cause
        self.reason = reason
        msg = f"party {party!r} failed during phase {phase!r}"
        if cause:
            msg += f": {cause}"
        super().__init__(msg)

    def __reduce__(self):  # keep the fields when the error crosses a process boundary
        return (PartyFailedError, (self.party, self.phase, self.cause, self.reason))


class ProtocolError(VFLError):
    """A party received a message whose payload breaks what its kind may carry.

    Raised by the receiver before it uses the payload (see
    :mod:`ray_vfl.runtime.validation`): a malformed or out-of-range field is
    reported, not computed with. It names the party that sent the message,
    the message kind and the field.

    Parameters
    ----------
    sender : str
        Name of the party that sent the message.
    kind : str
        The message kind (for example ``"encrypted_histograms"``).
    what : str
        Which field is wrong and how (for example ``"orders.bin[3] = 40 is outside [0, 33)"``).
    receiver : str, optional
        Name of the party that refused it.

    Example
    -------
    >>> err = ProtocolError("party1", "level_step", "orders.bin[3] = 40 is outside [0, 33)")
    >>> err.sender, err.kind
    ('party1', 'level_step')
    >>> print(err)
    party 'party1' sent a malformed 'level_step': orders.bin[3] = 40 is outside [0, 33)
    """

    def __init__(self, sender: str, kind: str, what: str, receiver: str | None = None) -> None:
        self.sender = sender
        self.kind = kind
        self.what = what
        self.receiver = receiver
        to = f" to {receiver!r}" if receiver else ""
        super().__init__(f"party {sender!r} sent a malformed {kind!r}{to}: {what}")

    def __reduce__(self):  # keep the fields when the error crosses a process boundary
        return (ProtocolError, (self.sender, self.kind, self.what, self.receiver))


class VFLWarning(UserWarning):
    """Base class of every ray_vfl warning: filter it to silence them all.

    Example
    -------
    >>> import warnings
    >>> with warnings.catch_warnings():
    ...     warnings.simplefilter("ignore", VFLWarning)   # e.g. in a test suite that opts into 1024-bit keys
    ...     warnings.warn("anything ray_vfl says", SecurityWarning)
    """


class SecurityWarning(VFLWarning):
    """A setting weaker than the default, used because the caller asked for it: 1024-bit keys
    (``allow_weak_keys=True``), or ``backend="plain"`` (no encryption: passive parties see gradients).

    Example
    -------
    >>> from ray_vfl import BoostConfig
    >>> import warnings
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     BoostConfig(key_bits=1024, allow_weak_keys=True).warn_if_weak()   # what training does
    >>> caught[0].category.__name__, "80 bits" in str(caught[0].message)
    ('SecurityWarning', True)
    """


class DataWarning(VFLWarning):
    """Data handled in a way the caller may not expect: categories unseen in training (treated as
    missing), a metric that is undefined on the data given (AUC of one class).

    Example
    -------
    >>> issubclass(DataWarning, UserWarning)
    True
    """
