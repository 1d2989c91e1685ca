"""``shardstream profile``, run as a real process over real datasets: local, over HTTP, and a pipeline."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from shardstream import MDSWriter
from shardstream.testing.servers import RangeHTTPServer

PNG = b"\x89PNG\r\n\x1a\n"


def profile(*args, check_rc=None):
    proc = subprocess.run([sys.executable, "-m", "shardstream", "profile", *map(str, args)],
                          capture_output=True, text=True, timeout=300)
    if check_rc is not None:
        assert proc.returncode == check_rc, (proc.returncode, proc.stdout, proc.stderr[-3000:])
    return proc


def write(out, n=240):
    with MDSWriter(out=str(out), columns={"id": "int", "x": "ndarray:float32:4", "text": "str"},
                   size_limit=2048) as w:
        for i in range(n):
            w.write({"id": i, "x": np.full(4, i, np.float32), "text": f"row {i}"})
    return str(out)


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    return write(tmp_path_factory.mktemp("profile") / "ds")


def test_table_verdict_and_plot(dataset, tmp_path):
    png = tmp_path / "out.png"
    out = profile(dataset, "--batches", 30, "--batch-size", 8, "--num-workers", 2, "--plot", png,
                  check_rc=0).stdout
    assert out.startswith("StreamingDataLoader rank 0/1, 2 workers")
    for line in ("loop wait p95", "stall fraction", "  decode", "  transfer", "cache hits/misses"):
        assert line in out
    assert "run: 30 batches in " in out and "stopped after 30 batches" in out
    (verdict,) = [line for line in out.splitlines() if line.startswith("verdict: ")]
    assert "batches/s: keeps up with any step longer than" in verdict and "at 2 workers" in verdict
    data = png.read_bytes()
    assert data[:8] == PNG and len(data) > 10_000


def test_json_adds_up_over_passes(dataset):
    # 240 samples, 8 per batch: 30 batches a pass; 75 batches run two passes and a half
    out = json.loads(profile(dataset, "--batches", 75, "--batch-size", 8, "--loader", "numpy", "--shuffle",
                             "--json", check_rc=0).stdout)
    assert out["loader"] == "BatchLoader" and out["num_workers"] == 0
    assert out["run"]["batches"] == 75 and out["run"]["passes"] == 3
    assert out["total"]["batches"] == 75 and out["total"]["samples"] == 75 * 8
    assert sum(w["batches"] for w in out["total"]["per_worker"].values()) == 75
    assert out["verdict"]["keeps_up"] is None and out["verdict"]["sustainable_step_s"] > 0
    assert out["plot"] is None


@pytest.mark.parametrize("transfer", ["ring", "queue"])
def test_either_transfer_delivers_the_epoch(dataset, transfer):
    out = json.loads(profile(dataset, "--batches", 30, "--batch-size", 8, "--num-workers", 2, "--transfer", transfer,
                             "--json", check_rc=0).stdout)
    assert out["run"]["passes"] == 1 and out["total"]["samples"] == 240
    assert sorted(out["total"]["per_worker"]) == ["w0", "w1"]


def test_one_pass_delivers_the_epoch(dataset):
    out = json.loads(profile(dataset, "--batches", 30, "--batch-size", 8, "--num-workers", 1, "--columns", "id",
                             "--json", check_rc=0).stdout)
    assert out["run"]["passes"] == 1 and out["total"]["samples"] == 240
    assert list(out["total"]["per_worker"]) == ["w0"]


def test_step_time_is_judged(dataset):
    out = json.loads(profile(dataset, "--batches", 12, "--batch-size", 8, "--loader", "numpy", "--step-time",
                             0.05, "--json", check_rc=0).stdout)
    v = out["verdict"]
    assert v["step_s"] == 0.05 and isinstance(v["keeps_up"], bool)
    assert "keep up with a 50 ms step with no worker processes" in v["text"].replace("keeps up", "keep up")
    assert out["total"]["step_s"]["mean"] >= 0.05  # the loop slept the step between its requests


def test_seconds_stop_the_run(dataset):
    out = json.loads(profile(dataset, "--seconds", 0.3, "--batch-size", 8, "--loader", "numpy", "--step-time",
                             0.05, "--json", check_rc=0).stdout)
    assert out["run"]["stopped_after"] == "0.3 seconds" and out["run"]["seconds"] >= 0.3
    assert 1 <= out["run"]["batches"] < 30


def test_remote_dataset_over_http(tmp_path):
    root = tmp_path / "http-root"
    write(root / "ds", n=160)
    with RangeHTTPServer(root) as server:
        out = json.loads(profile(f"{server.url}/ds", "--cache", tmp_path / "cache", "--batches", 20,
                                 "--batch-size", 8, "--loader", "numpy", "--predownload", 16,
                                 "--download-threads", 2, "--json", check_rc=0).stdout)
    total = out["total"]
    assert total["samples"] == 160 and out["run"]["passes"] == 1
    assert total["bytes_fetched"] > 0 and total["files_fetched"] > 0 and total["cache_misses"] > 0
    assert any(name.startswith("shard.") for name in os.listdir(tmp_path / "cache"))


@pytest.mark.parametrize("args, message", [
    (["--batches", 0], "--batches 0: give a number >= 1"),
    (["--batch-size", 0], "--batch-size 0"),
    (["--step-time", -1], "--step-time -1.0"),
    (["--seconds", 0], "--seconds 0.0"),
    (["--plot", "out.svg"], "give a .png path"),
    (["--loader", "numpy", "--num-workers", 2], "--num-workers 2 with --loader numpy"),
    (["--loader", "numpy", "--transfer", "ring"], "--transfer ring with --loader numpy"),
])
def test_bad_options_exit_2(dataset, args, message):
    proc = profile(dataset, *args, check_rc=2)
    assert message in proc.stderr and proc.stdout == ""


def test_missing_dataset_exits_2(tmp_path):
    proc = profile(tmp_path / "nothing-here", check_rc=2)
    assert "no dataset at" in proc.stderr and "nothing-here" in proc.stderr
    assert "Traceback" not in proc.stderr


def jsonl_config(tmp_path, load: bool) -> str:
    with open(tmp_path / "rows.jsonl", "w") as f:
        for i in range(96):
            f.write(json.dumps({"id": i, "text": f"row {i}"}) + "\n")
    path = tmp_path / "profile.yaml"
    path.write_text(f"pipeline:\n  datasets:\n    - data_files: {tmp_path}/rows.jsonl\n      type: jsonl\n"
                    + ("  load:\n    batch_size: 8\n    drop_last: false\n" if load else ""))
    return str(path)


def test_pipeline_without_a_load_stage_runs_in_workers(tmp_path):
    out = json.loads(profile(jsonl_config(tmp_path, load=False), "--batches", 6, "--batch-size", 16,
                             "--num-workers", 1, "--json", check_rc=0).stdout)
    assert out["total"]["samples"] == 96 and out["run"]["passes"] == 1


def test_pipeline_refuses_dataset_options(tmp_path):
    proc = profile(jsonl_config(tmp_path, load=True), "--shuffle", check_rc=2)
    assert "--shuffle with a pipeline configuration" in proc.stderr


def test_pipeline_with_a_load_stage(tmp_path):
    out = json.loads(profile(jsonl_config(tmp_path, load=True), "--batches", 12, "--json", check_rc=0).stdout)
    assert out["total"]["samples"] == 96 and out["run"]["passes"] == 1
