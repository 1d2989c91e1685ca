"""The output of a conversion, a local directory or any fsspec URL, and what of it is the converter's.

Layout::

    OUTPUT/shardstream-convert.json   the manifest: settings, the input schema, each part's inputs
    OUTPUT/part-00000/index.json      one MDS sub-dataset per unit of work, complete once its index is there
    OUTPUT/part-00000/shard.00000.mds.zstd
    OUTPUT/index.json                 every complete part's shards, written last (merge_index)

Small files (the manifest) are written atomically: a temp name renamed into place locally, one PUT on
an object store.
"""

from __future__ import annotations

import json
import os
import posixpath
import shutil
from contextlib import contextmanager
from typing import Any, Optional

from ..errors import DownloadError, ShardstreamError
from ..format.atomic import atomic_write
from ..storage.fs import filesystem, is_remote, local_path
from ..writing.parts import clear_output

MANIFEST = "shardstream-convert.json"


class Output:
    """``output`` (a directory or URL) with the few operations the converter needs."""

    def __init__(self, output: str, storage_options: Optional[dict] = None) -> None:
        self.remote = is_remote(output)
        self.url = output.rstrip("/") if self.remote else os.path.abspath(local_path(output))
        self.storage_options = storage_options
        self.fs, self.path = filesystem(self.url if self.remote else "file://" + self.url, storage_options)

    def join(self, *names: str) -> str:
        """The URL (or local path) of ``names`` below the output."""
        if self.remote:
            return posixpath.join(self.url, *names)
        return os.path.join(self.url, *names)

    def _path(self, *names: str) -> str:
        return posixpath.join(self.path, *names) if self.remote else os.path.join(self.url, *names)

    def exists(self, *names: str) -> bool:
        return self.fs.exists(self._path(*names)) if self.remote else os.path.exists(self._path(*names))

    def read_json(self, name: str) -> Optional[Any]:
        """The JSON file ``name`` below the output, or None when there is none."""
        try:
            data = self.fs.cat_file(self._path(name)) if self.remote else open(self._path(name), "rb").read()
        except FileNotFoundError:
            return None
        return json.loads(data)

    def write_json(self, name: str, value: Any) -> None:
        data = json.dumps(value, indent=1, sort_keys=True).encode("utf-8") + b"\n"
        if self.remote:
            with reaching(f"writing {self.join(name)}"):  # e.g. a bucket that does not exist
                self.fs.pipe_file(self._path(name), data)
        else:
            os.makedirs(self.url, exist_ok=True)
            atomic_write(self._path(name), data, fsync=True)

    def names(self) -> list[str]:
        """The names directly below the output (nothing when it does not exist)."""
        if self.remote:
            try:
                return sorted(posixpath.basename(p.rstrip("/")) for p in self.fs.ls(self.path, detail=False))
            except FileNotFoundError:
                return []
        return sorted(os.listdir(self.url)) if os.path.isdir(self.url) else []

    def remove(self, name: str) -> None:
        """Remove ``name`` (a file or a whole part) below the output, if there."""
        path = self._path(name)
        if self.remote:
            if self.fs.exists(path):
                self.fs.rm(path, recursive=True)
        elif os.path.isdir(path):
            shutil.rmtree(path)
        elif os.path.exists(path):
            os.unlink(path)

    def clear(self) -> None:
        """Empty the output for a conversion from scratch: the manifest, then the dataset and its parts
        (:func:`~shardstream.writing.parts.clear_output`); any other file is refused (named), nothing deleted."""
        clear_output(self.url, True, self.storage_options, also=(MANIFEST,))


@contextmanager
def reaching(what: str):
    """Errors of a storage backend (an unreachable endpoint, refused credentials) as a typed error."""
    try:
        yield
    except ShardstreamError:
        raise
    except Exception as exc:
        raise DownloadError(f"{what} failed ({type(exc).__name__}: {exc}); check the URL, the network and "
                            "storage_options") from exc
