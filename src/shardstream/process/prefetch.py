"""``prefetch(n)``: a reader's chain runs in a background thread, ``n`` items ahead of the loop.

The state must count what the loop consumed, not what the thread made: the thread notes
the key of every item it makes (under a lock, together with the chain's step), and the
loop drops it when it takes the item. A state is then the chain's state plus the keys of
the items made but not consumed, which a resume makes again and hands on first.
"""

from __future__ import annotations

import queue
import threading
from collections import deque
from typing import Any, Callable

_END = object()


class Prefetched:
    """Items of ``run`` (a :class:`~.run.Run`) made ``n`` ahead in a thread; ``convert`` each value."""

    def __init__(self, run, n: int, convert: Callable[[Any], Any]) -> None:
        self.run, self.convert = run, convert
        self.lock = threading.Lock()
        self.made: deque = deque()  # keys made and not yet consumed
        self.q: queue.Queue = queue.Queue(maxsize=max(int(n), 1))
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._produce, name="shardstream-prefetch", daemon=True)
        self.thread.start()

    def _produce(self) -> None:
        run, lock, made, q = self.run, self.lock, self.made, self.q
        try:
            while not self.stop.is_set():
                with lock:
                    try:
                        k, v = run.next()
                    except StopIteration:
                        break
                    made.append(k)
                while not self.stop.is_set():
                    try:
                        q.put(v, timeout=0.1)
                        break
                    except queue.Full:
                        continue
        except BaseException as exc:  # handed to the loop, raised there
            self._put(_Raised(exc))
            return
        self._put(_END)

    def _put(self, item) -> None:
        while not self.stop.is_set():
            try:
                self.q.put(item, timeout=0.1)
                return
            except queue.Full:
                continue

    def __iter__(self):
        return self

    def __next__(self) -> Any:
        v = self.q.get()
        if v is _END:
            self.q.put(_END)
            raise StopIteration
        if isinstance(v, _Raised):
            raise v.exc
        with self.lock:
            self.made.popleft()
        return self.convert(v)

    def state(self) -> dict:
        with self.lock:
            return self.run.state(list(self.made))

    def close(self) -> None:
        self.stop.set()
        self.thread.join(timeout=5)
        self.run.close()


class _Raised:
    def __init__(self, exc: BaseException) -> None:
        self.exc = exc
