"""The benchmark charts (bench/charts.py, bench/charts_data.py): drawn from small raw results built here,
by the command line as `make bench` leaves it; the report links exactly the images drawn; and the images
docs/benchmarks.md links are there, real PNGs."""

from __future__ import annotations

import json
import pathlib
import re
import struct
import subprocess
import sys

BENCH = pathlib.Path(__file__).resolve().parents[1] / "bench"
DOCS = BENCH.parent / "docs"
sys.path.insert(0, str(BENCH))

import charts  # noqa: E402
import charts_data  # noqa: E402
import run  # noqa: E402

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
IMAGE = re.compile(r"!\[([^\]]+)\]\(([^)\s]+\.png)\)")


def _resume_runs(*totals: float) -> list[dict]:
    return [{"total_s": t, "ok": True} for t in totals]


def small_results() -> dict:
    """Raw results shaped like bench/run.py's, a few figures in each section the charts read."""
    rate = lambda v: {"samples_per_s": v}  # noqa: E731
    return {
        "shardstream": {"iterate": {"default": {"warm": rate(300_000)}}, "random": {"default": rate(250_000)},
                        "write": {"none": rate(150_000)}},
        "mosaic": {"iterate": {"default": {"warm": rate(3_000)}, "predownload=8": {"warm": rate(9_000)},
                               "best_tuned": "predownload=8"},
                   "random": {"default": rate(17_000)}, "write": {"none": rate(35_000)}},
        "litdata": {"iterate": {"default": {"warm": rate(110_000)}}, "write": {"binary_writer": rate(22_000)}},
        "loader": {
            "throughput": {"shuffled": {"shardstream": {"ok": True, "steady_samples_per_s": 44_000},
                                        "mosaic": {"ok": True, "steady_samples_per_s": 4_200},
                                        "litdata": {"ok": False, "steady_samples_per_s": 11_000}}},
            "resume": {"shardstream": {"0%": _resume_runs(0.12, 0.11, 0.13), "10%": _resume_runs(0.09, 0.08, 0.1),
                                       "50%": _resume_runs(0.09),
                                       # a failed process is left out of the median
                                       "90%": [*_resume_runs(0.1, 0.11, 0.105), {"error": "exit 1", "total_s": 9.0}]},
                       "mosaic": {"10%": _resume_runs(0.21), "50%": _resume_runs(0.2), "90%": _resume_runs(0.22)}},
        },
        "pipeline": {"throughput": {"shardstream-jsonl": [{"ok": True, "tokens_per_s": 690_000},
                                                          {"ok": True, "tokens_per_s": 700_000}],
                                    "hf-jsonl": [{"ok": False, "tokens_per_s": 1e9}]},
                     "resume": {"shardstream-jsonl": {"positions": {"136": {"fraction": 0.1, "median_s": 0.35},
                                                                    "682": {"fraction": 0.5, "median_s": 0.49}}}}},
        "remote": {"dataset": {"dataset_bytes": 747_000_000},
                   "runs": {"shardstream": {"cold": {"server_bytes": 747_000_000, "samples_per_s": 66_000,
                                                     "first_sample_s": 2.0, "first_runs": [1.0, 1.2]},
                                            "warm": {"server_bytes": 0, "samples_per_s": 157_000,
                                                     "first_sample_s": 0.9}},
                            "mosaic": {"cold": {"server_bytes": 747_000_000, "samples_per_s": 2_100,
                                                "first_sample_s": 1.5}},
                            "shardstream-node0of2": {"cold": {"server_bytes": 402_000_000}},
                            "mosaic-node0of2": {"cold": {"error": "exit status 1", "server_bytes": 0}}}},
    }


def test_the_figures_come_from_the_results():
    R = small_results()
    panels = {p.title: p for p in charts_data.throughput_panels(R)}
    assert panels["Dict iteration, one process, warm"].bars == [
        ("shardstream", 300_000, "shardstream"), ("mosaicml-streaming", 3_000, "mosaic"),
        ("mosaicml-streaming predownload=8", 9_000, "mosaic"), ("litdata", 110_000, "litdata")]
    # a failed case has no bar; a pipeline case's fastest ok epoch is its bar
    assert [b[0] for b in panels["PyTorch DataLoader, shuffled, 2 workers"].bars] == ["shardstream",
                                                                                      "mosaicml-streaming"]
    assert panels["Text LM pipeline (shuffle, tokenize, pack, batch)"].bars == [
        ("shardstream-jsonl", 700_000, "shardstream")]
    assert "PyTorch DataLoader, sequential, 2 workers" not in panels  # not in the results: no empty panel

    (loader, pipeline) = charts_data.resume_panels(R)
    series = {label: pts for label, _, pts in loader.series}
    assert series["shardstream"] == [(0.0, 0.12), (10.0, 0.09), (50.0, 0.09), (90.0, 0.105)]
    assert series["mosaicml-streaming"] == [(10.0, 0.21), (50.0, 0.2), (90.0, 0.22)]
    assert pipeline.series == [("shardstream-jsonl", "shardstream", [(10.0, 0.35), (50.0, 0.49)])]

    down, rate, first = charts_data.cache_panels(R)
    assert down.values[("warm cache", "shardstream")] == 0
    assert down.values[("node 0 of 2, cold", "shardstream")] == 402
    assert ("node 0 of 2, cold", "mosaicml-streaming") not in down.values  # it failed: a gap, not a 0
    assert down.line == ("the dataset", 747)
    assert first.values[("cold cache", "shardstream")] == 1.2  # the median of the epoch run and the others
    assert ("warm cache", "mosaicml-streaming") not in rate.values


def _png_size(path: pathlib.Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC, f"{path} is not a PNG"
    assert data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def test_the_command_draws_every_chart_beside_the_results(tmp_path):
    results = tmp_path / "bench.json"
    results.write_text(json.dumps(small_results()))
    proc = subprocess.run([sys.executable, str(BENCH / "charts.py"), str(results)], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    for name in ("throughput", "resume", "cache"):
        path = tmp_path / f"bench-{name}.png"
        assert path.exists(), proc.stdout
        width, height = _png_size(path)
        assert width >= 600 and height >= 200, (name, width, height)
        assert 10_000 < path.stat().st_size < 150_000, (name, path.stat().st_size)
        assert str(path) in proc.stdout


def test_a_chart_without_data_is_neither_drawn_nor_linked(tmp_path):
    R = small_results()
    del R["remote"]
    (tmp_path / "old-cache.png").write_bytes(PNG_MAGIC)  # an earlier run's image: it would be stale now
    images = charts.draw(R, str(tmp_path), "old")
    assert [file for _, file in images] == ["old-throughput.png", "old-resume.png"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["old-resume.png", "old-throughput.png"]
    assert charts.draw({"config": {}}, str(tmp_path / "none"), "x") == []
    assert charts.markdown([]) == []


def test_the_report_links_the_images_it_was_drawn_with(tmp_path):
    R = small_results()
    images = charts.draw(R, str(tmp_path), "report")
    # the report of a run that measured nothing: its header needs these fields
    R = dict(date="today", total_s=1.0, git="0000000", loadavg_before="0", loadavg_after="0", command="run.py",
             make_form=False, machine={"cpu": "cpu", "logical_cpus": 2, "os": "Linux"},
             config={"samples": 10, "vec_samples": 1, "img_samples": 1, "random": 1, "repeats": 1, "batch_size": 2,
                     "mixed_payload_bytes": 100})
    R["summary"] = run.summarize_targets(R)
    text = run.render(R, images)
    linked = IMAGE.findall(text)
    assert [file for _, file in linked] == ["report-throughput.png", "report-resume.png", "report-cache.png"]
    assert all((tmp_path / file).exists() for _, file in linked)
    assert "## Charts" in text and text.index("## Charts") < text.index("## 1. Write throughput")
    assert "## Charts" not in run.render(R)


def test_without_matplotlib_the_command_says_what_to_install(tmp_path):
    results = tmp_path / "bench.json"
    results.write_text(json.dumps(small_results()))
    script = str(BENCH / "charts.py")
    code = ("import runpy, sys; sys.modules['matplotlib'] = None; "
            f"sys.argv = ['charts.py', {str(results)!r}]; runpy.run_path({script!r}, run_name='__main__')")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1
    assert "pip install 'shardstream[plot]'" in proc.stderr
    assert not list(tmp_path.glob("*.png"))


def test_the_benchmark_report_shows_its_charts():
    text = (DOCS / "benchmarks.md").read_text()
    linked = [file for _, file in IMAGE.findall(text)]
    assert {"benchmarks-throughput.png", "benchmarks-resume.png", "benchmarks-cache.png"} <= set(linked)
    for file in linked:
        path = DOCS / file
        assert path.exists(), f"docs/benchmarks.md links {file}, which is not in docs/"
        _png_size(path)
        assert path.stat().st_size < 150_000, (file, path.stat().st_size)
