"""Leaky variants of a PIVODL client, for the view tests to show that their checks fail on a leak
(tests/test_pivodl_views.py). They run in the client actors: the test ships this module by value."""

from __future__ import annotations

import numpy as np

from ray_vfl.crypto.he.paillier import PaillierBackend
from ray_vfl.pivodl.client import Client


class UnobfuscatedPaillier(PaillierBackend):
    """Paillier without the random factor: ``Enc(m) = 1 + m n mod n^2``, a plaintext in disguise."""

    def _raw_encrypt(self, pk, ms, sk=None, masks=None):
        n = pk.n
        return [(1 + (int(m) % n) * n) % (n * n) for m in ms]


class LeakyClient(Client):
    """Encrypts its shares and candidate sums without obfuscation, and sends its prediction score share
    without the pairwise masks (the fixed-point score itself)."""

    def reset(self, *args, **kwargs):
        super().reset(*args, **kwargs)
        if getattr(self, "backend_spec", None) is not None and self.backend_spec[0] == "paillier":
            self.backend = UnobfuscatedPaillier(**self.backend_spec[1])
        self.masker.share = lambda values, nonce, parties: (
            np.round(np.asarray(values, dtype=np.float64) * 2.0**32).astype(np.int64).astype(np.uint64))

    def _encrypt(self, jobs):
        return [self.backend.encrypt_gh_sums(self.peer_pk[c], g, h) for c, g, h in jobs]


class NoNoiseClient(Client):
    """Releases its clipped leaf weights without the Gaussian noise."""

    def reset(self, *args, **kwargs):
        super().reset(*args, **kwargs)
        self.noise.sample = lambda size, sigma: np.zeros(size)


class SeededNoiseClient(Client):
    """Draws its noise from a fixed seed: the same draws in every run."""

    def reset(self, *args, **kwargs):
        super().reset(*args, **kwargs)
        self.noise._rng = np.random.Generator(np.random.PCG64DXSM(7))
