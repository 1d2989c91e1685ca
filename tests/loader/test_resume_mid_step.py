"""A state saved inside a global step, resumed on the same global batch, continues the same epoch plan:
(what was read before the save) + (what a fresh dataset reads after loading the state) is the
uninterrupted epoch, item for item, wherever the state was taken, on one rank and on two."""

from __future__ import annotations

import json

import numpy as np
import pytest

from shardstream import Stream, StreamingDataset
from shardstream.loaders.batches import BatchLoader
from shardstream.plan import EpochPlan, World
from shardstream.testing import read_world, write_dataset

N = 600
CONFIGS = {
    "natural": {},
    "py1e 3 regions": {"shuffle": True, "shuffle_algo": "py1e", "num_canonical_nodes": 3, "shuffle_block_size": 40},
    "py1b drop": {"shuffle": True, "shuffle_algo": "py1b", "num_canonical_nodes": 2, "shuffle_block_size": 64,
                  "epoch_tail": "drop"},
    "naive 5 regions": {"shuffle": True, "shuffle_algo": "naive", "num_canonical_nodes": 5},
}


@pytest.fixture(scope="module")
def ints(tmp_path_factory) -> str:
    out = tmp_path_factory.mktemp("midstep") / "ints"
    return write_dataset(out, {"id": "int"}, ({"id": i} for i in range(N)), size_limit=500)


def maker(local: str, **kwargs):
    return lambda bs: StreamingDataset(local=local, batch_size=bs, **kwargs)


def ids_of(samples) -> list[int]:
    return [s["id"] for s in samples]


def saved_after(make, bs: int, k: int, world: World = World()) -> tuple[dict, list[int]]:
    """A per-sample loop reads ``k`` samples and saves: (the state as JSON gives it back, what it read)."""
    ds = make(bs)
    it = ds.iterate(world)
    before = [next(it)["id"] for _ in range(k)]
    return json.loads(json.dumps(ds.state_dict())), before


def resumed(make, bs: int, state: dict, world: World = World()) -> list[int]:
    ds = make(bs)
    ds.load_state_dict(state)
    return ids_of(ds.iterate(world))


def sweep(total: int, g: int) -> list[int]:
    """Every position of the first three steps and of the last two, and some inside steps between (a state
    at the epoch's end resumes the next epoch)."""
    inside = [g * s + o for s in (7, 20, 33) for o in (1, g // 2, g - 1)]
    return sorted({*range(0, 3 * g + 1), *range(max(total - 2 * g, 0), total), *(p for p in inside if p < total)})


def test_the_probe_positions_resume_to_the_same_epoch(ints):
    make = maker(ints)
    full = ids_of(make(7).iterate(World()))
    assert len(full) == 602  # 86 whole steps of 7: the last one padded
    for k in (1, 3, 100, 401, 590):
        state, before = saved_after(make, 7, k)
        after = resumed(make, 7, state)
        assert len(before) + len(after) == 602, k
        assert before + after == full, k


@pytest.mark.parametrize("config", CONFIGS)
def test_one_rank_resumes_exactly_from_any_position(ints, config):
    make, g = maker(ints, **CONFIGS[config]), 7
    full = ids_of(make(g).iterate(World()))
    assert len(full) % g == 0
    for k in sweep(len(full), g):
        state, before = saved_after(make, g, k)
        assert state["sample_in_epoch"] == k and state["segment_origin"] == 0
        after = resumed(make, g, state)
        assert before + after == full, f"resumed after {k} samples"


@pytest.mark.parametrize("config", ["py1e 3 regions", "py1b drop"])
def test_chained_resumes_inside_steps_stay_exact(ints, config):
    make, g = maker(ints, **CONFIGS[config]), 7
    full = ids_of(make(g).iterate(World()))
    state, read = saved_after(make, g, 3)
    for more in (5, 1, 13, 100, 2):  # each save lands inside a step of the resumed pass
        ds = make(g)
        ds.load_state_dict(state)
        it = ds.iterate(World())
        read += [next(it)["id"] for _ in range(more)]
        state = json.loads(json.dumps(ds.state_dict()))
        assert state["sample_in_epoch"] == len(read) and state["segment_origin"] == 0
    assert read + resumed(make, g, state) == full


def _rank_share(full: list[int], p: int, g: int, ranks: int, rank: int, workers: int, worker: int) -> list[int]:
    """The straight epoch's positions from ``p`` on that a rank's worker reads, in order: the rest of the
    step ``p`` interrupts cut evenly among the ranks in rank order, then the rank's slice of each whole
    step, the first step it reads going to worker 0 and the workers taking turns."""
    bs, rest = g // ranks, -p % g
    head = list(range(p + rank * rest // ranks, p + (rank + 1) * rest // ranks))
    whole = [q for q in range(p + rest, len(full)) if (q % g) // bs == rank]
    steps = ([head] if head else []) + [whole[i:i + bs] for i in range(0, len(whole), bs)]
    return [full[q] for i, step in enumerate(steps) if i % max(workers, 1) == worker for q in step]


@pytest.mark.parametrize("config,workers", [("natural", 0), ("py1b drop", 0), ("py1e 3 regions", 0),
                                            ("py1e 3 regions", 2)])
def test_two_ranks_resume_exactly_from_any_position(ints, config, workers):
    make, g = maker(ints, **CONFIGS[config]), 14
    full = ids_of(make(g).iterate(World()))
    for k in sweep(len(full), g):
        one, before = saved_after(make, g, k)  # saved by one rank with the same global batch
        ds = make(7)
        ds.iterate(World(ranks_per_node=2))
        two = ds.state_dict(num_samples=k)  # the job's count, on two ranks
        for state in (one, two):
            got = []
            for rank in range(2):
                for worker in range(max(workers, 1)):
                    world = World(ranks_per_node=2, local_rank=rank, num_workers=workers, worker=worker)
                    share = resumed(make, 7, state, world)
                    assert share == _rank_share(full, k, g, 2, rank, workers, worker), (k, rank, worker)
                    got += share
            assert len(got) == len(full) - k and sorted(got) == sorted(full[k:]), k
        assert before == full[:k]
        # the ranks' and workers' shares put back together as they deliver them: the rest of the epoch
        assert read_world(make, one, g, (1, 2, workers), key=lambda s: s["id"]) == full[k:], k


def test_column_batches_resume_with_the_rest_of_the_step(ints):
    make, g = maker(ints, shuffle=True, num_canonical_nodes=3), 7
    full = ids_of(make(g).iterate(World()))
    state, before = saved_after(make, g, 7 * 30 + 4)
    ds = make(g)
    ds.load_state_dict(state)
    sizes, got = [], []
    loader = BatchLoader(ds)
    for i, batch in enumerate(loader):
        sizes.append(len(batch["id"]))
        got += batch["id"].tolist()
        if i == 1:
            mid = loader.state_dict()
    assert sizes == [3] + [7] * (len(full) // 7 - 31)  # the rest of step 30, then whole steps
    assert before + got == full
    assert mid["sample_in_epoch"] == 7 * 32  # two batches: the end of step 31
    assert before + got[:10] + resumed(make, g, mid) == full


def test_a_mixture_resumes_exactly_from_any_position(tmp_path):
    paths = [write_dataset(tmp_path / t, {"id": "int"}, ({"id": base + i} for i in range(n)), size_limit=300)
             for t, base, n in (("a", 0, 70), ("b", 1000, 45))]

    def make(bs):
        return StreamingDataset(streams=[Stream(local=paths[0], proportion=2), Stream(local=paths[1], proportion=1)],
                                epoch_size=100, shuffle=True, batch_size=bs)

    g = 6
    full = ids_of(make(g).iterate(World()))
    assert len(full) == 102
    for k in sweep(len(full), g):
        state, before = saved_after(make, g, k)
        assert before + resumed(make, g, state) == full, k
        assert read_world(make, state, g, (1, 2, 2), key=lambda s: s["id"]) == full[k:], k


def test_a_state_of_a_segment_opened_inside_a_step_still_loads(ints):
    """States saved by earlier releases after a mid-step resume name a segment that starts at the resume
    position: they continue that segment, as they did."""
    make, g = maker(ints, shuffle=True, num_canonical_nodes=3, shuffle_block_size=40), 7
    state, before = saved_after(make, g, 45)
    plan = make(g).epoch_plan(0, World())
    segment = EpochPlan(plan.plan, 0, g, 45, plan.progress(45))
    want = segment.sample_ids(np.arange(45, segment.end)).tolist()
    old = dict(state, segment_origin=45, region_base=plan.progress(45).tolist())
    assert resumed(make, g, old) == want
    # and a state taken inside one of that segment's steps continues it too
    ds = make(g)
    ds.load_state_dict(old)
    it = ds.iterate(World())
    head = [next(it)["id"] for _ in range(10)]
    again = ds.state_dict()
    assert again["segment_origin"] == 45 and again["sample_in_epoch"] == 55
    assert head + resumed(make, g, again) == want
