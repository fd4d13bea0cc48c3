"""The lattice engine of the two-server protocols: BFV (SEAL, through ``tenseal.sealapi``) with SIMD
slots, so Mult, Trunc, LGT and Regroup act on whole arrays at the cost of a few ciphertexts.

:mod:`.ring` (parameters, exact arithmetic modulo the CRT plaintext modulus), :mod:`.keys` (contexts,
keys, the wire format and noise flooding), :mod:`.arrays` (arrays in slots, local operations),
:mod:`.server_s` (server S), :mod:`.two_server` (server C, the security argument). Needs the ``lattice`` extra.
"""
