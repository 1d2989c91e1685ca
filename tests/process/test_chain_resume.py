"""Chains resume exactly at every step on their own world, and with nothing repeated or lost on others."""

from __future__ import annotations

import collections
import functools
import json

import numpy as np
import pytest

import shardstream as ss
import shardstream.testing.chains
from shardstream.testing.chains import check_chain_resumes, run_world

WORLDS = [(1, 1, 0), (2, 2, 0), (4, 1, 0), (1, 1, 2), (2, 2, 2), (4, 1, 2)]  # 1x1, 2x2, 4x1; 0 and 2 workers


def roots(open_root):
    """``open_root(world)``, opened once per world (the checker reads many chains on each)."""
    return functools.lru_cache(maxsize=None)(open_root)


def words(batch):
    return {"n": [len(t.split()) for t in batch["text"]]}


def keep(row):
    return row["id"] % 5 != 0


def ids_of(item):
    return list(item["id"]) if isinstance(item["id"], list) else [item["id"]]


def test_buffer_map_filter_batch_every_step(jsonl_dir):
    root = roots(lambda world: ss.StreamingDataset(local=jsonl_dir, shuffle=True, shuffle_seed=9, world=world))

    def make(world):
        return root(world).shuffle(seed=4, buffer_size=40).map(words, batched=True, batch_size=9, lookahead=2).filter(
            keep).batch(6)
    report = check_chain_resumes(make, WORLDS[:3], atoms=ids_of, key=lambda b: b["id"])
    assert report.saves > 60 and report.resumes == report.saves * 3


def test_buffer_batched_map_filter_pack_every_step(jsonl_dir):
    root = roots(lambda world: ss.StreamingDataset(local=jsonl_dir, shuffle=True, world=world))

    def make(world):
        return (root(world).shuffle(seed=4, buffer_size=40).map(tokens, batched=True, batch_size=9,
                                                                remove_columns=["text"])
                .filter(keep).pack(seq_len=64, strategy="first_fit", num_bins=3))
    report = check_chain_resumes(make, [(1, 1, 0), (2, 1, 0), (1, 1, 2)], atoms=pack_atoms,
                                 key=lambda p: p["input_ids"].tobytes())
    assert report.saves > 100


def tokens(batch):
    """Distinct tokens per row: row ``id`` gives ``id * 100 + [0, 3 * words)``."""
    return {"input_ids": [np.arange(3 * len(t.split()), dtype=np.int32) + 100 * i
                          for t, i in zip(batch["text"], batch["id"])]}


def pack_atoms(item):
    return (item["input_ids"][item["segment_ids"] > 0]).tolist()


def test_mixing_schedule_buffer_batched_map_filter_pack(two_dirs):
    a, b = two_dirs
    schedule = ss.WeightSchedule([(0, [0.8, 0.2]), (300, [0.2, 0.8])])
    root = roots(lambda world: ss.StreamingDataset(streams=[ss.Stream(local=a), ss.Stream(local=b)],
                                                   weight_schedule=schedule, epoch_size=400, shuffle=True,
                                                   world=world))

    def make(world):
        return (root(world).shuffle(seed=1, buffer_size=30).map(tokens, batched=True, batch_size=8,
                                                                remove_columns=["text"])
                .filter(keep).pack(seq_len=48))
    report = check_chain_resumes(make, WORLDS, atoms=pack_atoms, key=lambda p: p["input_ids"].tobytes(),
                                 steps=[1, 9])
    assert report.resumes == report.saves * len(WORLDS)


def test_prefetch_counts_only_what_was_consumed(jsonl_dir):
    def make():
        return ss.StreamingDataset(local=jsonl_dir).shuffle(seed=2, buffer_size=25).map(
            words, batched=True, batch_size=5).prefetch(16)
    full = [r["id"] for r in make()]
    for k in (0, 3, 100):
        chain = make()
        it = iter(chain)
        head = [next(it)["id"] for _ in range(k)]
        state = json.loads(json.dumps(chain.state_dict()))
        chain.close()
        again = make()
        again.load_state_dict(state)
        assert head + [r["id"] for r in again] == full


def test_a_second_resume_continues_from_the_first(jsonl_dir):
    def make(world=None):
        return ss.StreamingDataset(local=jsonl_dir, world=world).shuffle(seed=2, buffer_size=25).filter(keep)
    full = collections.Counter(r["id"] for r in make())
    items, saved = run_world(make, (2, 1, 0), save_at=[11])
    done, states = saved[11]
    got, saved2 = run_world(make, (3, 1, 0), states, save_at=[17])
    done2, states2 = saved2[17]
    rest, _ = run_world(make, (1, 1, 0), states2)
    total = collections.Counter(r["id"] for r in items[:done] + got[:done2] + rest)
    assert total == full


def test_states_are_small(jsonl_dir):
    chain = ss.StreamingDataset(local=jsonl_dir).shuffle(seed=0, buffer_size=400)
    it = iter(chain)
    for _ in range(50):
        next(it)
    text = json.dumps(chain.state_dict())
    assert len(text) < 400 * 8 + 1500  # the buffer's positions, not its rows


@pytest.mark.parametrize("workers", [(0, 2), (2, 0), (2, 2), (2, 3)])
def test_dataloader_workers_resume(jsonl_dir, workers):
    pytest.importorskip("torch")
    w1, w2 = workers

    def make():
        ds = ss.StreamingDataset(local=jsonl_dir, shuffle=True)
        return ds.shuffle(seed=1, buffer_size=30).map(words, batched=True, batch_size=7).filter(keep)

    def run(w, steps=None, state=None):
        dl = ss.StreamingDataLoader(make(), batch_size=5, num_workers=w)
        if state is not None:
            dl.load_state_dict(state)
        got = []
        for i, batch in enumerate(dl):
            got.extend(batch["id"].tolist())
            if steps is not None and i + 1 >= steps:
                break
        return got, json.loads(json.dumps(dl.state_dict()))
    full, _ = run(0)
    head, state = run(w1, 9)
    tail, _ = run(w2, None, state)
    got, want = collections.Counter(head + tail), collections.Counter(full)
    # on other workers, what is left is dealt evenly among them: padded with fewer than one row per worker
    assert not want - got and sum((got - want).values()) < max(w2, 1) and set(got) == set(want)
    if w1 == w2:
        assert head + tail == run(w1)[0]


def test_a_state_saved_after_every_reader_ended_starts_the_next_epoch(jsonl_dir):
    def make(world=None):
        return ss.StreamingDataset(local=jsonl_dir, shuffle=True, world=world).shuffle(seed=2, buffer_size=25)
    chains = [make(w) for w in ss.testing.chains.readers_of((2, 1, 0))]
    for c in chains:
        for _ in c:
            pass
    states = [c.state_dict() for c in chains]
    nxt = make()
    nxt.load_state_dict(states)
    ids = [r["id"] for r in nxt]
    assert len(ids) == 600 and nxt.state_dict()["epoch"] == 1


def test_the_fingerprint_follows_files_and_order_settings(tmp_path):
    from shardstream.testing.datasets import write_text_rows

    d = write_text_rows(tmp_path / "d", files=1, rows=20)
    a = ss.StreamingDataset(local=d, shuffle=True, shuffle_seed=1).shuffle(buffer_size=4)
    assert a.fingerprint() != ss.StreamingDataset(local=d, shuffle=True, shuffle_seed=2).shuffle(
        buffer_size=4).fingerprint()
    before = a.fingerprint()
    path = tmp_path / "d" / "part0.jsonl"
    text = path.read_text().replace('"w', '"x')  # same rows, same sizes, new content
    import os
    import time
    time.sleep(0.01)
    path.write_text(text)
    os.utime(path, (time.time() + 5, time.time() + 5))
    assert ss.StreamingDataset(local=d, shuffle=True, shuffle_seed=1).shuffle(buffer_size=4).fingerprint() != before


def test_a_buffer_draws_a_new_order_each_epoch_and_resumes_in_it(jsonl_dir):
    plain = ss.StreamingDataset(local=jsonl_dir)  # the plan keeps the stored order: only the buffer shuffles

    def make():
        return plain.shuffle(seed=42, buffer_size=3)
    chain = make()
    e0 = [r["id"] for r in chain]
    chain.set_epoch(1)
    e1 = [r["id"] for r in chain]
    assert sorted(e0) == sorted(e1) and e0 != e1
    again = make()
    assert [r["id"] for r in again] == e0 and [r["id"] for r in again] == e1  # iterating again: the next epoch
    again.set_epoch(0)
    assert [r["id"] for r in again] == e0
    for k in (0, 1, 250, 599):
        chain = make()
        chain.set_epoch(1)
        it = iter(chain)
        head = [next(it)["id"] for _ in range(k)]
        state = json.loads(json.dumps(chain.state_dict()))
        chain.close()
        resumed = make()
        resumed.load_state_dict(state)
        assert head + [r["id"] for r in resumed] == e1


def test_a_chain_over_mds_shards_saves_its_state_mid_pass(tmp_path):
    """An MDS shard's index entry has a ``version`` (its format's), which is no data file's piece."""
    with ss.MDSWriter(out=str(tmp_path / "ds"), columns={"id": "int"}, size_limit=200) as writer:
        for i in range(60):
            writer.write({"id": i})

    def make():
        return ss.StreamingDataset(local=str(tmp_path / "ds")).filter(lambda r: r["id"] % 3 != 0)
    full = [r["id"] for r in make()]
    first = make()
    it = iter(first)
    head = [next(it)["id"] for _ in range(7)]
    state = json.loads(json.dumps(first.state_dict()))
    again = make()
    again.load_state_dict(state)
    assert head + [r["id"] for r in again] == full and len(full) == 40
