"""Advisory file locks that die with their holder.

``flock`` locks belong to an open file description: the kernel releases them when
the holder closes the file or dies (``kill -9`` included), so a crashed process
never blocks later runs and nothing needs cleaning up. Lock files are empty and
live in the cache directory, never in ``/tmp`` or in shared memory. Waiting polls with
a growing sleep so that every wait can be bounded.
"""

from __future__ import annotations

import os
import time
from typing import Optional

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None


class LockTimeout(TimeoutError):
    """A lock was not obtained within the allowed time."""


class FileLock:
    """A shared or exclusive ``flock`` on ``path`` (created if missing)."""

    __slots__ = ("path", "fd", "exclusive")

    def __init__(self, path: str) -> None:
        if fcntl is None:  # pragma: no cover
            from ..errors import NotYetSupportedError

            raise NotYetSupportedError("the shard cache needs POSIX file locks (Linux or macOS)")
        self.path = path
        self.fd: Optional[int] = None
        self.exclusive = False

    def _open(self) -> int:
        if self.fd is None:
            try:
                self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            except FileNotFoundError:
                os.makedirs(os.path.dirname(self.path), exist_ok=True)
                self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        return self.fd

    def try_acquire(self, exclusive: bool) -> bool:
        fd = self._open()
        try:
            fcntl.flock(fd, (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) | fcntl.LOCK_NB)
        except (BlockingIOError, PermissionError):
            return False
        self.exclusive = exclusive
        return True

    def acquire(self, exclusive: bool, timeout: Optional[float] = None) -> None:
        """Wait for the lock; raise :class:`LockTimeout` after ``timeout`` seconds (None: no limit)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        pause = 0.0005
        while not self.try_acquire(exclusive):
            if deadline is not None and time.monotonic() > deadline:
                raise LockTimeout(f"waited {timeout:g}s for {'an exclusive' if exclusive else 'a shared'} lock on "
                                  f"{self.path}")
            time.sleep(pause)
            pause = min(pause * 2, 0.05)

    def release(self) -> None:
        """Drop the lock and close the file (the lock file itself stays: deleting it would race)."""
        if self.fd is not None:
            os.close(self.fd)  # closing the description releases the flock
            self.fd = None
        self.exclusive = False

    def touch(self) -> None:
        """Record an access (the cache's least-recently-used order reads lock-file mtimes)."""
        if self.fd is not None:
            os.utime(self.fd)

    def __enter__(self) -> "FileLock":
        return self

    def __exit__(self, *exc) -> None:
        self.release()
