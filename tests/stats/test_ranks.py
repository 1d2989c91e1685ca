"""Loader stats across ranks: real ranks (processes joined by gloo on 127.0.0.1) gather their
``rank_summary`` and ``gather`` names the rank the others wait for; a mixture's per-stream counts
summed over ranks against the schedule's target; what ``gather`` refuses."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from shardstream import BatchLoader, MDSWriter, Stream, StreamingDataset, World
from shardstream.errors import InvalidArgumentError
from shardstream.stats import gather, rank_summary, summary

JOB = Path(__file__).with_name("rank_job.py")
SRC = Path(__file__).resolve().parents[2] / "src"
BATCH = 8


def write(out: Path, n: int, start: int = 0) -> str:
    with MDSWriter(out=str(out), columns={"id": "int", "x": "ndarray:uint8:32"}, size_limit=4000) as w:
        for i in range(start, start + n):
            w.write({"id": i, "x": np.full(32, i % 251, np.uint8)})
    return str(out)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_job(tmp_path: Path, world: int, per_rank: dict, lockstep: bool, n: int) -> dict:
    """Runs ``world`` ranks of ``rank_job.py``; ``per_rank``: {rank: {"loop_sleep"/"transform_sleep": s}}."""
    pytest.importorskip("torch.distributed")
    data = write(tmp_path / "data", n)
    port = free_port()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")])}
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(name, None)
    procs = []
    for rank in range(world):
        cfg = {"rank": rank, "world_size": world, "port": port, "data": data, "batch_size": BATCH,
               "out": str(tmp_path), "lockstep": lockstep, "loop_sleep": 0.0, "transform_sleep": 0.0,
               **per_rank.get(rank, {})}
        procs.append(subprocess.Popen([sys.executable, str(JOB), json.dumps(cfg)], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    try:
        logs = [p.communicate(timeout=240)[0] for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    assert all(p.returncode == 0 for p in procs), "\n".join(logs)[-6000:]
    gathered = json.loads((tmp_path / "gathered.json").read_text())
    gathered["ranks"] = {int(k): v for k, v in gathered["ranks"].items()}
    return gathered


def test_the_rank_whose_loop_is_slow_is_the_straggler(tmp_path):
    n = 3 * BATCH * 50
    got = run_job(tmp_path, 3, {1: {"loop_sleep": 0.02}}, lockstep=False, n=n)
    assert got["total"]["samples"] == n  # the ranks together read the epoch once
    assert got["total"]["batches"] == 3 * 50
    slow, fast = got["ranks"][1], [got["ranks"][0], got["ranks"][2]]
    assert slow["stall_fraction"] < min(r["stall_fraction"] for r in fast)  # it waits least for data
    assert got["straggler"] == 1, got["straggler_reason"]
    assert "its own loop" in got["straggler_reason"]
    table = (tmp_path / "summary.txt").read_text()
    assert "straggler: rank 1" in table


def test_in_lockstep_the_rank_whose_input_is_slow_is_the_straggler(tmp_path):
    n = 2 * BATCH * 40
    got = run_job(tmp_path, 2, {1: {"transform_sleep": 0.02}}, lockstep=True, n=n)
    assert got["total"]["samples"] == n
    assert got["ranks"][1]["stall_fraction"] > got["ranks"][0]["stall_fraction"]
    assert got["straggler"] == 1, got["straggler_reason"]
    assert got["ranks"][1]["slowest_stage"] == "transform"
    assert "step together" in got["straggler_reason"]


def test_mixture_streams_delivered_against_target(tmp_path):
    a, b = write(tmp_path / "a", 400), write(tmp_path / "b", 400, start=1000)
    summaries = []
    delivered = {"a": 0, "b": 0}
    for rank in range(2):
        world = World(num_nodes=2, node=rank)
        ds = StreamingDataset(streams=[Stream(local=a, proportion=0.25), Stream(local=b, proportion=0.75)],
                              batch_size=BATCH, shuffle=False, epoch_size=320)
        loader = BatchLoader(ds, world=world, stats=True)
        for batch in loader:
            ids = np.asarray(batch["id"])
            delivered["a"] += int((ids < 1000).sum())
            delivered["b"] += int((ids >= 1000).sum())
        summaries.append(rank_summary(loader))
    got = gather(summaries)
    streams = got["streams"]
    assert [s["delivered"] for s in streams.values()] == [delivered["a"], delivered["b"]]
    assert sum(s["delivered"] for s in streams.values()) == got["total"]["samples"] == 320
    a_target, b_target = (s["target"] for s in streams.values())
    assert a_target == pytest.approx(0.25 * 320) and b_target == pytest.approx(0.75 * 320)
    assert "streams (delivered / target, all ranks)" in summary(got)


def _row(rank, step, stall, batches=100):
    return {"rank": rank, "samples_per_s": BATCH / step, "step_s": step, "stall_fraction": stall,
            "wait_p50_s": step * stall, "wait_p95_s": step * stall, "slowest_stage": "decode",
            "batches": batches, "samples": batches * BATCH}


def test_no_straggler_when_the_ranks_keep_pace():
    got = gather([_row(0, 0.010, 0.02), _row(1, 0.011, 0.03), _row(2, 0.010, 0.01)])
    assert got["straggler"] is None and "keep pace" in got["straggler_reason"]
    assert got["total"]["samples"] == 300 * BATCH
    assert gather([_row(0, 0.01, 0.5)])["straggler"] is None  # one rank
    # waits differ a lot but are all small: nothing to name
    assert gather([_row(0, 0.01, 0.001), _row(1, 0.01, 0.04)])["straggler"] is None


def test_gather_refuses_what_is_not_a_list_of_rank_summaries():
    with pytest.raises(InvalidArgumentError, match="non-empty list"):
        gather(_row(0, 0.01, 0.1))
    with pytest.raises(InvalidArgumentError, match="missing"):
        gather([{"rank": 0}])
    with pytest.raises(InvalidArgumentError, match="repeat"):
        gather([_row(0, 0.01, 0.1), _row(0, 0.01, 0.1)])
    with pytest.raises(InvalidArgumentError, match="stats=True"):
        rank_summary({"rank": 0})
