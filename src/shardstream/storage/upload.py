"""Uploading written files to any fsspec URL in background threads."""

from __future__ import annotations

import threading
import time
import warnings
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Optional

from ..errors import UploadError
from ..format.index import INDEX_BASENAME
from ..format.outdir import refuse_non_empty, refuse_others, split_dataset_files
from .fs import backoff, filesystem


class Uploader:
    """Upload local files to ``remote`` (a directory URL), retrying transient errors.

    Errors are raised on the next :meth:`check` or at :meth:`close`, naming the file
    and the URL.
    """

    def __init__(self, remote: str, retry: int = 2, max_workers: Optional[int] = None,
                 storage_options: Optional[dict] = None, progress_bar: bool = False) -> None:
        self.remote = remote.rstrip("/")
        self.fs, self.root = filesystem(self.remote, storage_options)
        self.retry = retry
        self._pool = ThreadPoolExecutor(max_workers=max_workers or 8, thread_name_prefix="shardstream-upload")
        self._futures: list[Future] = []
        self._lock = threading.Lock()
        self._progress = None
        if progress_bar:
            try:
                from tqdm import tqdm

                self._progress = tqdm(desc=f"upload to {self.remote}", unit="file")
            except ImportError:  # pragma: no cover
                self._progress = None
        try:
            self.fs.makedirs(self.root, exist_ok=True)
        except Exception:  # object stores have no directories; the first put creates the prefix
            pass

    def existing(self, exist_ok: bool) -> list[str]:
        """The dataset files already at the remote, to be replaced (see :meth:`clear`); deletes nothing.

        Refuses a remote directory that holds files (without ``exist_ok``) or files that are not a
        dataset's (with it), so a refusal comes before anything is deleted here or in a local copy."""
        names = self._listing()
        if not names:
            return []
        if not exist_ok:
            refuse_non_empty(self.remote, len(names))
        index = None
        if INDEX_BASENAME in names:
            index = self.fs.cat_file(f"{self.root}/{INDEX_BASENAME}")
        ours, others = split_dataset_files(names, index)
        refuse_others(self.remote, others)
        return ours

    def clear(self, names: list[str]) -> None:
        """Delete ``names`` (from :meth:`existing`: the index first) at the remote."""
        for name in names:
            self.fs.rm_file(f"{self.root}/{name}")
        if names:
            self.fs.invalidate_cache(self.root)

    def _listing(self) -> list[str]:
        """The files below the remote directory, as paths relative to it."""
        try:
            found = self.fs.find(self.root)
        except (FileNotFoundError, NotADirectoryError):
            return []
        except PermissionError as exc:  # write-only credentials: writing still works, checking does not
            warnings.warn(f"cannot list {self.remote} ({exc}); files already there are not checked or replaced",
                          stacklevel=3)
            return []
        except Exception as exc:
            raise UploadError(f"listing {self.remote} (to check what is there) failed: "
                              f"{type(exc).__name__}: {exc}") from exc
        prefix = self.root.rstrip("/") + "/"
        return [p[len(prefix):] for p in found if p.startswith(prefix)]

    def submit(self, local_path: str, basename: str) -> None:
        self.check()
        with self._lock:
            self._futures.append(self._pool.submit(self._put, local_path, basename))

    def upload_now(self, local_path: str, basename: str) -> None:
        self._put(local_path, basename)

    def _put(self, local_path: str, basename: str) -> None:
        target = f"{self.root}/{basename}"
        for attempt in range(self.retry + 1):
            try:
                parent = target.rsplit("/", 1)[0]
                if "/" in basename:
                    try:
                        self.fs.makedirs(parent, exist_ok=True)
                    except Exception:
                        pass
                self.fs.put_file(local_path, target)
                if self._progress is not None:
                    self._progress.update(1)
                return
            except Exception as exc:
                if attempt == self.retry:
                    raise UploadError(
                        f"uploading {basename!r} to {self.remote}/{basename} failed after {attempt + 1} "
                        f"attempt(s): {type(exc).__name__}: {exc}"
                    ) from exc
                time.sleep(backoff(attempt))

    def check(self) -> None:
        with self._lock:
            done = [f for f in self._futures if f.done()]
            for f in done:
                self._futures.remove(f)
        for f in done:
            f.result()

    def close(self) -> None:
        with self._lock:
            futures, self._futures = self._futures, []
        try:
            for f in futures:
                f.result()
        finally:
            self._pool.shutdown(wait=True)
            if self._progress is not None:
                self._progress.close()

    def abort(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
