"""``MDSWriter``: write MDS shards to a local directory or any fsspec URL."""

from __future__ import annotations

import os
import shutil
from typing import Any, Optional, Sequence, Union

from ..errors import InvalidArgumentError
from ..format.index import INDEX_BASENAME
from ..format.shardwriter import DEFAULT_HASHES, DEFAULT_SIZE_LIMIT, ShardWriter
from ..keywords import checked_keywords
from ..storage.fs import is_remote, split_protocol
from ..storage.staging import Staging
from ..storage.upload import Uploader


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

    ``out`` is a local directory (or ``file://`` URL), any fsspec URL (``s3://``, ``gs://``,
    ``az://`` ...; shards are staged in a directory named after the URL under the cache root
    and uploaded in the background, the index last), or a ``(local_dir, remote_url)`` pair.
    A non-empty ``out`` is refused unless ``exist_ok=True``, which replaces the dataset there
    and refuses, naming them, files that are not a dataset's.

    ``hashes`` names the digests recorded in the index for every shard file; the default,
    ``("xxh3_64",)``, is cheap and lets ``shardstream verify`` and downloads detect damaged
    bytes. ``hashes=[]`` (or ``None``) records none, as mosaicml-streaming does by default.

    Use it as a context manager: on a clean exit the last shard and ``index.json`` are
    written; if the block raises, no index is written, so the partial output is never
    taken for a complete dataset.

    Example::

        with MDSWriter(out="data/train", columns={"tokens": "ndarray:int32", "label": "int"},
                       compression="zstd", hashes=["xxh64"]) as out:
            for sample in samples:
                out.write(sample)
    """

    @checked_keywords(kind="Writer")
    def __init__(
        self,
        *,
        columns: dict[str, str],
        out: Union[str, tuple[str, str]],
        keep_local: bool = False,
        compression: Optional[str] = None,
        hashes: Optional[Sequence[str]] = DEFAULT_HASHES,
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
        self._staging: Optional[Staging] = None
        if remote is not None and local is None:
            self._staging = Staging(remote)  # a killed writer's leftovers there are removed
            local = self._staging.path
        try:
            stale: list[str] = []
            if remote is not None:
                self._uploader = Uploader(remote, retry=retry, max_workers=max_workers,
                                          storage_options=storage_options, progress_bar=progress_bar)
                # refused before a local copy is cleared; deleted only once the arguments are known to be good
                stale = self._uploader.existing(exist_ok)
            super().__init__(columns=columns, local=local, compression=compression, hashes=hashes,
                             size_limit=size_limit, exist_ok=exist_ok or self._staging is not None,
                             on_file=self._on_file if remote is not None else None)
            if self._uploader is not None:
                self._uploader.clear(stale)
        except BaseException:
            if getattr(self, "_pool", None) is not None:  # the shard writer started
                self._abort()
            else:
                self._release()
            raise

    def get_config(self) -> dict[str, Any]:
        """The shard-writing settings, as mosaicml-streaming's ``get_config()`` gives them (and as every
        shard's entry in ``index.json`` records them): ``version``, ``format``, ``compression``,
        ``hashes``, ``size_limit``, ``column_names``, ``column_encodings`` and ``column_sizes``."""
        return {k: list(v) if isinstance(v, list) else v for k, v in self._config().items()}

    def _on_file(self, path: str, basename: str) -> None:
        if basename == INDEX_BASENAME:
            self._uploader.close()  # every shard is up (or an error is raised) before the index
            self._uploader.upload_now(path, basename)
        else:
            self._uploader.submit(path, basename)

    def finish(self) -> None:
        if self._closed:
            return
        try:
            super().finish()
        except BaseException:
            self._abort()
            raise
        if self._staging is not None:
            self._staging.release(keep=self.keep_local)
            self._staging = None
        elif self._uploader is not None and not self.keep_local:
            shutil.rmtree(self.local, ignore_errors=True)

    def _abort(self) -> None:
        super()._abort()
        self._release()

    def _release(self) -> None:
        """Stop uploading; remove the staging directory and let the next writer to this out in."""
        if self._uploader is not None:
            self._uploader.abort()
        if self._staging is not None:
            self._staging.release()
            self._staging = None
