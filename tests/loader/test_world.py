"""Who is reading: rank detection from an explicit World, the parent rank, torch.distributed
and the launcher's environment, plus the DataLoader worker (see shardstream.engine.world)."""

from __future__ import annotations

import dataclasses
import os
import pickle

import numpy as np
import pytest

from shardstream import InvalidArgumentError, MDSWriter, StreamingDataset, World
from shardstream.engine.world import detect_world, rank_world

torch = pytest.importorskip("torch")
from torch.utils.data import DataLoader, Dataset  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")

LAUNCH_VARS = ("WORLD_SIZE", "RANK", "LOCAL_WORLD_SIZE", "LOCAL_RANK")


@pytest.fixture
def clean_env(monkeypatch):
    """No launcher variables in os.environ (whatever the shell running the tests set)."""
    for name in LAUNCH_VARS:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


@pytest.fixture(scope="module")
def dataset_dir(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("world") / "ds")
    with MDSWriter(out=out, columns={"id": "int", "x": "ndarray:uint8:4"}, size_limit=300) as writer:
        for i in range(48):
            writer.write({"id": i, "x": np.full(4, i, np.uint8)})
    return out


# -- the launcher's environment --------------------------------------------------------------

def test_empty_environment_is_a_single_process():
    assert rank_world(env={}) == World()
    assert detect_world(env={}) == World()


def test_torchrun_variables():
    env = {"WORLD_SIZE": "8", "RANK": "5", "LOCAL_WORLD_SIZE": "4", "LOCAL_RANK": "1"}
    assert rank_world(env=env) == World(num_nodes=2, ranks_per_node=4, node=1, local_rank=1)


def test_local_rank_defaults_to_rank_modulo_local_world():
    env = {"WORLD_SIZE": "6", "RANK": "4", "LOCAL_WORLD_SIZE": "3"}
    assert rank_world(env=env) == World(num_nodes=2, ranks_per_node=3, node=1, local_rank=1)


def test_without_local_world_size_every_rank_is_on_one_node():
    env = {"WORLD_SIZE": "4", "RANK": "3"}
    w = rank_world(env=env)
    assert w == World(num_nodes=1, ranks_per_node=4, node=0, local_rank=3)
    assert w.rank == 3 and w.world_size == 4


def test_empty_strings_count_as_unset():
    env = {"WORLD_SIZE": "", "RANK": "", "LOCAL_WORLD_SIZE": "", "LOCAL_RANK": ""}
    assert rank_world(env=env) == World()


def test_replication_is_passed_on():
    env = {"WORLD_SIZE": "4", "RANK": "3", "LOCAL_WORLD_SIZE": "2"}
    w = rank_world(2, env=env)
    assert w.replication == 2 and w.readers == 2 and w.reader == 1
    assert detect_world(2, env=env).replication == 2
    with pytest.raises(InvalidArgumentError):
        rank_world(3, env=env)  # 3 does not divide 4 ranks


@pytest.mark.parametrize("env", [
    {"RANK": "one", "WORLD_SIZE": "2"},
    {"WORLD_SIZE": "2.0"},
    {"WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "x"},
    {"WORLD_SIZE": "4", "LOCAL_RANK": "0x1"},
    {"RANK": "2", "WORLD_SIZE": "2"},
    {"RANK": "-1", "WORLD_SIZE": "2"},
    {"RANK": "1"},  # WORLD_SIZE defaults to 1
    {"WORLD_SIZE": "0"},
    {"WORLD_SIZE": "-2"},
    {"WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "3"},
    {"WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "0"},
    {"WORLD_SIZE": "4", "RANK": "1", "LOCAL_WORLD_SIZE": "2", "LOCAL_RANK": "2"},
])
def test_bad_environment_values_are_refused(env):
    with pytest.raises(InvalidArgumentError) as info:
        rank_world(env=env)
    assert isinstance(info.value, ValueError)
    with pytest.raises(InvalidArgumentError):
        detect_world(env=env)


def test_os_environ_is_read_by_default(clean_env):
    clean_env.setenv("WORLD_SIZE", "4")
    clean_env.setenv("RANK", "2")
    clean_env.setenv("LOCAL_WORLD_SIZE", "2")
    expected = World(num_nodes=2, ranks_per_node=2, node=1, local_rank=0)
    assert rank_world() == expected
    assert detect_world() == expected
    clean_env.setenv("RANK", "seven")
    with pytest.raises(InvalidArgumentError, match="RANK"):
        detect_world()


# -- precedence outside a DataLoader worker ---------------------------------------------------

def test_explicit_world_wins_over_environment_and_parent():
    explicit = World(num_nodes=3, node=2)
    env = {"WORLD_SIZE": "4", "RANK": "1"}
    assert detect_world(env=env, explicit=explicit) == explicit
    assert detect_world(env=env, explicit=explicit, parent=World(num_nodes=2, node=1)) == explicit
    # the environment is not even read: bad values do not matter
    assert detect_world(env={"RANK": "bad"}, explicit=explicit) == explicit


def test_parent_is_ignored_outside_a_worker():
    env = {"WORLD_SIZE": "2", "RANK": "1", "LOCAL_WORLD_SIZE": "1"}
    assert detect_world(env=env, parent=World(num_nodes=4, node=3)) == World(num_nodes=2, node=1)
    assert detect_world(env={}, parent=World(num_nodes=4, node=3)) == World()


def test_dataset_world_keyword(dataset_dir, clean_env):
    w = World(num_nodes=2, node=1)
    clean_env.setenv("WORLD_SIZE", "3")
    clean_env.setenv("RANK", "0")
    ds = StreamingDataset(local=dataset_dir, batch_size=2, world=w)
    assert ds.detect_world() == w
    ref = StreamingDataset(local=dataset_dir, batch_size=2)
    assert [s["id"] for s in ds] == [s["id"] for s in ref.iterate(w)]
    with pytest.raises(InvalidArgumentError):
        StreamingDataset(local=dataset_dir, world=(2, 1))
    plain = StreamingDataset(local=dataset_dir, batch_size=2)
    assert plain.detect_world() == World(num_nodes=1, ranks_per_node=3, node=0, local_rank=0)


def test_pickled_copy_records_the_rank_but_uses_it_only_in_workers(dataset_dir, clean_env):
    clean_env.setenv("WORLD_SIZE", "2")
    clean_env.setenv("RANK", "1")
    ds = StreamingDataset(local=dataset_dir, batch_size=2)
    copy = pickle.loads(pickle.dumps(ds))
    assert copy._parent_world == World(num_nodes=1, ranks_per_node=2, local_rank=1)
    for name in LAUNCH_VARS:
        clean_env.delenv(name, raising=False)
    assert copy.detect_world() == World()  # not in a worker: the parent rank is not used
    clean_env.setenv("RANK", "x")
    clean_env.setenv("WORLD_SIZE", "2")
    copy2 = pickle.loads(pickle.dumps(ds))  # a bad environment does not make pickling fail
    with pytest.raises(InvalidArgumentError):
        copy2.detect_world()


def test_explicit_world_is_not_replaced_by_a_parent_when_pickled(dataset_dir, clean_env):
    clean_env.setenv("WORLD_SIZE", "2")
    clean_env.setenv("RANK", "1")
    w = World(num_nodes=4, node=2)
    copy = pickle.loads(pickle.dumps(StreamingDataset(local=dataset_dir, batch_size=2, world=w)))
    assert copy.detect_world() == w


# -- torch.distributed ------------------------------------------------------------------------

@pytest.fixture
def process_group(tmp_path):
    import torch.distributed as dist

    if not dist.is_available():
        pytest.skip("torch.distributed is not available")
    assert not dist.is_initialized()
    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/pg", rank=0, world_size=1)
    try:
        yield dist
    finally:
        dist.destroy_process_group()


def test_process_group_wins_over_environment(process_group, clean_env, dataset_dir):
    clean_env.setenv("WORLD_SIZE", "4")
    clean_env.setenv("RANK", "3")
    clean_env.setenv("LOCAL_WORLD_SIZE", "2")  # does not divide the group's world size: ignored
    assert rank_world() == World()
    assert detect_world() == World()
    ds = StreamingDataset(local=dataset_dir, batch_size=2)
    assert ds.detect_world() == World()
    assert pickle.loads(pickle.dumps(ds))._parent_world == World()
    # an explicit World still wins over the group
    assert detect_world(explicit=World(num_nodes=2, node=1)) == World(num_nodes=2, node=1)


def test_process_group_reads_local_world_size_when_it_divides(process_group, clean_env):
    clean_env.setenv("LOCAL_WORLD_SIZE", "1")
    clean_env.setenv("RANK", "not-read")  # the group gives the rank; RANK is not parsed
    assert rank_world() == World()


def test_an_explicit_env_mapping_is_read_even_with_a_process_group(process_group):
    env = {"WORLD_SIZE": "4", "RANK": "3", "LOCAL_WORLD_SIZE": "2"}
    assert rank_world(env=env) == World(num_nodes=2, ranks_per_node=2, node=1, local_rank=1)


# -- inside DataLoader workers (real worker processes) ----------------------------------------

class Probe(Dataset):
    """Item i: (torch's worker id, the World that detect_world gives in that worker)."""

    def __init__(self, n: int, **kwargs) -> None:
        self.n = n
        self.kwargs = kwargs

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i):
        info = torch.utils.data.get_worker_info()
        try:
            world = detect_world(**self.kwargs)
        except InvalidArgumentError as exc:
            return info.id, f"error: {exc}"
        return info.id, dataclasses.astuple(world)


def _probe(num_workers: int, **kwargs) -> list:
    loader = DataLoader(Probe(2 * num_workers, **kwargs), batch_size=None, num_workers=num_workers,
                        multiprocessing_context="fork")
    return [(int(w), world if isinstance(world, str) else World(*world)) for w, world in loader]


def test_worker_takes_its_id_from_torch_and_ranks_from_env():
    env = {"WORLD_SIZE": "4", "RANK": "2", "LOCAL_WORLD_SIZE": "2"}
    got = _probe(2, env=env)
    assert {w for w, _ in got} == {0, 1}
    for worker, world in got:
        assert world == World(num_nodes=2, ranks_per_node=2, node=1, local_rank=0, num_workers=2, worker=worker)


def test_worker_uses_parent_over_environment():
    parent = World(num_nodes=3, ranks_per_node=2, node=2, local_rank=1)
    got = _probe(2, env={"WORLD_SIZE": "4", "RANK": "0"}, parent=parent)
    for worker, world in got:
        assert world == dataclasses.replace(parent, num_workers=2, worker=worker)
    # a parent means the environment is not read at all in a worker
    got = _probe(2, env={"RANK": "bad"}, parent=parent)
    assert all(isinstance(world, World) for _, world in got)


def test_worker_explicit_world_wins_but_worker_fields_come_from_torch():
    explicit = World(num_nodes=2, node=1, num_workers=5, worker=4)
    got = _probe(3, env={"WORLD_SIZE": "4", "RANK": "0"}, explicit=explicit, parent=World(num_nodes=4, node=3))
    assert {w for w, _ in got} == {0, 1, 2}
    for worker, world in got:
        assert world == World(num_nodes=2, node=1, num_workers=3, worker=worker)


def test_worker_bad_environment_without_parent_is_refused():
    got = _probe(1, env={"WORLD_SIZE": "2", "RANK": "5"})
    assert all(isinstance(world, str) and "RANK=5" in world for _, world in got)


class WorldOf(Dataset):
    """Item i: the World a StreamingDataset copy detects in the worker."""

    def __init__(self, ds) -> None:
        self.ds = ds

    def __len__(self) -> int:
        return 2

    def __getitem__(self, i):
        return dataclasses.astuple(self.ds.detect_world())


def test_worker_reads_as_the_rank_that_pickled_the_dataset(dataset_dir, clean_env):
    clean_env.setenv("WORLD_SIZE", "2")
    clean_env.setenv("RANK", "1")
    ds = pickle.loads(pickle.dumps(StreamingDataset(local=dataset_dir, batch_size=2)))
    for name in LAUNCH_VARS:  # the workers below have no launcher variables
        clean_env.delenv(name, raising=False)
    loader = DataLoader(WorldOf(ds), batch_size=None, num_workers=2, multiprocessing_context="fork")
    worlds = sorted(World(*w).worker for w in loader)
    assert worlds == [0, 1]
    for w in loader:
        world = World(*w)
        assert (world.world_size, world.rank, world.num_workers) == (2, 1, 2)


def _clear_launch_vars(worker_id: int) -> None:
    for name in LAUNCH_VARS:
        os.environ.pop(name, None)


def test_spawned_workers_read_their_rank_share_without_the_variables(dataset_dir, clean_env):
    """Rank 1 of 2: its spawned workers (with the variables removed) read rank 1's share."""
    from shardstream import StreamingDataLoader

    clean_env.setenv("WORLD_SIZE", "2")
    clean_env.setenv("RANK", "1")
    ds = StreamingDataset(local=dataset_dir, batch_size=3, shuffle=True, shuffle_seed=5)
    loader = StreamingDataLoader(ds, batch_size=3, num_workers=1, multiprocessing_context="spawn",
                                 worker_init_fn=_clear_launch_vars)
    got = [int(i) for batch in loader for i in batch["id"]]
    ref = StreamingDataset(local=dataset_dir, batch_size=3, shuffle=True, shuffle_seed=5)
    expected = [s["id"] for s in ref.iterate(World(num_nodes=1, ranks_per_node=2, local_rank=1))]
    assert got == expected and len(got) == 24
