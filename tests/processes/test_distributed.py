"""Real multi-process jobs: ranks joined by a gloo process group, DataLoader workers, SIGKILL.

Each rank is a separate Python process running ``dist_job.py`` (next to this file) and
reading a dataset from a "remote" directory into the cache directory of its node. A job of
2 nodes x 2 ranks is simulated on one machine with the launcher's variables (``RANK``,
``WORLD_SIZE``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``) and one cache directory per node.

The checks:

- what the ranks consumed, step by step and rank by rank, is the order of one process
  reading the epoch with the global batch, sample for sample;
- every rank receives the same number of batches and no rank waits at the end of the epoch
  for a collective that never comes (each step ends with an ``all_reduce``);
- each node downloads only the shards its own samples come from;
- a training job killed with SIGKILL resumes from its checkpoint on another world (fewer
  ranks, more workers, a larger per-device batch) exactly where it stopped, and a fresh job
  runs on the cache directories the killed one left, with no clean-up.

Every wait has a time limit: a hung job fails its test with the ranks' logs and the stacks
of every thread of every rank and DataLoader worker (``SIGUSR1``), and every process started
here is killed when the test ends.
"""

from __future__ import annotations

import json
import math
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from shardstream import MDSWriter, Stream, StreamingDataset, World

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")

pytestmark = [
    pytest.mark.skipif(sys.platform == "win32", reason="POSIX process groups, signals and file locks"),
    pytest.mark.skipif(not (dist.is_available() and dist.is_gloo_available()), reason="needs torch.distributed gloo"),
]

JOB = os.path.join(os.path.dirname(os.path.abspath(__file__)), "dist_job.py")
LAUNCHER_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "NODE_RANK",
                 "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID")
N = 3000  # samples: 40 shards of 76 (the last one 36)
SEED = 1234
NODES, PER_NODE = 2, 2
RANKS = NODES * PER_NODE
COLLECTIVE_TIMEOUT = 30  # seconds a rank waits in a collective, or for a batch from a DataLoader worker
STALL = 15  # seconds with no batch after which a rank has all its processes print their stacks
JOB_TIMEOUT = 120.0  # seconds for a whole job
TMP_PREFIX = ".tmp-"

# -- the dataset -------------------------------------------------------------------------------------

def features(i: int) -> np.ndarray:
    return np.random.default_rng(i).integers(0, 256, 64, dtype=np.uint8)


@pytest.fixture
def remote(tmp_path) -> str:
    out = str(tmp_path / "remote")
    with MDSWriter(out=out, columns={"id": "int", "x": "ndarray:uint8:64"}, size_limit=6000) as writer:
        for i in range(N):
            writer.write({"id": i, "x": features(i)})
    return out


def index_shards(remote: str) -> list[dict]:
    with open(os.path.join(remote, "index.json")) as f:
        return json.load(f)["shards"]


def reference(remote: str, global_batch: int) -> list[int]:
    """One uninterrupted epoch read by a single process with the global batch."""
    ds = StreamingDataset(local=remote, shuffle=True, shuffle_seed=SEED, batch_size=global_batch,
                          num_canonical_nodes=NODES)
    ids = [s["id"] for s in ds.iterate(World())]
    assert len(ids) % global_batch == 0 and set(ids) == set(range(N))
    return ids


def temp_files(local: str) -> list[str]:
    return [os.path.join(d, n) for d, _, files in os.walk(local) for n in files if n.startswith(TMP_PREFIX)]


# -- processes -----------------------------------------------------------------------------------------

def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def child_env() -> dict:
    env = {k: v for k, v in os.environ.items() if k not in LAUNCHER_VARS}
    env.update(PYTHONDONTWRITEBYTECODE="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    if "GLOO_SOCKET_IFNAME" not in env:  # everything is on this machine: talk over the loopback
        env["GLOO_SOCKET_IFNAME"] = "lo0" if sys.platform == "darwin" else "lo"
    return env


class JobFailed(AssertionError):
    def __init__(self, message: str, job: Job) -> None:
        super().__init__(f"{message} (logs in {job.out}):\n{job.logs(tail=4000)}")
        self.logs = job.logs(tail=None)


class Job:
    """The ranks of one job, each the leader of a process group of its own, so that a signal to
    the group reaches the rank's DataLoader workers too. Leaving the block kills what is left."""

    def __init__(self, out: Path) -> None:
        self.out = out
        out.mkdir(parents=True, exist_ok=True)
        self.procs: list[subprocess.Popen] = []

    def start(self, cfg: dict, env: dict) -> None:
        rank = len(self.procs)
        cfg = {"timeout": COLLECTIVE_TIMEOUT, "stall": STALL, "model_seed": 0, **cfg, "out": str(self.out)}
        env = {**env, "DIST_JOB_STACKS": str(self.out)}
        with open(self.out / f"log-{rank}.txt", "wb") as log:
            self.procs.append(subprocess.Popen([sys.executable, JOB, json.dumps(cfg)], stdout=log,
                                               stderr=subprocess.STDOUT, env=env, start_new_session=True))

    def logs(self, tail: int | None) -> str:
        """What the ranks and their workers printed, then the stacks they printed on SIGUSR1 (the last
        ``tail`` characters of each file)."""
        parts = []
        for rank, proc in enumerate(self.procs):
            text = (self.out / f"log-{rank}.txt").read_text(errors="replace")
            parts.append(f"--- rank {rank} (pid {proc.pid}, exit {proc.poll()}):\n{text[-tail:] if tail else text}")
        for path in sorted(self.out.glob("stacks-*.txt")):
            text = path.read_text(errors="replace")
            if "Thread" in text:  # the process did print its stacks
                parts.append(f"--- {path.name}:\n{text[-tail:] if tail else text}")
        return "\n".join(parts)

    def signal(self, sig: int) -> None:
        for proc in self.procs:
            try:
                os.killpg(proc.pid, sig)
            except (ProcessLookupError, PermissionError):
                pass

    def wait(self, timeout: float = JOB_TIMEOUT, until=None) -> None:
        """Until every rank exits with 0 (or ``until(job)`` holds); fail as soon as one exits otherwise."""
        deadline = time.monotonic() + timeout
        while True:
            codes = [p.poll() for p in self.procs]
            failed = [rank for rank, rc in enumerate(codes) if rc not in (None, 0)]
            if failed:
                self.fail(f"ranks {failed} failed")
            if until(self) if until is not None else all(rc == 0 for rc in codes):
                return
            now = time.monotonic()
            if now > deadline:
                self.fail(f"the job did not finish in {timeout:.0f} s")
            time.sleep(0.05)

    def fail(self, message: str) -> None:
        """Have every process left print its threads' stacks into its log, kill them all, raise."""
        self.signal(signal.SIGUSR1)
        time.sleep(1.0)
        self.kill()
        raise JobFailed(message, self)

    def kill(self) -> None:
        """SIGKILL to every rank and its workers (a crash: nothing gets to clean up)."""
        self.signal(signal.SIGKILL)
        for proc in self.procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:  # pragma: no cover
                pass

    def records(self) -> list[dict]:
        out = []
        for rank in range(len(self.procs)):
            with open(self.out / f"rank{rank}.json") as f:
                out.append(json.load(f))
        return out

    def worker_record(self, rank: int, worker: int) -> dict:
        with open(self.out / f"worker-{rank}-{worker}.json") as f:
            return json.load(f)


def launch(tmp_path: Path, name: str, cfg: dict, nodes: int, per_node: int, launcher_vars: bool = True,
           until=None) -> Job:
    """Start ``nodes * per_node`` ranks and wait until they all exit with 0, or until ``until(job)``
    holds (then the ranks are still running and the caller must kill them). A port that another
    process took between choosing it and binding it gives one more try with another port."""
    ranks = nodes * per_node
    for attempt in range(2):
        port = free_port()
        job = Job(tmp_path / f"{name}-{attempt}")
        try:
            for rank in range(ranks):
                env = child_env()
                if launcher_vars:
                    env.update(RANK=str(rank), WORLD_SIZE=str(ranks), LOCAL_RANK=str(rank % per_node),
                               LOCAL_WORLD_SIZE=str(per_node), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
                    job.start({**cfg, "init": "env"}, env)
                else:
                    job.start({**cfg, "init": "tcp", "port": port, "rank": rank, "world_size": ranks}, env)
            job.wait(until=until)
        except JobFailed as e:
            job.kill()
            text = e.logs.lower()
            if attempt == 0 and ("address already in use" in text or "eaddrinuse" in text):
                continue
            raise
        except BaseException:
            job.kill()
            raise
        if until is None:
            job.kill()  # the ranks are gone; this reaps any worker they left
        return job
    raise AssertionError("unreachable")  # pragma: no cover


def epoch_cfg(tmp_path: Path, remote: str, batch_size: int, workers: int, **extra) -> dict:
    return {"mode": "epoch", "remote": remote, "local": str(tmp_path / "node{node}"), "seed": SEED,
            "batch_size": batch_size, "canonical_nodes": NODES, "workers": workers, **extra}


# -- checks ----------------------------------------------------------------------------------------------

def global_order(records: list[dict]) -> list[int]:
    """What the ranks consumed, by (step, rank)."""
    counts = [len(r["steps"]) for r in records]
    assert len(set(counts)) == 1, f"the ranks received different numbers of batches: {counts}"
    return [i for step in range(counts[0]) for r in records for i in r["steps"][step]]


def check_same_order(got: list[int], want: list[int], what: str) -> None:
    if got == want:
        return
    first = next((k for k, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
    raise AssertionError(f"{what}: {len(got)} samples instead of {len(want)}; the first difference is at "
                         f"position {first}: got {got[first:first + 8]}, want {want[first:first + 8]}")


def check_node_local(records: list[dict], remote: str, caches: dict[int, str], slack: int | None) -> None:
    """Each node's cache holds exactly the shards of the samples its ranks read and no temp file;
    together the nodes downloaded at most ``slack`` shards more than the dataset has (unless None)."""
    shards = index_shards(remote)
    names = [s["raw_data"]["basename"] for s in shards]
    shard_of = np.repeat(np.arange(len(shards)), [s["samples"] for s in shards])  # sample i holds id i
    total = 0
    for node, local in caches.items():
        ids = [i for r in records if r["node"] == node for step in r["steps"] for i in step]
        wanted = set(shard_of[ids].tolist())
        present = set(os.listdir(local))
        have = {k for k, name in enumerate(names) if name in present}
        assert have == wanted, (f"node {node}: its cache holds shards {sorted(have - wanted)} its ranks never "
                                f"read and lacks {sorted(wanted - have)}")
        assert not temp_files(local), f"node {node}: temp files left in the cache: {temp_files(local)}"
        total += len(have)
    assert slack is None or total <= len(names) + slack, f"the nodes downloaded {total} shards of {len(names)}"


# -- one epoch on 2 nodes x 2 ranks ---------------------------------------------------------------------

@pytest.mark.parametrize("workers", [0, 2])
def test_two_nodes_two_ranks(tmp_path, remote, workers):
    """2 nodes x 2 ranks from the launcher's variables, with 0 or 2 forked DataLoader workers per rank:
    one epoch, the single-process order, node-local downloads."""
    bs = 8
    job = launch(tmp_path, "epoch", epoch_cfg(tmp_path, remote, bs, workers), NODES, PER_NODE)
    records = job.records()
    for rank, r in enumerate(records):
        assert r["rank"] == rank and r["node"] == rank // PER_NODE
        assert r["world"] == {"num_nodes": NODES, "ranks_per_node": PER_NODE, "node": rank // PER_NODE,
                              "local_rank": rank % PER_NODE, "num_workers": 0, "worker": 0, "replication": 1}
        assert r["len_before"] == len(r["steps"]), f"rank {rank}: len(loader) said {r['len_before']}"
        for w in range(workers):
            seen = job.worker_record(rank, w)
            assert seen["world"] == {**r["world"], "num_workers": workers, "worker": w}
    check_same_order(global_order(records), reference(remote, bs * RANKS), f"2 nodes x 2 ranks x {workers} workers")
    check_node_local(records, remote, {n: str(tmp_path / f"node{n}") for n in range(NODES)}, slack=2)


# -- a mixture of streams on 2 nodes x 2 ranks ---------------------------------------------------------

@pytest.mark.parametrize("batching", ["random", "device_per_stream"])
def test_mixed_streams_two_nodes(tmp_path, remote, batching):
    """Two streams of the remote (70/30, the epoch up-sampled to 1.5x the data) on 2 nodes x 2 ranks x
    2 workers, each stream cached per node in its own directory: the ranks together read the order a
    single process reads."""
    bs, props, size = 4, [0.7, 0.3], int(N * 1.5)
    cfg = epoch_cfg(tmp_path, remote, bs, 2, streams=props, epoch_size=size, batching=batching)
    records = launch(tmp_path, "mix", cfg, NODES, PER_NODE).records()

    def single(batch_size: int) -> StreamingDataset:
        return StreamingDataset(streams=[Stream(local=remote, proportion=p) for p in props], epoch_size=size,
                                batching_method=batching, shuffle=True, shuffle_seed=SEED, batch_size=batch_size,
                                num_canonical_nodes=NODES)

    if batching == "random":  # one process reading the whole global batch
        want = [s["id"] for s in single(bs * RANKS).iterate(World())]
    else:  # device batches line up with ranks: each rank's share, put together in step order
        worlds = [World(num_nodes=NODES, ranks_per_node=PER_NODE, node=r // PER_NODE, local_rank=r % PER_NODE)
                  for r in range(RANKS)]
        shares = [[s["id"] for s in single(bs).iterate(w)] for w in worlds]
        want = [i for k in range(len(shares[0]) // bs) for r in range(RANKS) for i in shares[r][k * bs:(k + 1) * bs]]
    check_same_order(global_order(records), want, f"mixed streams ({batching}) on 2 nodes x 2 ranks x 2 workers")
    assert len(want) >= size


# -- the world from the process group only, spawned workers --------------------------------------------

def test_world_from_process_group_with_spawned_workers(tmp_path, remote):
    """No launcher variables: the ranks know their world only from ``init_process_group``, and
    spawned DataLoader workers (which cannot see the group) read as the rank that pickled the
    dataset for them. With no ``LOCAL_WORLD_SIZE`` each rank is a node of its own. Each node still
    downloads only its own samples' shards; with 4 nodes and 2 canonical nodes two nodes share each
    region, hence most shards, so no bound on the total here."""
    bs, workers = 8, 2
    job = launch(tmp_path, "spawn", epoch_cfg(tmp_path, remote, bs, workers, context="spawn"), RANKS, 1,
                 launcher_vars=False)
    records = job.records()
    for rank, r in enumerate(records):
        assert r["world"] == {"num_nodes": RANKS, "ranks_per_node": 1, "node": rank, "local_rank": 0,
                              "num_workers": 0, "worker": 0, "replication": 1}
        assert r["len_before"] == len(r["steps"])
        for w in range(workers):
            seen = job.worker_record(rank, w)
            assert not seen["dist_initialized"] and seen["pid"] != r["pid"]
            assert seen["world"] == {**r["world"], "num_workers": workers, "worker": w}
    check_same_order(global_order(records), reference(remote, bs * RANKS), "world from the process group")
    check_node_local(records, remote, {n: str(tmp_path / f"node{n}") for n in range(RANKS)}, slack=None)


# -- train, crash with SIGKILL, resume on another world ----------------------------------------------------

STOP_AFTER = 60  # steps of job A, of the 188 of the epoch
BS_A = 4  # per device on 4 ranks: a global batch of 16


def crashed_job(tmp_path: Path, remote: str) -> tuple[Job, list[dict]]:
    """Job A: 2 nodes x 2 ranks x 2 workers train for STOP_AFTER steps, rank 0 saves a checkpoint,
    then every process (ranks and workers) is killed with SIGKILL mid-epoch, with the workers'
    shards pinned and prefetched ahead."""

    def ready(job: Job) -> bool:
        return all((job.out / f"ready-{rank}").exists() for rank in range(RANKS))

    cfg = {**epoch_cfg(tmp_path, remote, BS_A, 2), "mode": "train", "stop_after": STOP_AFTER, "model_seed": 1}
    job = launch(tmp_path, "a", cfg, NODES, PER_NODE, until=ready)
    try:
        records = job.records()
        assert all(p.poll() is None for p in job.procs), "every rank should still be running when it is killed"
    finally:
        job.kill()
    assert all(p.returncode == -signal.SIGKILL for p in job.procs)
    for rank, r in enumerate(records):
        assert len(r["steps"]) == STOP_AFTER and r["first_step"] == 0
        assert r["loader_state"] == records[0]["loader_state"], f"rank {rank} computed another position"
        assert all(math.isfinite(x) for x in r["losses"])
    return job, records


def test_resume_after_sigkill_on_another_world(tmp_path, remote):
    """A crashes after STOP_AFTER steps; B resumes from the checkpoint on 1 node x 2 ranks x 3 workers
    with twice the per-device batch (the same global batch), in A's node-0 cache directory as the crash
    left it, and runs to the end of the epoch. A's steps then B's are one uninterrupted epoch."""
    global_batch = BS_A * RANKS
    a, recs_a = crashed_job(tmp_path, remote)
    ckpt_path = a.out / "ckpt.pt"
    ckpt = torch.load(ckpt_path, weights_only=True)
    assert ckpt["step"] == STOP_AFTER
    assert ckpt["loader"] == recs_a[0]["loader_state"]
    assert ckpt["loader"]["sample_in_epoch"] == STOP_AFTER * global_batch
    saved = recs_a[0]["saved_model"]
    assert {k: v.flatten().tolist() for k, v in ckpt["model"].items()} == saved

    cfg = {**epoch_cfg(tmp_path, remote, global_batch // 2, 3), "mode": "train", "resume": str(ckpt_path),
           "model_seed": 2}
    recs_b = launch(tmp_path, "b", cfg, 1, 2).records()
    for rank, r in enumerate(recs_b):
        assert (r["world"]["num_nodes"], r["world"]["ranks_per_node"], r["world"]["local_rank"]) == (1, 2, rank)
        assert r["loaded_model"] == saved, f"rank {rank} did not load the checkpoint's model"
        assert r["first_step"] == STOP_AFTER
        assert r["len_before"] == len(r["steps"]) > 0
        assert all(math.isfinite(x) for x in r["losses"])

    want = reference(remote, global_batch)
    got = global_order(recs_a) + global_order(recs_b)
    check_same_order(got, want, "A's steps then B's")
    assert len(got) - len(set(got)) == len(want) - N  # only the epoch's own padding repeats
    assert not temp_files(str(tmp_path / "node0")), "temp files left in the cache"


def test_fresh_job_after_sigkill(tmp_path, remote):
    """After A is killed with SIGKILL, a new job of the same world reads a whole epoch in A's cache
    directories with no clean-up call: nothing stale (locks, half-written files) gets in its way."""
    crashed_job(tmp_path, remote)
    job = launch(tmp_path, "rerun", epoch_cfg(tmp_path, remote, BS_A, 2), NODES, PER_NODE)
    records = job.records()
    check_same_order(global_order(records), reference(remote, BS_A * RANKS), "the job after the crash")
    check_node_local(records, remote, {n: str(tmp_path / f"node{n}") for n in range(NODES)}, slack=2)


# -- regression: two processes missing the same shard at once ----------------------------------------------

def test_pin_returns_once_another_process_has_the_shard(tmp_path, remote):
    """Two processes of a node ask for the same absent shard at the same moment (both find it
    missing), and each keeps it pinned once it has it, as random access (``ds[i]``) does. One of
    them downloads it; the other must then pin it too, not wait until the first unpins: the first
    may be waiting for the second (DataLoader workers hand out batches in turn, ranks meet in
    collectives), which deadlocks the job.

    Two datasets on one cache directory stand for the two processes (each has its own lock files
    open, so their locks exclude each other as two processes' do); each reads in a thread that
    waits for the other at its first "shard missing" before going on."""
    from shardstream.storage.cache import ShardCache

    local = str(tmp_path / "cache")
    readers = [StreamingDataset(remote=remote, local=local) for _ in range(2)]
    both_missing = threading.Barrier(2, timeout=10)
    met = []

    def trace(frame, event, arg):
        if event == "call" and frame.f_code is ShardCache.present.__code__:
            return on_return

    def on_return(frame, event, arg):
        if event == "return" and arg is False and threading.get_ident() not in met:
            met.append(threading.get_ident())
            both_missing.wait()

    def read(ds) -> None:
        sys.settrace(trace)
        ds[0]  # downloads shard 0 or waits for it, then keeps it pinned

    threads = [threading.Thread(target=read, args=(ds,), daemon=True) for ds in readers]
    for t in threads:
        t.start()
    try:
        deadline = time.monotonic() + 3
        for t in threads:
            t.join(max(deadline - time.monotonic(), 0))
        assert len(met) == 2, "the two readers did not both find shard 0 missing"
        stuck = [k for k, t in enumerate(threads) if t.is_alive()]
        assert not stuck, f"reader {stuck} still waits for shard 0, which the other one holds"
    finally:
        for ds in readers:  # drops the reader's pins, which lets a stuck one through
            ds.evict_coldest_shard()
        for t in threads:
            t.join(10)
