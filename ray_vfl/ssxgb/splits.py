"""Server C's split finding on ciphertexts: gains as fractions, compared without decrypting any.

For a candidate with left sums ``GL``, ``HL`` of a node with sums ``G``, ``H`` (integers in units of
``2^-F``, ``L = round(lambda 2^F)``), XGBoost's gain is, up to terms equal for every candidate of the
node, ``GL^2 / (HL + L) + GR^2 / (HR + L)``, i.e. the fraction

    num / den,   num = GL^2 (HR + L) + GR^2 (HL + L),   den = (HL + L) (HR + L) > 0

(scales ``2^3F`` and ``2^2F``). Two Mult rounds give every candidate's ``Enc(num)``, ``Enc(den)``.
A tournament then finds each node's best candidate: at every level the candidates are paired, one
Mult round gives ``num_a den_b`` and ``num_b den_a``, one LGT round ``b = [num_a den_b < num_b den_a]``
(``b`` is ``1`` iff the right one is strictly better), one Mult round selects ``num``, ``den``, the
encrypted index ``idx`` of the winner and the encrypted number ``w`` of the participant that owns it
(``x_a + b (x_b - x_a)``). Ties go to the lower index, as
``numpy.argmax``; all nodes of a level run in the same rounds (``3 ceil(log2 k) + 2`` rounds for ``k``
candidates per node). No gain, sum or comparison result is ever decrypted: S sees only masked values
(:mod:`ray_vfl.crypto.two_server.server_s`), C only ciphertexts. Exact: no approximation.

Telling the winners (:func:`winner_notes`). Participant ``i`` gets, per node, under its own key,
``v_i = (idx - o_i) + rho_i (w - i) mod N`` (``o_i``: the global index of its first candidate, ``rho_i``
uniform in ``Z_N``, fresh per node and participant). The owner (``w = i``) decrypts its local index
``idx - o_i``, in ``[0, k_i)``; any other participant decrypts a value uniform in ``Z_N`` whatever the
winner and wherever it sits: it learns only that the node is not its own.

Mask sizes. With ``|G|, |GL|, |GR|, H + L, HL + L, HR + L < 2^s`` (``s`` = ``sum_bits`` of the
fixed-point plan), every Mult operand has a known bound: squares and ``den`` ``2^(2s)``, ``num``
``2^(3s + 1)``, their differences one bit more, the comparison bit 1 bit, the index difference the bits
of ``k``. Each Mult masks an operand with that bound plus ``kappa`` bits
(:meth:`~ray_vfl.crypto.two_server.server_c.ServerC.mult_many`), which hides it as well as a mask of
``l + kappa`` bits and makes C's exponentiations by the masks about 2.5 times cheaper here. The
bounds hold by construction: C clamps every margin into ``[-R, R]`` before the gradients
(:mod:`ray_vfl.ssxgb.approx`), so ``|g| < 2^F`` and ``0 < h <= 2^(F-2) + 1`` per row; S is told each
bound and refuses an opened value far past it.
An operand used twice in one round is masked and opened once: ``GL`` and ``GR`` in their squares, the
comparison bit in the four selections. ``HL + L`` and ``HR + L``, in both rounds of the gains, are kept
opened at S from the first round to the second (``keep``). That is 15 masked operands for a candidate's
11 products (gains and its tournament comparison) instead of 22 (``benchmarks/RESULTS.md``, "SSXGB
against its crypto floor (benchmarks/ssxgb.py)", has what each step saved over a whole training).
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence

import numpy as np

from ..crypto.he.ciphertexts import CipherArray
from ..crypto.two_server.bcp import BCPPublicKey
from ..crypto.two_server.server_c import ServerC
from ..errors import CryptoError

__all__ = ["best_candidates", "gain_fractions", "winner_notes"]


def _capped(c: ServerC, *bits: int) -> tuple[int, ...]:
    return tuple(min(int(b), c.config.value_bits) for b in bits)


def gain_fractions(c: ServerC, gl: CipherArray, hl: CipherArray, g_node: CipherArray, h_node: CipherArray,
                   lam: int, sum_bits: int) -> tuple[CipherArray, CipherArray]:
    """``(Enc(num), Enc(den))`` per candidate; ``g_node``/``h_node`` hold each candidate's node sums
    (every sum, ``lambda`` added, below ``2^sum_bits`` in absolute value)."""
    bcp, pk = c.bcp, c.key_of(gl)
    n, s = len(gl), sum_bits
    lam_c = c.encrypt_ints(pk, [lam] * n, int(gl.tag[5:]))
    gr, hr = bcp.sub(pk, g_node, gl), bcp.sub(pk, h_node, hl)
    hl_l, hr_l = bcp.add(pk, hl, lam_c), bcp.add(pk, hr, lam_c)
    # S keeps hl_l and hr_l opened for the second round: they are masked and opened once
    gl2, gr2, den = c.mult_many([(gl, gl), (gr, gr), (hl_l, hr_l)], [_capped(c, s, s)] * 3, keep=(hl_l, hr_l))
    a, b = c.mult_many([(gl2, hr_l), (gr2, hl_l)], [_capped(c, 2 * s, s)] * 2)
    return bcp.add(pk, a, b), den


def best_candidates(c: ServerC, num: CipherArray, den: CipherArray, n_nodes: int, k: int, sum_bits: int,
                    owner: Sequence[int]) -> tuple[CipherArray, CipherArray]:
    """``(Enc(index of the best candidate), Enc(number of its owner))`` of each node; ``num``/``den`` hold
    ``n_nodes`` blocks of ``k`` (from :func:`gain_fractions` with the same ``sum_bits``); ``owner[j]`` is
    the participant (a number in ``[0, P)``) of a node's ``j``-th candidate, the same in every node."""
    s = sum_bits
    owner = [int(v) for v in owner]
    if len(owner) != k or min(owner) < 0:
        raise CryptoError(f"owner must hold one participant number >= 0 per candidate ({k}), got {len(owner)}")
    compare = [_capped(c, 3 * s + 1, 2 * s)] * 2
    select = [_capped(c, 1, 3 * s + 2), _capped(c, 1, 2 * s + 1), _capped(c, 1, k.bit_length() + 1),
              _capped(c, 1, max(owner).bit_length() + 1)]
    bcp, pk = c.bcp, c.key_of(num)
    idx = c.encrypt_ints(pk, list(range(k)) * n_nodes)
    who = c.encrypt_ints(pk, owner * n_nodes)
    cols = np.arange(n_nodes * k).reshape(n_nodes, k)  # positions of each node's remaining candidates
    while cols.shape[1] > 1:
        m = cols.shape[1] // 2 * 2
        left, right = cols[:, 0:m:2].ravel(), cols[:, 1:m:2].ravel()
        na, nb, da, db = (bcp.take(num, left), bcp.take(num, right), bcp.take(den, left), bcp.take(den, right))
        ia, ib, wa, wb = bcp.take(idx, left), bcp.take(idx, right), bcp.take(who, left), bcp.take(who, right)
        x, y = c.mult_many([(na, db), (nb, da)], compare)
        bit = c.lgt(x, y)
        dn, dd, di, dw = c.mult_many([(bit, bcp.sub(pk, nb, na)), (bit, bcp.sub(pk, db, da)),
                                      (bit, bcp.sub(pk, ib, ia)), (bit, bcp.sub(pk, wb, wa))], select)
        won = [bcp.add(pk, na, dn), bcp.add(pk, da, dd), bcp.add(pk, ia, di), bcp.add(pk, wa, dw)]
        half = m // 2
        base = np.arange(n_nodes * half).reshape(n_nodes, half)
        parts = [[w] for w in won]
        if m < cols.shape[1]:  # each node's odd one out goes up unchanged, after the winners
            odd = cols[:, m]
            for part, arr in zip(parts, (num, den, idx, who)):
                part.append(bcp.take(arr, odd))
            base = np.column_stack([base, n_nodes * half + np.arange(n_nodes)])
        num, den, idx, who = (bcp.concat(part) for part in parts)
        cols = base
    return bcp.take(idx, cols[:, 0]), bcp.take(who, cols[:, 0])


def winner_notes(c: ServerC, idx: CipherArray, who: CipherArray, offsets: Sequence[int],
                 keys: Sequence[BCPPublicKey]) -> list[CipherArray]:
    """Per participant ``i`` (``keys[i]`` its user key, ``offsets[i]`` the global index of its first
    candidate), ``Enc_pk_i(v_i)`` per node with ``v_i = (idx - offsets[i]) + rho_i (w - i) mod N``:
    the local index of the winner at its owner ``w``, a uniform value of ``Z_N`` at everyone else
    (one TransDec round for all).

    Why a non-owner learns nothing: for ``w != i``, ``0 < |w - i| < P``, far below the primes of ``N``,
    so ``w - i`` is a unit of ``Z_N`` and ``rho_i (w - i)`` is uniform in ``Z_N`` for ``rho_i`` uniform;
    ``v_i`` is then uniform whatever ``idx`` and ``w`` are (exactly, not statistically), and independent
    of every other participant's value (independent ``rho``). The chance that it falls in ``[0, k_i)``,
    which the participant would take for a win, is ``k_i / N`` (below ``2^-1000`` at 1024 bits). S sees
    ``v_i + tau`` in TransDec, uniform as well; C sees ciphertexts.
    """
    if len(offsets) != len(keys):
        raise CryptoError(f"{len(offsets)} offsets for {len(keys)} participants")
    bcp, pk = c.bcp, c.key_of(idx)
    n, m = pk.params.n, len(idx)
    notes = []
    for i, o in enumerate(offsets):
        local = bcp.add(pk, idx, c.encrypt_ints(pk, [-int(o)] * m))
        away = bcp.add(pk, who, c.encrypt_ints(pk, [-i] * m))  # Enc(w - i): 0 only at the owner
        notes.append(bcp.add(pk, local, bcp.mul_const(pk, away, [secrets.randbelow(n) for _ in range(m)])))
    return c.trans_dec_many(notes, list(keys))
