"""The JSON / CSV shards benchmark (bench/bench_textshards*.py) on a small workload: the generated samples,
shardstream's write and read steps end to end, the same steps of mosaicml-streaming with the bytes and
samples compared (when the peer venv is there), and the report's checks, ratios and targets."""

from __future__ import annotations

import copy
import json
import os
import pathlib
import sys

import pytest

BENCH = pathlib.Path(__file__).resolve().parents[1] / "bench"
sys.path.insert(0, str(BENCH))

import bench_textshards as bench  # noqa: E402
import bench_textshards_report as report  # noqa: E402

PEER_PYTHON = pathlib.Path(os.environ.get("SHARDSTREAM_PEER_PYTHON")
                           or BENCH.parent / ".venv-peers" / "bin" / "python")
N, RANDOM = 1500, 300


@pytest.fixture(scope="module")
def workload(tmp_path_factory) -> dict:
    return bench.prepare(str(tmp_path_factory.mktemp("textshards")), N, RANDOM)


def test_samples_follow_the_generator_and_are_reused(workload):
    with open(workload["jsonl"]) as f:
        rows = [json.loads(line) for line in f]
    assert [r["id"] for r in rows] == list(range(N))
    assert all(isinstance(r["score"], float) and 0 <= r["score"] < 100 for r in rows)
    assert all(len(r["text"]) <= bench.MAX_TEXT and "," not in r["text"] and r["text"].isascii() for r in rows)
    with open(workload["indices"]) as f:
        indices = json.load(f)
    assert len(indices) == RANDOM and all(0 <= i < N for i in indices)
    again = bench.prepare(str(pathlib.Path(workload["dir"]).parent), N, RANDOM)
    assert again["reused"] and not workload["reused"] and again["bytes"] == workload["bytes"]
    assert N % bench.batch_size(N) == 0 and bench.batch_size(200_000) == 64


def _steps(library: str, case: str, workload: dict, work: str, python: str) -> dict:
    out = {}
    for step in ("write", "read"):
        res = bench.run_step(step, library, case, workload, work, python, wait_s=0)
        assert "error" not in res, res.get("stderr_tail")
        out[step] = res
    return out


def _results(workload: dict, runs: dict, cases: list) -> dict:
    return {"date": "today", "git": "abc", "loadavg_before": "0", "loadavg_after": "0", "total_s": 1.0,
            "machine": {"cpu": "cpu", "logical_cpus": 2}, "data": workload, "not_run": {},
            "config": {"samples": N, "random": RANDOM, "limit": 0, "batch_size": bench.batch_size(N),
                       "cases": cases, "columns": {"id": "int", "text": "str", "score": "float"}},
            "runs": runs}


@pytest.mark.parametrize("case", ["json-none", "csv-zstd"])
def test_shardstream_writes_and_reads_back_every_sample(workload, tmp_path, case):
    ours = _steps("shardstream", case, workload, str(tmp_path), sys.executable)
    assert ours["write"]["samples"] == N and ours["write"]["samples_per_s"] > 0
    assert "index.json" in ours["write"]["digests"]
    assert any(p.endswith(".zstd") for p in ours["write"]["digests"]) == (case == "csv-zstd")
    read = ours["read"]
    assert read["samples"] == N and read["random"]["count"] == RANDOM and read["peak_rss_mb"] > 10
    with open(workload["indices"]) as f:
        assert read["random"]["id_sum"] == sum(json.load(f))
    R = _results(workload, {case: {"shardstream": ours}}, [case])
    assert report.checks(R, case)["samples"] and report.failed(R) == []
    assert report.target_rows(R)[0]["met"] is None  # nothing to compare with


def test_mosaicml_streaming_writes_the_same_bytes_and_reads_the_same_samples(workload, tmp_path):
    if not PEER_PYTHON.exists():
        pytest.skip(f"no peer venv at {PEER_PYTHON} (make peers)")
    runs = {"json-none": {"shardstream": _steps("shardstream", "json-none", workload, str(tmp_path), sys.executable),
                          "mosaic": _steps("mosaic", "json-none", workload, str(tmp_path), str(PEER_PYTHON))}}
    R = _results(workload, runs, ["json-none"])
    c = report.checks(R, "json-none")
    assert c["bytes"] is True and c["samples"] is True and c["files"] == 3, c["problems"]
    assert runs["json-none"]["mosaic"]["read"]["version"].startswith("0.13")
    assert "| JSON | none | mosaicml-streaming |" in report.markdown(R)


def _fake(write: float, read: float, rss: float, digest: str = "a", ids: int = N * (N - 1) // 2) -> dict:
    seq = {"count": N, "id_sum": ids, "id_order": (N - 1) * N * (N + 1) // 3, "chars": 9, "score": "1.5"}
    return {"write": {"samples_per_s": write, "MB_per_s": 1.0, "out_bytes": 1e6, "peak_rss_mb": rss,
                      "digests": {"index.json": digest}, "version": "1", "python": "3"},
            "read": {"iterate_samples_per_s": read, "random_samples_per_s": read / 2, "peak_rss_mb": rss,
                     "samples": N, "sequential": seq, "random": dict(seq, count=RANDOM), "version": "1",
                     "python": "3"}}


def test_report_flags_other_bytes_and_wrong_samples_and_takes_the_worst_case(workload):
    runs = {"json-none": {"shardstream": _fake(200, 100, 50), "mosaic": _fake(100, 10, 300)},
            "csv-none": {"shardstream": _fake(90, 100, 50), "mosaic": _fake(100, 10, 300)}}
    R = _results(workload, runs, ["json-none", "csv-none"])
    assert report.failed(R) == []
    write, iterate, _, rss_write, _ = report.target_rows(R)
    assert write["ratio"] == "0.90x" and write["met"] is False and "(csv-none)" in write["target"]
    assert iterate["ratio"] == "10.00x" and iterate["met"] is True
    assert rss_write["ratio"].startswith("6.00x") and rss_write["met"] is True
    bad = copy.deepcopy(R)
    bad["runs"]["csv-none"]["mosaic"] = _fake(100, 10, 300, digest="b", ids=1)
    assert report.failed(bad) == ["csv-none (mosaicml-streaming did not read the 1,500 samples in written order "
                                  "(it read 1,500); the libraries' sequential passes read different samples; the "
                                  "libraries' random passes read different samples; the libraries wrote different "
                                  "bytes)"]
    assert "**NO**" in report.markdown(bad)
    bad["runs"]["json-none"]["mosaic"]["read"] = {"error": "exit status 1"}
    assert "json-none (mosaicml-streaming read failed (exit status 1))" in report.failed(bad)
    json.dumps(R)
