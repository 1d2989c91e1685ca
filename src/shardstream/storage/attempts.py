"""The requests a dataset makes to its store besides downloading shards: listing its files, asking a
file's metadata, the ranged reads that describe a file (a Parquet footer, a JSON Lines file's lines).
Each is made as a download is (:mod:`.fetch`):

- every attempt is limited to ``download_timeout`` seconds: on an async filesystem (s3fs, gcsfs, HTTP,
  Azure) the request's coroutine runs on fsspec's loop and is cancelled at the limit, so a store that
  accepts the connection and never answers costs that limit, not the client's own timeouts and retries
  (botocore's and s3fs's together run for minutes). A synchronous filesystem (local files) is called as
  it is;
- a transient failure (a timeout, a 5xx, a reset, a short answer, an endpoint that cannot be reached) is
  tried again ``download_retry`` times with backoff; a permanent one (missing, refused credentials, other
  4xx) is not (:mod:`.failures`);
- the end is a :class:`~shardstream.errors.DownloadError` that names the URL, says what every attempt
  ran into and what to change. A ``keep`` exception (a missing file, where the caller has its own words
  for it) and any shardstream error pass through as they are.
"""

from __future__ import annotations

import time
from typing import Any, Callable

from ..errors import DownloadError, FileChangedError, ShardstreamError
from . import inner_retries
from .failures import CANNOT_CONNECT, SHORT_BODY, ShortBody, advice, label, permanent, refusal_fix, summary
from .fs import backoff


def bounded(fs, method: str, *args: Any, timeout: float, **kwargs: Any) -> Any:
    """``fs.<method>(*args, **kwargs)``, given up after ``timeout`` seconds (``FSTimeoutError``) on an async
    filesystem."""
    impl = getattr(fs, "_" + method, None)
    if getattr(fs, "async_impl", False) and getattr(fs, "loop", None) is not None and impl is not None:
        from fsspec.asyn import sync

        return sync(fs.loop, impl, *args, timeout=timeout, **kwargs)
    return getattr(fs, method)(*args, **kwargs)


def attempts(call: Callable[[], Any], url: str, retry: int, timeout: float, what: str = "reading",
             fs: Any = None, keep: tuple = ()) -> Any:
    """``call()``, tried again after a transient failure up to ``retry`` times (see the module docstring).
    ``what`` says what was being done to ``url`` (``"listing"``, ``"reading"`` ...); ``fs``, when given, is
    the filesystem whose client may retry by itself (its connection failures are then reported)."""
    failures: list[str] = []
    if fs is not None:
        inner_retries.watch(fs)
    for attempt in range(retry + 1):
        if fs is not None:
            inner_retries.unreached(fs)  # nothing left over from before this attempt
        try:
            return call()
        except keep:
            raise
        except ShardstreamError:
            raise
        except Exception as exc:
            why = permanent(exc)
            if why is not None:
                raise DownloadError(f"{url} {why} ({type(exc).__name__}: {exc}); this is not retried: "
                                    f"{refusal_fix(exc)}") from exc
            failures.append(CANNOT_CONNECT if fs is not None and inner_retries.unreached(fs) else label(exc))
            if attempt == retry:
                raise final_error(what, url, failures, timeout, exc) from exc
            time.sleep(backoff(attempt))
    raise AssertionError("unreachable")  # pragma: no cover


def final_error(what: str, url: str, failures: list[str], timeout: float, last: BaseException) -> DownloadError:
    """The error after every attempt failed: what each ran into and what to change. Short answers on every
    attempt mean the file is shorter than it was listed at: a :class:`FileChangedError`."""
    said = f"{type(last).__name__}: {last}" if str(last) else type(last).__name__
    text = (f"{what} {url} failed {len(failures)} time(s): {summary(failures)} (each attempt limited to "
            f"{timeout:g}s; the last: {said}); {advice(failures)}")
    if all(f == SHORT_BODY for f in failures):
        return FileChangedError(text)
    return DownloadError(text)


def short_check(data: bytes, want: int, offset: int) -> bytes:
    """``data`` if it holds the ``want`` bytes asked for at ``offset``; else a transient failure, tried again."""
    if len(data) < want:
        raise ShortBody(f"received {len(data)} of the {want} bytes asked for at offset {offset}")
    return data
