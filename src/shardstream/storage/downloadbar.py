"""The progress of one big download: an fsspec callback that shows a :class:`~shardstream.progress.Progress`
once the file's size is known to be at least the fetcher's ``progress_from`` bytes.

fsspec's stores call ``set_size`` when a download starts (the size the server announces) and
``relative_update`` for each chunk received; a smaller file, or one of unknown size, costs nothing.
"""

from __future__ import annotations

from typing import Optional

from fsspec.callbacks import Callback

from ..progress import Progress
from ..units import format_bytes


class DownloadBar(Callback):
    """Shows the download of ``name`` when it is at least ``threshold`` bytes; ``show`` as
    :class:`~shardstream.progress.Progress`'s (None: on a terminal, or as ``SHARDSTREAM_PROGRESS`` says)."""

    def __init__(self, name: str, threshold: int, show: Optional[bool], size: Optional[int] = None) -> None:
        super().__init__()
        self.name, self.threshold, self.show = name, threshold, show
        self.progress: Optional[Progress] = None
        if size is not None:
            self.set_size(size)

    def set_size(self, size: Optional[int]) -> None:
        self.size = size
        if self.progress is None and size is not None and size >= self.threshold:
            self.progress = Progress(f"download {self.name}", size, "B", show=self.show)

    def relative_update(self, inc: int = 1) -> None:
        if self.progress is not None:
            self.progress.update(inc)

    def absolute_update(self, value: int) -> None:
        if self.progress is not None:
            self.progress.update(value - self.progress.done)

    def finish(self, got: int) -> None:
        """The download succeeded with ``got`` bytes: the summary line (for a big file only)."""
        p = self.progress
        if p is not None:
            p.update(got - p.done)
            p.finish(f"downloaded {self.name}: {format_bytes(got)} in {p.elapsed():.1f}s ({p.rate()})")

    def abandon(self) -> None:
        if self.progress is not None:
            self.progress.abandon()
