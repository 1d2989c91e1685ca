"""The in-region shuffles: each is a bijection of its region, and each keeps the locality
its documentation promises (pieces, pairs of pieces, blocks, jittered blocks, windows)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shardstream.plan import SHUFFLE_ALGOS, Plan, PlanSpec, interleave_shape
from shardstream.plan.keyed import hash_index
from shardstream.plan.shuffle import _key2, shuffle_region

PROPS = settings(max_examples=80, deadline=None, derandomize=True, database=None,
                 suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
REGIONAL = [a for a in SHUFFLE_ALGOS if a != "naive"]


def region_v(ep, c: int) -> np.ndarray:
    """Virtual indices (relative to the region's start) read at region-local positions 0, 1, 2, ..."""
    bounds = ep.plan.run.region_bounds
    t = np.arange(bounds[c + 1] - bounds[c])
    spec = ep.plan.spec
    v = shuffle_region(spec.algo, ep.layout, np.full(t.size, c), t, ep.key, spec.resolved_block_size)
    return v - bounds[c]


def _epoch(sizes, algo, block_size, num_canonical_nodes=1, seed=0, epoch=0, g=1):
    spec = PlanSpec(shuffle=True, algo=algo, seed=seed, num_canonical_nodes=num_canonical_nodes, block_size=block_size)
    return Plan(sizes, spec).epoch(epoch, g)


_configs = st.fixed_dictionaries({
    "sizes": st.lists(st.integers(0, 90), min_size=1, max_size=20),
    "algo": st.sampled_from(REGIONAL),
    "block_size": st.integers(1, 70),
    "num_canonical_nodes": st.integers(1, 6),
    "seed": st.integers(0, 2**40),
    "epoch": st.integers(0, 9),
})


@PROPS
@given(cfg=_configs)
def test_every_shuffle_is_a_bijection_of_its_region(cfg):
    ep = _epoch(**cfg)
    for c in range(ep.plan.num_regions):
        v = region_v(ep, c)
        assert np.array_equal(np.sort(v), np.arange(v.size))


@PROPS
@given(cfg=_configs)
def test_the_plan_reads_regions_through_the_shuffle(cfg):
    """With one region and a global batch of one, position t is region position t."""
    cfg = dict(cfg, num_canonical_nodes=1)
    ep = _epoch(**cfg)
    n = ep.plan.num_samples
    if n:
        assert np.array_equal(ep.sample_ids(np.arange(n)), ep.layout.sample_ids(region_v(ep, 0)))


def test_naive_is_one_permutation_of_the_epoch():
    ep = _epoch([30, 0, 45, 25], "naive", 8, num_canonical_nodes=3, g=5)
    ids = ep.sample_ids(np.arange(ep.end))
    assert np.unique(ids).size == 100
    # it crosses region boundaries at once: the first step already mixes far-apart samples
    assert np.ptp(ids[:10]) > 50


@pytest.mark.parametrize("algo", REGIONAL)
def test_every_shuffle_actually_shuffles_and_changes_with_the_epoch(algo):
    sizes = [300, 200, 500]
    orders = set()
    for epoch in range(3):
        ep = _epoch(sizes, algo, 64, epoch=epoch)
        v = region_v(ep, 0)
        assert not np.array_equal(v, np.arange(v.size))
        orders.add(tuple(v))
    assert len(orders) == 3


# -- py1s and py2s -----------------------------------------------------------------------------------

@PROPS
@given(cfg=_configs)
def test_py1s_reads_one_piece_at_a_time(cfg):
    ep = _epoch(**dict(cfg, algo="py1s"))
    lay = ep.layout
    for c in range(ep.plan.num_regions):
        lo = ep.plan.run.region_bounds[c]
        v = region_v(ep, c)
        t = np.arange(v.size)
        # the piece read at every position is the piece at that place of the epoch's piece order
        assert np.array_equal(lay.piece_of(lo + v), lay.piece_of(lo + t))


@PROPS
@given(cfg=_configs)
def test_py2s_stays_within_pairs_of_consecutive_pieces(cfg):
    ep = _epoch(**dict(cfg, algo="py2s"))
    lay = ep.layout
    for c in range(ep.plan.num_regions):
        lo = ep.plan.run.region_bounds[c]
        first = lay.region_first_piece[c]
        v = region_v(ep, c)
        t = np.arange(v.size)
        pair_read = (lay.piece_of(lo + v) - first) // 2
        pair_place = (lay.piece_of(lo + t) - first) // 2
        assert np.array_equal(pair_read, pair_place)


def _runs(x: np.ndarray) -> int:
    return int(x.size and 1 + np.count_nonzero(np.diff(x)))


def test_py1s_and_py2s_shard_runs_through_the_plan():
    """Through the public plan: py1s reads each shard as one run; py2s mixes two shards at a time."""
    sizes = [40, 0, 17, 33, 25, 8, 51, 12]
    nonempty = sum(1 for s in sizes if s)
    bounds = np.cumsum(sizes)
    for epoch in range(3):
        ep = _epoch(sizes, "py1s", 8, epoch=epoch, g=4)
        shards = np.searchsorted(bounds, ep.sample_ids(np.arange(ep.plan.num_samples)), side="right")
        assert _runs(shards) == nonempty
        ep = _epoch(sizes, "py2s", 8, epoch=epoch, g=4)
        shards = np.searchsorted(bounds, ep.sample_ids(np.arange(ep.plan.num_samples)), side="right")
        # consecutive pairs of shards in the epoch's shard order hold disjoint stretches
        order = ep.layout.piece_gid  # one region, whole shards: pieces are shards
        pair_ends = np.cumsum(np.asarray(sizes)[np.searchsorted(bounds, order, side="right")])[1::2]
        for lo, hi in zip(np.concatenate([[0], pair_ends]), np.concatenate([pair_ends, [ep.plan.num_samples]])):
            assert len(set(shards[lo:hi].tolist())) <= 2
        assert _runs(shards) > nonempty  # the two shards of a pair are interleaved


# -- py1b and py1br -----------------------------------------------------------------------------------

@PROPS
@given(cfg=_configs)
def test_py1b_keeps_samples_inside_their_block(cfg):
    ep = _epoch(**dict(cfg, algo="py1b"))
    b = ep.plan.spec.resolved_block_size
    for c in range(ep.plan.num_regions):
        v = region_v(ep, c)
        t = np.arange(v.size)
        assert np.array_equal(v // b, t // b)
        assert (np.abs(v - t) < b).all()


def _jitter_bounds(ep, c, length):
    """Block starts of py1br (restated from its documentation: j*block + jitter in [-block/4, block/4])."""
    b = ep.plan.spec.resolved_block_size
    q = b // 4
    j = np.arange(length // b + 3)
    jit = (hash_index(_key2(ep.key, np.full(j.size, c), j), 0) % np.uint64(2 * q + 1)).astype(np.int64) - q
    starts = np.where(j > 0, j * b + jit, 0)
    return np.minimum(starts, length)


@PROPS
@given(cfg=_configs)
def test_py1br_blocks_are_jittered_within_half_a_block(cfg):
    ep = _epoch(**dict(cfg, algo="py1br"))
    b = ep.plan.spec.resolved_block_size
    for c in range(ep.plan.num_regions):
        v = region_v(ep, c)
        t = np.arange(v.size)
        assert (np.abs(v - t) < b + b // 2 + (b < 2)).all()
        # every block [start, next start) is mapped onto itself
        starts = _jitter_bounds(ep, c, v.size)
        block = np.searchsorted(starts, t, side="right") - 1
        assert np.array_equal(block, np.searchsorted(starts, v, side="right") - 1)
        sizes = np.diff(starts)
        whole = sizes[(starts[1:] < v.size)]  # blocks not cut by the end of the region
        assert ((2 * whole >= b) & (2 * whole <= 3 * b)).all()
        # independently of the restated bounds: the finest split of the region into
        # self-mapped stretches never has a stretch longer than one and a half blocks
        cuts = np.flatnonzero(np.maximum.accumulate(v) == t) + 1
        assert np.diff(np.concatenate([[0], cuts])).max(initial=0) <= b + b // 2 + (b < 2)


def test_py1br_block_sizes_vary():
    ep = _epoch([5000], "py1br", 64)
    v = region_v(ep, 0)
    starts = _jitter_bounds(ep, 0, v.size)
    sizes = np.diff(starts)[:-2]
    assert len(set(sizes.tolist())) > 10
    assert sizes.min() >= 32 and sizes.max() <= 96
    # the region's own map agrees with these boundaries
    cuts = set((np.flatnonzero(np.maximum.accumulate(v) == np.arange(v.size)) + 1).tolist())
    assert set(starts[1:-2].tolist()) <= cuts


# -- py1e ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("block_size", [1, 2, 3, 4, 7, 15, 16, 17, 63, 64, 255, 256, 257, 1000, 4096, 4_000_000])
def test_interleave_shape_fills_about_one_block(block_size):
    k, g = interleave_shape(block_size)
    assert 1 <= k <= 16 and g >= 1
    window = k * k * g
    assert window <= block_size < window + k * k


@PROPS
@given(cfg=_configs)
def test_py1e_moves_samples_at_most_one_window(cfg):
    ep = _epoch(**dict(cfg, algo="py1e"))
    k, g = interleave_shape(ep.plan.spec.resolved_block_size)
    m = k * g
    for c in range(ep.plan.num_regions):
        v = region_v(ep, c)
        d = np.abs(v - np.arange(v.size))
        assert (d < max(k * m, 1)).all()
        if v.size >= k * m:  # piece i spreads over k*m positions around its own place
            assert (2 * d <= (k + 1) * m).all()


@pytest.mark.parametrize("block_size,length", [(16, 700), (64, 3001), (256, 5120), (1000, 20000), (300, 9000)])
@pytest.mark.parametrize("seed", [0, 1])
def test_py1e_starts_one_new_piece_every_m_positions(block_size, length, seed):
    ep = _epoch([length], "py1e", block_size, seed=seed, epoch=seed)
    k, g = interleave_shape(block_size)
    m = k * g
    v = region_v(ep, 0)
    pieces, first = np.unique(v // m, return_index=True)
    n = length // m
    steady = (pieces >= k) & (pieces < n - k)
    starts = first[steady]
    assert starts.size > 10
    assert (np.abs(np.diff(starts) - m) < k).all()
    # piece i is read within its window and nowhere else
    body = v < n * m
    t = np.arange(length)
    span = np.zeros(n, np.int64)
    np.maximum.at(span, v[body] // m, t[body])
    assert (span[steady[: n]] - starts < k * m).all()


def _new_shards_per_stretch(ep, stretch):
    v = region_v(ep, 0)
    shards = np.searchsorted(np.cumsum(ep.plan.run.sizes), ep.layout.sample_ids(v), side="right")
    _, first = np.unique(shards, return_index=True)
    return np.bincount(first // stretch, minlength=-(-v.size // stretch))


@pytest.mark.parametrize("block_size,shard", [(256, 32), (256, 64), (1024, 128), (1024, 512)])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_py1e_spreads_shard_downloads_where_py1b_bursts(block_size, shard, seed):
    """Count the shards first needed in each stretch of m positions of a long region."""
    k, g = interleave_shape(block_size)
    m = k * g
    assert shard >= 2 * m
    sizes = [shard] * (24 * block_size // shard)
    even = _new_shards_per_stretch(_epoch(sizes, "py1e", block_size, seed=seed, epoch=seed), m)
    burst = _new_shards_per_stretch(_epoch(sizes, "py1b", block_size, seed=seed, epoch=seed), m)
    # steady state: at most one piece of m samples starts per stretch, and it touches at most two shards
    assert even[k:-k].max() <= 2
    # the ramp-up starts the pieces of the first stretch together: under sqrt(2k) + 1 pieces of m samples
    first = int(np.ceil(np.sqrt(2 * k))) + 1
    assert even.max() <= -(-first * m // shard) + 1
    # py1b needs a whole block's shards at the start of every block
    assert burst.max() >= min(4, block_size // shard)
    assert burst.max() > even[k:-k].max()
