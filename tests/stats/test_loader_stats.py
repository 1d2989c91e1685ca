"""Loader stats that add up: StreamingDataLoader, BatchLoader and JaxLoader over real MDS datasets.

The samples a loader reports equal those the loop received, per worker and per rank; the loop's
waits are small when the loop is slower than the loader and large when a stage is slowed on
purpose (a registered encoding whose decode sleeps, a loopback HTTP store answering late), and the
slowest stage is named; bytes, cache misses, hits and evictions match what the store served; the
stall warning fires only when the loop waits. Bounds are on ratios and counts, never on speed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from shardstream import (  # noqa: E402
    BatchLoader,
    InvalidArgumentError,
    Stream,
    StreamingDataset,
    World,
    register_encoding,
)
from shardstream.format.customencodings import registered_encodings  # noqa: E402
from shardstream.errors import StatsDisabledError  # noqa: E402
from shardstream.integrations.torch import StreamingDataLoader  # noqa: E402
from shardstream.stats import LoaderStallWarning, StatsConfig  # noqa: E402
from shardstream.stats.report import STAGES  # noqa: E402
from shardstream.testing import write_dataset  # noqa: E402
from shardstream.testing.servers import Faults, RangeHTTPServer  # noqa: E402

pytestmark = [
    pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning"),
    pytest.mark.filterwarnings("ignore:The given NumPy array is not writable:UserWarning"),
]

N = 203  # not a multiple of the batch: the epoch repeats a few samples to fill the last step
BS = 8
EPOCH = -(-N // BS) * BS  # the samples of one rank's epoch
SLOWN = 160  # samples of the slowed dataset (20 batches: the stall check runs every 16)
COLUMNS = {"id": "int", "x": "ndarray:float32:4"}
SLOW_S = 0.003  # seconds the slowed encoding sleeps per sample decoded


class SlowInt:
    """An 8-byte int whose decode sleeps: a decode stage slowed on purpose."""

    size = 8

    def encode(self, value) -> bytes:
        return int(value).to_bytes(8, "little")

    def decode(self, data: bytes) -> int:
        time.sleep(SLOW_S)
        return int.from_bytes(data, "little")


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> str:
    root = tmp_path_factory.mktemp("stats")
    return write_dataset(root / "plain", COLUMNS, ({"id": i, "x": np.full(4, i, np.float32)} for i in range(N)),
                         size_limit=1 << 11)


@pytest.fixture(scope="module")
def slow(tmp_path_factory) -> str:
    """A dataset whose column decodes slowly (an encoding registered for this module's tests only)."""
    register_encoding("stats_test_slow_int", SlowInt)
    try:
        root = tmp_path_factory.mktemp("stats-slow")
        yield write_dataset(root / "slow", {"id": "stats_test_slow_int"}, ({"id": i} for i in range(SLOWN)),
                            size_limit=1 << 9)
    finally:
        del registered_encodings["stats_test_slow_int"]


def ids_of(batch) -> list:
    ids = batch["id"] if isinstance(batch, dict) else batch
    return [int(i) for i in (ids.tolist() if hasattr(ids, "tolist") else ids)]


def check_adds_up(report, loader, ids: list) -> None:
    """The report's totals against the batches the loop received."""
    total = report["total"]
    assert total["samples"] == len(ids)
    assert total["batches"] == len(loader)
    assert sum(w["batches"] for w in total["per_worker"].values()) == total["batches"]
    assert report["window"]["samples"] == len(ids)  # the window (30 s) holds the whole run
    assert set(total["stages"]) == set(STAGES)
    assert json.loads(json.dumps(report)) == json.loads(json.dumps(dict(report)))
    text = str(report)
    for stage in STAGES:
        assert stage in text
    timeline = loader.stats_timeline()
    assert len(timeline["t"]) == total["batches"] and int(timeline["rows"].sum()) == len(ids)


def identity_ids(samples):
    """A user's collate_fn: the ids as a list, whatever it receives (per-sample dicts or a column batch)."""
    if isinstance(samples, dict):
        return [int(i) for i in samples["id"]]
    return [int(s["id"]) for s in samples]


@pytest.mark.parametrize("workers, batch_decode, collate", [
    (0, True, None), (0, False, None), (2, True, None), (2, False, None),
    (0, None, identity_ids), (2, None, identity_ids), (2, True, identity_ids),
])
def test_torch_loader_stats_add_up(data, workers, batch_decode, collate):
    ds = StreamingDataset(local=data, batch_size=BS)
    loader = StreamingDataLoader(ds, batch_size=BS, num_workers=workers, batch_decode=batch_decode,
                                 collate_fn=collate, stats=True)
    ids = [i for batch in loader for i in ids_of(batch)]
    assert set(ids) == set(range(N)) and len(ids) == EPOCH
    report = loader.stats()
    check_adds_up(report, loader, ids)
    labels = set(report["total"]["per_worker"])
    assert labels == ({"main"} if workers == 0 else {"w0", "w1"})
    assert report["num_workers"] == workers and report["loader"] == "StreamingDataLoader"
    assert report["total"]["bytes_fetched"] == 0 and report["total"]["cache_misses"] == 0  # local data
    again = [i for batch in loader for i in ids_of(batch)]  # a second epoch adds to the totals
    assert set(again) == set(range(N))
    assert loader.stats()["total"]["samples"] == 2 * EPOCH


def test_batch_loader_stats_add_up(data):
    loader = BatchLoader(StreamingDataset(local=data, batch_size=BS), stats=True, transform=lambda b: b)
    ids = [i for batch in loader for i in ids_of(batch)]
    assert set(ids) == set(range(N)) and len(ids) == EPOCH
    report = loader.stats()
    check_adds_up(report, loader, ids)
    assert set(report["total"]["per_worker"]) == {"thread"} and report["loader"] == "BatchLoader"


JAX_RUN = """
import json, sys
import numpy as np
from shardstream import StreamingDataset
from shardstream.integrations.jax import JaxLoader
loader = JaxLoader(StreamingDataset(local=sys.argv[1], batch_size=int(sys.argv[2])), stats=True)
ids = [int(i) for batch in loader for i in np.asarray(batch["id"]).tolist()]
report = loader.stats()
print(json.dumps({"ids": ids, "batches": len(loader), "report": report}))
"""


def test_jax_loader_stats_add_up(data):
    """In a process of its own: JAX's threads and the DataLoader workers forked by other tests do not mix."""
    pytest.importorskip("jax")
    out = subprocess.run([sys.executable, "-c", JAX_RUN, data, str(BS)], capture_output=True, text=True,
                         timeout=300, env={**os.environ, "JAX_PLATFORMS": "cpu"})
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    ids, total = got["ids"], got["report"]["total"]
    assert set(ids) == set(range(N)) and len(ids) == EPOCH
    assert total["samples"] == EPOCH and total["batches"] == got["batches"] == EPOCH // BS
    assert got["report"]["loader"] == "JaxLoader" and set(total["per_worker"]) == {"thread"}


def test_each_rank_reports_its_share(data):
    seen = []
    for rank in range(2):
        world = World(ranks_per_node=2, local_rank=rank)
        loader = BatchLoader(StreamingDataset(local=data, batch_size=BS), world=world, stats=True)
        ids = [i for batch in loader for i in ids_of(batch)]
        report = loader.stats()
        assert (report["rank"], report["world_size"]) == (rank, 2)
        check_adds_up(report, loader, ids)
        seen.append(ids)
    assert set(seen[0]) | set(seen[1]) == set(range(N))
    assert len(seen[0]) == len(seen[1]) == -(-N // (2 * BS)) * BS  # each rank's share of the epoch


def test_torch_ranks_from_the_dataset_world(data):
    counts = []
    for rank in range(2):
        ds = StreamingDataset(local=data, batch_size=BS, world=World(ranks_per_node=2, local_rank=rank))
        loader = StreamingDataLoader(ds, batch_size=BS, num_workers=2, stats=True)
        ids = [i for batch in loader for i in ids_of(batch)]
        report = loader.stats()
        assert report["rank"] == rank and report["world_size"] == 2
        check_adds_up(report, loader, ids)
        counts.append(len(ids))
    assert counts == [-(-N // (2 * BS)) * BS] * 2


# -- waits -------------------------------------------------------------------------------------------
def test_a_slow_loop_hardly_waits_and_is_not_warned(data):
    ds = StreamingDataset(local=data, batch_size=BS)
    config = StatsConfig(warmup_s=0, warmup_batches=1)
    loader = StreamingDataLoader(ds, batch_size=BS, num_workers=2, stats=config)
    with warnings.catch_warnings():
        warnings.simplefilter("error", LoaderStallWarning)
        for _ in loader:
            time.sleep(0.02)  # the loop's step: longer than a batch takes to make
    report = loader.stats()
    assert report["total"]["batches"] == len(loader) >= 16
    assert report["total"]["stall_fraction"] < 0.15
    assert report["total"]["wait_s"]["p50"] < report["total"]["step_s"]["mean"] / 2
    assert report["stalled"] is False


@pytest.mark.parametrize("workers", [0, 2])
def test_a_slowed_decode_is_named(slow, workers):
    ds = StreamingDataset(local=slow, batch_size=BS)
    loader = StreamingDataLoader(ds, batch_size=BS, num_workers=workers, collate_fn=identity_ids, stats=True)
    ids = [i for batch in loader for i in ids_of(batch)]
    assert sorted(ids) == list(range(SLOWN))
    report = loader.stats()
    total = report["total"]
    assert total["stall_fraction"] > 0.5
    assert report["slowest_stage"] == "decode" and report["stalled"] is True
    assert "num_workers" in report["advice"]
    # each batch sleeps BS * SLOW_S in decode, in one of the workers
    assert total["stages"]["decode"] >= 0.9 * len(ids) * SLOW_S


def test_a_slowed_decode_in_the_batch_loader_thread_is_named(slow):
    loader = BatchLoader(StreamingDataset(local=slow, batch_size=BS), stats=True)
    for _ in loader:
        pass
    report = loader.stats()
    assert report["total"]["stall_fraction"] > 0.5 and report["slowest_stage"] == "decode"


def slow_collate(batch):
    """A user's collate_fn slowed on purpose."""
    time.sleep(BS * SLOW_S)
    return batch


def test_a_slowed_collate_in_the_workers_is_not_taken_for_transfer(data):
    ds = StreamingDataset(local=data, batch_size=BS)
    loader = StreamingDataLoader(ds, batch_size=BS, num_workers=2, batch_decode=True, collate_fn=slow_collate,
                                 stats=True)
    _epoch(loader)
    report = loader.stats()
    assert report["total"]["stall_fraction"] > 0.5 and report["slowest_stage"] == "collate"
    assert report["total"]["stages"]["transfer"] < report["total"]["stages"]["collate"] / 4


def test_a_slowed_transform_in_the_batch_loader_thread_is_named(data):
    loader = BatchLoader(StreamingDataset(local=data, batch_size=BS), transform=slow_collate, stats=True)
    _epoch(loader)
    report = loader.stats()
    assert report["slowest_stage"] == "transform" and "num_workers" in report["advice"]
    assert report["total"]["stages"]["transform"] >= 0.9 * len(loader) * BS * SLOW_S


def test_the_stall_warning_names_the_slowed_stage(slow):
    ds = StreamingDataset(local=slow, batch_size=BS)
    config = StatsConfig(warmup_s=0, warmup_batches=1)
    loader = StreamingDataLoader(ds, batch_size=BS, collate_fn=identity_ids, stats=config)
    with pytest.warns(LoaderStallWarning, match=r"waited for data .* the slowest stage is decode: .*num_workers"):
        for _ in loader:
            pass


# -- downloads through a slow store ------------------------------------------------------------------
SHARDS = 6


@pytest.fixture
def store(tmp_path):
    root = tmp_path / "www"
    samples = ({"id": i, "p": bytes(80)} for i in range(SHARDS * 40))
    out = write_dataset(root / "data", {"id": "int", "p": "bytes"}, samples, size_limit=1 << 12, hashes=[])
    shard_bytes = {name: os.path.getsize(os.path.join(out, name))
                   for name in os.listdir(out) if name.startswith("shard.")}
    assert len(shard_bytes) == SHARDS
    with RangeHTTPServer(root, faults=Faults(latency_s=0.1)) as server:  # every GET answers 100 ms late
        yield server, f"{server.url}/data", shard_bytes


def _epoch(loader) -> list:
    return [i for batch in loader for i in ids_of(batch)]


def test_a_slowed_download_is_named_and_its_bytes_counted(store, tmp_path):
    server, url, shard_bytes = store
    ds = StreamingDataset(remote=url, local=str(tmp_path / "cache"), predownload=BS, batch_size=BS)
    loader = StreamingDataLoader(ds, batch_size=BS, stats=True)
    served = server.faults.bytes_served
    assert sorted(_epoch(loader)) == list(range(SHARDS * 40))
    report = loader.stats()
    total = report["total"]
    assert report["slowest_stage"] == "download_wait", report["total"]["stages"]
    assert "predownload" in report["advice"]
    assert total["bytes_fetched"] == sum(shard_bytes.values()) == server.faults.bytes_served - served
    assert total["cache_misses"] == total["files_fetched"] == SHARDS
    assert total["stages"]["download"] >= SHARDS * 0.1  # each shard answered 100 ms late
    assert total["evictions"] == 0

    assert sorted(_epoch(loader)) == list(range(SHARDS * 40))  # the cache kept every shard
    second = loader.stats()["total"]
    assert second["cache_misses"] == SHARDS and second["bytes_fetched"] == total["bytes_fetched"]
    assert second["cache_hits"] - total["cache_hits"] >= SHARDS


def test_a_small_cache_limit_counts_evictions(store, tmp_path):
    server, url, shard_bytes = store
    shard = max(shard_bytes.values())
    ds = StreamingDataset(remote=url, local=str(tmp_path / "cache"), cache_limit=3 * shard + 4096,
                          predownload=BS, batch_size=BS)
    loader = BatchLoader(ds, stats=True)
    served = server.faults.bytes_served
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a working-set warning may name the limit
        assert sorted(_epoch(loader)) == list(range(SHARDS * 40))
    total = loader.stats()["total"]
    assert total["evictions"] >= SHARDS - 3
    assert total["cache_misses"] == total["files_fetched"] >= SHARDS
    assert total["bytes_fetched"] == server.faults.bytes_served - served


# -- mixtures ----------------------------------------------------------------------------------------
def test_mixture_streams_delivered_against_targets(tmp_path):
    paths = {tag: write_dataset(tmp_path / tag, {"id": "int", "src": "str"},
                                ({"id": i, "src": tag} for i in range(64)), size_limit=300) for tag in "ab"}
    streams = [Stream(local=paths["a"], proportion=0.75), Stream(local=paths["b"], proportion=0.25)]
    ds = StreamingDataset(streams=streams, batch_size=BS, epoch_size=96)
    loader = StreamingDataLoader(ds, batch_size=BS, num_workers=2, stats=True)
    srcs = [s for batch in loader for s in batch["src"]]
    report = loader.stats()
    got = report["streams"]
    assert list(got) == [paths["a"], paths["b"]]
    assert got[paths["a"]]["delivered"] == srcs.count("a") and got[paths["b"]]["delivered"] == srcs.count("b")
    assert sum(s["delivered"] for s in got.values()) == report["total"]["samples"] == len(srcs) == 96
    for name, s in got.items():
        assert abs(s["delivered"] - s["target"]) <= 1, (name, s)
    assert "streams (delivered / target)" in str(report)


def test_a_single_stream_reports_no_streams(data):
    loader = BatchLoader(StreamingDataset(local=data, batch_size=BS), stats=True)
    _epoch(loader)
    assert loader.stats()["streams"] is None


# -- on, off and bad values --------------------------------------------------------------------------
def test_off_refuses_with_the_fix(data, monkeypatch):
    monkeypatch.delenv("SHARDSTREAM_STATS", raising=False)
    for loader in (StreamingDataLoader(StreamingDataset(local=data, batch_size=BS), batch_size=BS),
                   BatchLoader(StreamingDataset(local=data, batch_size=BS), stats=False)):
        _epoch(loader)
        with pytest.raises(StatsDisabledError, match=r"stats=True.*SHARDSTREAM_STATS=1"):
            loader.stats()
        with pytest.raises(RuntimeError, match="keeps no stats"):
            loader.stats_timeline()


def test_the_environment_turns_stats_on(data, monkeypatch):
    monkeypatch.setenv("SHARDSTREAM_STATS", "1")
    loader = StreamingDataLoader(StreamingDataset(local=data, batch_size=BS), batch_size=BS)
    assert loader.stats()["total"]["batches"] == 0  # on before the first batch
    ids = _epoch(loader)
    check_adds_up(loader.stats(), loader, ids)
    off = BatchLoader(StreamingDataset(local=data, batch_size=BS), stats=False)  # the keyword wins
    with pytest.raises(StatsDisabledError):
        off.stats()


@pytest.mark.parametrize("value", ["yes", 1, 0.5, {"window_s": 5}, object()])
def test_bad_stats_values_are_refused(data, value):
    ds = StreamingDataset(local=data, batch_size=BS)
    with pytest.raises(InvalidArgumentError, match=r"stats=.* must be True, False, a list of exporters"):
        StreamingDataLoader(ds, batch_size=BS, stats=value)
    with pytest.raises(InvalidArgumentError):
        BatchLoader(ds, stats=value)


@pytest.mark.parametrize("fields, match", [
    ({"window_s": 0}, "window_s=0 must be"), ({"window_s": "30"}, "window_s='30'"),
    ({"stall_warning": 1.5}, "stall_warning=1.5 must be a fraction"), ({"stall_warning": 0}, "stall_warning=0"),
    ({"warmup_batches": -1}, "warmup_batches=-1"), ({"warmup_batches": 2.5}, "warmup_batches=2.5"),
    ({"warmup_s": -1}, "warmup_s=-1"), ({"warn_every_s": "often"}, "warn_every_s='often'"),
    ({"exporters": [object()]}, "has no export"),
])
def test_bad_config_fields_are_refused(fields, match):
    with pytest.raises(InvalidArgumentError, match=match):
        StatsConfig(**fields)


def test_exporters_as_a_list_are_called(data):
    class Keep:
        every = 0.0

        def __init__(self):
            self.reports, self.closed = [], False

        def export(self, report):
            self.reports.append(json.dumps(report))

        def close(self):
            self.closed = True

    keep = Keep()
    loader = BatchLoader(StreamingDataset(local=data, batch_size=BS), stats=[keep])
    ids = _epoch(loader)
    loader.close_stats()
    assert keep.closed and len(keep.reports) >= len(loader)
    assert json.loads(keep.reports[-1])["total"]["samples"] == len(ids)


# -- resume ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("workers", [0, 2])
def test_resume_is_unchanged_with_stats_on(data, workers):
    def make(stats):
        ds = StreamingDataset(local=data, batch_size=BS, shuffle=True, shuffle_seed=7)
        return StreamingDataLoader(ds, batch_size=BS, num_workers=workers, stats=stats)

    whole = [ids_of(b) for b in make(False)]
    k = 7
    first = make(True)
    it = iter(first)
    head = [ids_of(next(it)) for _ in range(k)]
    state = first.state_dict()
    del it
    resumed = make(True)
    resumed.load_state_dict(state)
    rest = [ids_of(b) for b in resumed]
    assert head + rest == whole
    assert first.stats()["total"]["batches"] == k
    assert resumed.stats()["total"]["samples"] == sum(map(len, rest))
