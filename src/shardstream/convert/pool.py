"""Worker processes for a conversion: fresh interpreters (``python -m shardstream.convert.worker``) fed one
part at a time over a pipe.

Fresh interpreters, not ``multiprocessing``: a script that calls ``shardstream.convert`` at its top
level, without an ``if __name__ == "__main__"`` guard, works as it is (spawned children would run it
again), and no process is forked from a driver that may hold Arrow's thread pools. The protocol is one
JSON line per message: the driver writes a job; the worker answers ``{"progress": [rows, bytes]}`` lines
and then ``{"done": result}`` or ``{"error": ...}`` (the exception, pickled, so a typed error keeps its
type). A worker exits when its input closes, or when the driver is gone (killed), within half a second.
"""

from __future__ import annotations

import base64
import json
import os
import pickle
import queue
import subprocess
import sys
import threading
from typing import Callable, Optional

from ..errors import WriterError


class WorkerPool:
    """``workers`` worker processes; :meth:`run` writes every job's part and returns their results in order."""

    def __init__(self, workers: int, on_progress: Callable[..., None],
                 on_done: Callable[[], None]) -> None:
        self.workers, self.on_progress, self.on_done = workers, on_progress, on_done
        self.events: queue.Queue = queue.Queue()
        self.procs: list[subprocess.Popen] = []

    def run(self, jobs: list[dict]) -> list[dict]:
        results: list[Optional[dict]] = [None] * len(jobs)
        todo = list(range(len(jobs)))[::-1]
        busy: dict[int, int] = {}  # worker -> job
        try:
            for w in range(min(self.workers, len(jobs))):
                self._start(w)
                busy[w] = todo.pop()
                self._send(w, jobs[busy[w]])
            while busy:
                w, message = self.events.get()
                if "progress" in message:
                    self.on_progress(*message["progress"])
                    continue
                if "done" not in message:
                    raise self._failure(w, busy.get(w), message, jobs)
                results[busy.pop(w)] = message["done"]
                self.on_done()
                if todo:
                    busy[w] = todo.pop()
                    self._send(w, jobs[busy[w]])
        finally:
            self.stop()
        return results  # type: ignore[return-value]

    def _start(self, w: int) -> None:
        package_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([package_root] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
        proc = subprocess.Popen([sys.executable, "-m", "shardstream.convert.worker"], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, env=env, text=True, bufsize=1)
        self.procs.append(proc)
        threading.Thread(target=self._read, args=(w, proc), daemon=True, name=f"shardstream-convert-{w}").start()

    def _read(self, w: int, proc: subprocess.Popen) -> None:
        for line in proc.stdout:
            try:
                self.events.put((w, json.loads(line)))
            except ValueError:
                continue
        self.events.put((w, {"exit": proc.wait()}))

    def _send(self, w: int, job: dict) -> None:
        proc = self.procs[w]
        proc.stdin.write(json.dumps(job) + "\n")
        proc.stdin.flush()

    def _failure(self, w: int, job: Optional[int], message: dict, jobs: list[dict]) -> BaseException:
        part = jobs[job]["part"] if job is not None else "?"
        if "error" in message:
            try:
                return pickle.loads(base64.b64decode(message["error"]["pickled"]))
            except Exception:
                return WriterError(f"writing {part} failed: {message['error']['text']}")
        return WriterError(f"the worker writing {part} exited with status {message.get('exit')} (killed, or out of "
                           "memory?); run the same conversion again to finish it")

    def stop(self) -> None:
        """End every worker (a part being written is left without an index, so the next run redoes it)."""
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
        for proc in self.procs:
            proc.wait()
            for stream in (proc.stdin, proc.stdout):
                try:
                    stream.close()
                except OSError:
                    pass


def run_jobs(jobs: list[dict], workers: int, on_progress: Callable[..., None],
             on_done: Callable[[], None]) -> list[dict]:
    return WorkerPool(workers, on_progress, on_done).run(jobs)
