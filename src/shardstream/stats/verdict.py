"""Does the loader keep up? One sentence from a stats report and the training step's time.

:func:`verdict` is a pure function of a report dict (``loader.stats()``, or the same dict read
back from JSON) and the step time the training loop takes: with a step time, whether the
loop waited for data more than a tolerated fraction of its time, and the slowest stage with
the knob to turn; without one, the step the loader sustains ("keeps up with any step longer
than 2.4 ms"). ``shardstream profile`` prints it under the stats table.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

from ..errors import InvalidArgumentError
from .report import advice, slowest

#: The loop may wait this fraction of its time and still count as kept up with.
TOLERANCE = 0.05


@dataclasses.dataclass(frozen=True)
class Verdict:
    """What :func:`verdict` concludes. ``keeps_up``: None without a step time. ``stall_fraction``: the loop's
    waits over its time between requests. ``batches_per_s``: the steady rate (after the first batch).
    ``sustainable_step_s``: the shortest step the loader keeps up with (None when nothing was delivered).
    ``bottleneck``: the slowest critical stage (None when nothing was timed); ``advice``: what to turn.
    ``text``: the sentence (also ``str(verdict)``)."""

    keeps_up: Optional[bool]
    step_s: Optional[float]
    stall_fraction: float
    batches_per_s: float
    sustainable_step_s: Optional[float]
    num_workers: int
    bottleneck: Optional[str]
    advice: Optional[str]
    text: str

    def __str__(self) -> str:
        return self.text


def _ms(seconds: float) -> str:
    ms = seconds * 1e3
    return f"{ms:.0f} ms" if ms >= 10 else f"{ms:.2g} ms" if ms >= 0.01 else f"{seconds * 1e6:.2g} us"


def _workers(n: int) -> str:
    return f"at {n} worker{'s' if n != 1 else ''}" if n else "with no worker processes"


def steady_rate(block: dict) -> float:
    """Batches per second after each pass's first batch (the time between the loop's requests), else the
    rate over all the time (which counts the workers' start)."""
    step = block["step_s"]["mean"]
    if step and step > 0:
        return 1.0 / step
    return float(block["batches_per_s"])


def verdict(report: dict, step_s: Optional[float] = None, *, tolerance: float = TOLERANCE,
            which: str = "total") -> Verdict:
    """Whether the loader of ``report`` keeps up with a training step of ``step_s`` seconds (None or 0:
    say which step it sustains), judged on ``report[which]`` (``"total"``: since the start, or
    ``"window"``). It keeps up when the loop waited at most ``tolerance`` of its time."""
    if step_s is not None and (isinstance(step_s, bool) or not isinstance(step_s, (int, float)) or step_s < 0):
        raise InvalidArgumentError(f"step_s={step_s!r} must be the training step's seconds (>= 0), or None")
    if not (isinstance(tolerance, (int, float)) and 0 <= tolerance < 1):
        raise InvalidArgumentError(f"tolerance={tolerance!r} must be a fraction of the time in [0, 1), e.g. 0.05")
    if which not in ("total", "window"):
        raise InvalidArgumentError(f"which={which!r} must be 'total' (since the start) or 'window'")
    block = report[which]
    workers = int(report.get("num_workers") or 0)
    stage = slowest(block, workers)
    hint = report.get("advice") if stage is not None and stage == report.get("slowest_stage") else None
    if stage is not None and hint is None:
        hint = advice(stage, None)
    stall = float(block["stall_fraction"])
    rate = steady_rate(block) if block["batches"] else 0.0
    sustainable = 1.0 / rate if rate > 0 else None
    step = float(step_s) if step_s else None
    keeps_up = None if step is None else stall <= tolerance
    text = _sentence(keeps_up, step, stall, rate, sustainable, workers, stage, hint)
    return Verdict(keeps_up, step, stall, rate, sustainable, workers, stage, hint, text)


def _sentence(keeps_up, step, stall, rate, sustainable, workers, stage, hint) -> str:
    where = _workers(workers)
    if sustainable is None:
        return f"delivered no batches {where}"
    if keeps_up is None:
        text = f"delivers {rate:,.1f} batches/s: keeps up with any step longer than {_ms(sustainable)} {where}"
        return text + (f"; the bottleneck is {stage}" if stage else "")
    if keeps_up:
        text = f"keeps up with a {_ms(step)} step {where} (the loop waited {stall:.1%} of the time)"
        return text + (f"; the bottleneck is {stage}" if stage else "")
    text = (f"does NOT keep up with a {_ms(step)} step {where}: the loop waited {stall:.0%} of the time "
            f"(a batch every {_ms(sustainable)})")
    if stage:
        text += f"; the slowest stage is {stage}: {hint}"
    return text
