"""``PrometheusExporter``: loader stats on a Prometheus endpoint (``shardstream[prometheus]``).

A collector registered in a ``prometheus_client`` registry answers each scrape from the last
report exported (every ``every`` seconds), so a scrape never waits for the loader. Metrics
are named ``shardstream_...`` and labelled with the loader's ``rank`` and ``loader`` (its class),
and ``stage``, ``worker``, ``stream`` or ``quantile`` where they apply:

- gauges over the stats window: ``shardstream_samples_per_second``,
  ``shardstream_batches_per_second``, ``shardstream_stall_fraction``,
  ``shardstream_loop_wait_seconds{quantile="0.5"|"0.95"|"1"}``, ``shardstream_shards_in_flight``,
  ``shardstream_prefetch_depth``, ``shardstream_stream_target_samples{stream}``;
- counters since the start: ``shardstream_batches_total``, ``shardstream_samples_total``,
  ``shardstream_stage_seconds_total{stage}``, ``shardstream_worker_stage_seconds_total{worker,stage}``,
  ``shardstream_worker_batches_total{worker}``, ``shardstream_bytes_fetched_total``,
  ``shardstream_files_fetched_total``, ``shardstream_cache_hits_total``,
  ``shardstream_cache_misses_total``, ``shardstream_evictions_total``,
  ``shardstream_stream_samples_total{stream}``.
"""

from __future__ import annotations

import errno
from typing import Any, Iterator, Optional

from ..errors import InvalidArgumentError, PortInUseError, require
from .exporters_common import COUNTS, check_every
from .report import STAGES

_WINDOW_GAUGES = (("samples_per_s", "samples_per_second", "Samples handed to the loop per second (window)"),
                  ("batches_per_s", "batches_per_second", "Batches handed to the loop per second (window)"),
                  ("stall_fraction", "stall_fraction",
                   "Fraction of the time the training loop waited for data (window)"))


class _Collector:
    """Metric families built from the last report (none before the first export)."""

    def __init__(self, metrics: Any) -> None:
        self._m = metrics  # prometheus_client.core
        self.report: Optional[dict] = None

    def describe(self) -> list:
        return []  # no fixed names: several loaders' collectors may share one registry

    def _family(self, kind: str, name: str, doc: str, labels: tuple = ()):
        cls = self._m.GaugeMetricFamily if kind == "gauge" else self._m.CounterMetricFamily
        return cls(f"shardstream_{name}", doc, labels=["rank", "loader", *labels])

    def collect(self) -> Iterator[Any]:
        r = self.report
        if r is None:
            return
        base = [str(r["rank"]), str(r["loader"])]
        w, t = r["window"], r["total"]
        for key, name, doc in _WINDOW_GAUGES:
            fam = self._family("gauge", name, doc)
            fam.add_metric(base, w[key])
            yield fam
        fam = self._family("gauge", "loop_wait_seconds", "The training loop's wait per batch (window)", ("quantile",))
        for q, key in (("0.5", "p50"), ("0.95", "p95"), ("1", "max")):
            fam.add_metric([*base, q], w["wait_s"][key])
        yield fam
        for key in ("shards_in_flight", "prefetch_depth"):
            fam = self._family("gauge", key, f"{key.replace('_', ' ').capitalize()} now, all workers")
            fam.add_metric(base, r.get(key, 0))
            yield fam
        for key in COUNTS:
            fam = self._family("counter", key, f"{key.replace('_', ' ').capitalize()} since the start")
            fam.add_metric(base, t[key])
            yield fam
        yield from self._stages(base, t)
        yield from self._streams(base, r.get("streams"))

    def _stages(self, base: list, t: dict) -> Iterator[Any]:
        fam = self._family("counter", "stage_seconds", "Seconds spent in each stage, all workers", ("stage",))
        for stage in STAGES:
            fam.add_metric([*base, stage], t["stages"][stage])
        yield fam
        per = self._family("counter", "worker_stage_seconds", "Seconds spent in each stage per worker",
                           ("worker", "stage"))
        batches = self._family("counter", "worker_batches", "Batches made by each worker", ("worker",))
        for worker, figures in t["per_worker"].items():
            batches.add_metric([*base, worker], figures["batches"])
            for stage in STAGES:
                per.add_metric([*base, worker, stage], figures[f"{stage}_s"])
        yield per
        yield batches

    def _streams(self, base: list, streams: Optional[dict]) -> Iterator[Any]:
        if not streams:
            return
        got = self._family("counter", "stream_samples", "Samples delivered from each stream", ("stream",))
        target = self._family("gauge", "stream_target_samples",
                              "Samples the mixture's schedule asks of each stream so far", ("stream",))
        for name, s in streams.items():
            got.add_metric([*base, str(name)], s["delivered"])
            target.add_metric([*base, str(name)], s["target"])
        yield got
        yield target


class PrometheusExporter:
    """Serves the loader's stats for Prometheus to scrape at ``http://addr:port/metrics`` (see the module
    docstring for the metrics). ``port=0`` lets the system choose a free port (read it from ``.port``).

    ``registry``: a ``prometheus_client.CollectorRegistry`` to register in (default: a new one of this
    exporter's own); with a registry, ``port=None`` starts no endpoint (you serve the registry, for
    example next to your own metrics). ``close()`` stops the endpoint and unregisters the metrics."""

    def __init__(self, port: Optional[int], addr: str = "127.0.0.1", every: float = 5.0,
                 registry: Any = None) -> None:
        self.every = check_every(every, "PrometheusExporter")
        if port is None and registry is None:
            raise InvalidArgumentError(
                "PrometheusExporter(port=None) starts no endpoint, so it needs registry=... that you serve; "
                "give a port (0: any free one) to serve the metrics here")
        if port is not None and (isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535):
            raise InvalidArgumentError(f"PrometheusExporter(port={port!r}): port must be an int in 0..65535 "
                                       "(0: a free port chosen by the system) or None")
        if not isinstance(addr, str):
            raise InvalidArgumentError(f"PrometheusExporter(addr={addr!r}): addr must be a host address string")
        client = require("prometheus_client", "prometheus", "PrometheusExporter")
        core = require("prometheus_client.core", "prometheus", "PrometheusExporter")
        self.registry = client.CollectorRegistry() if registry is None else registry
        self._collector = _Collector(core)
        self.registry.register(self._collector)
        self.addr = addr
        self.port: Optional[int] = None
        self._server = self._thread = None
        if port is not None:
            self._serve(client, port, addr)

    def _serve(self, client: Any, port: int, addr: str) -> None:
        try:
            self._server, self._thread = client.start_http_server(port, addr=addr, registry=self.registry)
        except OSError as exc:
            self.registry.unregister(self._collector)
            if exc.errno == errno.EADDRINUSE:
                raise PortInUseError(
                    f"PrometheusExporter(port={port}, addr={addr!r}): port {port} is already in use; choose "
                    "another port (one per process: for example a base port + the local rank), or port=0 "
                    "for any free one") from exc
            raise PortInUseError(
                f"PrometheusExporter(port={port}, addr={addr!r}): could not listen there ({exc}); "
                "check the address, or choose another port") from exc
        self.port = int(self._server.server_address[1])

    def export(self, report: dict) -> None:
        collector = self._collector
        if collector is not None:  # one reference swap: a scrape sees the old report or the new one
            collector.report = report

    def close(self) -> None:
        """Stop the HTTP endpoint (if this exporter started one) and unregister the metrics."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._thread.join(timeout=5)
            self._server = self._thread = None
        if self._collector is not None:
            self.registry.unregister(self._collector)
            self._collector = None
