"""``shardstream.load_dataset``: ``datasets.load_dataset(..., streaming=True)``'s call, the engine's dataset.

Two ways to name the data, as in ``datasets``:

- a builder name (``"parquet"``, ``"json"``, ``"csv"``, ``"text"``, ``"arrow"``) with ``data_files``:
  a path or glob, a list of them (the ``train`` split), or a mapping of split -> paths;
- a dataset directory: a local directory, a URL, or a Hub id (``user/name``), laid out as
  ``save_to_disk`` writes it or as the Hub names files (see :mod:`.layout`); ``name`` picks the
  subset (configuration), ``data_files`` / ``data_dir`` narrow it.

The result is a :class:`~shardstream.StreamingDataset` (deterministic order, partitioned over
ranks and DataLoader workers, resumable mid-epoch), or with ``split=None`` a dict of them by split
(``datasets`` returns an ``IterableDatasetDict`` there). ``streaming=False`` is refused: shardstream
never loads a dataset into memory, and a ``StreamingDataset`` is not a ``datasets.Dataset``.
"""

from __future__ import annotations

import hashlib
import json
import os
from typing import Any, Optional, Sequence

from ..errors import InvalidArgumentError, NoFilesError, SplitNotFoundError
from ..dataset.streaming import StreamingDataset
from ..storage.fs import is_remote
from .layout import split_patterns
from .resolve import locate

#: the builder names ``path`` may be, and the format each reads (JSON: JSON Lines or a JSON array, by content)
BUILDERS = {"parquet": "parquet", "json": "json", "jsonl": "jsonl", "csv": "csv", "text": "text", "arrow": "arrow"}
#: ``datasets.load_dataset`` keywords that have no meaning for a stream of files, refused by name
_NOT_HERE = ("keep_in_memory", "num_proc", "download_mode", "verification_mode", "download_config",
             "trust_remote_code", "features", "save_infos")


def load_dataset(path: str, name: Optional[str] = None, data_files: Any = None, split: Optional[str] = None,
                 streaming: bool = True, columns: Optional[Sequence[str]] = None,
                 storage_options: Optional[dict] = None, **dataset_kwargs: Any) -> Any:
    """The split ``split`` of a dataset as a :class:`~shardstream.StreamingDataset` (a dict of them by split
    when ``split`` is None); see the module docstring. ``columns``: read only these. ``dataset_kwargs``
    go to ``StreamingDataset`` (``batch_size``, ``shuffle``, ``local`` for the cache of a remote ...),
    except ``revision``, ``token``, ``data_dir`` and ``cache_dir``, which mean what they mean to
    ``datasets`` (``cache_dir``: a root under which each split's remote files are cached in a directory
    of their own, see :func:`cache_for`)."""
    if streaming is not True:
        raise InvalidArgumentError(
            f"streaming={streaming!r}: shardstream.load_dataset always streams (it never loads a dataset into "
            "memory) and returns a StreamingDataset, which also gives len(ds) and ds[i]; call it with "
            "streaming=True, or use datasets.load_dataset for an in-memory datasets.Dataset")
    refused = [k for k in _NOT_HERE if k in dataset_kwargs]
    if refused:
        raise InvalidArgumentError(f"load_dataset({refused[0]}=...) is a datasets option with no meaning for a "
                                   "stream of files; leave it out")
    revision = dataset_kwargs.pop("revision", None)
    token = dataset_kwargs.pop("token", None)
    data_dir = dataset_kwargs.pop("data_dir", None)
    cache_dir = dataset_kwargs.pop("cache_dir", None)
    if token is not None:
        storage_options = {**(storage_options or {}), "token": token}
    fmt, splits = split_files(path, name, data_files, data_dir, revision, storage_options)
    if split is None:
        return {s: _open(files, fmt, columns, storage_options, cache_dir, dataset_kwargs)
                for s, files in splits.items()}
    if not isinstance(split, str) or "[" in split or "+" in split:
        raise InvalidArgumentError(f"split={split!r} must be a split name ({', '.join(splits)}); slicing a split "
                                   "('train[:10%]') is not supported: take the rows with ds[...] instead")
    if split not in splits:
        raise SplitNotFoundError(f"{path!r} has no split {split!r}; it has {', '.join(splits)}")
    return _open(splits[split], fmt, columns, storage_options, cache_dir, dataset_kwargs)


def split_files(path: str, name: Optional[str], data_files: Any, data_dir: Optional[str],
                revision: Optional[str], storage_options: Optional[dict]) -> tuple[Optional[str], dict]:
    """``(format or None, {split: [file URLs or paths]})`` of what ``load_dataset`` names."""
    if isinstance(path, str) and path in BUILDERS:
        if data_files is None and data_dir is None:
            raise InvalidArgumentError(f"load_dataset({path!r}) needs data_files= (a path or glob, a list, or a "
                                       "mapping of split -> paths) or data_dir=")
        if name is not None:
            raise InvalidArgumentError(f"name={name!r} selects a subset of a dataset directory; the {path!r} builder "
                                       "reads the files data_files names")
        if data_files is None:
            located = locate(data_dir, storage_options)
            return BUILDERS[path], {s: located.urls(fs) for s, fs in located.layout.subset(None).items()}
        splits = split_patterns(data_files)
        return BUILDERS[path], {s: [_under(data_dir, p) for p in ps] for s, ps in splits.items()}
    located = locate(path, storage_options, data_files, data_dir, revision)
    splits = located.layout.subset(name)
    if not splits:
        raise NoFilesError(f"subset {name!r} of {path!r} has no data files")
    return None, {s: located.urls(files) for s, files in splits.items()}


def _under(data_dir: Optional[str], pattern: str) -> str:
    if data_dir is None or "://" in pattern or os.path.isabs(pattern):
        return pattern
    return f"{data_dir.rstrip('/')}/{pattern}" if "://" in data_dir else os.path.join(data_dir, pattern)


def _open(files: list, fmt: Optional[str], columns: Optional[Sequence[str]], storage_options: Optional[dict],
          cache_dir: Optional[str], kwargs: dict) -> StreamingDataset:
    if not files:
        raise NoFilesError("the split has no files")
    settings = dict(kwargs)
    if is_remote(files[0]):
        if cache_dir is not None:
            settings.setdefault("local", cache_for(cache_dir, files))
        return StreamingDataset(remote=list(files), format=fmt, columns=columns, storage_options=storage_options,
                                **settings)
    if "local" in settings:
        raise InvalidArgumentError("local= is where a remote dataset's pieces are cached; these files are local "
                                   "and read in place: leave local out")
    return StreamingDataset(local=list(files), format=fmt, columns=columns, storage_options=storage_options,
                            **settings)


def cache_for(cache_dir: str, files: Sequence[str]) -> str:
    """The cache directory of ``files`` under ``cache_dir`` (as in ``datasets``, a root holding the caches of
    many datasets and splits): one subdirectory per set of files."""
    digest = hashlib.sha1(json.dumps(list(files)).encode()).hexdigest()[:16]
    return os.path.join(os.path.expanduser(cache_dir), f"files-{digest}")
