"""A format of shards defined in this file alone reads through the whole engine.

``npy-rows`` is a directory with ``npy_index.json`` (the dtype and width of the rows, and each
shard's file, row count and byte size) and one 2-D ``.npy`` file per shard; a sample is
``{"id": its row number in the dataset, "x": the row}``. The format is one
:class:`~shardstream.format.source.ShardFormat`, one :class:`~shardstream.format.source.ShardRows`
and one ``register_format``. With nothing else changed, ``Stream(..., format="npy-rows")`` is read
in place and through the shard cache (from a loopback S3 server and a ``file://`` remote, with
eviction), mixed with an MDS stream, resumed exactly on other worlds and through DataLoader
workers, and a shard of the wrong shape is refused with :class:`~shardstream.errors.CorruptShardError`.

Rows are ``ROWS[n] = [n, n + 0.25, n + 0.5, n + 0.75]``, so a sample read from the wrong shard or
row shows up as wrong data.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from dataclasses import dataclass
from typing import Any, Optional, Sequence

import numpy as np
import pytest

from shardstream import BatchLoader, MDSWriter, Stream, StreamingDataset
from shardstream.errors import (
    CorruptIndexError,
    CorruptShardError,
    IndexNotFoundError,
    SampleIndexError,
    ShardNotFoundError,
    UnsupportedFormatError,
)
from shardstream.format.batch import stack_samples
from shardstream.format.index import FileInfo, check_basename, shard_path
from shardstream.format.source import ShardFormat, ShardRows, get_format, register_format
from shardstream.testing.resume import check_resumes_identically

NPY_INDEX = "npy_index.json"
COLUMNS = ("id", "x")


# -- the format ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class NpyShard:
    """One shard's listing entry; ``first`` is the dataset row number of its first row."""

    file: FileInfo
    samples: int
    dtype: str
    width: int
    first: int

    @property
    def column_names(self) -> tuple:
        return COLUMNS


def npy_kinds(shard: NpyShard, columns: Optional[Sequence[str]] = None) -> list[tuple[str, str, Any]]:
    kinds = [("id", "array", (np.dtype(np.int64), ())), ("x", "array", (np.dtype(shard.dtype), (shard.width,)))]
    return [k for k in kinds if columns is None or k[0] in columns]


def _only(batch: dict, columns: Optional[Sequence[str]]) -> dict:
    return batch if columns is None else {k: v for k, v in batch.items() if k in columns}


class NpyRows(ShardRows):
    """An opened shard: its ``.npy`` file memory-mapped, checked against the listing."""

    column_names = COLUMNS

    def __init__(self, path: str, shard: NpyShard) -> None:
        try:
            data = np.load(path, mmap_mode="r")
        except FileNotFoundError:
            raise ShardNotFoundError(f"shard file {path} is missing; restore it or fetch the dataset again") from None
        except (ValueError, OSError) as exc:
            raise CorruptShardError(f"{path} is not a readable .npy file ({exc}); write the shard again") from None
        want = (shard.samples, shard.width)
        if data.shape != want or data.dtype != np.dtype(shard.dtype):
            raise CorruptShardError(
                f"{path} holds a {data.dtype} array of shape {data.shape}, but {NPY_INDEX} lists "
                f"{np.dtype(shard.dtype)} rows of shape {want}; write the shard again or fix the listing")
        self.shard, self.path = shard, path
        self.samples, self.first = shard.samples, shard.first
        self.x = np.asarray(data)  # a plain read-only view of the mapping

    def get(self, i: int) -> dict[str, Any]:
        if not 0 <= i < self.samples:
            raise SampleIndexError(f"sample {i} is out of range for {self.path} ({self.samples} rows)")
        return self.get_unchecked(i)

    def get_unchecked(self, i: int) -> dict[str, Any]:
        return {"id": self.first + i, "x": self.x[i]}

    def batch_range(self, lo: int, hi: int, columns: Optional[Sequence[str]] = None) -> dict[str, Any]:
        ids = np.arange(self.first + lo, self.first + hi, dtype=np.int64)
        return _only({"id": ids, "x": self.x[lo:hi]}, columns)

    def batch_rows(self, rows, columns: Optional[Sequence[str]] = None) -> dict[str, Any]:
        rows = np.asarray(rows, np.int64)
        return _only({"id": self.first + rows, "x": self.x[rows]}, columns)

    def kinds(self, columns: Optional[Sequence[str]] = None) -> list[tuple[str, str, Any]]:
        return npy_kinds(self.shard, columns)


class NpyRowsFormat(ShardFormat):
    name = "npy-rows"
    index_name = NPY_INDEX

    def read_shards(self, dirname: str) -> list[NpyShard]:
        path = os.path.join(dirname, NPY_INDEX)
        try:
            with open(path, "rb") as f:
                text = f.read()
        except FileNotFoundError:
            raise IndexNotFoundError(
                f"no {NPY_INDEX} in {dirname}; an npy-rows dataset lists its shards there") from None
        return self.parse_index(text, path)

    def parse_index(self, text: bytes, source: str) -> list[NpyShard]:
        try:
            listing = json.loads(text)
            dtype, width = np.dtype(listing["dtype"]).str, int(listing["width"])
            entries = [(e["file"], int(e["rows"]), int(e["bytes"])) for e in listing["shards"]]
        except (ValueError, KeyError, TypeError) as exc:
            raise CorruptIndexError(f"{source} is not an npy-rows listing ({exc!r}); it needs dtype, width and "
                                    "shards: [{file, rows, bytes}, ...]") from None
        shards, first = [], 0
        for name, rows, size in entries:
            shards.append(NpyShard(FileInfo(check_basename(name, source), size), rows, dtype, width, first))
            first += rows
        return shards

    def resident_file(self, shard: NpyShard) -> FileInfo:
        return shard.file

    def prepare(self, dirname: str, shard: NpyShard, keep_fetched: bool) -> None:
        NpyRows(shard_path(dirname, shard.file.basename), shard)  # refused here, a download is fetched again

    def open(self, dirname: str, shard: NpyShard, validate_hash: Optional[str] = None) -> NpyRows:
        if validate_hash is not None:
            raise UnsupportedFormatError(f"{NPY_INDEX} records no digests, so validate_hash={validate_hash!r} "
                                         "cannot be checked; leave it unset")
        return NpyRows(shard_path(dirname, shard.file.basename), shard)

    def kinds(self, shard: NpyShard, columns: Optional[Sequence[str]] = None) -> list[tuple[str, str, Any]]:
        return npy_kinds(shard, columns)

    def layout(self, shard: NpyShard) -> tuple:
        return COLUMNS, shard.dtype, shard.width


# replace: DataLoader workers and spawned processes import this module again
NPY_ROWS = register_format(NpyRowsFormat(), replace=True)


# -- datasets ------------------------------------------------------------------------------------

SIZES = (7, 10, 3, 12, 8, 8)
N = sum(SIZES)  # 48: whole global steps of 8 and of 16
WIDTH = 4
ROWS = (np.arange(N * WIDTH, dtype=np.float32) / WIDTH).reshape(N, WIDTH)
BS = 8


def write_npy(dirname: str, arrays: Sequence[np.ndarray]) -> str:
    """An npy-rows dataset of ``arrays`` (one shard each) in ``dirname``."""
    os.makedirs(dirname, exist_ok=True)
    entries = []
    for k, rows in enumerate(arrays):
        name = f"rows.{k:05d}.npy"
        np.save(os.path.join(dirname, name), rows)
        entries.append({"file": name, "rows": len(rows), "bytes": os.path.getsize(os.path.join(dirname, name))})
    listing = {"dtype": arrays[0].dtype.str, "width": int(arrays[0].shape[1]), "shards": entries}
    with open(os.path.join(dirname, NPY_INDEX), "w") as f:
        json.dump(listing, f)
    return dirname


@pytest.fixture
def npy_dir(tmp_path) -> str:
    return write_npy(str(tmp_path / "npy"), np.split(ROWS, np.cumsum(SIZES)[:-1]))


def url(path: str) -> str:
    return f"file://{path}"


def dataset(local: Optional[str] = None, remote: Optional[str] = None, batch_size: int = BS,
            **kwargs) -> StreamingDataset:
    return StreamingDataset(streams=[Stream(remote=remote, local=local, format="npy-rows")], batch_size=batch_size,
                            **kwargs)


def ids(samples) -> list[int]:
    """The ids of ``samples``, each checked against its row."""
    out = []
    for s in samples:
        assert set(s) == set(COLUMNS) and type(s["id"]) is int
        assert s["x"].dtype == np.float32 and np.array_equal(s["x"], ROWS[s["id"]]), s
        out.append(s["id"])
    return out


def shard_files(dirname: str) -> set[str]:
    return {n for n in os.listdir(dirname) if n.endswith(".npy")}


# -- the format on its own -----------------------------------------------------------------------

def test_the_format_lists_opens_and_batches_its_shards(npy_dir):
    assert get_format("npy-rows") is NPY_ROWS
    shards = NPY_ROWS.read_shards(npy_dir)
    assert [s.samples for s in shards] == list(SIZES) and [s.first for s in shards] == [0, 7, 17, 20, 32, 40]
    rows = NPY_ROWS.open(npy_dir, shards[1])
    assert len(rows) == 10 and ids([rows.get(0), rows.get(9)]) == [7, 16]
    with pytest.raises(SampleIndexError, match="rows.00001.npy"):
        rows.get(10)
    run = rows.batch_range(2, 6)
    assert run["id"].tolist() == [9, 10, 11, 12] and np.array_equal(run["x"], ROWS[9:13])
    assert np.shares_memory(run["x"], rows.x)  # a slice of the mapping, nothing decoded per sample
    picked = rows.batch_rows([5, 0, 3])
    stacked = stack_samples([rows.get(i) for i in (5, 0, 3)], rows.kinds())
    assert picked["id"].tolist() == stacked["id"].tolist() == [12, 7, 10]
    assert picked["x"].dtype == stacked["x"].dtype and np.array_equal(picked["x"], stacked["x"])
    assert list(rows.batch_rows([1], ["x"])) == ["x"] and rows.kinds(["x"]) == NPY_ROWS.kinds(shards[1], ["x"])


def test_a_damaged_or_missing_listing_is_refused(tmp_path):
    with pytest.raises(CorruptIndexError, match="not an npy-rows listing"):
        NPY_ROWS.parse_index(b'{"dtype": "<f4"}', "somewhere/npy_index.json")
    with pytest.raises(IndexNotFoundError, match=NPY_INDEX):
        StreamingDataset(streams=[Stream(local=str(tmp_path), format="npy-rows")])


# -- read in place -------------------------------------------------------------------------------

def test_read_in_place_by_index_and_in_epoch_order(npy_dir, assert_same_sample):
    before = sorted(os.listdir(npy_dir))
    ds = dataset(local=npy_dir)
    assert len(ds) == N and ds.column_names == COLUMNS
    for i in range(N):
        assert_same_sample(ds[i], {"id": i, "x": ROWS[i]})
    assert ids([ds[-1]]) == [N - 1] and ids(ds[[3, 20]]) == [3, 20]
    assert ids(ds) == list(range(N))
    shuffled = ids(dataset(local=npy_dir, shuffle=True, shuffle_seed=3))
    assert sorted(shuffled) == list(range(N)) and shuffled != list(range(N))
    assert sorted(os.listdir(npy_dir)) == before  # read in place: nothing written beside the shards


@pytest.mark.parametrize("shuffle", [False, True])
def test_column_batches_equal_the_stacked_samples(npy_dir, shuffle):
    settings = dict(local=npy_dir, shuffle=shuffle, shuffle_seed=5)
    samples = list(dataset(**settings))
    for batches in (list(dataset(**settings).iterate_batches()), list(BatchLoader(dataset(**settings)))):
        assert len(batches) == N // BS
        for j, batch in enumerate(batches):
            want = samples[j * BS:(j + 1) * BS]
            assert batch["id"].dtype == np.int64 and batch["id"].tolist() == [s["id"] for s in want]
            assert batch["x"].dtype == np.float32 and np.array_equal(batch["x"], np.stack([s["x"] for s in want]))
    only = list(dataset(**settings).iterate_batches(columns=["x"]))
    assert all(list(b) == ["x"] for b in only)
    assert np.array_equal(np.concatenate([b["x"] for b in only]), np.stack([s["x"] for s in samples]))


# -- through the cache ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def s3_server():
    pytest.importorskip("moto", reason="the loopback S3 server needs moto: pip install 'moto[server]'")
    from shardstream.testing.servers import S3Server

    with S3Server() as server:
        yield server


def test_read_through_the_cache_from_s3(s3_server, npy_dir, tmp_path):
    """Shards land in the cache directory; one damaged in transit is refused by the format's ``prepare``
    and fetched again; a second dataset on the same cache downloads nothing."""
    from shardstream.testing.servers import unique_name

    remote = f"{s3_server.make_bucket(unique_name())}/npy"
    s3_server.upload_dir(npy_dir, remote)
    cache = str(tmp_path / "cache")
    with s3_server.proxy() as proxy:
        proxy.faults.add("rows.00001.npy", "corrupt")
        ds = dataset(remote=remote, local=cache, storage_options=proxy.storage_options)
        assert ids(ds) == list(range(N))
        assert [kind for kind, _ in proxy.faults.hits] == ["corrupt"]
        got = {path.rsplit("/", 1)[1]: n for path, n in proxy.faults.requests.items() if path.endswith(".npy")}
        assert got == {**{name: 1 for name in shard_files(npy_dir)}, "rows.00001.npy": 2}
        assert shard_files(cache) == shard_files(npy_dir) and os.path.exists(os.path.join(cache, NPY_INDEX))
        proxy.faults.clear()
        again = dataset(remote=remote, local=cache, storage_options=proxy.storage_options, shuffle=True)
        assert sorted(ids(again)) == list(range(N))
        assert again.table.stores[0].fetcher.files == 0
        assert not [path for path in proxy.faults.requests if path.endswith(".npy")]


def test_a_small_cache_limit_evicts_and_the_pass_stays_correct(npy_dir, tmp_path):
    cache = str(tmp_path / "cache")
    biggest = max(os.path.getsize(os.path.join(npy_dir, n)) for n in shard_files(npy_dir))
    limit = os.path.getsize(os.path.join(npy_dir, NPY_INDEX)) + 3 * biggest
    ds = dataset(remote=url(npy_dir), local=cache, cache_limit=limit)
    seen, usage = [], []
    for s in ds:
        seen.append(s)
        usage.append(ds.cache_usage)
    assert ids(seen) == list(range(N))
    assert max(usage) <= limit + biggest and ds.cache_usage <= limit
    assert len(shard_files(cache)) < len(SIZES)  # shards were evicted
    assert ds.table.stores[0].fetcher.files >= len(SIZES)
    shuffled = dataset(remote=url(npy_dir), local=cache, cache_limit=limit, shuffle=True, shuffle_seed=8)
    with pytest.warns(UserWarning, match="smaller than this reader's working set"):  # it reads 6 shards at once
        assert sorted(ids(shuffled)) == list(range(N))
    assert shard_files(npy_dir) == {f"rows.{k:05d}.npy" for k in range(len(SIZES))}  # the remote is untouched


# -- mixing with an MDS stream -------------------------------------------------------------------

def key(sample: dict) -> tuple[str, int]:
    """Which stream a sample came from, and which sample it is (checked against its data)."""
    if "word" in sample:
        assert sample["word"] == f"w{sample['n']}"
        return "mds", sample["n"]
    return "npy", ids([sample])[0]


def test_mixed_with_an_mds_stream_by_proportion(npy_dir, tmp_path):
    mds = str(tmp_path / "mds")
    with MDSWriter(out=mds, columns={"word": "str", "n": "int"}, size_limit=200) as writer:
        for n in range(30):
            writer.write({"word": f"w{n}", "n": n})

    def make() -> StreamingDataset:
        streams = [Stream(local=mds, proportion=1),
                   Stream(remote=url(npy_dir), local=str(tmp_path / "cache"), format="npy-rows", proportion=3)]
        return StreamingDataset(streams=streams, epoch_size=64, batch_size=BS, shuffle=True, shuffle_seed=2)

    ds = make()
    counts = ds.stream_counts().tolist()
    assert sum(counts) == 64 and counts[1] > counts[0] > 0
    full = [key(s) for s in ds]
    assert Counter(tag for tag, _ in full) == {"mds": counts[0], "npy": counts[1]}
    assert {n for tag, n in full if tag == "npy"} <= set(range(N)) and len({k for k in full if k[0] == "npy"}) == N
    first = make()
    it = first.iterate()
    head = [key(next(it)) for _ in range(3 * BS)]
    state = first.state_dict()
    it.close()
    assert state["sample_in_epoch"] == 3 * BS
    resumed = make()
    resumed.load_state_dict(state)
    assert head + [key(s) for s in resumed] == full


# -- exact resume ---------------------------------------------------------------------------------

@pytest.mark.parametrize("where", ["local", "remote"])
def test_resumes_exactly_on_other_worlds(npy_dir, tmp_path, where):
    place = dict(local=npy_dir) if where == "local" else dict(remote=url(npy_dir), local=str(tmp_path / "cache"))
    report = check_resumes_identically(lambda bs: dataset(batch_size=bs, shuffle=True, shuffle_seed=4, **place),
                                       8, [(1, 1, 0), (1, 2, 0), (2, 2, 2)], steps=[0, 1, 4])
    assert report.steps == 3 and report.samples_compared > 0


@pytest.mark.filterwarnings("ignore:The given NumPy array is not writable:UserWarning")
@pytest.mark.parametrize("where,context", [("local", "fork"), ("remote", "fork"), ("local", "spawn")])
def test_dataloader_workers_resume_mid_epoch(npy_dir, tmp_path, where, context):
    pytest.importorskip("torch")
    from shardstream import StreamingDataLoader

    place = dict(local=npy_dir) if where == "local" else dict(remote=url(npy_dir), local=str(tmp_path / "cache"))

    def loader() -> Any:
        return StreamingDataLoader(dataset(shuffle=True, shuffle_seed=6, **place), batch_size=BS, num_workers=2,
                                   multiprocessing_context=context)

    def batch_ids(batch) -> list[int]:
        got = batch["id"].tolist()
        assert np.array_equal(batch["x"].numpy(), ROWS[got])
        return got

    full = ids(dataset(shuffle=True, shuffle_seed=6, **place))
    first = loader()
    head = []
    for j, batch in enumerate(first):
        head += batch_ids(batch)
        if j == 2:
            break
    state = first.state_dict()
    assert state["sample_in_epoch"] == 3 * BS
    resumed = loader()
    resumed.load_state_dict(state)
    assert head + [i for batch in resumed for i in batch_ids(batch)] == full


# -- a damaged shard ------------------------------------------------------------------------------

@pytest.mark.parametrize("where", ["local", "remote"])
def test_a_shard_of_the_wrong_shape_is_refused_naming_the_file(npy_dir, tmp_path, where):
    path = os.path.join(npy_dir, "rows.00002.npy")  # 3 rows of 4, rewritten as 6 rows of 2: the same bytes
    size = os.path.getsize(path)
    np.save(path, ROWS[17:20].reshape(6, 2))
    assert os.path.getsize(path) == size
    place = dict(local=npy_dir) if where == "local" else dict(remote=url(npy_dir), local=str(tmp_path / "cache"))
    wrong = r"rows\.00002\.npy holds a float32 array of shape \(6, 2\)"
    with pytest.raises(CorruptShardError, match=wrong):
        list(dataset(**place))
    with pytest.raises(CorruptShardError, match=wrong):
        dataset(**place)[17]
    assert ids([dataset(**place)[16]]) == [16]  # the other shards still read
