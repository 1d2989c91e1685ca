"""The converting-to-MDS benchmark (bench/bench_convert*.py) on a small workload: the generated Parquet
files, the memory sampler, shardstream's CLI side and mosaicml-streaming's writer loop end to end
(each output read back and checked), and the report's ratios, projection and targets."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import time

import numpy as np
import pytest

pq = pytest.importorskip("pyarrow.parquet")
BENCH = pathlib.Path(__file__).resolve().parents[1] / "bench"
sys.path.insert(0, str(BENCH))

import bench_convert  # noqa: E402
import bench_convert_data as data  # noqa: E402
import bench_convert_sides as sides  # noqa: E402

PEER_PYTHON = pathlib.Path(os.environ.get("SHARDSTREAM_PEER_PYTHON")
                           or BENCH.parent / ".venv-peers" / "bin" / "python")


@pytest.fixture(scope="module")
def workload(tmp_path_factory) -> dict:
    return data.prepare(str(tmp_path_factory.mktemp("convert")), 3000, 3)


def test_files_hold_the_rows_the_generator_describes_and_are_reused(workload):
    t = pq.read_table(workload["files"][1])
    assert t.schema.field("tokens").type.value_type == "int32" and t.num_rows == 1000
    assert t["id"].to_pylist() == list(range(1000, 2000))
    lengths = np.array([len(x) for x in t["tokens"].to_pylist()])
    texts = t["text"].to_pylist()
    assert lengths.min() >= data.MIN_TOKENS and lengths.max() <= data.MAX_TOKENS
    assert all(data.MIN_TEXT <= len(s) <= data.MAX_TEXT and s.isascii() for s in texts)
    r = data.row(workload, 1234)
    assert r["id"] == 1234 and r["text"] == texts[234] and r["tokens"].tolist() == t["tokens"][234].as_py()
    again = data.prepare(str(pathlib.Path(workload["dir"]).parent), 3000, 3)
    assert again["reused"] and again["files"] == workload["files"] and again["bytes"] == workload["bytes"]
    with pytest.raises(ValueError, match="multiple of 7"):
        data.prepare(str(pathlib.Path(workload["dir"]).parent), 3000, 7)


def test_check_rows_catches_a_missing_row_and_a_changed_one(workload):
    rows = {i: data.row(workload, i) for i in range(3000)}
    assert data.check_rows(workload, 3000, lambda j: rows[j])["ok"]
    assert not data.check_rows(workload, 2999, lambda j: rows[j])["ok"]
    changed = dict(rows[0], text="something else")
    res = data.check_rows(workload, 3000, lambda j: changed if j == 0 else rows[j])
    assert res["mismatched"] == [0] and not res["ok"]


def test_peak_memory_counts_child_processes():
    with sides.PeakMemory(every=0.05) as alone:
        _until(lambda: alone.samples >= 2)
    child = subprocess.Popen([sys.executable, "-c", "import sys, time; b = bytearray(200 << 20); b[::4096] = "
                              "b'x' * len(b[::4096]); print('ready', flush=True); time.sleep(60)"],
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "ready"  # its 200 MB are touched: counted from here on
        with sides.PeakMemory(every=0.05) as mem:
            _until(lambda: mem.samples >= 3)
    finally:
        child.kill()
        child.wait()
    assert mem.max_procs >= 2
    assert mem.peak_kb - alone.peak_kb > 150 << 10


def _until(done, limit_s: float = 30.0) -> None:
    """Wait (polling) until ``done()``; the sampler's pace depends on the machine's load, not asserted."""
    deadline = time.monotonic() + limit_s
    while not done():
        assert time.monotonic() < deadline, "the memory sampler took no samples"
        time.sleep(0.02)


def _run(case: str, workload: dict, tmp_path, peer: str | None = None) -> dict:
    res = bench_convert.run_case(case, workload, str(tmp_path), peer, case, wait_s=0)
    assert "error" not in res, res.get("stderr_tail")
    assert res["ok"], res["check"]
    assert res["check"]["rows"] == 3000 and res["check"]["compared"] >= 10
    assert res["rows_per_s"] > 0 and res["out_bytes"] > 0.5 * workload["bytes"] and res["peak_mb"] > 10
    assert not os.path.exists(os.path.join(tmp_path, "out", case))  # deleted after measuring
    return res


def test_shardstream_cli_side_converts_and_reads_back(workload, tmp_path):
    pytest.importorskip("shardstream.convert")
    res = _run("ours-cli-w2", workload, tmp_path)
    assert res["hashes"] and "--workers 2" in res["command"] and "--compression zstd" in res["command"]


def test_mosaic_loop_side_converts_and_reads_back(workload, tmp_path):
    if not PEER_PYTHON.exists():
        pytest.skip(f"no peer venv at {PEER_PYTHON} (make peers)")
    res = _run("mosaic-loop", workload, tmp_path, str(PEER_PYTHON))
    assert res["hashes"] == [] and res["versions"]["mosaicml-streaming"]


def _fake(rate: float, peak: float = 500.0, ok: bool = True) -> list[dict]:
    rows = 1_000_000
    t = rows / rate
    return [{"ok": ok, "convert_s": t, "rows_per_s": rate, "in_MB_per_s": 640 / t, "out_MB_per_s": 1200 / t,
             "out_bytes": 1.2e9, "peak_mb": peak, "max_procs": 3, "hashes": ["xxh3_64"],
             "check": {"ok": ok, "rows": rows if ok else rows - 1, "expected_rows": rows, "mismatched": [],
                       "compared": 18}}]


def test_report_ratios_projection_and_targets():
    R = {"date": "today", "git": "abc", "loadavg_before": "0", "loadavg_after": "0", "total_s": 1.0,
         "machine": {"cpu": "cpu", "logical_cpus": 2}, "not_run": {"ours-spark": "no Spark writer"},
         "data": {"rows": 1_000_000, "files": ["a"] * 8, "rows_per_file": 125_000, "bytes": 640e6, "seed": 1},
         "config": {"cases": list(bench_convert.CASES), "columns": sides.MDS_COLUMNS},
         "runs": {"ours-cli-w2": _fake(60_000), "ours-cli-w1": _fake(35_000), "mosaic-loop": _fake(15_000),
                  "litdata": _fake(70_000), "mosaic-spark": _fake(5_000, ok=False)}}
    mosaic, lit = bench_convert.target_rows(R)
    assert mosaic["ratio"] == "4.00x" and mosaic["met"] is True
    assert lit["ratio"] == "0.86x" and lit["met"] is False
    assert bench_convert.failed(R) == ["mosaic-spark (**WRONG** (999,999 rows of 1,000,000, 0 rows differ))"]
    text = bench_convert.markdown(R)
    assert "35,000 rows/s x 100 = **3,500,000 rows/s**" in text and "**1.71x** the rate of 1" in text
    assert "not run (no Spark writer)" in text
    json.dumps(R)
