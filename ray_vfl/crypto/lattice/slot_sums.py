"""Sums of slots and slots spread from a few values, on the lattice engine without rotation keys:
a masked round with server S instead of Galois keys.

Why not rotations. Summing the rows of a candidate's left branch by rotations costs ``log2 N`` key
switchings per prime per sum (and Galois keys of ~10 MB per prime); S already holds the secret key and
answers masked requests, so one round in which S opens uniform values and re-encrypts their sums costs
one decryption per block instead, and packs ``N // m`` sums (``m`` sampled rows) per block.

Tiles. Server C has S return ``Enc(g)`` and ``Enc(h)`` *tiled*: one block per prime holding the ``m``
sampled rows' values ``q = N // m`` times, at slots ``[j m, (j + 1) m)`` (:meth:`tile_step`, masked
as Regroup: S opens ``g + r`` with ``r`` uniform in ``Z_T``). Whoever needs sums over row sets (a
participant its candidates' left sums, C its nodes' sums) multiplies a tiled block by a 0/1 plaintext
holding one row set per tile (:func:`masked_tile_products`), adds a fresh public-key encryption of
``R``, uniform in ``Z_T`` in *every* slot, and floods the ciphertext
(:func:`~ray_vfl.crypto.lattice.keys.flood`). S (:meth:`LatticeServerS.tile_sum_step`) opens the block,
sums each tile and returns the sums freshly encrypted; the producer's ``Enc(-sum of R over the tile)``
(sent alongside, to C) turns them into ``Enc(sum of g over the row set)``.

What S sees: in every block, ``N`` values uniform in ``Z_T`` (each slot carries its own uniform
``R``, whatever the row set or the gradient), the decryption noise flooded to within ``2^-40`` of
noise independent of the plaintext multiplied in (the 0/1 row sets), and public sizes: ``m``, the
number of sums per group, the repetition pattern of C's node sums (``n_nodes`` x ``k``, which S sees
as the length of the gain arrays anyway). S never sees which slots form a row set. C sees
ciphertexts only; a participant sees tiled ciphertexts under S's key.

Spreading (:func:`spread`). A row's new margin needs its leaf's weight in the row's slot: C masks the
``L`` weights (``W = w + r`` uniform), S returns each ``W_l`` in every slot of one block
(:meth:`LatticeServerS.broadcast_step`), C adds ``sum_l Enc(W_l) * 1[row in l]`` slot-wise and
subtracts ``r_{leaf(row)}`` (a plaintext). S sees ``L`` uniform values; the rows' leaves stay at C.
Prediction uses the same spread over every tree's leaves, then one switch to the LBP's key
(:meth:`LatticeServerS.switch_step`): the whole prediction in a few blocks, not a round per row.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ray_vfl.crypto.lattice.keys import LatticePublic, _seal, flood, load_ct, save_ct
from ray_vfl.crypto.lattice.ring import uniform_residues
from ray_vfl.errors import ConfigError

__all__ = ["encrypt_blocks", "load_blocks", "masked_tile_products", "spread", "tiles_per_block"]


def tiles_per_block(m: int, slots: int) -> int:
    """``N // m`` tiles of ``m`` rows per block (refused when ``m`` rows do not fit one block)."""
    if not 0 < m <= slots:
        raise ConfigError(f"the lattice engine sums at most {slots} sampled rows per tree in one block, got {m}: "
                          "lower row_subsample or use engine='bcp'")
    return slots // m


def encrypt_blocks(pub: LatticePublic, res: np.ndarray) -> list[list[bytes]]:
    """Fresh public-key encryptions of ``(k, m)`` residues, dense (element ``j`` at block ``j // N``)."""
    ring, n = pub.ring, pub.ring.slots
    m, out = res.shape[1], []
    for start in range(0, max(m, 1), n):
        part = np.zeros((ring.n_primes, n), dtype=np.uint64)
        part[:, :min(n, m - start)] = res[:, start:start + n]
        out.append([save_ct(pub.encrypt(i, part[i])) for i in range(ring.n_primes)])
    return out


def load_blocks(pub: LatticePublic, blocks: Sequence[Sequence[bytes]]) -> list[list[Any]]:
    return [[load_ct(pub.contexts[i], b) for i, b in enumerate(row)] for row in blocks]


def masked_tile_products(pub: LatticePublic, tiled: Sequence[Any], sets: np.ndarray) -> tuple[list[list[bytes]], np.ndarray]:
    """``(blocks, neg_mask_sums)`` for 0/1 row sets ``sets`` (``(K, m)``) of the tiled ciphertexts
    ``tiled`` (one per prime): set ``j`` in block ``j // q``, tile ``j % q``; every slot masked with its
    own uniform residue, re-randomised and flooded; ``neg_mask_sums`` ``(k, K)``: minus each tile's
    mask sum (module docstring)."""
    ring, ev = pub.ring, pub.evaluators
    K, m = sets.shape
    q = tiles_per_block(m, ring.slots)
    blocks, neg = [], np.zeros((ring.n_primes, K), dtype=np.uint64)
    for start in range(0, K, q):
        chunk = sets[start:start + q].astype(np.uint64)
        plain = np.zeros(ring.slots, dtype=np.uint64)
        plain[:chunk.size] = chunk.ravel()
        mask = uniform_residues(ring, ring.slots)
        sums = mask[:, :q * m].reshape(ring.n_primes, q, m).sum(axis=2) % ring.prime_array
        neg[:, start:start + len(chunk)] = ring.neg(sums[:, :len(chunk)])
        row = []
        for i in range(ring.n_primes):
            out = pub.encrypt(i, mask[i])
            if plain.any():  # a product by an all-zero plaintext would be transparent: skip it
                prod = _seal().Ciphertext()
                ev[i].multiply_plain(tiled[i], pub.plaintext(i, plain), prod)
                ev[i].add_inplace(out, prod)
            row.append(flood(save_ct(out), pub.moduli, pub.flood_bits))
        blocks.append(row)
    return blocks, neg


def spread(pub: LatticePublic, broadcast: Sequence[Sequence[Any]], assign: np.ndarray, r: np.ndarray) -> list[list[Any]]:
    """Dense blocks holding ``w[assign[j]]`` at element ``j``, from ``broadcast[l]`` (``Enc(w_l + r_l)``
    in every slot, one ciphertext per prime) and the masks ``r`` (``(k, L)`` residues)."""
    ring, ev, n = pub.ring, pub.evaluators, pub.ring.slots
    m = len(assign)
    out = []
    for start in range(0, max(m, 1), n):
        part = assign[start:start + n]
        row = []
        for i in range(ring.n_primes):
            acc = None
            for leaf in np.unique(part).tolist():
                ind = np.zeros(n, dtype=np.uint64)
                ind[:len(part)] = (part == leaf).astype(np.uint64)
                prod = _seal().Ciphertext()
                ev[i].multiply_plain(broadcast[leaf][i], pub.plaintext(i, ind), prod)
                if acc is None:
                    acc = prod
                else:
                    ev[i].add_inplace(acc, prod)
            fix = np.zeros(n, dtype=np.uint64)
            fix[:len(part)] = (np.uint64(ring.primes[i]) - r[i, part]) % np.uint64(ring.primes[i])
            ev[i].add_plain_inplace(acc, pub.plaintext(i, fix))
            row.append(acc)
        out.append(row)
    return out
