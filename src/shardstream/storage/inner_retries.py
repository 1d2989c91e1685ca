"""Error answers a storage client retried by itself, inside one of our attempts.

botocore (under s3fs) retries 5xx and throttling answers on its own, with backoff, so an attempt
that ends in our timeout may have been answered with 503s all along; reporting it as "timed out"
alone would hide that. :func:`watch` hooks the S3 client's retry decisions and :func:`take`
returns the statuses seen for one object since the last call, for the download's error message;
:func:`unreached` says whether the client could not even connect to its endpoint (a wrong
``endpoint_url`` or a store that is down looks like a timeout otherwise).
Other clients either do not retry (HTTP) or surface the status in the error they raise.
"""

from __future__ import annotations

import threading
from urllib.parse import unquote, urlsplit

from .failures import cannot_connect

_lock = threading.Lock()
_seen: dict[str, list[int]] = {}  # decoded URL path -> statuses retried inside the client
_unreached: set[str] = set()  # endpoints the client could not connect to, and retried by itself
_HOOK_ID = "shardstream-inner-retries"


def watch(fs) -> None:
    """Record the error statuses the S3 client of ``fs`` retries by itself (no-op for other stores)."""
    if not hasattr(fs, "_s3") or not hasattr(fs, "connect"):
        return
    try:
        if fs._s3 is None:
            fs.connect()
        fs._s3.meta.events.register("needs-retry.s3", _on_retry, unique_id=_HOOK_ID)  # once per client
    except Exception:  # a client that cannot say: messages fall back to what our attempts saw
        return


def _on_retry(response=None, request_dict=None, caught_exception=None, endpoint=None, **kwargs) -> None:
    if caught_exception is not None and cannot_connect(caught_exception):
        host = getattr(endpoint, "host", None)
        with _lock:
            if isinstance(host, str) and len(_unreached) < 1_000:
                _unreached.add(host)
        return
    status = getattr(response[0], "status_code", None) if isinstance(response, tuple) and response else None
    if isinstance(status, int) and status >= 400 and isinstance(request_dict, dict):
        path = unquote(urlsplit(str(request_dict.get("url", ""))).path)
        with _lock:
            if len(_seen) < 10_000:  # bounded: entries are taken by the download that caused them
                _seen.setdefault(path, []).append(status)


def take(rpath: str) -> list[int]:
    """The statuses retried inside the client for object ``rpath`` (``bucket/key``) since the last call."""
    key = "/" + rpath.split("/", 1)[-1] if "/" in rpath else "/" + rpath
    out: list[int] = []
    with _lock:
        for path in [p for p in _seen if p.endswith(key)]:
            out.extend(_seen.pop(path))
    return out


def unreached(fs) -> bool:
    """Whether the S3 client of ``fs`` failed to connect to its endpoint, and retried by itself, since the
    last call (an attempt that then ran out of time never reached the store: the address is the likely fault)."""
    try:
        host = fs._s3.meta.endpoint_url
    except AttributeError:
        return False
    with _lock:
        if host in _unreached:
            _unreached.discard(host)
            return True
    return False
