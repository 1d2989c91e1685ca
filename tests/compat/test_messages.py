"""Refusals worded as mosaicml-streaming words them (scripts match on them), with our extra detail."""

from __future__ import annotations

import pytest

from shardstream import MDSWriter, StreamingDataset
from shardstream.compat.util import bytes_to_int, number_abbrev_to_int
from shardstream.errors import UnsafeEncodingError


@pytest.mark.parametrize("convert, value, suffixes", [
    (bytes_to_int, "", "['b', 'kb'"), (bytes_to_int, "3 parsecs", "'mb'"), (bytes_to_int, "kb", "'yb'"),
    (number_abbrev_to_int, "", "['k', 'm', 'b', 't']"), (number_abbrev_to_int, "1.5x", "['k'")])
def test_unit_strings_refused_with_the_supported_suffixes(convert, value, suffixes):
    with pytest.raises(ValueError, match=r"^Unsupported value/suffix .*Supported suffix are ") as caught:
        convert(value)
    assert suffixes in str(caught.value) and repr(value) in str(caught.value)


def test_an_unsafe_column_says_it_contains_an_unsafe_type(tmp_path):
    with MDSWriter(out=str(tmp_path), columns={"obj": "pkl"}) as w:
        w.write({"obj": {"a": 1}})
    with pytest.raises(UnsafeEncodingError, match=r"column 'obj' \(shard 0\) contains an unsafe type: encoding 'pkl'"
                       r".*allow_unsafe_types=True"):
        StreamingDataset(local=str(tmp_path), batch_size=1)
    assert StreamingDataset(local=str(tmp_path), batch_size=1, allow_unsafe_types=True)[0] == {"obj": {"a": 1}}
