"""Crash-safe file writes: write to a hidden temp name in the same directory,
fsync, then rename into place. A reader sees the old file, the new file, or
nothing, never a torn one."""

from __future__ import annotations

import json
import os
import secrets
from typing import Any, Iterable, Optional

TMP_PREFIX = ".tmp-"


def temp_name(path: str) -> str:
    head, tail = os.path.split(path)
    return os.path.join(head, f"{TMP_PREFIX}{tail}.{os.getpid()}.{secrets.token_hex(4)}")


def _fsync_dir(dirname: str) -> None:
    try:
        fd = os.open(dirname or ".", os.O_RDONLY)
    except OSError:  # pragma: no cover - platforms without directory fds
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover
        pass
    finally:
        os.close(fd)


def atomic_write(path: str, data: bytes | Iterable[bytes], fsync: bool = True) -> None:
    """Write ``data`` (bytes or an iterable of chunks) to ``path`` atomically."""
    tmp = temp_name(path)
    try:
        with open(tmp, "wb") as f:
            if isinstance(data, (bytes, bytearray, memoryview)):
                f.write(data)
            else:
                for chunk in data:
                    f.write(chunk)
            if fsync:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    if fsync:
        _fsync_dir(os.path.dirname(path))


def read_json(path: str) -> Optional[Any]:
    """The JSON value in ``path``; None if it is missing, unreadable or not JSON."""
    try:
        with open(path, "rb") as f:
            return json.loads(f.read())
    except (OSError, ValueError):
        return None


def remove_quietly(path: str) -> None:
    """Delete ``path`` if it exists; a file already gone (or not deletable) is left to the caller."""
    try:
        os.unlink(path)
    except OSError:
        pass
