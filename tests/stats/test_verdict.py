"""The verdict of a stats report: keeps up with a step or not, the step it sustains, the stage to blame."""

from __future__ import annotations

import json

import pytest

from shardstream import InvalidArgumentError
from shardstream.stats.report import CRITICAL, STAGES
from shardstream.stats.verdict import Verdict, verdict


def block(batches=100, stall=0.0, step_mean=0.12, stages=None, batches_per_s=None):
    seconds = batches * step_mean if step_mean else 1.0
    return {
        "batches": batches, "samples": batches * 32, "seconds": seconds,
        "batches_per_s": batches / seconds if batches_per_s is None else batches_per_s,
        "samples_per_s": batches * 32 / seconds,
        "wait_s": {"p50": 0.0, "p95": 0.0, "max": 0.0, "mean": 0.0, "total": 0.0},
        "step_s": {"p50": step_mean, "mean": step_mean}, "stall_fraction": stall,
        "stages": {**dict.fromkeys(STAGES, 0.0), **(stages or {})}, "per_worker": {},
        "bytes_fetched": 0, "files_fetched": 0, "cache_hits": 0, "cache_misses": 0, "evictions": 0,
    }


def report(total, workers=8, slowest_stage=None, advice=None):
    return {"loader": "StreamingDataLoader", "rank": 0, "world_size": 1, "num_workers": workers,
            "window": total, "total": total, "slowest_stage": slowest_stage, "advice": advice}


def test_keeps_up_names_the_step_the_workers_and_the_bottleneck():
    r = report(block(stall=0.004, stages={"decode": 4.0, "download_wait": 0.5}))
    v = verdict(r, 0.12)
    assert v.keeps_up is True and v.bottleneck == "decode" and v.step_s == 0.12
    assert v.text == ("keeps up with a 120 ms step at 8 workers (the loop waited 0.4% of the time); "
                      "the bottleneck is decode")
    assert str(v) == v.text


def test_does_not_keep_up_names_the_slowest_stage_and_the_knob():
    advice = "shards arrive too late: raise predownload"
    r = report(block(stall=0.38, step_mean=0.194, stages={"download_wait": 9.0, "decode": 2.0}), workers=2,
               slowest_stage="download_wait", advice=advice)
    v = verdict(r, 0.12)
    assert v.keeps_up is False and v.bottleneck == "download_wait" and v.advice == advice
    assert v.text.startswith("does NOT keep up with a 120 ms step at 2 workers: the loop waited 38% of the time")
    assert v.text.endswith(f"the slowest stage is download_wait: {advice}")


def test_advice_comes_from_the_knobs_when_the_report_blames_another_stage():
    # the report's slowest stage is the window's; judged since the start, collate is to blame
    r = report(block(stall=0.5, stages={"collate": 30.0}), workers=1, slowest_stage="decode", advice="x")
    v = verdict(r, 0.05)
    assert v.bottleneck == "collate" and "batch path" in v.advice and v.advice != "x"


def test_worker_stages_count_side_by_side_but_transfer_in_the_loop():
    # 8 workers decode 4 s in all (0.5 s each, side by side); the loop itself spends 1 s on transfer
    r = report(block(stages={"decode": 4.0, "transfer": 1.0}))
    assert verdict(r).bottleneck == "transfer"
    assert verdict(report(block(stages={"decode": 4.0, "transfer": 1.0}), workers=2)).bottleneck == "decode"


def test_tolerance_decides_keeping_up():
    r = report(block(stall=0.08))
    assert verdict(r, 0.1).keeps_up is False
    assert verdict(r, 0.1, tolerance=0.1).keeps_up is True


def test_no_step_time_says_the_sustainable_step():
    r = report(block(step_mean=1 / 412, stages={"decode": 1.0}))
    v = verdict(r)
    assert v.keeps_up is None and v.step_s is None
    assert v.batches_per_s == pytest.approx(412)
    assert v.sustainable_step_s == pytest.approx(1 / 412)
    assert v.text == "delivers 412.0 batches/s: keeps up with any step longer than 2.4 ms at 8 workers; " \
                     "the bottleneck is decode"
    assert verdict(r, 0).keeps_up is None  # 0: no step, as the command's default


def test_without_steps_the_rate_over_the_run_is_used():
    r = report(block(batches=1, step_mean=0.0, batches_per_s=2.0), workers=0)
    v = verdict(r)
    assert v.batches_per_s == 2.0 and v.text.startswith("delivers 2.0 batches/s: keeps up with any step longer "
                                                        "than 500 ms with no worker processes")
    assert v.bottleneck is None and "bottleneck" not in v.text


def test_nothing_delivered():
    v = verdict(report(block(batches=0, step_mean=0.0, batches_per_s=0.0), workers=1), 0.1)
    assert v.sustainable_step_s is None and v.text == "delivered no batches at 1 worker"


def test_window_or_total_and_a_report_read_back_from_json():
    r = report(block(stall=0.0))
    r["window"] = block(stall=0.9, stages={"decode": 1.0})
    back = json.loads(json.dumps(r))
    assert verdict(back, 0.1).keeps_up is True
    assert verdict(back, 0.1, which="window").keeps_up is False
    assert isinstance(verdict(back, 0.1), Verdict)


@pytest.mark.parametrize("kwargs, word", [
    ({"step_s": -1}, "step_s=-1"), ({"step_s": "fast"}, "step_s='fast'"), ({"step_s": True}, "step_s=True"),
    ({"tolerance": 1.5}, "tolerance=1.5"), ({"which": "last"}, "which='last'"),
])
def test_bad_arguments_are_refused(kwargs, word):
    with pytest.raises(InvalidArgumentError, match=word.replace("(", r"\(")) as info:
        verdict(report(block()), **kwargs)
    assert isinstance(info.value, ValueError)


def test_every_critical_stage_can_be_blamed():
    for stage in CRITICAL:
        v = verdict(report(block(stall=0.5, stages={stage: 100.0}), workers=1), 0.1)
        assert v.bottleneck == stage and v.advice
