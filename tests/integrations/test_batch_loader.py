"""Column batches per step: StreamingDataset.iterate_batches, the step decoder and BatchLoader."""

from __future__ import annotations

import shutil
import threading
import time

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import shardstream
from shardstream import (
    BatchLoader,
    CorruptShardError,
    InvalidArgumentError,
    MDSWriter,
    Ragged,
    StreamingDataset,
    World,
)
from shardstream.engine.reading import decode_step as _decode_step

N = 150
BS = 8
SEED = 5
COLUMNS = {"id": "int", "x": "ndarray:uint8:4", "tokens": "ndarray:int32", "grid": "ndarray:float32",
           "s": "str", "b": "bytes", "j": "json", "u": "ndarray", "f": "float16"}


def _sample(i: int, rng) -> dict:
    ndim = int(rng.integers(1, 4))
    long = i % 37 == 0  # a few rows longer than 255 elements: another shape width in the header
    return {
        "id": i,
        "x": np.full(4, i % 256, np.uint8),
        "tokens": rng.integers(-9, 9, 300 if long else int(rng.integers(1, 7))).astype(np.int32),
        "grid": rng.standard_normal(tuple(int(d) for d in rng.integers(1, 3, ndim))).astype(np.float32),
        "s": "ü" * (i % 5),
        "b": bytes([i % 256]) * (i % 3),
        "j": {"i": i, "odd": bool(i % 2)},
        "u": np.arange(i % 4 + 1, dtype=np.int16),
        "f": np.float16(i / 8),
    }


@pytest.fixture(scope="module")
def mixed(tmp_path_factory) -> str:
    rng = np.random.default_rng(0)
    out = str(tmp_path_factory.mktemp("batches") / "mixed")
    with MDSWriter(out=out, columns=COLUMNS, size_limit=1500) as writer:
        for i in range(N):
            writer.write(_sample(i, rng))
    assert len(StreamingDataset(local=out).shards) >= 10
    return out


def make(path: str, **kwargs) -> StreamingDataset:
    kwargs.setdefault("batch_size", BS)
    kwargs.setdefault("shuffle", True)
    kwargs.setdefault("shuffle_seed", SEED)
    return StreamingDataset(local=path, **kwargs)


# -- comparing batches -------------------------------------------------------------------------

def _value_key(v):
    if isinstance(v, (np.ndarray, np.generic, int, float)) and not isinstance(v, bool):
        a = np.asarray(v)
        return ("array", a.dtype.str, a.shape, a.tobytes())
    return ("value", type(v).__name__, repr(v))


def sample_key(sample: dict) -> tuple:
    return tuple((k, _value_key(v)) for k, v in sorted(sample.items()))


def rows(batch: dict) -> list[dict]:
    n = {len(v) for v in batch.values()}
    assert len(n) == 1, f"columns of different lengths: {n}"
    return [{k: v[i] for k, v in batch.items()} for i in range(n.pop())]


def assert_same_batch(got: dict, want: dict) -> None:
    """Type-, dtype- and shape-strict equality of two column batches."""
    assert list(got) == list(want)
    for name in want:
        g, w = got[name], want[name]
        assert type(g) is type(w), (name, type(g), type(w))
        if isinstance(w, np.ndarray):
            assert g.dtype == w.dtype and g.shape == w.shape and np.array_equal(g, w), name
        elif isinstance(w, Ragged):
            assert g.values.dtype == w.values.dtype and np.array_equal(g.values, w.values), name
            assert np.array_equal(np.asarray(g.offsets), np.asarray(w.offsets)), name
            assert type(g.shapes) is type(w.shapes), (name, g.shapes, w.shapes)
            if isinstance(w.shapes, np.ndarray):
                assert g.shapes.shape == w.shapes.shape and np.array_equal(g.shapes, w.shapes), name
            else:
                assert g.shapes == w.shapes, name
        else:
            assert [_value_key(x) for x in g] == [_value_key(x) for x in w], name


def batches_as_samples(batches) -> list[tuple]:
    return [sample_key(r) for b in batches for r in rows(b)]


# -- iterate_batches: the same samples, in the same order, as iterate -----------------------------------

@pytest.mark.parametrize("kwargs", [
    dict(shuffle=False),
    dict(shuffle=False, batch_size=1),
    dict(batch_size=1),
    dict(batch_size=7),
    dict(batch_size=64, shuffle_block_size=50),  # a few shards per step, interleaved
    dict(batch_size=64, shuffle_algo="py1b", shuffle_block_size=50),
    dict(batch_size=16, shuffle_algo="py1s"),
    dict(batch_size=32, shuffle_algo="naive"),
], ids=str)
def test_iterate_batches_equals_iterate(mixed, kwargs):
    ref_ds, ds = make(mixed, **kwargs), make(mixed, **kwargs)
    for epoch in range(2):
        want = [sample_key(s) for s in ref_ds.iterate()]
        batches = list(ds.iterate_batches())
        assert all(len(b["id"]) == ds.batch_size for b in batches)
        assert batches_as_samples(batches) == want, f"epoch {epoch}"
    assert ds.next_epoch == ref_ds.next_epoch == 2


def test_each_batch_is_what_decode_batch_gives(mixed):
    """The representation (dtypes, Ragged shapes, lists) is that of get_batch / decode_batch."""
    plain = make(mixed)
    for kwargs in (dict(shuffle=False), dict(batch_size=7), dict(batch_size=64, shuffle_block_size=50)):
        for batch in make(mixed, **kwargs).iterate_batches():
            assert_same_batch(batch, plain.get_batch(batch["id"]))


@pytest.mark.parametrize("world", [World(num_nodes=2, node=1), World(ranks_per_node=4, local_rank=2),
                                   World(num_nodes=2, node=0, num_workers=3, worker=2),
                                   World(num_nodes=2, ranks_per_node=2, node=1, local_rank=1, replication=2)],
                         ids=["node1of2", "rank2of4", "worker2of3", "replicated"])
def test_iterate_batches_for_a_world(mixed, world):
    want = [sample_key(s) for s in make(mixed).iterate(world)]
    ds = make(mixed)
    batches = list(ds.iterate_batches(world))
    assert want and batches_as_samples(batches) == want
    assert all(len(b["id"]) == BS for b in batches)


@pytest.mark.parametrize("cache_limit", [None, "12kb"])
@pytest.mark.parametrize("kwargs", [dict(shuffle=False), dict(batch_size=7),
                                    dict(batch_size=64, shuffle_block_size=50)], ids=str)
def test_iterate_batches_of_a_remote_dataset(mixed, tmp_path, cache_limit, kwargs):
    ref = make(mixed, **kwargs)
    want = [list(ref.iterate()) for _ in range(4)]
    ds = StreamingDataset(remote=mixed, local=str(tmp_path / "cache"), cache_limit=cache_limit,
                          **{"batch_size": BS, "shuffle": True, "shuffle_seed": SEED, **kwargs})
    assert ds.remote is not None
    for epoch in range(2):
        assert batches_as_samples(ds.iterate_batches()) == [sample_key(x) for x in want[epoch]], epoch
    assert [sample_key(x) for x in ds.iterate()] == [sample_key(x) for x in want[2]]  # the per-sample path
    cols = ["tokens", "id"]
    assert batches_as_samples(ds.iterate_batches(columns=cols)) == [
        sample_key({k: x[k] for k in cols}) for x in want[3]]


def test_columns_limit_the_batch(mixed):
    full = list(make(mixed, batch_size=7).iterate_batches())
    part = list(make(mixed, batch_size=7).iterate_batches(columns=["tokens", "s", "id"]))
    assert len(full) == len(part)
    for f, p in zip(full, part):
        assert set(p) == {"tokens", "s", "id"}
        assert_same_batch(p, {k: f[k] for k in p})


@pytest.mark.parametrize("remote", [False, True])
def test_unknown_columns_are_refused(mixed, tmp_path, remote):
    ds = (StreamingDataset(remote=mixed, local=str(tmp_path / "c"), batch_size=BS) if remote
          else make(mixed))
    with pytest.raises(InvalidArgumentError, match="nope"):
        ds.iterate_batches(columns=["id", "nope"])


def test_refused_columns_leave_the_pending_state_alone(mixed):
    # regression: the pass began before the columns were checked, so a refused call consumed the state
    ds = make(mixed)
    it = ds.iterate()
    head = [next(it)["id"] for _ in range(2 * BS)]
    state = ds.state_dict()
    ref = make(mixed)
    rest = [s["id"] for s in ref.iterate()][len(head):]
    ds.load_state_dict(state)
    with pytest.raises(InvalidArgumentError):
        ds.iterate_batches(columns=["typo"])
    with pytest.raises(InvalidArgumentError):
        iter(BatchLoader(ds, columns=["typo"]))
    assert ds.next_epoch == 0
    assert [int(i) for b in ds.iterate_batches(columns=["id"]) for i in b["id"]] == rest


# -- the step decoder's three strategies ----------------------------------------------------------

def _step(ds, ids, columns=None):
    _, shards, local = ds.table.locate(np.asarray(ids, np.int64))
    return _decode_step(ds.reader, shards, local, columns)


def _shard_ids(ds, shard: int) -> list[int]:
    start = int(ds.table.starts[shard])
    return list(range(start, start + ds.shards[shard].samples))


def test_decode_step_strategies(mixed, monkeypatch):
    import shardstream.engine.reading as module

    used = []
    for name in ("stack_samples", "take_rows", "decode_joined"):
        original = getattr(module, name)

        def spy(*args, _name=name, _original=original):
            used.append(_name)
            return _original(*args)

        monkeypatch.setattr(module, name, spy)
    ds = make(mixed)
    a, b, c = _shard_ids(ds, 1), _shard_ids(ds, 4), _shard_ids(ds, 7)
    rng = np.random.default_rng(1)
    cases = {
        "one shard, consecutive": a[2:7],
        "one shard, scattered": [a[5], a[0], a[3], a[3]],
        "runs in shard order": a[3:] + b + c[:2],
        "runs in shard order, scattered inside": [a[4], a[1], b[2], b[0], c[3]],
        "many shards per step": rng.permutation(N)[:24].tolist(),
        "few shards, interleaved": rng.permutation((a + b + c) * 3).tolist(),
        "two shards, back and forth": (b[:3] + a[:3]) * 8,
    }
    expected = {"many shards per step": "decode_joined", "few shards, interleaved": "decode_joined",
                "two shards, back and forth": "decode_joined"}
    for name, ids in cases.items():
        used.clear()
        _step(ds, ids)
        assert used == ([expected[name]] if name in expected else []), name
        for columns in (None, ["grid", "s"], ["id"]):
            assert_same_batch(_step(ds, ids, columns), ds.get_batch(ids, columns))
            if columns is None:
                assert [sample_key(r) for r in rows(_step(ds, ids))] == [sample_key(ds[i]) for i in ids], name


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_decode_step_equals_decode_batch(mixed, data):
    ds = make(mixed)
    shards = data.draw(st.lists(st.integers(0, len(ds.shards) - 1), min_size=1, max_size=4, unique=True))
    pool = [i for s in shards for i in _shard_ids(ds, s)]
    ids = data.draw(st.lists(st.sampled_from(pool), min_size=1, max_size=72))
    if data.draw(st.booleans()):
        ids = sorted(ids)
    columns = data.draw(st.none() | st.lists(st.sampled_from(sorted(COLUMNS)), min_size=1, unique=True))
    assert_same_batch(_step(ds, ids, columns), ds.get_batch(ids, columns))


# -- subclasses ---------------------------------------------------------------------------------

class Tagged(StreamingDataset):
    def __getitem__(self, key):
        sample = super().__getitem__(key)
        return {**sample, "tag": -sample["id"]}


class TaggedByGetItem(StreamingDataset):
    def get_item(self, sample_id, retry=7):
        sample = super().get_item(sample_id, retry)
        return {**sample, "tag": -sample["id"]}


@pytest.mark.parametrize("remote", [False, True])
def test_overridden_getitem_is_used_by_iterate(mixed, tmp_path, remote):
    kwargs = dict(batch_size=BS, shuffle=True, shuffle_seed=SEED)
    ds = Tagged(remote=mixed, local=str(tmp_path / "c"), **kwargs) if remote else Tagged(local=mixed, **kwargs)
    got = list(ds.iterate())
    assert [s["id"] for s in got] == [s["id"] for s in make(mixed).iterate()]
    assert all(s["tag"] == -s["id"] for s in got)


@pytest.mark.parametrize("remote", [False, True])
def test_overridden_get_item_is_used_by_iterate_and_indexing(mixed, tmp_path, remote):
    # regression: iteration called self[i], whose int fast path never reached an overridden get_item
    kwargs = dict(batch_size=BS, shuffle=True, shuffle_seed=SEED)
    ds = (TaggedByGetItem(remote=mixed, local=str(tmp_path / "c"), **kwargs) if remote
          else TaggedByGetItem(local=mixed, **kwargs))
    assert ds.get_item(3)["tag"] == -3
    assert ds[3]["tag"] == -3 and ds[-1]["tag"] == -(N - 1) and [s["tag"] for s in ds[4:6]] == [-4, -5]
    got = list(ds.iterate())
    assert [s["id"] for s in got] == [s["id"] for s in make(mixed).iterate()]
    assert all(s.get("tag") == -s["id"] for s in got)


# -- BatchLoader -------------------------------------------------------------------------------

def test_batch_loader_order_and_epochs(mixed):
    ref = make(mixed, batch_size=7)
    want = [list(ref.iterate_batches()) for _ in range(2)]
    loader = BatchLoader(make(mixed, batch_size=7), prefetch=3)
    assert shardstream.BatchLoader is BatchLoader
    for epoch in range(2):
        assert len(loader) == len(want[epoch])
        got = list(loader)
        assert len(got) == len(want[epoch])
        for g, w in zip(got, want[epoch]):
            assert_same_batch(g, w)


def test_batch_loader_len_after_a_resumed_pass(mixed):
    loader = BatchLoader(make(mixed))
    total = len(loader)
    it = iter(loader)
    for _ in range(3):
        next(it)
    state = loader.state_dict()
    it.close()
    resumed = BatchLoader(make(mixed))
    resumed.load_state_dict(state)
    assert len(resumed) == total - 3
    assert sum(1 for _ in resumed) == total - 3
    assert len(resumed) == total  # no pass in progress: the next one, a whole epoch
    assert sum(1 for _ in resumed) == total


def test_batch_loader_world_and_columns(mixed):
    w = World(num_nodes=2, node=1)
    want = list(make(mixed, batch_size=4).iterate_batches(w, columns=["id", "grid"]))
    loader = BatchLoader(make(mixed, batch_size=4), world=w, columns=["id", "grid"])
    got = list(loader)
    assert len(got) == len(want) == len(loader)
    for g, x in zip(got, want):
        assert_same_batch(g, x)


def _ids(batch) -> list[int]:
    return batch["id"].tolist()


def test_batch_loader_state_counts_consumed_batches(mixed):
    ref = [i for b in make(mixed).iterate_batches() for i in _ids(b)]
    ref_next = [i for b in (lambda d: (list(d.iterate_batches()), d.iterate_batches())[1])(make(mixed))
                for i in _ids(b)]
    loader = BatchLoader(make(mixed), prefetch=4)
    head = []
    for j, batch in enumerate(loader):
        head.extend(_ids(batch))
        if j == 2:
            time.sleep(0.2)  # the thread fills its queue: up to 4 batches decoded ahead
            state = loader.state_dict()
            break
    assert (state["epoch"], state["sample_in_epoch"]) == (0, 3 * BS)
    assert loader.state_dict() == state
    # two processes, each with half the batch, continue the epoch from the state
    parts = []
    for node in (0, 1):
        ds = make(mixed, batch_size=BS // 2)
        ds.load_state_dict(state)
        part = BatchLoader(ds, world=World(num_nodes=2, node=node))
        assert len(part) == len(ref) // BS - 3
        parts.append([_ids(b) for b in part])
    assert len(parts[0]) == len(parts[1]) == len(ref) // BS - 3
    merged = [i for a, b in zip(*parts) for i in a + b]
    assert head + merged == ref
    # the same loader, resumed, continues the same way, then runs the next epoch
    loader.load_state_dict(state)
    assert loader.state_dict()["sample_in_epoch"] == 3 * BS
    assert head + [i for b in loader for i in _ids(b)] == ref
    end = loader.state_dict()
    assert end["sample_in_epoch"] == len(ref)
    assert [i for b in loader for i in _ids(b)] == ref_next
    other = BatchLoader(make(mixed))
    other.load_state_dict(end)  # the end of epoch 0: the next pass is epoch 1
    assert [i for b in other for i in _ids(b)] == ref_next


def test_batch_loader_reraises_the_threads_error(mixed, tmp_path):
    path = shutil.copytree(mixed, str(tmp_path / "ds"))
    ds = StreamingDataset(local=path, batch_size=BS)
    shard = ds.shards[2].raw_data.basename
    with open(f"{path}/{shard}", "r+b") as f:
        f.write(b"\xff\xff\x00\x00")
    before = _decoding_threads()
    loader = BatchLoader(ds)
    got = []
    with pytest.raises(CorruptShardError, match=shard):
        for batch in loader:
            got.extend(_ids(batch))
    assert got == list(range(len(got))) and got  # the batches before the damaged shard came through
    _wait_for_threads(before)


def test_batch_loader_transform(mixed):
    def transform(batch):
        return {**batch, "twice": batch["id"] * 2}

    got = list(BatchLoader(make(mixed), transform=transform))
    assert all(np.array_equal(b["twice"], b["id"] * 2) for b in got)
    assert [i for b in got for i in _ids(b)] == [i for b in make(mixed).iterate_batches() for i in _ids(b)]

    def fails(batch):
        if 7 in batch["id"]:
            raise KeyError("no seven")
        return batch

    with pytest.raises(KeyError, match="no seven"):
        list(BatchLoader(make(mixed, shuffle=False), transform=fails))


def _decoding_threads() -> int:
    return sum(1 for t in threading.enumerate() if t.name == "shardstream-batches")


def _wait_for_threads(count: int, timeout: float = 5.0) -> None:
    """Wait until ``count`` decoding threads are alive (threads of other tests are not counted)."""
    end = time.monotonic() + timeout
    while _decoding_threads() > count and time.monotonic() < end:
        time.sleep(0.01)
    assert _decoding_threads() == count, [t.name for t in threading.enumerate()]


def test_batch_loader_threads_stop(mixed):
    before = _decoding_threads()
    threads = threading.active_count()
    loader = BatchLoader(make(mixed), prefetch=2)
    for j, _ in enumerate(loader):
        if j == 1:
            break
    _wait_for_threads(before)  # breaking out of the loop stops the thread
    assert threading.active_count() <= threads
    it = iter(loader)
    next(it)
    assert _decoding_threads() == before + 1
    loader.close()
    _wait_for_threads(before)
    it.close()
    it = iter(loader)
    next(it)
    it2 = iter(loader)  # a new pass stops the previous one
    next(it2)
    _wait_for_threads(before + 1)
    loader.load_state_dict(loader.state_dict())
    _wait_for_threads(before)
    loader.close()
    loader.close()


def test_batch_loader_bad_arguments(mixed):
    ds = make(mixed)
    for prefetch in (0, -1, True, 1.5, None):
        with pytest.raises(InvalidArgumentError, match="prefetch"):
            BatchLoader(ds, prefetch=prefetch)
    with pytest.raises(InvalidArgumentError, match="world"):
        BatchLoader(ds, world=(2, 1))
    with pytest.raises(InvalidArgumentError, match="batch_size"):
        BatchLoader(make(mixed, batch_size=None))
    with pytest.raises(InvalidArgumentError, match="StreamingDataset"):
        BatchLoader([1, 2, 3])
    with pytest.raises(InvalidArgumentError, match="nope"):
        iter(BatchLoader(ds, columns=["nope"]))


@pytest.mark.parametrize("cls", [Tagged, TaggedByGetItem])
def test_column_batches_refuse_a_subclass_that_makes_its_own_samples(mixed, cls):
    ds = cls(local=mixed, batch_size=BS, shuffle=True, shuffle_seed=SEED)
    with pytest.raises(InvalidArgumentError, match="overrides __getitem__ or get_item"):
        ds.iterate_batches()
    with pytest.raises(InvalidArgumentError, match="overrides __getitem__ or get_item"):
        BatchLoader(ds)
    assert ds.next_epoch == 0  # refused before any pass began
    assert all(s["tag"] == -s["id"] for s in ds.iterate())


def test_batch_loader_refuses_unknown_columns_when_built(mixed):
    with pytest.raises(InvalidArgumentError, match="nope"):
        BatchLoader(make(mixed), columns=["id", "nope"])


def test_an_iterator_of_a_replaced_pass_just_ends(mixed):
    loader = BatchLoader(make(mixed), prefetch=1)
    old = iter(loader)
    first = next(old)
    new = iter(loader)  # a new pass stops the old one's thread
    start = time.monotonic()
    assert list(old) == []  # no LoaderError, no wait
    assert time.monotonic() - start < 0.5
    assert len(list(new)) == len(loader)
    loader.close()
    assert first["id"].shape == (BS,)
