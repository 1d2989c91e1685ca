"""MDS, Parquet and JSON Lines streams in one dataset: exact per-stream counts every epoch, one global
order for every world, and exact resume (also on another world and through DataLoader workers).

Each stream's rows carry a tag and a number, so a sample from the wrong stream, file or row shows up.
"""

from __future__ import annotations

import json
import os
from collections import Counter

import numpy as np
import pytest

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

from shardstream import MDSWriter, Stream, StreamingDataset  # noqa: E402
from shardstream.testing.resume import check_resumes_identically  # noqa: E402

COUNTS = {"mds": 40, "pq": 90, "jsonl": 70}


@pytest.fixture(scope="module")
def places(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("mixed")
    mds = str(root / "mds")
    with MDSWriter(out=mds, columns={"tag": "str", "n": "int64", "x": "ndarray:int64"}, size_limit=300) as w:
        for n in range(COUNTS["mds"]):
            w.write({"tag": "mds", "n": n, "x": np.arange(n % 3 + 1, dtype=np.int64)})
    os.makedirs(root / "pq")
    for k, (lo, hi) in enumerate([(0, 50), (50, 90)]):
        ns = list(range(lo, hi))
        pq.write_table(pa.table({"tag": ["pq"] * len(ns), "n": pa.array(ns, pa.int64()),
                                 "x": pa.array([list(range(n % 3 + 1)) for n in ns], pa.list_(pa.int64()))}),
                       str(root / "pq" / f"p{k}.parquet"), row_group_size=15)
    os.makedirs(root / "jsonl")
    for k, (lo, hi) in enumerate([(0, 30), (30, 70)]):
        with open(root / "jsonl" / f"j{k}.jsonl", "w") as f:
            for n in range(lo, hi):
                f.write(json.dumps({"tag": "jsonl", "n": n, "x": list(range(n % 3 + 1))}) + "\n")
    return {"mds": mds, "pq": str(root / "pq"), "jsonl": str(root / "jsonl" / "*.jsonl")}


def key(s: dict) -> tuple[str, int]:
    assert set(s) == {"tag", "n", "x"} and type(s["n"]) in (int, np.int64), s
    assert np.array_equal(np.asarray(s["x"]), np.arange(int(s["n"]) % 3 + 1)), s
    return s["tag"], int(s["n"])


def make(places: dict, batch_size: int = 8, **kw) -> StreamingDataset:
    streams = [Stream(local=places["mds"], proportion=1), Stream(local=places["pq"], proportion=2),
               Stream(local=places["jsonl"], proportion=1)]
    return StreamingDataset(streams=streams, epoch_size=160, batch_size=batch_size, shuffle=True, shuffle_seed=9,
                            **kw)


def test_every_epoch_has_the_planned_count_of_each_stream(places):
    ds = make(places)
    for epoch in range(2):
        counts = ds.stream_counts().tolist()
        got = Counter(tag for tag, _ in map(key, ds))
        assert sum(counts) == 160 and got == {"mds": counts[0], "pq": counts[1], "jsonl": counts[2]}
        assert counts[1] > counts[0] > 0 and counts[2] > 0


def test_resumes_identically_on_other_worlds(places):
    report = check_resumes_identically(lambda bs: make(places, bs), 4, [(1, 1, 0), (2, 1, 0), (2, 2, 2)],
                                       steps=[0, 3, 7])
    assert report.steps == 3 and report.samples_compared > 0


def test_dataloader_workers_resume_mid_epoch(places):
    pytest.importorskip("torch")
    from shardstream import StreamingDataLoader

    full = [key(s) for s in make(places)]
    first = StreamingDataLoader(make(places), batch_size=8, num_workers=2, collate_fn=list)
    head = []
    for j, batch in enumerate(first):
        head += [key(s) for s in batch]
        if j == 4:
            break
    state = first.state_dict()
    resumed = StreamingDataLoader(make(places), batch_size=8, num_workers=2, collate_fn=list)
    resumed.load_state_dict(state)
    assert head + [key(s) for b in resumed for s in b] == full


def test_columns_of_data_files_are_refused_for_an_mds_stream(places):
    from shardstream.errors import InvalidArgumentError

    with pytest.raises(InvalidArgumentError, match="selects the columns of data files"):
        StreamingDataset(local=places["mds"], columns=["n"])
    ds = StreamingDataset(streams=[Stream(local=places["mds"]), Stream(local=places["pq"], columns=["tag", "n"])])
    assert len(ds) == COUNTS["mds"] + COUNTS["pq"]
