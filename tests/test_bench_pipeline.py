"""The text LM pipeline benchmark (bench/bench_pipeline*.py) on a small workload: the generated data,
the HF-style packing generator it compares with, shardstream's side end to end (epoch checked against
the generator's token count, resumption exact), and the report's targets."""

from __future__ import annotations

import json
import pathlib
import sys

import numpy as np
import pytest

pytest.importorskip("tokenizers")
BENCH = pathlib.Path(__file__).resolve().parents[1] / "bench"
sys.path.insert(0, str(BENCH))

import bench_pipeline  # noqa: E402
import bench_pipeline_data as data  # noqa: E402
import bench_pipeline_sides as sides  # noqa: E402


@pytest.fixture(scope="module")
def workload(tmp_path_factory) -> dict:
    return data.prepare(str(tmp_path_factory.mktemp("pipeline")), 300, 2)


def test_documents_are_the_same_for_a_seed_and_english_like():
    a, b = data.documents(50), data.documents(50)
    assert a == b and a != data.documents(50, seed=data.SEED + 1)
    lengths = np.array([len(d) for d in data.documents(400)])
    assert 900 < lengths.mean() < 2200 and lengths.min() >= 100
    assert all((d[0].isupper() or d[0].isdigit()) and d.endswith(".") for d in a)


def test_prepare_writes_the_same_rows_twice_and_reuses_them(workload, tmp_path):
    rows = [json.loads(line)["text"] for f in workload["jsonl"] for line in open(f)]
    assert rows == data.documents(300)
    import pyarrow.parquet as pq

    assert [t for f in workload["parquet"] for t in pq.read_table(f)["text"].to_pylist()] == rows
    again = data.prepare(str(pathlib.Path(workload["dir"]).parent), 300, 2)
    assert again["reused"] and again["expect"] == workload["expect"]
    assert workload["expect"]["tokens"] > 300 and workload["expect"]["eos_id"] == 0


def test_hf_style_packing_keeps_every_token_and_resumes_from_its_buffer():
    rng = np.random.default_rng(0)
    docs = [{"input_ids": rng.integers(1, 99, int(n)).tolist()} for n in rng.integers(1, 3000, 60)]
    whole = list(sides.batches_of(sides.group_texts(iter(docs), [])))
    ids, mask = zip(*(sides.tokens_of(b) for b in whole))
    assert sum(int(m.sum()) for m in mask) == sum(len(d["input_ids"]) for d in docs)
    assert all(b["input_ids"].shape[1] == sides.SEQ_LEN for b in whole)
    # stop after 3 batches, keep the uncut tokens, go on from the next document: the same batches
    it, buf = iter(docs), []
    batches = sides.batches_of(sides.group_texts(it, buf))
    first = [next(batches) for _ in range(3)]
    saved = list(buf)
    rest = list(sides.batches_of(sides.group_texts(it, saved)))
    digests = [sides.digest(*sides.tokens_of(b)) for b in first + rest]
    assert digests == [sides.digest(i, m) for i, m in zip(ids, mask)]


def test_shardstream_side_carries_every_token_and_resumes_exactly(workload):
    cfg = {"format": "json", "files": workload["jsonl"], "tokenizer": workload["tokenizer"],
           "expect": workload["expect"], "timeout_s": 300}
    res = sides.throughput(sides.OursSide(cfg), cfg)
    assert res["ok"], res
    assert res["packing_efficiency"] > 0.99
    out = sides.resume(sides.OursSide(cfg), dict(cfg, positions=[2, res["batches"] // 2], repeats=1))
    for p in out["positions"].values():
        assert p["equal_min"] == p["compared"] and p["epoch_complete"], p


def test_report_names_the_fastest_case_of_each_library_and_the_targets():
    def runs(rate):
        return [{"ok": True, "tokens_per_s": rate, "steady_tokens_per_s": rate, "first_batch_s": 1.0,
                 "packing_efficiency": 1.0, "cpu_s": 10.0, "epoch_s": 10.0, "peak_rss_mb": 100.0}]

    R = {"throughput": {"shardstream-jsonl": runs(300.0), "hf-jsonl": runs(100.0),
                        "hf-jsonl-transformers": runs(120.0), "grain-batched": runs(400.0)}}
    hf, grain = bench_pipeline.target_rows(R)
    assert "hf-jsonl-transformers" in hf["target"] and hf["ratio"] == "2.50x" and hf["met"] is True
    assert grain["ratio"] == "0.75x" and grain["met"] is False
    assert bench_pipeline.failed(R) == []
    R["throughput"]["hf-jsonl"][0]["ok"] = False
    assert bench_pipeline.failed(R) == ["hf-jsonl (**1 of 1 failed** (wrong tokens))"]
