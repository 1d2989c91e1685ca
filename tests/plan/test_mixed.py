"""Mixed epochs: the interleave of several streams in closed form (order, windows, progress), and
the mixed epoch for every batching method: per-stream counts, per-batch composition, world
independence, determinism, balanced and fixed sampling, resumption, schedules, laziness."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shardstream.errors import InvalidArgumentError
from shardstream.plan import BATCHING_METHODS, STEP_TAILS, PlanSpec, World
from shardstream.plan.interleave import StreamInterleave
from shardstream.plan.mix import SCHEDULE_KINDS, Schedule, Warp, apportion
from shardstream.plan.mixed import MixedEpoch, MixSpec, Mixture

PROPS = settings(max_examples=60, deadline=None, derandomize=True, database=None,
                 suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


# -- StreamInterleave -------------------------------------------------------------------------------

def _interleaved(m: StreamInterleave) -> tuple[np.ndarray, np.ndarray]:
    """The whole slot sequence, materialised: every element sorted by (due time, stream)."""
    s = np.repeat(np.arange(m.streams), m.counts)
    j = np.concatenate([np.arange(c) for c in m.counts] + [np.zeros(0, np.int64)])
    d = m.due(s, j)
    order = np.lexsort((s, d))
    return s[order], j[order]


def _warp(kind: str, streams: int = 3, zero: bool = False) -> Warp:
    """Weights moving from favouring stream 0 to favouring the last stream over an epoch [0, 1000)."""
    w0 = np.linspace(1.0, 0.1, streams)
    w1 = w0[::-1].copy()
    if zero:  # stream 1 never due
        w0[1] = w1[1] = 0.0
    return Warp(Schedule([(0, w0), (500 if kind == "step" else 1000, w1)], kind), 0.0, 1000.0)


def _matched(total: int, warp: Warp) -> np.ndarray:
    """Element counts that follow the warp's weights, as a mixed epoch makes them."""
    return apportion(total, warp.schedule.totals(warp.r0, warp.r0 + warp.length))


_MERGES = [
    ([30, 18, 12], None, None), ([30, 18, 12], 123, None), ([500, 7, 93], 9, None), ([500, 7, 93], None, None),
    ([1, 0, 5], 4, None), ([0, 0, 3], None, None), ([0, 0, 3], 8, None), ([1000, 1], 2, None), ([1], 5, None),
    ([7] * 10, 77, None), ([7] * 10, None, None),
    (125, 3, "linear"), (125, None, "cosine"), (125, 6, "step"), (350, 1, "linear0"), (90, None, "step0"),
]


def _interleave(counts, key, kind) -> StreamInterleave:
    if kind is None:
        return StreamInterleave(counts, key)
    warp = _warp(kind.rstrip("0"), zero=kind.endswith("0"))
    return StreamInterleave(_matched(counts, warp), key, warp)


@pytest.mark.parametrize("counts,key,kind", _MERGES)
def test_interleave_lists_every_element_once_and_in_order(counts, key, kind):
    m = _interleave(counts, key, kind)
    s, j = m.locate([0], m.total)
    assert s.shape == j.shape == (1, m.total)
    s, j = s[0], j[0]
    for k, c in enumerate(m.counts):
        assert np.array_equal(j[s == k], np.arange(c))  # elements 0..K_s-1, once each, in order
    ref_s, ref_j = _interleaved(m)
    assert np.array_equal(s, ref_s) and np.array_equal(j, ref_j)


@pytest.mark.parametrize("counts,key,kind", _MERGES)
def test_interleave_rows_are_slices_of_the_whole_sequence(counts, key, kind):
    m = _interleave(counts, key, kind)
    ref_s, ref_j = _interleaved(m)
    total = m.total
    for length in sorted({1, 2, 3, 7, 16, total // 2, total - 1, total} - {0}):
        if length > total:
            continue
        starts = np.unique(np.concatenate([np.arange(0, total - length + 1, max(1, (total - length) // 23 or 1)),
                                           [total - length]]))
        s, j = m.locate(starts, length)
        idx = starts[:, None] + np.arange(length)[None, :]
        assert np.array_equal(s, ref_s[idx]) and np.array_equal(j, ref_j[idx]), length
    # the last slot on its own, and rows in any order
    s, j = m.locate([total - 1, 0, total - 1], 1)
    assert s[:, 0].tolist() == [ref_s[-1], ref_s[0], ref_s[-1]]
    assert m.locate([0], 0)[0].shape == (1, 0)


@pytest.mark.parametrize("counts,key,kind", _MERGES)
def test_interleave_progress_and_below_count_what_came_before(counts, key, kind):
    m = _interleave(counts, key, kind)
    ref_s, ref_j = _interleaved(m)
    slots = range(-1, m.total + 2) if kind is None else sorted({-1, 0, 1, m.total - 1, m.total, m.total + 1}
                                                                | set(range(0, m.total, 17)))
    for slot in slots:
        want = np.bincount(ref_s[:max(slot, 0)], minlength=m.streams)
        assert np.array_equal(m.progress(slot), want), slot
    # below(x): elements due before x, per stream
    s = np.repeat(np.arange(m.streams), m.counts)
    j = np.concatenate([np.arange(c) for c in m.counts])
    d = m.due(s, j)
    x = np.concatenate([np.linspace(0, 1, 57), d[:: max(1, d.size // 40)], [1.5]])
    got = m.below(x)
    for k in range(m.streams):
        assert np.array_equal(got[:, k], (d[s == k][None, :] < x[:, None]).sum(1))


@pytest.mark.parametrize("counts", [[30, 18, 12], [1, 1, 1], [50, 1]])
def test_interleave_due_times(counts):
    for key in (None, 11):
        m = StreamInterleave(counts, key)
        for s, c in enumerate(counts):
            j = np.arange(c)
            d = m.due(np.full(c, s), j)
            # element j is due in [j/K, (j+1)/K): at the middle without jitter
            assert (d >= j / c).all() and (d < (j + 1) / c).all()
            if key is None:
                assert np.allclose(d, (j + 0.5) / c)
        if key is not None:
            assert not np.array_equal(m.due([0] * counts[0], np.arange(counts[0])),
                                      StreamInterleave(counts, key + 1).due([0] * counts[0], np.arange(counts[0])))


@PROPS
@given(counts=st.lists(st.integers(0, 120), min_size=1, max_size=8).filter(lambda c: sum(c) > 0),
       key=st.one_of(st.none(), st.integers(0, 2**64 - 1)), data=st.data())
def test_interleave_windows_follow_constant_weights(counts, key, data):
    """A window of W slots holds each stream within a fixed bound of W * K_s / M.

    With N_s(x) the elements of stream s due before time x, N_s(x) - K_s x lies in
    [-1/2, 1/2] without jitter (due at (j + 1/2)/K_s) and in [-1, 1] with it (due in
    [j/K_s, (j+1)/K_s)); ties of a slot boundary keep that. A window spans due times
    [x_a, x_b], so n_s = K_s (x_b - x_a) + e_s with |e_s| <= 2c (c = 1/2, or 1 with
    jitter), and W = sum_t n_t. Hence n_s - W p_s = e_s (1 - p_s) - p_s sum_{t != s} e_t
    with p_s = K_s / M, and |n_s - W p_s| <= 2c ((1 - p_s) + p_s (S - 1)) over the S
    streams with elements.
    """
    m = StreamInterleave(counts, key)
    s, _ = _interleaved(m)
    M = m.total
    counts = np.asarray(counts)
    live = int((counts > 0).sum())
    p = counts / M
    c = 1.0 if key is not None else 0.5
    bound = 2 * c * ((1 - p) + p * (live - 1)) + 1e-9
    onehot = np.zeros((M + 1, m.streams), np.int64)
    onehot[np.arange(1, M + 1), s] = 1
    cum = onehot.cumsum(0)
    for w in sorted({1, 2, 5, 16, 64, M // 3, M} & set(range(1, M + 1))):
        held = cum[w:] - cum[:-w]
        assert (np.abs(held - w * p) <= bound).all(), (w, np.abs(held - w * p).max(0), bound)
    # locate agrees with the materialised sequence at a drawn place
    length = data.draw(st.integers(1, M))
    start = data.draw(st.integers(0, M - length))
    got, _ = m.locate([start], length)
    assert np.array_equal(got[0], s[start:start + length])


def test_interleave_windows_of_few_equal_streams_are_tight():
    """Observed: for three streams the deviation stays within 1.5 with jitter and 0.7 without."""
    for key, limit in ((None, 0.7), (5, 1.5)):
        m = StreamInterleave([300, 300, 300], key)
        s, _ = _interleaved(m)
        cum = np.vstack([np.zeros(3, np.int64), np.eye(3, dtype=np.int64)[s].cumsum(0)])
        for w in (3, 8, 32, 100):
            held = cum[w:] - cum[:-w]
            assert np.abs(held - w / 3).max() <= limit


@pytest.mark.parametrize("kind", SCHEDULE_KINDS)
def test_interleave_under_a_warp_puts_each_stream_where_its_weight_is(kind):
    warp = _warp(kind)
    counts = _matched(1200, warp)
    for key in (None, 3):
        m = StreamInterleave(counts, key, warp)
        s, j = _interleaved(m)
        a, b = m.locate([0], m.total)
        assert np.array_equal(a[0], s) and np.array_equal(b[0], j)
        # stream s is due at the rate of its weight: its elements due before x number K_s F_s(x), within 1
        for q in (0.25, 0.5, 0.75):
            head = int(q * m.total)
            before = np.bincount(s[:head], minlength=3)
            x = np.max(m.due(s[:head], j[:head]))
            expected = counts * warp.forward(np.full(3, x), np.arange(3))
            assert (np.abs(before - expected) <= 1 + 1e-9).all()
            # and the slots follow the epoch time: about M x slots lie before x
            assert abs(head - m.total * x) <= 2 * 3 + 1
        first, last = np.bincount(s[:300], minlength=3), np.bincount(s[-300:], minlength=3)
        assert first[0] > last[0] + 50 and first[2] + 50 < last[2]


@pytest.mark.parametrize("kind", [None, *SCHEDULE_KINDS])
@pytest.mark.parametrize("key", [None, 17])
def test_interleave_of_a_trillion_elements_is_consistent(kind, key):
    """Far beyond what can be materialised: rows agree with progress() at scattered slots."""
    total = 10**12
    if kind is None:
        m = StreamInterleave([total // 2, total // 3, total - total // 2 - total // 3], key)
    else:
        warp = _warp(kind)
        m = StreamInterleave(_matched(total, warp), key, Warp(warp.schedule, 0.0, 1000.0))
    for a in (0, 1, total // 3, total // 2 + 12345, total - 100, total - 64):
        s, j = m.locate([a], 64)
        before = m.progress(a)
        assert int(before.sum()) == a
        for k in range(3):
            assert np.array_equal(j[0][s[0] == k], before[k] + np.arange((s[0] == k).sum()))
        assert np.array_equal(m.progress(a + 64) - before, np.bincount(s[0], minlength=3))
    assert np.array_equal(m.progress(total), m.counts)


# -- Mixture and MixedEpoch: the grid ----------------------------------------------------------------

SIZES = [[10, 10, 7], [5, 5], [40]]  # 27, 10 and 40 samples
WEIGHTS = [0.5, 0.3, 0.2]
EPOCH = 61  # counts [31, 18, 12]: streams 0 and 1 up-sampled, stream 2 down-sampled
CHOOSE = [50, 12, 25]  # absolute counts: up, up, down
G, DEVICE = 8, 4


def _mixture(method="random", shuffle=True, ncn=1, tail="pad", config="weights", seed=9176, sampling="balanced",
             granularity=1, sizes=SIZES) -> Mixture:
    spec = PlanSpec(shuffle=shuffle, seed=seed, num_canonical_nodes=ncn, tail=tail)
    mix = MixSpec(method=method, sampling=sampling, granularity=granularity)
    if config == "weights":
        return Mixture(sizes, spec, mix, schedule=Schedule([(0, WEIGHTS)]), epoch_size=EPOCH)
    return Mixture(sizes, spec, mix, choose=CHOOSE)


def _epoch(m: Mixture, epoch=0, g=G) -> MixedEpoch:
    return m.epoch(epoch, g, DEVICE if m.mix.method == "device_per_stream" else None)


def _ids(ep: MixedEpoch) -> np.ndarray:
    return ep.sample_ids(np.arange(ep.origin, ep.end))


def _stream_of(m: Mixture, ids) -> np.ndarray:
    return np.searchsorted(np.cumsum(m.stream_samples), ids, side="right")


def _own_sequence(ep: MixedEpoch, s: int, k: int) -> np.ndarray:
    """The first ``k`` ids of stream ``s`` read from its own epoch plan (wrapping for stratified)."""
    m = ep.mixture
    c = int(ep.counts[s])
    batch = ep.unit if ep.method in ("per_stream", "device_per_stream") else 1
    plan, draw = m.stream_plan(s, ep.epoch, c, batch)
    v = np.arange(k) % c if ep.method == "stratified" else np.arange(k)
    return m.base[s] + draw.local_ids(plan.sample_ids(v))


def _wrap(ep: MixedEpoch) -> int:
    """Positions of the epoch before its padding starts repeating it (stratified: never)."""
    return ep.end if ep.method == "stratified" else ep.wrap


_GRID = list(itertools.product(BATCHING_METHODS, (False, True), STEP_TAILS, (1, 2, 3), ("weights", "choose")))


@pytest.mark.parametrize("method,shuffle,tail,ncn,config", _GRID)
def test_mixed_epoch_grid(method, shuffle, tail, ncn, config):
    m = _mixture(method, shuffle, ncn, tail, config)
    counts = m.counts(0)
    expected = apportion(EPOCH, WEIGHTS) if config == "weights" else np.asarray(CHOOSE)
    assert np.array_equal(counts, expected)
    assert int(counts.sum()) == m.epoch_size
    ep = _epoch(m)
    assert np.array_equal(ep.counts, counts) and ep.num_samples == int(counts.sum())
    assert ep.end - ep.origin == ep.steps * G and ep.origin == 0
    ids = _ids(ep)
    assert ids.shape == (ep.end,)
    assert ids.min() >= 0 and ids.max() < int(m.stream_samples.sum())
    streams = _stream_of(m, ids)
    for s in range(3):  # every id lies in its stream's range
        mine = ids[streams == s]
        assert ((mine >= m.base[s]) & (mine < m.base[s] + m.stream_samples[s])).all()
    n = ep.num_samples
    rounded = (lambda a, u: -(-a // u)) if tail == "pad" else (lambda a, u: a // u)
    if method == "random":
        assert ep.steps == rounded(n, G)
        whole = ids if tail == "pad" else _ids(m.epoch(0, 1))  # G = 1: the epoch with nothing dropped
        assert whole.size >= n
        assert np.array_equal(np.bincount(_stream_of(m, whole[:n]), minlength=3), counts)  # exact counts
    elif method == "stratified":
        assert ep.steps == rounded(n, G)
        share = apportion(G, counts)
        for k in range(ep.steps):  # each stream's share as one run, in stream order
            assert np.array_equal(streams[k * G:(k + 1) * G], np.repeat(np.arange(3), share)), k
    else:
        u = G if method == "per_stream" else DEVICE
        slots = np.asarray([rounded(int(c), u) for c in counts])
        assert ep.wrap == int(slots.sum()) * u
        assert ep.steps == rounded(ep.wrap, G)
        units = streams.reshape(-1, u)
        assert (units == units[:, :1]).all()  # every unit from one stream
        # every slot of every stream, read one unit at a time; the epoch reads it from its start, wrapping
        whole = _ids(m.epoch(0, u, u if method == "device_per_stream" else None))
        assert whole.size == ep.wrap
        assert np.array_equal(np.bincount(_stream_of(m, whole), minlength=3), slots * u)
        assert np.array_equal(ids, whole[np.arange(ep.end) % ep.wrap])
    # each stream reads its own plan as a prefix
    wrap = min(_wrap(ep), ep.end)
    for s in range(3):
        mine = ids[:wrap][streams[:wrap] == s]
        assert np.array_equal(mine, _own_sequence(ep, s, mine.size)), s
    # padding repeats the epoch's first positions (units)
    if ep.end > wrap:
        assert tail == "pad" and ep.end - wrap < G
        assert np.array_equal(ids[wrap:], ids[:ep.end - wrap])
    if tail == "drop" and method in ("random", "stratified"):  # the same units, fewer steps
        assert np.array_equal(ids, _ids(_epoch(_mixture(method, shuffle, ncn, "pad", config)))[:ep.end])


@pytest.mark.parametrize("method", BATCHING_METHODS)
@pytest.mark.parametrize("shuffle", [False, True])
@pytest.mark.parametrize("ncn", [1, 3])
@pytest.mark.parametrize("tail", STEP_TAILS)
def test_mixed_epoch_is_the_same_for_every_world(method, shuffle, ncn, tail):
    ep = _epoch(_mixture(method, shuffle, ncn, tail, "choose"), epoch=1)
    whole = _ids(ep)
    for nodes, ranks, workers in ((1, 1, 0), (1, 2, 2), (2, 2, 1), (2, 4, 3), (4, 2, 0), (1, 8, 2), (8, 1, 5)):
        got = np.full(ep.end - ep.origin, -1, np.int64)
        for node, rank, worker in itertools.product(range(nodes), range(ranks), range(max(workers, 1))):
            world = World(nodes, ranks, node, rank, workers, worker)
            for steps, batch in ep.iter_worker(world, chunk=12):
                pos = ep.worker_positions(world, steps) - ep.origin
                assert (got[pos] == -1).all()
                got[pos] = batch
        assert np.array_equal(got, whole), (nodes, ranks, workers)


@pytest.mark.parametrize("method", BATCHING_METHODS)
@pytest.mark.parametrize("ncn", [1, 2])
def test_mixed_epochs_are_deterministic_and_differ_between_epochs(method, ncn):
    a = [_ids(_epoch(_mixture(method, True, ncn, "pad", "weights"), e)) for e in range(3)]
    b = [_ids(_epoch(_mixture(method, True, ncn, "pad", "weights"), e)) for e in range(3)]
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    assert len({tuple(x) for x in a}) == 3
    if method != "stratified":  # the interleaving of the streams itself changes between epochs
        m = _mixture(method, True, ncn, "pad", "weights")
        assert len({tuple(_stream_of(m, x)) for x in a}) == 3
    # the seed matters too
    other = _ids(_epoch(_mixture(method, True, ncn, "pad", "weights", seed=1), 0))
    assert not np.array_equal(other, a[0])
    # without shuffling, only the draw of the partial copies may change between epochs
    plain = [_ids(_epoch(_mixture(method, False, ncn, "pad", "weights", sampling="fixed"), e)) for e in range(3)]
    assert all(np.array_equal(x, plain[0]) for x in plain)


@pytest.mark.parametrize("method", BATCHING_METHODS)
@pytest.mark.parametrize("config", ["weights", "choose"])
@pytest.mark.parametrize("tail", STEP_TAILS)
def test_fixed_sampling_draws_the_same_subset_every_epoch(method, config, tail):
    """Stream 2 is down-sampled (12 of 40, or 25 of 40): fixed sampling reads the same subset in
    every epoch, balanced sampling a new one (the epochs' orders differ in both)."""
    for sampling in ("fixed", "balanced"):
        m = _mixture(method, True, 1, tail, config, sampling=sampling)
        c = int(m.counts(0)[2])
        seen = []
        for e in range(3):
            ep = _epoch(m, e)
            ids = _ids(ep)[:min(_wrap(ep), ep.end)]
            seen.append(set(ids[_stream_of(m, ids) == 2].tolist()))
            _, draw = m.stream_plan(2, e, c, 1)
            assert seen[-1] <= set((m.base[2] + draw.local_ids(np.arange(c))).tolist())
        union = set().union(*seen)
        if sampling == "fixed":
            assert len(union) <= c
        else:
            assert len(union) > c + 5


@PROPS
@given(sizes=st.lists(st.lists(st.integers(1, 20), min_size=1, max_size=4), min_size=1, max_size=4),
       data=st.data(), method=st.sampled_from(BATCHING_METHODS), shuffle=st.booleans(),
       tail=st.sampled_from(STEP_TAILS), g=st.integers(1, 12), epoch=st.integers(0, 3), seed=st.integers(0, 2**40),
       ncn=st.integers(1, 4))
def test_mixed_epochs_of_drawn_mixtures(sizes, data, method, shuffle, tail, g, epoch, seed, ncn):
    choose = data.draw(st.lists(st.integers(0, 70), min_size=len(sizes), max_size=len(sizes)).filter(any))
    device = data.draw(st.sampled_from([d for d in range(1, g + 1) if g % d == 0]))
    granularity = data.draw(st.integers(1, 5))
    m = Mixture(sizes, PlanSpec(shuffle=shuffle, seed=seed, num_canonical_nodes=ncn, tail=tail),
                MixSpec(method, granularity=granularity), choose=choose)
    counts = np.asarray(choose)
    if method == "stratified" and ((counts > 0) & (apportion(g, counts) == 0)).any():
        with pytest.raises(InvalidArgumentError, match="stratified"):
            m.epoch(epoch, g)
        return
    ep = m.epoch(epoch, g, device)
    ids = _ids(ep)
    streams = _stream_of(m, ids)
    assert ids.size == ep.steps * g and (ids.size == 0 or (ids.min() >= 0 and ids.max() < m.stream_samples.sum()))
    assert not np.isin(streams, np.flatnonzero(counts == 0)).any()
    wrap = min(_wrap(ep), ep.end)
    for s in np.flatnonzero(counts):
        mine = ids[:wrap][streams[:wrap] == s]
        assert np.array_equal(mine, _own_sequence(ep, int(s), mine.size))
    _draw_check(ep)  # every stream's draw reaches the epoch
    n = int(counts.sum())
    if method == "random":
        whole = _ids(m.epoch(epoch, 1))
        assert np.array_equal(np.bincount(_stream_of(m, whole), minlength=len(sizes)), counts)
        assert np.array_equal(ids, whole[np.arange(ids.size) % n])
    elif method == "stratified":
        share = apportion(g, counts)
        assert (streams.reshape(-1, g) == np.repeat(np.arange(len(sizes)), share)[None, :]).all()
    else:
        u = ep.unit
        assert (streams.reshape(-1, u) == streams.reshape(-1, u)[:, :1]).all()
    # a world of two readers per step (when the batch splits) reads the same positions
    if g % 2 == 0:
        got = np.empty_like(ids)
        for rank in range(2):
            world = World(1, 2, 0, rank)
            for steps, batch in ep.iter_worker(world):
                got[ep.worker_positions(world, steps)] = batch
        assert np.array_equal(got, ids)


@pytest.mark.parametrize("method", BATCHING_METHODS)
@pytest.mark.parametrize("kind", SCHEDULE_KINDS)
@pytest.mark.parametrize("tail", STEP_TAILS)
@pytest.mark.parametrize("ncn", [1, 3])
def test_scheduled_epochs_with_streams_switched_off(method, kind, tail, ncn):
    """Weights with zeros: a stream with no weight over an epoch gets no sample of it."""
    n = 97
    sched = Schedule([(20, [1, 0, 1]), (150, [0, 1, 0]), (250, [1, 1, 0])], kind)
    m = Mixture(SIZES, PlanSpec(shuffle=True, num_canonical_nodes=ncn, tail=tail), MixSpec(method=method),
                schedule=sched, epoch_size=n)
    zero_seen = False
    for e in range(4):
        counts = m.counts(e)
        assert np.array_equal(counts, apportion(n, sched.totals(e * n, (e + 1) * n)))
        ep = m.epoch(e, G, DEVICE)
        ids = _ids(ep)
        streams = _stream_of(m, ids)
        off = np.flatnonzero(counts == 0)
        zero_seen |= off.size > 0
        assert not np.isin(streams, off).any()
        wrap = min(_wrap(ep), ep.end)
        for s in np.flatnonzero(counts):
            mine = ids[:wrap][streams[:wrap] == s]
            assert np.array_equal(mine, _own_sequence(ep, int(s), mine.size))
        if method == "random":
            whole = _ids(m.epoch(e, 1))
            assert np.array_equal(np.bincount(_stream_of(m, whole), minlength=3), counts)
    assert zero_seen


def test_sparse_positions_of_a_long_epoch_agree_with_dense_reads():
    m = Mixture([[1000] * 30, [700] * 10, [50_000]], PlanSpec(shuffle=True, num_canonical_nodes=2), MixSpec(),
                schedule=Schedule([(0, [0.2, 0.5, 0.3]), (400_000, [0.6, 0.1, 0.3])], "cosine"), epoch_size=300_000)
    ep = m.epoch(1, 512)
    dense = _ids(ep)
    assert np.array_equal(np.bincount(_stream_of(m, dense[:300_000]), minlength=3), ep.counts)
    picks = [np.array([0, 7, 150_000, 150_001, ep.end - 1]), np.arange(0, ep.end, 9973),
             np.concatenate([np.arange(1000, 1100), np.arange(250_000, 250_300), [5]])]
    for pos in picks:
        assert np.array_equal(ep.sample_ids(pos), dense[pos])


# -- the draw of each stream reaches the epoch ---------------------------------------------------------

def _draw_check(ep: MixedEpoch):
    """For every stream: its ids in the epoch (before padding repeats it), up to its count, are
    samples of its draw, no more often than drawn; and all of the draw when the stream has that many."""
    m = ep.mixture
    ids = _ids(ep)[:min(_wrap(ep), ep.end)]
    streams = _stream_of(m, ids)
    for s in range(m.num_streams):
        c = int(ep.counts[s])
        _, draw = m.stream_plan(s, ep.epoch, c, 1)
        drawn = np.bincount(draw.local_ids(np.arange(c)), minlength=m.stream_samples[s])
        mine = ids[streams == s][:c] - m.base[s]
        got = np.bincount(mine, minlength=m.stream_samples[s])
        assert (got <= drawn).all(), f"stream {s}: samples beyond the draw"
        if mine.size == c:
            assert np.array_equal(got, drawn), f"stream {s}: not its draw"


_DRAW_SIZES = [[10, 10, 7], [5, 5], [41]]


@pytest.mark.parametrize("method", BATCHING_METHODS)
@pytest.mark.parametrize("tail", STEP_TAILS)
@pytest.mark.parametrize("shuffle", [False, True])
def test_each_stream_supplies_exactly_its_draw_with_one_region(method, tail, shuffle):
    for config in ("weights", "choose"):
        m = _mixture(method, shuffle, 1, tail, config, sizes=_DRAW_SIZES)
        for e in range(2):
            _draw_check(_epoch(m, e))


@pytest.mark.parametrize("method", BATCHING_METHODS)
@pytest.mark.parametrize("ncn", [2, 3])
@pytest.mark.parametrize("tail", STEP_TAILS)
def test_each_stream_supplies_exactly_its_draw_with_several_canonical_nodes(method, ncn, tail):
    """Counts [31, 18, 12] and [50, 12, 25] do not split evenly into 2 or 3 regions (31 and 25 are odd,
    31 and 50 not multiples of 3); a stream's draw must still reach the epoch exactly."""
    for config in ("weights", "choose"):
        for shuffle in (False, True):
            _draw_check(_epoch(_mixture(method, shuffle, ncn, tail, config, sizes=_DRAW_SIZES)))


@pytest.mark.parametrize("method", BATCHING_METHODS)
def test_canonical_nodes_do_not_change_a_mixed_order(method):
    for config in ("weights", "choose"):
        one = _ids(_epoch(_mixture(method, True, 1, "pad", config)))
        for ncn in (2, 3, 8):
            assert np.array_equal(_ids(_epoch(_mixture(method, True, ncn, "pad", config))), one)


@pytest.mark.parametrize("method", ["per_stream", "device_per_stream"])
@pytest.mark.parametrize("ncn", [1, 2, 3])
@pytest.mark.parametrize("shuffle", [False, True])
def test_padded_units_cover_each_streams_draw(method, ncn, shuffle):
    """Whole units round a stream's count up; with tail='pad' its units hold all of its draw."""
    for config in ("weights", "choose"):
        ep = _epoch(_mixture(method, shuffle, ncn, "pad", config, sizes=_DRAW_SIZES))
        m = ep.mixture
        ids = _ids(ep)[:ep.wrap]
        streams = _stream_of(m, ids)
        for s in range(3):
            c = int(ep.counts[s])
            _, draw = m.stream_plan(s, 0, c, 1)
            drawn = np.bincount(draw.local_ids(np.arange(c)), minlength=m.stream_samples[s])
            got = np.bincount(ids[streams == s] - m.base[s], minlength=m.stream_samples[s])
            assert (got >= drawn).all() and got.sum() == -(-c // ep.unit) * ep.unit


@pytest.mark.parametrize("ncn", [1, 2, 3])
def test_one_copy_of_each_stream_reads_each_sample_once(ncn):
    sizes = [[10, 10, 7], [5, 5], [41]]
    m = Mixture(sizes, PlanSpec(shuffle=True, num_canonical_nodes=ncn), MixSpec(), choose=[27, 10, 41])
    ep = m.epoch(0, 1)
    ids = _ids(ep)
    assert np.unique(ids).size == ids.size == 78


# -- resumption ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("shuffle", [False, True])
@pytest.mark.parametrize("ncn", [1, 2, 3])
@pytest.mark.parametrize("tail", STEP_TAILS)
@pytest.mark.parametrize("config", ["weights", "choose"])
def test_random_epochs_resume_on_any_global_batch(shuffle, ncn, tail, config):
    m = _mixture("random", shuffle, ncn, tail, config)
    n = m.epoch_size
    order = m.epoch(0, 1).sample_ids(np.arange(n))  # the epoch's sequence; padding wraps it

    def seq(a, b):
        return order[np.arange(a, b) % n]

    ep = m.epoch(0, G)
    assert np.array_equal(_ids(ep), seq(0, ep.end))
    for k in range(ep.steps + 1):
        p = k * G
        for g2 in (1, 3, 5, 8, 13, 16):
            r = ep.resume(p, g2)
            assert r.origin == p or (r is ep and g2 == G)
            rest = _ids(r) if r is ep else r.sample_ids(np.arange(p, r.end))
            if r is not ep:
                assert np.array_equal(np.concatenate([_ids(ep)[:p], rest]), seq(0, r.end))
                assert r.resume_unit is None
                if tail == "pad":
                    assert n <= r.end < n + g2 or (p >= n and r.end == p)
                else:
                    assert n - g2 < r.end <= n or (p > n - g2 and r.end == p)
            # and again, from a later step of the resumed plan
            if r.steps > 1:
                q = r.origin + r.global_batch
                again = r.resume(q, 7)
                assert np.array_equal(again.sample_ids(np.arange(q, again.end)), seq(q, again.end))


@pytest.mark.parametrize("method", ["stratified", "per_stream", "device_per_stream"])
@pytest.mark.parametrize("shuffle", [False, True])
@pytest.mark.parametrize("tail", STEP_TAILS)
@pytest.mark.parametrize("ncn", [1, 2])
def test_batch_methods_resume_on_the_same_unit(method, shuffle, tail, ncn):
    m = _mixture(method, shuffle, ncn, tail, "weights")
    ep = _epoch(m)
    ids = _ids(ep)
    assert ep.resume_unit == (DEVICE if method == "device_per_stream" else G)
    for k in range(ep.steps + 1):
        p = k * G
        assert ep.resume(p, G) is ep
        fresh = m.epoch(0, G, ep.device_batch_size, origin=p)  # a plan opened at p
        assert fresh.end == ep.end
        assert np.array_equal(fresh.sample_ids(np.arange(p, fresh.end)), ids[p:])
    if method != "device_per_stream":
        return
    # the device batch fixes the order: any global batch made of whole device batches continues it
    whole = m.epoch(0, DEVICE, DEVICE)
    order = whole.sample_ids(np.arange(whole.end))
    assert whole.end == ep.wrap
    for k in range(ep.steps + 1):
        p = k * G
        for g2 in (4, 16, 12):
            r = ep.resume(p, g2)
            rest = r.sample_ids(np.arange(p, r.end))
            assert np.array_equal(np.concatenate([ids[:p], rest]), order[np.arange(r.end) % whole.end])
            if p < ep.wrap:  # the fewest steps that cover the units (pad), the most that fit them (drop)
                assert ep.wrap <= r.end < ep.wrap + g2 if tail == "pad" else ep.wrap - g2 < r.end <= ep.wrap


def test_resume_rejects_positions_outside_the_epoch():
    ep = _epoch(_mixture())
    for p in (-1, ep.end + 1):
        with pytest.raises(InvalidArgumentError, match="outside"):
            ep.resume(p, 4)
    assert ep.resume(ep.end, 3).steps == 0


# -- schedules ------------------------------------------------------------------------------------------

_W_FROM, _W_TO = [0.8, 0.1, 0.1], [0.1, 0.1, 0.8]


def _scheduled(kind, n, method="random", shuffle=True, ncn=1, g=G, tail="pad") -> Mixture:
    points = [(n, _W_FROM), (n + n // 2 if kind == "step" else 2 * n, _W_TO)]
    return Mixture(SIZES, PlanSpec(shuffle=shuffle, num_canonical_nodes=ncn, tail=tail), MixSpec(method=method),
                   schedule=Schedule(points, kind), epoch_size=n)


@pytest.mark.parametrize("kind", SCHEDULE_KINDS)
@pytest.mark.parametrize("shuffle", [False, True])
def test_schedule_counts_are_the_integral_of_the_weights(kind, shuffle):
    n = 400
    m = _scheduled(kind, n, shuffle=shuffle)
    for e in range(4):
        counts = m.counts(e)
        assert np.array_equal(counts, apportion(n, m.schedule.totals(e * n, (e + 1) * n)))
        # the integral by a dense midpoint sum agrees within the rounding
        dense = m.schedule.weights(e * n + (np.arange(4 * n) + 0.5) / 4).sum(0) / 4
        assert (np.abs(counts - dense) < 1 + 1e-6).all()
        ep = m.epoch(e, G)
        ids = _ids(ep)
        assert np.array_equal(np.bincount(_stream_of(m, ids[:n]), minlength=3), counts)
    # before the first point and after the last the weights are constant
    assert np.array_equal(m.counts(0), apportion(n, _W_FROM))
    assert np.array_equal(m.counts(5), apportion(n, _W_TO))
    assert m.warp(0) is None or np.allclose(m.warp(0).forward(0.3, 0), 0.3)


@pytest.mark.parametrize("kind", SCHEDULE_KINDS)
@pytest.mark.parametrize("ncn", [1, 2])
def test_schedule_moves_the_mix_within_an_epoch(kind, ncn):
    n = 400
    m = _scheduled(kind, n, ncn=ncn)
    ep = m.epoch(1, G)
    streams = _stream_of(m, _ids(ep)[:n])
    q = n // 4
    first, last = np.bincount(streams[:q], minlength=3) / q, np.bincount(streams[-q:], minlength=3) / q
    assert first[0] - last[0] > 0.4 and last[2] - first[2] > 0.4
    # every quarter holds about the integral of the weights over it
    for a in range(0, n, q):
        held = np.bincount(streams[a:a + q], minlength=3)
        want = m.schedule.totals(n + a, n + a + q)
        assert (np.abs(held - want) <= 3).all(), (a, held, want)
    assert np.allclose(ep.weights_at(0), _W_FROM) and np.allclose(ep.weights_at(n - 1) if kind != "step" else
                                                                  ep.weights_at(n - 1), m.schedule.weights(2 * n - 1))


@pytest.mark.parametrize("kind", SCHEDULE_KINDS)
def test_stratified_under_a_schedule_follows_the_weights_batch_by_batch(kind):
    n, g = 6000, 4  # 1500 steps: past the stored progress checkpoints
    m = _scheduled(kind, n, method="stratified", g=g)
    ep = m.epoch(1, g)
    ids = _ids(ep)
    streams = _stream_of(m, ids)
    centre = n + (np.arange(ep.steps) + 0.5) * g
    w = m.schedule.weights(centre)
    for k in range(ep.steps):
        share = apportion(g, w[k])
        assert np.array_equal(streams[k * g:(k + 1) * g], np.repeat(np.arange(3), share)), k
    for s in range(3):
        mine = ids[streams == s]
        assert np.array_equal(mine, _own_sequence(ep, s, mine.size))
    # a plan opened mid-epoch agrees
    for p in (4096, 4100, 5996):
        fresh = m.epoch(1, g, origin=p)
        assert np.array_equal(fresh.sample_ids(np.arange(p, fresh.end)), ids[p:])


@pytest.mark.parametrize("kind", SCHEDULE_KINDS)
@pytest.mark.parametrize("method", ["per_stream", "device_per_stream"])
def test_batch_methods_under_a_schedule(kind, method):
    n = 800
    m = _scheduled(kind, n, method=method)
    ep = m.epoch(1, G, DEVICE)
    ids = _ids(ep)
    streams = _stream_of(m, ids)
    u = ep.unit
    units = streams.reshape(-1, u)
    assert (units == units[:, :1]).all()
    counts = m.counts(1)
    assert np.array_equal(np.bincount(streams[:ep.wrap], minlength=3), -(-counts // u) * u)
    q = ep.wrap // 4
    first, last = np.bincount(streams[:q], minlength=3), np.bincount(streams[-q:], minlength=3)
    assert first[0] > last[0] + q // 3 and first[2] + q // 3 < last[2]


# -- laziness --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("method", ["random", "per_stream", "stratified"])
def test_a_thousand_streams_cost_nothing_until_read(method):
    sizes = [[3, 4]] * 1000
    m = Mixture(sizes, PlanSpec(shuffle=True, num_canonical_nodes=2), MixSpec(method=method),
                schedule=Schedule([(0, np.ones(1000))]), epoch_size=21_000)
    g = 3000
    ep = m.epoch(3, g)
    assert ep._subs == {} and ep.nbytes() == 0
    pos = np.concatenate([np.arange(100), np.arange(ep.end - 50, ep.end)])
    ids = ep.sample_ids(pos)
    streams = _stream_of(m, ids)
    assert len(ep._subs) == np.unique(streams).size <= 150
    assert 0 < ep.nbytes() < 64 * 1024
    assert np.array_equal(ep.sample_ids(pos), ids)
    assert int(ep.counts.sum()) == 21_000 and (ep.counts == 21).all()


def test_an_up_sampled_stream_reads_its_copies_in_turn():
    """50 000 copies of a 7-sample stream and a 3-sample partial copy: every sample 50 000 or
    50 001 times, exactly as drawn."""
    m = Mixture([[3, 4], [5]], PlanSpec(shuffle=True), MixSpec(), choose=[7 * 50_000 + 3, 5])
    ep = m.epoch(0, 4096)
    ids = ep.sample_ids(np.arange(ep.num_samples))
    mine = ids[ids < 7]
    times = np.bincount(mine, minlength=7)
    assert times.min() == 50_000 and times.max() == 50_001 and (times == 50_001).sum() == 3
    assert np.array_equal(np.sort(ids[ids >= 7]), np.arange(7, 12))


# -- validation --------------------------------------------------------------------------------------------

def test_stratified_rejects_a_stream_with_no_share_of_the_batch():
    m = Mixture(SIZES, PlanSpec(), MixSpec(method="stratified"), choose=[100, 1, 1])
    with pytest.raises(InvalidArgumentError, match=r"streams \[1, 2\]"):
        m.epoch(0, 4)
    m.epoch(0, 102)  # a batch large enough for one sample of each
    w = Mixture(SIZES, PlanSpec(), MixSpec(method="stratified"), schedule=Schedule([(0, [0.9, 0.05, 0.05])]),
                epoch_size=100)
    with pytest.raises(InvalidArgumentError, match=r"streams \[1, 2\]"):
        w.epoch(0, 4)  # quotas 3.6, 0.2, 0.2
    with pytest.raises(InvalidArgumentError, match=r"streams \[2\]"):
        w.epoch(0, 8)  # quotas 7.2, 0.4, 0.4: the remainder goes to stream 1
    # a stream with no sample this epoch is not starved
    z = Mixture(SIZES, PlanSpec(), MixSpec(method="stratified"), choose=[10, 0, 10])
    assert z.epoch(0, 2).steps == 10


@pytest.mark.parametrize("device", [None, 3, 16, 5])
def test_device_per_stream_needs_a_device_batch_dividing_the_global_batch(device):
    m = _mixture("device_per_stream")
    with pytest.raises(InvalidArgumentError, match="device batch"):
        m.epoch(0, 8, device)


@pytest.mark.parametrize("kwargs,match", [
    ({"method": "roundrobin"}, "batching_method"), ({"sampling": "uniform"}, "sampling_method"),
    ({"granularity": 0}, "granularity"), ({"granularity": 2.0}, "granularity"), ({"granularity": True}, "granularity"),
])
def test_bad_mix_specs_are_rejected(kwargs, match):
    with pytest.raises(InvalidArgumentError, match=match):
        MixSpec(**kwargs)


def test_bad_mixtures_are_rejected():
    spec, mix = PlanSpec(), MixSpec()
    sched = Schedule([(0, [1, 1, 1])])
    with pytest.raises(InvalidArgumentError, match="either"):
        Mixture(SIZES, spec, mix)
    with pytest.raises(InvalidArgumentError, match="either"):
        Mixture(SIZES, spec, mix, choose=[1, 1, 1], schedule=sched)
    for choose in ([1, 1], [1, -1, 1]):
        with pytest.raises(InvalidArgumentError, match="choose"):
            Mixture(SIZES, spec, mix, choose=choose)
    with pytest.raises(InvalidArgumentError, match="2 streams"):
        Mixture(SIZES, spec, mix, schedule=Schedule([(0, [1, 1])]))
    with pytest.raises(InvalidArgumentError, match=r"streams \[1\]"):
        Mixture([[3], [0, 0], [4]], spec, mix, choose=[1, 0, 1])
    for size in (2**53, 2**61):  # beyond 2**53 float64 cannot share an epoch exactly
        with pytest.raises(InvalidArgumentError, match="2\\*\\*53"):
            Mixture(SIZES, PlanSpec(num_canonical_nodes=4), mix, schedule=sched, epoch_size=size)
    # the default epoch size is the streams' total
    assert Mixture(SIZES, spec, mix, schedule=sched).epoch_size == 77


def test_bad_epochs_and_positions_are_rejected():
    m = _mixture()
    for g in (0, -1, 2.0, True):
        with pytest.raises(InvalidArgumentError, match="global batch"):
            m.epoch(0, g)
    for e in (-1, 1.5, False):
        with pytest.raises(InvalidArgumentError, match="epoch"):
            m.epoch(e, 4)
    ep = m.epoch(0, 4)
    for bad in ([-1], [ep.end]):
        with pytest.raises(InvalidArgumentError, match="positions"):
            ep.sample_ids(bad)
    with pytest.raises(InvalidArgumentError, match="origin"):
        _mixture("per_stream").epoch(0, 8, origin=4)
    assert ep.sample_ids(np.zeros((0,), np.int64)).shape == (0,)
    assert ep.sample_ids(np.arange(12).reshape(3, 4)).shape == (3, 4)


def test_sample_ids_in_any_order_and_shape_agree():
    for method in BATCHING_METHODS:
        ep = _epoch(_mixture(method, True, 2, "pad", "choose"))
        ids = _ids(ep)
        rng = np.random.default_rng(5)
        pos = rng.permutation(ep.end)
        assert np.array_equal(ep.sample_ids(pos), ids[pos])
        assert np.array_equal(ep.sample_ids(pos[:24].reshape(2, 3, 4)), ids[pos[:24]].reshape(2, 3, 4))
        assert np.array_equal(ep.sample_ids(np.array([5, 5, 5, 0])), ids[[5, 5, 5, 0]])
        assert int(ep.sample_ids(ep.end - 1)) == ids[-1]
