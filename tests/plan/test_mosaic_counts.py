"""epoch_tail="mosaic": epoch sizes that follow mosaicml-streaming's rules, read and resumed exactly.

The expected counts are worked out here from the rules as stated in plan/mosaic.py (rows per canonical
node, padding to whole nodes and ranks); tests/interop/test_mosaic_counts.py checks the same counts
against the real package.
"""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings, strategies as st

from shardstream import InvalidArgumentError, StreamingDataset, Stream
from shardstream.plan import Plan, PlanSpec, World
from shardstream.testing import write_dataset


def expected_per_rank(n: int, c: int, p: int, r: int) -> int:
    rows = -(-n // c)
    if c < p:  # each canonical row is split over p // c nodes: whole shares only
        rows += -rows % (p // c)
    return -(-(c * rows) // (p * r))


def read_all(plan: Plan, p: int, r: int, w: int, b: int, start: int = 0) -> dict:
    out = {}
    for node, rank, worker in itertools.product(range(p), range(r), range(w)):
        world = World(num_nodes=p, ranks_per_node=r, node=node, local_rank=rank, num_workers=w, worker=worker)
        epoch = plan.epoch(3, b * p * r, world=world).resume(start, b * p * r)
        out[node, rank, worker] = [row.tolist() for _, ids in epoch.iter_worker(world) for row in ids]
    return out


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 400), c=st.sampled_from([1, 2, 4, 8]), p=st.sampled_from([1, 2, 4]), r=st.integers(1, 5),
       w=st.integers(1, 3), b=st.integers(1, 9), shuffle=st.booleans())
def test_counts_follow_the_rules_and_every_sample_is_read(n, c, p, r, w, b, shuffle):
    if (c < p and p % c) or (p < c and c % p):
        return
    plan = Plan([n // 3, n - n // 3], PlanSpec(shuffle=shuffle, num_canonical_nodes=c, tail="mosaic"))
    got = read_all(plan, p, r, w, b)
    per_rank = expected_per_rank(n, c, p, r)
    seen = set()
    for (node, rank, worker), batches in got.items():
        for batch in batches[:-1]:
            assert len(batch) == b
        seen.update(i for batch in batches for i in batch)
    for node, rank in itertools.product(range(p), range(r)):
        assert sum(len(x) for wk in range(w) for x in got[node, rank, wk]) == per_rank
    assert seen == set(range(n))


def test_unequal_node_counts_are_refused_with_the_reason():
    plan = Plan([50, 67], PlanSpec(num_canonical_nodes=3, tail="mosaic"))
    with pytest.raises(ValueError, match="divide one another"):
        plan.epoch(0, 8, world=World(num_nodes=2, ranks_per_node=4))
    with pytest.raises(InvalidArgumentError, match="pass world="):
        plan.epoch(0, 8)


@pytest.fixture(scope="module")
def ints(tmp_path_factory) -> str:
    out = tmp_path_factory.mktemp("mosaic") / "ints"
    return write_dataset(out, {"id": "int"}, ({"id": i} for i in range(117)), size_limit=400)


def test_dataset_length_and_resume_at_every_step(ints):
    world = World(ranks_per_node=3)
    ds = StreamingDataset(local=ints, batch_size=4, shuffle=True, epoch_tail="mosaic", world=world)
    assert len(ds) == 39 and ds.size == 117
    whole = StreamingDataset(local=ints, batch_size=4, shuffle=True, epoch_tail="mosaic")
    order = [s["id"] for s in whole.iterate(World())]
    assert len(order) == 117 and sorted(order) == list(range(117))  # one rank, one canonical node: no repeat
    for done in range(0, 118, 4):
        ds = StreamingDataset(local=ints, batch_size=4, shuffle=True, epoch_tail="mosaic")
        ds.load_state_dict(whole.state_dict(num_samples=done))
        assert [s["id"] for s in ds.iterate(World())] == order[done:]


def test_resume_on_another_world_reads_the_rest_once(ints):
    ds = StreamingDataset(local=ints, batch_size=6, epoch_tail="mosaic", shuffle=True)
    state = ds.state_dict(num_samples=36)
    first = [s["id"] for s in ds.iterate(World())][:36]
    rest = []
    for rank in range(2):
        again = StreamingDataset(local=ints, batch_size=3, epoch_tail="mosaic", shuffle=True)
        again.load_state_dict(state)
        rest += [s["id"] for s in again.iterate(World(ranks_per_node=2, local_rank=rank))]
    assert len(rest) == 82 and set(first) | set(rest) == set(range(117))  # 81 left, padded to 2 ranks


def test_state_after_a_short_last_step_ends_the_epoch(ints):
    ds = StreamingDataset(local=ints, batch_size=4, epoch_tail="mosaic", num_canonical_nodes=1)
    world = World(ranks_per_node=2, local_rank=1, num_workers=2, worker=1)
    assert sum(1 for _ in ds.iterate(world)) == 28  # 59 per rank: batches 1, 3, ... 13 (short: 3)
    assert ds.state_dict(num_samples=118)["sample_in_epoch"] == 118
    again = StreamingDataset(local=ints, batch_size=4, epoch_tail="mosaic", num_canonical_nodes=1)
    again.load_state_dict(ds.state_dict(num_samples=118))
    assert next(iter(again))["id"] is not None and again.cursor.current.epoch == 1


def test_mixed_streams_refuse_the_mosaic_tail(ints):
    with pytest.raises(InvalidArgumentError, match="one source"):
        StreamingDataset(streams=[Stream(local=ints, repeat=2)], batch_size=4,
                         epoch_tail="mosaic")
