"""The data layer: vertically partitioned datasets, per-party binning, the bundled tables.

:mod:`.dataset` (:class:`VerticalDataset`, :class:`AlignedDataset`, :func:`read_table`), :mod:`.splitting`
(:func:`vertical_split`), :mod:`.alignment` (rows aligned by private set intersection), :mod:`.binning` (each party's
quantile bins) and :mod:`.bundled` (the credit table shipped with the package, named datasets).
Labels are held by one party (``label_party``) or spread over several, each row's label at one of
them (``label_owner``, ``label_parties``; PIVODL).
"""

from .. import _lazy_exports

_EXPORTS = {
    "VerticalDataset": ".dataset", "read_table": ".sources", "PartySource": ".sources", "vertical_split": ".splitting",
    "AlignedDataset": ".dataset", "align_frames": ".dataset",
    "PartyBinner": ".binning", "check_encodable": ".binning",
    "load_credit": ".bundled", "load_named": ".bundled", "credit_path": ".bundled", "NAMED_DATASETS": ".bundled",
}
__getattr__, __dir__ = _lazy_exports(__name__, _EXPORTS)
__all__ = sorted(_EXPORTS)
