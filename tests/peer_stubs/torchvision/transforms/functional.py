"""Stand-in for ``torchvision.transforms.functional`` (only ``to_tensor``)."""

from typing import Any

import numpy as np
import torch

__all__ = ["to_tensor"]


def to_tensor(pic: Any) -> torch.Tensor:
    """Convert a PIL image or HxW(xC) ndarray to a CxHxW tensor.

    uint8 input is scaled to float in [0, 1], like the real function.
    """
    arr = np.array(pic, copy=True)
    if arr.ndim == 2:
        arr = arr[:, :, None]
    tensor = torch.from_numpy(np.ascontiguousarray(arr.transpose(2, 0, 1)))
    if tensor.dtype == torch.uint8:
        return tensor.float().div(255)
    return tensor
