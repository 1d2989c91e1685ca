"""Fixtures for the converter's tests: small deterministic inputs, the command line as a process, reading a
converted dataset back, and the loopback object stores.

- ``write_parquet(dirname, files=3, rows=50, row_group_size=20, start=0) -> list[dict]``: Parquet files
  ``f000.parquet`` ... of :data:`SCHEMA` (``id`` int64, ``tokens`` list<int32>, ``text``, ``score`` float64,
  ``flag`` bool, ``meta`` struct), several row groups each; returns their rows in order;
- ``make_rows(n, start=0) -> list[dict]``: rows of that schema (ids from ``start``);
- ``read_rows(out, **dataset_kwargs) -> list[dict]``: every row of a converted dataset, in order, as plain
  Python values (comparable with ``==`` to the input rows: ``flag`` True reads back as 1);
- ``cli(*args, check_rc=None, timeout=120, **popen_kwargs)``: ``python -m shardstream ...`` as a process;
- ``tree(dirname) -> dict``: relative path -> bytes of every file below ``dirname``;
- ``arrow_schema``: that schema;
- ``s3_server`` (session) / ``s3_bucket`` (``"s3://<name>"``) / ``http_server``: as in tests/storage.
"""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from shardstream.testing.servers import RangeHTTPServer, S3Server, unique_name


def make_rows(n: int, start: int = 0) -> list[dict]:
    rows = []
    for i in range(start, start + n):
        rows.append({"id": i, "tokens": [(i * 7 + k) % 1000 - 500 for k in range(1 + i % 9)],
                     "text": f"row {i} " + "é" * (i % 4), "score": i / 8 - 3.0, "flag": i % 3 == 0,
                     "meta": {"n": i % 5, "tag": f"t{i % 2}"}})
    return rows


def schema():
    import pyarrow as pa

    return pa.schema([("id", pa.int64()), ("tokens", pa.list_(pa.int32())), ("text", pa.string()),
                      ("score", pa.float64()), ("flag", pa.bool_()),
                      ("meta", pa.struct([("n", pa.int64()), ("tag", pa.string())]))])


SCHEMA_COLUMNS = {"id": "int64", "tokens": "ndarray:int32", "text": "str", "score": "float64", "flag": "uint8",
                  "meta": "json"}


def write_parquet(dirname, files: int = 3, rows: int = 50, row_group_size: int = 20, start: int = 0,
                  prefix: str = "f") -> list[dict]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    os.makedirs(dirname, exist_ok=True)
    out = []
    for f in range(files):
        part = make_rows(rows, start + f * rows)
        path = os.path.join(str(dirname), f"{prefix}{f:03d}.parquet")
        pq.write_table(pa.Table.from_pylist(part, schema=schema()), path, row_group_size=row_group_size)
        out += part
    return out


def plain(value):
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    return value


def read_rows(out, **kwargs) -> list[dict]:
    from shardstream import StreamingDataset

    if "remote" not in kwargs:
        kwargs["local"] = str(out)
    ds = StreamingDataset(batch_size=1, **kwargs)
    return [plain(ds[i]) for i in range(len(ds))]


def cli(*args, check_rc=None, timeout: float = 120, **kwargs) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "shardstream", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, **kwargs)
    if check_rc is not None:
        assert proc.returncode == check_rc, (proc.returncode, proc.stdout, proc.stderr)
    return proc


def tree(dirname) -> dict:
    found = {}
    for top, _, names in os.walk(str(dirname)):
        for name in names:
            path = os.path.join(top, name)
            with open(path, "rb") as f:
                found[os.path.relpath(path, str(dirname))] = f.read()
    return found


@pytest.fixture(scope="session")
def rows_of():
    return make_rows


@pytest.fixture(name="write_parquet", scope="session")
def _write_parquet():
    return write_parquet


@pytest.fixture(name="read_rows", scope="session")
def _read_rows():
    return read_rows


@pytest.fixture(name="cli", scope="session")
def _cli():
    return cli


@pytest.fixture(name="tree", scope="session")
def _tree():
    return tree


@pytest.fixture(name="arrow_schema", scope="session")
def _arrow_schema():
    return schema()


@pytest.fixture
def parquet_dir(tmp_path):
    """``(directory, rows)``: three Parquet files of 50 rows in row groups of 20."""
    d = tmp_path / "in"
    return str(d), write_parquet(d)


@pytest.fixture(scope="session")
def s3_server():
    with S3Server() as server:
        yield server


@pytest.fixture
def s3_bucket(s3_server: S3Server) -> str:
    return s3_server.make_bucket(unique_name())


@pytest.fixture
def http_server(tmp_path):
    root = tmp_path / "http-root"
    root.mkdir()
    with RangeHTTPServer(root) as server:
        yield server
