"""EasyDeL's ``HuggingFaceShardedSource`` over the engine: a Hugging Face dataset's split as file shards.

The dataset is found as :func:`shardstream.load_dataset` finds it (a ``save_to_disk`` directory, a
directory laid out like a Hub repository, a URL, or a Hub id read through ``hf://``; see
:mod:`shardstream.hub`), and the files of the split are read as a
:class:`~shardstream.sources.files.FileShardedSource`: one shard per file, resumable at any row.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

from ..hub.load import cache_for
from ..hub.resolve import locate
from .files import FileShardedSource


class HuggingFaceShardedSource(FileShardedSource):
    """Split ``split`` of subset ``subset`` of the dataset ``dataset_name`` (a directory, URL or Hub id).
    ``streaming`` is accepted for EasyDeL's signature: files are always read piece by piece, never
    loaded whole. ``cache_dir``: the root under which pieces of remote files are cached (each split's
    files in a directory of their own, as :func:`shardstream.load_dataset` keeps them)."""

    def __init__(self, dataset_name: str, split: str = "train", subset: Optional[str] = None,
                 streaming: bool = True, cache_dir: Optional[str] = None, *,
                 storage_options: Optional[dict] = None, revision: Optional[str] = None,
                 data_dir: Optional[str] = None, columns: Optional[Sequence[str]] = None, **kwargs: Any) -> None:
        located = locate(dataset_name, storage_options, data_dir=data_dir, revision=revision)
        self.dataset_name, self.split, self.subset, self.streaming = dataset_name, split, subset, streaming
        files = located.urls(located.layout.files(subset, split))
        cache = cache_for(cache_dir, files) if cache_dir is not None else None
        super().__init__(files, storage_options, columns, cache_dir=cache, **kwargs)

    def __repr__(self) -> str:
        subset = f", subset={self.subset!r}" if self.subset else ""
        return f"HuggingFaceShardedSource({self.dataset_name!r}, split={self.split!r}{subset}, files={self.num_shards})"
