"""The batch ring (shardstream.ring): slots, leases, packing and unpacking, in one process and across processes."""

from __future__ import annotations

import gc
import multiprocessing
import pickle
from collections import namedtuple
from multiprocessing.reduction import ForkingPickler

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardstream import InvalidArgumentError, Ragged
from shardstream.ring import Ring, RingStateError
from shardstream.ring.memory import FREE, TAKEN, find
from shardstream.ring.pack import Packed, pack

Pair = namedtuple("Pair", "left right")

DTYPES = [np.uint8, np.int16, np.int32, np.int64, np.float16, np.float32, np.float64, np.bool_, np.complex64]


def crossed(obj):
    """``obj`` pickled as a worker sends it and unpickled as the training process receives it."""
    return pickle.loads(ForkingPickler.dumps(obj))


def same(a, b) -> bool:
    """Equal values of the same types, through the containers a batch may have."""
    if isinstance(a, np.ndarray):
        return isinstance(b, np.ndarray) and a.dtype == b.dtype and a.shape == b.shape and (
            a.tobytes() == b.tobytes() if a.dtype != object else a.tolist() == b.tolist())
    if isinstance(a, Ragged):
        return isinstance(b, Ragged) and same(a.values, b.values) and same(np.asarray(a.offsets), b.offsets) \
            and (a.shapes is None) == (b.shapes is None)
    if isinstance(a, dict):
        return type(b) is dict and list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and a == b


@st.composite
def arrays(draw):
    dtype = draw(st.sampled_from(DTYPES))
    shape = tuple(draw(st.lists(st.integers(0, 5), min_size=0, max_size=3)))
    raw = draw(st.binary(min_size=int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize,
                         max_size=int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize))
    a = np.frombuffer(raw, np.uint8).view(dtype).reshape(shape).copy() if raw else np.zeros(shape, dtype)
    if draw(st.booleans()) and a.ndim >= 1 and a.shape[0] > 1:
        a = a[::2]  # not contiguous
    return a


@st.composite
def raggeds(draw):
    lengths = draw(st.lists(st.integers(0, 6), min_size=0, max_size=6))
    offsets = np.zeros(len(lengths) + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    values = np.arange(int(offsets[-1]), dtype=draw(st.sampled_from([np.int32, np.float32, np.uint8])))
    return Ragged(values, offsets)


leaves = st.one_of(arrays(), raggeds(), st.text(max_size=5), st.integers(), st.none(),
                   st.lists(st.text(max_size=3), max_size=4), st.just(np.array(["a", "bc"], dtype=object)))
batches = st.recursive(
    leaves,
    lambda inner: st.one_of(st.dictionaries(st.text(min_size=1, max_size=4), inner, max_size=4),
                            st.lists(inner, max_size=4), st.tuples(inner, inner), st.builds(Pair, inner, inner)),
    max_leaves=12)


@settings(max_examples=150, deadline=None)
@given(batches)
def test_a_batch_comes_back_equal_and_its_slot_is_freed_when_dropped(batch):
    ring = Ring(1, 2, 1 << 16)
    packed, nbytes = pack(ring, 0, batch)
    if packed is None:  # nothing numeric to write
        assert nbytes == 0
        return
    slot = packed.slot
    assert ring.flags[slot] == TAKEN and nbytes <= ring.slot_bytes
    got = crossed(packed)
    assert same(batch, got)
    assert ring.held() == 1
    del got
    gc.collect()
    assert ring.flags[slot] == FREE and ring.held() == 0


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 3), min_size=1, max_size=40), st.randoms())
def test_slots_are_reused_whatever_the_order_of_release(takes, rnd):
    ring = Ring(2, 3, 4096)
    held = {0: [], 1: []}
    for worker in (w % 2 for w in takes):
        mine = held[worker]
        packed, _ = pack(ring, worker, {"v": np.full(10, worker, np.int64)})
        if len(mine) == ring.per_worker:  # all of this worker's slots are held: nothing is written
            assert packed is None
        else:
            assert packed is not None and worker * 3 <= packed.slot < worker * 3 + 3
            mine.append(crossed(packed))
        if mine and rnd.random() < 0.5:  # the loop lets go of one of its batches, in any order
            mine.pop(rnd.randrange(len(mine)))
            gc.collect()
        for w in (0, 1):
            assert all(int(b["v"][0]) == w for b in held[w])  # no slot was written while held
    assert ring.held() == len(held[0]) + len(held[1])


def test_a_batch_larger_than_a_slot_is_refused_and_takes_no_slot():
    ring = Ring(1, 2, 4096)
    packed, nbytes = pack(ring, 0, {"x": np.zeros(5000, np.uint8)})
    assert packed is None and nbytes == 5056  # rounded to the alignment
    assert (ring.flags == FREE).all()


def test_views_and_tensors_of_a_batch_keep_its_slot():
    torch = pytest.importorskip("torch")
    import shardstream.integrations.torchring  # noqa: F401  (registers tensors as leaves)

    ring = Ring(1, 1, 4096)
    batch = crossed(pack(ring, 0, {"x": np.arange(8, dtype=np.int32), "t": torch.arange(4, dtype=torch.bfloat16)})[0])
    assert batch["t"].dtype == torch.bfloat16 and batch["t"].tolist() == [0, 1, 2, 3]
    tensor = torch.from_numpy(batch["x"][2:])
    del batch
    gc.collect()
    assert ring.held() == 1  # the tensor still views the slot
    assert pack(ring, 0, {"x": np.zeros(1)})[0] is None
    assert tensor.tolist() == [2, 3, 4, 5, 6, 7]
    del tensor
    gc.collect()
    assert ring.held() == 0 and ring.flags[0] == FREE


def test_a_slot_received_twice_is_refused():
    ring = Ring(1, 1, 4096)
    packed, _ = pack(ring, 0, {"x": np.ones(3)})
    data = ForkingPickler.dumps(packed)
    first = pickle.loads(data)
    with pytest.raises(RingStateError, match="received twice"):
        pickle.loads(data)
    assert same(first["x"], np.ones(3))


def test_a_batch_of_a_ring_this_process_lacks_is_refused():
    with pytest.raises(RingStateError, match="does not have"):
        find("no-such-ring")
    with pytest.raises(RingStateError):
        pickle.loads(ForkingPickler.dumps(Packed("no-such-ring", 0, 8, None)))


@pytest.mark.parametrize("args", [(0, 1, 4096), (1, 0, 4096), (1, 1, 100), (1, 1, 5000)])
def test_bad_ring_shapes_are_refused(args):
    with pytest.raises(InvalidArgumentError):
        Ring(*args)


def test_reclaim_frees_what_no_live_batch_holds():
    ring = Ring(1, 3, 4096)
    kept = crossed(pack(ring, 0, {"x": np.ones(2)})[0])
    lost = pack(ring, 0, {"x": np.ones(2)})[0]  # sent, never received (its worker's pass was cut short)
    assert lost is not None and ring.flags[lost.slot] == TAKEN
    ring.reclaim()
    assert ring.flags[lost.slot] == FREE and ring.held() == 1
    assert same(kept["x"], np.ones(2))


def test_a_forked_child_dropping_its_copy_of_a_batch_leaves_the_slot_held():
    ring = Ring(1, 1, 4096)
    _KEPT.append(crossed(pack(ring, 0, {"x": np.ones(2)})[0]))
    ctx = multiprocessing.get_context("fork")
    proc = ctx.Process(target=_KEPT.clear)  # the child drops its copy of the parent's batch
    proc.start()
    proc.join(60)
    assert proc.exitcode == 0
    assert ring.flags[0] == TAKEN and ring.held() == 1  # the parent's batch is still its own
    _KEPT.clear()
    gc.collect()
    assert ring.flags[0] == FREE


_KEPT: list = []


def _spawned_worker(ring, queue):
    packed, _ = pack(ring, 1, {"x": np.arange(6, dtype=np.int16).reshape(2, 3), "s": ["a", "b"]})
    queue.put(packed)


def test_a_spawned_process_writes_into_the_ring_it_was_given():
    ring = Ring(2, 2, 4096)
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=_spawned_worker, args=(ring, queue))
    proc.start()
    got = queue.get(timeout=60)
    proc.join(60)
    assert proc.exitcode == 0
    assert same(got, {"x": np.arange(6, dtype=np.int16).reshape(2, 3), "s": ["a", "b"]})
    assert ring.held() == 1 and 2 <= next(iter(np.flatnonzero(ring.flags == TAKEN))) < 4
