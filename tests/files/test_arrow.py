"""Arrow IPC files (file and stream format) as shards: one piece per record batch, found from message
headers alone, read in place, through the S3 cache, compressed, mixed and resumed.

Row ``n`` of every table here is ``{"n": n, "vec": [n, n + 0.5], "word": f"w{n}", ...}``, so a row read
from the wrong batch or offset shows up as wrong data.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

pa = pytest.importorskip("pyarrow")
ipc = pytest.importorskip("pyarrow.ipc")

from shardstream import StreamingDataset  # noqa: E402
from shardstream.errors import (  # noqa: E402
    CorruptShardError,
    FileChangedError,
    InvalidArgumentError,
    SchemaMismatchError,
    ShardNotFoundError,
    UnsupportedFormatError,
)
from shardstream.format.arrowipc import ARROW_FORMAT, RECORD_BATCH, walk  # noqa: E402
from shardstream.format.batch import Ragged  # noqa: E402
from shardstream.format.files import Piece  # noqa: E402
from shardstream.testing.resume import check_resumes_identically  # noqa: E402

N = 1000


def table(lo: int = 0, hi: int = N):
    n = np.arange(lo, hi)
    return pa.table({
        "n": pa.array(n, pa.int64()),
        "vec": pa.array([[float(i), i + 0.5] for i in n], pa.list_(pa.float64())),
        "fixed": pa.array([[i, -i, 2 * i] for i in n], pa.list_(pa.int32(), 3)),
        "word": pa.array([f"w{i}" for i in n]),
        "blob": pa.array([bytes([i % 256]) * 3 for i in n], pa.binary()),
        "pair": pa.array([{"a": int(i), "b": f"b{i}"} for i in n]),
        "maybe": pa.array([None if i % 7 == 0 else float(i) for i in n]),
    })


def write(path: str, t, kind: str = "file", chunk: int = 128, **options) -> str:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    opts = ipc.IpcWriteOptions(**options) if options else None
    new = ipc.new_file if kind == "file" else ipc.new_stream
    with new(path, t.schema, options=opts) as w:
        w.write_table(t, max_chunksize=chunk)
    return path


def check_row(s: dict) -> int:
    n = s["n"]
    assert type(n) is int
    assert s["vec"].dtype == np.float64 and s["vec"].tolist() == [n, n + 0.5]
    assert s["fixed"].tolist() == [n, -n, 2 * n]
    assert s["word"] == f"w{n}" and s["blob"] == bytes([n % 256]) * 3
    assert s["pair"] == {"a": n, "b": f"b{n}"}
    assert s["maybe"] == (None if n % 7 == 0 else float(n))
    return n


class LocalRanges:
    """A local file read the way the storage layer gives files to ``describe``, recording each read."""

    def __init__(self, path: str) -> None:
        self.name = os.path.basename(path)
        self.url = self.path = path
        self.size = os.path.getsize(path)
        self.reads: list[tuple[int, int]] = []

    def read(self, offset: int, length: int) -> bytes:
        self.reads.append((offset, length))
        with open(self.path, "rb") as f:
            return os.pread(f.fileno(), length, offset)

    def open(self):
        return open(self.path, "rb")


# -- describing ----------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["file", "stream"])
def test_pieces_are_the_record_batches_and_their_message_bytes(tmp_path, kind):
    path = write(str(tmp_path / "t.arrow"), table(), kind, chunk=300)
    source = LocalRanges(path)
    pieces, head = ARROW_FORMAT.describe(source, None)
    with pa.memory_map(path) as f:
        reader = ipc.open_file(f) if kind == "file" else ipc.open_stream(f)
        batches = [reader.get_batch(i) for i in range(reader.num_record_batches)] if kind == "file" else list(reader)
    assert [p.samples for p in pieces] == [b.num_rows for b in batches] == [300, 300, 300, 100]
    assert [p.first for p in pieces] == [0, 300, 600, 900] and [p.part for p in pieces] == [0, 1, 2, 3]
    assert pieces[0].column_names == ("n", "vec", "fixed", "word", "blob", "pair", "maybe")
    data = open(path, "rb").read()
    for p, batch in zip(pieces, batches):  # a piece's bytes are one whole message: decodable with the schema alone
        message = ipc.read_message(pa.py_buffer(data[p.start:p.stop]))
        assert ipc.read_record_batch(message, ipc.read_schema(pa.py_buffer(head))).equals(batch)
    assert ipc.read_schema(pa.py_buffer(head)).equals(table().schema)
    assert all(a.stop <= b.start for a, b in zip(pieces, pieces[1:]))


def test_describing_large_batches_reads_headers_not_bodies(tmp_path):
    big = pa.table({"n": np.arange(400_000, dtype=np.int64), "x": np.random.default_rng(0).random(400_000)})
    path = write(str(tmp_path / "big.arrow"), big, "stream", chunk=50_000)  # 8 batches of 800 KB
    source = LocalRanges(path)
    pieces, _ = ARROW_FORMAT.describe(source, None)
    assert [p.samples for p in pieces] == [50_000] * 8
    assert len(source.reads) <= 10 and sum(n for _, n in source.reads) < 2 * (1 << 16) + 8 * 4096
    assert source.reads[0] == (0, 1 << 16)  # the schema, and the first batch's header
    bodies = [(p.start + 4096, p.stop) for p in pieces]  # past each message's header and a few KB
    assert not [r for r in source.reads[1:] for b in bodies if r[0] < b[1] and r[0] + r[1] > b[0]]


def test_describing_a_remote_file_reads_small_batches_through_and_skips_large_bodies(tmp_path):
    """Remote, a request costs what a few MiB do: 300 batches of 8 KB are read in one or two requests,
    while the bodies of 2 MiB batches are still skipped."""
    small = pa.table({"n": np.arange(300_000, dtype=np.int64)})
    path = write(str(tmp_path / "small.arrow"), small, "stream", chunk=1000)
    source = LocalRanges(path)
    source.url = "s3://bucket/small.arrow"  # described as a remote file is
    pieces, _ = ARROW_FORMAT.describe(source, None)
    assert len(pieces) == 300 and len(source.reads) <= 2
    large = pa.table({"x": np.random.default_rng(1).random(8 * 262_144)})
    path = write(str(tmp_path / "large.arrow"), large, "file", chunk=262_144)  # 8 batches of 2 MiB
    source = LocalRanges(path)
    source.url = "s3://bucket/large.arrow"
    pieces, _ = ARROW_FORMAT.describe(source, None)
    assert len(pieces) == 8 and len(source.reads) <= 10
    bodies = [(p.start + 4096, p.stop) for p in pieces]
    assert not [r for r in source.reads[1:] for b in bodies if r[0] < b[1] and r[0] + r[1] > b[0]]


def test_walk_agrees_with_pyarrow_on_messages_and_rows(tmp_path):
    t = table(0, 10)
    dict_t = t.append_column("tag", pa.array(["x", "y"] * 5).dictionary_encode())
    path = write(str(tmp_path / "d.arrow"), dict_t, "stream", chunk=4)
    with open(path, "rb") as f:
        data = f.read()
    messages = walk(lambda o, n: data[o:o + n], len(data), path)
    assert [m.kind for m in messages] == [1, 2, 3, 3, 3]  # schema, one dictionary, three batches
    assert [m.rows for m in messages if m.kind == RECORD_BATCH] == [4, 4, 2]
    ds = StreamingDataset(local=path)
    assert [s["tag"] for s in ds] == ["x", "y"] * 5 and [check_row(s) for s in ds] == list(range(10))


# -- reading in place ----------------------------------------------------------------------------

@pytest.mark.parametrize("kind,suffix", [("file", ".arrow"), ("stream", ".arrow"), ("file", ".feather"),
                                         ("stream", ".ipc")])
def test_read_in_place_by_index_in_order_and_as_batches(tmp_path, kind, suffix):
    write(str(tmp_path / "ds" / f"a{suffix}"), table(0, 600), kind, chunk=128)
    write(str(tmp_path / "ds" / f"b{suffix}"), table(600, N), kind, chunk=100)
    before = sorted(os.listdir(tmp_path / "ds"))
    ds = StreamingDataset(local=str(tmp_path / "ds"), batch_size=10)
    assert len(ds) == N and len(ds.shards) == 5 + 4
    assert [check_row(ds[i]) for i in (0, 127, 128, 599, 600, N - 1)] == [0, 127, 128, 599, 600, N - 1]
    samples = list(ds)
    assert [check_row(s) for s in samples] == list(range(N))
    with pytest.raises(InvalidArgumentError, match="column 'maybe' has null values"):
        list(ds.iterate_batches())
    batches = list(ds.iterate_batches(columns=["n", "vec", "fixed", "word", "pair"]))
    assert np.concatenate([b["n"] for b in batches]).tolist() == list(range(N))
    first = batches[0]
    assert isinstance(first["vec"], Ragged) and first["fixed"].shape == (10, 3)
    assert first["word"] == [f"w{i}" for i in range(10)] and first["pair"][3] == {"a": 3, "b": "b3"}
    assert sorted(os.listdir(tmp_path / "ds")) == before  # in place: nothing written beside the files


def test_columns_select_and_a_missing_column_is_refused(tmp_path):
    path = write(str(tmp_path / "t.arrow"), table(), "stream")
    ds = StreamingDataset(local=path, columns=["word", "n"])
    assert ds.column_names == ("word", "n") and ds[5] == {"word": "w5", "n": 5}
    with pytest.raises(InvalidArgumentError, match=r"column 'nope' is not in .*t\.arrow"):
        StreamingDataset(local=path, columns=["nope"])


def test_saved_with_datasets_save_to_disk(tmp_path):
    datasets = pytest.importorskip("datasets")
    rows = {"text": [f"t{i}" for i in range(2500)], "ids": [[i, i + 1] for i in range(2500)],
            "label": [i % 3 for i in range(2500)]}
    datasets.Dataset.from_dict(rows).save_to_disk(str(tmp_path / "saved"), num_shards=3)
    files = sorted(str(p) for p in (tmp_path / "saved").glob("data-*.arrow"))
    ds = StreamingDataset(local=files)
    assert len(ds) == 2500 and len(ds.shards) == 3  # 1000-row writer batches, one piece each
    got = list(ds)
    assert [s["text"] for s in got] == rows["text"] and [s["label"] for s in got] == rows["label"]
    assert all(s["ids"].tolist() == want for s, want in zip(got, rows["ids"]))


def test_ipc_body_compression_and_dictionary_deltas(tmp_path):
    path = write(str(tmp_path / "z.arrow"), table(), "file", compression="zstd")
    assert [check_row(s) for s in StreamingDataset(local=path)] == list(range(N))
    schema = pa.schema([("n", pa.int64()), ("tag", pa.dictionary(pa.int32(), pa.string()))])
    deltas = str(tmp_path / "deltas" / "d.arrow")
    os.makedirs(os.path.dirname(deltas))
    with ipc.new_stream(deltas, schema, options=ipc.IpcWriteOptions(emit_dictionary_deltas=True)) as w:
        for k in range(3):  # each batch's dictionary extends the one before: sent as a delta after a batch
            words = pa.array([f"t{j}" for j in range(k + 1)])
            tags = pa.DictionaryArray.from_arrays(pa.array([0, k], pa.int32()), words)
            w.write_batch(pa.record_batch([pa.array([2 * k, 2 * k + 1]), tags], schema=schema))
    pieces, _ = ARROW_FORMAT.describe(LocalRanges(deltas), None)
    assert [(p.start, p.samples) for p in pieces] == [(-1, 6)]  # read whole: a batch needs the dictionaries before it
    got = list(StreamingDataset(local=deltas))
    assert [s["n"] for s in got] == list(range(6)) and [s["tag"] for s in got] == ["t0", "t0", "t0", "t1", "t0", "t2"]


@pytest.mark.parametrize("codec", ["zst", "gz"])
def test_a_compressed_file_is_one_piece_decompressed_once(tmp_path, codec):
    raw = write(str(tmp_path / "raw" / "t.arrow"), table(), "file")
    data = open(raw, "rb").read()
    if codec == "zst":
        import zstandard

        packed = zstandard.ZstdCompressor().compress(data)
    else:
        import gzip

        packed = gzip.compress(data)
    os.makedirs(tmp_path / "c")
    with open(tmp_path / "c" / f"t.arrow.{codec}", "wb") as f:
        f.write(packed)
    ds = StreamingDataset(local=str(tmp_path / "c"))
    assert len(ds.shards) == 1 and ds.shards[0].plain_bytes == len(data)
    assert [check_row(s) for s in ds] == list(range(N))


# -- bad files -----------------------------------------------------------------------------------

@pytest.mark.filterwarnings("ignore:Feather V1 files are deprecated:DeprecationWarning")
def test_damaged_and_unsupported_files_are_refused_naming_them(tmp_path):
    path = write(str(tmp_path / "t" / "t.arrow"), table(), "stream")
    data = open(path, "rb").read()
    with open(path, "wb") as f:
        f.write(data[:len(data) // 2])
    with pytest.raises(CorruptShardError, match=r"t\.arrow.*past the end of the stream.*truncated"):
        StreamingDataset(local=path)
    filed = write(str(tmp_path / "f" / "f.arrow"), table(), "file")
    data = open(filed, "rb").read()
    with open(filed, "wb") as f:
        f.write(data[:-3])
    with pytest.raises(CorruptShardError, match=r"f\.arrow starts like an Arrow IPC file but does not end"):
        StreamingDataset(local=filed)
    junk = tmp_path / "j" / "junk.arrow"
    junk.parent.mkdir()
    junk.write_bytes(b"\x00" * 3 + b"not arrow at all" * 10)
    with pytest.raises(CorruptShardError, match=r"junk\.arrow"):
        StreamingDataset(local=str(junk))
    from pyarrow import feather

    v1 = str(tmp_path / "v1" / "old.feather")
    os.makedirs(os.path.dirname(v1))
    feather.write_feather(table(0, 10).select(["n", "word"]), v1, version=1)
    with pytest.raises(UnsupportedFormatError, match=r"old\.feather is a Feather V1 file.*write_feather"):
        StreamingDataset(local=v1)


def test_files_that_disagree_or_change_are_refused(tmp_path):
    write(str(tmp_path / "ds" / "a.arrow"), table(0, 10), "stream")
    write(str(tmp_path / "ds" / "b.arrow"), table(10, 20).drop_columns(["blob"]), "stream")
    with pytest.raises(SchemaMismatchError, match=r"b\.arrow has no column 'blob'"):
        StreamingDataset(local=str(tmp_path / "ds"))
    path = write(str(tmp_path / "c" / "c.arrow"), table(0, 10), "stream")
    ds = StreamingDataset(local=path)
    write(path, table(0, 20), "stream")
    with pytest.raises(FileChangedError, match=r"c\.arrow changed after the dataset listed it"):
        ds[3]


def test_a_cached_piece_whose_bytes_are_wrong_is_refused(tmp_path):
    path = write(str(tmp_path / "t.arrow"), table(0, 20), "stream", chunk=10)
    pieces, head = ARROW_FORMAT.describe(LocalRanges(path), None)
    cached = Piece(**{**pieces[1].__dict__, "cached": True})
    short = tmp_path / "piece"
    short.write_bytes(open(path, "rb").read()[cached.start:cached.stop - 8])
    with pytest.raises(CorruptShardError, match=r"record batch 1 of t\.arrow"):
        ARROW_FORMAT.open_piece(str(short), cached, lambda: head)
    (tmp_path / "other").mkdir()
    whole = tmp_path / "other" / "piece"
    whole.write_bytes(open(path, "rb").read()[cached.start:cached.stop])
    with pytest.raises(ShardNotFoundError, match=r"the schema of t\.arrow is missing from the cache"):
        ARROW_FORMAT.open_piece(str(whole), cached, lambda: b"")
    assert [check_row(s) for s in ARROW_FORMAT.open_piece(str(whole), cached, lambda: head).iter_range()] == list(
        range(10, 20))


# -- through the cache ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def s3_server():
    pytest.importorskip("moto", reason="the loopback S3 server needs moto: pip install 'moto[server]'")
    from shardstream.testing.servers import S3Server

    with S3Server() as server:
        yield server


def test_read_through_the_cache_from_s3_by_ranges(s3_server, tmp_path):
    from shardstream.testing.servers import unique_name

    local = tmp_path / "src"
    write(str(local / "a.arrow"), table(0, 600), "file", chunk=200)
    write(str(local / "b.arrow"), table(600, N), "stream", chunk=200)
    remote = f"{s3_server.make_bucket(unique_name())}/arrow"
    s3_server.upload_dir(str(local), remote)
    cache = str(tmp_path / "cache")
    with s3_server.proxy() as proxy:
        ds = StreamingDataset(remote=f"{remote}/*.arrow", local=cache, storage_options=proxy.storage_options)
        assert len(ds) == N and len(ds.shards) == 5
        proxy.faults.clear()
        assert check_row(ds[850]) == 850  # one ranged read of b.arrow's last batch, nothing else
        ranges = [(path.rsplit("/", 1)[-1], r) for path, r in proxy.faults.ranges if path.endswith(".arrow")]
        piece = ds.shards[4]
        assert ranges == [("b.arrow", f"bytes={piece.start}-{piece.stop - 1}")]
        assert [check_row(s) for s in ds] == list(range(N))
    names = sorted(n for n in os.listdir(cache) if n.endswith(".piece"))
    assert names == [f"a.arrow.{k:05d}.piece" for k in range(3)] + [f"b.arrow.{k:05d}.piece" for k in range(2)]
    again = StreamingDataset(remote=f"{remote}/*.arrow", local=cache, storage_options=s3_server.storage_options,
                             shuffle=True)
    assert sorted(check_row(s) for s in again) == list(range(N))
    assert again.table.stores[0].fetcher.files == 0


def test_eviction_mixing_and_exact_resume(tmp_path):
    src = tmp_path / "src"
    write(str(src / "a.arrow"), table(0, 480), "stream", chunk=40)
    write(str(src / "b.arrow"), table(480, 960), "file", chunk=40)
    remote = f"file://{src}"
    biggest = max(p.stop - p.start for p in StreamingDataset(local=str(src)).shards)
    ds = StreamingDataset(remote=remote + "/", local=str(tmp_path / "cache"), cache_limit=6 * biggest, format="arrow")
    assert [check_row(s) for s in ds] == list(range(960)) and ds.cache_usage <= 6 * biggest + 4096
    assert len([n for n in os.listdir(tmp_path / "cache") if n.endswith(".piece")]) < len(ds.shards)
    from shardstream import MDSWriter, Stream

    mds = str(tmp_path / "mds")
    with MDSWriter(out=mds, columns={"w": "str"}) as writer:
        for k in range(40):
            writer.write({"w": f"m{k}"})
    mixed = StreamingDataset(streams=[Stream(local=mds, proportion=1), Stream(local=str(src), proportion=3)],
                             epoch_size=160, batch_size=8, shuffle=True)
    got = list(mixed)
    assert sum("w" in s for s in got) == mixed.stream_counts().tolist()[0] > 0
    assert all(check_row(s) >= 0 for s in got if "w" not in s)
    for place in (dict(local=str(src)), dict(remote=remote, local=str(tmp_path / "cache2"))):
        report = check_resumes_identically(
            lambda bs: StreamingDataset(batch_size=bs, shuffle=True, shuffle_seed=3, format="arrow", **place),
            16, [(1, 1, 0), (1, 2, 2)], steps=[0, 7, 30])
        assert report.samples_compared > 0


@pytest.mark.filterwarnings("ignore:The given NumPy array is not writable:UserWarning")
def test_dataloader_workers_read_the_pieces(tmp_path):
    pytest.importorskip("torch")
    from shardstream import StreamingDataLoader

    write(str(tmp_path / "a.arrow"), table(0, 320), "stream", chunk=40)
    ds = StreamingDataset(local=str(tmp_path / "a.arrow"), batch_size=8, shuffle=True, columns=["n", "word"])
    loader = StreamingDataLoader(ds, batch_size=8, num_workers=2)
    seen = [n for batch in loader for n in batch["n"].tolist()]
    assert sorted(seen) == list(range(320))
