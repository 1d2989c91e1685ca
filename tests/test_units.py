"""Human-readable byte sizes and counts."""

from __future__ import annotations

import pytest

from shardstream import InvalidArgumentError
from shardstream.units import format_bytes, parse_bytes, parse_count


@pytest.mark.parametrize("text,expected", [
    (0, 0), (1024, 1024), (1.9, 1), ("1b", 1), ("1kb", 1024), ("1KB", 1024), ("1kib", 1024), ("64mb", 64 << 20),
    ("64MiB", 64 << 20), ("1.5gb", 3 << 29), ("2 gb", 2 << 30), (" 3tb ", 3 << 40), ("1pb", 1 << 50),
    ("0.5kb", 512), ("1_024b", 1024), ("512KiB", 512 << 10),
])
def test_parse_bytes(text, expected):
    assert parse_bytes(text) == expected
    assert type(parse_bytes(text)) is int


@pytest.mark.parametrize("bad", ["", "kb", "mb64", "1 parsec", "1.2.3kb", "--1kb", "nan kb", True, None, [1],
                                 "1e400kb", "inf kb", float("inf"), float("nan")])
def test_parse_bytes_invalid(bad):
    with pytest.raises(InvalidArgumentError) as info:
        parse_bytes(bad, "size_limit")
    assert "size_limit" in str(info.value)


def test_parse_bytes_bare_number_string():
    assert parse_bytes("1024") == 1024


@pytest.mark.parametrize("text,expected", [
    (0, 0), (100, 100), ("100", 100), ("100k", 100_000), ("100K", 100_000), ("64M", 64_000_000),
    ("2b", 2_000_000_000), ("1.5k", 1500), ("3t", 3 * 10**12), (" 7 ", 7), ("1_000", 1000), (2.7, 2),
])
def test_parse_count(text, expected):
    assert parse_count(text) == expected
    assert type(parse_count(text)) is int


@pytest.mark.parametrize("bad", ["", "k", "10x", "1kb", "1..2k", True, None, {}, "1e400k", float("inf")])
def test_parse_count_invalid(bad):
    with pytest.raises(InvalidArgumentError) as info:
        parse_count(bad, "epoch_size")
    assert "epoch_size" in str(info.value)


@pytest.mark.parametrize("n,text", [(0, "0 B"), (1023, "1023 B"), (1024, "1.0 KiB"), (1536, "1.5 KiB"),
                                    (5 << 20, "5.0 MiB"), (3 << 30, "3.0 GiB"), (2 << 40, "2.0 TiB"),
                                    (1 << 50, "1024.0 TiB")])
def test_format_bytes(n, text):
    assert format_bytes(n) == text
