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


@pytest.fixture(scope="module")
def big_samples(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("orphans") / "ds")
    with MDSWriter(out=out, columns={"id": "int", "x": "ndarray:uint8:4096"}, size_limit=1 << 20) as w:
        for i in range(4000):
            w.write({"id": i, "x": np.full(4096, i % 251, np.uint8)})
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
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and any(_alive(w) for w in workers):
            time.sleep(0.1)
        assert not [w for w in workers if _alive(w)], "workers outlived their killed rank"
    finally:
        if proc.poll() is None:
            proc.kill()
        for w in workers:
            try:
                os.kill(w, signal.SIGKILL)
            except OSError:
                pass
