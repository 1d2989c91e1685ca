"""How global steps are shared by regions and cut among nodes, ranks and workers: the global
order does not depend on the world, every position is read exactly once, replicas agree, and
each node reads only its own regions' shards."""

from __future__ import annotations

import dataclasses
import itertools
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shardstream.errors import InvalidArgumentError
from shardstream.plan import SHUFFLE_ALGOS, Plan, PlanSpec, World
from shardstream.plan.partition import RegionInterleave

from .oracle import sample_regions

PROPS = settings(max_examples=120, deadline=None, derandomize=True, database=None,
                 suppress_health_check=[HealthCheck.too_slow])


def _worlds(num_nodes, ranks_per_node, num_workers, replication=1):
    for node, local_rank, worker in itertools.product(range(num_nodes), range(ranks_per_node),
                                                      range(max(num_workers, 1))):
        yield World(num_nodes, ranks_per_node, node, local_rank, num_workers, worker, replication)


def _read(ep, world, start=None):
    """Positions and ids that ``world`` reads (flat), through iter_worker."""
    pos, ids = [], []
    for steps, batch in ep.iter_worker(world, start, chunk=50):
        pos.append(ep.worker_positions(world, steps).ravel())
        ids.append(batch.ravel())
    if not pos:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    return np.concatenate(pos), np.concatenate(ids)


# -- the region schedule ---------------------------------------------------------------------------

@PROPS
@given(regions=st.integers(1, 12), g=st.integers(1, 40), k=st.integers(0, 12))
def test_interleave_gives_every_region_its_samples_in_order_and_in_step(regions, g, k):
    sched = RegionInterleave(regions, g)
    pos = np.arange(k * g)
    c, q = sched.locate(pos // g, pos % g)
    assert ((c >= 0) & (c < regions)).all()
    for r in range(regions):
        # region r supplies its samples 0, 1, 2, ... in position order
        assert np.array_equal(q[c == r], np.arange((c == r).sum()))
    assert np.array_equal(np.bincount(c, minlength=regions), sched.consumed(k))
    counts = np.zeros(regions, np.int64)
    for x in range(k * g + 1):
        progress = sched.progress(x)
        assert np.array_equal(progress, counts)
        assert progress.sum() == x
        # every region at the same pace: within one sample at step boundaries, within one
        # step's share inside a step (the slices of a step go to different regions)
        assert progress.max() - progress.min() <= (1 if x % g == 0 else -(-g // regions) + 1)
        if x < k * g:
            counts[c[x]] += 1


@PROPS
@given(regions=st.integers(1, 12), g=st.integers(1, 40), data=st.data())
def test_interleave_steps_are_the_fewest_for_pad_and_the_most_for_drop(regions, g, data):
    sched = RegionInterleave(regions, g)
    length = data.draw(st.integers(0, 30))
    remaining = length + np.array(data.draw(st.lists(st.integers(0, 2), min_size=regions, max_size=regions)))
    steps = range(regions * (int(remaining.max()) + 2))  # a region supplies a sample at least every `regions` steps
    enough = [k for k in steps if (sched.consumed(k) >= remaining).all()]
    fits = [k for k in steps if (sched.consumed(k) <= remaining).all()]
    assert sched.steps(remaining, "pad") == enough[0]
    assert sched.steps(remaining, "drop") == fits[-1]


@pytest.mark.parametrize("regions,g,nodes", [(4, 8, 2), (4, 8, 4), (8, 24, 4), (6, 18, 3), (12, 60, 6), (8, 8, 8),
                                             (2, 6, 2), (9, 27, 3)])
def test_node_offsets_are_served_by_the_node_regions_only(regions, g, nodes):
    sched = RegionInterleave(regions, g)
    k = np.repeat(np.arange(20), g)
    o = np.tile(np.arange(g), 20)
    c, _ = sched.locate(k, o)
    node = o // (g // nodes)
    assert np.array_equal(c // (regions // nodes), node)


# -- the world ------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def grid_epoch():
    sizes = [37, 0, 120, 64, 9, 200, 1, 75, 33, 150, 18, 90]
    return Plan(sizes, PlanSpec(shuffle=True, algo="py1e", seed=21, num_canonical_nodes=4, block_size=50)).epoch(2, 64)


@pytest.mark.parametrize("num_nodes", [1, 2, 4])
@pytest.mark.parametrize("ranks_per_node", [1, 2, 8])
@pytest.mark.parametrize("num_workers", [0, 1, 2, 4])
def test_the_global_order_does_not_depend_on_the_world(grid_epoch, num_nodes, ranks_per_node, num_workers):
    ep = grid_epoch
    want = ep.sample_ids(np.arange(ep.end))
    got = np.full(ep.end, -1, np.int64)
    hits = np.zeros(ep.end, np.int64)
    bs = ep.global_batch // (num_nodes * ranks_per_node)
    for world in _worlds(num_nodes, ranks_per_node, num_workers):
        assert ep.device_batch(world) == bs
        steps = list(ep.worker_steps(world))
        assert steps == list(range(world.worker, ep.steps, world.workers))
        pos, ids = _read(ep, world)
        # rank r reads the slice [r*bs, (r+1)*bs) of each of its steps
        offsets = (pos - ep.origin) % ep.global_batch
        assert ((offsets // bs) == world.rank).all()
        assert np.array_equal(np.unique((pos - ep.origin) // ep.global_batch), steps)
        got[pos] = ids
        np.add.at(hits, pos, 1)
    assert (hits == 1).all()  # disjoint, and together every position
    assert np.array_equal(got, want)


@pytest.mark.parametrize("replication", [1, 2, 4, 8])
@pytest.mark.parametrize("num_workers", [0, 3])
def test_replicated_ranks_read_identical_samples(grid_epoch, replication, num_workers):
    ep = grid_epoch
    readers = {}
    hits = np.zeros(ep.end, np.int64)
    for world in _worlds(2, 4, num_workers, replication):
        assert world.readers == 8 // replication and world.reader == world.rank // replication
        pos, ids = _read(ep, world)
        key = (world.reader, world.worker)
        if key in readers:
            assert np.array_equal(readers[key][0], pos) and np.array_equal(readers[key][1], ids)
        else:
            readers[key] = (pos, ids)
            np.add.at(hits, pos, 1)
    assert (hits == 1).all()


def test_world_start_and_batch_checks(grid_epoch):
    ep = grid_epoch
    world = World(num_nodes=2, ranks_per_node=2, node=1, local_rank=1, num_workers=3, worker=2)
    assert list(ep.worker_steps(world, start=5 * 64)) == list(range(7, ep.steps, 3))
    assert ep.head(world, 5 * 64) is None
    # inside step 5: worker 0 of each rank reads the rest of its share of it first, then its whole steps
    first = World(num_nodes=2, ranks_per_node=2, node=1, local_rank=1, num_workers=3, worker=0)
    assert list(ep.worker_steps(first, start=5 * 64 + 1)) == list(range(5, ep.steps, 3))
    assert ep.head(first, 5 * 64 + 1).tolist() == list(range(5 * 64 + 48, 5 * 64 + 64))  # rank 3's quarter
    assert ep.head(world, 5 * 64 + 1) is None and list(ep.worker_steps(world, start=5 * 64 + 1)) == list(
        range(7, ep.steps, 3))
    rank0 = World(num_nodes=2, ranks_per_node=2, num_workers=3)
    assert ep.head(rank0, 5 * 64 + 1).tolist() == list(range(5 * 64 + 1, 5 * 64 + 16))
    # the rest of the step is cut evenly among the ranks, whatever part of it a rank had before
    rest = [ep.head(dataclasses.replace(rank0, local_rank=r % 2, node=r // 2), 5 * 64 + 16).tolist()
            for r in range(4)]
    assert rest == [list(range(5 * 64 + 16 + 12 * r, 5 * 64 + 28 + 12 * r)) for r in range(4)]
    assert list(ep.worker_steps(rank0, start=5 * 64 + 16)) == list(range(5, ep.steps, 3))
    # fewer positions left than ranks: a rank the rest leaves nothing begins with the next step
    assert ep.head(rank0, 6 * 64 - 2) is None and ep.rank_start(rank0, 6 * 64 - 2) == 6 * 64
    assert list(ep.worker_steps(rank0, start=6 * 64 - 2)) == list(range(6, ep.steps, 3))
    odd = Plan([30], PlanSpec()).epoch(0, 6)
    for bad in (World(num_nodes=4), World(ranks_per_node=5), World(num_nodes=2, ranks_per_node=2, replication=1)):
        with pytest.raises(InvalidArgumentError, match="global batch") as info:
            odd.device_batch(bad)
        assert "batch_size" in str(info.value)
        with pytest.raises(InvalidArgumentError):
            list(odd.iter_worker(bad))
    # with replication only the distinct readers must divide the global batch
    assert odd.device_batch(World(num_nodes=2, ranks_per_node=2, replication=2)) == 3


@pytest.mark.parametrize("kwargs,name", [
    ({"num_nodes": 0}, "num_nodes"), ({"num_nodes": -1}, "num_nodes"), ({"num_nodes": 2.0}, "num_nodes"),
    ({"num_nodes": True}, "num_nodes"), ({"ranks_per_node": 0}, "ranks_per_node"),
    ({"ranks_per_node": "2"}, "ranks_per_node"), ({"replication": 0}, "replication"),
    ({"replication": 3, "ranks_per_node": 4}, "replication"), ({"num_workers": -1}, "num_workers"),
    ({"num_workers": 1.5}, "num_workers"), ({"num_workers": False}, "num_workers"),
    ({"node": 1}, "node"), ({"node": -1}, "node"), ({"num_nodes": 2, "node": 2}, "node"),
    ({"local_rank": 1}, "local_rank"), ({"ranks_per_node": 4, "local_rank": 4}, "local_rank"),
    ({"local_rank": True}, "local_rank"), ({"worker": 1}, "worker"), ({"num_workers": 2, "worker": 2}, "worker"),
    ({"num_workers": 2, "worker": -1}, "worker"), ({"node": 0.0}, "node"),
])
def test_bad_world_fields_are_rejected(kwargs, name):
    with pytest.raises(InvalidArgumentError, match=name) as info:
        World(**kwargs)
    assert isinstance(info.value, ValueError)


def test_world_properties():
    w = World(num_nodes=3, ranks_per_node=4, node=2, local_rank=3, num_workers=0, replication=2)
    assert (w.world_size, w.rank, w.readers, w.reader, w.workers) == (12, 11, 6, 5, 1)
    v = World(num_nodes=3, ranks_per_node=4, node=2, local_rank=3, num_workers=4, worker=3, replication=2)
    assert (v.worker, v.num_workers, v.rank, v.replication) == (3, 4, 11, 2)


# -- locality ---------------------------------------------------------------------------------------

def _shard_of(plan):
    return lambda ids: np.searchsorted(np.cumsum(plan.run.sizes), ids, side="right")


def _node_reads(ep, num_nodes, node, ranks_per_node=2, num_workers=2):
    return np.concatenate([_read(ep, w)[1] for w in _worlds(num_nodes, ranks_per_node, num_workers)
                           if w.node == node])


@pytest.mark.parametrize("algo", [a for a in SHUFFLE_ALGOS if a != "naive"])
@pytest.mark.parametrize("num_canonical_nodes,num_nodes", [(4, 1), (4, 2), (4, 4), (8, 2), (8, 4), (6, 3)])
@pytest.mark.parametrize("tail", ["pad", "drop"])
def test_each_node_reads_only_the_shards_of_its_regions(algo, num_canonical_nodes, num_nodes, tail):
    sizes = [25] * 48
    num_shards = len(sizes)
    plan = Plan(sizes, PlanSpec(shuffle=True, algo=algo, seed=8, num_canonical_nodes=num_canonical_nodes,
                                block_size=40, tail=tail))
    shard_of = _shard_of(plan)
    run = plan.run
    piece_shard = shard_of(run.piece_gid)
    per = num_canonical_nodes // num_nodes
    g = 4 * num_canonical_nodes  # divisible by P * ranks_per_node
    for epoch in (0, 1):
        ep = plan.epoch(epoch, g)
        regions_of = sample_regions(ep)
        union = set()
        total = 0
        for node in range(num_nodes):
            ids = _node_reads(ep, num_nodes, node)
            mine = range(node * per, (node + 1) * per)
            assert np.isin(regions_of[ids], mine).all()
            shards = set(shard_of(ids).tolist())
            allowed = set(piece_shard[np.isin(run.piece_region, mine)].tolist())
            assert shards <= allowed
            if tail == "pad":
                assert shards == allowed
            # a node's regions are one contiguous stretch of the shard order
            assert len(shards) <= math.ceil(num_shards / num_nodes) + 1
            union |= shards
            total += len(shards)
        if tail == "pad":
            assert union == set(range(num_shards))
        assert total <= num_shards + num_nodes - 1  # only shards on a boundary between nodes are shared


@pytest.mark.parametrize("algo", [a for a in SHUFFLE_ALGOS if a != "naive"])
def test_locality_with_uneven_and_empty_shards(algo):
    sizes = [0, 40, 3, 0, 77, 12, 1, 0, 56, 30, 9, 64, 0, 21]
    plan = Plan(sizes, PlanSpec(shuffle=True, algo=algo, seed=3, num_canonical_nodes=6, block_size=16))
    shard_of = _shard_of(plan)
    piece_shard = shard_of(plan.run.piece_gid)
    ep = plan.epoch(4, 12)
    seen = set()
    pieces = 0
    for node in range(3):
        mine = np.isin(plan.run.piece_region, [2 * node, 2 * node + 1])
        shards = set(shard_of(_node_reads(ep, 3, node)).tolist())
        assert shards == set(piece_shard[mine].tolist())
        seen |= shards
        pieces += int(mine.sum())
    nonempty = set(np.flatnonzero(np.asarray(sizes)).tolist())
    assert seen == nonempty
    assert pieces <= len(nonempty) + plan.num_regions - 1  # a region boundary splits at most one shard


def test_naive_has_no_locality():
    """``naive`` is one permutation of the whole epoch: it is expected to ignore regions."""
    sizes = [25] * 48
    plan = Plan(sizes, PlanSpec(shuffle=True, algo="naive", seed=8, num_canonical_nodes=4))
    shard_of = _shard_of(plan)
    ep = plan.epoch(0, 16)
    for node in range(4):
        shards = set(shard_of(_node_reads(ep, 4, node)).tolist())
        assert len(shards) > 48 // 2
