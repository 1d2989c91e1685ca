"""The loader stats on vs off benchmark (bench/bench_loader_stats.py) on a small workload: real processes
for two loader settings in both modes, the stats check each "on" process makes, and the report's medians,
overheads, target and failures."""

from __future__ import annotations

import pathlib
import sys

import pytest

BENCH = pathlib.Path(__file__).resolve().parents[1] / "bench"
sys.path.insert(0, str(BENCH))

import bench_loader_stats as bench  # noqa: E402

CASES = ("batch-w0", "batchloader")


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> dict:
    work = tmp_path_factory.mktemp("loader-stats")
    return bench.run_stats(str(work / "run"), 640, repeats=1, epochs=1, cases=CASES, skip=2)


def test_every_process_ran_both_modes_and_stats_counted_every_batch(results):
    assert bench.failed(results) == []
    assert results["config"]["samples"] == 640 and results["config"]["cases"] == list(CASES)
    for case in CASES:
        off, on = results["runs"][case]["off"], results["runs"][case]["on"]
        assert len(off) == len(on) == 1
        assert off[0]["stats_on"] is False and "stats" not in off[0] and on[0]["stats_on"] is True
        check = on[0]["stats"]
        # one warm-up and one timed epoch of 640 samples in batches of 32
        assert check["samples"] == check["expect_samples"] == 2 * 640
        assert check["batches"] == check["expect_batches"] == 2 * 640 // 32
        assert check["ok"] and check["stages"]["decode"] > 0
        assert on[0]["steady_median"] > 0 and off[0]["steady_median"] > 0


def test_the_stats_work_alone_is_timed_in_each_place(results):
    alone = results["alone"]
    assert alone["batches"] == 20_000 and alone["stats_dict_bytes"] > 20
    assert all(alone[k] > 0 for k in ("worker_us", "transfer_us", "main_us", "point_off_us", "point_on_us"))


def test_the_report_shows_each_setting_with_medians_and_the_off_cost(results):
    text = bench.markdown(results)
    assert "timed alone in one process" in text
    assert text.startswith("### Loader stats: on vs off")
    for case in CASES:
        assert bench.SETTINGS[case] in text
    assert "| yes |" in text and "**no**" not in text
    assert "integrations/torch.py" in text and "loaders/batches.py" in text
    assert bench.target_rows(results) == []  # the batch path with workers did not run


def _run(steady: float, ok: bool = True) -> dict:
    return {"ok": True, "steady_median": steady, "main_cpu_us_per_batch": 100.0, "workers_cpu_us_per_batch": None,
            "contention": {"others_cpu_share": 0.1}, "stats": {"ok": ok}}


def test_overhead_is_of_the_medians_and_its_spread_of_each_round():
    by_mode = {"off": [_run(100.0), _run(110.0), _run(90.0)], "on": [_run(99.0), _run(100.0), _run(95.0)]}
    s = bench.case_summary(by_mode)
    assert s["off"]["steady"] == 100.0 and s["on"]["steady"] == 99.0
    assert s["overhead"] == pytest.approx(0.01)
    assert s["pair_overheads"] == pytest.approx([0.01, 1 - 100 / 110, 1 - 95 / 90])
    assert s["stats_ok"] and s["failed"] == 0
    R = {"runs": {bench.HEADLINE: by_mode}}
    row, = bench.target_rows(R)  # rounds from -5.6% to +9.1%: too noisy to tell a 2% overhead
    assert row["met"] is None and "+1.0%" in row["measured"] and "cannot tell" in row["measured"]
    quiet = {"off": [_run(100.0), _run(101.0), _run(99.0)], "on": [_run(99.0), _run(100.0), _run(98.5)]}
    row, = bench.target_rows({"runs": {bench.HEADLINE: quiet}})
    assert row["met"] is True and "cannot tell" not in row["measured"]
    slow = {"off": quiet["off"], "on": [_run(90.0), _run(91.0), _run(89.0)]}
    assert bench.target_rows({"runs": {bench.HEADLINE: slow}})[0]["met"] is False


def test_a_wrong_count_or_a_failed_process_is_reported():
    R = {"write": {}, "runs": {"batch-w2": {"off": [_run(100.0), {"error": "exit status 1"}],
                                            "on": [_run(99.0, ok=False), _run(98.0)]}}}
    assert bench.failed(R) == ["batch-w2-off-1", "batch-w2-on-0"]
    s = bench.case_summary(R["runs"]["batch-w2"])
    assert s["failed"] == 1 and not s["stats_ok"]
