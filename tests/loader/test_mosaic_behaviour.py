"""Errors and warnings where code written for mosaicml-streaming catches or expects them: the builtin
type it catches, the words it matches, and the behaviour around them."""

from __future__ import annotations

import json
import os
import pickle
import tempfile
import warnings

import pytest

from shardstream import MDSWriter, Stream, StreamingDataset
from shardstream.errors import (CorruptIndexError, EmptyStreamError, IndexJSONError,
                                IndexNotFoundError, LocalIndexMissingError, ShardstreamError,
                                TemporaryDirectoryExistsError, UnknownKeywordError)


def _write(out, n=300, size_limit=None, compression=None):
    with MDSWriter(out=str(out), columns={"x": "int", "b": "bytes"}, size_limit=size_limit,
                   compression=compression) as w:
        for i in range(n):
            w.write({"x": i, "b": bytes(20)})
    return str(out)


def test_an_empty_index_is_a_json_decode_error_naming_the_file(tmp_path):
    (tmp_path / "index.json").write_text("")
    with pytest.raises(json.JSONDecodeError, match=r"Index file at .*index\.json is empty or corrupted") as info:
        StreamingDataset(local=str(tmp_path), batch_size=1)
    err = info.value
    assert isinstance(err, IndexJSONError) and isinstance(err, CorruptIndexError) and isinstance(err, ValueError)
    assert (err.pos, err.lineno, err.colno) == (0, 1, 1)
    again = pickle.loads(pickle.dumps(err))
    assert type(again) is IndexJSONError and str(again) == str(err)


def test_a_truncated_index_says_where_it_breaks(tmp_path):
    d = _write(tmp_path / "d", n=20)
    text = open(os.path.join(d, "index.json")).read()
    with open(os.path.join(d, "index.json"), "w") as f:
        f.write(text[:40])
    with pytest.raises(IndexJSONError) as info:
        StreamingDataset(local=d, batch_size=1)
    assert info.value.doc == text[:40] and "not valid JSON" in str(info.value)


def test_an_index_with_no_shards_is_refused_as_runtime_error(tmp_path):
    (tmp_path / "index.json").write_text(json.dumps({"shards": [], "version": 2}))
    with pytest.raises(RuntimeError, match=r"Stream contains no samples: .*index\.json") as info:
        StreamingDataset(local=str(tmp_path), batch_size=1)
    assert isinstance(info.value, EmptyStreamError) and isinstance(info.value, ShardstreamError)


def test_an_empty_stream_of_a_mixture_is_refused(tmp_path):
    full = _write(tmp_path / "full", n=10)
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "index.json").write_text(json.dumps({"shards": [], "version": 2}))
    with pytest.raises(EmptyStreamError, match="empty"):
        StreamingDataset(streams=[Stream(local=full), Stream(local=str(tmp_path / "empty"))], batch_size=1)


def test_no_remote_and_no_local_index_is_runtime_and_file_not_found(tmp_path):
    with pytest.raises(RuntimeError, match="No `remote` provided, but local file .*index.json does not exist") as info:
        StreamingDataset(streams=[Stream(local=str(tmp_path))], batch_size=1)
    assert isinstance(info.value, FileNotFoundError) and isinstance(info.value, IndexNotFoundError)
    assert isinstance(info.value, LocalIndexMissingError)


def test_a_missing_remote_index_is_a_file_not_found_error(tmp_path):
    (tmp_path / "remote").mkdir()
    with pytest.raises(FileNotFoundError, match="No such file or directory"):
        StreamingDataset(remote=str(tmp_path / "remote"), local=str(tmp_path / "cache"), batch_size=1)


@pytest.mark.parametrize("make", [
    lambda out: MDSWriter(out=out, columns={"x": "int"}, min_workers=1),
    lambda out: StreamingDataset(local=out, min_workers=1),
    lambda out: Stream(local=out, min_workers=1),
])
def test_an_unknown_keyword_is_both_type_and_value_error(tmp_path, make):
    with pytest.raises(ValueError) as info:
        make(str(tmp_path / "out"))
    assert isinstance(info.value, TypeError) and isinstance(info.value, UnknownKeywordError)
    assert "min_workers" in str(info.value)


def test_a_writer_names_the_invalid_argument_as_mosaicml_streaming_does(tmp_path):
    with pytest.raises(ValueError, match=r"Invalid Writer argument\(s\): \['min_workers'\]"):
        MDSWriter(out=str(tmp_path), columns={"x": "int"}, min_workers=1)


def test_writer_messages_carry_mosaicml_streaming_words(tmp_path):
    with pytest.raises(ValueError, match="`size_limit` must be less than 2"):
        MDSWriter(out=str(tmp_path / "a"), columns={"x": "int"}, size_limit=2**32)
    d = _write(tmp_path / "b", n=5)
    with pytest.raises(FileExistsError, match="Directory is not empty"):
        MDSWriter(out=d, columns={"x": "int"})


def test_stream_with_no_location_makes_a_new_temporary_directory(tmp_path, monkeypatch):
    root = tmp_path / "tmp"
    monkeypatch.setattr(tempfile, "gettempdir", lambda: str(root))
    stream = Stream(split="train")
    assert stream.local == os.path.join(str(root), "", "train") and os.path.isdir(stream.local)
    with pytest.raises(FileExistsError, match="Could not create a temporary local directory") as info:
        Stream(split="train")
    assert isinstance(info.value, TemporaryDirectoryExistsError)


def test_cache_limit_not_above_the_index_is_refused(tmp_path):
    remote = _write(tmp_path / "remote", n=300, size_limit=1 << 10)
    index = os.path.getsize(os.path.join(remote, "index.json"))
    with pytest.raises(ValueError, match=r"Minimum cache usage \(\d+ bytes\) is larger than the cache limit"):
        StreamingDataset(remote=remote, local=str(tmp_path / "cache"), batch_size=1, cache_limit=index)


def test_a_cache_limit_of_1kb_for_500_byte_shards_is_refused(tmp_path):
    remote = _write(tmp_path / "remote", n=100, size_limit=500)
    with pytest.raises(ValueError, match="Minimum cache usage"):
        StreamingDataset(remote=remote, local=str(tmp_path / "cache"), batch_size=1, cache_limit="1kb")


def test_a_cache_shard_deleted_while_read_is_fetched_again(tmp_path):
    remote = _write(tmp_path / "remote", n=200, size_limit=1 << 10)
    cache = tmp_path / "cache"
    ds = StreamingDataset(remote=remote, local=str(cache), batch_size=1)
    first = cache / "shard.00000.mds"
    removed, seen = False, []
    for sample in ds:
        seen.append(sample["x"])
        if not removed and first.exists():
            first.unlink()
            removed = True
    assert removed and sorted(seen) == list(range(200))
    assert first.exists()  # fetched again, not left missing until the next pass


def test_predownload_below_batch_size_warns(tmp_path):
    d = _write(tmp_path / "d", n=20)
    with pytest.warns(UserWarning, match="predownload < batch_size .*This may result in slower batch time. "
                                         "Recommendation is to set"):
        StreamingDataset(local=d, predownload=4, batch_size=8)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        StreamingDataset(local=d, predownload=8, batch_size=8)


@pytest.mark.parametrize("block, warns", [(50, True), (5000, False)])
def test_a_shuffle_block_smaller_than_a_shard_warns_when_the_pass_starts(tmp_path, block, warns):
    d = _write(tmp_path / "d", n=1000, size_limit=1 << 12)
    ds = StreamingDataset(local=d, shuffle=True, shuffle_algo="py1e", shuffle_block_size=block, batch_size=4)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert sum(1 for _ in ds) == 1000
    said = [str(w.message) for w in caught if "Shuffle block size was smaller than shard size" in str(w.message)]
    assert len(said) == (1 if warns else 0)
