"""What a loader's ``stats=`` keyword takes: off, on, a list of exporters, or a :class:`StatsConfig`."""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Optional

from ..errors import InvalidArgumentError

ENV = "SHARDSTREAM_STATS"  # "1" turns stats on for every loader built without stats=


@dataclasses.dataclass(frozen=True)
class StatsConfig:
    """Loader stats settings.

    ``window_s``: the sliding window of the windowed figures (seconds). ``exporters``: objects with
    ``export(report)`` (and optionally ``close()``), each called every ``exporter.every`` seconds
    (see :mod:`shardstream.stats.exporters`). ``stall_warning``: warn when the loop waited more than this
    fraction of the window's time (None: never), at most once per ``warn_every_s``, not before
    ``warmup_batches`` batches were handed out and ``warmup_s`` seconds went by.
    """

    window_s: float = 30.0
    exporters: tuple = ()
    stall_warning: Optional[float] = 0.2
    warn_every_s: float = 300.0
    warmup_batches: int = 20
    warmup_s: float = 5.0

    def __post_init__(self) -> None:
        if not isinstance(self.window_s, (int, float)) or isinstance(self.window_s, bool) or self.window_s <= 0:
            raise InvalidArgumentError(f"window_s={self.window_s!r} must be a number of seconds > 0")
        if self.stall_warning is not None and not (isinstance(self.stall_warning, (int, float))
                                                   and 0 < self.stall_warning < 1):
            raise InvalidArgumentError(
                f"stall_warning={self.stall_warning!r} must be a fraction of the time between 0 and 1 "
                "(0.2: warn when the loop waits more than a fifth of the time), or None for no warning")
        for name in ("warn_every_s", "warmup_s"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                raise InvalidArgumentError(f"{name}={value!r} must be a number of seconds >= 0")
        if isinstance(self.warmup_batches, bool) or not isinstance(self.warmup_batches, int) \
                or self.warmup_batches < 0:
            raise InvalidArgumentError(f"warmup_batches={self.warmup_batches!r} must be an int >= 0")
        exporters = tuple(self.exporters)
        for exp in exporters:
            if not callable(getattr(exp, "export", None)):
                raise InvalidArgumentError(
                    f"exporter {exp!r} has no export(report) method; use one of shardstream.stats.exporters "
                    "(LoggingExporter, JsonLinesExporter, TensorBoardExporter, PrometheusExporter)")
        object.__setattr__(self, "exporters", exporters)


def stats_config(value: Any) -> Optional[StatsConfig]:
    """The settings ``stats=value`` asks for, or None when stats are off (``SHARDSTREAM_STATS=1`` turns
    them on for ``stats=None``)."""
    if value is None:
        value = os.environ.get(ENV, "").strip().lower() in ("1", "true", "yes", "on")
    if value is False:
        return None
    if value is True:
        return StatsConfig()
    if isinstance(value, StatsConfig):
        return value
    if isinstance(value, (list, tuple)):
        return StatsConfig(exporters=tuple(value))
    raise InvalidArgumentError(
        f"stats={value!r} must be True, False, a list of exporters or a shardstream.stats.StatsConfig")
