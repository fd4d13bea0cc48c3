"""ECDH private set intersection: the protocol (:mod:`.protocol`) and what one party runs (:mod:`.party`)."""

from .. import _lazy_exports

_EXPORTS = {
    "PsiResult": ".protocol", "private_set_intersection": ".protocol", "normalize_ids": ".party",
    "PsiParty": ".party",
}
__getattr__, __dir__ = _lazy_exports(__name__, _EXPORTS)
__all__ = sorted(_EXPORTS)
