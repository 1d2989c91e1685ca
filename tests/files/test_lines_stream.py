"""JSON Lines files through the whole engine: compressed files through a cache of their own, remote files
from a loopback S3 server through the cache (ranged reads of pieces, a rewritten file refused), eviction,
a mixture with an MDS stream, and exact resumption on other worlds and through DataLoader workers."""

from __future__ import annotations

import os
import time
from collections import Counter
from typing import Any

import pytest

from shardstream import MDSWriter, Stream, StreamingDataset
from shardstream.errors import CorruptShardError, FileChangedError
from shardstream.format import lineindex
from shardstream.testing.resume import check_resumes_identically

from .textdata import by_id, rows, sample, write_jsonl

N = 48  # rows: whole global steps of 8 and of 16
BS = 8


@pytest.fixture
def small_pieces(monkeypatch):
    monkeypatch.setattr(lineindex, "PIECE_BYTES", 700)
    monkeypatch.setattr(lineindex, "BLOCK", 512)


@pytest.fixture
def jsonl_dir(tmp_path, small_pieces) -> str:
    """Rows 0..47 in three files: plain (several pieces), gzip and zstd (one piece each)."""
    d = str(tmp_path / "data")
    write_jsonl(os.path.join(d, "a.jsonl"), rows(24, 0))
    write_jsonl(os.path.join(d, "b.jsonl.gz"), rows(12, 24), codec="gzip")
    write_jsonl(os.path.join(d, "c.jsonl.zst"), rows(12, 36), codec="zstd")
    return d


@pytest.fixture(scope="module")
def s3_server():
    pytest.importorskip("moto", reason="the loopback S3 server needs moto: pip install 'moto[server]'")
    from shardstream.testing.servers import S3Server

    with S3Server() as server:
        yield server


def url(path: str) -> str:
    return f"file://{path}"


def data_files(cache: str) -> set[str]:
    return {n for n in os.listdir(cache) if not n.startswith(".")}


def test_local_compressed_files_are_read_through_a_cache_of_their_own(jsonl_dir, assert_same_sample):
    before = sorted(os.listdir(jsonl_dir))
    ds = StreamingDataset(local=jsonl_dir, batch_size=BS)
    assert len(ds) == N and all(p.cached for p in ds.shards)
    packed = [p for p in ds.shards if p.start < 0]
    assert sorted(p.file for p in packed) == ["b.jsonl.gz", "c.jsonl.zst"]
    assert all(p.plain_bytes > p.file_bytes for p in packed)  # the decompressed size, counted while describing
    for got, want in zip(ds, rows(N)):
        assert_same_sample(got, sample(want))
    assert sorted(os.listdir(jsonl_dir)) == before  # nothing written beside the data
    one = StreamingDataset(local=os.path.join(jsonl_dir, "c.jsonl.zst"))
    assert by_id(one) == list(range(36, 48))


def test_a_damaged_compressed_file_is_refused_naming_it(tmp_path):
    path = write_jsonl(str(tmp_path / "d" / "a.jsonl.gz"), rows(200), codec="gzip")
    with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) // 2)
    with pytest.raises(CorruptShardError, match=r"a\.jsonl\.gz cannot be read as gzip \(EOFError"):
        StreamingDataset(local=path)


def test_remote_files_through_the_cache_from_s3(s3_server, jsonl_dir, tmp_path, assert_same_sample):
    """Each piece of a plain file is one ranged read into a file of its own; a compressed file is fetched
    whole and decompressed once; a second dataset on the same cache reads no data file again."""
    from shardstream.testing.servers import unique_name

    remote = f"{s3_server.make_bucket(unique_name())}/jsonl"
    s3_server.upload_dir(jsonl_dir, remote)
    cache = str(tmp_path / "cache")
    with s3_server.proxy() as proxy:
        ds = StreamingDataset(remote=remote, local=cache, storage_options=proxy.storage_options, batch_size=BS)
        pieces_of_a = [p for p in ds.shards if p.file == "a.jsonl"]
        assert len(pieces_of_a) > 2 and len(ds) == N
        for got, want in zip(ds, rows(N)):
            assert_same_sample(got, sample(want))
        names = data_files(cache)
        assert {n for n in names if n.endswith(".piece")} == {f"a.jsonl.{p.part:05d}.piece" for p in pieces_of_a}
        assert {"b.jsonl.plain", "c.jsonl.plain"} <= names
        proxy.faults.clear()
        again = StreamingDataset(remote=remote, local=cache, storage_options=proxy.storage_options, shuffle=True)
        assert sorted(by_id(again)) == list(range(N))
        assert not [p for p in proxy.faults.requests if p.endswith((".jsonl", ".gz", ".zst"))]


def test_a_remote_file_rewritten_after_it_was_listed_is_refused(s3_server, tmp_path, small_pieces):
    from shardstream.testing.servers import unique_name

    d = str(tmp_path / "data")
    write_jsonl(os.path.join(d, "a.jsonl"), rows(24))
    remote = f"{s3_server.make_bucket(unique_name())}/w"
    s3_server.upload_dir(d, remote)
    ds = StreamingDataset(remote=remote, local=str(tmp_path / "cache"), storage_options=s3_server.storage_options)
    write_jsonl(os.path.join(d, "a.jsonl"), rows(24, 1000))
    s3_server.filesystem().put_file(os.path.join(d, "a.jsonl"), f"{remote}/a.jsonl")
    with pytest.raises(FileChangedError, match=r"a\.jsonl changed after the dataset listed it"):
        list(ds)


def test_a_local_file_rewritten_while_read_through_a_cache_is_refused(tmp_path, small_pieces):
    d = str(tmp_path / "data")
    path = write_jsonl(os.path.join(d, "a.jsonl"), rows(24))
    ds = StreamingDataset(remote=url(d), local=str(tmp_path / "cache"))
    time.sleep(0.01)
    write_jsonl(path, rows(24, 1000))
    with pytest.raises(FileChangedError, match=r"a\.jsonl changed after the dataset listed it"):
        list(ds)


def test_a_small_cache_limit_evicts_and_the_pass_stays_exact(tmp_path, small_pieces):
    d = str(tmp_path / "data")
    write_jsonl(os.path.join(d, "a.jsonl"), rows(6 * N))
    probe = StreamingDataset(remote=url(d), local=str(tmp_path / "cache"))
    biggest = max(p.stop - p.start for p in probe.shards)
    limit = 8 * biggest
    assert sum(p.stop - p.start for p in probe.shards) > 3 * limit
    ds = StreamingDataset(remote=url(d), local=str(tmp_path / "small"), cache_limit=limit)
    seen, usage = [], []
    for s in ds:
        seen.append(s["id"])
        usage.append(ds.cache_usage)
    assert seen == list(range(6 * N)) and max(usage) <= limit + biggest
    assert len([n for n in os.listdir(str(tmp_path / "small")) if n.endswith(".piece")]) < len(ds.shards)


def test_mixed_with_an_mds_stream_by_proportion(jsonl_dir, tmp_path):
    mds = str(tmp_path / "mds")
    with MDSWriter(out=mds, columns={"word": "str", "n": "int"}, size_limit=200) as writer:
        for n in range(30):
            writer.write({"word": f"w{n}", "n": n})

    def make() -> StreamingDataset:
        streams = [Stream(local=mds, proportion=1), Stream(local=jsonl_dir, proportion=3)]
        return StreamingDataset(streams=streams, epoch_size=64, batch_size=BS, shuffle=True, shuffle_seed=2)

    def key(s: dict) -> tuple[str, int]:
        if "word" in s:
            assert s["word"] == f"w{s['n']}"
            return "mds", s["n"]
        assert s["text"] == rows(1, s["id"])[0]["text"]
        return "jsonl", s["id"]

    ds = make()
    counts = ds.stream_counts().tolist()
    assert sum(counts) == 64 and counts[1] > counts[0] > 0
    full = [key(s) for s in ds]
    assert Counter(tag for tag, _ in full) == {"mds": counts[0], "jsonl": counts[1]}
    assert len({k for k in full if k[0] == "jsonl"}) == N  # every row of the files, then some again
    first = make()
    it = first.iterate()
    head = [key(next(it)) for _ in range(3 * BS)]
    state = first.state_dict()
    it.close()
    resumed = make()
    resumed.load_state_dict(state)
    assert head + [key(s) for s in resumed] == full


@pytest.mark.parametrize("where", ["local", "remote", "skip"])
def test_resumes_exactly_on_other_worlds(tmp_path, small_pieces, where):
    d = str(tmp_path / "data")
    items: list[Any] = rows(N + 3)
    items[5], items[30], items[41] = "not json", "[1]", '{"id": 41, "text": '  # skipped: 48 rows remain
    write_jsonl(os.path.join(d, "a.jsonl"), items[:30])
    write_jsonl(os.path.join(d, "b.jsonl"), items[30:])
    place: dict = dict(local=d) if where != "remote" else dict(remote=url(d), local=str(tmp_path / "cache"))
    options: dict = dict(on_bad_rows="skip")
    with pytest.warns(UserWarning, match="left out"):
        assert len(StreamingDataset(**place, **options)) == N
    report = check_resumes_identically(
        lambda bs: StreamingDataset(batch_size=bs, shuffle=True, shuffle_seed=4, **place, **options),
        8, [(1, 1, 0), (1, 2, 0), (2, 2, 2), (1, 4, 1)], steps=[0, 1, 3, 5])
    assert report.steps == 4 and report.samples_compared > 0


@pytest.mark.filterwarnings("ignore:The given NumPy array is not writable:UserWarning")
@pytest.mark.parametrize("where,context", [("local", "fork"), ("remote", "fork"), ("local", "spawn")])
def test_dataloader_workers_resume_mid_epoch(jsonl_dir, tmp_path, where, context):
    pytest.importorskip("torch")
    from shardstream import StreamingDataLoader

    place = dict(local=jsonl_dir) if where == "local" else dict(remote=url(jsonl_dir), local=str(tmp_path / "c"))

    def loader() -> Any:
        ds = StreamingDataset(shuffle=True, shuffle_seed=6, batch_size=BS, columns=["id", "tokens", "score"], **place)
        return StreamingDataLoader(ds, batch_size=BS, num_workers=2, multiprocessing_context=context)

    full = by_id(StreamingDataset(shuffle=True, shuffle_seed=6, batch_size=BS, **place))
    first = loader()
    head: list[int] = []
    for j, batch in enumerate(first):
        head += batch["id"].tolist()
        assert batch["score"].tolist() == [i / 4 for i in batch["id"].tolist()]
        if j == 2:
            break
    state = first.state_dict()
    assert state["sample_in_epoch"] == 3 * BS
    resumed = loader()
    resumed.load_state_dict(state)
    assert head + [i for batch in resumed for i in batch["id"].tolist()] == full
