"""A transformed sharded source as a processing chain: what ``AsyncDataLoader(source.filter(...))`` reads.

:class:`~.base.TransformedShardedSource` applies its transforms to each row as it is read (a row
out, None to drop it, or an iterable of rows for an ``is_expand`` transform). Read through a loader,
the source becomes the chain of the files' :class:`~shardstream.StreamingDataset` (the plan's order,
dealt among the job's readers, resumable on any world) with every transform, composed from the
innermost, applied in groups of rows by one batched ``map``. The map may change the number of rows,
so the job's ranks agree where each epoch ends (:mod:`shardstream.engine.agree`), as after any
``filter``.
"""

from __future__ import annotations

from typing import Any, Callable

from ..errors import InvalidArgumentError, NotYetSupportedError
from ..engine.maps import to_batch, to_rows
from .base import applied

GROUP = 32  # rows handed to the transforms at once


class RowTransforms:
    """The transforms of a stack of transformed sources, innermost first, over a batch of rows."""

    def __init__(self, transforms: list[Callable[[dict], Any]]) -> None:
        self.transforms = transforms

    def __call__(self, batch: dict) -> dict:
        rows = to_rows(batch)
        for transform in self.transforms:
            rows = list(applied(transform, rows))
        if not rows:
            return {column: [] for column in batch}
        if not isinstance(rows[0], dict):
            raise InvalidArgumentError(
                f"a transform of a sharded source read through a loader must return rows (dicts of column -> "
                f"value), got {type(rows[0]).__name__} {rows[0]!r:.60}; return a dict, e.g. {{'value': ...}}")
        return to_batch(rows)


def transformed_chain(source, **dataset_kwargs: Any):
    """The chain that reads ``source`` (a ``TransformedShardedSource``, maybe over others) through a loader:
    the underlying file source's dataset (``dataset_kwargs``: its settings, e.g. ``world``), then the
    transforms (see the module docstring)."""
    transforms = []
    while hasattr(source, "transform") and hasattr(source, "source"):
        transforms.append(source.transform)
        source = source.source
    make = getattr(source, "dataset", None)
    if not callable(make):
        raise NotYetSupportedError(
            f"a transform of {type(source).__name__} cannot be read through a loader: a loader reads the rows of "
            "a source's StreamingDataset, and this source has none (no .dataset(...)); use a file source "
            "(ParquetShardedSource, JsonShardedSource ...) or iterate the source yourself")
    dataset = make(**dataset_kwargs)
    return dataset.as_iterable().map(RowTransforms(transforms[::-1]), batched=True, batch_size=GROUP,
                                     remove_columns=list(dataset.column_names))
