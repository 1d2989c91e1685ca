"""The operations of a processing chain give what HF ``datasets`` gives on the same rows."""

from __future__ import annotations

import asyncio
import json

import numpy as np
import pytest

import shardstream as ss
from shardstream.errors import IncompatibleStateError, InvalidArgumentError, TransformError


def rows_of(d):
    return [r for r in ss.StreamingDataset(local=d)]


def test_shuffle_flag_serves_both_meanings(jsonl_dir):
    ds = ss.StreamingDataset(local=jsonl_dir, shuffle=True)
    assert ds.shuffle and ds.shuffle == True and repr(ds.shuffle) == "True"  # noqa: E712
    plain = ss.StreamingDataset(local=jsonl_dir)
    assert not plain.shuffle and plain.shuffle == False  # noqa: E712
    chain = plain.shuffle(seed=1, buffer_size=50)
    assert isinstance(chain, ss.IterableDataset)
    ids = [r["id"] for r in chain]
    assert sorted(ids) == sorted(r["id"] for r in plain) and ids != [r["id"] for r in plain]
    plain.shuffle = True
    assert plain.shuffle and plain.options.shuffle is False  # the attribute, as mosaicml-streaming sets it


def test_map_filter_batch_match_hf(jsonl_dir):
    datasets = pytest.importorskip("datasets")
    hf = datasets.load_dataset("json", data_files=sorted(
        f"{jsonl_dir}/{n}" for n in ("part0.jsonl", "part1.jsonl", "part2.jsonl")), split="train", streaming=True)
    ours = ss.StreamingDataset(local=jsonl_dir)

    def words(b):
        return {"n": [len(t.split()) for t in b["text"]]}

    def chain(d):
        return (d.map(words, batched=True, batch_size=16, remove_columns=["text"]).filter(lambda r: r["n"] % 2 == 0)
                .rename_column("n", "count").map(lambda r: {"twice": r["count"] * 2}))
    assert list(chain(ours)) == list(chain(hf))
    assert list(chain(ours).select_columns(["id"]).batch(7)) == list(chain(hf).select_columns(["id"]).batch(7))
    got = [b["id"] for b in chain(ours).batch(7, drop_last_batch=True)]
    want = [b["id"] for b in chain(hf).batch(7, drop_last_batch=True)]
    assert got == want


def test_batched_map_may_change_the_row_count(jsonl_dir):
    ds = ss.StreamingDataset(local=jsonl_dir)

    def split_words(b):
        out = [w for t in b["text"] for w in t.split()]
        return {"word": out}
    words = [r["word"] for r in ds.map(split_words, batched=True, batch_size=10, remove_columns=["id", "text"])]
    assert words == [w for r in ds for w in r["text"].split()]
    chain = ds.map(split_words, batched=True, batch_size=10, remove_columns=["id", "text"]).shuffle(seed=3,
                                                                                                    buffer_size=40)
    full = [r["word"] for r in chain]
    for k in (0, 7, 301):
        c = ds.map(split_words, batched=True, batch_size=10, remove_columns=["id", "text"]).shuffle(seed=3,
                                                                                                  buffer_size=40)
        it = iter(c)
        head = [next(it)["word"] for _ in range(k)]
        state = json.loads(json.dumps(c.state_dict()))
        c2 = ds.map(split_words, batched=True, batch_size=10, remove_columns=["id", "text"]).shuffle(seed=3,
                                                                                                   buffer_size=40)
        c2.load_state_dict(state)
        assert head + [r["word"] for r in c2] == full


def test_take_skip_formats(jsonl_dir):
    ds = ss.StreamingDataset(local=jsonl_dir)
    ids = [r["id"] for r in ds]
    assert [r["id"] for r in ds.skip(5).take(10)] == ids[5:15]
    batch = next(iter(ds.select_columns(["id"]).batch(4).with_format("numpy")))
    assert isinstance(batch["id"], np.ndarray) and batch["id"].tolist() == ids[:4]
    torch = pytest.importorskip("torch")
    batch = next(iter(ds.select_columns(["id"]).with_format("torch").iter(batch_size=4)))
    assert isinstance(batch["id"], torch.Tensor) and batch["id"].tolist() == ids[:4]
    with pytest.raises(InvalidArgumentError, match="with_format"):
        ds.with_format("arrow")


def test_errors_name_the_sample_and_keep_the_traceback(jsonl_dir):
    ds = ss.StreamingDataset(local=jsonl_dir)

    def boom(row):
        if row["id"] == 1005:
            raise ValueError("bad row here")
        return {}
    with pytest.raises(TransformError) as info:
        list(ds.map(boom))
    msg = str(info.value)
    assert "bad row here" in msg and "part1.jsonl" in msg and "row 5" in msg and "boom" in msg
    assert isinstance(info.value.__cause__, ValueError)
    assert len(list(ds.map(boom, skip_errors=True))) == len(ds) - 1
    with pytest.raises(TransformError, match="missing"):
        list(ds.map(lambda r: {"x": r["nope"]}))
    with pytest.raises(InvalidArgumentError, match="batch_size"):
        ds.map(lambda b: b, batched=True, batch_size=0)
    with pytest.raises(InvalidArgumentError, match="must return a dict"):
        list(ds.map(lambda r: 3))


def test_state_refused_for_another_chain(jsonl_dir):
    ds = ss.StreamingDataset(local=jsonl_dir)
    a = ds.shuffle(seed=1, buffer_size=10)
    it = iter(a)
    next(it)
    with pytest.raises(IncompatibleStateError, match="another pipeline"):
        ds.shuffle(seed=2, buffer_size=10).load_state_dict(a.state_dict())
    with pytest.raises(IncompatibleStateError, match="not a pipeline state"):
        a.load_state_dict(ds.state_dict())
    assert a.fingerprint() == ds.shuffle(seed=1, buffer_size=10).fingerprint()
    assert ds.map(lambda r: {"a": 1}).fingerprint() != ds.map(lambda r: {"a": 2}).fingerprint()


def test_epochs_advance_and_resume_across_epoch_end(jsonl_dir):
    ds = ss.StreamingDataset(local=jsonl_dir, shuffle=True)
    chain = ds.shuffle(seed=0, buffer_size=20)
    e0 = [r["id"] for r in chain]
    e1 = [r["id"] for r in chain]
    assert sorted(e0) == sorted(e1) and e0 != e1
    state = chain.state_dict()
    assert state["epoch"] == 1 and state["complete"]
    again = ds.shuffle(seed=0, buffer_size=20)
    again.load_state_dict(state)
    assert sorted(r["id"] for r in again) == sorted(e0)


def test_interleave_datasets_sizes_and_probabilities(two_dirs):
    a, b = (ss.StreamingDataset(local=d) for d in two_dirs)
    mix = ss.interleave_datasets([a, b], probabilities=[0.5, 0.5], seed=0)
    ids = [r["id"] for r in mix]
    assert len(ids) == 2 * min(len(a), len(b))
    from_b = sum(i >= 100_000 for i in ids)
    assert from_b == len(b) and len(set(ids)) == len(ids)
    longest = ss.interleave_datasets([a, b], probabilities=[0.5, 0.5], seed=0, stopping_strategy="all_exhausted")
    assert len(list(longest)) == 2 * max(len(a), len(b))
    with pytest.raises(InvalidArgumentError, match="after interleave_datasets"):
        ss.interleave_datasets([a.map(lambda r: r), b])
    with pytest.raises(InvalidArgumentError, match="stopping_strategy"):
        ss.interleave_datasets([a, b], stopping_strategy="never")


def fails_on_1005(row):
    if row["id"] == 1005:
        raise ValueError("bad row here")
    return {}


def test_an_error_in_a_dataloader_worker_reaches_the_loop_with_its_place(jsonl_dir):
    pytest.importorskip("torch")
    chain = ss.StreamingDataset(local=jsonl_dir).map(fails_on_1005)
    loader = ss.StreamingDataLoader(chain, batch_size=4, num_workers=1)
    with pytest.raises(TransformError) as info:
        for _ in loader:
            pass
    msg = str(info.value)
    assert "bad row here" in msg and "part1.jsonl" in msg and "fails_on_1005" in msg


async def every_third(row):
    await asyncio.sleep(0)
    return row["id"] % 3 == 0


async def doubled(row):
    await asyncio.sleep(0)
    return {"twice": row["id"] * 2}


async def doubled_batch(batch):
    await asyncio.sleep(0)
    return {"twice": [i * 2 for i in batch["id"]]}


def test_async_functions_are_awaited_by_map_and_filter(jsonl_dir):
    ds = ss.StreamingDataset(local=jsonl_dir)
    ids = [r["id"] for r in ds]
    assert [r["id"] for r in ds.filter(every_third)] == [i for i in ids if i % 3 == 0]
    assert [r["twice"] for r in ds.map(doubled)] == [2 * i for i in ids]
    assert [r["twice"] for r in ds.map(doubled_batch, batched=True, batch_size=7)] == [2 * i for i in ids]

    async def keep_batch(batch):
        return [i % 3 == 0 for i in batch["id"]]
    assert [r["id"] for r in ds.filter(keep_batch, batched=True, batch_size=10)] == [i for i in ids if i % 3 == 0]
    assert [r["id"] for r in ds.filter(lambda r: every_third(r))] == [i for i in ids if i % 3 == 0]
    datasets = pytest.importorskip("datasets")
    hf = datasets.load_dataset("json", data_files=sorted(
        f"{jsonl_dir}/{n}" for n in ("part0.jsonl", "part1.jsonl", "part2.jsonl")), split="train", streaming=True)
    assert list(ds.filter(every_third).map(doubled)) == list(hf.filter(every_third).map(doubled))


def test_async_functions_overlap_in_a_group_on_one_loop_and_resume(jsonl_dir):
    ds = ss.StreamingDataset(local=jsonl_dir)
    seen = {"now": 0, "most": 0, "loops": set()}

    async def slow_keep(row):
        seen["loops"].add(id(asyncio.get_running_loop()))
        seen["now"] += 1
        seen["most"] = max(seen["most"], seen["now"])
        await asyncio.sleep(0.001)
        seen["now"] -= 1
        return row["id"] % 2 == 0
    full = [r["id"] for r in ds.filter(slow_keep)]
    assert full == [r["id"] for r in ds if r["id"] % 2 == 0]
    assert seen["most"] > 1 and len(seen["loops"]) == 1  # a group's rows at once, one loop for the pass
    chain = ds.filter(slow_keep)
    it = iter(chain)
    head = [next(it)["id"] for _ in range(37)]
    state = json.loads(json.dumps(chain.state_dict()))
    chain.close()
    again = ds.filter(slow_keep)
    again.load_state_dict(state)
    assert head + [r["id"] for r in again] == full


def test_async_errors_name_the_row_and_bad_uses_are_refused(jsonl_dir):
    ds = ss.StreamingDataset(local=jsonl_dir)

    async def boom(row):
        if row["id"] == 1005:
            raise ValueError("bad row here")
        return True
    with pytest.raises(TransformError) as info:
        list(ds.filter(boom))
    assert "bad row here" in str(info.value) and "part1.jsonl" in str(info.value) and "row 5" in str(info.value)
    assert len(list(ds.filter(boom, skip_errors=True))) == len(ds) - 1

    async def rows(row):
        yield row
    with pytest.raises(InvalidArgumentError, match="async generator"):
        ds.filter(rows)

    async def inside_a_loop():
        with pytest.raises(InvalidArgumentError, match="running event loop"):
            list(ds.filter(every_third))
        return [r["id"] for r in ds.filter(every_third).prefetch(4)]  # the chain runs in its own thread
    assert asyncio.run(inside_a_loop()) == [r["id"] for r in ds if r["id"] % 3 == 0]
