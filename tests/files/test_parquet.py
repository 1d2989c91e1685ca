"""Parquet files through the whole engine: read in place and through the cache (a loopback S3 server),
projected, evicted, mixed with MDS, resumed on other worlds and through DataLoader workers; damaged,
changed and mismatched files refused with typed errors.

Row ``n`` of every dataset here is ``{"id": n, "tokens": TOKENS(n), "text": f"row {n}"}``, so a row
read from the wrong file, row group or offset shows up as wrong data.
"""

from __future__ import annotations

import os
from typing import Any, Sequence

import numpy as np
import pytest

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

from shardstream import BatchLoader, MDSWriter, Stream, StreamingDataset  # noqa: E402
from shardstream.errors import (  # noqa: E402
    CorruptShardError,
    FileChangedError,
    InvalidArgumentError,
    NoFilesError,
    SchemaMismatchError,
)
from shardstream.testing.resume import check_resumes_identically  # noqa: E402


def tokens(n: int) -> np.ndarray:
    return (np.arange(n % 7 + 1, dtype=np.int32) + n).astype(np.int32)


def table(lo: int, hi: int) -> Any:
    ids = list(range(lo, hi))
    return pa.table({"id": pa.array(ids, pa.int64()),
                     "tokens": pa.array([tokens(n) for n in ids], pa.list_(pa.int32())),
                     "text": pa.array([f"row {n}" for n in ids], pa.string())})


def write_files(dirname: str, sizes: Sequence[Sequence[int]], name: str = "part-{}.parquet") -> str:
    """One file per entry of ``sizes``, each entry the row counts of its row groups (0: an empty group)."""
    os.makedirs(dirname, exist_ok=True)
    n = 0
    for k, groups in enumerate(sizes):
        path = os.path.join(dirname, name.format(k))
        with pq.ParquetWriter(path, table(0, 0).schema) as writer:
            for g in groups:
                writer.write_table(table(n, n + g), row_group_size=max(g, 1))
                n += g
    return dirname


SIZES = [[30, 20], [25], [10, 10, 15]]  # 110 rows, 6 row groups
N = 110


def check_rows(samples, columns=("id", "tokens", "text")) -> list[int]:
    out = []
    for s in samples:
        assert tuple(s) == tuple(columns), s
        n = s["id"]
        assert type(n) is int
        if "tokens" in s:
            assert s["tokens"].dtype == np.int32 and np.array_equal(s["tokens"], tokens(n))
        if "text" in s:
            assert s["text"] == f"row {n}"
        out.append(n)
    return out


@pytest.fixture
def data(tmp_path) -> str:
    return write_files(str(tmp_path / "data"), SIZES)


def test_read_in_place_by_index_in_order_and_shuffled(data):
    before = sorted(os.listdir(data))
    ds = StreamingDataset(local=os.path.join(data, "*.parquet"), batch_size=5)
    assert len(ds) == N and ds.column_names == ("id", "tokens", "text") and len(ds.shards) == 6
    assert check_rows([ds[i] for i in range(N)]) == list(range(N))
    assert check_rows([ds[-1]]) == [N - 1]
    assert check_rows(ds) == list(range(N))
    shuffled = check_rows(StreamingDataset(local=data, batch_size=5, shuffle=True, shuffle_seed=3))
    assert sorted(shuffled) == list(range(N)) and shuffled != list(range(N))
    assert sorted(os.listdir(data)) == before  # read in place: nothing written beside the files


def test_format_from_names_a_list_a_file_and_format_given(data, tmp_path):
    files = [os.path.join(data, f"part-{k}.parquet") for k in (2, 0)]
    ds = StreamingDataset(local=files)
    assert check_rows(ds) == list(range(75, N)) + list(range(50))  # a list keeps its order
    assert len(StreamingDataset(local=files[1])) == 50
    renamed = str(tmp_path / "renamed")
    os.makedirs(renamed)
    os.link(files[1], os.path.join(renamed, "rows.bin"))
    with pytest.raises(InvalidArgumentError, match="give format="):
        StreamingDataset(local=os.path.join(renamed, "*.bin"))
    assert len(StreamingDataset(local=os.path.join(renamed, "*.bin"), format="parquet")) == 50


@pytest.mark.parametrize("shuffle", [False, True])
def test_column_batches_equal_the_stacked_samples(data, shuffle):
    settings = dict(local=data, batch_size=10, shuffle=shuffle, shuffle_seed=5)
    samples = list(StreamingDataset(**settings))
    batches = list(StreamingDataset(**settings).iterate_batches())
    assert len(batches) == N // 10
    loaded = list(BatchLoader(StreamingDataset(**settings)))
    assert [b["id"].tolist() for b in loaded] == [b["id"].tolist() for b in batches]
    for j, b in enumerate(batches):
        want = samples[j * 10:(j + 1) * 10]
        assert b["id"].tolist() == [s["id"] for s in want] and b["text"] == [s["text"] for s in want]
        assert [row.tolist() for row in b["tokens"].tolist()] == [s["tokens"].tolist() for s in want]


def test_columns_are_projected_and_pushed_down(data):
    ds = StreamingDataset(local=data, columns=["tokens", "id"])
    assert ds.column_names == ("tokens", "id")
    assert check_rows(ds, ("tokens", "id")) == list(range(N))
    only = StreamingDataset(local=data, columns=["id"], batch_size=4)
    assert [sorted(b) for b in only.iterate_batches()][:1] == [["id"]]
    with pytest.raises(InvalidArgumentError, match="column 'nope' is not in"):
        StreamingDataset(local=data, columns=["nope"])


# -- through the cache ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def s3_server():
    pytest.importorskip("moto", reason="the loopback S3 server needs moto: pip install 'moto[server]'")
    from shardstream.testing.servers import S3Server

    with S3Server() as server:
        yield server


def test_read_through_the_cache_from_s3_with_ranged_reads(s3_server, data, tmp_path):
    """Opening reads each footer once (one small ranged request per file), a second opening reads none,
    and each row group is one ranged request of its own bytes, never the whole file."""
    from shardstream.testing.servers import unique_name

    remote = f"{s3_server.make_bucket(unique_name())}/pq"
    s3_server.upload_dir(data, remote)
    cache = str(tmp_path / "cache")
    with s3_server.proxy() as proxy:
        ds = StreamingDataset(remote=f"{remote}/*.parquet", local=cache, storage_options=proxy.storage_options,
                              batch_size=5, shuffle=True)
        footer_gets = sum(n for path, n in proxy.faults.requests.items() if path.endswith(".parquet"))
        assert footer_gets == 3
        proxy.faults.clear()
        assert sorted(check_rows(ds)) == list(range(N))
        gets = {path.rsplit("/", 1)[1]: n for path, n in proxy.faults.requests.items() if path.endswith(".parquet")}
        assert gets == {"part-0.parquet": 2, "part-1.parquet": 1, "part-2.parquet": 3}  # one per row group
        served = proxy.faults.bytes_served
        assert served < sum(os.path.getsize(os.path.join(data, f)) for f in os.listdir(data))  # no footers again
        proxy.faults.clear()
        again = StreamingDataset(remote=f"{remote}/*.parquet", local=cache, storage_options=proxy.storage_options)
        assert check_rows(again) == list(range(N))
        assert not [p for p in proxy.faults.requests if p.endswith(".parquet")]  # listed and cached: no reads


def test_projection_fetches_fewer_bytes(data, tmp_path):
    full = StreamingDataset(remote=f"file://{data}/*.parquet", local=str(tmp_path / "a"))
    ids = StreamingDataset(remote=f"file://{data}/*.parquet", local=str(tmp_path / "b"), columns=["id"])
    assert check_rows(full) == list(range(N)) and check_rows(ids, ("id",)) == list(range(N))
    got = [ds.table.stores[0].fetcher.bytes for ds in (full, ids)]
    assert 0 < got[1] < got[0] / 2


def test_a_small_cache_limit_evicts_and_the_pass_stays_correct(tmp_path):
    data = write_files(str(tmp_path / "big"), [[40] * 4] * 3)
    cache = str(tmp_path / "cache")
    probe = StreamingDataset(remote=f"file://{data}", local=str(tmp_path / "probe"), format="parquet")
    biggest = max(probe.table.stores[0].footprint(i) for i in range(len(probe.shards)))
    ds = StreamingDataset(remote=f"file://{data}", local=cache, format="parquet", cache_limit=4 * biggest)
    usage = []
    seen = []
    for s in ds:
        seen.append(s)
        usage.append(ds.cache_usage)
    assert check_rows(seen) == list(range(480))
    assert max(usage) <= 5 * biggest and ds.table.stores[0].fetcher.files >= 12
    assert len([f for f in os.listdir(cache) if f.endswith(".piece")]) < 12


# -- with MDS, resumed ---------------------------------------------------------------------------

def test_mixed_with_an_mds_stream_and_resumed(data, tmp_path):
    mds = str(tmp_path / "mds")
    with MDSWriter(out=mds, columns={"word": "str", "n": "int"}, size_limit=200) as writer:
        for n in range(40):
            writer.write({"word": f"w{n}", "n": n})

    def make() -> StreamingDataset:
        return StreamingDataset(streams=[Stream(local=mds, proportion=1), Stream(local=data, proportion=3)],
                                epoch_size=80, batch_size=8, shuffle=True, shuffle_seed=2)

    def key(s: dict) -> tuple:
        if "word" in s:
            assert s["word"] == f"w{s['n']}"
            return "mds", s["n"]
        return "pq", check_rows([s])[0]

    ds = make()
    counts = ds.stream_counts().tolist()
    full = [key(s) for s in ds]
    assert len(full) == 80 and sum(1 for k in full if k[0] == "pq") == counts[1] > counts[0] > 0
    first = make()
    it = first.iterate()
    head = [key(next(it)) for _ in range(24)]
    state = first.state_dict()
    it.close()
    resumed = make()
    resumed.load_state_dict(state)
    assert head + [key(s) for s in resumed] == full


@pytest.mark.parametrize("where", ["local", "remote"])
def test_resumes_exactly_on_other_worlds(data, tmp_path, where):
    place = dict(local=data) if where == "local" else dict(remote=f"file://{data}/*.parquet",
                                                            local=str(tmp_path / "cache"))
    report = check_resumes_identically(lambda bs: StreamingDataset(batch_size=bs, shuffle=True, shuffle_seed=4,
                                                                   **place),
                                       4, [(1, 1, 0), (1, 2, 0), (2, 2, 2)], steps=[0, 1, 5])
    assert report.steps == 3 and report.samples_compared > 0


@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_dataloader_workers_resume_mid_epoch(data, context):
    pytest.importorskip("torch")
    from shardstream import StreamingDataLoader

    def loader() -> Any:
        return StreamingDataLoader(StreamingDataset(local=data, batch_size=5, shuffle=True, shuffle_seed=6,
                                                    columns=["id", "tokens"]),
                                   batch_size=5, num_workers=2, multiprocessing_context=context)

    full = check_rows(StreamingDataset(local=data, batch_size=5, shuffle=True, shuffle_seed=6,
                                       columns=["id", "tokens"]), ("id", "tokens"))
    first = loader()
    head = []
    for j, batch in enumerate(first):
        head += batch["id"].tolist()
        if j == 3:
            break
    state = first.state_dict()
    resumed = loader()
    resumed.load_state_dict(state)
    assert head + [i for b in resumed for i in b["id"].tolist()] == full


# -- bad input -----------------------------------------------------------------------------------

def test_missing_and_empty_inputs_are_refused(tmp_path):
    with pytest.raises(NoFilesError, match="matches no file"):
        StreamingDataset(local=str(tmp_path / "*.parquet"))
    with pytest.raises(NoFilesError, match="does not exist"):
        StreamingDataset(local=[str(tmp_path / "nope.parquet")])
    os.makedirs(tmp_path / "empty")
    (tmp_path / "empty" / "_SUCCESS").write_text("")
    with pytest.raises(NoFilesError, match="holds no data files"):
        StreamingDataset(local=str(tmp_path / "empty"), format="parquet")


def test_a_schema_that_differs_names_the_file_and_the_column(data):
    pq.write_table(pa.table({"id": pa.array([1], pa.int32()), "tokens": pa.array([[1]], pa.list_(pa.int32())),
                             "text": ["x"]}), os.path.join(data, "part-9.parquet"))
    with pytest.raises(SchemaMismatchError, match=r"column 'id' is int32 in part-9.parquet but int64 in part-0"):
        StreamingDataset(local=data)
    assert len(StreamingDataset(local=data, columns=["text"])) == N + 1  # the shared columns still read


@pytest.mark.parametrize("cut", [4, 200])
def test_a_truncated_file_is_refused(data, cut):
    path = os.path.join(data, "part-1.parquet")
    with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) - cut)
    with pytest.raises(CorruptShardError, match="part-1.parquet"):
        StreamingDataset(local=data)


def test_a_file_rewritten_in_place_is_refused_then_listed_again(data):
    ds = StreamingDataset(local=data)
    assert check_rows([ds[0]]) == [0]
    path = os.path.join(data, "part-1.parquet")
    pq.write_table(table(50, 75), path, row_group_size=5)  # same rows, other row groups
    os.utime(path, ns=(1, 1))
    with pytest.raises(FileChangedError, match="part-1.parquet changed after the dataset listed it"):
        ds[60]
    again = StreamingDataset(local=data)
    assert len(again.shards) == 2 + 5 + 3 and check_rows(again) == list(range(N))


def test_a_remote_file_rewritten_during_a_run_is_refused(data, tmp_path):
    ds = StreamingDataset(remote=f"file://{data}/*.parquet", local=str(tmp_path / "cache"))
    path = os.path.join(data, "part-2.parquet")
    pq.write_table(table(75, N), path)
    with pytest.raises(FileChangedError, match="part-2.parquet changed"):
        list(ds)


# -- any row-group sizes -------------------------------------------------------------------------

def _check_sizes(tmp: str, sizes: list, seed: int) -> None:
    data = write_files(tmp, sizes)
    total = sum(map(sum, sizes))
    if total == 0:
        with pytest.raises(NoFilesError, match="hold no rows"):
            StreamingDataset(local=data)
        return
    ds = StreamingDataset(local=data, batch_size=1)
    assert len(ds) == total and len(ds.shards) == sum(1 for g in sizes for n in g if n)
    assert check_rows(ds) == list(range(total))
    shuffled = StreamingDataset(local=data, batch_size=1, shuffle=True, shuffle_seed=seed)
    assert sorted(check_rows(shuffled)) == list(range(total))
    assert check_rows(ds[[total - 1, 0]]) == [total - 1, 0]


def test_row_group_sizes_including_empty_files_and_groups(tmp_path):
    hypothesis = pytest.importorskip("hypothesis")
    from hypothesis import strategies as st

    counter = iter(range(10**6))

    @hypothesis.settings(max_examples=25, deadline=None)
    @hypothesis.given(st.lists(st.lists(st.integers(0, 12), min_size=0, max_size=4), min_size=1, max_size=4),
                      st.integers(0, 100))
    def run(sizes: list, seed: int) -> None:
        _check_sizes(str(tmp_path / f"case{next(counter)}"), sizes, seed)

    run()



def test_transient_failures_are_retried_and_a_missing_file_named(s3_server, data, tmp_path):
    from shardstream.errors import DownloadError
    from shardstream.testing.servers import unique_name

    remote = f"{s3_server.make_bucket(unique_name())}/pq"
    s3_server.upload_dir(data, remote)
    with s3_server.proxy() as proxy:
        proxy.faults.add("part-1.parquet", "503", "reset")  # the footer read: retried
        proxy.faults.add("part-2.parquet", "500")
        ds = StreamingDataset(remote=f"{remote}/*.parquet", local=str(tmp_path / "cache"),
                              storage_options=proxy.storage_options, download_retry=3)
        proxy.faults.add("part-0.parquet", "reset", "503")  # its row groups' ranged reads: retried
        assert check_rows(ds) == list(range(N))
        assert sorted(kind for kind, _ in proxy.faults.hits) == ["500", "503", "503", "reset", "reset"]
        s3_server.filesystem().rm(f"{remote}/part-1.parquet")
        gone = StreamingDataset(remote=f"{remote}/*.parquet", local=str(tmp_path / "cache2"),
                                storage_options=proxy.storage_options)
        assert len(gone) == N - 25  # listed again: the file is no longer there
        late = StreamingDataset(remote=f"{remote}/*.parquet", local=str(tmp_path / "cache3"),
                                storage_options=proxy.storage_options)
        s3_server.filesystem().rm(f"{remote}/part-2.parquet")
        with pytest.raises(DownloadError, match="part-2.parquet"):
            list(late)
