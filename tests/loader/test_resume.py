"""StreamingDataset resumption: state_dict / load_state_dict on any world and global batch."""

from __future__ import annotations

import dataclasses
import json
import pickle
import re

import numpy as np
import pytest

from shardstream import InvalidArgumentError, ShardstreamError, StreamingDataset
from shardstream.errors import IncompatibleStateError
from shardstream.plan import World
from shardstream.testing import check_resumes_identically, read_world, write_dataset

N = 250
ALGOS = ("naive", "py1b", "py1br", "py1e", "py1s", "py2s")
WORLDS = [(1, 1, 0), (2, 2, 2), (1, 4, 1), (2, 1, 4)]
STATE_KEYS = {
    "version", "epoch", "sample_in_epoch", "shuffle_seed", "num_canonical_nodes", "initial_physical_nodes",
    "global_batch_size", "segment_origin", "region_base", "shuffle", "shuffle_algo", "shuffle_block_size",
    "epoch_tail", "num_samples", "num_shards", "shard_sizes_xxh64",
}


@pytest.fixture(scope="module")
def ints(tmp_path_factory) -> str:
    """N int samples ``{"id": i}`` in shards of 27 (the last one shorter)."""
    out = tmp_path_factory.mktemp("resume") / "ints"
    return write_dataset(out, {"id": "int"}, ({"id": i} for i in range(N)), size_limit=500)


def ids_of(samples) -> list[int]:
    return [s["id"] for s in samples]


def take(it, n: int) -> list[int]:
    return [next(it)["id"] for _ in range(n)]


def sample_id(sample) -> int:
    return sample["id"]


def maker(local: str, **kwargs):
    return lambda bs: StreamingDataset(local=local, batch_size=bs, **kwargs)


def state_at(make, bs: int, n: int, epoch: int = 0) -> tuple[dict, list[int]]:
    """A single process reads ``n`` samples of ``epoch`` with batch ``bs``: (its state, what it read)."""
    ds = make(bs)
    ds.set_epoch(epoch)
    before = take(ds.iterate(World()), n)
    return ds.state_dict(), before


def region_orders(local: str, state: dict) -> list[list[int]]:
    """Each region's samples in the order the region supplies them, from the state's settings.

    With a global batch of exactly one position per region, column ``c`` of the epoch is
    region ``c`` (see ``shardstream.plan.partition``); padding repeats, so keep first occurrences.
    """
    regions = min(state["num_canonical_nodes"], state["num_samples"])
    ds = StreamingDataset(local=local, batch_size=regions, shuffle=state["shuffle"],
                          shuffle_algo=state["shuffle_algo"], shuffle_seed=state["shuffle_seed"],
                          shuffle_block_size=state["shuffle_block_size"],
                          num_canonical_nodes=state["num_canonical_nodes"])
    plan = ds.epoch_plan(state["epoch"], World())
    columns = plan.sample_ids(np.arange(plan.end)).reshape(-1, regions).T
    orders = [list(dict.fromkeys(col.tolist())) for col in columns]
    assert sorted(i for o in orders for i in o) == list(range(state["num_samples"]))
    assert max(map(len, orders)) - min(map(len, orders)) <= 1
    return orders


def check_continuation(regions: list[list[int]], before: list[int], after: list[int], tail: str) -> None:
    """Per region, what was read before the resume and what is read after it, put end to end, are
    the region's samples in its order, then ('pad' only) its latest samples again, newest first."""
    region_of = {s: c for c, order in enumerate(regions) for s in order}
    for c, order in enumerate(regions):
        b = [s for s in before if region_of[s] == c]
        a = [s for s in after if region_of[s] == c]
        length = len(order)
        if tail == "drop":
            assert len(b) + len(a) <= length, f"region {c}: read {len(b) + len(a)} of its {length} samples"
        want = [order[t] if t < length else order[length - 1 - (t - length) % length] for t in range(len(b) + len(a))]
        assert b == want[:len(b)], f"region {c}: the samples read before the resume are not the region's first ones"
        assert a == want[len(b):], f"region {c}: the resumed run does not continue the region where it stood"


def tail_bound(g_before: int, g_after: int, regions: int) -> int:
    """Most samples a resumed epoch may leave out ('drop') or repeat ('pad').

    The regions move at the same pace (within one sample), so a stop at any position leaves
    their remaining counts within ``2 + ceil(g_before / regions)`` of each other; the resumed
    segment ends within one global batch of the first (drop) or last (pad) region to run out.
    """
    return g_after + (regions - 1) * (2 + -(-g_before // regions))


# -- the state itself ------------------------------------------------------------------------------

def test_state_is_plain_json_and_round_trips(ints):
    make = maker(ints, shuffle=True, shuffle_algo="py1br", shuffle_seed=11)
    full = ids_of(make(4).iterate(World()))
    state, before = state_at(make, 4, 36)
    assert set(state) == STATE_KEYS
    text = json.dumps(state)
    assert json.loads(text) == state
    assert state["version"] == 1 and state["epoch"] == 0 and state["sample_in_epoch"] == 36
    assert state["shuffle_seed"] == 11 and state["shuffle_algo"] == "py1br" and state["shuffle"] is True
    assert state["num_samples"] == N and state["num_shards"] == 10 and state["global_batch_size"] == 4
    assert state["epoch_tail"] == "pad" and state["initial_physical_nodes"] == 1
    fresh = make(4)
    fresh.load_state_dict(json.loads(text))
    assert before + ids_of(fresh.iterate(World())) == full


def test_state_before_any_iteration(ints):
    make = maker(ints, shuffle=True)
    ds = make(2)
    state = ds.state_dict()
    assert state["epoch"] == 0 and state["sample_in_epoch"] == 0 and state["segment_origin"] == 0
    assert state["region_base"] is None and state["global_batch_size"] == 2
    other = make(2)
    other.load_state_dict(state)
    assert ids_of(other.iterate(World())) == ids_of(make(2).iterate(World()))
    assert other.next_epoch == 1
    ds.set_epoch(3)
    assert ds.state_dict()["epoch"] == 3 and ds.state_dict()["sample_in_epoch"] == 0
    # a loaded state not yet used is what state_dict() gives back
    saved, _ = state_at(make, 2, 10, epoch=1)
    ds.load_state_dict(saved)
    assert ds.state_dict() == saved and ds.next_epoch == 1


def test_load_on_the_same_object_takes_effect_on_the_next_pass(ints):
    ds = StreamingDataset(local=ints, shuffle=True, batch_size=4)
    e0 = ids_of(ds.iterate(World()))
    e1 = ids_of(ds.iterate(World()))
    ds.set_epoch(0)
    it = ds.iterate(World())
    take(it, 20)
    state = ds.state_dict()
    list(it)
    assert ds.next_epoch == 1
    ds.load_state_dict(state)
    assert ds.next_epoch == 0
    assert ids_of(ds.iterate(World())) == e0[20:]
    assert ds.next_epoch == 1
    assert ids_of(ds.iterate(World())) == e1  # then the next epoch, from its start
    # a state of a later epoch, loaded mid-pass, replaces the pass in progress
    state1, _ = state_at(maker(ints, shuffle=True), 4, 8, epoch=1)
    it = ds.iterate(World())
    take(it, 3)
    ds.load_state_dict(state1)
    assert ids_of(ds.iterate(World())) == e1[8:]


def test_state_counts_whole_global_steps_on_several_ranks(ints):
    ds = StreamingDataset(local=ints, shuffle=True, batch_size=4)
    it = ds.iterate(World(num_nodes=2, node=1))
    take(it, 6)  # one whole step of 4 and half of the next
    assert ds.state_dict()["sample_in_epoch"] == 8
    take(it, 2)
    assert ds.state_dict()["sample_in_epoch"] == 16
    assert ds.state_dict(num_samples=13)["sample_in_epoch"] == 13


def test_state_dict_with_workers_needs_num_samples(ints):
    ds = StreamingDataset(local=ints, batch_size=4)
    it = ds.iterate(World(num_workers=2, worker=1))
    take(it, 4)
    with pytest.raises(InvalidArgumentError) as info:
        ds.state_dict()
    assert "num_samples" in str(info.value)
    state = ds.state_dict(num_samples=8)
    assert state["sample_in_epoch"] == 8
    fresh = StreamingDataset(local=ints, batch_size=4)
    fresh.load_state_dict(state)
    assert ids_of(fresh.iterate(World())) == list(range(8, N)) + [249, 248]


def test_from_beginning_false_counts_from_the_resume_point(ints):
    make = maker(ints, shuffle=True, shuffle_algo="py1b", shuffle_block_size=32, num_canonical_nodes=2)
    full = ids_of(make(8).iterate(World()))
    state, _ = state_at(make, 8, 24)
    ds = make(8)
    ds.load_state_dict(state)
    assert take(ds.iterate(World()), 16) == full[24:40]
    assert ds.state_dict(num_samples=16, from_beginning=False)["sample_in_epoch"] == 40
    assert ds.state_dict(num_samples=40)["sample_in_epoch"] == 40
    assert ds.state_dict()["sample_in_epoch"] == 40
    later = make(8)
    later.load_state_dict(ds.state_dict(num_samples=24, from_beginning=False))
    assert ids_of(later.iterate(World())) == full[48:]
    # inside a step, on the same global batch: the same plan goes on from there (its steps, its padding)
    odd = ds.state_dict(num_samples=17, from_beginning=False)
    assert odd["sample_in_epoch"] == 41 and odd["segment_origin"] == 0
    later = make(8)
    later.load_state_dict(odd)
    rest = ids_of(later.iterate(World()))
    assert later.state_dict()["segment_origin"] == 0
    assert full[:41] + rest == full
    # on another global batch the pass is a new segment that starts at the resume point
    other = make(4)
    other.load_state_dict(state)
    take(other.iterate(World()), 8)
    moved = other.state_dict(num_samples=8, from_beginning=False)
    assert moved["sample_in_epoch"] == 32 and moved["segment_origin"] == 24 and moved["global_batch_size"] == 4
    assert other.state_dict(num_samples=32) == moved
    with pytest.raises(InvalidArgumentError) as info:
        other.state_dict(num_samples=8)  # from the epoch's start: before this pass began
    assert "from_beginning=False" in str(info.value)


@pytest.mark.parametrize("bad", [-1, True, 2.5, "8", [8]])
def test_state_dict_rejects_bad_num_samples(ints, bad):
    ds = StreamingDataset(local=ints)
    take(ds.iterate(World()), 3)
    with pytest.raises(InvalidArgumentError):
        ds.state_dict(num_samples=bad)


def test_num_samples_past_the_end_means_the_next_epoch(ints):
    make = maker(ints, shuffle=True, shuffle_algo="py2s")
    ds = make(4)
    take(ds.iterate(World()), 12)
    end = ds.epoch_plan(0, World()).end
    state = ds.state_dict(num_samples=10**9)
    assert state["epoch"] == 0 and state["sample_in_epoch"] == end
    reference = make(4)
    reference.set_epoch(1)
    e1 = ids_of(reference.iterate(World()))
    fresh = make(4)
    fresh.load_state_dict(state)
    assert ids_of(fresh.iterate(World())) == e1
    assert fresh.next_epoch == 2
    # the same with the epoch read to its end
    ds = make(4)
    list(ds.iterate(World()))
    assert ds.state_dict()["sample_in_epoch"] == end
    fresh = make(8)  # on another global batch too
    fresh.load_state_dict(ds.state_dict())
    assert fresh.next_epoch == 0
    reference = make(8)
    reference.set_epoch(1)
    assert ids_of(fresh.iterate(World())) == ids_of(reference.iterate(World()))
    assert fresh.next_epoch == 2


# -- resuming on every step and world --------------------------------------------------------

@pytest.mark.parametrize("algo,tail,canonical", [
    ("naive", "pad", None), ("py1b", "drop", None), ("py1br", "pad", 3), ("py1e", "drop", None),
    ("py1e", "pad", 3), ("py1s", "pad", None), ("py2s", "drop", 4),
])
def test_resumes_identically_at_every_step(ints, algo, tail, canonical):
    make = maker(ints, shuffle=True, shuffle_algo=algo, epoch_tail=tail, num_canonical_nodes=canonical,
                 shuffle_block_size=48)
    report = check_resumes_identically(make, 8, WORLDS, key=sample_id)
    assert report.steps == make(8).epoch_plan(0, World()).steps and report.steps >= 15
    assert report.worlds == 4 and report.samples_compared > N * report.steps


def test_resumes_identically_unshuffled_and_with_mixed_columns(tmp_path, ints, mixed, make_dataset):
    check_resumes_identically(maker(ints), 8, WORLDS, key=sample_id)
    columns, samples = mixed
    out = make_dataset(tmp_path, columns, samples, size_limit=400)
    report = check_resumes_identically(maker(out, shuffle=True, shuffle_algo="py1s"), 4,
                                       [(1, 1, 0), (2, 2, 1), (1, 2, 3)])
    assert report.steps == 15 and report.samples_compared > 0


class IgnoresLoadedState(StreamingDataset):
    def load_state_dict(self, obj):
        pass


class ResumesOneStepEarly(StreamingDataset):
    def load_state_dict(self, obj):
        obj = dict(obj)
        obj["sample_in_epoch"] = max(0, obj["sample_in_epoch"] - obj["global_batch_size"])
        super().load_state_dict(obj)


class WorkersReadEverything(StreamingDataset):
    def iterate(self, world=None):
        return super().iterate(None if world is None else dataclasses.replace(world, num_workers=0, worker=0))


class ForgetsStateOnceUsed(StreamingDataset):
    used = False

    def iterate(self, world=None):
        self.used = True
        return super().iterate(world)

    def load_state_dict(self, obj):
        if not self.used:
            super().load_state_dict(obj)


class LosesItsSegment(StreamingDataset):
    """Resumes a changed global batch as if the old batch had run from 0 (no region base)."""

    def load_state_dict(self, obj):
        super().load_state_dict(dict(obj, segment_origin=0, region_base=None))


@pytest.mark.parametrize("broken", [IgnoresLoadedState, ResumesOneStepEarly, WorkersReadEverything,
                                    ForgetsStateOnceUsed])
def test_the_checker_catches_broken_resumption(ints, broken):
    make = lambda bs: broken(local=ints, shuffle=True, batch_size=bs)
    with pytest.raises(AssertionError):
        check_resumes_identically(make, 8, [(1, 1, 0), (2, 2, 2)], key=sample_id, steps=[0, 1, 5])
    # the same check passes on the real class
    check_resumes_identically(maker(ints, shuffle=True), 8, [(1, 1, 0), (2, 2, 2)], key=sample_id, steps=[0, 1, 5])


def test_the_continuation_check_catches_a_lost_segment(ints):
    """The per-region check used below fails when a resumed segment forgets where each region stood."""
    make = maker(ints, shuffle=True, num_canonical_nodes=2)
    state, before = state_at(make, 8, 44)
    moved_ds = make(12)
    moved_ds.load_state_dict(state)
    mid = take(moved_ds.iterate(World()), 30)
    moved = moved_ds.state_dict()
    assert moved["segment_origin"] == 44 and moved["global_batch_size"] == 12 and moved["region_base"] is not None
    regions = region_orders(ints, state)
    good = make(6)
    good.load_state_dict(moved)
    check_continuation(regions, before + mid, ids_of(good.iterate(World())), "pad")
    broken = LosesItsSegment(local=ints, shuffle=True, num_canonical_nodes=2, batch_size=6)
    broken.load_state_dict(moved)
    with pytest.raises(AssertionError):
        check_continuation(regions, before + mid, ids_of(broken.iterate(World())), "pad")


# -- resuming with another global batch ---------------------------------------------------------

CHANGES = [
    # algo, canonical nodes, global batch before, samples read before, per-device batch after, world after
    ("py1e", None, 8, 40, 6, (1, 2, 0)),
    ("py1e", 2, 8, 37, 3, (2, 2, 2)),
    ("py1b", 3, 12, 60, 2, (1, 4, 1)),
    ("py1br", 4, 6, 101, 16, (1, 1, 0)),
    ("naive", 5, 10, 55, 1, (2, 1, 4)),
    ("py1s", None, 12, 70, 4, (2, 1, 0)),
    ("py2s", 7, 4, 13, 5, (1, 2, 3)),
    ("py1e", 1, 8, 200, 12, (1, 1, 0)),
    ("py1b", 2, 8, 232, 7, (1, 2, 0)),
]


@pytest.mark.parametrize("tail", ["drop", "pad"])
@pytest.mark.parametrize("algo,canonical,g_before,n_before,bs_after,world", CHANGES)
def test_resume_with_another_global_batch(ints, tail, algo, canonical, g_before, n_before, bs_after, world):
    make = maker(ints, shuffle=True, shuffle_algo=algo, num_canonical_nodes=canonical, epoch_tail=tail,
                 shuffle_block_size=40)
    state, before = state_at(make, g_before, n_before)
    assert state["sample_in_epoch"] == n_before
    g_after = bs_after * world[0] * world[1]
    after = read_world(make, state, g_after, world, key=sample_id)
    assert len(after) % g_after == 0
    regions = region_orders(ints, state)
    check_continuation(regions, before, after, tail)
    bound = tail_bound(g_before, g_after, len(regions))
    read = before + after
    if tail == "drop":
        assert len(set(read)) == len(read), "a sample was read twice"
        assert N - bound <= len(read) <= N
    else:
        assert set(read) == set(range(N)), "a sample was skipped"
        assert N <= len(read) <= N + bound
    # the resumed run saves states in its own segment, which resume again with the old batch
    n_head = min(2 * g_after + 1, len(after) - bound)  # stay clear of the padding
    if n_head > 0:
        ds = make(g_after)
        ds.load_state_dict(state)
        head = take(ds.iterate(World()), n_head)
        assert head == after[:n_head]
        again = make(g_before)
        again.load_state_dict(ds.state_dict())
        later = ids_of(again.iterate(World()))
        check_continuation(regions, before + head, later, tail)


@pytest.mark.parametrize("tail", ["drop", "pad"])
def test_resume_through_several_global_batches(ints, tail):
    make = maker(ints, shuffle=True, shuffle_algo="py1e", num_canonical_nodes=3, epoch_tail=tail,
                 shuffle_block_size=30)
    state, read = state_at(make, 8, 19)
    regions = region_orders(ints, state)
    for bs, n in ((12, 31), (5, 7), (2, 40), (9, 9)):
        ds = make(bs)
        ds.load_state_dict(json.loads(json.dumps(state)))
        read += take(ds.iterate(World()), n)
        state = ds.state_dict()
        assert state["sample_in_epoch"] == len(read)
    rest = read_world(make, state, 6, (1, 2, 0), key=sample_id)
    check_continuation(regions, read, rest, tail)
    everything = read + rest
    if tail == "drop":
        assert len(set(everything)) == len(everything)
    else:
        assert set(everything) == set(range(N))


# -- refusals ------------------------------------------------------------------------------------

BASE = {"shuffle": True, "shuffle_algo": "py1e", "shuffle_seed": 5, "shuffle_block_size": 64, "epoch_tail": "pad"}


@pytest.fixture(scope="module")
def saved(ints) -> dict:
    state, _ = state_at(maker(ints, **BASE), 4, 20)
    return state


def assert_untouched(ds: StreamingDataset) -> None:
    state = ds.state_dict()
    assert state["epoch"] == 0 and state["sample_in_epoch"] == 0 and ds.next_epoch == 0


@pytest.mark.parametrize("n,size_limit,keys", [
    (N + 1, 500, ("num_samples", "shard_sizes_xxh64")),
    (N, 700, ("num_shards", "shard_sizes_xxh64")),
    (N, 486, ("shard_sizes_xxh64",)),
])
def test_state_of_another_dataset_is_refused(tmp_path, saved, n, size_limit, keys):
    other = write_dataset(str(tmp_path / "other"), {"id": "int"}, ({"id": i} for i in range(n)), size_limit=size_limit)
    ds = StreamingDataset(local=other, batch_size=4, **BASE)
    if keys == ("shard_sizes_xxh64",):  # same sample and shard counts, other shard sizes
        assert len(ds.shards) == saved["num_shards"] and len(ds) == saved["num_samples"]
    with pytest.raises(IncompatibleStateError) as info:
        ds.load_state_dict(saved)
    message = str(info.value)
    assert "another dataset" in message
    for key in keys:
        assert key in message
    assert_untouched(ds)


@pytest.mark.parametrize("key,value", [
    ("shuffle_seed", 6), ("shuffle_algo", "py1b"), ("shuffle", False), ("shuffle_block_size", 65),
    ("epoch_tail", "drop"), ("num_canonical_nodes", 2),
])
def test_state_of_other_order_settings_is_refused(ints, saved, key, value):
    ds = StreamingDataset(local=ints, batch_size=4, **dict(BASE, **{key: value}))
    with pytest.raises(IncompatibleStateError) as info:
        ds.load_state_dict(saved)
    message = str(info.value)
    assert re.search(rf"{key}: [^;]*{re.escape(repr(saved[key]))}[^;]*{re.escape(repr(value))}", message), message
    assert_untouched(ds)
    assert take(ds.iterate(World()), 5) == take(StreamingDataset(
        local=ints, batch_size=4, **dict(BASE, **{key: value})).iterate(World()), 5)


def test_state_without_version_is_refused(ints):
    ds = StreamingDataset(local=ints, shuffle=True)
    mosaic = {"epoch": 0, "sample_in_epoch": 0, "shuffle_seed": 9176, "num_canonical_nodes": 1}
    with pytest.raises(IncompatibleStateError) as info:
        ds.load_state_dict(mosaic)
    assert "'version'" in str(info.value) and isinstance(info.value, ValueError)
    with pytest.raises(IncompatibleStateError):
        ds.load_state_dict(json.dumps(mosaic))
    assert_untouched(ds)


def _edit(**changes):
    def apply(state):
        state = dict(state)
        for key, value in changes.items():
            if value is KeyError:
                del state[key]
            else:
                state[key] = value
        return state
    return apply


@pytest.mark.parametrize("garbage", [
    [], [("epoch", 0)], 42, None, "not json", "[1, 2]", b"\xff\xfe", "{}", {},
    _edit(version=2), _edit(version="1"), _edit(version=KeyError), _edit(epoch=-1), _edit(epoch=True),
    _edit(epoch=1.0), _edit(epoch="0"), _edit(sample_in_epoch=-4), _edit(sample_in_epoch=False),
    _edit(sample_in_epoch=None), _edit(global_batch_size=0), _edit(global_batch_size=True),
    _edit(initial_physical_nodes=0), _edit(segment_origin=24), _edit(segment_origin=-1),
    _edit(segment_origin=KeyError), _edit(region_base="none"), _edit(region_base=[1, -1]),
    _edit(region_base=[0, 0, 0]), _edit(region_base=[True]), _edit(region_base=[0.5]),
    _edit(num_canonical_nodes=0), _edit(num_canonical_nodes=-2), _edit(num_canonical_nodes="1"),
    _edit(num_canonical_nodes=True), _edit(num_canonical_nodes=None), _edit(shuffle_seed="5"),
    _edit(num_samples=str(N)), _edit(shard_sizes_xxh64=KeyError), _edit(epoch_tail=KeyError),
])
def test_malformed_states_are_refused_with_typed_errors(ints, saved, garbage):
    obj = garbage(saved) if callable(garbage) else garbage
    ds = StreamingDataset(local=ints, batch_size=4, **BASE)
    with pytest.raises((InvalidArgumentError, IncompatibleStateError)) as info:
        ds.load_state_dict(obj)
    assert isinstance(info.value, ValueError) and isinstance(info.value, ShardstreamError)
    assert_untouched(ds)


def test_refused_explicit_canonical_nodes_name_both_values(ints, saved):
    ds = StreamingDataset(local=ints, batch_size=4, **dict(BASE, num_canonical_nodes=3))
    with pytest.raises(IncompatibleStateError) as info:
        ds.load_state_dict(saved)
    assert "num_canonical_nodes: state has 1, this dataset has 3" in str(info.value)


# -- adopting the state's canonical nodes --------------------------------------------------------

@pytest.mark.parametrize("algo,expected", [("py1e", 2), ("py1s", 128)])
def test_canonical_nodes_of_the_initial_run_are_adopted(ints, algo, expected):
    make = maker(ints, shuffle=True, shuffle_algo=algo)  # num_canonical_nodes left to the default
    two_nodes = read_world(make, None, 8, (2, 1, 0), key=sample_id)
    ds = make(4)
    it = ds.iterate(World(num_nodes=2, node=1))
    take(it, 12)  # three global steps of 8
    state = ds.state_dict()
    assert state["num_canonical_nodes"] == expected and state["initial_physical_nodes"] == 2
    assert state["sample_in_epoch"] == 24
    one_node = make(8)
    one_node.load_state_dict(json.loads(json.dumps(state)))
    assert ids_of(one_node.iterate(World())) == two_nodes[24:]
    after = one_node.state_dict()
    assert after["num_canonical_nodes"] == expected and after["initial_physical_nodes"] == 2
    # the next epoch too keeps the initial run's order
    epoch1 = ids_of(one_node.iterate(World()))
    ref = make(4)
    ref.set_epoch(1)
    ref_world = World(num_nodes=2)
    ref.iterate(ref_world)
    assert epoch1 == ref.epoch_plan(1, ref_world).sample_ids(np.arange(len(epoch1))).tolist()
    # a one-node run of its own has another order
    assert ids_of(make(8).iterate(World())) != two_nodes


def test_canonical_nodes_chosen_by_the_initial_run_are_adopted(ints):
    chosen = maker(ints, shuffle=True, shuffle_algo="py1b", num_canonical_nodes=3)
    full = ids_of(chosen(6).iterate(World()))
    state, _ = state_at(chosen, 6, 30)
    assert state["num_canonical_nodes"] == 3 and state["initial_physical_nodes"] == 1
    default = StreamingDataset(local=ints, shuffle=True, shuffle_algo="py1b", batch_size=6)
    default.load_state_dict(state)
    assert ids_of(default.iterate(World())) == full[30:]
    epoch1 = chosen(6)
    epoch1.set_epoch(1)
    assert ids_of(default.iterate(World())) == ids_of(epoch1.iterate(World()))
    assert default.state_dict()["num_canonical_nodes"] == 3


# -- pickling keeps a loaded state --------------------------------------------------------------

def test_pickled_dataset_keeps_the_pending_state(ints):
    make = maker(ints, shuffle=True, shuffle_algo="py1b", shuffle_block_size=50)
    full = ids_of(make(4).iterate(World()))
    state, _ = state_at(make, 4, 28)
    ds = make(4)
    ds.load_state_dict(state)
    clone = pickle.loads(pickle.dumps(ds))
    assert clone.state_dict() == state and clone.next_epoch == 0
    assert ids_of(clone.iterate(World())) == full[28:]
    # what two DataLoader workers receive, put back together in the loader's order
    workers = [pickle.loads(pickle.dumps(ds)) for _ in range(2)]
    streams = [ids_of(w.iterate(World(num_workers=2, worker=i))) for i, w in enumerate(workers)]
    merged = [s for k in range(max(map(len, streams)) // 4 + 1) for st in streams for s in st[k * 4:k * 4 + 4]]
    assert merged == full[28:]
    assert ids_of(ds.iterate(World())) == full[28:]  # the original still holds it too


# -- the main process, JSON text, oversized values -------------------------------------------------------------------------------------

def test_state_dict_num_samples_without_a_pass_in_this_process(ints):
    ds = StreamingDataset(local=ints, shuffle=True, batch_size=4)  # the workers iterate pickled copies
    assert ds.state_dict(num_samples=40)["sample_in_epoch"] == 40


def test_state_as_json_text_adopts_canonical_nodes(ints):
    make = maker(ints, shuffle=True)
    ds = make(4)
    take(ds.iterate(World(num_nodes=2)), 8)
    state = ds.state_dict()
    as_dict, as_text = make(8), make(8)
    as_dict.load_state_dict(state)
    as_text.load_state_dict(json.dumps(state))
    assert ids_of(as_text.iterate(World())) == ids_of(as_dict.iterate(World()))


@pytest.mark.parametrize("changes", [{"global_batch_size": 2**70}, {"region_base": [2**70]}])
def test_oversized_state_values_are_refused(ints, saved, changes):
    ds = StreamingDataset(local=ints, batch_size=4, **BASE)
    with pytest.raises((InvalidArgumentError, IncompatibleStateError)):
        ds.load_state_dict(dict(saved, **changes))
        next(ds.iterate(World()))
