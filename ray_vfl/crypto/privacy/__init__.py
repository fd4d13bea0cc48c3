"""Differential privacy and secure aggregation: what a party adds to, or masks in, what it releases.

:mod:`.gaussian_dp` (the Gaussian mechanism: calibration, PLD accounting, the party's noise source) and
:mod:`.secure_sum` (sums of float vectors by pairwise masks, Bonawitz et al.). Needs nothing of
:mod:`ray_vfl.crypto.he` or :mod:`ray_vfl.crypto.two_server`.
"""
