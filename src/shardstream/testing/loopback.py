"""Loopback servers that misbehave on request, for testing and benchmarking storage code; what they
do wrong is a :class:`~shardstream.testing.faults.Faults` schedule (:mod:`shardstream.testing.faults`).

- :class:`RangeHTTPServer` serves a local directory over HTTP/1.1 with ``Range`` and ``HEAD``
  support, the way object stores and CDNs serve shards.
- :class:`FaultProxy` is a reverse proxy that forwards every request to another server (for example
  the moto S3 server) and applies a :class:`~shardstream.testing.faults.Faults` schedule to its answers.

A store that hangs or cannot be reached is :mod:`shardstream.testing.unreachable`.

Standard library only. Every server binds an ephemeral port on 127.0.0.1, is a context manager,
and joins all of its threads when stopped.
"""

from __future__ import annotations

import email.utils
import http.client
import os
import socket
import struct
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlsplit

from .faults import STATUS_KINDS, Fault, Faults, corrupted

if TYPE_CHECKING:
    from typing_extensions import Self

__all__ = ["FaultProxy", "RangeHTTPServer", "wait_until_answers"]

_HOP_BY_HOP = frozenset({"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer",
                         "trailers", "transfer-encoding", "upgrade", "expect", "content-length", "server", "date"})
_CHUNK = 1 << 20


def wait_until_answers(url: str, timeout_s: float, what: str, alive: Callable[[], bool] = lambda: True) -> None:
    """Block until something accepts TCP connections at ``url``'s host and port.

    Raises ``RuntimeError`` naming ``what`` if ``alive()`` turns false or ``timeout_s`` passes.
    """
    parts = urlsplit(url)
    deadline = time.monotonic() + timeout_s
    while True:
        if not alive():
            raise RuntimeError(f"{what} exited before answering at {url}")
        try:
            with socket.create_connection((parts.hostname, parts.port), timeout=1.0):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{what} did not answer at {url} within {timeout_s:.0f} s; "
                                   "raise timeout_s if the machine is slow") from None
            time.sleep(0.05)


class _Httpd(ThreadingHTTPServer):
    """A ThreadingHTTPServer that joins its handler threads and can abort open connections."""

    daemon_threads = False
    block_on_close = True
    request_queue_size = 1024  # clients such as fsspec open hundreds of connections at once

    def __init__(self, handler: type[BaseHTTPRequestHandler], owner: _LoopbackHTTP) -> None:
        super().__init__(("127.0.0.1", 0), handler)
        self.owner = owner
        self.closing = threading.Event()
        self._conns: set[socket.socket] = set()
        self._conns_lock = threading.Lock()

    def track(self, conn: socket.socket, add: bool) -> None:
        with self._conns_lock:
            (self._conns.add if add else self._conns.discard)(conn)

    def abort_connections(self) -> None:
        with self._conns_lock:
            conns = list(self._conns)
        for conn in conns:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def handle_error(self, request: Any, client_address: Any) -> None:
        # Clients hanging up (or being cut off by a fault or by stop()) are expected, not worth a traceback.
        if isinstance(sys.exc_info()[1], OSError) or self.closing.is_set():
            return
        super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    """Shared request plumbing: keep-alive, quiet logs, and fault-aware response writing."""

    protocol_version = "HTTP/1.1"
    timeout = 120  # seconds an idle keep-alive connection is kept
    server: _Httpd

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def setup(self) -> None:
        super().setup()
        self.server.track(self.connection, True)

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            self.server.track(self.connection, False)

    def _begin_get(self) -> Fault | None:
        faults = self.server.owner.faults
        fault = faults.on_get(unquote(urlsplit(self.path).path), self.headers.get("Range"))
        if faults.latency_s > 0:
            self.server.closing.wait(faults.latency_s)
        return fault

    def _send_plain(self, status: int, text: str, headers: Iterable[tuple[str, str]] = ()) -> None:
        body = text.encode()
        self._send(status, [("Content-Type", "text/plain; charset=utf-8"), *headers], len(body), [body], None,
                   body=self.command != "HEAD")

    def _send_status_fault(self, fault: Fault) -> None:
        self._send_plain(int(fault.kind), f"injected fault {fault.kind} for {urlsplit(self.path).path}\n")

    def _refused(self) -> bool:
        """Answer with the standing refusal of :meth:`Faults.refuse`, if one covers this path."""
        status = self.server.owner.faults.refused(unquote(urlsplit(self.path).path))
        if status is None:
            return False
        self._send_plain(int(status), f"refused with {status} for {urlsplit(self.path).path}\n")
        return True

    def _send(self, status: int, headers: Iterable[tuple[str, str]], length: int, chunks: Iterable[bytes],
              fault: Fault | None, body: bool = True) -> None:
        """Send a response of ``length`` body bytes taken from ``chunks``, applying ``fault``."""
        if fault is not None and fault.kind in STATUS_KINDS:
            self._send_status_fault(fault)
            return
        kind = fault.kind if fault is not None else None
        if kind == "short":  # a well-formed answer that holds the first half of the body only
            length, chunks = length // 2, _first(chunks, length // 2)
            self.close_connection = True
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, value)
        if status >= 200 and status not in (204, 304):
            self.send_header("Content-Length", str(length))
        self.end_headers()
        if not body:
            return
        cut = length // 2 if kind in ("reset", "stall") else None
        pos = 0
        for chunk in chunks:
            if kind == "corrupt":
                chunk = corrupted(chunk, pos, length)
            if cut is not None and pos + len(chunk) >= cut:
                self._write(chunk[:cut - pos])
                chunk, pos, cut = chunk[cut - pos:], cut, None
                if not self._interrupt(fault):
                    return
            self._write(chunk)
            pos += len(chunk)
        if cut is not None:  # empty body
            self._interrupt(fault)

    def _write(self, data: bytes) -> None:
        if data:
            self.wfile.write(data)
            self.server.owner.faults.sent(len(data))

    def _interrupt(self, fault: Fault | None) -> bool:
        """Reset the connection or stall; True when the rest of the body should still be sent."""
        if fault is not None and fault.kind == "stall" and not self.server.closing.wait(fault.stall_s):
            return True
        # Abortive close: SO_LINGER 0 makes close() send RST instead of FIN.
        self.close_connection = True
        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.rfile.close()
        self.connection.close()
        return False


def _first(chunks: Iterable[bytes], n: int) -> Iterator[bytes]:
    """The first ``n`` bytes of ``chunks``."""
    for chunk in chunks:
        if n <= 0:
            return
        yield chunk[:n]
        n -= len(chunk)


class _LoopbackHTTP:
    """Base of the in-process servers: start/stop, ``url``, context manager."""

    _handler: type[_Handler]

    def __init__(self, faults: Faults | None, timeout_s: float) -> None:
        self.faults = faults if faults is not None else Faults()
        self.timeout_s = timeout_s
        self._httpd: _Httpd | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        """Base URL, ``http://127.0.0.1:PORT``."""
        if self._httpd is None:
            raise RuntimeError(f"{type(self).__name__} is not running; call start() or use it in a `with` block")
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> Self:
        """Bind an ephemeral port, serve in a background thread and return once it accepts connections."""
        if self._httpd is None:
            self._httpd = _Httpd(self._handler, self)
            self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                            name=f"{type(self).__name__}-{self.url}", daemon=True)
            self._thread.start()
            wait_until_answers(self.url, self.timeout_s, type(self).__name__)
        return self

    def stop(self) -> None:
        """Stop serving, cut open connections (stalled responses included) and join every thread."""
        httpd, thread = self._httpd, self._thread
        if httpd is None or thread is None:
            return
        httpd.closing.set()
        httpd.shutdown()
        httpd.abort_connections()
        httpd.server_close()  # joins the handler threads
        thread.join()
        self._httpd = self._thread = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _parse_range(header: str, size: int) -> tuple[int, int] | None | bool:
    """``(start, end_exclusive)`` for a single ``bytes=`` range, None if unsatisfiable, False to ignore it."""
    unit, _, spec = header.partition("=")
    if unit.strip().lower() != "bytes" or "," in spec:
        return False  # other units and multi-range requests: answer with the whole file
    first, dash, last = spec.strip().partition("-")
    try:
        if not dash or (not first and not last):
            return False
        if not first:  # suffix range: the last N bytes
            n = int(last)
            return (max(0, size - n), size) if n > 0 and size > 0 else None
        start = int(first)
        end = int(last) + 1 if last else size
    except ValueError:
        return False
    if last and start >= end:
        return False  # "bytes=9-3" is malformed
    return (start, min(end, size)) if start < size else None


def _file_chunks(path: str, start: int, end: int) -> Iterator[bytes]:
    with open(path, "rb") as f:
        f.seek(start)
        left = end - start
        while left > 0:
            chunk = f.read(min(_CHUNK, left))
            if not chunk:
                return
            left -= len(chunk)
            yield chunk


class _FileHandler(_Handler):
    server: _Httpd

    def do_HEAD(self) -> None:
        self._serve(body=False)

    def do_GET(self) -> None:
        self._serve(body=True)

    def _serve(self, body: bool) -> None:
        if self._refused():
            return
        fault = self._begin_get() if body else None
        if fault is not None and fault.kind in STATUS_KINDS:
            self._send_status_fault(fault)
            return
        root = self.server.owner.root
        rel = unquote(urlsplit(self.path).path).lstrip("/")
        path = os.path.realpath(os.path.join(root, rel))
        if not path.startswith(root + os.sep) or not os.path.isfile(path):
            self._send_plain(404, f"not found: /{rel}\n")
            return
        st = os.stat(path)
        size = st.st_size
        headers = [("Content-Type", "application/octet-stream"), ("Accept-Ranges", "bytes"),
                   ("Last-Modified", email.utils.formatdate(st.st_mtime, usegmt=True)),
                   ("ETag", f'"{st.st_mtime_ns:x}-{size:x}"')]
        rng = _parse_range(self.headers.get("Range", ""), size) if self.headers.get("Range") else False
        if rng is None:
            self._send_plain(416, f"range {self.headers['Range']} is outside the {size}-byte file\n",
                             [("Content-Range", f"bytes */{size}")])
            return
        status, (start, end) = (206, rng) if rng else (200, (0, size))
        if status == 206:
            headers.append(("Content-Range", f"bytes {start}-{end - 1}/{size}"))
        self._send(status, headers, end - start, _file_chunks(path, start, end) if body else (), fault, body)


class RangeHTTPServer(_LoopbackHTTP):
    """Serve the files under ``root`` at ``http://127.0.0.1:PORT/<relative path>``.

    Answers ``GET`` (whole file, or one ``Range: bytes=a-b`` / ``a-`` / ``-n`` range with 206 and
    ``Content-Range``; 416 when the range starts past the end) and ``HEAD`` (``Content-Length``,
    ``Accept-Ranges``), 404 for anything that is not a file under ``root``. No directory listings.
    ``faults`` applies to ``GET``: 500/503 are answered before the file is looked up; the body faults
    apply to whatever body is sent. A standing refusal (``faults.refuse``) answers ``HEAD`` too.

        with RangeHTTPServer(tmp_path) as srv:
            srv.faults.add("shard.00000.mds", "reset")
            data = fsspec.filesystem("http").cat_file(f"{srv.url}/shard.00000.mds")
    """

    _handler = _FileHandler

    def __init__(self, root: str | os.PathLike[str], faults: Faults | None = None, timeout_s: float = 10.0) -> None:
        super().__init__(faults, timeout_s)
        self.root = os.path.realpath(os.fspath(root))
        if not os.path.isdir(self.root):
            raise NotADirectoryError(f"RangeHTTPServer root {self.root!r} is not a directory; create it first")


class _ProxyHandler(_Handler):
    server: _Httpd

    def do_GET(self) -> None:
        self._forward()

    do_HEAD = do_PUT = do_POST = do_DELETE = do_PATCH = do_OPTIONS = do_GET

    def _read_body(self) -> bytes | None:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            parts = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass  # trailers
                    return b"".join(parts)
                parts.append(self.rfile.read(size))
                self.rfile.readline()
        length = self.headers.get("Content-Length")
        return self.rfile.read(int(length)) if length is not None else None

    def _forward(self) -> None:
        owner: FaultProxy = self.server.owner  # type: ignore[assignment]
        request_body = self._read_body()
        if self._refused():
            return
        fault = self._begin_get() if self.command == "GET" else None
        if fault is not None and fault.kind in STATUS_KINDS:
            self._send_status_fault(fault)
            return
        up = urlsplit(owner.upstream)
        conn = http.client.HTTPConnection(up.hostname, up.port, timeout=owner.upstream_timeout_s)
        try:
            conn.putrequest(self.command, up.path.rstrip("/") + self.path, skip_host=True, skip_accept_encoding=True)
            for name, value in self.headers.items():
                if name.lower() not in _HOP_BY_HOP:
                    conn.putheader(name, value)  # Host included: signatures and path-style S3 keep working
            if request_body is not None:
                conn.putheader("Content-Length", str(len(request_body)))
            conn.endheaders(request_body)
            resp = conn.getresponse()
            data = resp.read()
            headers = [(k, v) for k, v in resp.getheaders() if k.lower() not in _HOP_BY_HOP]
            length = int(resp.getheader("Content-Length") or 0) if self.command == "HEAD" else len(data)
        except OSError as exc:
            self._send_plain(502, f"FaultProxy could not reach {owner.upstream}: {exc}\n")
            return
        finally:
            conn.close()
        self._send(resp.status, headers, length, [data], fault, body=self.command != "HEAD")


class FaultProxy(_LoopbackHTTP):
    """A reverse proxy on 127.0.0.1 that forwards every request to ``upstream`` and injects faults.

    Any method, path, query, header (``Host`` included) and body is passed through; hop-by-hop
    headers are dropped and bodies are re-framed with ``Content-Length``. ``faults`` applies to
    ``GET`` responses whose path (query excluded) matches, and its standing refusal to every request.
    Responses are buffered whole, so keep
    objects to a size that fits in memory.

    ``storage_options_for(url)``, when given, builds the fsspec options that route a client through
    the proxy; they are then available as :attr:`storage_options`.
    """

    _handler = _ProxyHandler

    def __init__(self, upstream: str, faults: Faults | None = None, timeout_s: float = 10.0,
                 upstream_timeout_s: float = 60.0,
                 storage_options_for: Callable[[str], dict[str, Any]] | None = None) -> None:
        super().__init__(faults, timeout_s)
        if urlsplit(upstream).scheme != "http":
            raise ValueError(f"FaultProxy forwards plain HTTP only; got upstream {upstream!r} (use http://host:port)")
        self.upstream = upstream
        self.upstream_timeout_s = upstream_timeout_s
        self._storage_options_for = storage_options_for

    @property
    def storage_options(self) -> dict[str, Any]:
        """fsspec options that send a client's traffic through this proxy."""
        if self._storage_options_for is None:
            raise RuntimeError("this FaultProxy was built without storage_options_for; "
                               "create it with S3Server.proxy() or GCSServer.proxy()")
        return self._storage_options_for(self.url)

