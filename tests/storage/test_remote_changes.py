"""A remote dataset whose index records no digests, rewritten while a run reads it: the run
raises RemoteChangedError before it would yield a sample of the new files, and the next run
reads the new version."""

from __future__ import annotations

import os
import shutil
import time

import numpy as np
import pytest

from shardstream import StreamingDataset
from shardstream.errors import RemoteChangedError
from shardstream.storage import versions
from shardstream.testing import write_dataset

N = 300


def _payload(i: int, version: int) -> bytes:
    return np.random.default_rng(i + 1_000_000 * version).integers(0, 256, 16 + i % 5, dtype=np.uint8).tobytes()


def _version(version: int):
    """Version ``version`` of the dataset: the same shard sizes (and index) whatever the version."""
    return ({"id": i + 10_000 * version, "payload": _payload(i, version)} for i in range(N))


def _check(samples, version: int, new_from: int = 0) -> None:
    """Samples in order are those of ``version`` (of version 1 from sample ``new_from`` on, if given)."""
    for k, s in enumerate(samples):
        v = 1 if new_from and k >= new_from else version
        assert s["id"] == k + 10_000 * v and s["payload"] == _payload(k, v), f"sample {k} is wrong"


@pytest.fixture
def versions_dirs(tmp_path):
    columns = {"id": "int", "payload": "bytes"}
    old, new = (write_dataset(tmp_path / f"v{v}", columns, _version(v), size_limit=1 << 10, hashes=[]) for v in (0, 1))
    with open(os.path.join(old, "index.json"), "rb") as a, open(os.path.join(new, "index.json"), "rb") as b:
        assert a.read() == b.read()  # nothing in the index tells the versions apart
    return old, new


def _read_until_error(ds, replace) -> list:
    """Read 20 samples (unshuffled), call ``replace``, then read on; the samples read before the error."""
    it = iter(ds)
    got = [next(it) for _ in range(20)]
    replace()
    with pytest.raises(RemoteChangedError) as info:
        for s in it:
            got.append(s)
    msg = str(info.value)
    assert "changed after this job read the dataset's index" in msg and "Restart the job" in msg
    assert "hashes=" in msg
    return got, msg


def _shards(ds) -> list[str]:
    return [s.raw_data.basename for s in ds.shards]


# -- HTTP ---------------------------------------------------------------------------------------------------
def _http_put(src: str, dst: str, mtime: float) -> None:
    shutil.copyfile(src, dst)
    os.utime(dst, (mtime, mtime))  # written after the run read the index, by the server's clock


@pytest.mark.parametrize("whole", [False, True], ids=["one-shard", "whole-dataset"])
def test_http_rewrite_mid_epoch_is_refused(http_server, versions_dirs, tmp_path, whole):
    old, new = versions_dirs
    served = os.path.join(http_server.root, "data")
    shutil.copytree(old, served)
    cache = str(tmp_path / "cache")
    ds = StreamingDataset(remote=f"{http_server.url}/data", local=cache, batch_size=4, predownload=8)
    names = _shards(ds)
    later = time.time() + 60
    targets = names if whole else names[-1:]

    def replace():
        assert not os.path.exists(os.path.join(cache, names[-1]))  # not downloaded yet
        for name in targets + (["index.json"] if whole else []):
            _http_put(os.path.join(new, name), os.path.join(served, name), later)

    got, msg = _read_until_error(ds, replace)
    _check(got, 0)  # nothing of the new version was yielded
    assert "after this machine read the index" in msg
    if not whole:
        assert len(got) == N - ds.shards[-1].samples and names[-1] in msg
    for name in targets:  # by the time the job restarts, the rewrite lies in the past
        os.utime(os.path.join(served, name), (time.time() - 1, time.time() - 1))
    next_run = list(StreamingDataset(remote=f"{http_server.url}/data", local=cache))
    _check(next_run, 1 if whole else 0, 0 if whole else N - ds.shards[-1].samples)  # the next run is right


def test_http_shard_changed_since_first_download_is_refused(http_server, versions_dirs, tmp_path):
    """A shard downloaded, evicted, then replaced within the same second: its ETag tells."""
    old, new = versions_dirs
    served = os.path.join(http_server.root, "data")
    shutil.copytree(old, served)
    ds = StreamingDataset(remote=f"{http_server.url}/data", local=str(tmp_path / "cache"))
    name = _shards(ds)[0]
    assert ds[0]["id"] == 0
    ds.evict_shard(0)
    st = os.stat(os.path.join(served, name))
    shutil.copyfile(os.path.join(new, name), os.path.join(served, name))
    os.utime(os.path.join(served, name), ns=(st.st_atime_ns, st.st_mtime_ns + 1))  # same Last-Modified
    with pytest.raises(RemoteChangedError, match="its etag is .* where it was .* when this cache first downloaded"):
        ds[1]


def test_unchanged_dataset_reads_and_records_each_shard(http_server, versions_dirs, tmp_path):
    shutil.copytree(versions_dirs[0], os.path.join(http_server.root, "data"))
    ds = StreamingDataset(remote=f"{http_server.url}/data", local=str(tmp_path / "cache"), shuffle=True)
    assert sorted(s["id"] for s in ds) == list(range(N))
    assert sorted(os.listdir(tmp_path / "cache" / ".shardstream" / "remote")) == sorted(
        f"{n}.json" for n in _shards(ds))
    assert all(n == 1 for n in http_server.faults.requests.values())  # HEADs are not GETs: nothing fetched twice


# -- S3 (moto) ------------------------------------------------------------------------------------------------
def _after_the_allowance(opened: float) -> None:
    """Wait until S3's LastModified (whole seconds) of a new write is past the run's reading of the index."""
    while time.time() < opened + versions.CLOCK_ALLOWANCE_S + 1.05:
        time.sleep(0.1)


@pytest.mark.parametrize("whole", [False, True], ids=["one-shard", "whole-dataset"])
def test_s3_rewrite_mid_epoch_is_refused(s3_server, s3_bucket, versions_dirs, tmp_path, whole):
    old, new = versions_dirs
    url = f"{s3_bucket}/data"
    s3_server.upload_dir(old, url)
    cache = str(tmp_path / "cache")
    opts = s3_server.storage_options
    ds = StreamingDataset(remote=url, local=cache, storage_options=opts, batch_size=4, predownload=8)
    opened = time.time()
    names = _shards(ds)
    fs = s3_server.filesystem()

    def replace():
        assert not os.path.exists(os.path.join(cache, names[-1]))  # not downloaded yet
        _after_the_allowance(opened)
        for name in (["index.json", *names] if whole else names[-1:]):  # index.json first, as a sync would
            fs.put_file(os.path.join(new, name), f"{url}/{name}")

    got, msg = _read_until_error(ds, replace)
    _check(got, 0)
    if not whole:
        assert len(got) == N - ds.shards[-1].samples and f"{url}/{names[-1]}" in msg
    next_run = list(StreamingDataset(remote=url, local=cache, storage_options=opts))
    _check(next_run, 1 if whole else 0, 0 if whole else N - ds.shards[-1].samples)


def test_s3_dataset_uploaded_index_first_is_not_mistaken_for_a_change(s3_server, s3_bucket, versions_dirs, tmp_path):
    url = f"{s3_bucket}/data"
    s3_server.upload_dir(versions_dirs[0], url)  # index.json before the shards (alphabetical)
    ds = StreamingDataset(remote=url, local=str(tmp_path / "cache"), storage_options=s3_server.storage_options)
    _check(list(ds), 0)
