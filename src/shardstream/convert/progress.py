"""Progress of a conversion: files and parts done of all, rows written, input bytes read of the total, the
rate and the time left (estimated from the bytes, the one total known before reading).

A :class:`shardstream.progress.Progress` over the input bytes: a bar on a terminal, a plain line every
few seconds when forced elsewhere, nothing when quiet; the summary line at the end is logged too.
"""

from __future__ import annotations

from typing import Optional, TextIO

from ..progress import Progress as OperationProgress
from ..units import format_bytes


class Progress(OperationProgress):
    """Counts what the workers report; ``enabled``: True / False, None for a terminal only (or as
    ``SHARDSTREAM_PROGRESS`` says)."""

    def __init__(self, parts: int, total_bytes: int, files: int = 0, enabled: Optional[bool] = None,
                 stream: Optional[TextIO] = None, every: Optional[float] = None) -> None:
        self.parts, self.done_parts, self.rows, self.files, self.done_files = parts, 0, 0, files, 0
        super().__init__("convert", max(total_bytes, 1), "B", show=enabled, stream=stream, every=every)

    @property
    def enabled(self) -> bool:
        return self.shown

    @property
    def bytes(self) -> int:
        return int(self.done)

    def add(self, rows: int, nbytes: int, files: int = 0) -> None:
        self.rows += rows
        self.done_files += files
        self.update(nbytes)

    def part_done(self) -> None:
        self.done_parts += 1
        self.update(0)

    def status(self) -> str:
        return f"files {self.done_files}/{self.files} | parts {self.done_parts}/{self.parts} | {self.rows:,} rows"

    def line(self) -> str:
        elapsed = self.elapsed()
        rate = self.done / elapsed
        left = (self.total - self.done) / rate if rate > 0 else float("nan")
        eta = f"{left:.0f}s" if left == left else "?"
        pct = min(100.0, 100.0 * self.done / self.total)
        return (f"convert {pct:5.1f}% | {self.status()} | {format_bytes(self.bytes)}/{format_bytes(self.total)} | "
                f"{format_bytes(rate)}/s | {self.rows / elapsed:,.0f} rows/s | eta {eta}")

    def summary(self) -> str:
        return (f"convert: {self.done_parts} of {self.parts} parts, {self.rows:,} rows, {format_bytes(self.bytes)} "
                f"read in {self.elapsed():.1f}s ({format_bytes(self.done / self.elapsed())}/s, "
                f"{self.rows / self.elapsed():,.0f} rows/s)")

    def close(self) -> None:
        self.finish()
