"""The protocols' cryptography, one sub-package per concern (each imports only those listed before it):

- :mod:`ray_vfl.crypto.he`: additive homomorphic encryption behind one small vectorised interface, the
  backends looked up by name (``plain``, ``phe``, ``paillier``, ``ou``), gradient-pair packing,
  fixed point, the key-size policy, the gmpy2 helpers and the mask reserve (SecureBoost, PIVODL);
- :mod:`ray_vfl.crypto.two_server`: BCP encryption (keys, vectorised arrays, the master key's mDec)
  and the two-server sub-protocols on it, server C and server S (SSXGB);
- :mod:`ray_vfl.crypto.privacy`: the Gaussian mechanism with its accounting, and secure aggregation
  by pairwise masks (PIVODL's leaf weights and prediction, split-NN's ``GaussianDP``, FedHSSL's secure
  average); it needs neither of the others.

The backend interface is importable from here::

    >>> import numpy as np
    >>> from ray_vfl.crypto import get_backend
    >>> be = get_backend("plain")
    >>> pk, sk = be.generate_keys()
    >>> be.decrypt(sk, be.add(pk, be.encrypt(pk, np.array([1.0])), be.encrypt(pk, np.array([2.0]))))
    array([3.])
"""

from __future__ import annotations

from ray_vfl.crypto.he import (
    Backend,
    CipherArray,
    FixedPoint,
    GHPacking,
    PrivateKey,
    PublicKey,
    available_backends,
    get_backend,
    register_backend,
)

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
