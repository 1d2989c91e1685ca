"""Batches moved to an accelerator ahead of the training loop (``StreamingDataLoader(device=...)``).

On CUDA, each batch's tensors are copied with ``non_blocking=True`` on a side stream, up to
``depth`` batches ahead of the one the loop holds. A batch is handed over once the loop's
current stream has been told to wait for its copies (``wait_event``), so the loop never
reads a tensor before it has arrived, and its tensors are recorded on that stream for the
caching allocator. The host batch is let go only then: a slot of a page-locked ring goes
back to its worker after the copy has run (see :mod:`.torchring`). On other devices the
move is synchronous.
"""

from __future__ import annotations

from collections import deque
from typing import Any, Iterator

import torch

from ..errors import InvalidArgumentError
from ..format.batch import Ragged


def move(batch: Any, device: torch.device, non_blocking: bool) -> Any:
    """``batch`` with every tensor on ``device`` (through dicts, lists, tuples and Ragged)."""
    if isinstance(batch, torch.Tensor):
        return batch.to(device, non_blocking=non_blocking)
    if isinstance(batch, dict):
        return {k: move(v, device, non_blocking) for k, v in batch.items()}
    if isinstance(batch, list):
        return [move(v, device, non_blocking) for v in batch]
    if isinstance(batch, tuple):
        moved = [move(v, device, non_blocking) for v in batch]
        return type(batch)(*moved) if hasattr(batch, "_fields") else tuple(moved)
    if isinstance(batch, Ragged):
        return Ragged(move(batch.values, device, non_blocking), move(batch.offsets, device, non_blocking),
                      batch.shapes)
    return batch


def _record(batch: Any, stream) -> None:
    """Mark every CUDA tensor of ``batch`` as used on ``stream`` (for the caching allocator)."""
    if isinstance(batch, torch.Tensor):
        if batch.is_cuda:
            batch.record_stream(stream)
    elif isinstance(batch, dict):
        for v in batch.values():
            _record(v, stream)
    elif isinstance(batch, (list, tuple)):
        for v in batch:
            _record(v, stream)
    elif isinstance(batch, Ragged):
        _record(batch.values, stream)
        _record(batch.offsets, stream)


class DevicePrefetcher:
    """Moves a loader's batches to ``device``, ``depth`` batches ahead (see the module docstring)."""

    def __init__(self, device, depth: int) -> None:
        try:
            self.device = torch.device(device)
        except (RuntimeError, TypeError) as e:
            raise InvalidArgumentError(f"device={device!r} is not a torch device: {e}") from None
        if isinstance(depth, bool) or not isinstance(depth, int) or depth < 1:
            raise InvalidArgumentError(f"device_prefetch={depth!r} must be an int >= 1 (batches copied ahead)")
        if self.device.type == "cuda" and not torch.cuda.is_available():
            raise InvalidArgumentError(f"device={device!r}: CUDA is not available in this process")
        self.depth = depth
        self.pins = self.device.type == "cuda"  # copies run ahead only from page-locked memory

    def __call__(self, batches: Iterator[Any]) -> Iterator[Any]:
        if self.device.type != "cuda":
            return (move(b, self.device, False) for b in batches)
        return self._ahead(batches)

    def _ahead(self, batches: Iterator[Any]) -> Iterator[Any]:
        stream = torch.cuda.Stream(self.device)
        queued: deque = deque()
        for host in batches:
            with torch.cuda.stream(stream):
                moved = move(host, self.device, True)
                event = torch.cuda.Event()
                event.record(stream)
            queued.append((moved, host, event))
            if len(queued) > self.depth:
                yield self._hand(queued)
        while queued:
            yield self._hand(queued)

    def _hand(self, queued: deque) -> Any:
        moved, host, event = queued.popleft()
        current = torch.cuda.current_stream(self.device)
        current.wait_event(event)
        _record(moved, current)
        del host  # a pinned ring slot's release now waits on the current stream, which waits on the copy
        return moved
