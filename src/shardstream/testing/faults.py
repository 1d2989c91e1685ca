"""The failures the loopback servers inject, and what they served: the *rules*, apart from the servers
that apply them (:mod:`shardstream.testing.loopback`).

- :class:`Faults` is a schedule of failures (an error status, a connection reset mid-body, a stall, a short
  answer, corrupted bytes) keyed by a substring of the request path, a standing refusal of every request
  (a store that refuses the credentials), and counters of what was served.
- :func:`corrupted` is how a ``"corrupt"`` fault changes a body.

Standard library only. :class:`~shardstream.testing.loopback.RangeHTTPServer` and
:class:`~shardstream.testing.loopback.FaultProxy` can still be imported from here.
"""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass
from typing import Any

__all__ = ["FAULT_KINDS", "STATUS_KINDS", "Fault", "Faults", "corrupted"]

STATUS_KINDS = ("403", "404", "429", "500", "503")
FAULT_KINDS = (*STATUS_KINDS, "reset", "stall", "short", "corrupt")


@dataclass(frozen=True)
class Fault:
    """One queued failure: the first ``GET`` whose path contains ``match`` suffers ``kind``."""

    match: str
    kind: str
    stall_s: float = 5.0


class Faults:
    """A thread-safe schedule of injected failures and a record of what the server sent.

    ``add("shard.00003", "503", "reset")`` makes the next ``GET`` whose URL path contains
    ``shard.00003`` answer 503 and the one after that break off mid-body; other paths are served
    normally. Paths are matched and counted percent-decoded and without the query string (an S3
    listing, ``GET /bucket?list-type=2``, has the path ``/bucket``). Faults are consumed in the
    order they were added. Kinds:

    - ``"403"``, ``"404"``, ``"429"``, ``"500"``, ``"503"``: that status with a short text body (the file is not read);
    - ``"reset"``: status and full ``Content-Length``, half of the body, then a TCP reset;
    - ``"stall"``: status, headers and half of the body, a pause of ``stall_s`` seconds, then the rest;
    - ``"short"``: a well-formed but short answer: ``Content-Length`` and body are the first half of the
      body (headers such as ``Content-Range`` unchanged), then the connection closes; the client sees a
      complete response holding fewer bytes than it asked for;
    - ``"corrupt"``: the full body with its first, middle and last byte inverted.

    ``refuse("403")`` answers every request of any method (``HEAD`` and listings included) with that status
    until :meth:`clear`, as a store does that refuses the credentials. ``latency_s`` delays every ``GET``
    before its response, to mimic a remote store's time to first byte.
    """

    def __init__(self, latency_s: float = 0.0) -> None:
        self.latency_s = latency_s
        self._lock = threading.Lock()
        self._queue: list[Fault] = []
        self._refusal: tuple[str, str] | None = None
        self._hits: list[tuple[str, str]] = []
        self._requests: Counter[str] = Counter()
        self._ranges: list[tuple[str, str | None]] = []
        self._bytes = 0

    def add(self, match: str, *kinds: str, stall_s: float = 5.0) -> None:
        """Queue one fault per kind for the next ``GET`` requests whose path contains ``match``."""
        bad = [k for k in kinds if k not in FAULT_KINDS]
        if bad or not kinds:
            raise ValueError(f"fault kinds must be one or more of {FAULT_KINDS}, got {kinds!r}")
        with self._lock:
            self._queue.extend(Fault(match, kind, stall_s) for kind in kinds)

    def refuse(self, status: str = "403", match: str = "") -> None:
        """Answer every request (any method) whose path contains ``match`` with ``status`` until :meth:`clear`."""
        if status not in STATUS_KINDS:
            raise ValueError(f"a refusal is one of the statuses {STATUS_KINDS}, got {status!r}")
        with self._lock:
            self._refusal = (status, match)

    def pending(self) -> int:
        """Number of queued faults not yet consumed."""
        with self._lock:
            return len(self._queue)

    def clear(self) -> None:
        """Drop queued faults and the standing refusal, and reset every counter."""
        with self._lock:
            self._queue.clear()
            self._refusal = None
            self._hits.clear()
            self._requests.clear()
            self._ranges.clear()
            self._bytes = 0

    @property
    def hits(self) -> list[tuple[str, str]]:
        """``(kind, path)`` of every fault served so far (refusals too), in order."""
        with self._lock:
            return list(self._hits)

    @property
    def requests(self) -> Counter[str]:
        """Number of ``GET`` requests per decoded URL path (no query string), faulted ones included."""
        with self._lock:
            return Counter(self._requests)

    @property
    def ranges(self) -> list[tuple[str, str | None]]:
        """``(path, Range header or None)`` of every ``GET`` request, in order."""
        with self._lock:
            return list(self._ranges)

    @property
    def bytes_served(self) -> int:
        """Total body bytes written in answer to ``GET`` requests (partial bodies count what was sent)."""
        with self._lock:
            return self._bytes

    # -- what the servers call ---------------------------------------------------------------------------
    def refused(self, path: str) -> str | None:
        """The status a request for ``path`` (decoded, no query) is refused with, if a refusal stands."""
        with self._lock:
            if self._refusal is None or self._refusal[1] not in path:
                return None
            self._hits.append((self._refusal[0], path))
            return self._refusal[0]

    def on_get(self, path: str, byte_range: str | None = None) -> Fault | None:
        """Count a ``GET`` of ``path`` and take the first queued fault that matches it, if any."""
        with self._lock:
            self._requests[path] += 1
            self._ranges.append((path, byte_range))
            for i, fault in enumerate(self._queue):
                if fault.match in path:
                    del self._queue[i]
                    self._hits.append((fault.kind, path))
                    return fault
        return None

    def sent(self, n: int) -> None:
        """Count ``n`` body bytes written."""
        with self._lock:
            self._bytes += n


def corrupted(chunk: bytes, pos: int, length: int) -> bytes:
    """``chunk`` (at offset ``pos`` of a ``length``-byte body) with the body's first, middle and last byte inverted."""
    targets = [p - pos for p in {0, length // 2, length - 1} if pos <= p < pos + len(chunk)]
    if not targets:
        return chunk
    out = bytearray(chunk)
    for t in targets:
        out[t] ^= 0xFF
    return bytes(out)


def __getattr__(name: str) -> Any:  # the servers live in .loopback; imports from here keep working
    if name in ("RangeHTTPServer", "FaultProxy", "wait_until_answers"):
        from . import loopback

        return getattr(loopback, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
