"""Small data files for the processing tests."""

from __future__ import annotations

import pytest

from shardstream.testing.datasets import write_text_rows


@pytest.fixture(scope="module")
def jsonl_dir(tmp_path_factory) -> str:
    return write_text_rows(tmp_path_factory.mktemp("jsonl"))


@pytest.fixture(scope="module")
def two_dirs(tmp_path_factory) -> tuple[str, str]:
    root = tmp_path_factory.mktemp("two")
    return (write_text_rows(root / "a", files=2, rows=150, start=0),
            write_text_rows(root / "b", files=2, rows=100, start=100_000))
