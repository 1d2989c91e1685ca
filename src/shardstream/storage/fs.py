"""fsspec URLs: which filesystem serves a URL, how to join paths, where a remote is cached.

Transport is fsspec's job; this module only picks the filesystem, passes the caller's
``storage_options`` through and turns a missing backend into an install hint.
"""

from __future__ import annotations

import hashlib
import os
from typing import Optional

from ..errors import InvalidArgumentError, MissingDependencyError

_EXTRAS = {"s3": "s3", "s3a": "s3", "gs": "gcs", "gcs": "gcs", "az": "azure", "abfs": "azure", "abfss": "azure",
           "adl": "azure", "http": "http", "https": "http", "hf": "hf"}

CACHE_ENV = "SHARDSTREAM_CACHE_DIR"


def split_protocol(url: str) -> tuple[Optional[str], str]:
    if "://" in url:
        proto, _, rest = url.partition("://")
        return proto, rest
    return None, url


def is_remote(url: str) -> bool:
    proto, _ = split_protocol(url)
    return proto not in (None, "file", "local")


def local_path(url: str) -> str:
    """The filesystem path of a local URL (``file://x`` or a plain path)."""
    proto, rest = split_protocol(url)
    return os.path.expanduser(rest if proto in ("file", "local") else url)


def _default_options(proto: Optional[str], options: dict) -> dict:
    """Honour mosaicml-streaming's ``S3_ENDPOINT_URL`` for S3 unless the caller set an endpoint."""
    if proto in ("s3", "s3a") and os.environ.get("S3_ENDPOINT_URL"):
        client = dict(options.get("client_kwargs") or {})
        if "endpoint_url" not in client and "endpoint_url" not in options:
            client["endpoint_url"] = os.environ["S3_ENDPOINT_URL"]
            options = {**options, "client_kwargs": client}
    return options


def filesystem(url: str, storage_options: Optional[dict] = None):
    """The fsspec filesystem and the path within it for ``url``."""
    try:
        from fsspec.core import url_to_fs
    except ImportError as exc:  # pragma: no cover - fsspec is a core dependency
        raise MissingDependencyError("remote storage needs fsspec: pip install fsspec") from exc
    proto, _ = split_protocol(url)
    options = _default_options(proto, dict(storage_options or {}))
    try:
        return url_to_fs(url, **options)
    except (ImportError, ValueError, TypeError) as exc:
        if isinstance(exc, ImportError):
            hint = _EXTRAS.get(proto or "", proto)
            raise MissingDependencyError(
                f"{url!r} needs the fsspec backend for {proto!r}; install it with: pip install 'shardstream[{hint}]'"
            ) from exc
        raise InvalidArgumentError(f"cannot open {url!r} with storage_options={storage_options!r}: {exc}") from exc


def join(base: str, *parts: Optional[str]) -> str:
    """``base/part/...`` with one slash between pieces (URLs and paths alike)."""
    out = base.rstrip("/")
    for part in parts:
        if part:
            out = f"{out}/{part.strip('/')}"
    return out


def cache_root() -> str:
    """Where datasets with a remote and no ``local`` are cached: ``$SHARDSTREAM_CACHE_DIR``,
    else ``$XDG_CACHE_HOME/shardstream``, else ``~/.cache/shardstream``."""
    root = os.environ.get(CACHE_ENV)
    if root:
        return os.path.expanduser(root)
    xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(xdg, "shardstream")


def default_local(remote: str) -> str:
    """A directory for ``remote`` under :func:`cache_root`, the same in every process and job
    that streams the same remote (so they share one cache), distinct for other remotes."""
    key = remote.rstrip("/")
    proto, rest = split_protocol(key)
    tail = "".join(c if c.isalnum() or c in "-_." else "_" for c in rest.rsplit("/", 1)[-1])[:40] or "root"
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    return os.path.join(cache_root(), f"{proto or 'file'}-{tail}-{digest}")


def backoff(attempt: int, base: float = 0.25, cap: float = 8.0) -> float:
    """Seconds to wait before retry ``attempt + 1``: exponential, capped, with full jitter around it."""
    import random

    return min(cap, base * 2**attempt) * (0.5 + random.random())
