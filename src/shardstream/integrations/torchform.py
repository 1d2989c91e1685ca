"""What a column batch becomes for a PyTorch training step (``StreamingDataLoader`` without a ``collate_fn``).

Per column:

- numeric scalars and fixed-shape arrays: one stacked tensor, as ``default_collate`` gives;
- variable-length arrays (``ndarray:<dtype>``) whose rows are 1-D, with ``ragged="pad"`` (the
  default): ``name``, a ``(batch, longest row)`` tensor padded with zeros, and ``name_lengths``,
  an int64 tensor of the rows' lengths; with ``ragged="ragged"``: a :class:`~shardstream.Ragged`
  of tensors (flat ``values`` and ``offsets``, what ``nn.EmbeddingBag`` takes). Rows with more
  dimensions become a list of tensors;
- everything else (``str``, ``bytes``, images as PIL images, ``json``, untyped ``ndarray`` ...):
  a list of the decoded values.

Workers shape the numpy column batches (:func:`numpy_form`) and hand them to the main process, which
makes the tensors without a copy (:func:`torch_form`).
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

import numpy as np
import torch

from ..errors import InvalidArgumentError
from ..format.batch import Ragged, stack_samples

RAGGED_FORMS = ("pad", "ragged")


def lengths_key(name: str) -> str:
    """The key of the row lengths that come with a padded variable-length column."""
    return f"{name}_lengths"


def to_torch(batch: Any, pin: bool = False) -> Any:
    """numpy arrays -> tensors sharing their memory (recursively through dicts, lists, Ragged)."""
    if isinstance(batch, np.ndarray):
        t = torch.from_numpy(batch) if batch.dtype != object else batch
        return t.pin_memory() if pin and isinstance(t, torch.Tensor) else t
    if isinstance(batch, dict):
        return {k: to_torch(v, pin) for k, v in batch.items()}
    if isinstance(batch, Ragged):
        return Ragged(to_torch(batch.values, pin), to_torch(np.asarray(batch.offsets), pin), batch.shapes)
    if isinstance(batch, tuple):
        return tuple(to_torch(v, pin) for v in batch)
    return batch


def numpy_form(batch: dict[str, Any], ragged: str) -> dict[str, Any]:
    """The numpy half of the module docstring's form, done where the batch is made (a worker): 1-D
    variable-length rows padded, with their lengths, when ``ragged="pad"``."""
    if ragged != "pad":
        return batch
    out: dict[str, Any] = {}
    for name, value in batch.items():
        if isinstance(value, Ragged) and value.shapes is None:  # 1-D rows
            out[name] = value.to_padded(0)
            out[lengths_key(name)] = value.lengths.astype(np.int64)
        else:
            out[name] = value
    return out


def torch_form(batch: dict[str, Any], pin: bool, ragged: str) -> dict[str, Any]:
    """The torch half, in the training process: a :func:`numpy_form` batch as tensors viewing its arrays
    (rows of more dimensions, left as a Ragged by ``ragged="pad"``, as a list of tensors)."""
    out: dict[str, Any] = {}
    for name, value in batch.items():
        if isinstance(value, Ragged) and ragged == "pad":
            out[name] = [to_torch(np.ascontiguousarray(row), pin) for row in value.tolist()]
        else:
            out[name] = to_torch(value, pin)
    return out


def torch_batch(batch: dict[str, Any], pin: bool, ragged: str) -> dict[str, Any]:
    """A numpy column batch in the form of the module docstring."""
    return torch_form(numpy_form(batch, ragged), pin, ragged)


def check_ragged(dataset, columns: Optional[Sequence[str]], ragged: str, converted: bool) -> None:
    """Refuse a ``ragged`` form that is unknown or, for ``converted`` batches, whose ``name_lengths``
    key is a column already."""
    if ragged not in RAGGED_FORMS:
        raise InvalidArgumentError(f"ragged={ragged!r} is not one of {', '.join(map(repr, RAGGED_FORMS))}")
    if ragged != "pad" or not converted or not dataset.shards:
        return
    names = set(dataset.column_names)
    for name, kind, _ in dataset.table.kinds(columns):
        if kind == "ragged" and lengths_key(name) in names:
            raise InvalidArgumentError(
                f"the variable-length column {name!r} would come padded with its row lengths under "
                f"{lengths_key(name)!r}, which is a column of the dataset too; pass ragged='ragged' (a Ragged of "
                "tensors) or leave one of them out with columns=[...]")


class StackSamples:
    """A collate_fn that stacks decoded samples into the numpy column batch the batch decoder gives
    (so the per-sample path hands the main process the same batches)."""

    def __init__(self, kinds: list) -> None:
        self.kinds = kinds

    def __call__(self, samples: list[dict]) -> dict[str, Any]:
        return stack_samples(samples, self.kinds)
