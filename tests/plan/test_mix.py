"""Mixing primitives: exact apportionment, the partial copy of a stream (granules, keys),
a stream's draw (whole copies plus a partial copy), weight schedules and the epoch warp."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shardstream.errors import InvalidArgumentError
from shardstream.plan.mix import SCHEDULE_KINDS, Schedule, StreamDraw, Warp, apportion, draw_key, partial_counts

PROPS = settings(max_examples=80, deadline=None, derandomize=True, database=None,
                 suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


# -- apportion ------------------------------------------------------------------------------------

def _exact_quota(total: int, weights) -> list[Fraction]:
    w = [Fraction(x) for x in weights]
    s = sum(w)
    return [x * total / s for x in w]


@PROPS
@given(total=st.integers(0, 10**7),
       weights=st.lists(st.one_of(st.just(0), st.integers(0, 1000)), min_size=1, max_size=12))
def test_apportion_of_integer_weights_is_exact_and_within_one_of_the_quota(total, weights):
    out = apportion(total, weights)
    assert out.dtype == np.int64 and out.shape == (len(weights),)
    if sum(weights) == 0 or total == 0:
        assert not out.any()
        return
    assert int(out.sum()) == total
    assert (out >= 0).all()
    for o, w, q in zip(out.tolist(), weights, _exact_quota(total, weights)):
        assert math.floor(q) <= o <= math.ceil(q)
        if w == 0:
            assert o == 0
    # deterministic, and invariant under an exact rescaling of the weights
    assert np.array_equal(apportion(total, weights), out)
    assert np.array_equal(apportion(total, np.asarray(weights, np.float64) * 4.0), out)


@PROPS
@given(total=st.integers(1, 2**52),
       weights=st.lists(st.one_of(st.just(0.0), st.floats(1e-6, 1e6)), min_size=1, max_size=10))
def test_apportion_of_float_weights_sums_to_the_total(total, weights):
    out = apportion(total, weights)
    if sum(weights) == 0:
        assert not out.any()
        return
    assert int(out.sum()) == total
    assert (out >= 0).all()
    w = np.asarray(weights)
    assert not out[w == 0].any()
    quota = w / w.sum() * total
    # within one of the quota, up to the float rounding of the quota itself
    assert (np.abs(out - quota) < 1 + 1e-9 * total).all()


@pytest.mark.parametrize("total,weights,expected", [
    (10, [0.5, 0.3, 0.2], [5, 3, 2]),
    (7, [1, 0, 1], [4, 0, 3]),
    (3, [1, 1, 1, 1], [1, 1, 1, 0]),  # ties go to the lower index
    (1, [1, 1], [1, 0]),
    (2, [0, 1, 1, 0], [0, 1, 1, 0]),
    (5, [0, 0, 1], [0, 0, 5]),
    (8, [3, 1], [6, 2]),
    (9, [1, 2, 3, 4], [1, 2, 3, 3]),  # quotas .9 1.8 2.7 3.6: the largest remainders win
    (0, [1, 2], [0, 0]),
    (5, [0, 0], [0, 0]),
    (-3, [1, 2], [0, 0]),
])
def test_apportion_known_values(total, weights, expected):
    assert apportion(total, weights).tolist() == expected


def test_apportion_gives_a_single_positive_weight_everything():
    for total in (1, 17, 10**12):
        assert apportion(total, [0, 0, 3.5, 0]).tolist() == [0, 0, total, 0]


@PROPS
@given(total=st.integers(2**52, 2**53 - 1),
       weights=st.lists(st.one_of(st.just(0.0), st.floats(1e-6, 1e6)), min_size=1, max_size=10).filter(any))
def test_apportion_is_exact_up_to_2_53(total, weights):
    out = apportion(total, weights)
    assert int(out.sum()) == total and (out >= 0).all()


def test_apportion_refuses_totals_float64_cannot_share_exactly():
    """Beyond 2**53 the float quotas' floors can miss the total by more than one per stream."""
    for total in (2**53, 2**60 + 1):
        with pytest.raises(InvalidArgumentError, match="2\\*\\*53"):
            apportion(total, [1, 1, 1])
    assert int(apportion(2**53 - 1, [1, 1, 1]).sum()) == 2**53 - 1


# -- partial_counts ---------------------------------------------------------------------------------

_shard_sizes = st.one_of(
    st.lists(st.integers(0, 60), min_size=1, max_size=30),
    st.lists(st.sampled_from([0, 1, 7, 16, 32]), min_size=1, max_size=40),
    st.lists(st.integers(1, 500), min_size=1, max_size=4),
)


def _not_granular(counts, sizes, g) -> int:
    """Shards whose count is neither a whole number of granules nor the whole shard."""
    counts, sizes = np.asarray(counts), np.asarray(sizes)
    return int(((counts % g != 0) & (counts != sizes)).sum())


@PROPS
@given(sizes=_shard_sizes, g=st.integers(1, 20), key=st.integers(0, 2**64 - 1), data=st.data())
def test_partial_counts_sum_to_r_and_fit_their_shards(sizes, g, key, data):
    n = sum(sizes)
    r = data.draw(st.integers(0, max(n - 1, 0)))
    out = partial_counts(sizes, r, g, key)
    assert out.shape == (len(sizes),) and out.dtype == np.int64
    assert int(out.sum()) == r
    assert (out >= 0).all() and (out <= np.asarray(sizes)).all()
    # at most one shard is cut inside a granule (the rounding fix-up); the others take whole granules
    assert _not_granular(out, sizes, g) <= 1
    assert np.array_equal(partial_counts(sizes, r, g, key), out)
    # each shard gives its share of r, up to the granule rounding
    share = np.asarray(sizes) * r / n if n else np.zeros(len(sizes))
    assert (np.abs(out - share) < 2 * g).all()
    if g == 1:
        assert (np.abs(out - share) < 1).all()


def test_partial_counts_of_nothing():
    assert partial_counts([5, 5], 0, 1, 3).tolist() == [0, 0]
    assert partial_counts([], 3, 1, 3).tolist() == []
    assert partial_counts([0, 0], 0, 4, 3).tolist() == [0, 0]


@pytest.mark.parametrize("r", [1, 99, 100, 101, 250, 350, 499, 1000, 2450])
def test_partial_counts_with_whole_shard_granules_touch_few_shards(r):
    sizes = np.full(50, 100)
    for key in range(6):
        out = partial_counts(sizes, r, 100, key)
        assert int(out.sum()) == r
        touched = np.flatnonzero(out)
        assert touched.size == -(-r // 100)
        assert (out[touched] == 100).sum() >= touched.size - 1  # all full but one


def test_partial_counts_with_uneven_shards_and_granules():
    sizes = np.array([37, 50, 13, 64, 25, 41, 99, 8, 0, 16])
    for g in (1, 2, 4, 8, 16, 32, 100):
        for r in range(0, int(sizes.sum())):
            out = partial_counts(sizes, r, g, 12345)
            assert int(out.sum()) == r and (out <= sizes).all() and (out >= 0).all()
            assert _not_granular(out, sizes, g) <= 1, (g, r, out)
            assert out[8] == 0


def test_partial_counts_depend_on_the_key():
    sizes = np.full(20, 10)
    seen = {tuple(partial_counts(sizes, 37, 1, key)) for key in range(20)}
    assert len(seen) >= 15
    # coarse granules: the key picks which shards
    picks = {tuple(np.flatnonzero(partial_counts(sizes, 30, 10, key))) for key in range(20)}
    assert len(picks) >= 15


def test_partial_counts_huge_shards_use_exact_arithmetic():
    sizes = np.array([2**40, 2**40 + 3, 2**41, 5])
    n = int(sizes.sum())
    for r in (1, 2**40, n - 1):
        out = partial_counts(sizes, r, 1, 9)
        assert int(out.sum()) == r and (out <= sizes).all() and (out >= 0).all()
    out = partial_counts(sizes, n - 1, 3, 9)
    assert int(out.sum()) == n - 1 and (out <= sizes).all()


# -- StreamDraw -------------------------------------------------------------------------------------

def _unit_of(draw: StreamDraw, v) -> np.ndarray:
    return np.searchsorted(draw.unit_starts, v, side="right") - 1


@PROPS
@given(sizes=_shard_sizes.filter(lambda s: sum(s) > 0), g=st.integers(1, 12), key=st.integers(0, 2**64 - 1),
       data=st.data())
def test_stream_draw_takes_every_sample_q_or_q_plus_one_times(sizes, g, key, data):
    n = sum(sizes)
    choose = data.draw(st.integers(0, 4 * n + 3))
    q, r = divmod(choose, n)
    draw = StreamDraw(sizes, choose, g, key)
    assert int(draw.unit_size.sum()) == choose
    ids = draw.local_ids(np.arange(choose))
    assert ids.shape == (choose,)
    assert choose == 0 or (ids.min() >= 0 and ids.max() < n)
    times = np.bincount(ids, minlength=n)
    assert times.min() >= q and times.max() <= q + 1
    assert int((times == q + 1).sum()) == r
    # the partial copy: per shard as partial_counts says, distinct samples
    assert np.array_equal(draw.partial, partial_counts(sizes, r, g, key))
    part = draw.unit_partial[_unit_of(draw, np.arange(choose))]
    assert int(part.sum()) == r
    assert np.unique(ids[part]).size == r
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    shard_of = np.searchsorted(np.cumsum(sizes), ids[part], side="right")
    assert np.array_equal(np.bincount(shard_of, minlength=len(sizes)), draw.partial)
    # whole copies are whole shards in their natural order
    for u in np.flatnonzero(~draw.unit_partial):
        v = draw.unit_starts[u] + np.arange(draw.unit_size[u])
        shard = draw.unit_shard[u]
        assert np.array_equal(draw.local_ids(v), starts[shard] + np.arange(sizes[shard]))
    # the same key gives the same draw
    assert np.array_equal(StreamDraw(sizes, choose, g, key).local_ids(np.arange(choose)), ids)


@pytest.mark.parametrize("g", [2, 3, 4, 8, 16])
def test_stream_draw_partial_copy_comes_in_granule_runs(g):
    sizes = np.array([37, 50, 13, 64, 25, 41, 99, 8, 16, 33])
    n = int(sizes.sum())
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    for r in (1, 5, 17, 60, 150, 200, 385):
        draw = StreamDraw(sizes, 2 * n + r, g, draw_key(4, 0, 1, False))
        cut = 0  # granules taken only in part
        for u in np.flatnonzero(draw.unit_partial):
            shard = int(draw.unit_shard[u])
            p = int(draw.unit_size[u])
            local = draw.local_ids(draw.unit_starts[u] + np.arange(p)) - starts[shard]
            assert local.min() >= 0 and local.max() < sizes[shard]
            for k in range(0, p, g):
                run = local[k:k + g]
                assert run[0] % g == 0  # a run starts a granule of the shard
                assert np.array_equal(run, run[0] + np.arange(run.size))  # consecutive samples
                whole = min(g, int(sizes[shard]) - int(run[0]))
                cut += run.size < whole
        assert cut <= 1, (r, cut)


def test_stream_draw_granules_of_one_shard_take_whole_shards():
    sizes = np.full(40, 25)
    draw = StreamDraw(sizes, 3 * 1000 + 260, 25, 77)
    part = draw.partial
    assert int(part.sum()) == 260
    assert (part > 0).sum() == 11 and (part == 25).sum() == 10


def test_stream_draw_edge_cases():
    draw = StreamDraw([0, 0], 0, 1, 5)
    assert draw.local_ids(np.arange(0)).size == 0 and draw.unit_size.size == 0
    assert StreamDraw([4, 0, 3], 0, 2, 5).local_ids(np.arange(0)).size == 0
    one = StreamDraw([4, 0, 3], 7, 2, 5)  # exactly one copy: the natural order
    assert np.array_equal(one.local_ids(np.arange(7)), np.arange(7))
    assert not one.unit_partial.any()
    with pytest.raises(InvalidArgumentError, match="no samples"):
        StreamDraw([0, 0], 3, 1, 5)


def test_fixed_draws_are_the_same_every_epoch_and_balanced_ones_are_not():
    sizes = np.full(10, 50)
    choose = 500 + 123
    fixed = [np.sort(StreamDraw(sizes, choose, 1, draw_key(7, 2, e, True)).local_ids(np.arange(choose)))
             for e in range(4)]
    assert all(np.array_equal(f, fixed[0]) for f in fixed)
    balanced = [tuple(np.sort(StreamDraw(sizes, choose, 1, draw_key(7, 2, e, False)).local_ids(np.arange(choose))))
                for e in range(4)]
    assert len(set(balanced)) == 4
    # keys differ between streams and seeds, and between fixed and balanced
    keys = {draw_key(seed, s, e, f) for seed in (1, 2) for s in (0, 1) for e in (0, 1) for f in (False, True)}
    assert len(keys) == 2 * 2 * (2 + 1)  # fixed keys ignore the epoch
    assert draw_key(1, 0, 0, True) == draw_key(1, 0, 5, True)


def test_balanced_draws_spread_over_epochs():
    """Over many epochs, a balanced 30% draw visits every sample about equally often."""
    sizes = np.full(20, 10)
    times = np.zeros(200, np.int64)
    for e in range(200):
        times += np.bincount(StreamDraw(sizes, 60, 1, draw_key(3, 0, e, False)).local_ids(np.arange(60)),
                             minlength=200)
    assert times.sum() == 60 * 200
    assert times.min() > 30 and times.max() < 90  # expected 60 each


# -- Schedule ---------------------------------------------------------------------------------------

_W0 = [0.7, 0.2, 0.1]
_W1 = [0.1, 0.3, 0.6]


def _two(kind, p0=100.0, p1=300.0, w0=_W0, w1=_W1):
    return Schedule([(p0, w0), (p1, w1)], kind)


@pytest.mark.parametrize("kind", SCHEDULE_KINDS)
def test_schedule_weights_at_points_are_the_normalised_point_weights(kind):
    points = [(0, [2, 1, 1]), (50, [0, 0, 5]), (80, [1, 3, 0]), (200, [1, 1, 2])]
    sched = Schedule(points, kind)
    for p, w in points:
        w = np.asarray(w, np.float64)
        assert np.allclose(sched.weights(p), w / w.sum())
    assert np.allclose(sched.weights(-1000.0), [0.5, 0.25, 0.25])  # before the first point
    assert np.allclose(sched.weights(1e9), [0.25, 0.25, 0.5])  # after the last
    r = np.linspace(-50, 300, 1401)
    w = sched.weights(r)
    assert w.shape == (r.size, 3)
    assert np.allclose(w.sum(1), 1.0) and (w >= 0).all()
    assert not sched.constant


def test_schedule_linear_and_cosine_midpoints_are_the_average():
    for kind in ("linear", "cosine"):
        sched = _two(kind)
        assert np.allclose(sched.weights(200.0), (np.asarray(_W0) + np.asarray(_W1)) / 2)
    lin = _two("linear")
    assert np.allclose(lin.weights(150.0), 0.75 * np.asarray(_W0) + 0.25 * np.asarray(_W1))


def test_schedule_cosine_is_flat_at_both_ends_and_symmetric():
    cos, lin = _two("cosine"), _two("linear")
    h = 1e-3
    slope = (lin.weights(100.0 + h) - lin.weights(100.0)) / h
    assert np.abs(slope).max() > 1e-3
    for at in (100.0, 300.0 - h):
        d = (cos.weights(at + h) - cos.weights(at)) / h
        assert np.abs(d).max() < 1e-4 * np.abs(slope).max()
    # steepest in the middle, at pi/2 times the linear slope
    mid = (cos.weights(200.0 + h) - cos.weights(200.0 - h)) / (2 * h)
    assert np.allclose(mid, slope * np.pi / 2, rtol=1e-4)
    t = np.linspace(0, 200, 41)
    assert np.allclose(cos.weights(100.0 + t) + cos.weights(300.0 - t), np.asarray(_W0) + _W1)


def test_schedule_step_jumps_at_the_next_point():
    sched = Schedule([(0, [1, 0]), (10, [0, 1]), (20, [1, 1])], "step")
    assert sched.weights(9.999).tolist() == [1, 0]
    assert sched.weights(10.0).tolist() == [0, 1]
    assert sched.weights(19.5).tolist() == [0, 1]
    assert sched.weights(20.0).tolist() == [0.5, 0.5]
    assert sched.weights(np.arange(0, 10)).tolist() == [[1, 0]] * 10


@pytest.mark.parametrize("kind", SCHEDULE_KINDS)
def test_schedule_linear_and_cosine_are_continuous(kind):
    sched = Schedule([(0, [2, 1, 1]), (50, [0, 0, 5]), (80, [1, 3, 0]), (200, [1, 1, 2])], kind)
    for p in (0.0, 50.0, 80.0, 200.0):
        jump = np.abs(sched.weights(p + 1e-7) - sched.weights(p - 1e-7)).max()
        assert (jump < 1e-6) == (kind != "step" or p == 0.0)


def _integral(sched: Schedule, r0: float, r1: float, n: int = 200_001) -> np.ndarray:
    """Per-stream integral of the weights by the composite trapezoid rule."""
    r = np.linspace(r0, r1, n)
    w = sched.weights(r)
    h = (r1 - r0) / (n - 1)
    return h * (w[1:] + w[:-1]).sum(0) / 2


@pytest.mark.parametrize("kind", SCHEDULE_KINDS)
@pytest.mark.parametrize("r0,r1", [(0.0, 1000.0), (-40.0, 130.0), (120.0, 180.0), (150.0, 700.0), (310.0, 400.0),
                                   (-300.0, -200.0), (99.5, 100.5), (250.0, 250.0)])
def test_schedule_primitive_is_the_integral_of_the_weights(kind, r0, r1):
    sched = Schedule([(100, [0.7, 0.2, 0.1]), (200, [0, 1, 3]), (300, [1, 1, 1])], kind)
    s = np.arange(3)
    exact = sched.primitive(r1, s) - sched.primitive(r0, s)
    assert np.allclose(exact, _integral(sched, r0, r1), atol=1e-3 * max(r1 - r0, 1e-9) + 1e-9)
    assert np.allclose(sched.totals(r0, r1), exact)
    assert math.isclose(float(sched.totals(r0, r1).sum()), r1 - r0, abs_tol=1e-9)
    assert np.allclose(sched.primitive(100.0, s), 0.0)  # from the first point
    assert (sched.primitive(50.0, s) < 0).all()  # negative before it


@PROPS
@given(kind=st.sampled_from(SCHEDULE_KINDS), p0=st.integers(0, 10_000), span=st.integers(1, 10_000),
       w0=st.lists(st.integers(0, 9), min_size=3, max_size=3).filter(any),
       w1=st.lists(st.integers(0, 9), min_size=3, max_size=3).filter(any),
       n=st.integers(1, 5000), epoch=st.integers(0, 8))
def test_schedule_totals_over_an_epoch_sum_to_its_length(kind, p0, span, w0, w1, n, epoch):
    sched = Schedule([(p0, w0), (p0 + span, w1)], kind)
    t = sched.totals(epoch * n, (epoch + 1) * n)
    assert (t >= 0).all()
    assert math.isclose(float(t.sum()), n, rel_tol=1e-9)
    assert int(apportion(n, t).sum()) == n
    # the pieces of consecutive epochs add up
    both = sched.totals(epoch * n, (epoch + 2) * n)
    assert np.allclose(both, t + sched.totals((epoch + 1) * n, (epoch + 2) * n))


def test_constant_schedule():
    sched = Schedule([(0, [3, 1])], "cosine")
    assert sched.constant
    assert np.allclose(sched.totals(40, 140), [75, 25])
    assert Schedule([(0, [1, 1]), (10, [2, 2])], "linear").constant
    assert not Schedule([(0, [1, 1]), (10, [2, 1])], "step").constant


@pytest.mark.parametrize("points,kind,match", [
    ([], "linear", "at least one"),
    ([(0, [1, 1])], "smooth", "kind"),
    ([(10, [1, 1]), (10, [1, 2])], "linear", "increasing"),
    ([(10, [1, 1]), (5, [1, 2])], "linear", "increasing"),
    ([(-1, [1, 1])], "linear", ">= 0"),
    ([(0, [1, -1])], "linear", "non-negative"),
    ([(0, [0, 0])], "linear", "positive sum"),
    ([(0, [1, float("nan")])], "linear", "finite"),
    ([(0, [1, float("inf")])], "linear", "finite"),
    ([(0, [[1, 1]])], "linear", "one per stream"),
])
def test_bad_schedules_are_rejected(points, kind, match):
    with pytest.raises(InvalidArgumentError, match=match):
        Schedule(points, kind)


def test_schedule_points_with_different_stream_counts_are_rejected():
    for points in ([(0, [1, 1]), (5, [1, 1, 1])], [(0, [1, 1, 1]), (5, [1]), (9, [1, 2, 3])]):
        with pytest.raises(InvalidArgumentError, match="per stream"):
            Schedule(points, "linear")


# -- Warp --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", SCHEDULE_KINDS)
@pytest.mark.parametrize("r0,length", [(0.0, 400.0), (150.0, 100.0), (-100.0, 150.0), (250.0, 1000.0)])
def test_warp_maps_the_epoch_onto_each_streams_share(kind, r0, length):
    sched = _two(kind)
    warp = Warp(sched, r0, length)
    x = np.linspace(0, 1, 2001)
    for s in range(3):
        f = warp.forward(x, np.full(x.size, s))
        assert f[0] == 0.0 and math.isclose(float(f[-1]), 1.0)
        assert (np.diff(f) >= 0).all()
        # the share due by x is the integral of the weight over the first x of the epoch
        part = sched.primitive(r0 + x * length, s) - sched.primitive(r0, s)
        assert np.allclose(f, part / part[-1])
        y = np.linspace(0, 1, 1001)
        inv = warp.inverse(y, np.full(y.size, s))
        assert (np.diff(inv) >= 0).all() and inv.min() >= 0 and inv.max() <= 1
        assert np.allclose(warp.forward(inv, np.full(y.size, s)), y, atol=1e-9)
        # where the weight is positive, inverse undoes forward
        assert np.allclose(warp.inverse(f, np.full(x.size, s)), x, atol=1e-9)
    # clipped outside [0, 1]
    assert warp.forward(-0.5, 0) == 0.0 and warp.forward(1.5, 2) == 1.0


def test_warp_of_a_constant_schedule_is_the_identity():
    warp = Warp(Schedule([(0, [1, 2, 3])]), 500.0, 80.0)
    x = np.linspace(0, 1, 101)
    for s in range(3):
        assert np.allclose(warp.forward(x, s), x)
        assert np.allclose(warp.inverse(x, s), x, atol=1e-12)


def test_warp_bunches_a_stream_where_its_weight_is_high():
    sched = Schedule([(0, [0.9, 0.1]), (1000, [0.1, 0.9])], "linear")
    warp = Warp(sched, 0.0, 1000.0)
    assert warp.forward(0.5, 0) > 0.6 > 0.5 > 0.4 > warp.forward(0.5, 1)
    # a stream whose weight is zero over a stretch: forward is flat there, inverse takes the earliest x
    step = Warp(Schedule([(0, [1, 0]), (50, [0, 1]), (100, [1, 1])], "step"), 0.0, 100.0)
    assert step.forward(0.25, 1) == 0.0 and step.forward(0.5, 0) == 1.0
    assert math.isclose(float(step.inverse(1e-9, 1)), 0.5, abs_tol=1e-6)
    assert float(step.inverse(0.0, 1)) < 1e-12
