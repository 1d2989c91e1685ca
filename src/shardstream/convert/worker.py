"""A conversion's worker process: ``python -m shardstream.convert.worker``, driven by :mod:`.pool` over a pipe.

Kept out of the package's imports, so that running it as ``__main__`` imports it once.
"""

from __future__ import annotations

import base64
import json
import os
import pickle
import sys
import threading
from typing import Callable

from ..errors import WriterError
from .work import convert_part, init_worker


def _serve() -> None:
    """The worker's loop: jobs in on stdin, messages out on what was stdout (stdout itself goes to stderr,
    so nothing a library prints can garble the protocol)."""
    out = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    lock = threading.Lock()

    def send(message: dict) -> None:
        with lock:
            out.write(json.dumps(message) + "\n")

    init_worker(_Progress(send), watch_parent=True)
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            send({"done": convert_part(json.loads(line))})
        except Exception as exc:
            send({"error": {"text": f"{type(exc).__name__}: {exc}", "pickled": _pickled(exc)}})


class _Progress:
    def __init__(self, send: Callable[[dict], None]) -> None:
        self.send = send

    def put(self, message: tuple) -> None:
        self.send({"progress": list(message[2:])})


def _pickled(exc: BaseException) -> str:
    try:
        data = pickle.dumps(exc)
        pickle.loads(data)
    except Exception:
        data = pickle.dumps(WriterError(f"{type(exc).__name__}: {exc}"))
    return base64.b64encode(data).decode("ascii")


if __name__ == "__main__":
    _serve()
