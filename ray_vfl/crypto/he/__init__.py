"""Homomorphic-encryption backends behind one small vectorised interface.

Backends are looked up by name::

    >>> import numpy as np
    >>> from ray_vfl.crypto import get_backend
    >>> be = get_backend("plain")
    >>> pk, sk = be.generate_keys()
    >>> be.decrypt(sk, be.add(pk, be.encrypt(pk, np.array([1.0])), be.encrypt(pk, np.array([2.0]))))
    array([3.])

============  ==========================================  ===================
name          what                                        needs
============  ==========================================  ===================
``plain``     no encryption, float64 (tests, speed)       numpy
``phe``       python-paillier ``EncryptedNumber``         ``pip install phe``
``paillier``  fast Paillier on gmpy2 (DJN, CRT)           ``pip install gmpy2``
``ou``        Okamoto-Uchiyama on gmpy2 (HEU's default)   ``pip install gmpy2``
============  ==========================================  ===================

Security assumptions: Paillier (``n = p q``) rests on the decisional
composite residuosity assumption, its plaintext space is ``Z_n``; OU
(``n = p^2 q``, ``|p| = |n| / 3``) is one-way iff factoring ``n`` is hard,
semantically secure under the ``p``-subgroup assumption, its plaintext space
is ``Z_p`` with ``p`` secret (682 bits at 2048) and its ciphertexts are half
as long. Details and references: :mod:`ray_vfl.crypto.he.paillier`,
:mod:`ray_vfl.crypto.he.ou`.

Gradient pairs: ``encrypt_gh`` packs ``(g, h)`` into one plaintext;
``compress_gh`` then packs several of those into one ciphertext
(``slots_per_ciphertext``: 5 / 11 / 17 at 1024 / 2048 / 3072-bit Paillier
with the default options), so the key owner decrypts a few ciphertexts per
feature instead of one per histogram bin. The key owner may pass its private
key to ``encrypt``/``encrypt_gh``; ``paillier`` then encrypts with the CRT
(about 1.4x faster at 2048 bits), the other backends use the public key.
"""

from __future__ import annotations

import importlib
import logging
from typing import Callable

from ray_vfl.crypto.he.base import Backend
from ray_vfl.crypto.he.ciphertexts import CipherArray, PrivateKey, PublicKey
from ray_vfl.crypto.he.fixed_point import FixedPoint
from ray_vfl.crypto.he.packing import GHPacking
from ray_vfl.errors import ConfigError

__all__ = [
    "Backend",
    "CipherArray",
    "FixedPoint",
    "GHPacking",
    "PublicKey",
    "PrivateKey",
    "available_backends",
    "get_backend",
    "register_backend",
]

logger = logging.getLogger(__name__)

# name -> (module, class name, pip requirement that module needs)
_BUILTIN: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "plain": ("ray_vfl.crypto.he.plain", "PlainBackend", ()),
    "phe": ("ray_vfl.crypto.he.phe_backend", "PheBackend", ("phe", "gmpy2")),
    "paillier": ("ray_vfl.crypto.he.paillier", "PaillierBackend", ("gmpy2",)),
    "ou": ("ray_vfl.crypto.he.ou", "OUBackend", ("gmpy2",)),
}
_CUSTOM: dict[str, Callable[..., Backend]] = {}


def register_backend(name: str, factory: Callable[..., Backend]) -> None:
    """Register a backend factory under ``name`` (called as ``factory(**options)``).

    Raises
    ------
    ConfigError
        If ``name`` is already taken.

    Example
    -------
    >>> from ray_vfl.crypto.he.plain import PlainBackend
    >>> register_backend("my_plain", PlainBackend)
    >>> get_backend("my_plain").name
    'plain'
    """
    if name in _BUILTIN or name in _CUSTOM:
        raise ConfigError(f"backend name {name!r} is already registered")
    _CUSTOM[name] = factory


def _missing(requirements: tuple[str, ...]) -> list[str]:
    out = []
    for mod in requirements:
        try:
            importlib.import_module(mod)
        except ImportError:
            out.append(mod)
    return out


def available_backends() -> list[str]:
    """Names of the backends whose dependencies are installed.

    Example
    -------
    >>> "plain" in available_backends()
    True
    """
    names = [name for name, (_, _, req) in _BUILTIN.items() if not _missing(req)]
    return names + list(_CUSTOM)


def get_backend(name: str, **options) -> Backend:
    """Return a new backend instance by name.

    Parameters
    ----------
    name : str
        One of ``"plain"``, ``"phe"``, ``"paillier"``, ``"ou"`` or a registered name.
    **options
        Backend options: ``frac_bits`` (default 40), ``max_rows`` (default
        2**20), ``gradient_bound`` (largest ``|g|``, ``|h|``; default 2**16), ``guard_bits`` (default 8), ``pairs``
        (gradient pairs per row, default 1; K for multi-output trees).
        Every party must use the same options: they are part of each
        ciphertext's tag.

    Raises
    ------
    ConfigError
        Unknown name (the message lists the valid ones), unknown option, or a
        missing optional dependency (the message says what to pip install).

    Example
    -------
    >>> get_backend("plain").is_encrypted
    False
    """
    allowed = {"frac_bits", "max_rows", "gradient_bound", "guard_bits", "pairs"}
    unknown = sorted(set(options) - allowed)
    if name in _CUSTOM:
        return _CUSTOM[name](**options)
    if name not in _BUILTIN:
        valid = ", ".join(repr(n) for n in [*_BUILTIN, *_CUSTOM])
        raise ConfigError(f"unknown crypto backend {name!r}; valid names: {valid}")
    if unknown:
        raise ConfigError(f"unknown option(s) {unknown} for backend {name!r}; allowed: {sorted(allowed)}")
    module, cls, requirements = _BUILTIN[name]
    missing = _missing(requirements)
    if missing:
        raise ConfigError(f"backend {name!r} needs {', '.join(missing)}: pip install {' '.join(missing)}")
    return getattr(importlib.import_module(module), cls)(**options)
