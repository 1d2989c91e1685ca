"""Stand-in for ``torchvision.transforms`` (only ``functional.to_tensor``)."""

from . import functional

__all__ = ["functional"]
