"""Endpoints that fail below HTTP, for testing what a client does at open: :class:`SilentServer`
accepts TCP connections and never answers (a store that hangs), :class:`ClosedPort` is a port nothing
listens on (an unreachable endpoint). Standard library only; both bind 127.0.0.1."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
from typing import TYPE_CHECKING, Optional

if TYPE_CHECKING:
    from typing_extensions import Self

__all__ = ["ClosedPort", "SilentServer", "open_in_child"]


class SilentServer:
    """A TCP server on 127.0.0.1 that accepts every connection and never answers: a store that hangs.

    ``url`` is ``http://127.0.0.1:PORT``; ``accepted`` counts the connections taken. ``stop()`` closes
    them all and joins the accepting thread.
    """

    def __init__(self) -> None:
        self._sock: socket.socket | None = None
        self._thread: threading.Thread | None = None
        self._conns: list[socket.socket] = []
        self._lock = threading.Lock()

    @property
    def url(self) -> str:
        if self._sock is None:
            raise RuntimeError("SilentServer is not running; call start() or use it in a `with` block")
        return "http://127.0.0.1:%d" % self._sock.getsockname()[1]

    @property
    def accepted(self) -> int:
        with self._lock:
            return len(self._conns)

    def start(self) -> Self:
        if self._sock is None:
            self._sock = socket.create_server(("127.0.0.1", 0), backlog=128)
            self._sock.settimeout(0.05)
            self._thread = threading.Thread(target=self._accept, args=(self._sock,), name="SilentServer",
                                            daemon=True)
            self._thread.start()
        return self

    def _accept(self, sock: socket.socket) -> None:
        while True:
            try:
                conn, _ = sock.accept()
            except TimeoutError:
                continue
            except OSError:  # closed by stop()
                return
            with self._lock:
                self._conns.append(conn)

    def stop(self) -> None:
        sock, thread, self._sock, self._thread = self._sock, self._thread, None, None
        if sock is None or thread is None:
            return
        sock.close()
        thread.join()
        with self._lock:
            conns, self._conns = self._conns, []
        for conn in conns:
            conn.close()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class ClosedPort:
    """A port of 127.0.0.1 that refuses connections: bound (so nothing else takes it) and never listening.
    ``url`` is ``http://127.0.0.1:PORT``; a context manager that releases the port on exit."""

    def __init__(self) -> None:
        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))

    @property
    def url(self) -> str:
        return "http://127.0.0.1:%d" % self._sock.getsockname()[1]

    def close(self) -> None:
        self._sock.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


#: seconds an :func:`open_in_child` child may run: a hang guard, not a timing
OPEN_LIMIT_S = 90

_OPEN = """
import json, sys, time
from shardstream import StreamingDataset, load_dataset
from shardstream.errors import ShardstreamError
args = json.loads(sys.argv[1])
builder = args.pop("builder")
start = time.monotonic()
try:
    if builder:
        load_dataset(builder, **args)
    else:
        StreamingDataset(**args)
    out = {"error": None}
except Exception as exc:
    out = {"error": type(exc).__name__, "typed": isinstance(exc, ShardstreamError), "message": str(exc)}
out["seconds"] = time.monotonic() - start
print(json.dumps(out))
"""


def open_in_child(builder: Optional[str] = None, limit_s: float = OPEN_LIMIT_S, **kwargs) -> dict:
    """``StreamingDataset(**kwargs)``, or ``load_dataset(builder, **kwargs)``, opened in a fresh interpreter
    killed after ``limit_s`` seconds: ``{"error": the exception's class name or None, "typed": whether it is a
    ShardstreamError, "message", "seconds"}``. A child still opening at the limit raises ``AssertionError``,
    so that a regression that hangs fails a test instead of stalling the suite."""
    try:
        done = subprocess.run([sys.executable, "-c", _OPEN, json.dumps({"builder": builder, **kwargs})],
                              capture_output=True, text=True, timeout=limit_s)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"opening {kwargs} was still running after {limit_s} s") from None
    if done.returncode != 0:
        raise AssertionError(f"the child opening {kwargs} failed: {done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])
