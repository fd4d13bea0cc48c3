"""Sums of slots and slots spread from a few values, on the lattice engine without rotation keys:
a masked round with server S instead of Galois keys.

Why not rotations. Summing the rows of a candidate's left branch by rotations costs ``log2 N`` key
switchings per prime per sum (and Galois keys of ~10 MB per prime); S already holds the secret key and
answers masked requests, so one round in which S opens uniform values and re-encrypts their sums costs
one decryption per block of ``N / B`` sums instead.

Tiles. Server C has S return ``Enc(g)`` and ``Enc(h)`` *tiled* (:meth:`LatticeServerS.tile_step`,
masked as Regroup: S opens ``g + r`` with ``r`` uniform in ``Z_T``): ``ceil(m / B)`` blocks, block ``t``
holding sampled row ``t B + r`` in the ``N / B`` slots ``[r N / B, (r + 1) N / B)``
(:func:`row_block`: ``B`` about ``m / 16``). Whoever needs sums over row sets (a participant its
candidates' left sums, C its nodes' sums) multiplies each tiled block by a 0/1 plaintext whose slot
``r N / B + c`` says whether row ``t B + r`` is in set ``c`` and adds the products
(:func:`masked_tile_products`): slot ``r N / B + c`` then holds set ``c``'s sum over the rows at
position ``r`` of every block, ``N / B`` sets per output block. It adds a fresh public-key encryption
of ``R``, uniform in ``Z_T`` in *every* slot, and floods the ciphertext
(:func:`~ray_vfl.crypto.lattice.keys.flood`). S (:meth:`LatticeServerS.tile_sum_step`) opens the block,
sums each set's ``B`` slots and returns the sums freshly encrypted; the producer's ``Enc(-sum of R
over those slots)`` (sent alongside, to C) turns them into ``Enc(sum of g over the row set)``. ``B``
trades the blocks C sends each participant (``m / B``) against the blocks S opens (``K B / N`` for
``K`` sets); the products cost ``K m / N`` plaintext multiplications either way.

What S sees: in every block, ``N`` values uniform in ``Z_T`` (each slot carries its own uniform
``R``, whatever the row set or the gradient), the decryption noise flooded to within ``2^-40`` of
noise independent of the plaintext multiplied in (the 0/1 row sets), and sizes: ``m``, the number
of sums per group (so each participant's number of candidates, which C learns as well; the BCP
engine does not show it to S), the repetition pattern of C's node sums (``n_nodes`` x ``k``, which S
sees as the length of the gain arrays anyway). S never sees which slots form a row set. C sees
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

__all__ = ["encrypt_blocks", "load_blocks", "masked_tile_products", "row_block", "spread", "tiled_layout"]


def row_block(m: int, slots: int) -> int:
    """``B``: the rows each tiled block holds (a power of two, at most ``N``, about ``m / 16`` and at
    least 64); each row fills ``N / B`` slots (module docstring)."""
    if not 0 < m:
        raise ConfigError(f"no sampled rows to sum, got {m}")
    b = 1 << max(6, (-(-m // 16) - 1).bit_length())
    return min(b, slots)


def tiled_layout(res: np.ndarray, slots: int) -> list[np.ndarray]:
    """``(k, N)`` residue blocks of the tiled layout of ``(k, m)`` residues: block ``t`` holds row
    ``t B + r`` at slots ``[r N / B, (r + 1) N / B)``."""
    k, m = res.shape
    b = row_block(m, slots)
    w = slots // b
    out = []
    for start in range(0, m, b):
        part = np.zeros((k, b), dtype=np.uint64)
        part[:, :min(b, m - start)] = res[:, start:start + b]
        out.append(np.repeat(part, w, axis=1))
    return out


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


def masked_tile_products(pub: LatticePublic, tiled: Sequence[Sequence[Any]], sets: np.ndarray
                         ) -> tuple[list[list[bytes]], np.ndarray]:
    """``(blocks, neg_mask_sums)`` for 0/1 row sets ``sets`` (``(K, m)``) of the tiled ciphertexts
    ``tiled`` (``[block][prime]``, :func:`tiled_layout`): output block ``o`` holds, at slot
    ``r N / B + c``, the sum over tiled blocks ``t`` of ``g[t B + r] * sets[o N / B + c, t B + r]``;
    every slot masked with its own uniform residue, re-randomised and flooded; ``neg_mask_sums``
    ``(k, K)``: minus each set's mask sum (its ``B`` slots, module docstring)."""
    ring, ev = pub.ring, pub.evaluators
    K, m = sets.shape
    b = row_block(m, ring.slots)
    w = ring.slots // b
    blocks, neg = [], np.zeros((ring.n_primes, K), dtype=np.uint64)
    padded = np.zeros((-(-K // w) * w, len(tiled) * b), dtype=np.uint64)
    padded[:K, :m] = sets
    for start in range(0, K, w):
        mask = uniform_residues(ring, ring.slots)
        sums = mask.reshape(ring.n_primes, b, w).sum(axis=1) % ring.prime_array
        take = min(w, K - start)
        neg[:, start:start + take] = ring.neg(sums[:, :take])
        # plain[t][r * w + c] = sets[start + c, t * b + r]
        plains = [padded[start:start + w, t * b:(t + 1) * b].T.reshape(-1) for t in range(len(tiled))]
        row = []
        for i in range(ring.n_primes):
            out = pub.encrypt(i, mask[i])
            for t, plain in enumerate(plains):
                if plain.any():  # a product by an all-zero plaintext would be transparent: skip it
                    prod = _seal().Ciphertext()
                    ev[i].multiply_plain(tiled[t][i], pub.plaintext(i, plain), prod)
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
