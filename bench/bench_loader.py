"""PyTorch DataLoader benchmark: throughput and mid-epoch resumption, shardstream vs the peers.

    .venv/bin/python bench/bench_loader.py [--samples 256000] [--out loader.md] [--json loader.json]

(``--peer-python`` defaults to ``.venv-peers/bin/python``; ``--help`` lists the options.)

The driver (this file, project venv) generates ``--samples`` samples of ~1 KB once from a
fixed seed (``x``: 1,000 random bytes as ``uint8[1000]``, ``label``: an int in 0..999) and
has each library write them in its own format and its own process: shardstream's and
mosaicml-streaming's ``MDSWriter`` (columns ``x: ndarray:uint8:1000, label: int``, default
64 MB shards) and litdata's ``BinaryWriter`` (``chunk_bytes='64MB'``). Every measurement
then runs in a fresh subprocess, one after the other (never two at once):

- *Throughput*: each library's ``StreamingDataLoader`` with ``batch_size=32`` and
  ``num_workers=2`` reads its local copy: one warm-up epoch, then ``--repeats`` timed epochs
  of the same loader. Per epoch, *steady* samples/s leaves out the first ``--skip-batches``
  batches (worker start-up, prefetch fill); *epoch* samples/s runs from ``iter(loader)`` to
  the last batch. Every epoch is checked (sample count, sum of the labels, sum of ``x[:, 0]``).
  shardstream runs its batch path (``batch_decode=None``, the default: workers decode whole
  steps into column arrays), its per-sample path (``batch_decode=False``: per-sample dicts,
  stacked in the workers into the same batches) and the batch path with ``persistent_workers=True``.
- *Resumption* (shardstream vs mosaicml-streaming, shuffled): one process per library runs a
  whole epoch through the loader and records ``loader.state_dict()`` after 10 %, 50 % and 90 %
  of it, with the batch that follows; shardstream's resumption state is
  ``StreamingDataset.state_dict(num_samples=k)`` of a dataset that never iterated (checked
  equal to the loader's). Then, in a fresh process per position and repeat (the libraries
  alternating), the time from before the dataset constructor to the first batch, and from
  ``loader.load_state_dict(state)`` to the first batch (``iter`` + ``next``, workers' start
  included), with that batch checked against the recorded one.

The machine may be shared: before each measurement the driver waits (``--wait`` seconds at most)
until the CPUs are at most ``--max-busy`` busy, and records the share of the CPUs that other
processes used while the measurement ran (``/proc/stat`` minus its own CPU time).

shardstream's children are ``python bench/bench_loader.py --child CONFIG``; the peers' are
``bench/bench_loader_peers.py CONFIG`` in the peer venv. ``bench/run.py`` calls
:func:`run_loader` and :func:`markdown`.
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
from typing import Any, Callable

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
if HERE not in sys.path:
    sys.path.insert(0, HERE)
import common
from common import get, log

COLUMNS = {"x": "ndarray:uint8:1000", "label": "int"}
SAMPLE_BYTES = 1000
BATCH = 32
WORKERS = 2
DEFAULT_SAMPLES = 256_000  # 8,000 steps of 32; a multiple of 2 workers x 32: no library pads the epoch
DEFAULT_SKIP = 50
POSITIONS = (0.0, 0.1, 0.5, 0.9)
TARGET_RATIO = 5.0
TARGET_RESUME_S = 1.0
RUN_TIMEOUT_S = 900
SEED_OFFSET = 11
NAMES = {"shardstream": "shardstream", "mosaic": "mosaicml-streaming", "litdata": "litdata"}

# name -> (library, options); the order is the order of the table
CASES = {
    "shardstream": ("shardstream", {"batch_decode": None}),
    "shardstream-persistent": ("shardstream", {"batch_decode": None, "persistent_workers": True}),
    "shardstream-per-sample": ("shardstream", {"batch_decode": False}),
    "mosaic": ("mosaic", {}),
    "litdata": ("litdata", {}),
}
SETTINGS = {
    "shardstream": "batch path (`batch_decode=None`, default)",
    "shardstream-persistent": "batch path, `persistent_workers=True`",
    "shardstream-per-sample": "per-sample dicts, stacked in the worker (`batch_decode=False`)",
    "mosaic": "`StreamingDataLoader`, defaults",
    "litdata": "`StreamingDataLoader`, defaults",
}
SHUFFLED_ONLY = {"shardstream-persistent"}


# -- shared by every child (stdlib + numpy only at import, so it runs in either venv) --------------
def generate(path: str, n: int) -> None:
    rng = np.random.default_rng(common.SEED + SEED_OFFSET)
    x = rng.integers(0, 256, (n, SAMPLE_BYTES), dtype=np.uint8)
    labels = rng.integers(0, 1000, n).astype(np.int64)
    common._save(path, x=x, labels=labels)


def load(path: str) -> tuple[np.ndarray, np.ndarray]:
    with np.load(path) as z:
        return z["x"], z["labels"]


def samples(x: np.ndarray, labels: np.ndarray):
    """Every sample as a dict, in dataset order."""
    for i, lab in enumerate(labels.tolist()):
        yield {"x": x[i], "label": lab}


def load_config(path: str) -> dict:
    with open(path) as f:
        return json.load(f)


def status_kb(field: str, pid: str = "self") -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


class WorkerRss:
    """Peak resident set of this process's DataLoader workers (children with the same command line),
    sampled while they run."""

    def __init__(self) -> None:
        self.peak_kb = 0
        self.anon_kb = 0
        try:
            with open("/proc/self/cmdline", "rb") as f:
                self.cmdline = f.read()
        except OSError:
            self.cmdline = None

    def _children(self) -> list[str]:
        out = []
        try:
            for tid in os.listdir("/proc/self/task"):
                with open(f"/proc/self/task/{tid}/children") as f:
                    out += f.read().split()
        except OSError:
            pass
        return out

    def sample(self) -> None:
        for pid in self._children():
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    if f.read() != self.cmdline:
                        continue
            except OSError:
                continue
            self.peak_kb = max(self.peak_kb, status_kb("VmHWM", pid))
            self.anon_kb = max(self.anon_kb, status_kb("RssAnon", pid))


def _usage() -> tuple:
    import resource

    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime, kids.ru_utime + kids.ru_stime, kids.ru_minflt


def run_epoch(loader, skip: int, watch: WorkerRss) -> dict:
    """One pass over ``loader``: count, label sum and ``x[:, 0]`` sum of every batch, and times.
    CPU: the main process's, and the workers' (counted once they have exited and been joined, so
    only for non-persistent workers)."""
    n = label_sum = x0_sum = batches = 0
    first = None
    t_skip, n_skip = None, 0
    u0 = _usage()
    t0 = time.perf_counter()
    for i, b in enumerate(loader):
        lab = b["label"]
        n += len(lab)
        label_sum += int(lab.sum())
        x0_sum += int(b["x"][:, 0].sum())
        if i == 0:
            first = lab.tolist()
        if i + 1 == skip:
            t_skip, n_skip = time.perf_counter(), n
        if i % 250 == 125:
            watch.sample()
        batches = i + 1
    t_end = time.perf_counter()
    u1 = _usage()
    epoch = t_end - t0
    out = {"count": n, "batches": batches, "label_sum": label_sum, "x0_sum": x0_sum, "first_labels": first,
           "epoch_s": epoch, "epoch_samples_per_s": n / epoch, "main_cpu_s": u1[0] - u0[0],
           "workers_cpu_s": u1[1] - u0[1], "workers_minor_faults": u1[2] - u0[2]}
    if t_skip is not None and t_end > t_skip:
        out.update({"steady_s": t_end - t_skip, "steady_samples": n - n_skip,
                    "steady_samples_per_s": (n - n_skip) / (t_end - t_skip)})
    return out


def throughput(cfg: dict, make: Callable[[], tuple[Any, Any]], info: dict) -> dict:
    """Build the loader with ``make()`` and run one warm-up epoch plus ``cfg['repeats']`` timed epochs."""
    rss_import = status_kb("VmRSS")
    watch = WorkerRss()
    t = time.perf_counter()
    ds, loader = make()
    open_s = time.perf_counter() - t
    epochs = [run_epoch(loader, cfg["skip"], watch) for _ in range(1 + cfg["repeats"])]
    expect = cfg["expect"]
    ok = all(e["count"] == expect["count"] and e["label_sum"] == expect["label_sum"]
             and e["x0_sum"] == expect["x0_sum"] for e in epochs)
    warm = epochs[1:]
    res = dict(info)
    res.update({
        "ok": ok, "open_s": open_s, "first_epoch": epochs[0], "epochs": warm,
        "steady_samples_per_s": max((e.get("steady_samples_per_s") or 0) for e in warm) or None,
        "epoch_samples_per_s": max(e["epoch_samples_per_s"] for e in warm),
        "first_epoch_samples_per_s": epochs[0]["epoch_samples_per_s"],
        "repeats": len(warm), "rss_after_import_mb": rss_import / 1e3 * 1.024,
        "main_peak_rss_mb": status_kb("VmHWM") / 1e3 * 1.024, "worker_peak_rss_mb": watch.peak_kb / 1e3 * 1.024,
        "worker_anon_rss_mb": watch.anon_kb / 1e3 * 1.024,
        "main_cpu_us_per_batch": statistics.median(e["main_cpu_s"] / e["batches"] for e in warm) * 1e6,
        "workers_cpu_us_per_batch": (statistics.median(e["workers_cpu_s"] / e["batches"] for e in warm) * 1e6
                                     if all(e["workers_cpu_s"] > 0 for e in warm) else None),
        "first_labels_differ_between_epochs": len({tuple(e["first_labels"] or ()) for e in epochs}) == len(epochs),
    })
    log(f"{cfg['name']} ({'shuffled' if cfg['shuffle'] else 'sequential'}): steady "
        f"{res['steady_samples_per_s'] or 0:,.0f}, epoch {res['epoch_samples_per_s']:,.0f}, first epoch "
        f"{res['first_epoch_samples_per_s']:,.0f} samples/s; ok={ok}; main peak RSS {res['main_peak_rss_mb']:,.0f} MB")
    return res


def build_states(cfg: dict, make: Callable[[], tuple[Any, Any]], info: dict,
                 fresh_state: Callable[[int], dict] | None = None) -> dict:
    """One epoch through the loader; ``loader.state_dict()`` after each position's samples, and the
    batch that follows. ``fresh_state(k)``: the library's state for ``k`` samples from a dataset that
    never iterated (used instead of the loader's when given, and compared with it)."""
    ds, loader = make()
    wanted = {p["consumed"] // BATCH: p for p in cfg["positions"]}
    out: dict[str, dict] = {p["label"]: {"consumed": 0, "state": None} for p in cfg["positions"] if not p["consumed"]}
    total = 0
    t = time.perf_counter()
    for i, b in enumerate(loader):
        if i in wanted:  # the first batch after `i` batches: what a resumed loader must give first
            p = wanted[i]
            out[p["label"]]["expect_labels"] = b["label"].tolist()
            out[p["label"]]["expect_x0"] = int(b["x"][:, 0].sum())
        total += len(b["label"])
        if i + 1 in wanted:
            p = wanted[i + 1]
            out[p["label"]] = {"consumed": p["consumed"], "loader_state": loader.state_dict()}
    epoch_s = time.perf_counter() - t
    for p in cfg["positions"]:
        r = out[p["label"]]
        if not p["consumed"]:
            continue
        if fresh_state is not None:
            r["state"] = fresh_state(p["consumed"])
            r["loader_state_equal"] = r["state"] == r["loader_state"]
        else:
            r["state"] = r["loader_state"]
    res = dict(info)
    res.update({"positions": out, "epoch_count": total, "epoch_s": epoch_s})
    log(f"{cfg['library']} states: epoch of {total:,} samples in {epoch_s:.1f}s")
    return res


def resume(cfg: dict, make: Callable[[], tuple[Any, Any]], info: dict, import_s: float,
           rest: bool = False) -> dict:
    """Fresh process: constructor -> (load_state_dict) -> first batch, timed; checked against the record."""
    state = cfg.get("state")
    t0 = time.perf_counter()
    ds, loader = make()
    t1 = time.perf_counter()
    if state is not None:
        loader.load_state_dict(state)
    t2 = time.perf_counter()
    it = iter(loader)
    b = next(it)
    t3 = time.perf_counter()
    labels = b["label"].tolist()
    x0 = int(b["x"][:, 0].sum())
    res = dict(info)
    res.update({"import_s": import_s, "construct_s": t1 - t0, "load_state_dict_s": t2 - t1,
                "first_batch_after_load_s": t3 - t1, "total_s": t3 - t0, "first_labels": labels,
                "ok": labels == cfg["expect_labels"] and x0 == cfg["expect_x0"]})
    if rest:  # the rest of the epoch: count checked (cheap for shardstream only)
        n = len(labels)
        for b in it:
            n += len(b["label"])
        res["rest_count"] = n
        res["rest_ok"] = n == cfg["samples"] - cfg["consumed"]
        res["ok"] = res["ok"] and res["rest_ok"]
    del it
    log(f"{cfg['library']} resume at {cfg['consumed']:,}: total {res['total_s']:.3f}s, load_state_dict -> first "
        f"batch {res['first_batch_after_load_s']:.3f}s, ok={res['ok']}")
    return res


# -- shardstream's children -------------------------------------------------------------------
def _shardstream_child(config_path: str) -> None:
    cfg = load_config(config_path)
    t = time.perf_counter()
    import torch

    import shardstream
    from shardstream import MDSWriter, StreamingDataLoader, StreamingDataset

    import_s = time.perf_counter() - t
    info = {"library": "shardstream", "version": shardstream.__version__, "torch": torch.__version__,
            "python": platform.python_version(), "numpy": np.__version__}
    task = cfg["task"]
    if task == "write":
        x, labels = load(cfg["npz"])
        t = time.perf_counter()
        with MDSWriter(out=cfg["path"], columns=COLUMNS, exist_ok=True) as w:
            write = w.write
            for s in samples(x, labels):
                write(s)
        info["write_s"] = time.perf_counter() - t
        common.emit(info, cfg["out"])
        return
    opts = cfg.get("options", {})
    shuffle = cfg.get("shuffle", True)

    def make():
        ds = StreamingDataset(local=cfg["path"], shuffle=shuffle, batch_size=BATCH)
        loader = StreamingDataLoader(ds, batch_size=BATCH, num_workers=WORKERS,
                                     batch_decode=opts.get("batch_decode"),
                                     persistent_workers=opts.get("persistent_workers", False))
        return ds, loader

    if task == "throughput":
        ds_probe, loader_probe = make()
        info["batch_decode_resolved"] = loader_probe.batch_decode
        del ds_probe, loader_probe
        res = throughput(cfg, make, info)
    elif task == "states":
        def fresh_state(k: int) -> dict:
            return StreamingDataset(local=cfg["path"], shuffle=shuffle, batch_size=BATCH).state_dict(num_samples=k)

        res = build_states(cfg, make, info, fresh_state)
    elif task == "resume":
        res = resume(cfg, make, info, import_s, rest=True)
    else:
        raise SystemExit(f"unknown task {task!r}")
    common.emit(res, cfg["out"])


# -- the driver ---------------------------------------------------------------------------------
def machine_info() -> dict:
    import bench_remote

    return bench_remote.machine_info()


def _loadavg() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "n/a"


def cpu_jiffies() -> tuple[int, int] | None:
    """(busy, total) CPU time of the whole machine so far, in clock ticks (``/proc/stat``)."""
    try:
        with open("/proc/stat") as f:
            vals = [int(v) for v in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    idle = vals[3] + (vals[4] if len(vals) > 4 else 0)
    total = sum(vals[:8])
    return total - idle, total


def busy_fraction(seconds: float) -> float | None:
    """Share of the machine's CPU time spent busy over the next ``seconds``."""
    a = cpu_jiffies()
    time.sleep(seconds)
    b = cpu_jiffies()
    if a is None or b is None or b[1] == a[1]:
        return None
    return (b[0] - a[0]) / (b[1] - a[1])


def wait_quiet(max_busy: float, timeout: float) -> dict:
    """Wait until the CPUs are at most ``max_busy`` busy over 2 s (other work on a shared machine), at
    most ``timeout`` seconds; returns what was seen."""
    start = time.perf_counter()
    busy = busy_fraction(2.0)
    while busy is not None and busy > max_busy and time.perf_counter() - start < timeout:
        busy = busy_fraction(2.0)
    return {"busy_before": busy, "waited_s": time.perf_counter() - start}


class _Runner:
    def __init__(self, work: str, peer_python: str | None, max_busy: float = 1.0, wait_s: float = 0.0) -> None:
        self.work, self.peer_python = work, peer_python
        self.max_busy, self.wait_s = max_busy, wait_s
        self.count = 0

    def env(self, library: str) -> dict:
        env = dict(os.environ)
        env["PYTHONUNBUFFERED"] = "1"
        if library == "shardstream":
            return env
        tmp = os.path.join(self.work, f"tmp-{library}")
        os.makedirs(tmp, exist_ok=True)
        env["TMPDIR"] = tmp  # the peers leave lock files and cache directories there
        if library == "mosaic":
            stubs = os.path.join(ROOT, "tests", "peer_stubs")
            env["PYTHONPATH"] = stubs + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        else:
            env["DATA_OPTIMIZER_CACHE_FOLDER"] = os.path.join(tmp, "chunks")
            env["DATA_OPTIMIZER_DATA_CACHE_FOLDER"] = os.path.join(tmp, "data")
            env["LITDATA_CACHE_DIR"] = os.path.join(tmp, "cache")
        return env

    def run(self, library: str, tag: str, cfg: dict, quiet: bool = True) -> dict:
        self.count += 1
        tag = f"{self.count:03d}-{tag}"
        out = os.path.join(self.work, f"result-{tag}.json")
        cfg = dict(cfg, library=library, out=out)
        cfg_path = os.path.join(self.work, f"config-{tag}.json")
        with open(cfg_path, "w") as f:
            json.dump(cfg, f)
        if library == "shardstream":
            cmd = [sys.executable, os.path.abspath(__file__), "--child", cfg_path]
        else:
            cmd = [self.peer_python, os.path.join(HERE, "bench_loader_peers.py"), cfg_path]
        err_log = os.path.join(self.work, f"stderr-{tag}.log")
        quiet = wait_quiet(self.max_busy, self.wait_s) if quiet and self.wait_s > 0 else {}
        log(f"== {tag}: {' '.join(shlex.quote(c) for c in cmd)}"
            + (f" (CPUs {quiet['busy_before']:.0%} busy after waiting {quiet['waited_s']:.0f}s)"
               if quiet.get("busy_before") is not None else ""))
        import resource

        kids0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        jiffies0 = cpu_jiffies()
        load0 = _loadavg()
        start = time.perf_counter()
        try:
            with open(err_log, "w") as err:
                proc = subprocess.run(cmd, env=self.env(library), cwd=ROOT, stderr=err, check=False,
                                      timeout=RUN_TIMEOUT_S)
            code: Any = proc.returncode
        except subprocess.TimeoutExpired:
            code = f"timed out after {RUN_TIMEOUT_S} s"
        wall = time.perf_counter() - start
        jiffies1 = cpu_jiffies()
        kids1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        own = (kids1.ru_utime + kids1.ru_stime) - (kids0.ru_utime + kids0.ru_stime)
        contention = {"loadavg_start": load0, "loadavg_end": _loadavg(), **quiet}
        if jiffies0 and jiffies1 and jiffies1[1] > jiffies0[1]:
            tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
            cpus = os.cpu_count() or 1
            busy_s = (jiffies1[0] - jiffies0[0]) / tick
            # CPU the machine spent on anything but this measurement (its process and the workers),
            # as a share of all CPUs over the run
            contention["others_cpu_share"] = max(0.0, busy_s - own) / (wall * cpus)
            contention["own_cpu_s"] = own
            contention["machine_busy_s"] = busy_s
        res = run_result(code, out, err_log, tag, wall, contention)
        if "error" in res:
            return res
        if "others_cpu_share" in contention:
            log(f"   {tag}: {wall:.1f}s, other processes used {contention['others_cpu_share']:.0%} of the CPUs")
        return res


def measured_run(cmd: list[str], env: dict, cwd: str, out: str, err_log: str, tag: str, quiet: dict,
                 timeout_s: float) -> dict:
    """Run one side's subprocess ``cmd`` (its stderr into ``err_log``) and return the result it wrote to
    ``out``, with its wall time and how much of the machine other processes used meanwhile; on failure
    the exit status and the tail of its stderr."""
    jiffies0, kids0, start = cpu_jiffies(), _children_cpu(), time.perf_counter()
    try:
        if os.path.exists(out):
            os.remove(out)
        with open(err_log, "w") as err:
            code: Any = subprocess.run(cmd, env=env, cwd=cwd, stderr=err, check=False, timeout=timeout_s).returncode
    except subprocess.TimeoutExpired:
        code = f"timed out after {timeout_s} s"
    wall = time.perf_counter() - start
    contention = dict(quiet, **_others_share(jiffies0, cpu_jiffies(), _children_cpu() - kids0, wall))
    return run_result(code, out, err_log, tag, wall, contention)


def run_result(code: Any, out: str, err_log: str, tag: str, wall: float, contention: dict) -> dict:
    """What a side's subprocess wrote to ``out`` with its wall time and contention, or its failure (the exit
    status and the tail of its stderr)."""
    if code != 0 or not os.path.exists(out):
        with open(err_log) as f:
            tail = f.read()[-3000:]
        log(f"!! {tag} failed ({code}); stderr tail:\n{tail}")
        return {"error": f"exit status {code}", "stderr_tail": tail, "wall_s": wall, "contention": contention}
    with open(out) as f:
        res = json.load(f)
    res.update(wall_s=wall, contention=contention)
    return res


def _children_cpu() -> float:
    import resource

    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _others_share(j0, j1, own_s: float, wall: float) -> dict:
    """The share of all CPUs that processes other than the measurement used while it ran."""
    if not j0 or not j1 or j1[1] <= j0[1] or wall <= 0:
        return {}
    busy_s = (j1[0] - j0[0]) / os.sysconf("SC_CLK_TCK")
    return {"others_cpu_share": max(0.0, busy_s - own_s) / (wall * (os.cpu_count() or 1)), "own_cpu_s": own_s}

def positions(n: int) -> list[dict]:
    out = []
    for frac in POSITIONS:
        k = int(round(frac * n / BATCH)) * BATCH
        out.append({"label": f"{frac:.0%}", "fraction": frac, "consumed": k})
    return out


def run_loader(work_dir: str, peer_python: str | None, samples_n: int = DEFAULT_SAMPLES, *, repeats: int = 3,
               resume_repeats: int = 3, orders: tuple[str, ...] = ("shuffled", "sequential"),
               cases: tuple[str, ...] | None = None, skip: int = DEFAULT_SKIP, max_busy: float = 0.25,
               wait_s: float = 30.0, keep_data: bool = False) -> dict:
    """Run the DataLoader benchmark and return its raw results (see :func:`markdown`).

    ``peer_python`` None (or a missing file) runs shardstream only. ``samples_n`` is rounded up to a
    multiple of ``2 * 32``. ``resume_repeats`` 0 skips the resumption part; ``repeats`` 0 the throughput.
    Before each measurement, wait (at most ``wait_s`` seconds) until the CPUs are at most ``max_busy``
    busy: the machine may be shared. Each result records how much CPU other processes used meanwhile.
    """
    total_start = time.perf_counter()
    step = WORKERS * BATCH
    n = -(-samples_n // step) * step
    work = os.path.abspath(work_dir)
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    have_peer = bool(peer_python) and os.path.exists(peer_python)
    libraries = ("shardstream", "mosaic", "litdata") if have_peer else ("shardstream",)
    cases = tuple(c for c in (cases or tuple(CASES)) if CASES[c][0] in libraries)
    R: dict = {"date": datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z"),
               "machine": machine_info(), "git": common.git_rev(), "loadavg_before": _loadavg(),
               "config": {"samples": n, "batch_size": BATCH, "num_workers": WORKERS, "sample_bytes": SAMPLE_BYTES,
                          "seed": common.SEED + SEED_OFFSET, "repeats": repeats, "resume_repeats": resume_repeats,
                          "skip_batches": skip, "orders": list(orders), "cases": list(cases),
                          "max_busy": max_busy, "wait_s": wait_s,
                          "peer_python": peer_python if have_peer else None},
               "writes": {}, "throughput": {}, "states": {}, "resume": {}}
    runner = _Runner(work, peer_python if have_peer else None, max_busy, wait_s)
    try:
        t = time.perf_counter()
        npz = os.path.join(work, "data.npz")
        generate(npz, n)
        x, labels = load(npz)
        expect = {"count": n, "label_sum": int(labels.sum()), "x0_sum": int(x[:, 0].astype(np.int64).sum())}
        del x, labels
        R["generate_s"] = time.perf_counter() - t
        R["expect"] = expect
        paths = {lib: os.path.join(work, f"{lib}-data") for lib in libraries}
        for lib in libraries:
            r = runner.run(lib, f"write-{lib}", {"task": "write", "npz": npz, "path": paths[lib]}, quiet=False)
            if "error" not in r:
                r["disk_bytes"] = common.dir_bytes(paths[lib])
                r["files"] = len(os.listdir(paths[lib]))
                log(f"{NAMES[lib]} wrote {n:,} samples in {r['write_s']:.1f}s ({r['disk_bytes'] / 1e6:,.0f} MB)")
            R["writes"][lib] = r
        os.unlink(npz)
        ok_libs = [lib for lib in libraries if "error" not in R["writes"][lib]]
        if repeats > 0:
            for order in orders:
                for case in cases:
                    lib, opts = CASES[case]
                    if lib not in ok_libs or (order != "shuffled" and case in SHUFFLED_ONLY):
                        continue
                    cfg = {"task": "throughput", "name": case, "options": opts, "path": paths[lib],
                           "shuffle": order == "shuffled", "repeats": repeats, "skip": skip, "expect": expect}
                    R["throughput"].setdefault(order, {})[case] = runner.run(lib, f"{case}-{order}", cfg)
        resume_libs = [lib for lib in ("shardstream", "mosaic") if lib in ok_libs]
        if resume_repeats > 0 and resume_libs:
            pos = positions(n)
            for lib in resume_libs:
                R["states"][lib] = runner.run(lib, f"states-{lib}", {"task": "states", "path": paths[lib],
                                                                    "shuffle": True, "positions": pos}, quiet=False)
            for k in range(resume_repeats):
                for p in pos:
                    for lib in resume_libs:
                        st = R["states"][lib]
                        if "error" in st:
                            continue
                        rec = st["positions"][p["label"]]
                        cfg = {"task": "resume", "path": paths[lib], "shuffle": True, "samples": n,
                               "consumed": p["consumed"], "state": rec["state"],
                               "expect_labels": rec["expect_labels"], "expect_x0": rec["expect_x0"]}
                        r = runner.run(lib, f"resume-{lib}-{p['label'].rstrip('%')}-{k}", cfg)
                        R["resume"].setdefault(lib, {}).setdefault(p["label"], []).append(r)
    finally:
        if not keep_data:
            shutil.rmtree(work, ignore_errors=True)
    R["loadavg_after"] = _loadavg()
    R["total_s"] = time.perf_counter() - total_start
    return R


# -- the report ---------------------------------------------------------------------------------
def _sps(x) -> str:
    return "n/a" if not x else f"{x:,.0f}"


def _mbs(x) -> str:
    return "n/a" if not x else f"{x:,.0f}"


def _pct(x) -> str:
    return "n/a" if x is None else f"{x:.0%}"


def _ratio(a, b) -> str:
    return "n/a" if not a or not b else f"{a / b:.1f}x"


def _median_cell(values: list[float]) -> str:
    if not values:
        return "n/a"
    med = statistics.median(values)
    if len(values) == 1:
        return f"{med:.3f}"
    return f"{med:.3f} ({min(values):.3f}-{max(values):.3f})"


def _share_range(runs: list[dict]) -> str:
    v = [x for r in runs if (x := get(r, "contention", "others_cpu_share")) is not None]
    if not v:
        return "an unknown share"
    return f"{statistics.median(v):.0%} (median; {min(v):.0%}-{max(v):.0%})"


def resume_values(runs: list[dict], key: str) -> list[float]:
    return [r[key] for r in runs if "error" not in r and r.get(key) is not None]


def summary(R: dict) -> dict:
    """The target figures: shardstream's default loader vs mosaicml-streaming (shuffled, steady), and the
    slowest resumption time (constructor included) per library."""
    out: dict[str, Any] = {}
    ss = get(R, "throughput", "shuffled", "shardstream", "steady_samples_per_s")
    mo = get(R, "throughput", "shuffled", "mosaic", "steady_samples_per_s")
    out["ratio"] = ss / mo if ss and mo else None
    out["ratio_met"] = None if out["ratio"] is None else out["ratio"] >= TARGET_RATIO
    for lib, by_pos in (R.get("resume") or {}).items():
        meds = {p: statistics.median(v) for p, runs in by_pos.items() if (v := resume_values(runs, "total_s"))}
        loads = {p: statistics.median(v) for p, runs in by_pos.items()
                 if (v := resume_values(runs, "first_batch_after_load_s"))}
        resumed = {p: v for p, v in meds.items() if p != "0%"}
        out[lib] = {"total_median": meds, "load_median": loads,
                    "worst_total": max(resumed.values()) if resumed else None,
                    "spread": (max(resumed.values()) / min(resumed.values())) if resumed else None}
    return out


def markdown(R: dict) -> str:
    """The DataLoader benchmark as a Markdown section."""
    cfg, m, n = R["config"], R["machine"], R["config"]["samples"]
    S = summary(R)
    vers = []
    for lib in ("shardstream", "mosaic", "litdata"):
        r = get(R, "writes", lib) or {}
        if r.get("version"):
            git = f"git {R['git']}, " if lib == "shardstream" and R.get("git") else ""
            vers.append(f"{NAMES[lib]} {r['version']} ({git}Python {r.get('python')}, numpy {r.get('numpy')}, "
                        f"torch {r.get('torch')})")
    disk = ", ".join(f"{NAMES[lib]} {r['disk_bytes'] / 1e6:,.0f} MB in {r['files']} files"
                     for lib, r in R["writes"].items() if "error" not in r)
    L = ["## PyTorch DataLoader: throughput and resumption", "",
         f"Run on {R['date']}, total {R['total_s']:.0f} s."
         + (f" Command: `{R['command']}`." if R.get("command") else ""), "",
         (f"- Machine: {m['cpu']}, {m['logical_cpus']} logical CPUs ({m.get('usable_cpus')} usable), RAM "
          f"{m.get('ram_gib', 0):.1f} GiB, {m['os']}; load average before / after: {R['loadavg_before']} / "
          f"{R['loadavg_after']} (the machine is shared; every measurement ran alone, one after the other)"),
         f"- Versions: {'; '.join(vers) or 'n/a'}",
         (f"- Data: {n:,} samples of {cfg['sample_bytes'] + 8:,} B (`x`: {cfg['sample_bytes']:,} random bytes, "
          f"`uint8[{cfg['sample_bytes']}]`; `label`: int 0..999), seed {cfg['seed']}, written once per library "
          f"by that library in its own format, uncompressed, 64 MB shards/chunks ({disk}). The files are read "
          "from the page cache (just written; the cache is never dropped)."),
         (f"- Loader: `batch_size={cfg['batch_size']}`, `num_workers={cfg['num_workers']}`, fork, no pinned "
          "memory; the loop reads each batch's count, `label.sum()` and `x[:, 0].sum()`, and every epoch is "
          "checked against the source data (count and both sums)."), ""]
    for kind in ("writes", "states"):
        for lib, r in (R.get(kind) or {}).items():
            if "error" in r:
                L += [f"**{NAMES[lib]} ({kind}) failed** ({r['error']}):", "", "```", r["stderr_tail"][-1500:],
                      "```", ""]
    if R.get("throughput"):
        L += ["### Throughput", ""]
        header = ["Library", "Settings", "Order", f"steady samples/s (best of {cfg['repeats']})",
                  "epoch samples/s (best)", "first epoch samples/s", "CPU per batch: main / workers (µs)",
                  "main process peak RSS (MB)", "worker RSS: peak / anonymous (MB)", "other processes' CPU",
                  "vs mosaicml-streaming (steady)"]
        rows = []
        for order, by_case in R["throughput"].items():
            mo = get(by_case, "mosaic", "steady_samples_per_s")
            for case, r in by_case.items():
                lib = CASES[case][0]
                if "error" in r:
                    rows.append([NAMES[lib], SETTINGS[case], order, f"**failed** ({r['error']})"] + [""] * 7)
                    continue
                flag = "" if r.get("ok") else " (**count/checksum mismatch**)"
                rows.append([NAMES[lib] + flag, SETTINGS[case], order, _sps(r.get("steady_samples_per_s")),
                             _sps(r.get("epoch_samples_per_s")), _sps(r.get("first_epoch_samples_per_s")),
                             f"{_mbs(r.get('main_cpu_us_per_batch'))} / {_mbs(r.get('workers_cpu_us_per_batch'))}",
                             _mbs(r.get("main_peak_rss_mb")),
                             f"{_mbs(r.get('worker_peak_rss_mb'))} / {_mbs(r.get('worker_anon_rss_mb'))}",
                             _pct(get(r, "contention", "others_cpu_share")),
                             "1.0x" if case == "mosaic" else _ratio(r.get("steady_samples_per_s"), mo)])
        L += _table(header, rows)
        L += ["", (f"One process per row: the loader is built once, runs one warm-up epoch, then {cfg['repeats']} "
                   f"timed epochs (non-persistent workers are started again for each epoch). *Steady*: samples / "
                   f"time from the {cfg['skip_batches']}th batch to the last one of an epoch (worker start-up and "
                   "the prefetch fill left out), best epoch; *epoch*: samples / time from `iter(loader)` to the last "
                   "batch, best epoch; *first epoch*: the warm-up epoch of the fresh loader. Peak RSS: `VmHWM` of "
                   "the main process over the whole run (torch and the library imported: "
                   + ", ".join(f"{NAMES[CASES[c][0]]} {r['rss_after_import_mb']:,.0f} MB"
                               for c, r in (R["throughput"].get("shuffled") or {}).items()
                               if "error" not in r and c in ("shardstream", "mosaic", "litdata"))
                   + " after the imports), and the largest `VmHWM` and `RssAnon` of a DataLoader worker, sampled "
                   "every 250 batches (`VmHWM` counts the shard pages the worker mapped, and both count the "
                   "pages a forked worker shares with the main process, torch included). *CPU per batch*: user + "
                   "system CPU time of the main process (its threads included) and of the workers (from "
                   "`getrusage(RUSAGE_CHILDREN)` once they are joined at the end of the epoch, so n/a with "
                   "persistent workers), divided by the batches of the epoch, median of the timed epochs (with 2 "
                   "cores, the loader cannot deliver more than 2 s / (main + workers) batches per second). "
                   "shardstream's batch path: each worker "
                   "decodes a whole step into numpy column arrays and the main process wraps them as tensors "
                   "(`torch.from_numpy`, no copy); its per-sample path decodes per-sample dicts and stacks them "
                   "into the same batches in the workers; both peers collate per-sample dicts with "
                   "`default_collate` in the workers. *Other processes' CPU*: the CPU time the machine "
                   "spent on anything but the row's process and its workers while the row ran (`/proc/stat` "
                   "minus the row's own user + system time), as a share of all CPUs"
                   + (f"; each measurement started once the CPUs were at most {cfg['max_busy']:.0%} busy over 2 s "
                      f"(waiting at most {cfg['wait_s']:.0f} s)" if cfg.get("wait_s") else "")
                   + ".")]
        if S.get("ratio") is not None:
            L += ["", (f"Target: shardstream's default loader >= {TARGET_RATIO:g}x mosaicml-streaming's, shuffled, "
                       f"steady state: {S['ratio']:.1f}x (**{'MET' if S['ratio_met'] else 'NOT MET'}**).")]
    if R.get("resume"):
        L += ["", "### Resuming mid-epoch (shuffled)", ""]
        pos_labels = list(next(iter(R["resume"].values())).keys())
        header = ["Position (samples consumed)"]
        libs = list(R["resume"].keys())
        for lib in libs:
            header += [f"{NAMES[lib]}: constructor -> first batch (s)", f"{NAMES[lib]}: `load_state_dict` -> "
                       "first batch (s)"]
        rows = []
        for p in pos_labels:
            k = None
            row = []
            for lib in libs:
                runs = R["resume"][lib].get(p, [])
                good = [r for r in runs if "error" not in r]
                if good:
                    k = good[0].get("consumed", k)
                bad = sum(1 for r in good if not r.get("ok"))
                errs = len(runs) - len(good)
                note = (f" ({bad} wrong batch)" if bad else "") + (f" ({errs} failed)" if errs else "")
                row += [_median_cell(resume_values(runs, "total_s")) + note,
                        _median_cell(resume_values(runs, "first_batch_after_load_s"))]
            cons = next((r.get("consumed") for lib in libs for r in R["resume"][lib].get(p, []) if "consumed" in r),
                        None)
            label = "0% (fresh start, no state)" if p == "0%" else p
            rows.append([f"{label}" + (f" ({cons:,})" if cons else "")] + row)
        L += _table(header, rows)
        imports = {lib: resume_values([r for runs in R["resume"][lib].values() for r in runs], "import_s")
                   for lib in libs}
        eq = [r["loader_state_equal"] for r in (get(R, "states", "shardstream", "positions") or {}).values()
              if "loader_state_equal" in r]
        L += ["", (f"Median (min-max) of {cfg['resume_repeats']} fresh processes per library and position, the "
                   "libraries alternating. The states come from one earlier process per library that ran epoch 0 "
                   "through the same loader and called `loader.state_dict()` after that many samples (shardstream: "
                   "`StreamingDataset.state_dict(num_samples=k)` of a dataset that never iterated"
                   + (", equal to the loader's state at every position" if eq and all(eq) else
                      (", which differed from the loader's state" if eq else ""))
                   + "; mosaicml-streaming: the loader's state, `epoch` 0 and `sample_in_epoch` k). *Constructor -> "
                   "first batch*: `StreamingDataset(...)` + `StreamingDataLoader(...)` + `load_state_dict` + "
                   "`next(iter(loader))`; *`load_state_dict` -> first batch*: the same without the two "
                   "constructors (the DataLoader workers start inside `iter`). Not included: the imports ("
                   + ", ".join(f"{NAMES[lib]} + torch median {statistics.median(v):.2f} s" for lib, v in
                               imports.items() if v)
                   + "). Other processes used "
                   + _share_range([r for lib in libs for runs in R["resume"][lib].values() for r in runs])
                   + " of the CPUs during these processes. Every first batch is checked against the batch the "
                   "uninterrupted epoch gave after the "
                   "same samples; shardstream's runs also read the rest of the epoch and check its count. The "
                   "0% row starts epoch 0 without a state.")]
        lines = []
        for lib in libs:
            s = S.get(lib) or {}
            if s.get("worst_total") is None:
                continue
            lines.append(f"{NAMES[lib]}: slowest resumed position {s['worst_total']:.3f} s constructor included "
                         f"(**{'MET' if s['worst_total'] < TARGET_RESUME_S else 'NOT MET'}** for < "
                         f"{TARGET_RESUME_S:g} s), slowest / fastest position {s['spread']:.2f}x")
        if lines:
            L += ["", "Target: resuming at 10 %, 50 % and 90 % of an epoch takes well under 1 s and the same time "
                  "at every position (medians):", ""] + [f"- {x}." for x in lines]
    return "\n".join(L) + "\n"


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    return out + ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--work", default=os.path.join(HERE, ".data", "loader"))
    ap.add_argument("--peer-python", default=os.path.join(ROOT, ".venv-peers", "bin", "python"),
                    help="python of the venv with mosaicml-streaming and litdata ('' to skip them)")
    ap.add_argument("--samples", type=int, default=DEFAULT_SAMPLES)
    ap.add_argument("--repeats", type=int, default=3, help="timed epochs per throughput case (0: no throughput)")
    ap.add_argument("--resume-repeats", type=int, default=3,
                    help="fresh processes per library and position (0: no resumption part)")
    ap.add_argument("--orders", default="shuffled,sequential", help="comma-separated: shuffled, sequential")
    ap.add_argument("--cases", default=",".join(CASES), help="comma-separated subset of " + ",".join(CASES))
    ap.add_argument("--skip-batches", type=int, default=DEFAULT_SKIP,
                    help="batches left out at the start of each epoch for the steady rate")
    ap.add_argument("--max-busy", type=float, default=0.25,
                    help="before each measurement, wait until the CPUs are at most this busy (share, over 2 s)")
    ap.add_argument("--wait", type=float, default=30.0, help="... but at most this many seconds (0: never wait)")
    ap.add_argument("--out", help="also write the Markdown here")
    ap.add_argument("--json", help="write the raw results here")
    ap.add_argument("--keep-data", action="store_true")
    args = ap.parse_args()
    if args.child:
        _shardstream_child(args.child)
        return
    orders = tuple(o for o in args.orders.split(",") if o)
    cases = tuple(c for c in args.cases.split(",") if c)
    for o in orders:
        if o not in ("shuffled", "sequential"):
            ap.error(f"unknown order {o!r}")
    for c in cases:
        if c not in CASES:
            ap.error(f"unknown case {c!r}")
    R = run_loader(args.work, args.peer_python or None, args.samples, repeats=args.repeats,
                   resume_repeats=args.resume_repeats, orders=orders, cases=cases, skip=args.skip_batches,
                   max_busy=args.max_busy, wait_s=args.wait, keep_data=args.keep_data)
    common.publish(R, markdown, __file__, args.out, args.json)
    if failed(R):
        log(f"failed or wrong: {', '.join(failed(R))}")
        sys.exit(1)


def failed(R: dict) -> list[str]:
    out = [f"write-{lib}" for lib, r in R["writes"].items() if "error" in r]
    out += [f"states-{lib}" for lib, r in R["states"].items() if "error" in r]
    for order, by_case in R["throughput"].items():
        out += [f"{c}-{order}" for c, r in by_case.items() if "error" in r or not r.get("ok")]
    for lib, by_pos in R["resume"].items():
        out += [f"resume-{lib}-{p}" for p, runs in by_pos.items() if any("error" in r or not r.get("ok") for r in runs)]
    return out


if __name__ == "__main__":
    main()
