"""``async def`` functions given to ``map`` and ``filter``: their coroutines are awaited, as HF ``datasets``
awaits them.

A stage calls the function on a group of rows (or on one batch), then awaits the coroutines of the group
together on its own event loop, so that functions waiting on I/O (an API, a remote model) overlap within a
group. The loop lives as long as the stage: an ``httpx.AsyncClient`` or ``aiohttp`` session the function
keeps between calls stays on one loop for the whole pass. It runs in whichever thread applies the function
(the loop's, a ``prefetch`` thread's, a DataLoader worker's), one group at a time.

A chain iterated inside a running event loop (a notebook cell, an ``async def`` training loop) cannot
run a second loop in that thread: that is refused with the fix (iterate it in a thread, or add
``prefetch(n)``, which runs the chain in its own thread).
"""

from __future__ import annotations

import asyncio
import inspect
import threading
import weakref
from typing import Any, Callable

from ..errors import InvalidArgumentError


def is_async(function: Callable) -> bool:
    """Whether calling ``function`` makes a coroutine (an ``async def`` function or ``__call__``)."""
    return inspect.iscoroutinefunction(function) or inspect.iscoroutinefunction(getattr(function, "__call__", None))


class Awaiter:
    """Awaits a group's coroutines on a loop of its own (see the module docstring)."""

    def __init__(self, op: str) -> None:
        self.op = op
        self.lock = threading.Lock()
        self.loop: Any = None
        self._closer: Any = None

    def outcomes(self, awaitables: list) -> list[tuple[bool, Any]]:
        """``(True, value)`` or ``(False, exception)`` for each of ``awaitables``, in order."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            pass
        else:
            for a in awaitables:
                close = getattr(a, "close", None)
                if close is not None:
                    close()  # never awaited: say nothing more about it
            raise InvalidArgumentError(
                f"the function given to {self.op} is async and the chain is iterated inside a running event loop, "
                "where its coroutines cannot be awaited; iterate the chain in a thread (await asyncio.to_thread("
                "list, chain), or a thread's loop), or add .prefetch(n) to the chain, which runs it in a thread")
        with self.lock:
            if self.loop is None:
                self.loop = asyncio.new_event_loop()
                self._closer = weakref.finalize(self, self.loop.close)
            return self.loop.run_until_complete(_gather(awaitables))

    def close(self) -> None:
        with self.lock:
            if self._closer is not None:
                self._closer()
            self.loop = self._closer = None


async def _gather(awaitables: list) -> list[tuple[bool, Any]]:
    async def one(a):
        try:
            return True, await a
        except Exception as exc:  # raised in the function: the stage names the row
            return False, exc
    return list(await asyncio.gather(*(one(a) for a in awaitables)))
