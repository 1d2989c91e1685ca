"""The handoff benchmark (bench/bench_handoff*.py) at tiny sizes on the CPU: the driver end to end (the
CPU parts, with mosaicml-streaming when the peer venv is there, and a dry run of the GPU curve, whose
CUDA-only cases are skipped), the budget's priority order, and the report rendered from saved results."""

from __future__ import annotations

import json
import os
import pathlib
import sys

import pytest

pytest.importorskip("torch")
BENCH = pathlib.Path(__file__).resolve().parents[1] / "bench"
sys.path.insert(0, str(BENCH))

import bench_handoff as bench  # noqa: E402
import bench_handoff_report as report  # noqa: E402

PEER_PYTHON = pathlib.Path(os.environ.get("SHARDSTREAM_PEER_PYTHON")
                           or BENCH.parent / ".venv-peers" / "bin" / "python")
STUBS = str(BENCH.parent / "tests" / "peer_stubs")


@pytest.fixture(scope="module")
def cpu_run(tmp_path_factory) -> dict:
    peer = str(PEER_PYTHON) if PEER_PYTHON.exists() else None
    return bench.run_handoff(str(tmp_path_factory.mktemp("handoff")), peer, 4096, batches=(256,), repeats=1,
                             collate_repeats=1, predownloads=(None,), skip_batches=2, collate_skip=4,
                             peer_path=STUBS, wait_s=0)


def test_the_cpu_parts_deliver_every_sample_and_measure_the_cost(cpu_run):
    assert bench.failed(cpu_run) == []
    assert cpu_run["config"]["samples"] == 4096 and cpu_run["probe"]["cuda"] in (True, False)
    cases = cpu_run["handoff"]["256"]
    assert list(cases) == list(bench.HANDOFF_CASES)
    for case in ("shardstream", "torch"):
        r = cases[case]
        assert r["ok"] and r["epochs_finished"] == 1 and r["epochs"][0]["count"] == 4096
        assert r["GB_per_s"] > 0 and r["main_cpu_us_per_MB"] > 0 and r["workers_cpu_us_per_MB"] > 0
        assert r["steady_samples"] == 4096 - 2 * 256
    if not cpu_run["probe"]["transfer"]:
        assert "no `transfer` keyword" in cases["shardstream-ring"]["skipped"]
    collate = cpu_run["collate"]
    assert collate["shardstream"]["ok"] and collate["shardstream"]["steady_samples_per_s"] > 0
    if PEER_PYTHON.exists():
        assert collate["mosaic-default"]["ok"] and collate["mosaic-default"]["version"].startswith("0.13")


def test_the_report_renders_from_the_saved_results(cpu_run, tmp_path):
    path = tmp_path / "handoff.json"
    path.write_text(json.dumps(cpu_run))
    text = report.markdown(json.loads(path.read_text()))
    assert text.startswith(report.TITLE) and "### Handing batches over: 2 workers, batches of 256" in text
    assert "### Per-sample path with a user `collate_fn`" in text and "| 1, ok |" in text
    rows = report.target_rows(cpu_run)  # no batches of 1,024 here: only the collate_fn target, with the peer
    assert len(rows) == ("mosaic-default" in cpu_run["collate"])


def test_a_gpu_dry_run_skips_what_needs_cuda(tmp_path):
    saved = []
    R = bench.run_handoff(str(tmp_path / "gpu"), None, 2000, gpu=True, batches=(256,), workers=(1,),
                          skip_batches=1, window_s=0.05, budget_s=120, wait_s=0, save=saved.append)
    assert R["config"]["samples"] == 2048 and len(saved) >= 4
    cells = {case: by_w["1"] for case, by_w in R["gpu"]["256"].items()}
    assert cells["shardstream"]["ok"] and cells["torch"]["ok"] and cells["torch"]["steady_s"] > 0
    assert cells["mosaic"]["skipped"] == bench.NO_PEER
    if not R["probe"]["cuda"]:
        assert cells["torch-pinned"]["skipped"] == "no CUDA device"
    text = report.markdown(R)
    assert "Batches of 256:" in text and "Not run: no mosaicml-streaming" in text


def test_the_gpu_plan_puts_the_largest_batch_moved_to_the_gpu_first():
    plan = bench.gpu_plan((256, 1024), (1, 14))
    modes = [(b, bench.GPU_CASES[c][1] != "unpinned") for b, c, _ in plan]
    assert modes == sorted(modes, key=lambda m: (-m[0], not m[1]))
    assert plan[0] == (1024, "shardstream-pinned", 1) and plan[-1] == (256, "torch", 14)
    assert len(plan) == 2 * 2 * len(bench.GPU_CASES)
    assert bench.size(400_000, (1, 2, 4, 8, 14), (1024, 256)) == 7 * 56 * 1024


def _case(cpu: float, gbps: float, ok: bool = True) -> dict:
    return {"ok": ok, "main_cpu_us_per_MB": cpu, "GB_per_s": gbps, "steady_samples_per_s": gbps * 1e6}


def test_targets_compare_with_torch_and_with_mosaics_best_predownload():
    R = {"handoff": {"1024": {"shardstream": _case(40.0, 1.5), "torch": _case(400.0, 2.0)}},
         "collate": {"shardstream": {"ok": True, "steady_samples_per_s": 600.0},
                     "mosaic-default": {"ok": True, "steady_samples_per_s": 50.0},
                     "mosaic-8192": {"ok": True, "steady_samples_per_s": 100.0},
                     "mosaic-1024": {"error": "exit status 1"}}}
    cpu, gbps, collate = report.target_rows(R)
    assert cpu["met"] and cpu["measured"] == "0.10 of torch's" and gbps["met"]
    assert collate["met"] and collate["ratio"] == "6.0x" and "mosaic-8192" in collate["target"]
    R["handoff"]["1024"]["shardstream"] = _case(100.0, 0.9)
    cpu, gbps, _ = report.target_rows(R)
    assert cpu["met"] is False and gbps["met"] is False
    assert bench.failed(R) == ["collate-mosaic-1024"]
