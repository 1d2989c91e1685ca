"""Ray Data <-> MDS on a real local Ray instance (one per module), real files and the loopback S3 server."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys

import numpy as np
import pytest

ray = pytest.importorskip("ray", reason="the Ray integration tests need ray: pip install 'shardstream[ray]'")
pytest.importorskip("ray.data", reason="the Ray integration tests need Ray Data: pip install 'ray[data]'")
pa = pytest.importorskip("pyarrow")

from shardstream import (EncodeError, IndexNotFoundError, InvalidArgumentError, MDSWriter,  # noqa: E402
                         OutputExistsError, StreamingDataset)
from shardstream.errors import SchemaMismatchError  # noqa: E402
from shardstream.integrations.ray import MDSDatasink, MDSDatasource, read_mds  # noqa: E402
from shardstream.integrations.raysource import group_shards  # noqa: E402


@pytest.fixture(scope="module", autouse=True)
def local_ray(tmp_path_factory):
    """One local Ray instance for the module; its workers stage and download under a cache root of the tests'."""
    cache = str(tmp_path_factory.mktemp("ray-cache-root"))
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, object_store_memory=256 << 20,
             runtime_env={"env_vars": {"SHARDSTREAM_CACHE_DIR": cache}})
    context = ray.data.DataContext.get_current()
    context.execution_options.preserve_order = True  # rows keep their order through the write tasks
    context.enable_progress_bars = False
    try:
        yield
    finally:
        ray.shutdown()


@pytest.fixture(scope="module")
def s3_server():
    pytest.importorskip("moto", reason="the loopback S3 server needs moto: pip install 'moto[server]'")
    pytest.importorskip("s3fs", reason="writing to S3 needs s3fs: pip install 'shardstream[s3]'")
    from shardstream.testing.servers import S3Server

    with S3Server() as server:
        yield server


def source_rows(n: int, seed: int = 0) -> pa.Table:
    rng = np.random.default_rng(seed)
    tokens = [rng.integers(0, 50_000, int(rng.integers(1, 20))).astype(np.int32) for _ in range(n)]
    return pa.table({
        "id": pa.array(np.arange(n, dtype=np.int64)),
        "tokens": pa.array(tokens, pa.list_(pa.int32())),
        "text": pa.array([f"row {i} " + "é" * (i % 7) for i in range(n)]),
        "score": pa.array(rng.standard_normal(n).astype(np.float32)),
        "blob": pa.array([bytes([i % 256]) * (i % 5) for i in range(n)], pa.binary()),
        "meta": pa.array([{"k": i, "tags": ["a"] * (i % 3)} for i in range(n)]),
    })


def in_blocks(table: pa.Table, blocks: int):
    """A Ray Dataset of ``table`` in ``blocks`` blocks (one write task each)."""
    step = -(-table.num_rows // blocks)
    return ray.data.from_arrow([table.slice(i, step) for i in range(0, table.num_rows, step)])


def test_ray_to_mds_to_streaming_dataset_keeps_every_row_in_order(tmp_path):
    table = source_rows(600)
    out = str(tmp_path / "mds")
    sink = MDSDatasink(out, size_limit=4096)
    in_blocks(table, 3).write_datasink(sink)

    assert sink.result["rows"] == 600 and sink.result["parts"] == 3 and sink.result["shards"] > 3
    index = json.load(open(os.path.join(out, "index.json")))
    parts = [s["raw_data"]["basename"].split("/")[0] for s in index["shards"]]
    assert parts == sorted(parts) and set(parts) == {"part-00000", "part-00001", "part-00002"}  # task order
    assert dict(zip(index["shards"][0]["column_names"], index["shards"][0]["column_encodings"])) == {
        "id": "int64", "tokens": "ndarray:int32", "text": "str", "score": "float32", "blob": "bytes",
        "meta": "json"}

    ds = StreamingDataset(local=out, shuffle=False, batch_size=1)
    got = [ds[i] for i in range(len(ds))]
    want = table.to_pylist()
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert int(g["id"]) == w["id"] and g["text"] == w["text"] and g["blob"] == w["blob"]
        assert g["tokens"].dtype == np.int32 and g["tokens"].tolist() == w["tokens"]
        assert np.float32(g["score"]) == np.float32(w["score"]) and g["meta"] == w["meta"]


def test_columns_given_override_the_inferred_ones(tmp_path):
    out = str(tmp_path / "mds")
    sink = MDSDatasink(out, columns={"id": "int32", "text": "json"})
    in_blocks(pa.table({"id": np.arange(10), "text": [f"t{i}" for i in range(10)]}), 2).write_datasink(sink)
    shard = json.load(open(os.path.join(out, "index.json")))["shards"][0]
    assert dict(zip(shard["column_names"], shard["column_encodings"])) == {"id": "int32", "text": "json"}
    assert StreamingDataset(local=out, shuffle=False)[7] == {"id": 7, "text": "t7"}


def write_with_mdswriter(out: str, n: int, **kwargs) -> list[dict]:
    from PIL import Image

    rng = np.random.default_rng(1)
    rows = []
    for i in range(n):
        img = io.BytesIO()
        Image.new("RGB", (4 + i % 3, 3), (i % 256, 0, 0)).save(img, format="JPEG")
        rows.append({"id": i, "text": f"sample {i}", "raw": bytes(range(i % 9)),
                     "tokens": rng.integers(-5, 5, 1 + i % 6).astype(np.int64),
                     "grid": rng.standard_normal((2, 3)).astype(np.float32),
                     "meta": {"i": i, "odd": bool(i % 2)}, "image": Image.open(img)})
    columns = {"id": "int", "text": "str", "raw": "bytes", "tokens": "ndarray:int64",
               "grid": "ndarray:float32:2,3", "meta": "json", "image": "jpeg"}
    with MDSWriter(out=out, columns=columns, size_limit=2048, **kwargs) as writer:
        for row in rows:
            writer.write(row)
    return rows


@pytest.mark.parametrize("compression", [None, "zstd"])
def test_mds_written_by_mdswriter_reads_back_as_arrow_blocks(tmp_path, compression):
    out = str(tmp_path / "mds")
    rows = write_with_mdswriter(out, 120, compression=compression)
    source = MDSDatasource(out)
    assert len(source.shards) > 3
    assert len(source.get_read_tasks(2)) == 2  # parallelism is respected: groups of shards
    assert source.estimate_inmemory_data_size() > 0

    ds = ray.data.read_datasource(source, override_num_blocks=3)
    got = ds.take_all()
    assert [r["id"] for r in got] == list(range(120))
    for g, w in zip(got, rows):
        assert g["text"] == w["text"] and g["raw"] == w["raw"] and g["meta"] == w["meta"]
        assert list(g["tokens"]) == w["tokens"].tolist()
        assert np.array_equal(np.asarray(g["grid"]), w["grid"])
        assert isinstance(g["image"], bytes) and g["image"].startswith(b"\xff\xd8\xff")  # the stored JPEG bytes

    schema = ds.schema().base_schema
    assert schema.field("text").type == pa.string() and schema.field("raw").type == pa.binary()
    assert schema.field("tokens").type == pa.list_(pa.int64()) and schema.field("id").type == pa.int64()


def test_read_mds_picks_columns_and_refuses_unknown_ones(tmp_path):
    out = str(tmp_path / "mds")
    write_with_mdswriter(out, 30)
    ds = read_mds(out, columns=["text", "id"], override_num_blocks=2)
    assert ds.take(2) == [{"text": "sample 0", "id": 0}, {"text": "sample 1", "id": 1}]
    with pytest.raises(InvalidArgumentError, match=r"\['nope'\]"):
        MDSDatasource(out, columns=["id", "nope"])
    with pytest.raises(IndexNotFoundError):
        MDSDatasource(str(tmp_path / "missing"))


def test_group_shards_cuts_contiguous_runs_of_similar_size():
    assert group_shards([10] * 8, 3) == [range(0, 3), range(3, 6), range(6, 8)]
    assert group_shards([10] * 3, 8) == [range(0, 1), range(1, 2), range(2, 3)]
    assert group_shards([100, 1, 1, 1, 100], 2) == [range(0, 3), range(3, 5)]
    assert group_shards([], 4) == []


def test_write_to_s3_with_storage_options_and_read_back(s3_server):
    from shardstream.testing.servers import unique_name

    url = f"{s3_server.make_bucket(unique_name())}/train"
    options = s3_server.storage_options
    table = source_rows(300, seed=3)
    sink = MDSDatasink(url, storage_options=options, compression="zstd", size_limit=8192)
    in_blocks(table, 2).write_datasink(sink)
    assert sink.result["parts"] == 2

    fs = s3_server.filesystem()
    names = sorted(p.split("/train/", 1)[1] for p in fs.find(url))
    assert names[0] == "index.json" and "part-00001/index.json" in names
    got = read_mds(url, storage_options=options, override_num_blocks=2).take_all()
    assert [r["id"] for r in got] == list(range(300))
    assert [r["text"] for r in got] == table.column("text").to_pylist()

    with pytest.raises(OutputExistsError, match="overwrite=True"):
        in_blocks(table, 2).write_datasink(MDSDatasink(url, storage_options=options))


def test_a_non_empty_output_is_refused_unless_overwrite(tmp_path):
    out = str(tmp_path / "mds")
    in_blocks(pa.table({"id": np.arange(20)}), 2).write_datasink(MDSDatasink(out))
    with pytest.raises(OutputExistsError, match="not empty"):
        in_blocks(pa.table({"id": np.arange(5)}), 2).write_datasink(MDSDatasink(out))
    in_blocks(pa.table({"id": np.arange(100, 105)}), 1).write_datasink(MDSDatasink(out, overwrite=True))
    assert [StreamingDataset(local=out, shuffle=False)[i]["id"] for i in range(5)] == [100, 101, 102, 103, 104]
    assert sorted(os.listdir(out)) == ["index.json", "part-00000"]  # the old part-00001, emptied, is gone too

    (tmp_path / "mds" / "notes.txt").write_text("mine")
    with pytest.raises(OutputExistsError, match="notes.txt"):
        in_blocks(pa.table({"id": np.arange(5)}), 1).write_datasink(MDSDatasink(out, overwrite=True))
    assert os.path.exists(os.path.join(out, "index.json"))  # nothing was deleted


def test_a_bad_value_raises_a_typed_error_naming_the_column_and_leaves_no_index(tmp_path):
    out = str(tmp_path / "mds")
    good = pa.table({"id": pa.array([1, 2, 3], pa.int64()), "text": ["a", "b", "c"]})
    bad = pa.table({"id": pa.array([4, None, 6], pa.int64()), "text": ["d", "e", "f"]})
    with pytest.raises(EncodeError, match="column 'id'") as caught:
        ray.data.from_arrow([good, bad]).write_datasink(MDSDatasink(out))
    assert "row 1" in str(caught.value) and "write task" in str(caught.value)
    assert not os.path.exists(os.path.join(out, "index.json"))

    fixed = pa.table({"id": pa.array([4, 5, 6], pa.int64()), "text": ["d", "e", "f"]})
    ray.data.from_arrow([good, fixed]).write_datasink(MDSDatasink(out, overwrite=True))  # replaces the parts
    assert [StreamingDataset(local=out, shuffle=False)[i]["id"] for i in range(6)] == [1, 2, 3, 4, 5, 6]


def test_a_column_with_no_encoding_is_refused_before_any_task_runs(tmp_path):
    table = pa.table({"id": [1, 2], "when": pa.array([None, None], pa.null())})
    with pytest.raises(SchemaMismatchError, match="columns=\\{'when': 'json'\\}"):
        ray.data.from_arrow(table).write_datasink(MDSDatasink(str(tmp_path / "mds")))
    assert not os.path.exists(tmp_path / "mds" / "index.json")


def test_arguments_are_checked():
    with pytest.raises(InvalidArgumentError, match="should be a dict"):
        MDSDatasink("out", columns=["id:int64"])
    with pytest.raises(InvalidArgumentError, match="out="):
        MDSDatasink("")


def test_without_ray_the_import_names_the_extra():
    code = "import sys; sys.modules['ray'] = None\nimport shardstream.integrations.ray"
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert run.returncode != 0
    assert "MissingDependencyError" in run.stderr and "pip install 'shardstream[ray]'" in run.stderr


def test_tensor_columns_of_numpy_rows_are_written_as_ndarray_columns(tmp_path):
    rng = np.random.default_rng(5)
    rows = [{"id": i, "tokens": rng.integers(0, 9, 1 + i % 5).astype(np.int32),
             "vec": np.full(3, i, np.int16), "grid": rng.standard_normal((2, 3)).astype(np.float32)}
            for i in range(40)]
    out = str(tmp_path / "mds")
    ray.data.from_items(rows, override_num_blocks=2).write_datasink(MDSDatasink(out))
    shard = json.load(open(os.path.join(out, "index.json")))["shards"][0]
    assert dict(zip(shard["column_names"], shard["column_encodings"])) == {
        "id": "int64", "tokens": "ndarray:int32", "vec": "ndarray:int16:3", "grid": "ndarray:float32:2,3"}
    ds = StreamingDataset(local=out, shuffle=False)
    for i in (0, 17, 39):
        got, want = ds[i], rows[i]
        assert got["id"] == i and np.array_equal(got["tokens"], want["tokens"]) and got["tokens"].dtype == np.int32
        assert np.array_equal(got["vec"], want["vec"]) and np.array_equal(got["grid"], want["grid"])
        assert got["grid"].shape == (2, 3)
    back = read_mds(out).take_all()
    assert np.array_equal(np.asarray(back[17]["grid"]), rows[17]["grid"])

    ragged = [{"m": np.ones((1 + i % 2, 2), np.float32)} for i in range(4)]  # one block: variable shapes
    with pytest.raises(SchemaMismatchError, match="column 'm' holds arrays of 2 dimensions"):
        ray.data.from_items(ragged, override_num_blocks=1).write_datasink(MDSDatasink(str(tmp_path / "ragged")))
    assert not os.path.exists(tmp_path / "ragged")  # refused before anything was written
