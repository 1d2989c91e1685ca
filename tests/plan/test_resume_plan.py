"""Resuming an epoch: on the same global batch the plan continues unchanged for any world, from a
step boundary or from inside a step;
with another global batch (at any position, mid-step too, and repeatedly) no sample is
repeated or skipped across the resume points."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shardstream.errors import InvalidArgumentError
from shardstream.plan import STEP_TAILS, SHUFFLE_ALGOS, Plan, PlanSpec, World

from .oracle import sample_regions

PROPS = settings(max_examples=120, deadline=None, derandomize=True, database=None,
                 suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def _with_tail(plan, tail):
    spec = plan.spec
    return Plan(plan.run.sizes, PlanSpec(spec.shuffle, spec.algo, spec.seed, spec.num_canonical_nodes,
                                         spec.block_size, tail))


class Regions:
    """Each region's samples in the order it supplies them, read off a fresh epoch with G = 1
    (and tail='pad', so that every region is read to its end)."""

    def __init__(self, plan, epoch) -> None:
        ep = _with_tail(plan, "pad").epoch(epoch, 1)
        ids = ep.sample_ids(np.arange(ep.end))
        self.plan = plan
        self.of = sample_regions(ep)  # region of every sample id
        lengths = np.diff(plan.run.region_bounds)
        self.orders = [ids[self.of[ids] == c][: lengths[c]] for c in range(plan.num_regions)]
        assert [o.size for o in self.orders] == lengths.tolist()
        assert np.unique(np.concatenate(self.orders + [np.zeros(0, np.int64)])).size == plan.num_samples

    def check(self, ids, tail):
        """``ids`` (an epoch read across resume points) gives every region's samples in the region's
        own order, each once; pad then repeats samples of a region only after all of them were read."""
        for c, order in enumerate(self.orders):
            mine = ids[self.of[ids] == c]
            head = min(mine.size, order.size)
            assert np.array_equal(mine[:head], order[:head]), f"region {c} skipped or repeated a sample"
            if tail == "pad":
                assert mine.size >= order.size
        if tail == "pad":
            assert np.unique(ids).size == self.plan.num_samples
        else:
            assert np.unique(ids).size == ids.size


_specs = st.builds(PlanSpec, shuffle=st.booleans(), algo=st.sampled_from(SHUFFLE_ALGOS), seed=st.integers(0, 2**32),
                   num_canonical_nodes=st.integers(1, 7), block_size=st.integers(1, 40),
                   tail=st.sampled_from(STEP_TAILS))


_sizes = st.lists(st.integers(0, 40), min_size=1, max_size=10)


# -- same global batch ------------------------------------------------------------------------------

@pytest.mark.parametrize("algo", SHUFFLE_ALGOS)
@pytest.mark.parametrize("tail", STEP_TAILS)
def test_resume_on_a_step_boundary_continues_the_same_plan_for_any_world(algo, tail):
    plan = Plan([13, 0, 22, 9, 31], PlanSpec(shuffle=True, algo=algo, seed=4, num_canonical_nodes=2, block_size=7,
                                             tail=tail))
    g = 8
    ep = plan.epoch(1, g)
    want = ep.sample_ids(np.arange(ep.end))
    worlds = [(1, 1, 0), (2, 1, 2), (1, 4, 3), (2, 2, 0), (4, 2, 1)]
    for k in range(ep.steps + 1):
        again = ep.resume(k * g, g)
        assert again is ep
        for num_nodes, ranks_per_node, num_workers in worlds:
            got = np.full(ep.end, -1, np.int64)
            for node, rank, worker in itertools.product(range(num_nodes), range(ranks_per_node),
                                                        range(max(num_workers, 1))):
                world = World(num_nodes, ranks_per_node, node, rank, num_workers, worker)
                steps = again.worker_steps(world, start=k * g)
                assert list(steps) == list(range(k + worker, ep.steps, max(num_workers, 1)))
                for ks, ids in again.iter_worker(world, start=k * g):
                    pos = again.worker_positions(world, ks)
                    assert (got[pos] == -1).all()
                    got[pos] = ids
            assert (got[: k * g] == -1).all()
            assert np.array_equal(got[k * g:], want[k * g:])


def _read_from(ep, world, start):
    """``(positions, ids)`` of what ``world``'s worker reads from ``start`` on, and its steps done as it goes."""
    head = ep.head(world, start)
    pos, ids, done = [], [], []
    for i, (ks, rows) in enumerate(ep.iter_worker(world, start=start)):
        at = head[None, :] if i == 0 and head is not None else ep.worker_positions(world, ks)
        assert at.shape == rows.shape
        for row_pos, row in zip(at, rows):
            pos.extend(row_pos.tolist())
            ids.extend(row.tolist())
            done.append(ep.steps_done(world, start, len(pos)))
    assert done == list(range(1, len(done) + 1))  # each row is one step wholly read
    return pos, ids


@pytest.mark.parametrize("algo", ["py1e", "py1b", "naive"])
@pytest.mark.parametrize("tail", STEP_TAILS)
def test_resume_inside_a_step_continues_the_same_plan_for_any_world(algo, tail):
    plan = Plan([13, 0, 22, 9, 31], PlanSpec(shuffle=True, algo=algo, seed=4, num_canonical_nodes=3, block_size=7,
                                             tail=tail))
    g = 8
    ep = plan.epoch(1, g)
    want = ep.sample_ids(np.arange(ep.end))
    worlds = [(1, 1, 0), (1, 1, 3), (1, 2, 0), (2, 2, 2), (1, 8, 0), (2, 1, 3)]
    for p in range(ep.end):
        assert ep.resume(p, g) is ep
        for num_nodes, ranks_per_node, num_workers in worlds:
            got = np.full(ep.end, -1, np.int64)
            for node, rank, worker in itertools.product(range(num_nodes), range(ranks_per_node),
                                                        range(max(num_workers, 1))):
                world = World(num_nodes, ranks_per_node, node, rank, num_workers, worker)
                pos, ids = _read_from(ep, world, p)
                assert pos == sorted(pos) and all(q >= p for q in pos)
                assert (got[pos] == -1).all()
                got[pos] = ids
            assert (got[:p] == -1).all() and np.array_equal(got[p:], want[p:]), (p, num_nodes, ranks_per_node)


# -- another global batch ---------------------------------------------------------------------------

@pytest.mark.parametrize("algo", SHUFFLE_ALGOS)
@pytest.mark.parametrize("tail", STEP_TAILS)
@pytest.mark.parametrize("g1,g2", [(6, 4), (4, 6), (5, 5), (3, 16), (16, 3), (7, 1)])
def test_resume_with_another_global_batch_at_every_position(algo, tail, g1, g2):
    plan = Plan([11, 0, 17, 6, 25], PlanSpec(shuffle=True, algo=algo, seed=12, num_canonical_nodes=3, block_size=6,
                                             tail=tail))
    ep = plan.epoch(2, g1)
    regions = Regions(plan, 2)
    before = ep.sample_ids(np.arange(ep.end))
    for p in range(ep.end + 1):
        new = ep.resume(p, g2)
        if g2 == g1:  # the same steps: the plan goes on, from inside a step too
            assert new is ep
            continue
        assert new.origin == p and new.global_batch == g2 and new.end - p == new.steps * g2
        assert np.array_equal(new.base, ep.progress(p))
        after = new.sample_ids(np.arange(p, new.end))
        regions.check(np.concatenate([before[:p], after]), tail)
        _check_fewest_or_most_steps(plan, ep, p, new, before[:p], after)


def _check_fewest_or_most_steps(plan, ep, p, new, head, after):
    n = plan.num_samples
    g = new.global_batch
    if plan.spec.tail == "pad":
        if new.steps:  # one step less leaves some sample out
            assert np.unique(np.concatenate([head, after[:-g]])).size < n
    else:  # one step more would repeat a sample: read it from the pad version of the same segment
        pad = _with_tail(plan, "pad").epoch(ep.epoch, g, new.origin, new.base)
        if pad.steps > new.steps:
            more = np.concatenate([head, pad.sample_ids(np.arange(p, new.end + g))])
            assert np.unique(more).size < more.size


@PROPS
@given(sizes=_sizes, spec=_specs, epoch=st.integers(0, 4), batches=st.lists(st.integers(1, 24), min_size=2,
       max_size=4), cuts=st.lists(st.floats(0, 1), min_size=3, max_size=3))
def test_chained_resumes_with_changing_global_batches(sizes, spec, epoch, batches, cuts):
    plan = Plan(sizes, spec)
    ep = plan.epoch(epoch, batches[0])
    pieces = []
    pos = 0
    for g, cut in zip(batches[1:], cuts):
        p = pos + int(cut * (ep.end - pos))
        pieces.append(ep.sample_ids(np.arange(pos, p)))
        progress = ep.progress(p)
        assert progress.sum() == p  # per-region counts always add up to the position
        nxt = ep.resume(p, g)
        assert nxt is ep or (nxt.origin == p and np.array_equal(nxt.base, progress))
        ep, pos = nxt, p
    pieces.append(ep.sample_ids(np.arange(pos, ep.end)))
    ids = np.concatenate(pieces)
    assert ids.size == ep.end
    regions = Regions(plan, epoch)
    regions.check(ids, spec.tail)
    # progress counts exactly what each region supplied, padding included
    reg = regions.of
    for x in sorted({0, pos, (pos + ep.end) // 2, ep.end}):
        if x >= ep.origin:
            assert np.array_equal(ep.progress(x), np.bincount(reg[ids[:x]], minlength=plan.num_regions))


@PROPS
@given(sizes=_sizes, spec=_specs, g1=st.integers(1, 16), g2=st.sampled_from([1, 2, 4, 8, 16]),
       cut=st.floats(0, 1))
def test_a_new_segment_is_read_the_same_by_every_world(sizes, spec, g1, g2, cut):
    ep = Plan(sizes, spec).epoch(0, g1)
    new = ep.resume(int(cut * ep.end), g2)
    want = new.sample_ids(np.arange(new.origin, new.end))
    for num_nodes, ranks_per_node, num_workers in [(1, 1, 0), (2, 1, 3), (1, 2, 2), (2, 4, 0)]:
        if g2 % (num_nodes * ranks_per_node):
            continue
        got = np.full(want.size, -1, np.int64)
        for node, rank, worker in itertools.product(range(num_nodes), range(ranks_per_node),
                                                    range(max(num_workers, 1))):
            world = World(num_nodes, ranks_per_node, node, rank, num_workers, worker)
            for ks, ids in new.iter_worker(world):
                pos = new.worker_positions(world, ks) - new.origin
                assert (got[pos] == -1).all()
                got[pos] = ids
        assert np.array_equal(got, want)


def test_resume_of_a_resumed_segment_on_its_own_boundary_continues_it():
    ep = Plan([50, 30], PlanSpec(shuffle=True, num_canonical_nodes=2)).epoch(0, 8)
    new = ep.resume(13, 6)
    assert new.resume(13 + 6 * 3, 6) is new
    assert new.resume(14, 6) is new  # inside a step of the segment too
    other = new.resume(13 + 6 * 3, 5)
    assert other is not new and other.origin == 31
    assert list(new.worker_steps(World(), start=14)) == list(range(0, new.steps))


# -- validation ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("g", [0, -1, 1.0, 2.5, True, "4", None])
def test_resume_rejects_a_bad_global_batch(g):
    for batch in (1, 4):
        ep = Plan([20], PlanSpec()).epoch(0, batch)
        with pytest.raises(InvalidArgumentError, match="global batch"):
            ep.resume(4, g)


def test_resume_rejects_positions_outside_the_segment():
    ep = Plan([20], PlanSpec()).epoch(0, 4)
    for p in (-1, ep.end + 1):
        with pytest.raises(InvalidArgumentError, match="position"):
            ep.resume(p, 4)
    new = ep.resume(6, 3)
    with pytest.raises(InvalidArgumentError, match="position"):
        new.resume(5, 3)
    with pytest.raises(InvalidArgumentError, match="positions"):
        new.sample_ids([5])
