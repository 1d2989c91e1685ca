"""The data plane: finished batches cross from workers to the training process through a shared ring
of slots (:mod:`.memory`), written and read back without a copy (:mod:`.pack`)."""

from .memory import Ring, RingStateError, RingUnavailableError
from .pack import Packed, pack, register_leaf

__all__ = ["Packed", "Ring", "RingStateError", "RingUnavailableError", "pack", "register_leaf"]
