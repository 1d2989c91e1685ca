"""The light chain benchmark (bench/bench_lightchain.py) on a small workload: the generated files and what
the chain must give, every case end to end in fresh processes with its passes checked, the report and its
target row, and the section in bench/run.py."""

from __future__ import annotations

import json
import pathlib
import sys

import pytest

BENCH = pathlib.Path(__file__).resolve().parents[1] / "bench"
sys.path.insert(0, str(BENCH))

import bench_lightchain as bench  # noqa: E402

ROWS = 2000


@pytest.fixture(scope="module")
def data_root(tmp_path_factory) -> str:
    return str(tmp_path_factory.mktemp("lightchain"))


def test_files_follow_the_generator_and_are_reused(data_root):
    info = bench.prepare(data_root, ROWS, 3)
    rows = [json.loads(line) for path in info["files"] for line in open(path)]
    assert [r["id"] for r in rows] == list(range(ROWS)) and len(info["files"]) == 3
    assert all(40 <= len(r["text"]) <= 200 and isinstance(r["score"], float) for r in rows)
    kept = [r["id"] for r in rows if len(r["text"]) % 4]
    assert (info["kept"], info["id_sum"]) == (len(kept), sum(kept)) and 0 < len(kept) < ROWS
    assert bench.prepare(data_root, ROWS, 3) == info


def test_every_case_runs_checked_and_the_report_gives_the_ratio(data_root):
    pytest.importorskip("datasets")
    R = bench.run_lightchain(data_root, ROWS, n_files=3, repeats=1, wait_s=0)
    assert not bench.failed(R), R
    assert all(r["checked"] and len(r["passes"]) == 2 for runs in R["cases"].values() for r in runs)
    S = bench.summary(R)
    assert set(S) == set(bench.CASES) and all(s["rows_per_s"] > 0 and s["rows_per_cpu_s"] > 0 for s in S.values())
    text = bench.markdown(R)
    ratio = S["shardstream"]["rows_per_s"] / S["hf"]["rows_per_s"]
    assert f"**{ratio:.2f}x**" in text and "| shardstream-plain |" in text
    (row,) = bench.target_rows(R)
    assert row["ratio"] == f"{ratio:.2f}x" and row["met"] == (ratio >= bench.TARGET)
    wrong = dict(R, cases={"hf": [dict(R["cases"]["hf"][0], checked=False)]})
    assert bench.failed(wrong) == ["hf run 0"] and bench.target_rows(wrong) == []


def test_run_py_renders_the_section_and_its_target():
    import run

    assert "lightchain" in run.ONLY and run.ONLY["lightchain"][0] == "lightchain"
    R = {"cases": {c: [{"passes": [{"wall_s": 1.0, "cpu_s": 1.0, "count": 1, "id_sum": 0}] * 2, "checked": True,
                        "version": "1"}] for c in bench.CASES},
         "config": {"rows": 1000, "files": 1, "repeats": 1, "buffer": 1000, "seed": 1, "bytes": 1, "kept": 1},
         "date": "today", "machine": {"cpu": "cpu", "logical_cpus": 2}}
    assert any(t["target"].startswith("Light chain") for t in run.summarize_targets({"lightchain": R}))
