"""StreamingDataset iteration order: natural and shuffled epochs, tails, epochs, seeds, worlds."""

from __future__ import annotations

import numpy as np
import pytest

from shardstream import InvalidArgumentError, ShardstreamError, StreamingDataset
from shardstream.plan import World
from shardstream.testing import read_world, write_dataset

N = 250
ALGOS = ("naive", "py1b", "py1br", "py1e", "py1s", "py2s")
LAUNCHER_VARS = ("WORLD_SIZE", "RANK", "LOCAL_WORLD_SIZE", "LOCAL_RANK")


@pytest.fixture(scope="module")
def ints(tmp_path_factory) -> str:
    """N int samples ``{"id": i}`` in shards of 27 (the last one shorter)."""
    samples = ({"id": i} for i in range(N))
    return write_dataset(tmp_path_factory.mktemp("order") / "ints", {"id": "int"}, samples, size_limit=500)


@pytest.fixture
def single_process(monkeypatch):
    """No launcher variables: ``iter(ds)`` reads as the only rank."""
    for name in LAUNCHER_VARS:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def ids(ds: StreamingDataset, world: World | None = None) -> list[int]:
    return [s["id"] for s in ds.iterate(world or World())]


def as_rank(monkeypatch, rank: int, world_size: int, local_world: int) -> None:
    monkeypatch.setenv("WORLD_SIZE", str(world_size))
    monkeypatch.setenv("RANK", str(rank))
    monkeypatch.setenv("LOCAL_WORLD_SIZE", str(local_world))
    monkeypatch.setenv("LOCAL_RANK", str(rank % local_world))


def merge_ranks(shares: list[list[int]], bs: int) -> list[int]:
    """The global order: step by step, each rank's ``bs`` samples in rank order."""
    steps = len(shares[0]) // bs
    assert all(len(s) == steps * bs for s in shares), [len(s) for s in shares]
    return [i for k in range(steps) for share in shares for i in share[k * bs:(k + 1) * bs]]


# -- the natural order ---------------------------------------------------------------------

def test_fixture_has_many_shards(ints):
    sizes = [s.samples for s in StreamingDataset(local=ints).shards]
    assert sum(sizes) == N and len(sizes) >= 8 and max(sizes) <= 40


def test_unshuffled_single_node_is_the_natural_order(ints, single_process):
    ds = StreamingDataset(local=ints, num_canonical_nodes=1)
    assert [s["id"] for s in ds] == list(range(N))
    assert [s["id"] for s in ds] == list(range(N))  # every epoch
    assert ds.next_epoch == 2
    assert ids(StreamingDataset(local=ints)) == list(range(N))  # one node: one canonical node by default


def test_unshuffled_tails(ints):
    # G = 8 does not divide 250: 'pad' repeats the latest samples, newest first; 'drop' stops early
    pad = ids(StreamingDataset(local=ints, num_canonical_nodes=1, batch_size=8))
    assert pad == list(range(N)) + [249, 248, 247, 246, 245, 244]
    drop = ids(StreamingDataset(local=ints, num_canonical_nodes=1, batch_size=8, epoch_tail="drop"))
    assert drop == list(range(248))


def test_unshuffled_two_canonical_nodes_interleave_two_halves(ints):
    got = ids(StreamingDataset(local=ints, num_canonical_nodes=2, batch_size=2))
    assert got[0::2] == list(range(125)) and got[1::2] == list(range(125, 250))


# -- shuffled epochs ---------------------------------------------------------------------

@pytest.mark.parametrize("algo", ALGOS)
def test_every_algo_shuffles_each_epoch_into_a_permutation(ints, algo):
    # regions of equal length (2 divides N) and G = 1: no padding, each epoch is a permutation
    ds = StreamingDataset(local=ints, shuffle=True, shuffle_algo=algo, shuffle_block_size=40, num_canonical_nodes=2)
    e0, e1 = ids(ds), ids(ds)
    for order in (e0, e1):
        assert sorted(order) == list(range(N))
        assert order != list(range(N))
    assert e0 != e1
    # the epoch plan says the same as the iteration
    plan = ds.epoch_plan(0, World())
    assert plan.end == N and plan.sample_ids(np.arange(N)).tolist() == e0


def test_algorithms_give_different_orders(ints):
    orders = {algo: tuple(ids(StreamingDataset(local=ints, shuffle=True, shuffle_algo=algo, num_canonical_nodes=4,
                                               shuffle_block_size=50))) for algo in ALGOS}
    assert len(set(orders.values())) == len(ALGOS)


@pytest.mark.parametrize("algo", ALGOS)
@pytest.mark.parametrize("batch_size", [8, 12])
def test_shuffled_tail_pad_covers_every_sample(ints, algo, batch_size):
    ds = StreamingDataset(local=ints, shuffle=True, shuffle_algo=algo, batch_size=batch_size)
    regions = min(ds.state_dict()["num_canonical_nodes"], N)
    for _ in range(2):
        order = ids(ds)
        assert len(order) % batch_size == 0
        assert set(order) == set(range(N))
        # padding fills the last steps only: fewer than one global batch plus one sample per region
        assert N <= len(order) <= N + batch_size + regions - 1
        assert np.bincount(order, minlength=N).max() <= 2


@pytest.mark.parametrize("algo", ALGOS)
@pytest.mark.parametrize("batch_size", [8, 12])
def test_shuffled_tail_drop_never_repeats(ints, algo, batch_size):
    ds = StreamingDataset(local=ints, shuffle=True, shuffle_algo=algo, batch_size=batch_size, epoch_tail="drop")
    regions = min(ds.state_dict()["num_canonical_nodes"], N)
    for _ in range(2):
        order = ids(ds)
        assert len(order) % batch_size == 0
        assert len(set(order)) == len(order)
        # the regions' last samples are left out: fewer than one global batch plus one per region
        assert N - (batch_size + regions - 1) <= len(order) <= N


def test_epochs_advance_and_set_epoch_replays(ints):
    ds = StreamingDataset(local=ints, shuffle=True, batch_size=4)
    assert ds.next_epoch == 0
    e0 = ids(ds)
    assert ds.next_epoch == 1
    e1 = ids(ds)
    assert ds.next_epoch == 2
    e2 = ids(ds)
    assert len({tuple(e0), tuple(e1), tuple(e2)}) == 3
    ds.set_epoch(1)
    assert ds.next_epoch == 1 and ids(ds) == e1 and ds.next_epoch == 2
    ds.next_epoch = 0
    assert ids(ds) == e0
    # a pass left unfinished does not hold the epoch back
    it = ds.iterate(World())
    next(it)
    assert ids(ds) == e2
    # the epoch plan of any epoch, without iterating
    assert ds.epoch_plan(2, World()).sample_ids(np.arange(len(e2))).tolist() == e2
    ds.set_epoch(2)
    assert ds.epoch_plan(world=World()).epoch == 2


@pytest.mark.parametrize("bad", [-1, 1.0, True, "1", None])
def test_next_epoch_rejects_bad_values(ints, bad):
    ds = StreamingDataset(local=ints)
    with pytest.raises(InvalidArgumentError):
        ds.next_epoch = bad
    with pytest.raises(InvalidArgumentError):
        ds.set_epoch(bad)
    assert ds.next_epoch == 0


def test_same_seed_same_order_other_seed_other_order(ints):
    def epochs(seed):
        ds = StreamingDataset(local=ints, shuffle=True, shuffle_seed=seed, batch_size=2)
        return ids(ds), ids(ds)

    assert epochs(7) == epochs(7)
    assert epochs(7)[0] != epochs(8)[0] and epochs(7)[1] != epochs(8)[1]
    # the seed means nothing without shuffle
    assert ids(StreamingDataset(local=ints, shuffle_seed=7)) == ids(StreamingDataset(local=ints, shuffle_seed=8))


def test_block_size_changes_block_shuffles(ints):
    for algo in ("py1b", "py1br", "py1e"):
        small = ids(StreamingDataset(local=ints, shuffle=True, shuffle_algo=algo, shuffle_block_size=16))
        large = ids(StreamingDataset(local=ints, shuffle=True, shuffle_algo=algo, shuffle_block_size=200))
        assert small != large, algo


def test_mixed_columns_come_whole_in_plan_order(tmp_path, mixed, make_dataset, assert_same_sample):
    columns, samples = mixed
    out = make_dataset(tmp_path, columns, samples, size_limit=400)
    ds = StreamingDataset(local=out, shuffle=True, batch_size=3, shuffle_algo="py1s")
    assert len(ds.shards) > 3
    world = World(num_nodes=2)
    got = list(ds.iterate(world))
    expected = ds.epoch_plan(0, world)
    assert [s["id"] for s in got] == expected.sample_ids(expected.worker_positions(
        world, expected.worker_steps(world))).ravel().tolist()
    for sample in got:
        assert_same_sample(sample, samples[sample["id"]])


# -- ranks, workers and the launcher's environment ------------------------------------------

@pytest.mark.parametrize("tail", ["pad", "drop"])
def test_env_ranks_2x2_are_disjoint_and_merge_to_single_process(ints, monkeypatch, tail):
    shares = []
    for rank in range(4):
        as_rank(monkeypatch, rank, 4, 2)
        ds = StreamingDataset(local=ints, shuffle=True, batch_size=3, epoch_tail=tail)
        shares.append([s["id"] for s in ds])
        assert ds.state_dict()["initial_physical_nodes"] == 2
        assert ds.state_dict()["num_canonical_nodes"] == 2  # one canonical node per physical node by default
    for name in LAUNCHER_VARS:
        monkeypatch.delenv(name)
    single = ids(StreamingDataset(local=ints, shuffle=True, batch_size=12, num_canonical_nodes=2, epoch_tail=tail))
    assert merge_ranks(shares, 3) == single
    if tail == "drop":
        assert sum(len(s) for s in shares) == len(set().union(*map(set, shares)))
    else:
        assert set().union(*map(set, shares)) == set(range(N))


def test_env_default_canonical_nodes_for_py1s(ints, monkeypatch):
    as_rank(monkeypatch, 3, 4, 2)
    ds = StreamingDataset(local=ints, shuffle=True, shuffle_algo="py2s", batch_size=2)
    next(iter(ds))
    assert ds.state_dict()["num_canonical_nodes"] == 128  # 64 per initial physical node


@pytest.mark.parametrize("env", [
    {"WORLD_SIZE": "two"},
    {"WORLD_SIZE": "1.5"},
    {"RANK": "x"},
    {"WORLD_SIZE": "0"},
    {"WORLD_SIZE": "4", "RANK": "4"},
    {"WORLD_SIZE": "4", "RANK": "-1"},
    {"WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "3"},
    {"WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "0"},
    {"WORLD_SIZE": "4", "RANK": "1", "LOCAL_WORLD_SIZE": "2", "LOCAL_RANK": "2"},
    {"WORLD_SIZE": "4", "RANK": "1", "LOCAL_WORLD_SIZE": "2", "LOCAL_RANK": "-1"},
])
def test_bad_launcher_environment_is_refused(ints, single_process, env):
    for name, value in env.items():
        single_process.setenv(name, value)
    ds = StreamingDataset(local=ints)
    with pytest.raises(InvalidArgumentError) as info:
        iter(ds)
    assert isinstance(info.value, ValueError)
    with pytest.raises(InvalidArgumentError):
        ds.state_dict()
    with pytest.raises(InvalidArgumentError):
        ds.epoch_plan()


def test_empty_launcher_variables_mean_single_process(ints, single_process):
    for name in LAUNCHER_VARS:
        single_process.setenv(name, "")
    assert [s["id"] for s in StreamingDataset(local=ints)] == list(range(N))


def test_replication_gives_paired_ranks_the_same_samples(ints, monkeypatch):
    shares = []
    for rank in range(4):
        as_rank(monkeypatch, rank, 4, 4)
        ds = StreamingDataset(local=ints, shuffle=True, batch_size=5, replication=2, epoch_tail="drop")
        shares.append([s["id"] for s in ds])
    assert shares[0] == shares[1] and shares[2] == shares[3]
    assert not set(shares[0]) & set(shares[2])
    single = ids(StreamingDataset(local=ints, shuffle=True, batch_size=10, epoch_tail="drop"))
    assert merge_ranks([shares[0], shares[2]], 5) == single
    with pytest.raises(InvalidArgumentError) as info:
        iter(StreamingDataset(local=ints, replication=3))
    assert "replication=3" in str(info.value)


def test_global_batch_that_does_not_split_over_ranks(ints):
    ds = StreamingDataset(local=ints, batch_size=3)
    plan = ds.epoch_plan(0, World())
    assert plan.global_batch == 3
    with pytest.raises(InvalidArgumentError) as info:
        next(plan.iter_worker(World(ranks_per_node=2, local_rank=1)))
    assert "global batch of 3" in str(info.value) and "2 ranks" in str(info.value)
    with pytest.raises(ValueError):
        read_world(lambda bs: StreamingDataset(local=ints, batch_size=bs), None, 6, (1, 4, 0))


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_workers_take_whole_steps_round_robin(ints, workers):
    make = lambda bs: StreamingDataset(local=ints, shuffle=True, batch_size=bs, num_canonical_nodes=2)
    single = ids(make(8))
    per_worker = [ids(make(4), World(num_nodes=2, node=1, num_workers=workers, worker=w)) for w in range(workers)]
    node1 = [i for k in range(len(single) // 8) for i in single[k * 8 + 4:k * 8 + 8]]
    for w, got in enumerate(per_worker):
        assert got == [i for k in range(w, len(single) // 8, workers) for i in node1[k * 4:k * 4 + 4]]
    assert read_world(make, None, 8, (2, 1, workers), key=lambda s: s["id"]) == single


# -- options ---------------------------------------------------------------------------------

@pytest.mark.parametrize("partition_algo", ["orig", "relaxed"])
def test_partition_algo_values_are_accepted(ints, partition_algo):
    ds = StreamingDataset(local=ints, shuffle=True, batch_size=5, partition_algo=partition_algo)
    order = ids(ds, World(ranks_per_node=2, local_rank=1))
    assert len(order) == 125 and len(set(order)) == 125


@pytest.mark.parametrize("bad", ["none", "", "PAD", None, 0, "truncate"])
def test_invalid_epoch_tail_is_refused(ints, bad):
    with pytest.raises(InvalidArgumentError) as info:
        StreamingDataset(local=ints, epoch_tail=bad)
    assert "epoch_tail" in str(info.value) and isinstance(info.value, ShardstreamError)


def test_orig_partition_refuses_a_world_that_splits_canonical_nodes(ints):
    ds = StreamingDataset(local=ints, shuffle=True, batch_size=2, num_canonical_nodes=4, partition_algo="orig")
    with pytest.raises(InvalidArgumentError, match="relaxed"):
        ds.iterate(World(num_nodes=3, ranks_per_node=1))
    for nodes in (1, 2, 4, 8):  # multiples and divisors are fine
        ok = StreamingDataset(local=ints, shuffle=True, batch_size=2, num_canonical_nodes=4, partition_algo="orig")
        assert next(ok.iterate(World(num_nodes=nodes, ranks_per_node=1)))
    relaxed = StreamingDataset(local=ints, shuffle=True, batch_size=2, num_canonical_nodes=4)
    assert next(relaxed.iterate(World(num_nodes=3, ranks_per_node=1)))
