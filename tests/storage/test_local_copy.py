"""A remote with no index file and a ``local=`` that already holds a whole dataset: the local copy is read
in place with a warning, as mosaicml-streaming reads it; an incomplete copy or another remote's cache is not."""

from __future__ import annotations

import os
import shutil

import pytest

from shardstream import MDSWriter, StreamingDataset
from shardstream.errors import IndexNotFoundError


def write(out, n: int = 117) -> str:
    with MDSWriter(out=str(out), columns={"x": "int"}, size_limit=256, hashes=[]) as w:
        for i in range(n):
            w.write({"x": i})
    return str(out)


def test_a_whole_local_dataset_is_read_in_place_when_the_remote_has_no_index(tmp_path):
    local = write(tmp_path / "local")
    (tmp_path / "remote").mkdir()
    before = sorted(os.listdir(local))
    for remote in (str(tmp_path / "remote"), str(tmp_path / "nowhere")):
        with pytest.warns(UserWarning, match=r"no index\.json at .*read as it is, in place"):
            ds = StreamingDataset(local=local, remote=remote, batch_size=1)
        assert ds.remote is None
        assert sorted(s["x"] for s in ds) == list(range(117))
    assert sorted(os.listdir(local)) == before  # nothing written, nothing evicted


def test_a_local_copy_missing_a_shard_is_refused(tmp_path):
    local = write(tmp_path / "local")
    os.remove(os.path.join(local, "shard.00001.mds"))
    with pytest.raises(IndexNotFoundError, match="no index.json at"):
        StreamingDataset(local=local, remote=str(tmp_path / "remote"), batch_size=1)


def test_the_cache_of_this_remote_is_read_but_not_another_remotes(tmp_path):
    remote = write(tmp_path / "remote")
    cache = str(tmp_path / "cache")
    assert len(list(StreamingDataset(remote=remote, local=cache, batch_size=1))) == 117  # every shard cached
    shutil.rmtree(remote)
    os.mkdir(remote)
    with pytest.warns(UserWarning, match="read as it is"):
        assert len(list(StreamingDataset(remote=remote, local=cache, batch_size=1))) == 117
    with pytest.raises(IndexNotFoundError):
        StreamingDataset(remote=str(tmp_path / "other"), local=cache, batch_size=1)
