"""The shard cache shared by real processes: bounded usage under contention, one download per
shard, recovery from a downloader killed with SIGKILL, and pins that block eviction.

The workers are separate Python processes running ``cache_worker.py`` (next to this file); they
report the sample ids and payload digests they read, which are checked here against the data
this process wrote.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from shardstream import StreamingDataset

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "cache_worker.py")
COLUMNS = {"id": "int", "payload": "bytes"}
TMP_PREFIX = ".tmp-"
pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="the cache needs POSIX file locks")


def payload(i: int) -> bytes:
    return hashlib.sha256(str(i).encode()).digest() * 8


def big_payload(i: int) -> bytes:
    return np.random.default_rng(i).bytes(1 << 20)


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def url(path: str) -> str:
    return f"file://{path}"


class Workers:
    """Started worker processes, all killed and reaped when the block ends."""

    def __init__(self, tmp_path) -> None:
        self.tmp = tmp_path
        self.procs: list[subprocess.Popen] = []
        launcher = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE")  # each worker is a whole world
        self.env = {k: v for k, v in os.environ.items() if k not in launcher}
        self.env["PYTHONDONTWRITEBYTECODE"] = "1"

    def start(self, mode: str, env: dict | None = None, **opts) -> subprocess.Popen:
        with open(self.tmp / f"worker-{len(self.procs)}.log", "wb") as log:
            proc = subprocess.Popen([sys.executable, WORKER, mode, json.dumps(opts)], stdout=log,
                                    stderr=subprocess.STDOUT, env={**self.env, **(env or {})})
        self.procs.append(proc)
        return proc

    def wait(self, proc: subprocess.Popen, timeout: float = 30.0) -> None:
        rc = proc.wait(timeout=timeout)
        assert rc == 0, f"worker {proc.pid} exited with {rc}:\n{self.log(proc)}"

    def log(self, proc: subprocess.Popen) -> str:
        i = self.procs.index(proc)
        return (self.tmp / f"worker-{i}.log").read_text(errors="replace")[-4000:]

    def __enter__(self) -> Workers:  # noqa: PYI034
        return self

    def __exit__(self, *exc) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
        for proc in self.procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:  # pragma: no cover
                pass


def wait_until(cond, timeout: float = 30.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.002)


def write_remote(make_dataset, root, n: int, **kwargs) -> str:
    samples = [{"id": i, "payload": payload(i)} for i in range(n)]
    return make_dataset(root, COLUMNS, samples, subdir="remote", **kwargs)


def read_result(path) -> dict:
    with open(path) as f:
        return json.load(f)


def check_epoch(result: dict, n: int, pay=payload) -> None:
    """Every id once, each with the digest of its own payload."""
    assert sorted(result["ids"]) == list(range(n)), f"worker {result['pid']} did not get a full epoch"
    bad = [i for i, d in zip(result["ids"], result["digests"]) if d != digest(pay(i))]
    assert not bad, f"worker {result['pid']} read wrong payloads for ids {bad[:10]}"


class UsageMonitor(threading.Thread):
    """Samples the bytes held by a cache directory every few milliseconds: ``peak_disk`` is the
    size of the files on disk; ``peak_reserved`` counts a shard with a temp file (a download or
    decompression in progress) at its full footprint, as the cache's own accounting does."""

    def __init__(self, local: str, shards: list[dict]) -> None:
        super().__init__(daemon=True)
        self.local = local
        self.shard_of: dict[str, str] = {}  # raw or compressed basename -> raw basename
        self.footprint: dict[str, int] = {}  # raw basename -> raw + compressed bytes
        for s in shards:
            raw, zipped = s["raw_data"], s.get("zip_data")
            self.shard_of[raw["basename"]] = raw["basename"]
            self.footprint[raw["basename"]] = raw["bytes"] + (zipped["bytes"] if zipped else 0)
            if zipped:
                self.shard_of[zipped["basename"]] = raw["basename"]
        self.peak_disk = 0
        self.peak_reserved = 0
        self.samples = 0
        self._halt = threading.Event()

    def measure(self) -> tuple[int, int]:
        disk, files, busy = 0, {}, set()
        try:
            entries = list(os.scandir(self.local))
        except FileNotFoundError:
            return 0, 0
        for e in entries:
            if e.name == ".shardstream":
                continue
            try:
                size = e.stat().st_size
            except FileNotFoundError:
                continue
            disk += size
            if e.name.startswith(TMP_PREFIX):
                shard = self.shard_of.get(e.name[len(TMP_PREFIX):].rsplit(".", 2)[0])
                if shard is not None:
                    busy.add(shard)
            elif e.name in self.shard_of:
                files[self.shard_of[e.name]] = files.get(self.shard_of[e.name], 0) + size
            elif e.name == "index.json":
                files[e.name] = size
        for shard in busy:
            files[shard] = max(files.get(shard, 0), self.footprint[shard])
        return disk, sum(files.values())

    def run(self) -> None:
        while not self._halt.is_set():
            disk, reserved = self.measure()
            self.peak_disk = max(self.peak_disk, disk)
            self.peak_reserved = max(self.peak_reserved, reserved)
            self.samples += 1
            time.sleep(0.002)

    def stop(self) -> None:
        self._halt.set()
        self.join()


class CacheOverBound(AssertionError):
    """The cache held more than ``cache_limit`` plus one shard per process."""


@pytest.mark.xfail(strict=False, raises=CacheOverBound, reason=(
    "known gap: under heavy thrash (4 shuffled processes, room for 4 shards) the directory's peak sometimes "
    "exceeds limit + one shard per process by up to about one more shard; the samples are still all correct"))
def test_processes_share_a_capped_cache(tmp_path, make_dataset, load_index) -> None:
    """Four processes stream one remote into one cache directory limited to three shards, each
    in its own shuffled order: every process gets its full epoch with the right payloads (a
    shard deleted under a reader, or read half-written, gives wrong digests), no temp file is
    left, and the cache never holds more than the limit plus one shard per process (sampled
    from the directory here, and by ``cache_usage`` in the workers).

    The bound is raised as :class:`CacheOverBound`, with the peaks and downloads per process."""
    n, procs = 300, 4
    remote = write_remote(make_dataset, tmp_path, n, size_limit=4096, compression="zstd")
    shards = load_index(remote)["shards"]
    assert len(shards) >= 15
    biggest = max(s["raw_data"]["bytes"] + s["zip_data"]["bytes"] for s in shards)
    index_bytes = os.path.getsize(os.path.join(remote, "index.json"))
    limit = index_bytes + 4 * biggest  # the fewest shards a limit may hold
    bound = limit + procs * biggest
    local = str(tmp_path / "cache")
    monitor = UsageMonitor(local, shards)
    results = [tmp_path / f"result-{k}.json" for k in range(procs)]
    with Workers(tmp_path) as workers:
        monitor.start()
        try:
            running = [workers.start("stream", remote=url(remote), local=local, cache_limit=limit, shuffle=True,
                                     seed=k, result=str(results[k]), usage_every=3) for k in range(procs)]
            for proc in running:
                workers.wait(proc, timeout=60)
        finally:
            monitor.stop()
    outs = [read_result(r) for r in results]
    for out in outs:
        check_epoch(out, n)
    assert len({tuple(out["ids"]) for out in outs}) == procs  # four different orders
    assert not [name for name in os.listdir(local) if name.startswith(TMP_PREFIX)]
    assert monitor.samples > 10
    assert monitor.peak_reserved > index_bytes + biggest  # the workers did share the room
    assert monitor.peak_disk <= monitor.peak_reserved

    peaks = {"directory": monitor.peak_reserved, "workers' cache_usage": max(out["max_usage"] for out in outs)}
    over = {k: v for k, v in peaks.items() if v > bound}
    if over:
        raise CacheOverBound(f"cache_limit={limit} with {procs} processes and shards of at most {biggest} bytes "
                             f"allows {bound} bytes; peaks {over}; downloads per process "
                             f"{[out['files'] for out in outs]} for {len(shards)} shards")


def test_one_download_per_shard_across_processes(tmp_path, make_dataset, load_index) -> None:
    """Four processes starting together on an empty cache, with no limit, download each shard
    and the index exactly once between them, and each reads its full epoch."""
    n, procs = 200, 4
    remote = write_remote(make_dataset, tmp_path, n, size_limit=4096, hashes=["xxh64"])
    n_shards = len(load_index(remote)["shards"])
    local = str(tmp_path / "cache")
    go = tmp_path / "go"
    results = [tmp_path / f"result-{k}.json" for k in range(procs)]
    ready = [tmp_path / f"ready-{k}" for k in range(procs)]
    with Workers(tmp_path) as workers:
        running = [workers.start("stream", remote=url(remote), local=local, shuffle=k % 2 == 1, seed=k,
                                 result=str(results[k]), ready=str(ready[k]), go=str(go))
                   for k in range(procs)]
        wait_until(lambda: all(r.exists() for r in ready), what="workers to start")
        go.touch()
        for proc in running:
            workers.wait(proc, timeout=60)
    outs = [read_result(r) for r in results]
    for out in outs:
        check_epoch(out, n)
    assert sum(out["files"] for out in outs) == n_shards + 1, [out["files"] for out in outs]
    remote_bytes = sum(os.path.getsize(os.path.join(remote, f)) for f in os.listdir(remote))
    assert sum(out["bytes"] for out in outs) == remote_bytes


def shardstream_names() -> set[str]:
    """Entries of /tmp and /dev/shm whose name mentions shardstream (the writer's staging
    directories, which other tests may create meanwhile, are left out)."""
    found = set()
    for root in ("/tmp", "/dev/shm"):
        try:
            names = os.listdir(root)
        except OSError:
            continue
        found |= {f"{root}/{n}" for n in names if "shardstream" in n.lower() and not n.startswith("shardstream-write-")}
    return found


def test_downloader_killed_mid_download_leaves_nothing_to_clean(tmp_path, make_dataset, load_index) -> None:
    """A process killed with SIGKILL halfway through downloading a shard leaves its temp files,
    and held the shard's download lock (another process could not start the same download);
    a fresh process then streams the whole epoch with the right data, without waiting for the
    dead one and without any manual clean-up, and no temp file is left. Nothing is created in
    /tmp or /dev/shm.

    The doomed worker reads the remote in 1 MiB chunks and hangs before the fourth (a stalled
    connection), so it is killed exactly while 3 MiB of a 6 MiB shard sit in its temp file."""
    n = 12
    samples = [{"id": i, "payload": big_payload(i)} for i in range(n)]
    remote = make_dataset(tmp_path, COLUMNS, samples, subdir="remote", size_limit=7 << 20)
    shards = load_index(remote)["shards"]
    assert len(shards) == 2
    name = shards[0]["raw_data"]["basename"]
    size = shards[0]["raw_data"]["bytes"]
    assert size > (6 << 20)
    local = str(tmp_path / "cache")
    private_tmp = tmp_path / "private-tmp"
    private_tmp.mkdir()
    env = {"TMPDIR": str(private_tmp)}
    before = shardstream_names()
    stalled = tmp_path / "stalled"

    def temp_files() -> dict[str, int]:
        out = {}
        for entry in os.listdir(local) if os.path.isdir(local) else []:
            if entry.startswith(TMP_PREFIX):
                try:
                    out[entry] = os.path.getsize(os.path.join(local, entry))
                except FileNotFoundError:
                    pass
        return out

    with Workers(tmp_path) as workers:
        victim = workers.start("prepare", env=env, remote=url(remote), local=local, shard=0,
                               result=str(tmp_path / "victim.json"),
                               stall={"name": name, "after_reads": 3, "chunk": 1 << 20, "marker": str(stalled)})
        wait_until(stalled.exists, what="the download to stall")
        partial = temp_files()
        assert any(sz == 3 << 20 for sz in partial.values()), partial
        assert all(e.startswith(f"{TMP_PREFIX}{name}.{victim.pid}.") for e in partial)
        other = StreamingDataset(remote=url(remote), local=local)
        assert other.prepare_shard(0, blocking=False) is False  # the download lock is taken
        assert other.table.stores[0].fetcher.files == 0
        os.kill(victim.pid, signal.SIGKILL)
        assert victim.wait(timeout=10) == -signal.SIGKILL
        assert temp_files() == partial  # the dead process's leftovers
        assert not os.path.exists(os.path.join(local, name))
        assert other.cache_usage >= size  # the leftovers count as the whole shard until cleared

        started = time.monotonic()
        result = tmp_path / "fresh.json"
        workers.wait(workers.start("stream", env=env, remote=url(remote), local=local, result=str(result)),
                     timeout=60)
        elapsed = time.monotonic() - started
    out = read_result(result)
    check_epoch(out, n, pay=big_payload)
    assert out["ids"] == list(range(n))
    assert out["files"] == 2  # both shards, no index (already cached)
    assert elapsed < 30  # did not sit out the dead process's lock
    assert temp_files() == {}
    assert os.path.getsize(os.path.join(local, name)) == size
    assert os.path.exists(os.path.join(local, ".shardstream", "locks", f"{name}.lock"))
    assert os.listdir(private_tmp) == []
    assert shardstream_names() - before == set()


def test_shard_pinned_by_another_process_is_not_evicted(tmp_path, make_dataset) -> None:
    """While another process holds shard 0, evict_shard(0) here returns False and the file
    stays (evict_coldest_shard passes over it, even though it is the coldest); once that process
    is gone, with no unpin of its own, the shard can be evicted."""
    remote = write_remote(make_dataset, tmp_path, 60, size_limit=4096)
    local = str(tmp_path / "cache")
    ds = StreamingDataset(remote=url(remote), local=local)
    path = os.path.join(local, ds.shards[0].raw_data.basename)
    ready, stop = tmp_path / "ready", tmp_path / "stop"
    with Workers(tmp_path) as workers:
        holder = workers.start("pin", remote=url(remote), local=local, shard=0, ready=str(ready), stop=str(stop))
        wait_until(ready.exists, what="the worker to pin shard 0")
        assert os.path.exists(path)  # the worker downloaded it
        time.sleep(0.03)
        assert ds.prepare_shard(1)
        for _ in range(3):
            assert ds.evict_shard(0) is False
            assert os.path.exists(path)
        assert ds.evict_coldest_shard() == 1
        assert ds.evict_coldest_shard() is None
        assert os.path.exists(path)
        assert holder.poll() is None
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=10)
    assert ds.evict_shard(0) is True
    assert not os.path.exists(path)
