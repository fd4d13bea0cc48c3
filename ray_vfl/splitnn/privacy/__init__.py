"""Label leakage in split learning: the attacks a non-label party can run, and the label party's defenses.

:mod:`.attacks` (norm, direction and clustering attacks of an honest-but-curious non-label party on what it
received and sent, and LeakAUC) and :mod:`.defenses` (Gaussian DP, Marvell, MixPro: what wraps the gradients the label
party sends). Neither needs the network: they act on arrays and on what a party records.
"""
