"""Stand-in for ``torchvision.datasets`` (only ``VisionDataset``)."""

from typing import Any, Callable, Optional

from torch.utils.data import Dataset

__all__ = ["VisionDataset"]


class VisionDataset(Dataset):
    """Minimal stand-in for ``torchvision.datasets.VisionDataset``."""

    def __init__(
        self,
        root: Any = None,
        transforms: Optional[Callable] = None,
        transform: Optional[Callable] = None,
        target_transform: Optional[Callable] = None,
    ) -> None:
        self.root = root
        self.transforms = transforms
        self.transform = transform
        self.target_transform = target_transform
