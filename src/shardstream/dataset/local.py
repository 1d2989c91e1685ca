"""``LocalDataset``: the samples of a dataset in a local directory, by index (mosaicml-streaming's class).

A map-style dataset with nothing of an epoch: ``len(ds)``, ``ds[i]`` (ints, negative too, slices,
lists and numpy arrays of ints), ``ds.get_item(i)``, ``ds.num_samples`` and ``ds.size``. A plain
PyTorch ``DataLoader`` takes it as it takes any object with ``__len__`` and ``__getitem__``, and
its sampler decides the order. It reads the shards in place, never copying or caching them.
"""

from __future__ import annotations

from typing import Any, Optional

import numpy as np

from .streaming import StreamingDataset


class LocalDataset:
    """The dataset in ``local`` (its ``split`` subdirectory if given), read in place by index."""

    def __init__(self, local: str, split: Optional[str] = None) -> None:
        self.local = local
        self.split = split or ""
        self._dataset = StreamingDataset(local=local, split=split or None)
        self.num_samples = self._dataset.num_samples

    def __len__(self) -> int:
        return self.num_samples

    @property
    def size(self) -> int:
        """Number of samples."""
        return self.num_samples

    @property
    def num_shards(self) -> int:
        return self._dataset.num_shards

    @property
    def column_names(self) -> tuple[str, ...]:
        return self._dataset.column_names

    def get_item(self, sample_id: int) -> dict[str, Any]:
        """Sample ``sample_id`` (negative counts from the end)."""
        return self._dataset.get_item(sample_id)

    def __getitem__(self, key) -> Any:
        if isinstance(key, list) or (isinstance(key, np.ndarray) and key.ndim > 1):
            return [self[k] for k in key]  # lists of lists too, as mosaicml-streaming indexes
        return self._dataset[key]

    def __repr__(self) -> str:
        where = self.local + (f", split={self.split!r}" if self.split else "")
        return f"LocalDataset({where}: {self.num_samples} samples)"
