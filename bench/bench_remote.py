"""Streaming from a loopback S3 server: shardstream vs mosaicml-streaming, cold and warm cache.

    .venv/bin/python bench/bench_remote.py [--samples 614400] [--out remote.md] [--json remote.json]

(``--peer-python`` defaults to ``.venv-peers/bin/python``; ``--help`` lists the options.)

The driver (this file, project venv) writes the mixed workload of ``bench/common.py``
(fixed seed, ~1.2 KB samples) once with shardstream's ``MDSWriter``, uploads it to a
bucket of ONE moto S3 server (:class:`shardstream.testing.servers.S3Server`, in this
process) and puts a counting reverse proxy (:class:`~shardstream.testing.servers.FaultProxy`,
no faults) in front of it, so the bytes each run downloads are counted on the server
side. Each measurement then runs in its own subprocess, one after the other:

- ``cold``: an empty local cache directory;
- ``warm``: the same directory, filled by the cold run, in a NEW process;

and each times the dataset constructor + the first sample (*time to first sample*) and
the constructor + the whole epoch (*epoch samples/s* = samples / that time), checking
the sample count and a checksum of every sample against the source data. The time to
first sample is then taken again in a few more processes per library and cache state
that stop after the first sample (the libraries alternating), and reported as a median.
shardstream's runs are ``python bench/bench_remote.py --child CONFIG``, mosaicml-streaming's
``bench/bench_remote_mosaic.py CONFIG`` in the peer venv. Extra runs: shardstream with
``download_threads=1`` (cold), and node 0 of a 2-node world for both libraries
(``RANK=0 WORLD_SIZE=2 LOCAL_WORLD_SIZE=1``, cold), to see how much of the dataset one
node downloads.

``bench/run.py`` can call :func:`run_remote` and :func:`markdown`.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shlex
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
if HERE not in sys.path:
    sys.path.insert(0, HERE)
import common
from common import get, log

BUCKET = "bench-remote"
PREFIX = "mixed"
DEFAULT_SAMPLES = 614_400  # ~740 MB; 1,200 global batches of 2 x 256: no padded tail, on one node or two
DEFAULT_SHARD_BYTES = 1 << 26  # mosaicml-streaming's default size_limit (64 MiB)
TARGET_EPOCH_RATIO = 3.0
RUN_TIMEOUT_S = 900


# -- measuring (runs in the children, either venv: stdlib + numpy only) -----------------------
def measure_epoch(open_dataset: Callable[[], Any], first_only: bool = False,
                  stop: Callable[[Any], None] | None = None) -> tuple[Any, dict]:
    """Construct a dataset with ``open_dataset()`` and iterate one epoch, touching every sample as
    ``common.touch_all`` does. Times are from just before the constructor. ``first_only``: stop after
    the first sample (the iterator is closed, then ``stop(ds)`` is called to end background work)."""
    t0 = time.perf_counter()
    ds = open_dataset()
    t_open = time.perf_counter()
    it = iter(ds)
    s = next(it)
    t_first = time.perf_counter()
    if first_only:
        it.close()
        if stop is not None:
            stop(ds)
        return ds, {"count": 1, "open_s": t_open - t0, "first_sample_s": t_first - t0}
    acc = len(s["tokens"]) + int(s["label"])
    n = 1
    for s in it:
        acc += len(s["tokens"]) + s["label"]
        n += 1
    t_end = time.perf_counter()
    epoch = t_end - t0
    return ds, {"count": n, "checksum": int(acc), "open_s": t_open - t0, "first_sample_s": t_first - t0,
                "epoch_s": epoch, "samples_per_s": n / epoch,
                "iterate_samples_per_s": (n - 1) / (t_end - t_first) if t_end > t_first else None}


def load_config(path: str) -> dict:
    with open(path) as f:
        return json.load(f)


def _shardstream_child(config_path: str) -> None:
    import numpy as np

    import shardstream
    from shardstream import StreamingDataset

    cfg = load_config(config_path)
    log(f"shardstream {shardstream.__version__}: {cfg['name']} ({cfg['phase']}), local {cfg['local']}")

    def open_dataset():
        return StreamingDataset(remote=cfg["remote"], local=cfg["local"], storage_options=cfg["storage_options"],
                                batch_size=cfg["batch_size"], shuffle=False, predownload=None, cache_limit=None,
                                download_threads=cfg["download_threads"])

    ds, res = measure_epoch(open_dataset, cfg["first_only"])
    if cfg["first_only"]:
        log(f"{cfg['name']} ({cfg['phase']}): first sample {res['first_sample_s']:.2f}s")
        common.emit(res, cfg["out"])
        return
    fetcher = ds.table.stores[0].fetcher
    res.update({"library": "shardstream", "version": shardstream.__version__, "numpy": np.__version__,
                "python": platform.python_version(), "predownload": ds.predownload,
                "download_threads": ds.download_threads, "fetched_files": fetcher.files,
                "fetched_bytes": fetcher.bytes, "local_bytes": common.dir_bytes(cfg["local"])})
    log(f"{cfg['name']} ({cfg['phase']}): first sample {res['first_sample_s']:.2f}s, "
        f"{res['samples_per_s']:,.0f} samples/s, {res['count']:,} samples, fetched {fetcher.bytes / 1e6:,.1f} MB")
    common.emit(res, cfg["out"])


# -- the driver ---------------------------------------------------------------------------------
def machine_info() -> dict:
    info: dict[str, Any] = {"cpu": platform.processor() or "unknown", "logical_cpus": os.cpu_count(),
                            "usable_cpus": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
                            else None, "os": f"{platform.system()} {platform.release()}",
                            "python": platform.python_version()}
    for path, key, fn in (("/proc/cpuinfo", "model name", lambda v: ("cpu", v.strip())),
                          ("/proc/meminfo", "MemTotal", lambda v: ("ram_gib", int(v.split()[0]) / 2**20))):
        try:
            with open(path) as f:
                for line in f:
                    if line.startswith(key):
                        k, v = fn(line.split(":", 1)[1])
                        info[k] = v
                        break
        except OSError:
            pass
    return info


def _loadavg() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "n/a"


def write_dataset(src: str, samples: int, shard_bytes: int) -> dict:
    """Generate the mixed workload and write it with shardstream's MDSWriter (uncompressed)."""
    from shardstream import MDSWriter

    npz = os.path.join(os.path.dirname(src), "mixed.npz")
    common.generate_mixed(npz, samples)
    mixed = common.Mixed(npz)
    with MDSWriter(out=src, columns=common.MIXED_COLUMNS, size_limit=shard_bytes, exist_ok=True) as w:
        write = w.write
        for s in mixed.samples():
            write(s)
    files = [f for f in os.listdir(src) if os.path.isfile(os.path.join(src, f))]
    info = {"samples": mixed.n, "checksum": mixed.expect_touch(), "payload_bytes": mixed.payload_bytes,
            "dataset_bytes": common.dir_bytes(src), "shards": sum(f.endswith(".mds") for f in files),
            "files": len(files), "shard_size_limit": shard_bytes}
    os.unlink(npz)
    return info


class _Runner:
    """Runs one measurement per subprocess against the proxy and records what the server sent."""

    def __init__(self, work: str, peer_python: str | None, server, proxy, batch_size: int) -> None:
        self.work, self.peer_python, self.server, self.proxy = work, peer_python, server, proxy
        self.batch_size = batch_size
        self.remote = f"s3://{BUCKET}/{PREFIX}"
        self.probes: dict[str, int] = {}

    def env(self, side: str, world: dict | None) -> dict:
        env = {k: v for k, v in os.environ.items()
               if k not in ("RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "LOCAL_RANK", "NODE_RANK", "GROUP_RANK",
                            "MASTER_ADDR", "MASTER_PORT")}
        env.update(self.server.env)
        env["S3_ENDPOINT_URL"] = env["AWS_ENDPOINT_URL"] = self.proxy.url  # every byte through the counter
        env["PYTHONUNBUFFERED"] = "1"
        env.update(world or {})
        if side == "mosaic":
            tmp = os.path.join(self.work, "tmp-mosaic")
            os.makedirs(tmp, exist_ok=True)
            env["TMPDIR"] = tmp  # streaming leaves filelock files there
            stubs = os.path.join(ROOT, "tests", "peer_stubs")
            env["PYTHONPATH"] = stubs + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        return env

    def run(self, side: str, name: str, phase: str, local: str, threads: int = 4,
            world: dict | None = None, first_only: bool = False) -> dict:
        tag = f"{name}-{phase}"
        if first_only:
            self.probes[tag] = self.probes.get(tag, 0) + 1
            tag += f"-first{self.probes[tag]}"
        out = os.path.join(self.work, f"result-{tag}.json")
        cfg = {"name": name, "phase": phase, "remote": self.remote, "local": local,
               "storage_options": self.server.options_for(self.proxy.url), "batch_size": self.batch_size,
               "download_threads": threads, "first_only": first_only, "out": out}
        cfg_path = os.path.join(self.work, f"config-{tag}.json")
        with open(cfg_path, "w") as f:
            json.dump(cfg, f)
        if side == "shardstream":
            cmd = [sys.executable, os.path.abspath(__file__), "--child", cfg_path]
        else:
            cmd = [self.peer_python, os.path.join(HERE, "bench_remote_mosaic.py"), cfg_path]
        err_log = os.path.join(self.work, f"stderr-{tag}.log")
        self.proxy.faults.clear()
        log(f"== {tag}: {' '.join(shlex.quote(c) for c in cmd)}" + (f" with {world}" if world else ""))
        start = time.perf_counter()
        try:
            with open(err_log, "w") as err:
                proc = subprocess.run(cmd, env=self.env(side, world), cwd=ROOT, stderr=err, check=False,
                                      timeout=RUN_TIMEOUT_S)
            code: Any = proc.returncode
        except subprocess.TimeoutExpired:
            code = f"timed out after {RUN_TIMEOUT_S} s"
        wall = time.perf_counter() - start
        served, requests = self.proxy.faults.bytes_served, self.proxy.faults.requests
        if code != 0 or not os.path.exists(out):
            with open(err_log) as f:
                tail = f.read()[-3000:]
            log(f"!! {tag} failed ({code}); stderr tail:\n{tail}")
            return {"error": f"exit status {code}", "stderr_tail": tail, "wall_s": wall,
                    "server_bytes": served, "world": world}
        with open(out) as f:
            res = json.load(f)
        res.update({"wall_s": wall, "server_bytes": served, "get_requests": sum(requests.values()),
                    "world": world})
        if first_only:
            log(f"== {tag} done in {wall:.1f}s: first sample {res['first_sample_s']:.2f}s")
        else:
            log(f"== {tag} done in {wall:.1f}s: first sample {res['first_sample_s']:.2f}s, "
                f"{res['samples_per_s']:,.0f} samples/s, server sent {served / 1e6:,.1f} MB "
                f"in {res['get_requests']} GETs")
        return res


def run_remote(work_dir: str, peer_python: str | None, samples: int = DEFAULT_SAMPLES, *,
               batch_size: int = 256, shard_bytes: int = DEFAULT_SHARD_BYTES, first_repeats: int = 4,
               threads_row: bool = True, nodes: bool = True, keep_data: bool = False) -> dict:
    """Run the whole remote benchmark and return its raw results (see :func:`markdown`).

    ``peer_python`` None (or a missing file) skips mosaicml-streaming. ``samples`` is rounded up to
    a multiple of ``2 * batch_size`` so that neither library pads the epoch, on one node or two.
    ``first_repeats``: extra processes per side and cache state that only take the first sample,
    alternating between the libraries, so that the time to first sample is a median, not one run.
    """
    from shardstream.testing.servers import S3Server

    total_start = time.perf_counter()
    step = 2 * batch_size
    samples = -(-samples // step) * step
    work = os.path.abspath(work_dir)
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    have_peer = bool(peer_python) and os.path.exists(peer_python)
    R: dict = {"date": datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z"),
               "machine": machine_info(), "loadavg_before": _loadavg(),
               "config": {"samples": samples, "batch_size": batch_size, "seed": common.SEED,
                          "bucket": f"s3://{BUCKET}/{PREFIX}", "peer_python": peer_python if have_peer else None,
                          "first_repeats": first_repeats},
               "runs": {}}
    try:
        t = time.perf_counter()
        src = os.path.join(work, "src")
        R["dataset"] = write_dataset(src, samples, shard_bytes)
        R["generate_s"] = time.perf_counter() - t
        d = R["dataset"]
        log(f"wrote {d['samples']:,} samples, {d['shards']} shards, {d['dataset_bytes'] / 1e6:,.1f} MB "
            f"in {R['generate_s']:.1f}s")
        with S3Server() as server, server.proxy() as proxy:
            server.make_bucket(BUCKET)
            t = time.perf_counter()
            server.upload_dir(src, f"s3://{BUCKET}/{PREFIX}")
            R["upload_s"] = time.perf_counter() - t
            log(f"uploaded to {server.endpoint_url} in {R['upload_s']:.1f}s; proxy {proxy.url}")
            shutil.rmtree(src)
            runner = _Runner(work, peer_python, server, proxy, batch_size)
            runs = R["runs"]
            cache = os.path.join(work, "cache")

            def pair(side: str, name: str, threads: int = 4, warm: bool = True) -> None:
                local = os.path.join(cache, name)
                runs[name] = {"cold": runner.run(side, name, "cold", local, threads)}
                if warm and "error" not in runs[name]["cold"]:
                    runs[name]["warm"] = runner.run(side, name, "warm", local, threads)

            sides = ("shardstream", "mosaic") if have_peer else ("shardstream",)
            for side in sides:
                pair(side, side)
            # Time to first sample again, in alternation: cold in a fresh directory each time, warm in the
            # directory of the epoch runs above.
            for k in range(first_repeats):
                for phase in ("cold", "warm"):
                    for side in sides:
                        if "error" in runs[side].get(phase, {"error": 1}):
                            continue
                        local = os.path.join(cache, side if phase == "warm" else f"{side}-first{k}")
                        r = runner.run(side, side, phase, local, first_only=True)
                        if "error" in r:
                            runs[side][phase].setdefault("first_errors", []).append(r["stderr_tail"])
                        else:
                            runs[side][phase].setdefault("first_runs", []).append(r["first_sample_s"])
                        if phase == "cold":
                            shutil.rmtree(local, ignore_errors=True)
            for side in sides:
                shutil.rmtree(os.path.join(cache, side), ignore_errors=True)
            if threads_row:
                pair("shardstream", "shardstream-threads1", threads=1, warm=False)
                shutil.rmtree(os.path.join(cache, "shardstream-threads1"), ignore_errors=True)
            if nodes:
                world = {"RANK": "0", "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "1", "LOCAL_RANK": "0",
                         "NODE_RANK": "0", "GROUP_RANK": "0"}
                for side in ("shardstream", "mosaic") if have_peer else ("shardstream",):
                    name = f"{side}-node0of2"
                    local = os.path.join(cache, name)
                    runs[name] = {"cold": runner.run(side, name, "cold", local, world=world)}
                    shutil.rmtree(local, ignore_errors=True)
    finally:
        if not keep_data:
            shutil.rmtree(work, ignore_errors=True)
    R["loadavg_after"] = _loadavg()
    R["total_s"] = time.perf_counter() - total_start
    _check(R)
    return R


def _check(R: dict) -> None:
    """Record, per run, whether it yielded exactly the dataset (count and checksum)."""
    d = R["dataset"]
    for name, phases in R["runs"].items():
        for r in phases.values():
            if "error" in r:
                continue
            if r.get("world"):  # node 0's share: half of the samples (no padding: samples % (2 * batch) == 0)
                r["ok"] = r["count"] == d["samples"] // int(r["world"]["WORLD_SIZE"])
            else:
                r["ok"] = r["count"] == d["samples"] and r["checksum"] == d["checksum"]
            if not r["ok"]:
                log(f"!! {name}: {r['count']:,} samples, checksum {r['checksum']} "
                    f"(dataset: {d['samples']:,} samples, checksum {d['checksum']})")


# -- the report -----------------------------------------------------------------------------------
def _s(x) -> str:
    return "n/a" if x is None else f"{x:.2f}"


def _sps(x) -> str:
    return "n/a" if x is None else f"{x:,.0f}"


def _mb(x) -> str:
    return "n/a" if x is None else f"{x / 1e6:,.1f}"


def _ratio(a, b) -> str:
    return "n/a" if not a or not b else f"{a / b:.2f}x"


NAMES = {"shardstream": "shardstream (download_threads=4)", "mosaic": "mosaicml-streaming",
         "shardstream-threads1": "shardstream (download_threads=1)"}


def first_times(r: dict) -> list[float]:
    """The times to first sample of a side and cache state: its epoch run, then the first-sample runs."""
    vals = [r.get("first_sample_s"), *r.get("first_runs", [])]
    return [v for v in vals if v is not None]


def _first(r: dict) -> float | None:
    vals = first_times(r)
    return statistics.median(vals) if vals else None


def _first_cell(r: dict) -> str:
    vals = first_times(r)
    if not vals:
        return "n/a"
    if len(vals) == 1:
        return f"{vals[0]:.2f}"
    return f"{statistics.median(vals):.2f} ({min(vals):.2f}-{max(vals):.2f})"


def markdown(result: dict) -> str:
    """The remote benchmark as a Markdown section."""
    R, d, cfg = result, result["dataset"], result["config"]
    runs = R["runs"]
    mo_cold = get(runs, "mosaic", "cold", "samples_per_s")
    mo_warm = get(runs, "mosaic", "warm", "samples_per_s")
    m = R["machine"]
    vers = []
    for name in ("shardstream", "mosaic"):
        r = get(runs, name, "cold") or {}
        if r.get("version"):
            extra = f", torch {r['torch']} (CPU)" if r.get("torch") else ""
            vers.append(f"{r.get('library', name)} {r['version']} (Python {r.get('python')}, "
                        f"numpy {r.get('numpy')}{extra})")
    L = ["## Streaming from S3 (loopback moto server)", "",
         f"Run on {R['date']}, total {R['total_s']:.0f} s (data generation {R['generate_s']:.1f} s, "
         f"upload {R.get('upload_s', 0):.1f} s)."
         + (f" Command: `{R['command']}`." if R.get("command") else ""), "",
         (f"- Machine: {m['cpu']}, {m['logical_cpus']} logical CPUs ({m.get('usable_cpus')} usable), RAM "
          f"{m.get('ram_gib', 0):.1f} GiB, {m['os']}; load average before / after: {R['loadavg_before']} / "
          f"{R['loadavg_after']}"),
         f"- Versions: {'; '.join(vers) or 'n/a'}",
         (f"- Data: the mixed workload ({d['samples']:,} samples, ~{d['payload_bytes'] / d['samples']:,.0f} B "
          f"each, seed {cfg['seed']}), written once by shardstream's `MDSWriter`, uncompressed, "
          f"size_limit {d['shard_size_limit'] / 2**20:,.0f} MiB: {d['shards']} shards, "
          f"{d['dataset_bytes'] / 1e6:,.1f} MB with `index.json`, read by both libraries from "
          f"`{cfg['bucket']}`."),
         ("- Server: one moto S3 server (threaded, in the driver process) behind a counting reverse proxy "
          "(`FaultProxy`, no faults, buffers each response); both on 127.0.0.1, so the 'network' is Python "
          "serving from memory on the same CPUs as the reader, with no latency."), ""]
    for name, phases in runs.items():
        for phase, r in phases.items():
            if "error" in r and not r.get("world"):  # node runs: one line below
                L += [f"**{name} ({phase}) failed** ({r['error']}):", "", "```", r["stderr_tail"][-1500:], "```", ""]
            for err in r.get("first_errors", []):
                L += [f"**{name} ({phase}, first sample only) failed**:", "", "```", err[-1500:], "```", ""]

    header = ["Side", "cold: first sample (s)", "cold: samples/s", "warm: first sample (s)", "warm: samples/s",
              "downloaded cold / warm (MB)", "cold samples/s vs mosaic", "warm samples/s vs mosaic"]
    rows = []
    for name in ("shardstream", "mosaic", "shardstream-threads1"):
        if name not in runs:
            continue
        c, w = runs[name].get("cold") or {}, runs[name].get("warm") or {}
        flag = "" if c.get("ok", True) and w.get("ok", True) else " (**count/checksum mismatch**)"
        mosaic = name == "mosaic"
        rows.append([NAMES[name] + flag, _first_cell(c), _sps(c.get("samples_per_s")),
                     _first_cell(w) if w else "n/a", _sps(w.get("samples_per_s")),
                     f"{_mb(c.get('server_bytes'))} / {_mb(w.get('server_bytes')) if w else 'n/a'}",
                     "1.00x" if mosaic else _ratio(c.get("samples_per_s"), mo_cold),
                     "1.00x" if mosaic else (_ratio(w.get("samples_per_s"), mo_warm) if w else "")])
    L += ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    L += ["| " + " | ".join(row) + " |" for row in rows]
    reps = cfg.get("first_repeats", 0)
    L += ["", (f"`batch_size={cfg['batch_size']}`, `shuffle=False`, default `predownload`, iterated in the "
               "main process (no DataLoader): `for s in ds: acc += len(s['tokens']) + s['label']`, count and sum "
               "checked against the source data. Every run is a fresh process. *Cold*: empty local directory; "
               "*warm*: the directory the cold epoch run filled. *samples/s*: one epoch run, samples / (dataset "
               "constructor to the last sample). *First sample*: dataset constructor to the first sample "
               "(imports of the storage client that happen inside the constructor included)"
               + (f"; median (min-max) of the epoch run and {reps} more process{'es' if reps > 1 else ''} per side "
                  "and state that stop "
                  "after the first sample, the libraries alternating" if reps else "; one run")
               + ". *Downloaded*: GET response bytes the proxy sent during the epoch run (index.json included; "
               "HEAD requests carry no body). The `download_threads=1` row is one cold epoch run, compared with "
               "mosaicml-streaming's cold run.")]
    ss_c, ss_w = get(runs, "shardstream", "cold") or {}, get(runs, "shardstream", "warm") or {}
    mo_c, mo_w = get(runs, "mosaic", "cold") or {}, get(runs, "mosaic", "warm") or {}
    if ss_c.get("samples_per_s") and mo_c.get("samples_per_s"):
        ratio = ss_c["samples_per_s"] / mo_c["samples_per_s"]
        fc, fm = _first(ss_c), _first(mo_c)
        L += ["", "Targets:", "",
              (f"- Cold epoch throughput >= {TARGET_EPOCH_RATIO:g}x mosaicml-streaming: {ratio:.2f}x "
               f"({'**MET**' if ratio >= TARGET_EPOCH_RATIO else '**NOT MET**'}); warm "
               f"{_ratio(ss_w.get('samples_per_s'), mo_warm)}."),
              (f"- Lower time to first sample (medians): {_s(fc)} s vs {_s(fm)} s cold "
               f"({'**MET**' if fc is not None and fm is not None and fc < fm else '**NOT MET**'}); "
               f"{_s(_first(ss_w))} s vs {_s(_first(mo_w))} s warm.")]
    node_lines = []
    for side in ("shardstream", "mosaic"):
        r = get(runs, f"{side}-node0of2", "cold")
        if not r:
            continue
        label = "shardstream" if side == "shardstream" else "mosaicml-streaming"
        if "error" in r:
            last = [x for x in r.get("stderr_tail", "").strip().splitlines() if x.strip()][-1:] or ["?"]
            node_lines.append(f"- {label}: does not run as node 0 of 2 without a torch.distributed process group "
                              f"({r['error']}: `{last[0].strip()[:300]}`), so no per-node bytes.")
            continue
        shards = f", {r['fetched_files'] - 1} of {d['shards']} shards + index.json" if r.get("fetched_files") else ""
        node_lines.append(
            f"- {label}: {r['count']:,} samples ({r['count'] / d['samples']:.0%} of the dataset), downloaded "
            f"{_mb(r['server_bytes'])} MB = {r['server_bytes'] / d['dataset_bytes']:.0%} of the dataset's "
            f"{_mb(d['dataset_bytes'])} MB ({r.get('get_requests', '?')} GET requests{shards}); first sample "
            f"{r['first_sample_s']:.2f} s, {r['samples_per_s']:,.0f} samples/s.")
    if node_lines:
        L += ["", ("Per node: node 0 of a 2-node world (`RANK=0 WORLD_SIZE=2 LOCAL_WORLD_SIZE=1 LOCAL_RANK=0`, "
                   "no torch.distributed process group; node 1 is not run), cold cache, one run:"), ""] + node_lines
    return "\n".join(L) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--work", default=os.path.join(HERE, ".data", "remote"))
    ap.add_argument("--peer-python", default=os.path.join(ROOT, ".venv-peers", "bin", "python"),
                    help="python of the venv with mosaicml-streaming ('' to skip it)")
    ap.add_argument("--samples", type=int, default=DEFAULT_SAMPLES)
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--shard-mb", type=float, default=DEFAULT_SHARD_BYTES / 2**20, help="size_limit in MiB")
    ap.add_argument("--first-repeats", type=int, default=4,
                    help="extra first-sample-only processes per side and cache state (0: none)")
    ap.add_argument("--no-threads-row", action="store_true", help="skip the download_threads=1 run")
    ap.add_argument("--no-nodes", action="store_true", help="skip the node 0 of 2 runs")
    ap.add_argument("--out", help="also write the Markdown here")
    ap.add_argument("--json", help="write the raw results here")
    ap.add_argument("--keep-data", action="store_true")
    args = ap.parse_args()
    if args.child:
        _shardstream_child(args.child)
        return
    R = run_remote(args.work, args.peer_python or None, args.samples, batch_size=args.batch_size,
                   shard_bytes=int(args.shard_mb * 2**20), first_repeats=args.first_repeats,
                   threads_row=not args.no_threads_row,
                   nodes=not args.no_nodes, keep_data=args.keep_data)
    common.publish(R, markdown, __file__, args.out, args.json)
    # mosaicml-streaming 0.13 refuses a multi-node world without torch.distributed: reported, not a failure
    failed = [n for n, p in R["runs"].items() for r in p.values()
              if ("error" in r and n != "mosaic-node0of2") or not r.get("ok", True) or r.get("first_errors")]
    if failed:
        log(f"failed or wrong: {', '.join(failed)}")
        sys.exit(1)


if __name__ == "__main__":
    main()
