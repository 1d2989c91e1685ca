"""``MDSWriter``: write MDS shards to a local directory or any fsspec URL."""

from __future__ import annotations

import os
import shutil
import tempfile
from typing import Any, Optional, Union

from .errors import InvalidArgumentError
from .format.index import INDEX_BASENAME
from .format.writer import DEFAULT_SIZE_LIMIT, ShardWriter
from .keywords import checked_keywords
from .storage.fs import is_remote, split_protocol
from .storage.upload import Uploader


def resolve_out(out: Union[str, tuple[str, str]]) -> tuple[Optional[str], Optional[str]]:
    """``out`` -> (local directory or None, remote URL or None)."""
    if isinstance(out, (tuple, list)):
        if len(out) != 2 or not all(isinstance(x, str) for x in out):
            raise InvalidArgumentError(f"out={out!r} should be a path, a URL, or a (local_dir, remote_url) pair")
        return out[0], out[1]
    if not isinstance(out, (str, os.PathLike)):
        raise InvalidArgumentError(f"out={out!r} should be a path, a URL, or a (local_dir, remote_url) pair")
    out = os.fspath(out)
    if is_remote(out):
        return None, out
    proto, path = split_protocol(out)
    return (path if proto else out), None


class MDSWriter(ShardWriter):
    """Write samples into MDS shards, compatible with mosaicml-streaming.

    ``out`` is a local directory, any fsspec URL (``s3://``, ``gs://``, ``az://``,
    ``file://`` ...; shards are staged in a temp directory and uploaded in the
    background, the index last), or a ``(local_dir, remote_url)`` pair.

    Use it as a context manager: on a clean exit the last shard and ``index.json`` are
    written; if the block raises, no index is written, so the partial output is never
    taken for a complete dataset.

    Example::

        with MDSWriter(out="data/train", columns={"tokens": "ndarray:int32", "label": "int"},
                       compression="zstd", hashes=["xxh64"]) as out:
            for sample in samples:
                out.write(sample)
    """

    @checked_keywords()
    def __init__(
        self,
        *,
        columns: dict[str, str],
        out: Union[str, tuple[str, str]],
        keep_local: bool = False,
        compression: Optional[str] = None,
        hashes: Optional[list[str]] = None,
        size_limit: Optional[Union[int, str]] = DEFAULT_SIZE_LIMIT,
        progress_bar: bool = False,
        max_workers: Optional[int] = None,
        retry: int = 2,
        exist_ok: bool = False,
        storage_options: Optional[dict[str, Any]] = None,
    ) -> None:
        local, remote = resolve_out(out)
        self.remote = remote
        self.keep_local = keep_local or remote is None
        self._uploader: Optional[Uploader] = None
        self._temp_local = False
        if remote is not None:
            if local is None:
                local = tempfile.mkdtemp(prefix="shardstream-write-")
                self._temp_local = True
            self._uploader = Uploader(remote, retry=retry, max_workers=max_workers,
                                      storage_options=storage_options, progress_bar=progress_bar)
        super().__init__(columns=columns, local=local, compression=compression, hashes=hashes,
                         size_limit=size_limit, exist_ok=exist_ok or self._temp_local,
                         on_file=self._on_file if remote is not None else None)

    def _on_file(self, path: str, basename: str) -> None:
        if basename == INDEX_BASENAME:
            self._uploader.close()  # every shard is up (or an error is raised) before the index
            self._uploader.upload_now(path, basename)
        else:
            self._uploader.submit(path, basename)

    def finish(self) -> None:
        if self._closed:
            return
        super().finish()
        if self._uploader is not None and not self.keep_local:
            shutil.rmtree(self.local, ignore_errors=True)

    def _abort(self) -> None:
        super()._abort()
        if self._uploader is not None:
            self._uploader.abort()
            if self._temp_local:
                shutil.rmtree(self.local, ignore_errors=True)
