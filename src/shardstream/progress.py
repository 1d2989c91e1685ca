"""Progress of long operations (verify, convert, indexing a big text file, a big download): a bar on a
terminal, nothing otherwise, and a one-line summary at the end.

One :class:`Progress` per operation. Whether its bar is shown: ``show=True`` / ``False`` decides; with
``show=None`` the environment variable ``SHARDSTREAM_PROGRESS`` does (``1`` forces the bar, ``0`` silences
it), else whether the output stream is a terminal. On a terminal the bar is tqdm's when tqdm is installed
(``pip install shardstream[progress]``), else a plain one-line bar of our own redrawn with ``\\r``; when
forced onto something else (a log file, a pipe) it is a plain line every :data:`LINE_EVERY` seconds.

:meth:`Progress.finish` ends the operation with one line (what was done, how long, the rate): printed
under the bar when it is shown, and always logged at INFO on the ``shardstream`` logger. Updates are
counted in every case (the summary needs them) but drawn at most every :data:`TTY_EVERY` seconds, so
an update costs a clock read and a comparison. Standard library only: every layer may use it.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from typing import Any, Optional, TextIO

from .errors import InvalidArgumentError
from .units import format_bytes

LOG = logging.getLogger("shardstream")
ENV = "SHARDSTREAM_PROGRESS"
TTY_EVERY = 0.2  # seconds between two redraws of a bar on a terminal
LINE_EVERY = 10.0  # seconds between two progress lines when forced onto a file or a pipe
_ON, _OFF = ("1", "true", "yes", "on"), ("0", "false", "no", "off", "")


def forced() -> Optional[bool]:
    """What ``SHARDSTREAM_PROGRESS`` says: True (show bars), False (never), None (unset: on a terminal only)."""
    value = os.environ.get(ENV)
    if value is None:
        return None
    if value.strip().lower() in _ON:
        return True
    if value.strip().lower() in _OFF:
        return False
    raise InvalidArgumentError(f"{ENV}={value!r} is not understood; set it to 1 (always show progress bars), "
                               f"0 (never) or unset it (on a terminal only)")


def is_tty(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):  # no isatty, or a closed stream
        return False


def human(value: float, unit: str) -> str:
    """``value`` in ``unit``: bytes (``unit == "B"``) in KiB, MiB, ...; other units as a plain count."""
    if unit == "B":
        return format_bytes(value)
    text = f"{value:,.0f}" if value >= 100 or value == int(value) else f"{value:,.1f}"
    return f"{text} {unit}".rstrip()


class Progress:
    """One long operation: ``what`` it does (the bar's label), its ``total`` in ``unit`` (None: unknown).

    :meth:`update` counts what was done; :meth:`finish` ends it with the summary line, :meth:`abandon`
    (an error) ends the bar without one. A subclass may override :meth:`status` (text after the bar) and
    :meth:`summary`. Also a context manager: a clean exit finishes, an exception abandons."""

    def __init__(self, what: str, total: Optional[float] = None, unit: str = "", show: Optional[bool] = None,
                 stream: Optional[TextIO] = None, every: Optional[float] = None) -> None:
        self.what, self.total, self.unit = what, total, unit
        self.stream = stream if stream is not None else sys.stderr
        self.tty = is_tty(self.stream)
        if show is None:
            show = forced()
        self.shown = self.tty if show is None else bool(show)
        self.every = every if every is not None else (TTY_EVERY if self.tty else LINE_EVERY)
        self.done: float = 0
        self.start = time.monotonic()
        self.due = self.start + self.every
        self.ended: Optional[float] = None  # when it finished or was abandoned
        self.bar: Any = open_bar(self) if self.shown else None

    def update(self, n: float = 1) -> None:
        """``n`` more units done; the bar is redrawn when it is due."""
        self.done += n
        if self.bar is not None and time.monotonic() >= self.due:
            self.draw()

    def draw(self) -> None:
        self.due = time.monotonic() + self.every
        self.bar.draw(self)

    def elapsed(self) -> float:
        """Seconds from the start to now, or to the end once ended."""
        return max((self.ended or time.monotonic()) - self.start, 1e-9)

    def rate(self) -> str:
        return f"{human(self.done / self.elapsed(), self.unit)}/s"

    def status(self) -> str:
        """Text shown after the bar (a subclass adds its own counts)."""
        return ""

    def line(self) -> str:
        """The bar as one line of text (when tqdm does not draw it)."""
        width, scaled = 30, self.unit == "B"
        done = format_bytes(self.done) if scaled else f"{self.done:,.0f}"
        unit = "" if scaled else " " + self.unit
        if self.total:
            filled = int(width * min(self.done / self.total, 1.0))
            total = format_bytes(self.total) if scaled else f"{self.total:,.0f}"
            speed = self.done / self.elapsed()
            eta = f" eta {(self.total - self.done) / speed:.0f}s" if 0 < speed and self.done < self.total else ""
            text = f"{self.what} [{'#' * filled}{'.' * (width - filled)}] {done}/{total}{unit} {self.rate()}{eta}"
        else:
            text = f"{self.what} {done}{unit} {self.rate()}"
        status = self.status()
        return f"{text} | {status}" if status else text

    def summary(self) -> str:
        """The line that ends the operation: what was done, how long it took, the rate."""
        return f"{self.what}: {human(self.done, self.unit)} in {self.elapsed():.1f}s ({self.rate()})"

    def finish(self, summary: Optional[str] = None) -> str:
        """End the operation: the bar's last state, then ``summary`` (default :meth:`summary`) under it when
        shown; the summary is logged at INFO (logger ``shardstream``) in every case. Returns it."""
        already = self.ended is not None
        self.ended = self.ended or time.monotonic()
        text = summary if summary is not None else self.summary()
        if already:
            return text
        if self.bar is not None:
            self.bar.close(self)
            self.stream.write(text + "\n")
            self.stream.flush()
        LOG.info("%s", text)
        return text

    def abandon(self) -> None:
        """End the bar without a summary (the operation failed; its error says why)."""
        if self.ended is None:
            self.ended = time.monotonic()
            if self.bar is not None:
                self.bar.close(self)

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, kind, exc, tb) -> None:
        if kind is None:
            self.finish()
        else:
            self.abandon()


def open_bar(progress: Progress) -> Any:
    """tqdm's bar on a terminal when tqdm is installed, else :class:`TextBar`."""
    if progress.tty:
        try:
            from tqdm import tqdm
        except ImportError:
            pass
        else:
            return TqdmBar(tqdm, progress)
    return TextBar()


class TqdmBar:
    """A :class:`Progress` drawn by tqdm (redrawn only when the progress says it is due)."""

    def __init__(self, tqdm: Any, progress: Progress) -> None:
        scaled = progress.unit == "B"
        self.bar = tqdm(total=progress.total, desc=progress.what, unit=progress.unit or "it", unit_scale=scaled,
                        unit_divisor=1024 if scaled else 1000, file=progress.stream, mininterval=0, miniters=1,
                        leave=True, dynamic_ncols=True)

    def draw(self, progress: Progress) -> None:
        status = progress.status()
        if status:
            self.bar.set_postfix_str(status, refresh=False)
        self.bar.update(progress.done - self.bar.n)

    def close(self, progress: Progress) -> None:
        self.draw(progress)
        self.bar.close()


class TextBar:
    """Our own bar: one line redrawn with ``\\r`` on a terminal, a line per redraw elsewhere."""

    def draw(self, p: Progress) -> None:
        p.stream.write(("\r" + p.line()) if p.tty else (p.line() + "\n"))
        p.stream.flush()

    def close(self, p: Progress) -> None:
        self.draw(p)
        if p.tty:
            p.stream.write("\n")
            p.stream.flush()
