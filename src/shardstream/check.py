"""``inspect_dataset`` and ``verify_dataset`` for a local directory or any URL the library reads.

A remote dataset is inspected from its ``index.json`` alone. Verifying one downloads each
shard as it is (no size or digest check on the way, so damage is reported rather than
refused), checks it and deletes it again, unless ``cache=`` names a directory to keep
the downloads in.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from typing import Optional

from .errors import DownloadError, IndexNotFoundError
from .format.atomic import remove_quietly
from .format.index import INDEX_BASENAME, ShardInfo, read_index, shard_path
from .format.inspect import inspect_dataset as _inspect_local
from .format.textformat import INDEX_FORMAT
from .format.verify import ProgressArg, VerifyReport, verify_shards
from .storage.fetch import Fetcher
from .storage.fs import is_remote, local_path


def _fetch_index(fetcher: Fetcher, dirname: str) -> list[ShardInfo]:
    try:
        fetcher.fetch(INDEX_BASENAME, os.path.join(dirname, INDEX_BASENAME))
    except DownloadError as exc:
        if isinstance(exc.__cause__, FileNotFoundError):  # fsspec's stores raise it for a 404 too
            raise IndexNotFoundError(
                f"no {INDEX_BASENAME} at {fetcher.url(INDEX_BASENAME)}; is this the dataset directory?"
            ) from None
        raise
    return read_index(dirname)


def inspect_dataset(path: str, storage_options: Optional[dict] = None) -> dict:
    """Shards, samples, bytes, columns, compression and digests of the dataset at ``path``
    (a directory or any fsspec URL); only ``index.json`` is read."""
    if not is_remote(path):
        return _inspect_local(local_path(path)) | {"path": path}
    with tempfile.TemporaryDirectory(prefix="shardstream-inspect-") as tmp:
        _fetch_index(Fetcher(path, storage_options), tmp)
        return _inspect_local(tmp) | {"path": path}


def verify_dataset(path: str, decode_samples: bool = True, progress: ProgressArg = None,
                   storage_options: Optional[dict] = None, cache: Optional[str] = None) -> VerifyReport:
    """Check every shard of the dataset at ``path`` (a directory or any fsspec URL): sizes,
    recorded digests, headers and, unless ``decode_samples=False``, every sample.

    Problems are collected in the report, not raised; a missing or unreadable index is raised.
    A remote dataset's shards are downloaded one at a time into a temporary directory and
    deleted after their check, or kept in ``cache`` when given.

    ``progress``: a progress bar on stderr (True), none (False), on a terminal only (None, the default), or
    a callable ``(shards done, shards)``; a summary line is logged (logger ``shardstream``) in every case."""
    if not is_remote(path):
        dirname = local_path(path)
        return verify_shards(dirname, read_index(dirname), decode_samples, progress)
    fetcher = Fetcher(path, storage_options)
    dirname = os.path.abspath(os.path.expanduser(cache)) if cache else tempfile.mkdtemp(prefix="shardstream-verify-")
    try:
        os.makedirs(dirname, exist_ok=True)
        shards = _fetch_index(fetcher, dirname)

        def fetch(info: ShardInfo) -> None:  # always the remote's bytes, also over a copy kept in cache
            for f in INDEX_FORMAT.fetched_files(info):  # a text shard's .meta file too
                fetcher.fetch(f.basename, shard_path(dirname, f.basename))

        def release(info: ShardInfo) -> None:
            if not cache:
                for f in INDEX_FORMAT.owned_files(info):
                    remove_quietly(shard_path(dirname, f.basename))

        return verify_shards(dirname, shards, decode_samples, progress, fetch, release)
    finally:
        if not cache:
            shutil.rmtree(dirname, ignore_errors=True)
