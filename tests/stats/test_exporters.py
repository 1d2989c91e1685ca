"""Stats exporters tested for real: a loader over an MDS dataset in a temporary directory, each exporter
read back the way its consumer reads it (the JSON Lines file; the Prometheus endpoint scraped over HTTP
on 127.0.0.1; the TensorBoard event file through TensorBoard's own reader; log records)."""

from __future__ import annotations

import json
import logging
import socket
import time
import urllib.error
import urllib.request

import numpy as np
import pytest

from shardstream import BatchLoader, MDSWriter, StreamingDataset
from shardstream.errors import ExportPathError, InvalidArgumentError, PortInUseError
from shardstream.stats import StatsConfig
from shardstream.stats.exporters import JsonLinesExporter, LoggingExporter, PrometheusExporter, TensorBoardExporter

N, BATCH = 600, 10


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> str:
    out = str(tmp_path_factory.mktemp("stats") / "ds")
    with MDSWriter(out=out, columns={"id": "int", "x": "ndarray:uint8:64"}, size_limit=8000) as w:
        for i in range(N):
            w.write({"id": i, "x": np.full(64, i % 256, np.uint8)})
    return out


def run_epoch(data: str, stats, transform=None) -> BatchLoader:
    loader = BatchLoader(StreamingDataset(local=data, batch_size=BATCH, shuffle=False), stats=stats,
                         transform=transform)
    seen = sum(len(batch["id"]) for batch in loader)
    assert seen == N
    return loader


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# -- JSON Lines -------------------------------------------------------------------------------------

def test_json_lines_file_adds_up_to_the_epoch(data, tmp_path):
    path = tmp_path / "stats.jsonl"
    loader = run_epoch(data, [JsonLinesExporter(path, every=0)])
    loader.close_stats()
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(rows) == N // BATCH + 1  # one after every batch, and the last one at close
    last = rows[-1]
    assert last["total"]["samples"] == N and last["total"]["batches"] == N // BATCH
    assert sum(w["batches"] for w in last["total"]["per_worker"].values()) == N // BATCH
    assert [r["total"]["samples"] for r in rows[:-1]] == list(range(BATCH, N + 1, BATCH))
    times = [r["time"] for r in rows]
    assert times == sorted(times) and abs(times[-1] - time.time()) < 3600
    assert last["loader"] == "BatchLoader" and last["rank"] == 0 and last["world_size"] == 1
    # appends: a second run adds its lines after the first's
    run_epoch(data, [JsonLinesExporter(path, every=3600)]).close_stats()
    again = path.read_text().splitlines()
    assert len(again) == len(rows) + 2 and json.loads(again[-1])["total"]["samples"] == N


def test_json_lines_names_the_slowed_stage(data, tmp_path):
    def slow(batch):
        time.sleep(0.005)
        return batch

    path = tmp_path / "stats.jsonl"
    run_epoch(data, [JsonLinesExporter(str(path), every=3600)], transform=slow).close_stats()
    last = json.loads(path.read_text().splitlines()[-1])
    assert last["slowest_stage"] == "transform"
    assert last["total"]["stages"]["transform"] >= 0.005 * (N // BATCH)


def test_json_lines_refuses_a_missing_directory(tmp_path):
    with pytest.raises(ExportPathError, match="does not exist") as err:
        JsonLinesExporter(tmp_path / "missing" / "stats.jsonl")
    assert isinstance(err.value, FileNotFoundError)


# -- Prometheus -------------------------------------------------------------------------------------

def scrape(port: int) -> dict:
    from prometheus_client.parser import text_string_to_metric_families

    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples}


def test_prometheus_endpoint_serves_the_stats(data):
    pytest.importorskip("prometheus_client")
    port = free_port()
    exporter = PrometheusExporter(port, every=0)
    assert exporter.port == port
    try:
        assert not [k for k in scrape(port) if k[0].startswith("shardstream_")]  # nothing before the first batch
        loader = run_epoch(data, [exporter])
        got = scrape(port)
        base = (("loader", "BatchLoader"), ("rank", "0"))
        assert got[("shardstream_samples_total", base)] == N
        assert got[("shardstream_batches_total", base)] == N // BATCH
        assert got[("shardstream_worker_batches_total", (*base, ("worker", "thread")))] == N // BATCH
        assert got[("shardstream_stage_seconds_total", (("loader", "BatchLoader"), ("rank", "0"),
                                                       ("stage", "decode")))] > 0
        assert got[("shardstream_samples_per_second", base)] > 0
        assert 0 <= got[("shardstream_stall_fraction", base)] <= 1
        assert ("shardstream_loop_wait_seconds", (base[0], ("quantile", "0.95"), base[1])) in got
    finally:
        exporter.close()
    with pytest.raises(urllib.error.URLError):
        scrape(port)  # close() stopped the endpoint


def test_prometheus_port_in_use_is_a_typed_error():
    pytest.importorskip("prometheus_client")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(PortInUseError, match=f"port {port} is already in use") as err:
            PrometheusExporter(port)
        assert isinstance(err.value, OSError)


def test_prometheus_in_a_registry_of_your_own():
    prometheus_client = pytest.importorskip("prometheus_client")
    registry = prometheus_client.CollectorRegistry()
    exporter = PrometheusExporter(None, registry=registry)
    assert exporter.port is None
    with pytest.raises(InvalidArgumentError, match="registry"):
        PrometheusExporter(None)
    exporter.close()


# -- TensorBoard ------------------------------------------------------------------------------------

def read_scalars(log_dir) -> dict:
    ea = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
    acc = ea.EventAccumulator(str(log_dir))
    acc.Reload()
    return {tag: acc.Scalars(tag) for tag in acc.Tags()["scalars"]}


def test_tensorboard_event_file_holds_the_scalars(data, tmp_path):
    pytest.importorskip("tensorboard")
    run_epoch(data, [TensorBoardExporter(tmp_path / "tb", every=0)]).close_stats()
    scalars = read_scalars(tmp_path / "tb")
    samples = scalars["shardstream/samples"]
    assert samples[-1].value == N and samples[-1].step == N // BATCH
    assert [e.step for e in samples[:-1]] == list(range(1, N // BATCH + 1))
    assert {"shardstream/samples_per_s", "shardstream/stall_fraction", "shardstream/wait_p95_s",
            "shardstream/stage_s/decode", "shardstream/cache_hits", "shardstream/evictions"} <= set(scalars)
    assert scalars["shardstream/samples_per_s"][-1].value > 0


def test_tensorboard_through_a_summary_writer_of_your_own(data, tmp_path):
    pytest.importorskip("tensorboard")
    tb = pytest.importorskip("torch.utils.tensorboard")
    writer = tb.SummaryWriter(str(tmp_path / "run"))
    run_epoch(data, [TensorBoardExporter(writer=writer, every=3600, prefix="data/")]).close_stats()
    writer.add_scalar("loss", 1.0, 0)  # still open: the exporter flushed it and left it to its owner
    writer.close()
    scalars = read_scalars(tmp_path / "run")
    assert scalars["data/samples"][-1].value == N and "loss" in scalars


def test_tensorboard_refuses_both_or_neither_output(tmp_path):
    with pytest.raises(InvalidArgumentError, match="exactly one"):
        TensorBoardExporter()
    with pytest.raises(InvalidArgumentError, match="add_scalar"):
        TensorBoardExporter(writer=object())


# -- logging, and exporters that fail ---------------------------------------------------------------

def test_logging_exporter_writes_one_line_per_export(data, caplog):
    caplog.set_level(logging.INFO, logger="shardstream.stats")
    run_epoch(data, [LoggingExporter(every=0)]).close_stats()
    lines = [r.getMessage() for r in caplog.records if r.name == "shardstream.stats" and r.levelno == logging.INFO]
    assert len(lines) == N // BATCH + 1
    assert all("samples/s" in line and "stall" in line and "wait p95" in line for line in lines)
    assert all(" slowest stage " in line for line in lines)


class Broken:
    every = 0.0

    def __init__(self):
        self.calls = self.closed = 0

    def export(self, report):
        self.calls += 1
        raise RuntimeError("the metrics backend is down")

    def close(self):
        self.closed += 1


def test_an_exporter_that_raises_is_logged_once_and_disabled(data, tmp_path, caplog):
    broken, path = Broken(), tmp_path / "stats.jsonl"
    run_epoch(data, StatsConfig(exporters=[broken, JsonLinesExporter(path, every=0)])).close_stats()
    assert broken.calls == 1 and broken.closed == 1
    errors = [r for r in caplog.records if r.levelno == logging.ERROR and "metrics backend" in r.exc_text]
    assert len(errors) == 1 and "disabled" in errors[0].getMessage()
    assert len(path.read_text().splitlines()) == N // BATCH + 1  # the other exporter went on


@pytest.mark.parametrize("every", [-1, float("nan"), True, "10"])
def test_every_must_be_seconds(every, tmp_path):
    with pytest.raises(InvalidArgumentError, match="every"):
        LoggingExporter(every=every)
    with pytest.raises(InvalidArgumentError, match="every"):
        JsonLinesExporter(tmp_path / "s.jsonl", every=every)


def test_json_lines_of_a_dataloader_with_workers(data, tmp_path):
    torch_mod = pytest.importorskip("shardstream.integrations.torch")
    path = tmp_path / "stats.jsonl"
    ds = StreamingDataset(local=data, batch_size=BATCH, shuffle=False)
    loader = torch_mod.StreamingDataLoader(ds, batch_size=BATCH, num_workers=2, stats=[JsonLinesExporter(path)])
    assert sum(len(batch["id"]) for batch in loader) == N
    loader.close_stats()
    last = json.loads(path.read_text().splitlines()[-1])
    assert last["total"]["samples"] == N and last["num_workers"] == 2
    per_worker = last["total"]["per_worker"]
    assert set(per_worker) == {"w0", "w1"}  # the stats came with the batches from each worker process
    assert sum(w["batches"] for w in per_worker.values()) == N // BATCH
