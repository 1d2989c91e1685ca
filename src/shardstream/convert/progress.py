"""Progress of a conversion: a one-line bar on a terminal, a plain line every ``every`` seconds otherwise.

Shows files and parts done of all, rows written, input bytes read of the total, the rate and the time left
(estimated from the bytes, the one total known before reading).
"""

from __future__ import annotations

import sys
import time
from typing import Optional, TextIO

from ..units import format_bytes


class Progress:
    """Counts what the workers report; ``enabled`` False (quiet) shows nothing."""

    def __init__(self, parts: int, total_bytes: int, files: int = 0, enabled: Optional[bool] = None,
                 stream: Optional[TextIO] = None, every: float = 10.0) -> None:
        self.stream = stream or sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.enabled = self.tty if enabled is None else enabled
        self.parts, self.total = parts, max(total_bytes, 1)
        self.done_parts, self.rows, self.bytes, self.files, self.done_files = 0, 0, 0, files, 0
        self.start = self.last = time.monotonic()
        self.every = 0.2 if self.tty else every

    def add(self, rows: int, nbytes: int, files: int = 0) -> None:
        self.rows += rows
        self.bytes += nbytes
        self.done_files += files
        self.show()

    def part_done(self) -> None:
        self.done_parts += 1
        self.show()

    def line(self) -> str:
        elapsed = max(time.monotonic() - self.start, 1e-9)
        rate = self.bytes / elapsed
        left = (self.total - self.bytes) / rate if rate > 0 else float("nan")
        eta = f"{left:.0f}s" if left == left else "?"
        pct = min(100.0, 100.0 * self.bytes / self.total)
        return (f"convert {pct:5.1f}% | files {self.done_files}/{self.files} | parts {self.done_parts}/{self.parts} | "
                f"{self.rows:,} rows | "
                f"{format_bytes(self.bytes)}/{format_bytes(self.total)} | {format_bytes(rate)}/s | {self.rows / elapsed:,.0f} "
                f"rows/s | eta {eta}")

    def show(self, force: bool = False) -> None:
        now = time.monotonic()
        if not self.enabled or (not force and now - self.last < self.every):
            return
        self.last = now
        if self.tty:
            self.stream.write("\r" + self.line())
        else:
            self.stream.write(self.line() + "\n")
        self.stream.flush()

    def close(self) -> None:
        if self.enabled:
            self.show(force=True)
            if self.tty:
                self.stream.write("\n")
                self.stream.flush()
