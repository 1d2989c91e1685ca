"""JAX: the host's world from jax and per-host batches as numpy or global jax Arrays.

The checks run in a child process, once with one host device and once with two
(``--xla_force_host_platform_device_count``): JAX's runtime starts threads, and
the PyTorch tests fork DataLoader workers, which must not happen in a process
whose JAX runtime is running. Each ``check_*`` function is reported by a test.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

pytest.importorskip("jax")  # importing jax starts nothing; its runtime starts on first use

from shardstream import BatchLoader, MDSWriter, Ragged, StreamingDataset, World  # noqa: E402

N = 60
SEED = 3


@pytest.fixture(scope="module")
def path(tmp_path_factory) -> str:
    rng = np.random.default_rng(2)
    out = str(tmp_path_factory.mktemp("jax") / "ds")
    columns = {"id": "int", "x": "ndarray:float32:3", "tokens": "ndarray:int32", "s": "str", "w": "float32"}
    with MDSWriter(out=out, columns=columns, size_limit=400) as writer:
        for i in range(N):
            writer.write({"id": i, "x": np.arange(3, dtype=np.float32) + i,
                          "tokens": rng.integers(0, 50, int(rng.integers(1, 6))).astype(np.int32),
                          "s": f"t{i}", "w": np.float32(i / 2)})
    return out


# -- the checks (run in the child process) ------------------------------------------------------

def _batch_size() -> int:
    import jax

    return 2 * len(jax.devices())  # the batch dimension splits evenly over the devices


def _make(path: str) -> StreamingDataset:
    return StreamingDataset(local=path, batch_size=_batch_size(), shuffle=True, shuffle_seed=SEED)


def _sharding():
    import jax
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    return NamedSharding(Mesh(np.array(jax.devices()), ("data",)), PartitionSpec("data"))


def check_world(path: str) -> None:
    import jax

    from shardstream.integrations.jax import JaxLoader, jax_world

    assert jax.process_count() == 1 and jax.process_index() == 0
    assert jax_world() == World()
    assert jax_world(1) == World(replication=1)
    loader = JaxLoader(_make(path))
    assert isinstance(loader, BatchLoader) and loader.world == jax_world()
    explicit = World(num_nodes=2, node=1)
    assert JaxLoader(_make(path), world=explicit).world == explicit


def check_numpy_without_sharding(path: str) -> None:
    from shardstream.integrations.jax import JaxLoader

    want = list(_make(path).iterate_batches())
    loader = JaxLoader(_make(path))
    got = list(loader)
    assert len(got) == len(want) == N // _batch_size()
    for g, w in zip(got, want):
        assert list(g) == list(w)
        for name in ("id", "x", "w"):
            assert type(g[name]) is np.ndarray and g[name].dtype == w[name].dtype, name
            np.testing.assert_array_equal(g[name], w[name])
        assert g["s"] == w["s"]
        assert isinstance(g["tokens"], Ragged)
        np.testing.assert_array_equal(g["tokens"].values, w["tokens"].values)


def check_global_arrays_with_sharding(path: str) -> None:
    import jax

    from shardstream.integrations.jax import JaxLoader

    sharding = _sharding()
    devices = len(jax.devices())
    want = list(_make(path).iterate_batches())
    got = list(JaxLoader(_make(path), sharding=sharding, prefetch=3))
    assert len(got) == len(want) > 3
    for g, w in zip(got, want):
        for name in ("id", "x", "w"):
            a = g[name]
            assert isinstance(a, jax.Array), name
            assert a.shape == w[name].shape
            assert a.dtype == jax.dtypes.canonicalize_dtype(w[name].dtype)  # int64 is int32 without x64
            assert a.sharding.is_equivalent_to(sharding, a.ndim)
            np.testing.assert_array_equal(np.asarray(a), w[name])
            assert len(a.addressable_shards) == devices
            for shard in a.addressable_shards:  # each device holds its rows of the batch
                assert shard.data.shape[0] == w[name].shape[0] // devices
                np.testing.assert_array_equal(np.asarray(shard.data), w[name][shard.index])
        assert g["s"] == w["s"]  # strings stay on the host
        assert isinstance(g["tokens"], Ragged)  # variable-length rows stay on the host
        np.testing.assert_array_equal(g["tokens"].values, w["tokens"].values)
        np.testing.assert_array_equal(np.asarray(g["tokens"].offsets), np.asarray(w["tokens"].offsets))


def check_batches_put_on_one_device(path: str) -> None:
    import jax

    from shardstream import InvalidArgumentError
    from shardstream.integrations.jax import JaxLoader

    device = jax.devices()[-1]
    want = list(_make(path).iterate_batches())
    got = list(JaxLoader(_make(path), device=device, prefetch=3))
    assert len(got) == len(want) > 3
    for g, w in zip(got, want):
        for name in ("id", "x", "w"):
            assert isinstance(g[name], jax.Array) and g[name].devices() == {device}, name
            np.testing.assert_array_equal(np.asarray(g[name]), w[name])
        assert g["s"] == w["s"] and isinstance(g["tokens"], Ragged)
    try:
        JaxLoader(_make(path), device=device, sharding=_sharding())
    except InvalidArgumentError as exc:
        assert "not both" in str(exc)
    else:
        raise AssertionError("device= with sharding= was accepted")


def check_state_and_resume(path: str) -> None:
    from shardstream.integrations.jax import JaxLoader

    ref = [b["id"].tolist() for b in _make(path).iterate_batches()]
    def decoding() -> int:
        return sum(1 for t in threading.enumerate() if t.name == "shardstream-batches")

    before = decoding()
    loader = JaxLoader(_make(path), sharding=_sharding(), prefetch=4)
    head = []
    for j, batch in enumerate(loader):
        head.append(np.asarray(batch["id"]).tolist())
        if j == 1:
            break
    state = loader.state_dict()
    assert state["sample_in_epoch"] == 2 * _batch_size()
    end = time.monotonic() + 5
    while decoding() > before and time.monotonic() < end:
        time.sleep(0.01)
    assert decoding() == before  # breaking out of the loop stopped the thread
    resumed = JaxLoader(_make(path))
    resumed.load_state_dict(state)
    assert head + [b["id"].tolist() for b in resumed] == ref


def _keep(row) -> bool:
    return row["id"] % 3 != 0


def _doubled(batch) -> dict:
    """A batched map that changes the row count: rows whose id is even come twice."""
    ids = [i for i in batch["id"] for _ in range(1 + (i % 2 == 0))]
    return {"id": ids, "x": [batch["x"][batch["id"].index(i)] for i in ids]}


def _chain(path: str):
    """A filter and a batched map over the dataset: 40 rows kept, 60 after the map."""
    return _make(path).filter(_keep).map(_doubled, batched=True, batch_size=10, input_columns=None,
                                         remove_columns=["tokens", "s", "w"])


def check_chain_batches_as_sharded_jax_arrays(path: str) -> None:
    import jax

    from shardstream.integrations.jax import JaxLoader

    rows = list(_chain(path))
    sharding = _sharding()
    got = list(JaxLoader(_chain(path), sharding=sharding, prefetch=3))
    assert len(got) == len(rows) // _batch_size() > 3
    for name in ("id", "x"):
        assert all(isinstance(b[name], jax.Array) and b[name].sharding.is_equivalent_to(sharding, b[name].ndim)
                   for b in got), name
    assert [i for b in got for i in np.asarray(b["id"]).tolist()] == [r["id"] for r in rows]
    np.testing.assert_array_equal(np.concatenate([np.asarray(b["x"]) for b in got]), np.stack([r["x"] for r in rows]))


def check_chain_resumes_exactly(path: str) -> None:
    from shardstream.integrations.jax import JaxLoader

    full = [np.asarray(b["id"]).tolist() for b in JaxLoader(_chain(path), sharding=_sharding())]
    first = JaxLoader(_chain(path), sharding=_sharding(), prefetch=4)
    head = []
    for j, batch in enumerate(first):
        head.append(np.asarray(batch["id"]).tolist())
        if j == 2:
            time.sleep(0.2)  # batches made ahead, not consumed
            break
    state = json.loads(json.dumps(first.state_dict()))
    first.close()
    again = JaxLoader(_chain(path), sharding=_sharding())
    again.load_state_dict(state)
    assert head + [np.asarray(b["id"]).tolist() for b in again] == full and len(full) > 3


def check_source_on_one_device(path: str) -> None:
    import tempfile

    import jax

    from shardstream import JsonShardedSource
    from shardstream.integrations.jax import JaxLoader
    from shardstream.testing.datasets import write_text_rows

    rows = write_text_rows(tempfile.mkdtemp(), files=2, rows=30)
    device = jax.devices()[-1]
    want = [b["id"].tolist() for b in JsonShardedSource(f"{rows}/*.jsonl").dataset(batch_size=4).iterate_batches()]

    def loader():
        return JaxLoader(JsonShardedSource(f"{rows}/*.jsonl"), batch_size=4, columns=["id"], device=device)
    got = list(loader())
    assert all(b["id"].devices() == {device} for b in got)
    assert [np.asarray(b["id"]).tolist() for b in got] == want and len(want) == 15
    first = loader()
    it = iter(first)
    head = [np.asarray(next(it)["id"]).tolist() for _ in range(4)]
    state = first.state_dict()
    first.close()
    again = loader()
    again.load_state_dict(state)
    assert head + [np.asarray(b["id"]).tolist() for b in again] == want


CHECKS = [name for name in list(globals()) if name.startswith("check_")]

_CHILD = r"""
import importlib, json, sys, traceback
module = importlib.import_module(sys.argv[1])
results = {}
for name in module.CHECKS:
    try:
        getattr(module, name)(sys.argv[2])
        results[name] = "ok"
    except BaseException:
        results[name] = traceback.format_exc()
print("RESULTS " + json.dumps(results))
"""


@pytest.fixture(scope="module", params=[1, 2], ids=["1-device", "2-devices"])
def results(request, path) -> dict:
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={request.param}"
    done = subprocess.run([sys.executable, "-c", _CHILD, __name__, path], env=env, capture_output=True,
                          text=True, timeout=240)
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULTS ")]
    assert done.returncode == 0 and lines, done.stderr[-4000:]
    out = json.loads(lines[-1][len("RESULTS "):])
    out["devices"] = request.param
    return out


@pytest.mark.parametrize("check", CHECKS)
def test_jax(results, check):
    assert results[check] == "ok", f"with {results['devices']} device(s):\n{results[check]}"
