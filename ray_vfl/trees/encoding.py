"""The encoding options every party of a tree protocol shares (slot widths of packed gradient pairs)."""

from __future__ import annotations

from .kernels import GRADIENT_FRAC_BITS

__all__ = ["backend_options", "public_key_problem", "GUARD_BITS"]

GUARD_BITS = 2  # per packed slot, above the bound every honest bin sum stays under (see backend_options)


def backend_options(gradient_bound: float, n_rows: int | None = None, pairs: int = 1) -> dict:
    """Encoding options every party must share: the gradient bound
    (:attr:`~ray_vfl.trees.config.BoostConfig.gradient_bound`, 1 for logistic gradients), and no
    bin sum covers more than the training rows; tight bounds leave room for more bin sums per compressed ciphertext and make every
    compression shift shorter.

    Two guard bits instead of the backend's default 8: no bin sum can pass the bound (it covers
    at most the training rows, each bounded when it is encrypted), and a sum up to 8 times past it
    still raises.

    :data:`~ray_vfl.trees.kernels.GRADIENT_FRAC_BITS` (32) fractional bits instead of the
    backend's default 40: every gradient and hessian is on that grid before any party sums it
    (:func:`~ray_vfl.trees.kernels.encoded_gradients`), so encryption adds no rounding of its own
    and the trees equal the centralized ones. ``2**-32`` (2.3e-10) is finer than the float32
    gradient pairs xgboost itself keeps for every row whenever ``|g| >= 2**-8`` (SecretFlow's
    SecureBoost keeps 20 bits).

    Together, a packed slot is 51 bits instead of 65: an OU 2048 ciphertext holds 6 bin sums
    instead of 5 and compressing them takes 85 squarings per sum instead of 104; a Paillier 2048
    ciphertext holds 20 instead of 15. Fewer ciphertexts are compressed, re-randomised, sent
    and decrypted.

    ``pairs`` > 1 (multi-output trees of ``K`` classes): each row's ``K`` pairs in one entry.

    Example
    -------
    >>> backend_options(1.0, 24_000)
    {'gradient_bound': 1.0, 'guard_bits': 2, 'frac_bits': 32, 'max_rows': 32768}
    >>> backend_options(1e6)
    {'gradient_bound': 1000000.0, 'guard_bits': 2, 'frac_bits': 32}
    """
    options: dict = {"gradient_bound": float(gradient_bound), "guard_bits": GUARD_BITS, "frac_bits": GRADIENT_FRAC_BITS}
    if n_rows:
        options["max_rows"] = 1 << max(1, int(n_rows - 1).bit_length())
    if pairs > 1:
        options["pairs"] = int(pairs)
    return options


def public_key_problem(payload, ctx) -> str | None:
    """The backend and its options are the ones the receiver's config gives; the key is one of that
    backend's, at least as long as the config asks (context: backend_spec, backend, key_bits)."""
    spec, pk = payload
    if spec != ctx["backend_spec"]:
        return f"payload[0] (backend and options) is {spec!r}; the receiver's config gives {ctx['backend_spec']!r}"
    backend = ctx["backend"]
    if not isinstance(pk, backend.public_key_type):
        return f"payload[1] (public key) is a {type(pk).__name__}; expected a {backend.public_key_type.__name__}"
    n = getattr(pk, "n", None)
    if backend.is_encrypted and not (hasattr(n, "bit_length") and n.bit_length() >= ctx["key_bits"]):
        bits = n.bit_length() if hasattr(n, "bit_length") else None
        return f"payload[1] (public key) has a {bits}-bit modulus; the receiver's config asks for {ctx['key_bits']} bits"
    return None
