"""Stand-in for ``torchvision`` so that ``import streaming`` (mosaicml-streaming)
works with a CPU-only torch wheel that has no matching torchvision.

Only the names that ``streaming`` touches at import time are provided:
``torchvision.datasets.VisionDataset`` and
``torchvision.transforms.functional.to_tensor``. Nothing here is a working
image pipeline; do not put this directory on ``sys.path`` when the real
torchvision is installed.
"""

from . import datasets, transforms

__version__ = "0.0.0+stub"

__all__ = ["datasets", "transforms", "__version__"]
