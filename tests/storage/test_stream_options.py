"""A stream's reading options (StreamOptions, Stream.options) and how cache_limit is shared (budget)."""

from __future__ import annotations

import dataclasses
import re

import pytest

from shardstream import Stream
from shardstream.errors import CacheLimitError, InvalidArgumentError, UnsupportedFormatError
from shardstream.storage.budget import minimum_limit, split_limit
from shardstream.storage.options import StreamOptions


def test_defaults_are_the_datasets_and_the_lock_wait_covers_every_attempt():
    opts = StreamOptions()
    assert (opts.split, opts.download_retry, opts.download_timeout, opts.validate_hash, opts.keep_zip,
            opts.format, opts.columns, opts.on_bad_rows) == (None, 2, 60, None, False, None, None, "raise")  # format:
    # None is taken from the files' names, or MDS for a directory with index.json
    assert opts.lock_wait == 60 * 3 + 60
    assert StreamOptions(download_retry=0, download_timeout=5).lock_wait == 5 + 60


def test_options_are_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        StreamOptions().split = "train"


def test_overrides_replace_values_and_none_keeps_the_current_one():
    base = StreamOptions(split="train", download_retry=4, validate_hash="xxh64")
    got = base.with_overrides(split=None, download_retry=0, validate_hash=None, keep_zip=True)
    assert got == StreamOptions(split="train", download_retry=0, validate_hash="xxh64", keep_zip=True)
    assert base.download_retry == 4  # a new object; the defaults stay as they were
    with pytest.raises(InvalidArgumentError, match="no option 'retries'"):
        base.with_overrides(retries=3)


@pytest.mark.parametrize("values, error, message", [
    ({"download_retry": -1}, InvalidArgumentError, "download_retry=-1 must be an int >= 0"),
    ({"download_retry": True}, InvalidArgumentError, "download_retry=True must be an int >= 0"),
    ({"download_timeout": 0}, InvalidArgumentError, "download_timeout=0 must be a positive number of seconds"),
    ({"validate_hash": "md77"}, UnsupportedFormatError, "unknown hash 'md77'"),
    ({"format": "parkay"}, UnsupportedFormatError, "format='parkay' is not a known shard format; known: .*mds"),
])
def test_bad_values_are_refused_with_what_was_wrong(values, error, message):
    with pytest.raises(error, match=message):
        StreamOptions(**values)
    with pytest.raises(error, match=message):  # also when a stream's own value overrides a good default
        StreamOptions().with_overrides(**values)


def test_a_stream_takes_the_datasets_options_it_leaves_out():
    defaults = StreamOptions(split="train", download_retry=5, validate_hash="sha1")
    got = Stream(local="/data", download_retry=0, keep_zip=True).options(defaults)
    assert got == StreamOptions(split="train", download_retry=0, validate_hash="sha1", keep_zip=True)
    assert Stream(local="/data", split="val", format="mds").options(defaults).split == "val"


def test_a_stream_with_an_unknown_format_is_refused_when_made():
    with pytest.raises(UnsupportedFormatError, match="known: .*mds"):
        Stream(local="/data", format="parkay")
    assert Stream(local="/data", format="mds").format == "mds"


# -- budget ------------------------------------------------------------------------------------------

def test_minimum_limit_is_one_shard_in_use_plus_the_largest_arriving():
    assert minimum_limit([], []) == 0
    assert minimum_limit([10, 30, 20], [15, 35, 50]) == 30 + 50


def test_no_limit_or_no_cached_stream_gives_no_shares():
    assert split_limit(None, [100, None], [10, 0]) == [None, None]
    assert split_limit(1000, [None, None], [0, 0]) == [None, None]


def test_one_cached_stream_gets_the_whole_limit_and_local_ones_none():
    """Even below its minimum: that cache refuses it itself, with the single dataset's message."""
    assert split_limit(1000, [None, 400, None], [0, 300, 0]) == [None, 1000, None]
    assert split_limit(5, [400], [300]) == [5]


def test_several_cached_streams_share_by_size():
    shares = split_limit(1000, [100, None, 300], [10, 0, 10])
    assert shares == [250, None, 750]
    assert split_limit(999, [1, 2], [0, 0]) == [333, 666]


def test_a_limit_too_small_for_a_share_names_the_smallest_that_is_enough():
    sizes, minimums = [100, 900], [50, 100]
    with pytest.raises(CacheLimitError, match="too small for 2 streams with a remote") as info:
        split_limit(300, sizes, minimums)
    assert "cache_limit=300 " in str(info.value)
    need = int(re.search(r"at least (\d+) bytes", str(info.value)).group(1))
    assert need == 500  # stream 0 is a tenth of the bytes and needs 50
    shares = split_limit(need, sizes, minimums)
    assert all(share >= m for share, m in zip(shares, minimums))
    with pytest.raises(CacheLimitError):
        split_limit(need - 1, sizes, minimums)
