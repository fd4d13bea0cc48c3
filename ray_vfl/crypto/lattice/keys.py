"""BFV contexts and keys of the lattice engine (one per plaintext prime), the ciphertexts' wire format
and the noise flooding C applies to every ciphertext S will decrypt.

Keys. Server S generates one secret key per prime of :class:`~ray_vfl.crypto.lattice.ring.RingParams`
(ring degree 8192, SEAL's 218-bit default coefficient modulus: 128-bit security by the HE standard's
table; SEAL checks it when the context is built) and publishes the public keys. Server C holds only
public keys: it encrypts (its masks, constants) and computes; it never decrypts.

Wire format. A ciphertext crosses as SEAL's own serialization (``bytes``). Those C sends to S are
first *flooded*: C adds to the constant polynomial ``c0`` a polynomial ``f`` whose ``N`` coefficients
are independent and uniform in ``[-2^phi, 2^phi)`` (OS entropy), with ``phi`` the largest that still
decrypts correctly (:attr:`LatticeKeys.flood_bits`, 139 bits here). S then sees the decryption noise
``e + f`` instead of ``e``; for any ``|e|_inf <= 2^h`` its distribution is within statistical distance
``N 2^(h - phi - 1)`` of ``f``'s alone, so with ``h <= phi - HIDE_BITS`` (``HIDE_BITS = 53``: ``2^-40``
per ciphertext) the noise tells S nothing about how C computed the ciphertext (which masks it
multiplied, which constants). C tracks an upper bound ``h`` per ciphertext
(:mod:`ray_vfl.crypto.lattice.arrays`) and refuses to send one past ``phi - HIDE_BITS``. The mask C
adds before sending is a fresh public-key encryption, which re-randomises ``c1`` (pseudo-uniform under
RLWE, independent of C's operations).
"""

from __future__ import annotations

import os
import struct
import tempfile
from typing import Any

import numpy as np

from ray_vfl.crypto.lattice.ring import RingParams
from ray_vfl.errors import CryptoError

__all__ = ["HIDE_BITS", "LatticeKeys", "LatticePublic", "flood", "load_ct", "save_ct"]

HIDE_BITS = 53
_DIR = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None


def _seal() -> Any:
    try:
        import tenseal.sealapi as seal
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise CryptoError("the lattice engine needs tenseal: pip install 'ray_vfl[lattice]'") from e
    return seal


def _contexts(ring: RingParams) -> list[Any]:
    seal = _seal()
    out = []
    for p in ring.primes:
        parms = seal.EncryptionParameters(seal.SCHEME_TYPE.BFV)
        parms.set_poly_modulus_degree(ring.degree)
        parms.set_coeff_modulus(seal.CoeffModulus.BFVDefault(ring.degree, seal.SEC_LEVEL_TYPE.TC128))
        parms.set_plain_modulus(seal.Modulus(p))
        ctx = seal.SEALContext(parms, True, seal.SEC_LEVEL_TYPE.TC128)
        if not ctx.parameters_set():
            raise CryptoError(f"SEAL refused the BFV parameters for prime {p}: {ctx.parameters_error_message()}")
        out.append(ctx)
    return out


def _tmp_path() -> str:
    fd, path = tempfile.mkstemp(suffix=".seal", dir=_DIR)
    os.close(fd)
    return path


def save_ct(obj: Any) -> bytes:
    """SEAL's serialization of a ciphertext or key (through a file in ``/dev/shm``: the bindings save to paths)."""
    path = _tmp_path()
    try:
        obj.save(path)
        with open(path, "rb") as fh:
            return fh.read()
    finally:
        os.unlink(path)


def load_ct(ctx: Any, blob: bytes, kind: str = "Ciphertext") -> Any:
    """The object of SEAL type ``kind`` serialized in ``blob``, checked valid for ``ctx`` by SEAL."""
    if not isinstance(blob, (bytes, bytearray, memoryview)):
        raise CryptoError(f"a serialized {kind} must be bytes, got {type(blob).__name__}")
    obj = getattr(_seal(), kind)()
    path = _tmp_path()
    try:
        with open(path, "wb") as fh:
            fh.write(blob)
        obj.load(ctx, path)
    except RuntimeError as e:
        raise CryptoError(f"not a valid {kind} for these parameters: {e}") from e
    finally:
        os.unlink(path)
    return obj


def _raw_body(blob: bytes) -> bytes:
    """The body of a SEAL blob, decompressed (SEAL's header: magic, size, version, compression mode)."""
    magic, hsize, _, _, mode, _, size = struct.unpack("<HBBBBHQ", blob[:16])
    if magic != 0xA15E or hsize != 16 or size != len(blob):
        raise CryptoError("not a SEAL blob")
    if mode == 0:
        return blob[16:]
    if mode == 2:
        import zstandard
        return zstandard.ZstdDecompressor().decompress(blob[16:], max_output_size=1 << 28)
    if mode == 1:
        import zlib
        return zlib.decompress(blob[16:])
    raise CryptoError(f"unknown SEAL compression mode {mode}")


def flood(blob: bytes, moduli: tuple[int, ...], bits: int) -> bytes:
    """``blob`` (a serialized BFV ciphertext of size 2) with ``f`` added to ``c0``, ``f`` uniform in
    ``[-2^bits, 2^bits)`` per coefficient; returned uncompressed (SEAL loads either)."""
    body = bytearray(_raw_body(blob))
    # Ciphertext members: parms_id (32), is_ntt_form (1), size, degree, coeff_modulus_size (8 each),
    # scale (8), correction factor (8); then the data DynArray: its own 16-byte header, its length (8), data
    size, degree, k = struct.unpack_from("<QQQ", body, 33)
    start = 32 + 1 + 24 + 16 + 16 + 8
    if size != 2 or k != len(moduli) or struct.unpack_from("<Q", body, start - 8)[0] != size * degree * k:
        raise CryptoError("flood: unexpected ciphertext layout")
    data = np.frombuffer(body, dtype=np.uint64, count=size * degree * k, offset=start).reshape(size, k, degree).copy()
    # f = U - 2^bits, U uniform in [0, 2^(bits + 1)) from 16-bit limbs (OS entropy); its residue mod
    # each q is sum_t limb_t (2^(16 t) mod q), every partial product below 2^60: exact in uint64
    limbs = (bits + 1 + 15) // 16
    raw = np.frombuffer(os.urandom(2 * limbs * degree), dtype=np.uint16).reshape(limbs, degree).astype(np.uint64)
    top = (bits + 1) - 16 * (limbs - 1)
    raw[-1] &= np.uint64((1 << top) - 1)
    for i, q in enumerate(moduli):
        qq = np.uint64(q)
        res = np.zeros(degree, dtype=np.uint64)
        for t in range(limbs):
            res = (res + raw[t] * np.uint64(pow(2, 16 * t, q))) % qq
        res = (res + np.uint64((q - pow(2, bits, q)) % q)) % qq
        data[0, i] = (data[0, i] + res) % qq
    body[start:start + data.nbytes] = data.tobytes()
    major, minor = blob[3], blob[4]  # SEAL's own version, as it wrote the blob (it refuses another one's)
    return struct.pack("<HBBBBHQ", 0xA15E, 16, major, minor, 0, 0, 16 + len(body)) + bytes(body)


class LatticePublic:
    """C's side: the contexts, the public keys, encoders, encryptors and evaluators (one per prime)."""

    def __init__(self, ring: RingParams, public_keys: list[bytes]) -> None:
        if not isinstance(ring, RingParams):
            raise CryptoError(f"expected RingParams, got {type(ring).__name__}")
        if not isinstance(public_keys, (list, tuple)) or len(public_keys) != ring.n_primes:
            raise CryptoError(f"expected {ring.n_primes} public keys (one per prime)")
        seal = _seal()
        self.ring = ring
        self.contexts = _contexts(ring)
        self.public_keys = [load_ct(ctx, pk, "PublicKey") for ctx, pk in zip(self.contexts, public_keys)]
        self.encoders = [seal.BatchEncoder(ctx) for ctx in self.contexts]
        self.encryptors = [seal.Encryptor(ctx, pk) for ctx, pk in zip(self.contexts, self.public_keys)]
        self.evaluators = [seal.Evaluator(ctx) for ctx in self.contexts]
        parms = seal.EncryptionParameters(seal.SCHEME_TYPE.BFV)
        parms.set_poly_modulus_degree(ring.degree)
        self.moduli = tuple(m.value() for m in seal.CoeffModulus.BFVDefault(ring.degree, seal.SEC_LEVEL_TYPE.TC128)[:-1])
        q = 1
        for m in self.moduli:
            q *= m
        # decryption is correct while |noise| < q / (2 T) (per prime): leave 3 bits for the rest
        self.flood_bits = min((q // (2 * p)).bit_length() - 1 for p in ring.primes) - 3
        self.key_id = bytes(np.frombuffer(b"".join(public_keys[:1]), dtype=np.uint8)[-16:])

    @property
    def hide_limit(self) -> int:
        """The largest noise bound (bits) a ciphertext may carry when flooded: ``flood_bits - HIDE_BITS``."""
        return self.flood_bits - HIDE_BITS

    def plaintext(self, i: int, values: np.ndarray) -> Any:
        """Prime ``i``'s plaintext of ``N`` slot values (residues mod that prime)."""
        pt = _seal().Plaintext()
        self.encoders[i].encode(values.tolist(), pt)
        return pt

    def encrypt(self, i: int, values: np.ndarray) -> Any:
        """A public-key encryption (fresh randomness: it also re-randomises what it is added to)."""
        ct = _seal().Ciphertext()
        self.encryptors[i].encrypt(self.plaintext(i, values), ct)
        return ct


class LatticeKeys(LatticePublic):
    """S's side: :class:`LatticePublic` plus the secret keys and decryptors (generated here)."""

    def __init__(self, ring: RingParams) -> None:
        seal = _seal()
        contexts = _contexts(ring)
        gens = [seal.KeyGenerator(ctx) for ctx in contexts]
        pks = []
        for g in gens:
            pk = seal.PublicKey()
            g.create_public_key(pk)
            pks.append(save_ct(pk))
        super().__init__(ring, pks)
        self.exported = pks
        self._decryptors = [seal.Decryptor(ctx, g.secret_key()) for ctx, g in zip(self.contexts, gens)]
        self._sym = [seal.Encryptor(ctx, g.secret_key()) for ctx, g in zip(self.contexts, gens)]

    def encrypt(self, i: int, values: np.ndarray) -> Any:
        """S's fresh ciphertexts: secret-key encryption (less noise and work than public-key)."""
        ct = _seal().Ciphertext()
        self._sym[i].encrypt_symmetric(self.plaintext(i, values), ct)
        return ct

    def decrypt(self, i: int, ct: Any) -> np.ndarray:
        pt = _seal().Plaintext()
        self._decryptors[i].decrypt(ct, pt)
        return np.array(self.encoders[i].decode_uint64(pt), dtype=np.uint64)

    def noise_budget(self, i: int, ct: Any) -> int:
        """SEAL's invariant noise budget (bits) of a ciphertext under prime ``i`` (tests audit it)."""
        return self._decryptors[i].invariant_noise_budget(ct)
