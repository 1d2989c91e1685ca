"""Values as torch or jax arrays (``with_format("torch" | "jax")``), imported only when asked for."""

from __future__ import annotations

from typing import Any

import numpy as np


def converter(kind: str):
    """A function turning a row or a batch (dict of column -> value) into ``kind`` arrays."""
    if kind == "torch":
        import torch

        def one(v):
            if isinstance(v, np.ndarray) and v.dtype.kind in "biuf":
                return torch.from_numpy(np.ascontiguousarray(v))
            if isinstance(v, (int, float, np.number)) and not isinstance(v, bool):
                return torch.as_tensor(v)
            return v
    else:
        import jax.numpy as jnp

        def one(v):
            if isinstance(v, np.ndarray) and v.dtype.kind in "biuf":
                return jnp.asarray(v)
            if isinstance(v, (int, float, np.number)) and not isinstance(v, bool):
                return jnp.asarray(v)
            return v

    def convert(value: Any) -> Any:
        value = to_numpy(value)
        if isinstance(value, dict):
            return {c: one(v) for c, v in value.items()}
        return one(value)
    return convert


def to_numpy(value: Any) -> Any:
    """Lists of numbers (or of equal-shape arrays) as numpy arrays, in a row or a batch."""
    if isinstance(value, dict):
        return {c: _array(v) for c, v in value.items()}
    return _array(value)


def _array(v: Any) -> Any:
    if isinstance(v, list) and v:
        first = v[0]
        if isinstance(first, np.ndarray) and all(isinstance(x, np.ndarray) and x.shape == first.shape for x in v):
            return np.stack(v)
        if isinstance(first, (int, float, np.number)) and not isinstance(first, bool):
            try:
                return np.asarray(v)
            except (ValueError, TypeError):
                return v
    return v
