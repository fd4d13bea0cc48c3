"""BCP encryption and the two-server sub-protocols on it (SSXGB).

:mod:`.bcp` (Setup, KeyGen, the raw arithmetic), :mod:`.bcp_master` (the master key's mDec),
:mod:`.bcp_arrays` (:class:`~.bcp_arrays.BCP` on ciphertext arrays), :mod:`.bcp_batches` (several
arrays in one call); :mod:`.server_s` (the protocols' table of rounds, server S, the configuration and
the in-process link), :mod:`.server_c` (server C) and :mod:`.reciprocal` (the secure reciprocal, by
Newton's iteration over C's Mult and Trunc). Builds on :mod:`ray_vfl.crypto.he` (ciphertext
arrays, fixed point, the key-size policy, gmpy2 helpers).
"""
