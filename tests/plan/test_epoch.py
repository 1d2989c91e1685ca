"""Epoch plans: coverage and length for every tail, natural order without shuffling,
variation across epochs and seeds, argument validation, and plans at a billion samples."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shardstream.errors import InvalidArgumentError
from shardstream.plan import STEP_TAILS, SHUFFLE_ALGOS, Plan, PlanSpec, World, default_block_size

from .oracle import sample_regions

PROPS = settings(max_examples=150, deadline=None, derandomize=True, database=None,
                 suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

_sizes = st.one_of(
    st.lists(st.integers(0, 60), min_size=1, max_size=25),  # assorted, zero-size shards included
    st.lists(st.integers(0, 400), min_size=1, max_size=1),  # one shard
    st.lists(st.integers(0, 2), min_size=50, max_size=200),  # many tiny shards
    st.lists(st.sampled_from([0, 0, 1, 97]), min_size=1, max_size=12),  # mostly empty
)

_specs = st.builds(PlanSpec, shuffle=st.booleans(), algo=st.sampled_from(SHUFFLE_ALGOS),
                   seed=st.integers(-(2**70), 2**70), num_canonical_nodes=st.integers(1, 8),
                   block_size=st.one_of(st.none(), st.integers(1, 64)), tail=st.sampled_from(STEP_TAILS))


def _all_ids(ep) -> np.ndarray:
    return ep.sample_ids(np.arange(ep.origin, ep.end))


def _slack(num_samples: int, num_regions: int, g: int) -> int:
    """Upper bound of ``end - N`` (pad) and ``N - end`` (drop) of a fresh epoch.

    With C regions (C <= N) of sizes L or L+1, d = gcd(C, G), a = G/d and b = C/d, the
    pad schedule takes the fewest k with k*a >= (r-1)*b + c%b + 1 for every region; the
    largest region (r = L+1 at most) and c%b <= b-1 give k*a <= r_max*b + a - 1, so
    k*G <= r_max*C + G - d while N >= C*r_max - (C-1). Symmetrically for drop.
    """
    c = min(num_regions, num_samples)
    return g - math.gcd(c, g) + c - 1


def region_streams(ep, ids) -> list[np.ndarray]:
    reg = sample_regions(ep)
    return [ids[reg[ids] == c] for c in range(ep.plan.num_regions)]


# -- coverage and length ----------------------------------------------------------------------

@PROPS
@given(sizes=_sizes, spec=_specs, epoch=st.integers(0, 6), g=st.integers(1, 48))
def test_every_epoch_covers_or_never_repeats(sizes, spec, epoch, g):
    plan = Plan(sizes, spec)
    n = plan.num_samples
    ep = plan.epoch(epoch, g)
    assert ep.steps * g == ep.end - ep.origin
    assert plan.num_regions == min(spec.num_canonical_nodes, n)
    ids = _all_ids(ep)
    if n == 0:
        assert ep.steps == 0 and ids.size == 0
        return
    assert ids.size == 0 or (ids.min() >= 0 and ids.max() < n)
    slack = _slack(n, spec.num_canonical_nodes, g)
    if spec.tail == "pad":
        assert np.unique(ids).size == n  # every sample at least once
        assert 0 <= ep.end - n <= slack
        # the fewest steps: one step less leaves some sample out
        assert np.unique(ids[: (ep.steps - 1) * g]).size < n
    else:
        assert np.unique(ids).size == ids.size  # every sample at most once
        assert 0 <= n - ep.end <= slack
        # the most steps: the pad plan's next step would repeat a sample
        pad = Plan(sizes, PlanSpec(spec.shuffle, spec.algo, spec.seed, spec.num_canonical_nodes, spec.block_size,
                                   "pad")).epoch(epoch, g)
        pad_ids = _all_ids(pad)
        assert np.array_equal(pad_ids[: ids.size], ids)  # drop is a prefix of pad
        if pad.steps > ep.steps:
            more = pad_ids[: (ep.steps + 1) * g]
            assert np.unique(more).size < more.size


@PROPS
@given(sizes=_sizes, spec=_specs, epoch=st.integers(0, 3), g1=st.integers(1, 30), g2=st.integers(1, 30))
def test_region_streams_do_not_depend_on_the_global_batch(sizes, spec, epoch, g1, g2):
    """Each region supplies its samples in one fixed order; the global batch only interleaves them."""
    plan = Plan(sizes, spec)
    a, b = plan.epoch(epoch, g1), plan.epoch(epoch, g2)
    for sa, sb in zip(region_streams(a, _all_ids(a)), region_streams(b, _all_ids(b))):
        m = min(sa.size, sb.size, int(np.diff(plan.run.region_bounds).max()))
        assert np.array_equal(sa[:m], sb[:m])


@pytest.mark.parametrize("sizes", [[10], [3, 0, 4, 9], [1] * 37, [0, 0, 25, 0], [100, 1, 1, 1]])
@pytest.mark.parametrize("g", [1, 2, 3, 7, 16, 64])
@pytest.mark.parametrize("algo", SHUFFLE_ALGOS)
def test_no_shuffle_one_region_is_the_natural_order(sizes, g, algo):
    n = sum(sizes)
    ep = Plan(sizes, PlanSpec(shuffle=False, algo=algo, num_canonical_nodes=1)).epoch(3, g)
    ids = _all_ids(ep)
    assert ep.end == -(-n // g) * g
    assert np.array_equal(ids[:n], np.arange(n))
    # padding repeats the latest samples, newest first
    assert np.array_equal(ids[n:], n - 1 - np.arange(ep.end - n) % n)
    drop = Plan(sizes, PlanSpec(shuffle=False, algo=algo, num_canonical_nodes=1, tail="drop")).epoch(0, g)
    assert np.array_equal(_all_ids(drop), np.arange(n // g * g))


@pytest.mark.parametrize("num_canonical_nodes", [2, 3, 5, 8, 50])
@pytest.mark.parametrize("g", [1, 4, 6, 10])
def test_no_shuffle_keeps_every_region_in_natural_order(num_canonical_nodes, g):
    sizes = [7, 0, 13, 2, 21, 1, 4]
    n = sum(sizes)
    c = min(num_canonical_nodes, n)
    ep = Plan(sizes, PlanSpec(num_canonical_nodes=num_canonical_nodes)).epoch(0, g)
    ids = _all_ids(ep)
    bounds = np.arange(c + 1) * n // c
    for r in range(c):
        mine = ids[(ids >= bounds[r]) & (ids < bounds[r + 1])]
        size = bounds[r + 1] - bounds[r]
        assert np.array_equal(mine[:size], np.arange(bounds[r], bounds[r + 1]))


def test_more_canonical_nodes_than_samples():
    for tail in STEP_TAILS:
        ep = Plan([2, 0, 1], PlanSpec(shuffle=True, num_canonical_nodes=8, tail=tail)).epoch(0, 2)
        assert ep.plan.num_regions == 3
        ids = _all_ids(ep)
        assert np.unique(ids).size == (3 if tail == "pad" else ids.size)


def test_empty_dataset():
    for sizes in ([], [0], [0, 0, 0]):
        ep = Plan(sizes, PlanSpec(shuffle=True, num_canonical_nodes=4)).epoch(0, 8)
        assert ep.steps == 0 and ep.end == 0 and ep.sample_ids([]).size == 0
        assert list(ep.iter_worker(World())) == []


def test_sample_ids_keep_shape_and_chunking_changes_nothing():
    ep = Plan([5000] * 60, PlanSpec(shuffle=True, num_canonical_nodes=3, block_size=1000)).epoch(1, 96)
    pos = np.arange(ep.end)
    whole = ep.sample_ids(pos)  # more than one internal chunk
    parts = np.concatenate([ep.sample_ids(pos[i:i + 777]) for i in range(0, pos.size, 777)])
    assert np.array_equal(whole, parts)
    assert ep.sample_ids(pos[:12].reshape(3, 4)).shape == (3, 4)
    assert np.array_equal(ep.sample_ids(pos[::-1]), whole[::-1])
    assert int(ep.sample_ids(17)) == whole[17]


# -- variation across epochs and seeds, fixed regions -------------------------------------------

@pytest.mark.parametrize("algo", SHUFFLE_ALGOS)
def test_orders_differ_between_epochs_and_seeds(algo):
    sizes = [40, 0, 25, 60, 33, 17, 50, 45]
    orders = {}
    for seed in (1, 2):
        plan = Plan(sizes, PlanSpec(shuffle=True, algo=algo, seed=seed, num_canonical_nodes=2, block_size=16))
        for epoch in (0, 1, 2):
            orders[seed, epoch] = tuple(_all_ids(plan.epoch(epoch, 10)))
    assert len(set(orders.values())) == len(orders)
    # and the same inputs always give the same order, from a fresh plan too
    again = Plan(sizes, PlanSpec(shuffle=True, algo=algo, seed=2, num_canonical_nodes=2, block_size=16))
    assert tuple(_all_ids(again.epoch(1, 10))) == orders[2, 1]


@pytest.mark.parametrize("algo", [a for a in SHUFFLE_ALGOS if a != "naive"])
@pytest.mark.parametrize("num_canonical_nodes", [2, 4])
def test_regions_hold_the_same_shards_in_every_epoch(algo, num_canonical_nodes):
    """Node n of P = C nodes reads region n only, and region n's samples do not change between epochs."""
    sizes = [30, 12, 0, 45, 8, 27, 33, 19, 5, 40]
    plan = Plan(sizes, PlanSpec(shuffle=True, algo=algo, seed=5, num_canonical_nodes=num_canonical_nodes,
                                block_size=8))
    g = 4 * num_canonical_nodes
    per_epoch = []
    for epoch in range(4):
        ep = plan.epoch(epoch, g)
        nodes = []
        for node in range(num_canonical_nodes):
            world = World(num_nodes=num_canonical_nodes, node=node)
            nodes.append(frozenset(np.concatenate([ids.ravel() for _, ids in ep.iter_worker(world)]).tolist()))
        per_epoch.append(nodes)
    assert all(nodes == per_epoch[0] for nodes in per_epoch)
    assert set().union(*per_epoch[0]) == set(range(plan.num_samples))
    # while the order inside each region does change
    assert len({tuple(_all_ids(plan.epoch(e, g))) for e in range(4)}) == 4


def test_pieces_are_reordered_every_epoch_within_their_region():
    sizes = [9, 14, 0, 11, 20, 7, 16, 5, 12, 18, 10, 6]
    plan = Plan(sizes, PlanSpec(shuffle=True, algo="py1s", seed=6, num_canonical_nodes=2, block_size=4))
    run = plan.run
    orders = set()
    for epoch in range(5):
        lay = plan.epoch(epoch, 2).layout
        # regions keep their pieces, contiguous and in region order
        assert np.array_equal(lay.piece_region, np.sort(lay.piece_region))
        for c in range(plan.num_regions):
            assert set(lay.piece_gid[lay.piece_region == c]) == set(run.piece_gid[run.piece_region == c])
        orders.add(tuple(lay.piece_gid))
        # through the plan: py1s with one region per node reads the node's pieces in this order
        for node in range(2):
            world = World(num_nodes=2, node=node)
            ids = np.concatenate([b.ravel() for _, b in plan.epoch(epoch, 2).iter_worker(world)])
            starts = lay.piece_gid[lay.piece_region == node]
            first_seen = [int(np.flatnonzero((ids >= s) & (ids < s + n))[0]) for s, n in
                          zip(starts, lay.piece_start[1:][lay.piece_region == node]
                              - lay.piece_start[:-1][lay.piece_region == node])]
            assert first_seen == sorted(first_seen)
    assert len(orders) == 5


def test_the_shard_order_depends_on_the_seed_only():
    sizes = [10] * 30
    a = Plan(sizes, PlanSpec(shuffle=True, seed=1, num_canonical_nodes=3))
    b = Plan(sizes, PlanSpec(shuffle=True, seed=1, num_canonical_nodes=3, algo="py1s", block_size=5))
    c = Plan(sizes, PlanSpec(shuffle=True, seed=2, num_canonical_nodes=3))
    assert np.array_equal(a.run.shard_order, b.run.shard_order)
    assert not np.array_equal(a.run.shard_order, c.run.shard_order)
    assert np.array_equal(Plan(sizes, PlanSpec(num_canonical_nodes=3)).run.shard_order, np.arange(30))


# -- validation ---------------------------------------------------------------------------------

@pytest.mark.parametrize("kwargs,name", [
    ({"algo": "py1x"}, "algo"), ({"algo": None}, "algo"), ({"tail": "wrap"}, "tail"),
    ({"num_canonical_nodes": 0}, "num_canonical_nodes"), ({"num_canonical_nodes": -2}, "num_canonical_nodes"),
    ({"num_canonical_nodes": 2.0}, "num_canonical_nodes"), ({"num_canonical_nodes": True}, "num_canonical_nodes"),
    ({"block_size": 0}, "block_size"), ({"block_size": 1.5}, "block_size"), ({"block_size": False}, "block_size"),
    ({"seed": 1.0}, "seed"), ({"seed": "7"}, "seed"), ({"seed": True}, "seed"), ({"seed": None}, "seed"),
])
def test_bad_plan_spec_fields_are_rejected(kwargs, name):
    with pytest.raises(InvalidArgumentError, match=name) as info:
        PlanSpec(**kwargs)
    assert isinstance(info.value, ValueError)


def test_plan_spec_defaults():
    spec = PlanSpec()
    assert (spec.shuffle, spec.algo, spec.seed, spec.num_canonical_nodes, spec.tail) == (False, "py1e", 9176, 1, "pad")
    assert spec.resolved_block_size == default_block_size(1) == 4_000_000
    assert PlanSpec(num_canonical_nodes=64).resolved_block_size == 1 << 18
    assert PlanSpec(block_size=5).resolved_block_size == 5
    assert PlanSpec(seed=-(2**80)).seed == -(2**80)


@pytest.mark.parametrize("sizes", [[3, -1], [[1, 2], [3, 4]]])
def test_bad_shard_sizes_are_rejected(sizes):
    with pytest.raises(InvalidArgumentError, match="shard sizes"):
        Plan(sizes, PlanSpec())


def test_too_many_samples_for_the_canonical_nodes_is_rejected():
    with pytest.raises(InvalidArgumentError, match="num_canonical_nodes"):
        Plan([2**59, 2**59], PlanSpec(num_canonical_nodes=4))
    Plan([2**59, 2**59], PlanSpec(num_canonical_nodes=3))


@pytest.mark.parametrize("g", [0, -4, 2.0, "8", True, None])
def test_bad_global_batch_is_rejected(g):
    plan = Plan([10, 10], PlanSpec())
    with pytest.raises(InvalidArgumentError, match="global batch"):
        plan.epoch(0, g)


def test_numpy_ints_are_fine_for_batch_and_epoch():
    plan = Plan([10, 10], PlanSpec(shuffle=True))
    assert np.array_equal(_all_ids(plan.epoch(np.int64(2), np.int32(6))), _all_ids(plan.epoch(2, 6)))


@pytest.mark.parametrize("epoch", [-1, 1.0, "0", False])
def test_bad_epoch_is_rejected(epoch):
    with pytest.raises(InvalidArgumentError, match="epoch"):
        Plan([10], PlanSpec()).epoch(epoch, 4)


def test_bad_base_and_positions_are_rejected():
    plan = Plan([10, 10], PlanSpec(num_canonical_nodes=2))
    for base in ([1], [1, 2, 3], [[1, 2]], [-1, 0]):
        with pytest.raises(InvalidArgumentError, match="base"):
            plan.epoch(0, 4, base=base)
    ep = plan.epoch(0, 4)
    for bad in ([-1], [ep.end], [0, 3, ep.end + 5]):
        with pytest.raises(InvalidArgumentError, match="positions"):
            ep.sample_ids(bad)


# -- scale --------------------------------------------------------------------------------------

def _check_tail_block(ep, count=1_000_000):
    pos = np.arange(ep.end - count, ep.end)
    ids = ep.sample_ids(pos)
    assert ids.min() >= 0 and ids.max() < ep.plan.num_samples
    assert np.unique(ids).size == count
    assert np.array_equal(ep.sample_ids(pos), ids)  # deterministic across calls
    sample = pos[::997]
    assert np.array_equal(ep.sample_ids(sample), ids[::997])
    return ids


def test_a_billion_samples_plan_is_small_and_maps_fast_positions():
    sizes = np.full(100_000, 10_000)
    spec = PlanSpec(shuffle=True, algo="py1e", seed=17, num_canonical_nodes=8)
    ep = Plan(sizes, spec).epoch(3, 4000)
    assert ep.end == 1_000_000_000  # equal regions, and 4000 divides them: no padding
    assert ep.nbytes() < 50 * 2**20
    ids = _check_tail_block(ep)
    # a second plan built from the same inputs maps the same way
    assert np.array_equal(Plan(sizes, spec).epoch(3, 4000).sample_ids(np.arange(ep.end - 1000, ep.end)), ids[-1000:])


@pytest.mark.parametrize("algo", ["naive", "py1b", "py1br", "py1s", "py2s"])
def test_a_billion_samples_in_uneven_shards(algo):
    rng = np.random.default_rng(3)
    sizes = rng.integers(0, 20_001, 100_000)
    sizes[0] += 1_000_000_000 - sizes.sum()
    spec = PlanSpec(shuffle=True, algo=algo, num_canonical_nodes=5, tail="drop")
    ep = Plan(sizes, spec).epoch(1, 2048)
    assert ep.plan.num_samples == 1_000_000_000
    assert ep.nbytes() < 50 * 2**20
    _check_tail_block(ep, 200_000)
