"""DataLoader workers die with their rank process: a SIGKILLed rank leaves nothing running."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

from shardstream import MDSWriter

pytest.importorskip("torch")

CHILD = textwrap.dedent("""
    import sys, time
    import torch
    from shardstream import StreamingDataset, StreamingDataLoader
    ds = StreamingDataset(local=sys.argv[1], shuffle=True, batch_size=64)
    loader = StreamingDataLoader(ds, batch_size=64, num_workers=2, prefetch_factor=4,
                                 multiprocessing_context=sys.argv[2], batch_decode=sys.argv[3] == "1")
    it = iter(loader)
    next(it)
    print("READY", flush=True)
    time.sleep(600)  # the workers fill their queues while the rank sleeps, then it is killed
""")

STARTING = textwrap.dedent("""
    import sys, time
    import torch
    from shardstream import StreamingDataset, StreamingDataLoader
    ds = StreamingDataset(local=sys.argv[1], shuffle=True, batch_size=64)
    loader = StreamingDataLoader(ds, batch_size=64, num_workers=2, multiprocessing_context="spawn")
    it = iter(loader)  # the workers are started, and are still importing torch when the rank is killed
    print("READY", flush=True)
    time.sleep(600)
""")


def _children(pid: int) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid and fields[0] != "Z":
            out.append(int(entry))
    return out


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _kill_rank(proc, workers: list[int], wait_s: float) -> list[int]:
    """SIGKILL the rank; the workers still alive ``wait_s`` seconds later."""
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline and any(_alive(w) for w in workers):
        time.sleep(0.1)
    return [w for w in workers if _alive(w)]


def _clean_up(proc, workers: list[int]) -> None:
    if proc.poll() is None:
        proc.kill()
    for w in workers:
        try:
            os.kill(w, signal.SIGKILL)
        except OSError:
            pass


@pytest.fixture(scope="module")
def big_samples(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("orphans") / "ds")
    # more samples than the workers may run ahead (prefetch_factor bundles of up to 16 batches each), so
    # that neither worker ends its share, and leaves, while the rank sleeps
    with MDSWriter(out=out, columns={"id": "int", "x": "ndarray:uint8:1024"}, size_limit=1 << 20) as w:
        for i in range(16000):
            w.write({"id": i, "x": np.full(1024, i % 251, np.uint8)})
    return out


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the parent-death signal is Linux only")
@pytest.mark.parametrize("context,batch", [("fork", "1"), ("spawn", "0")])
def test_workers_die_with_a_killed_rank(big_samples, context, batch):
    proc = subprocess.Popen([sys.executable, "-c", CHILD, big_samples, context, batch],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    workers: list[int] = []
    try:
        deadline = time.monotonic() + 60
        line = proc.stdout.readline()
        assert line.strip() == "READY", proc.stderr.read() if proc.poll() is not None else line
        while time.monotonic() < deadline:
            workers = [p for p in _children(proc.pid)
                       if "resource_tracker" not in open(f"/proc/{p}/cmdline").read()]
            if len(workers) >= 2:
                break
            time.sleep(0.1)
        assert len(workers) >= 2, "the DataLoader workers were not found"
        time.sleep(1.0)  # let the workers fill the pipe to the rank
        assert not _kill_rank(proc, workers, 15), "workers outlived their killed rank"
    finally:
        _clean_up(proc, workers)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the parent-death signal is Linux only")
def test_workers_die_with_a_rank_killed_while_they_start(big_samples):
    """A spawned worker whose rank dies before the worker's first task still leaves: the process that
    started it is not its parent any more, whatever pid init or a subreaper has."""
    proc = subprocess.Popen([sys.executable, "-c", STARTING, big_samples],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    workers: list[int] = []
    try:
        line = proc.stdout.readline()
        assert line.strip() == "READY", proc.stderr.read() if proc.poll() is not None else line
        workers = [p for p in _children(proc.pid) if "spawn_main" in open(f"/proc/{p}/cmdline").read()]
        assert len(workers) == 2, workers
        # they finish importing torch first
        assert not _kill_rank(proc, workers, 60), "workers outlived a rank killed while they started"
    finally:
        _clean_up(proc, workers)
