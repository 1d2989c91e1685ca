"""Fetching one remote file into the local cache: atomic, retried, bounded in time, verified.

A download goes to a hidden temp file beside its destination (the cache's usage scan
counts such files at their full expected size, so space is reserved from the start)
and is renamed into place only once its size, and digest when one is known, match.
Transient failures (5xx, resets, timeouts, short bodies) are retried with exponential
backoff and jitter; permanent ones (missing, forbidden, a directory, other 4xx answers) are not
(see :mod:`.failures`), and the final error lists what each attempt ran into. A digest mismatch fetches the
file once more, then raises :class:`~shardstream.errors.HashMismatchError` with both
digests.

A file of at least ``progress_from`` bytes (:data:`BIG_DOWNLOAD` by default; a big shard, or the first
download of a big index listing) shows a progress bar on a terminal and logs a summary line when it is
done (:mod:`.downloadbar`, :mod:`shardstream.progress`).
"""

from __future__ import annotations

import os
import threading
import time
from typing import Optional

from ..errors import DownloadError, FileChangedError, HashMismatchError, InvalidArgumentError, RemoteChangedError
from ..format.atomic import remove_quietly, temp_name
from ..format.hashing import digest_file
from ..format.files import local_version
from ..format.index import FileInfo
from ..stats import record
from . import inner_retries
from .attempts import attempts, bounded
from .failures import (CANNOT_CONNECT, CREDENTIALS_FIX, ShortBody, advice, label, permanent, refused_credentials,
                       summary)
from .fs import backoff, filesystem, is_remote, join
from .versions import RemoteVersions

_CHUNK = 1 << 22
BIG_DOWNLOAD = 64 << 20  # bytes from which a download shows its progress


class Fetcher:
    """Downloads files of the directory ``remote`` (any fsspec URL).

    ``retry`` is the number of re-attempts after a transient failure and ``timeout``
    the seconds one attempt may take. ``stats`` counts files and bytes fetched. A download of at
    least ``progress_from`` bytes shows a bar as ``progress`` says (True, False, None: on a terminal).
    """

    def __init__(self, remote: str, storage_options: Optional[dict] = None, retry: int = 2,
                 timeout: float = 60, progress: Optional[bool] = None, progress_from: int = BIG_DOWNLOAD) -> None:
        if isinstance(progress_from, bool) or not isinstance(progress_from, int) or progress_from < 0:
            raise InvalidArgumentError(f"progress_from={progress_from!r} should be a number of bytes >= 0 (the size "
                                       f"from which a download shows its progress; default {BIG_DOWNLOAD})")
        self.remote = remote.rstrip("/")
        self.storage_options = storage_options
        self._fs, self.root = filesystem(self.remote, storage_options)
        self._pid = os.getpid()
        self.retry = retry
        self.timeout = timeout
        self.progress, self.progress_from = progress, progress_from
        self._lock = threading.Lock()
        self.files = 0
        self.bytes = 0
        self.versions: Optional[RemoteVersions] = None  # set once the index is read: shards are then checked

    def __getstate__(self) -> dict:  # filesystems with live sessions do not pickle everywhere
        state = self.__dict__.copy()
        del state["_fs"], state["_lock"]
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._fs, self.root = filesystem(self.remote, self.storage_options)
        self._pid = os.getpid()
        self._lock = threading.Lock()

    @property
    def fs(self):
        """The filesystem, opened again in a forked child (async filesystems such as s3fs refuse
        to run on the event loop of the process they were made in)."""
        if self._pid != os.getpid():
            self._fs, self.root = filesystem(self.remote, self.storage_options)
            self._pid = os.getpid()
            self._lock = threading.Lock()
        return self._fs

    def url(self, basename: str) -> str:
        return join(self.remote, basename)

    def fetch(self, basename: str, dest: str, size: Optional[int] = None, hashes: Optional[dict] = None) -> None:
        """Download ``basename`` to ``dest`` atomically, checking ``size`` and ``hashes`` ({algo: hex})."""
        os.makedirs(os.path.dirname(dest) or ".", exist_ok=True)
        mismatch = None
        for _ in range(2):  # a digest mismatch is fetched once more before it is an error
            tmp = self._download(basename, dest, size, versioned=not hashes)
            try:
                mismatch = _first_mismatch(tmp, hashes or {})
                if mismatch is None:
                    os.replace(tmp, dest)
                    return
            finally:
                remove_quietly(tmp)
        algo, got, want = mismatch
        raise HashMismatchError(
            f"shard {basename!r} from {self.url(basename)}: {algo} digest is {got} but the index says {want}, "
            "twice in a row; the remote copy is damaged or the index belongs to another version of the dataset"
        )

    def fetch_part(self, info: FileInfo, dest: str) -> None:
        """Download the byte range ``info`` describes of its ``source`` file (the whole file when the range
        is all of it) to ``dest``, refusing it if the file is no longer the version it was listed at."""
        os.makedirs(os.path.dirname(dest) or ".", exist_ok=True)
        tmp = self._download(info.source, dest, info.bytes, versioned=False,
                             part=(info.offset, info.bytes, info.version))
        try:
            os.replace(tmp, dest)
        finally:
            remove_quietly(tmp)

    def _check_version(self, name: str, rpath: str, version: str) -> None:
        from .listing import version_of

        if is_remote(self.remote):
            now = version_of(self._info(rpath))
        else:
            try:
                now = local_version(os.stat(rpath))
            except FileNotFoundError:
                now = "missing"
        if version and now != version:
            raise FileChangedError(
                f"{self.url(name)} changed after the dataset listed it (size:version {version} -> {now}), so its "
                "rows are no longer the ones the plan counted; open the dataset again to read the new version")

    def _download(self, basename: str, dest: str, size: Optional[int], versioned: bool = True,
                  part: Optional[tuple] = None) -> str:
        """Fetch to a temp file; ``versioned``: also check the remote file's identity (:mod:`.versions`),
        for files the index gives no digest of (a digest checks the content itself)."""
        rpath = join(self.root, basename) if self.root else basename
        failures: list[str] = []
        inner: list[int] = []  # error statuses the client retried by itself within our attempts
        inner_retries.watch(self.fs)
        started = time.perf_counter()
        for attempt in range(self.retry + 1):
            tmp = temp_name(dest)
            inner_retries.take(rpath)  # nothing left over from before this attempt
            inner_retries.unreached(self.fs)
            shown = None
            try:
                if part is None:
                    shown = self._bar(basename, size)
                    self._get(rpath, tmp, shown)
                else:
                    self._get_range(rpath, tmp, part[0], part[1])
                    self._check_version(basename, rpath, part[2])
                got = os.path.getsize(tmp)
                if versioned and self.versions is not None:  # after the download: a change during it is seen too
                    self.versions.check(basename, self.url(basename), self._info(rpath), size)
                if size is not None and got != size:
                    raise ShortBody(f"received {got} bytes, the index says {size}")
                with self._lock:
                    self.files += 1
                    self.bytes += got
                if record.ON:
                    record.fetched(got, time.perf_counter() - started)
                if shown is not None:
                    shown.finish(got)
                return tmp
            except RemoteChangedError:
                remove_quietly(tmp)
                _abandon(shown)
                raise
            except Exception as exc:
                remove_quietly(tmp)
                _abandon(shown)
                why = permanent(exc)
                if why is not None:
                    fix = CREDENTIALS_FIX if refused_credentials(exc) else (
                        "check remote= (a dataset directory with index.json) and the credentials in storage_options")
                    raise DownloadError(f"{basename!r} {why} at {self.url(basename)} ({type(exc).__name__}: {exc}); "
                                        f"this is not retried: {fix}") from exc
                # transient: 5xx, resets, timeouts, short bodies, an endpoint the client could not connect to
                failures.append(CANNOT_CONNECT if inner_retries.unreached(self.fs) else label(exc))
                inner.extend(inner_retries.take(rpath))
                if attempt == self.retry:
                    raise DownloadError(self._failed(basename, failures, inner, exc)) from exc
                time.sleep(backoff(attempt))
        raise AssertionError("unreachable")  # pragma: no cover

    def _failed(self, basename: str, failures: list[str], inner: list[int], last: BaseException) -> str:
        """What every attempt at ``basename`` ran into, and what to change."""
        within = (f"; in all the store answered {summary([f'HTTP {s}' for s in inner])} (the client retries "
                  "such answers by itself within one attempt)" if inner else "")
        return (f"downloading {basename!r} from {self.url(basename)} failed {len(failures)} time(s): "
                f"{summary(failures)}{within} (each attempt limited to {self.timeout:g}s; the last: "
                f"{type(last).__name__}: {last}); {advice(failures, bool(inner))}")

    def _info(self, rpath: str) -> dict:
        """The remote file's metadata, asked afresh (never from a listing cached by the filesystem), within
        the time of one attempt."""
        fs = self.fs
        try:
            fs.invalidate_cache(rpath)
            return bounded(fs, "info", rpath, timeout=self.timeout)
        except (NotImplementedError, AttributeError, TypeError):  # a store with no metadata requests
            return {}

    def request(self, method: str, name: str, *args, keep: tuple = (), **kwargs):
        """``fs.<method>`` of the remote file ``name`` (``""``: the remote itself), as a download is tried: each
        attempt within the timeout, transient failures retried, a :class:`DownloadError` naming the URL at the
        end (``keep``: exceptions that pass through, such as FileNotFoundError)."""
        rpath = (join(self.root, name) if self.root else name) if name else self.root
        url = self.url(name) if name else self.remote
        return attempts(lambda: bounded(self.fs, method, rpath, *args, timeout=self.timeout, **kwargs), url,
                        self.retry, self.timeout, "looking up", self.fs, keep)

    def _get_range(self, rpath: str, tmp: str, offset: int, length: int) -> None:
        data = bounded(self.fs, "cat_file", rpath, start=offset, end=offset + length, timeout=self.timeout)
        with open(tmp, "wb") as dst:
            dst.write(data)

    def _bar(self, basename: str, size: Optional[int]):
        """The progress of downloading ``basename``: an fsspec callback, shown once it is known to be big."""
        if self.progress is False:
            return None
        from .downloadbar import DownloadBar

        return DownloadBar(basename, self.progress_from, self.progress, size)

    def _get(self, rpath: str, tmp: str, shown=None) -> None:
        fs = self.fs
        if getattr(fs, "async_impl", False) and getattr(fs, "loop", None) is not None:
            from fsspec.asyn import sync

            more = {} if shown is None else {"callback": shown}
            sync(fs.loop, fs._get_file, rpath, tmp, timeout=self.timeout, **more)
            return
        deadline = time.monotonic() + self.timeout
        with fs.open(rpath, "rb") as src, open(tmp, "wb") as dst:
            if shown is not None and getattr(src, "size", None) is not None:
                shown.set_size(src.size)
            while True:
                chunk = src.read(_CHUNK)
                if not chunk:
                    return
                dst.write(chunk)
                if shown is not None:
                    shown.relative_update(len(chunk))
                if time.monotonic() > deadline:
                    raise TimeoutError(f"more than {self.timeout:g}s")


def _abandon(shown) -> None:
    if shown is not None:
        shown.abandon()


def _first_mismatch(path: str, hashes: dict) -> Optional[tuple[str, str, str]]:
    for algo, want in hashes.items():
        got = digest_file(algo, path)
        if got != want:
            return algo, got, want
    return None
