"""EasyDeL's sharded-source API over the engine: a shard is a file, opened at any row by bisecting its
pieces, read in place or by ranged reads through the cache, with retries, transforms, and the
StreamingDataset of the same files.

Rows are ``{"n": n, "word": f"w{n}"}`` with ``n`` counting up through each file, so a row read from the
wrong piece or offset shows up as wrong data.
"""

from __future__ import annotations

import os
import re

import numpy as np
import pytest

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

from shardstream import (  # noqa: E402
    ArrowShardedSource,
    HuggingFaceShardedSource,
    ParquetShardedSource,
    ShardedSource,
    StreamingDataset,
    TransformedShardedSource,
)
from shardstream.errors import DownloadError, InvalidArgumentError, NotYetSupportedError  # noqa: E402
from shardstream.sources import FileShardedSource, ShardInfo  # noqa: E402
from shardstream.testing.servers import unique_name  # noqa: E402


def rows(lo: int, hi: int):
    n = np.arange(lo, hi, dtype=np.int64)
    return pa.table({"n": n, "word": pa.array([f"w{i}" for i in n])})


def parquet(path, lo: int, hi: int, group: int) -> str:
    os.makedirs(os.path.dirname(str(path)), exist_ok=True)
    pq.write_table(rows(lo, hi), str(path), row_group_size=group)
    return str(path)


def arrow(path, lo: int, hi: int, batch: int) -> str:
    os.makedirs(os.path.dirname(str(path)), exist_ok=True)
    t = rows(lo, hi)
    with pa.ipc.new_stream(str(path), t.schema) as w:
        w.write_table(t, max_chunksize=batch)
    return str(path)


def ns(it) -> list[int]:
    out = []
    for r in it:
        assert r["word"] == f"w{r['n']}"
        out.append(r["n"])
    return out


@pytest.fixture
def files(tmp_path) -> str:
    parquet(tmp_path / "pq" / "a.parquet", 0, 100, 30)  # row groups of 30, 30, 30, 10
    parquet(tmp_path / "pq" / "b.parquet", 0, 7, 7)
    parquet(tmp_path / "pq" / "c.parquet", 0, 45, 15)
    return str(tmp_path / "pq")


# -- the protocol ------------------------------------------------------------------------------

def test_shards_are_files_and_open_at_any_row(files):
    source = ParquetShardedSource(os.path.join(files, "*.parquet"))
    assert isinstance(source, ShardedSource)
    names = source.shard_names
    assert names == [os.path.join(files, f"{c}.parquet") for c in "abc"]
    assert source.num_shards == 3 and source.num_shards() == 3  # Levanter's property, EasyDeL's method
    assert len(source) == 152
    a = names[0]
    assert ns(source.open_shard(a)) == list(range(100))
    for row in (0, 1, 29, 30, 31, 59, 60, 89, 90, 99):
        assert ns(source.open_shard_at_row(a, row)) == list(range(row, 100)), row
    assert ns(source.open_shard_at_row(a, 100)) == [] and ns(source.open_shard_at_row(a, 10**9)) == []
    assert ns(source.open_shard_at_row("b.parquet", 3)) == [3, 4, 5, 6]  # a name relative to the root works too
    assert source.get_shard_info(names[2]) == ShardInfo(2, names[2], 45, os.path.getsize(names[2]), names[2])
    with pytest.raises(InvalidArgumentError, match=r"'nope\.parquet' is not a shard of this source"):
        source.open_shard("nope.parquet")
    with pytest.raises(InvalidArgumentError, match="row=-1 must be an int >= 0"):
        source.open_shard_at_row(a, -1)


def test_iterating_shards_from_a_checkpoint(files):
    source = ParquetShardedSource(files, columns=["n", "word"])
    every = ns(source)
    assert every == list(range(100)) + list(range(7)) + list(range(45))
    assert ns(source.iter_shards(start_shard=1, start_row=4)) == [4, 5, 6] + list(range(45))
    assert ns(source.iter_shards([2, 0], start_shard=0, start_row=40)) == [40, 41, 42, 43, 44] + list(range(100))


def test_an_arrow_shard_opens_at_the_batch_holding_the_row(tmp_path):
    path = arrow(tmp_path / "a.arrow", 0, 1000, 64)
    source = ArrowShardedSource(path)
    for row in (0, 63, 64, 640, 999):
        assert ns(source.open_shard_at_row(path, row)) == list(range(row, 1000))
    pinned = []
    store = source.store
    real = store.pin
    store.pin = lambda i, *a, **k: pinned.append(i) or real(i, *a, **k)
    first = next(source.open_shard_at_row(path, 700))
    assert first["n"] == 700 and pinned == [700 // 64]  # one piece opened, found by bisection


def test_transforms_keep_the_shards_and_count_rows_underneath(files):
    source = ParquetShardedSource(files)
    doubled = source.map(lambda r: {"n2": 2 * r["n"]})
    assert isinstance(doubled, TransformedShardedSource) and doubled.shard_names == source.shard_names
    assert [r["n2"] for r in doubled.open_shard_at_row(source.shard_names[1], 5)] == [10, 12]
    evens = source.filter(lambda r: r["n"] % 2 == 0)
    assert ns(evens.open_shard_at_row(source.shard_names[0], 95)) == [96, 98]

    class Twice:
        is_expand = True

        def __call__(self, row):
            return [row, row]

    assert ns(TransformedShardedSource(source, Twice()).open_shard(source.shard_names[1])) == [
        i for i in range(7) for _ in range(2)]
    assert len(doubled) == len(source) and doubled.num_shards() == 3
    with pytest.raises(NotYetSupportedError, match="source.source.dataset"):
        doubled.dataset()
    with pytest.raises(InvalidArgumentError, match="must be callable"):
        TransformedShardedSource(source, "upper")


def test_the_dataset_of_a_source_reads_the_same_files(files):
    source = ParquetShardedSource(files, columns=["n"])
    ds = source.dataset(batch_size=4)
    assert isinstance(ds, StreamingDataset) and len(ds) == len(source) and ds.column_names == ("n",)
    assert [s["n"] for s in ds] == [r["n"] for r in source]
    assert sorted(s["n"] for s in source.dataset(shuffle=True)) == sorted(r["n"] for r in source)


def test_a_saved_hugging_face_split_as_a_source(tmp_path):
    datasets = pytest.importorskip("datasets")
    d = datasets.Dataset.from_dict({"n": list(range(2500)), "word": [f"w{i}" for i in range(2500)]})
    datasets.DatasetDict({"train": d, "test": d.select(range(10))}).save_to_disk(str(tmp_path / "saved"),
                                                                                 num_shards={"train": 2, "test": 1})
    source = HuggingFaceShardedSource(str(tmp_path / "saved"), split="train")
    assert [os.path.basename(n) for n in source.shard_names] == ["data-00000-of-00002.arrow",
                                                                "data-00001-of-00002.arrow"]
    assert ns(source) == list(range(2500))
    assert ns(source.open_shard_at_row(source.shard_names[1], 1240)) == [2490 + k for k in range(10)]
    assert ns(HuggingFaceShardedSource(str(tmp_path / "saved"), "test")) == list(range(10))
    assert "HuggingFaceShardedSource" in repr(source)


def test_a_source_refuses_what_is_not_data_files(tmp_path):
    from shardstream import MDSWriter

    with MDSWriter(out=str(tmp_path / "mds"), columns={"n": "int"}) as w:
        w.write({"n": 1})
    with pytest.raises(InvalidArgumentError, match="reads data files"):
        FileShardedSource(str(tmp_path / "mds"))


# -- remote files: ranged reads, retries ---------------------------------------------------------

@pytest.fixture(scope="module")
def s3_server():
    pytest.importorskip("moto", reason="the loopback S3 server needs moto: pip install 'moto[server]'")
    from shardstream.testing.servers import S3Server

    with S3Server() as server:
        yield server


def _ranges(proxy, name: str) -> list[tuple[int, int]]:
    """The byte ranges (end exclusive) of every GET of ``name`` through ``proxy``."""
    out = []
    for path, header in proxy.faults.ranges:
        if path.endswith("/" + name):
            start, end = re.fullmatch(r"bytes=(\d+)-(\d+)", header).groups()
            out.append((int(start), int(end) + 1))
    return out


def test_resuming_at_row_550000_reads_no_byte_of_the_row_groups_before(s3_server, tmp_path):
    """100 row groups of 10,000 rows: ``open_shard_at_row(name, 550_000)`` fetches row group 55 by one ranged
    read, and no request reaches a byte of row groups 0..54."""
    rng = np.random.default_rng(0)
    n = np.arange(1_000_000, dtype=np.int64)
    table = pa.table({"n": n, "noise": rng.random(n.size)})  # incompressible: each row group ~160 KB
    local = tmp_path / "big"
    local.mkdir()
    pq.write_table(table, str(local / "big.parquet"), row_group_size=10_000, compression="none")
    meta = pq.read_metadata(str(local / "big.parquet"))
    groups = []  # (first byte, end) of each row group's column chunks, dictionary pages included
    for k in range(meta.num_row_groups):
        cols = [meta.row_group(k).column(j) for j in range(meta.num_columns)]
        starts = [min(c.data_page_offset, c.dictionary_page_offset or c.data_page_offset) for c in cols]
        groups.append((min(starts), max(a + c.total_compressed_size for a, c in zip(starts, cols))))
    assert len(groups) == 100
    remote = f"{s3_server.make_bucket(unique_name())}/big"
    s3_server.upload_dir(str(local), remote)
    with s3_server.proxy() as proxy:
        source = ParquetShardedSource(f"{remote}/big.parquet", storage_options=proxy.storage_options,
                                      cache_dir=str(tmp_path / "cache"))
        described = _ranges(proxy, "big.parquet")
        assert len(described) == 1 and described[0][0] > groups[99][0]  # the footer, from the end
        it = source.open_shard_at_row(source.shard_names[0], 550_000)
        first = next(it)
        assert first["n"] == 550_000 and first["noise"] == table.column("noise")[550_000].as_py()
        fetched = _ranges(proxy, "big.parquet")[1:]
        assert len(fetched) == 1 and fetched[0][0] >= groups[55][0] and fetched[0][1] <= groups[55][1]
        before = (groups[0][0], groups[54][1])
        assert not [r for r in _ranges(proxy, "big.parquet") if r[0] < before[1] and r[1] > before[0]]
        assert next(it)["n"] == 550_001
        it.close()


def test_transient_errors_are_retried_and_permanent_ones_name_the_file(tmp_path):
    pytest.importorskip("aiohttp", reason="fsspec's HTTP filesystem needs aiohttp")
    from shardstream.testing.servers import RangeHTTPServer

    root = tmp_path / "www"
    parquet(root / "a.parquet", 0, 40, 10)
    with RangeHTTPServer(root) as server:
        url = f"{server.url}/a.parquet"
        source = ParquetShardedSource(url, cache_dir=str(tmp_path / "cache"), retries=3)
        assert source.shard_names == [url]
        server.faults.add("a.parquet", "503", "reset", "500")
        assert ns(source.open_shard_at_row(url, 25)) == list(range(25, 40))
        assert [kind for kind, _ in server.faults.hits] == ["503", "reset", "500"]
        once = ParquetShardedSource(url, cache_dir=str(tmp_path / "cache0"), retries=0)
        server.faults.add("a.parquet", "503")
        with pytest.raises(DownloadError, match=r"a\.parquet.*failed 1 time\(s\): HTTP 503"):
            list(once.open_shard(url))
        fresh = ParquetShardedSource(url, cache_dir=str(tmp_path / "cache1"))
        server.faults.add("a.parquet", "404", "404")
        with pytest.raises(DownloadError, match=r"a\.parquet.*this is not retried"):
            list(fresh.open_shard_at_row(url, 30))
        assert server.faults.pending() == 1  # refused at the first answer
        with pytest.raises(DownloadError, match=r"a\.parquet does not exist"):  # also when describing
            ParquetShardedSource(url, cache_dir=str(tmp_path / "cache2"))
