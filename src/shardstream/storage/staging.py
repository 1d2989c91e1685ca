"""Where a writer to a remote ``out`` stages its shards before uploading them.

Each remote gets one staging directory under the cache root
(``<cache root>/staging/<scheme>-<name>-<digest of the URL>``), held with an exclusive
file lock while a writer uses it. A writer that was killed leaves its directory behind;
the next writer to the same ``out`` finds it by name and removes it before staging
anything. A second live writer to the same ``out`` is refused instead of clobbering
the first one's files.
"""

from __future__ import annotations

import os
import shutil

from ..errors import OutputWriteError, WriterError
from .fs import CACHE_ENV, cache_root, default_local
from .locks import FileLock


def staging_dir(remote: str) -> str:
    """The staging directory of writers to ``remote`` (the same in every process)."""
    return os.path.join(cache_root(), "staging", os.path.basename(default_local(remote)))


class Staging:
    """The locked staging directory of ``remote``, emptied of a killed writer's leftovers."""

    def __init__(self, remote: str) -> None:
        self.path = staging_dir(remote)
        try:
            os.makedirs(os.path.dirname(self.path), exist_ok=True)
        except OSError as exc:
            raise OutputWriteError(
                f"cannot create {os.path.dirname(self.path)!r} to stage the files for {remote!r} ({exc}); set "
                f"{CACHE_ENV} to a writable directory, or pass out=(local_dir, remote_url)"
            ) from exc
        self._lock = FileLock(self.path + ".lock")  # beside the directory, so it survives its removal
        if not self._lock.try_acquire(exclusive=True):
            self._lock.release()
            raise WriterError(
                f"another writer is writing to {remote!r} (it holds {self._lock.path}); wait for it to finish, "
                "or write to another out"
            )
        shutil.rmtree(self.path, ignore_errors=True)  # what a killed writer left behind
        os.makedirs(self.path, exist_ok=True)

    def release(self, keep: bool = False) -> None:
        """Remove the directory (unless ``keep``) and let the next writer in."""
        if not keep:
            shutil.rmtree(self.path, ignore_errors=True)
        self._lock.release()
