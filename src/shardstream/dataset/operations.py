"""The processing operations on a :class:`~shardstream.StreamingDataset` itself.

Each returns an :class:`~.dataset.IterableDataset` rooted at the dataset, so
``StreamingDataset(...).shuffle(buffer_size=10_000).map(...)`` reads like HF ``datasets``.

``shuffle`` is also mosaicml-streaming's constructor flag, read back as ``ds.shuffle``:
:class:`ShuffleFlag` serves both. It is truthy exactly when the plan shuffles (``if
ds.shuffle:``, ``ds.shuffle == True`` work as before), and calling it adds HF's shuffle
buffer (``ds.shuffle(seed=42, buffer_size=10_000)``).
"""

from __future__ import annotations

from typing import Any


class ShuffleFlag:
    """``ds.shuffle``: the plan's shuffle flag, callable as HF's ``shuffle(seed, buffer_size)``."""

    __slots__ = ("value", "dataset")

    def __init__(self, value: bool, dataset) -> None:
        self.value, self.dataset = bool(value), dataset

    def __bool__(self) -> bool:
        return self.value

    def __eq__(self, other: Any) -> bool:
        if isinstance(other, ShuffleFlag):
            return self.value == other.value
        if isinstance(other, (bool, int)):
            return self.value == other
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self.value)

    def __repr__(self) -> str:
        return repr(self.value)

    def __call__(self, seed=None, buffer_size: int = 1000, generator=None):
        """HF's shuffle buffer over this dataset's plan order (see :mod:`shardstream.engine.ops`)."""
        return self.dataset.as_iterable().shuffle(seed=seed, buffer_size=buffer_size, generator=generator)


class Operations:
    """HF-style operations, each starting a chain at this dataset (see the module docstring)."""

    def as_iterable(self):
        """This dataset as the start of a processing chain (an :class:`~.dataset.IterableDataset`)."""
        from .chain import IterableDataset

        return IterableDataset(self)

    def map(self, *args, **kwargs):
        return self.as_iterable().map(*args, **kwargs)

    def filter(self, *args, **kwargs):
        return self.as_iterable().filter(*args, **kwargs)

    def take(self, n: int):
        return self.as_iterable().take(n)

    def skip(self, n: int):
        return self.as_iterable().skip(n)

    def batch(self, batch_size: int, drop_last_batch: bool = False):
        return self.as_iterable().batch(batch_size, drop_last_batch)

    def rename_column(self, original_column_name: str, new_column_name: str):
        return self.as_iterable().rename_column(original_column_name, new_column_name)

    def rename_columns(self, column_mapping: dict):
        return self.as_iterable().rename_columns(column_mapping)

    def select_columns(self, column_names):
        return self.as_iterable().select_columns(column_names)

    def remove_columns(self, column_names):
        return self.as_iterable().remove_columns(column_names)

    def pack(self, seq_len: int, **kwargs):
        return self.as_iterable().pack(seq_len, **kwargs)

    def with_format(self, type=None):
        return self.as_iterable().with_format(type)

    def prefetch(self, n: int):
        return self.as_iterable().prefetch(n)

    def iter(self, batch_size: int, drop_last_batch: bool = False):
        return self.as_iterable().iter(batch_size, drop_last_batch)
