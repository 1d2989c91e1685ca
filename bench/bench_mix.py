"""Mixing many streams: shardstream vs mosaicml-streaming with 1,000 (and 10) small streams.

    .venv/bin/python bench/bench_mix.py [--streams 1000,10] [--out mix.md] [--json mix.json]

(``--peer-python`` defaults to ``.venv-peers/bin/python``; ``--help`` lists the options.)

The driver (this file, project venv) writes ``max(--streams)`` small MDS datasets once with
shardstream's ``MDSWriter`` (``--shards`` shards of ``--shard-samples`` samples each; a sample
is ``x``: 56 bytes as ``ndarray:uint8:56`` and ``label``: int, 64 bytes; stream ``s`` holds
labels ``s * 1000 + i``). A run with ``S`` streams mixes the first ``S`` of them, weighted by
``proportion`` 1, 2, 3, 1, 2, 3, ... into epochs of ``--epoch-size`` samples, with
``batch_size=32``, ``shuffle=True`` and ``num_canonical_nodes=1``. Both libraries read the same
files (the MDS format is the same byte for byte). Every measurement is a fresh subprocess of
its library's venv, one after the other (never two at once), killed after ``--timeout``
seconds:

- *Start*: the time to build the ``Stream`` list and construct ``StreamingDataset(streams=...)``,
  then ``next(iter(ds))`` (the first sample of epoch 0).
- *Epoch* (one process per stream count and batching method): shardstream's plan alone (sample
  ids of the whole epoch from ``ds.epoch_plan(0, world).iter_worker(world)``), then two epochs of
  samples (``for s in ds``) on another dataset object; the state after half the epoch
  (``ds.state_dict()`` after that many samples, rounded down to a whole global batch) and the
  sample that follows are recorded. mosaicml-streaming runs epoch 0 the same way
  (``ds.state_dict(k, True)`` after ``k`` samples).
- *Resume*: a fresh process constructs the dataset, calls ``load_state_dict(state)`` with the
  state at 50 % and takes the first sample, which is checked against the recorded one.

Start and resume run ``--repeats`` processes per library, the libraries alternating.
``bench/run.py`` calls :func:`run_mix`, :func:`markdown` and :func:`target_rows`.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from typing import Any

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
if HERE not in sys.path:
    sys.path.insert(0, HERE)
import common
from common import get, log

COLUMNS = {"x": "ndarray:uint8:56", "label": "int"}
SAMPLE_BYTES = 64
LABEL_STRIDE = 1000  # label = stream * 1000 + index in the stream
SHARD_LIMIT = 7050  # bytes: 100 samples of 64 B (+ the offsets and header) fill one shard
BATCH = 32
DEFAULT_STREAMS = (1000, 10)
DEFAULT_EPOCH = 200_000
DEFAULT_SHARDS = 3
DEFAULT_SHARD_SAMPLES = 100
TARGET_STREAMS = 1000
TARGET_START_S = 2.0
TIMEOUT_S = 300.0
MOSAIC = "mosaicml-streaming"
NAMES = {"shardstream": "shardstream", "mosaic": MOSAIC}


def proportions(n: int) -> list[float]:
    return [float(1 + s % 3) for s in range(n)]


# -- inside a measurement's subprocess (stdlib + numpy at import: runs in either venv) ---------
def _rss_mb() -> float:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1e3 * 1.024
    except OSError:
        pass
    return 0.0


def _label(sample) -> int:
    return int(sample["label"])


class _Shardstream:
    def __init__(self, cfg: dict) -> None:
        import shardstream
        from shardstream import Stream, StreamingDataset

        self.cfg, self.Stream, self.Dataset = cfg, Stream, StreamingDataset
        self.info = {"library": "shardstream", "version": shardstream.__version__,
                     "python": platform.python_version(), "numpy": np.__version__}

    def make(self):
        return make_mixture(self.Stream, self.Dataset, self.cfg)

    def state(self, ds, k: int) -> dict:
        return ds.state_dict()

    def plan_pass(self) -> dict:
        """Sample ids of the whole of epoch 0 from the plan alone (no sample is read)."""
        from shardstream.plan import World

        world = World()
        t = time.perf_counter()
        ds = self.make()
        t1 = time.perf_counter()
        n = 0
        acc = 0
        for _, ids in ds.epoch_plan(0, world).iter_worker(world):
            n += ids.size
            acc += int(ids.sum())
        t2 = time.perf_counter()
        return {"count": n, "id_sum": acc, "construct_s": t1 - t, "seconds": t2 - t1, "samples_per_s": n / (t2 - t1)}

    def counts(self, ds) -> list[int]:
        return ds.stream_counts(0).tolist()


def make_mixture(stream_cls, dataset_cls, c: dict):
    """The same mixture in either library (both take mosaicml-streaming's keywords)."""
    streams = [stream_cls(local=p, proportion=w) for p, w in zip(c["paths"], proportions(len(c["paths"])))]
    return dataset_cls(streams=streams, epoch_size=c["epoch_size"], batch_size=BATCH, shuffle=True,
                       num_canonical_nodes=1, batching_method=c["method"])


class _Mosaic:
    def __init__(self, cfg: dict) -> None:
        import streaming
        from bench_mosaic import clean_shm
        from streaming import Stream, StreamingDataset

        clean_shm()
        self.cfg, self.Stream, self.Dataset = cfg, Stream, StreamingDataset
        self.info = {"library": MOSAIC, "version": streaming.__version__, "python": platform.python_version(),
                     "numpy": np.__version__}

    def make(self):
        return make_mixture(self.Stream, self.Dataset, self.cfg)

    def state(self, ds, k: int) -> dict:
        return ds.state_dict(k, True)

    def counts(self, ds) -> list[int]:
        return [int(s.choose) for s in ds.streams]


def child(cfg: dict) -> dict:
    t0 = time.perf_counter()
    lib = _Shardstream(cfg) if cfg["library"] == "shardstream" else _Mosaic(cfg)
    res = dict(lib.info, import_s=time.perf_counter() - t0, task=cfg["task"], streams=len(cfg["paths"]),
               method=cfg["method"])
    task = cfg["task"]
    if task in ("start", "resume"):
        t1 = time.perf_counter()
        ds = lib.make()
        t2 = time.perf_counter()
        if cfg.get("state") is not None:
            ds.load_state_dict(cfg["state"])
        t3 = time.perf_counter()
        it = iter(ds)
        label = _label(next(it))
        t4 = time.perf_counter()
        res.update({"construct_s": t2 - t1, "load_state_dict_s": t3 - t2, "first_sample_s": t4 - t3,
                    "total_s": t4 - t1, "label": label, "peak_rss_mb": _rss_mb(),
                    "ok": label == cfg["expect_label"] if cfg.get("expect_label") is not None else None})
        del it
    elif task == "epoch":
        if cfg["library"] == "shardstream":
            res["plan"] = lib.plan_pass()
            log(f"shardstream plan, {res['streams']} streams, {cfg['method']}: {res['plan']['count']:,} ids, "
                f"{res['plan']['samples_per_s']:,.0f} samples/s")
        t1 = time.perf_counter()
        ds = lib.make()
        res["construct_s"] = time.perf_counter() - t1
        res["expected_counts"] = lib.counts(ds)
        res["epochs"] = [_epoch(lib, ds, cfg["k"], record=True)]
        for _ in range(cfg.get("extra_epochs", 0)):
            res["epochs"].append(_epoch(lib, ds, None, record=False))
        e0 = res["epochs"][0]
        res.update({"state": e0.pop("state"), "label_at_k": e0.pop("label_at_k"), "first_label": e0["first_label"],
                    "k": cfg["k"], "peak_rss_mb": _rss_mb()})
        got = np.asarray(e0["per_stream"], np.int64)
        for e in res["epochs"]:  # a count per stream: checked here, not kept
            e.pop("per_stream")
        want = np.asarray(res["expected_counts"], np.int64)
        res["counts_exact"] = bool(np.array_equal(got, want))
        res["counts_extra"] = int((got - want).sum())
        res["counts_max_abs_diff"] = int(np.abs(got - want).max())
        log(f"{res['library']} epoch, {res['streams']} streams, {cfg['method']}: "
            + ", ".join(f"{e['samples_per_s']:,.0f}" for e in res["epochs"]) + " samples/s")
    else:
        raise SystemExit(f"unknown task {task!r}")
    return res


def _epoch(lib, ds, k, record: bool) -> dict:
    """One epoch of ``ds`` in this process: count, label sum, samples per stream; with ``record``, the
    state after ``k`` samples and the label that follows."""
    per = np.zeros(len(lib.cfg["paths"]), np.int64)
    out: dict[str, Any] = {}
    n = acc = 0
    first = None
    labels = []
    t = time.perf_counter()
    for s in ds:
        lab = int(s["label"])
        if n == 0:
            first = lab
        if record and n == k:
            out["label_at_k"] = lab
        labels.append(lab)
        acc += lab
        n += 1
        if record and n == k:
            out["state"] = lib.state(ds, k)
    took = time.perf_counter() - t
    np.add.at(per, np.asarray(labels, np.int64) // LABEL_STRIDE, 1)
    out.update({"count": n, "label_sum": acc, "first_label": first, "seconds": took, "samples_per_s": n / took,
                "per_stream": per.tolist()})
    return out


# -- the driver ---------------------------------------------------------------------------------
def write_streams(root: str, n: int, shards: int, shard_samples: int) -> list[str]:
    """``n`` datasets of ``shards`` x ``shard_samples`` samples under ``root`` (shardstream's MDSWriter)."""
    from shardstream import MDSWriter

    paths = []
    per = shards * shard_samples
    for s in range(n):
        path = os.path.join(root, f"stream-{s:04d}")
        x = np.full(SAMPLE_BYTES - 8, s % 256, np.uint8)
        with MDSWriter(out=path, columns=COLUMNS, size_limit=SHARD_LIMIT * shard_samples // DEFAULT_SHARD_SAMPLES,
                       max_workers=1) as w:
            for i in range(per):
                w.write({"x": x, "label": s * LABEL_STRIDE + i})
        paths.append(path)
    with open(os.path.join(paths[0], "index.json")) as f:
        sizes = [sh["samples"] for sh in json.load(f)["shards"]]
    if sizes != [shard_samples] * shards:
        log(f"note: stream 0 has shards of {sizes} samples (asked for {shards} x {shard_samples})")
    return paths


class _Runner:
    def __init__(self, work: str, peer_python: str | None, timeout: float, wait_s: float, max_busy: float) -> None:
        self.work, self.peer_python, self.timeout = work, peer_python, timeout
        self.wait_s, self.max_busy = wait_s, max_busy
        self.count = 0
        self.killed = False  # a mosaicml-streaming process was killed (it leaves shared memory behind)

    def env(self, library: str) -> dict:
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        if library == "mosaic":
            tmp = os.path.join(self.work, "tmp-mosaic")
            os.makedirs(tmp, exist_ok=True)
            env["TMPDIR"] = tmp  # streaming leaves lock files there
            stubs = os.path.join(ROOT, "tests", "peer_stubs")  # `import streaming` needs the torchvision stand-in
            env["PYTHONPATH"] = stubs + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        return env

    def run(self, library: str, tag: str, cfg: dict) -> dict:
        import bench_loader

        self.count += 1
        tag = f"{self.count:03d}-{tag}"
        out = os.path.join(self.work, f"result-{tag}.json")
        cfg_path = os.path.join(self.work, f"config-{tag}.json")
        with open(cfg_path, "w") as f:
            json.dump(dict(cfg, library=library, out=out), f)
        python = sys.executable if library == "shardstream" else self.peer_python
        cmd = [python, os.path.abspath(__file__), "--child", cfg_path]
        quiet = bench_loader.wait_quiet(self.max_busy, self.wait_s) if self.wait_s > 0 else {}
        log(f"== {tag}" + (f" (CPUs {quiet['busy_before']:.0%} busy)" if quiet.get("busy_before") is not None else ""))
        err_log = os.path.join(self.work, f"stderr-{tag}.log")
        import resource

        kids0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        jiffies0 = bench_loader.cpu_jiffies()
        start = time.perf_counter()
        try:
            with open(err_log, "w") as err:
                code: Any = subprocess.run(cmd, env=self.env(library), cwd=ROOT, stderr=err, check=False,
                                           timeout=self.timeout).returncode
        except subprocess.TimeoutExpired:
            code = None
            self.killed = self.killed or library == "mosaic"
        wall = time.perf_counter() - start
        jiffies1 = bench_loader.cpu_jiffies()
        kids1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        others = None
        if jiffies0 and jiffies1 and jiffies1[1] > jiffies0[1]:
            # CPU time the machine spent on anything but this measurement, as a share of all CPUs
            own = (kids1.ru_utime + kids1.ru_stime) - (kids0.ru_utime + kids0.ru_stime)
            busy = (jiffies1[0] - jiffies0[0]) / os.sysconf("SC_CLK_TCK")
            others = max(0.0, busy - own) / (wall * (os.cpu_count() or 1))
        if code != 0 or not os.path.exists(out):
            with open(err_log) as f:
                tail = f.read()[-3000:]
            what = f"timed out ({self.timeout:g} s)" if code is None else f"exit status {code}"
            log(f"!! {tag}: {what}; stderr tail:\n{tail}")
            return {"error": what, "stderr_tail": tail, "wall_s": wall, "timed_out": code is None}
        with open(out) as f:
            res = json.load(f)
        res["wall_s"] = wall
        res["busy_before"] = quiet.get("busy_before")
        res["others_cpu_share"] = others
        return res


def run_mix(work_dir: str, peer_python: str | None, streams: tuple[int, ...] = DEFAULT_STREAMS, *,
            epoch_size: int = DEFAULT_EPOCH, shards: int = DEFAULT_SHARDS,
            shard_samples: int = DEFAULT_SHARD_SAMPLES, repeats: int = 3,
            methods: tuple[str, ...] = ("random", "per_stream"), mosaic_methods: tuple[str, ...] = ("random",),
            timeout: float = TIMEOUT_S, wait_s: float = 0.0, max_busy: float = 0.25,
            keep_data: bool = False) -> dict:
    """Run the mixing benchmark and return its raw results (see :func:`markdown`).

    ``peer_python`` None (or a missing file) runs shardstream only. ``methods``: shardstream's
    batching methods (each gets an epoch process, and start and resume runs); ``mosaic_methods``
    likewise for mosaicml-streaming. Before each measurement, wait (at most ``wait_s``) until the
    CPUs are at most ``max_busy`` busy.
    """
    import bench_loader

    if shards * shard_samples > LABEL_STRIDE:
        raise ValueError(f"at most {LABEL_STRIDE} samples per stream (labels are stream * {LABEL_STRIDE} + index)")
    total_start = time.perf_counter()
    work = os.path.abspath(work_dir)
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    have_peer = bool(peer_python) and os.path.exists(peer_python)
    k = epoch_size // 2 // BATCH * BATCH
    R: dict = {"date": datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z"),
               "machine": bench_loader.machine_info(), "git": common.git_rev(),
               "loadavg_before": bench_loader._loadavg(),
               "config": {"streams": list(streams), "epoch_size": epoch_size, "shards": shards,
                          "shard_samples": shard_samples, "sample_bytes": SAMPLE_BYTES, "batch_size": BATCH,
                          "resume_at": k, "repeats": repeats, "methods": list(methods),
                          "mosaic_methods": list(mosaic_methods) if have_peer else [], "timeout_s": timeout,
                          "wait_s": wait_s, "max_busy": max_busy, "peer_python": peer_python if have_peer else None},
               "cases": []}
    runs = [("shardstream", m) for m in methods] + ([("mosaic", m) for m in mosaic_methods] if have_peer else [])
    runner = _Runner(work, peer_python if have_peer else None, timeout, wait_s, max_busy)
    try:
        t = time.perf_counter()
        paths = write_streams(os.path.join(work, "data"), max(streams), shards, shard_samples)
        R["write_s"] = time.perf_counter() - t
        R["disk_bytes"] = common.dir_bytes(os.path.join(work, "data"))
        log(f"wrote {max(streams):,} streams in {R['write_s']:.1f}s ({R['disk_bytes'] / 1e6:,.1f} MB)")
        for S in streams:
            base = {"paths": paths[:S], "epoch_size": epoch_size, "k": k}
            case: dict = {"streams": S, "epoch": {}, "start": {}, "resume": {}}
            for lib, m in runs:
                key = f"{lib}/{m}"
                cfg = dict(base, task="epoch", method=m, extra_epochs=1 if lib == "shardstream" else 0)
                case["epoch"][key] = runner.run(lib, f"epoch-{lib}-{m}-{S}", cfg)
            for r in range(repeats):
                for lib, m in runs:
                    key = f"{lib}/{m}"
                    ep = case["epoch"][key]
                    cfg = dict(base, task="start", method=m, expect_label=ep.get("first_label"))
                    case["start"].setdefault(key, []).append(runner.run(lib, f"start-{lib}-{m}-{S}-{r}", cfg))
                    if "error" in ep:
                        continue
                    cfg = dict(base, task="resume", method=m, state=ep["state"], expect_label=ep["label_at_k"])
                    case["resume"].setdefault(key, []).append(runner.run(lib, f"resume-{lib}-{m}-{S}-{r}", cfg))
            for ep in case["epoch"].values():  # large (a weight per stream); the runs above needed them
                ep.pop("state", None)
                ep.pop("expected_counts", None)
            R["cases"].append(case)
            log(f"{S} streams done")
    finally:
        if runner.killed:
            _clean_mosaic_shm(runner)
        if not keep_data:
            shutil.rmtree(work, ignore_errors=True)
    R["loadavg_after"] = bench_loader._loadavg()
    R["total_s"] = time.perf_counter() - total_start
    return R


def _clean_mosaic_shm(runner: _Runner) -> None:
    """A killed mosaicml-streaming process leaves shared memory; its cleaner removes it."""
    code = "import bench_mosaic; bench_mosaic.clean_shm()"
    subprocess.run([runner.peer_python, "-c", code], env=dict(runner.env("mosaic"), PYTHONPATH=os.pathsep.join(
        [os.path.join(ROOT, "tests", "peer_stubs"), HERE])), cwd=ROOT, check=False, timeout=120)


# -- the report ---------------------------------------------------------------------------------
def _good(runs: list[dict]) -> list[dict]:
    return [r for r in runs if "error" not in r]


def _median(runs: list[dict], key: str):
    v = [r[key] for r in _good(runs) if r.get(key) is not None]
    return statistics.median(v) if v else None


def _cell(runs: list[dict], key: str) -> str:
    v = [r[key] for r in _good(runs) if r.get(key) is not None]
    bad = [r for r in runs if "error" in r]
    if not v:
        return f"**{bad[0]['error']}**" if bad else "n/a"
    med = statistics.median(v)
    text = f"{med:.3f}" if len(v) == 1 else f"{med:.3f} ({min(v):.3f}-{max(v):.3f})"
    return text + (f" ({len(bad)} failed: {bad[0]['error']})" if bad else "")


def _check(runs: list[dict]) -> str:
    good = _good(runs)
    if not good:
        return "n/a"
    wrong = sum(1 for r in good if r.get("ok") is False)
    return "all match" if not wrong else f"**{wrong} of {len(good)} wrong**"


def _case(R: dict, streams: int) -> dict | None:
    return next((c for c in R.get("cases", []) if c["streams"] == streams), None)


def start_summary(R: dict, streams: int = TARGET_STREAMS) -> dict:
    """Median construction + first sample per library (default batching), and resumption."""
    c = _case(R, streams) or {}
    out = {}
    for lib in ("shardstream", "mosaic"):
        key = f"{lib}/random"
        out[lib] = {"start": _median((c.get("start") or {}).get(key, []), "total_s"),
                    "resume": _median((c.get("resume") or {}).get(key, []), "total_s"),
                    "error": next((r["error"] for r in (c.get("start") or {}).get(key, []) if "error" in r), None)}
    return out


def target_rows(R: dict | None) -> list[dict]:
    """The mixing target, in bench/run.py's summary format."""
    if not R or not _case(R, TARGET_STREAMS):
        return []
    S = start_summary(R)
    ss, mo = S["shardstream"], S["mosaic"]
    if ss["start"] is None:
        return [{"target": f"{TARGET_STREAMS:,} streams: construction + first sample < {TARGET_START_S:g} s",
                 "measured": f"failed ({ss['error']})", "ratio": "n/a", "required": f"< {TARGET_START_S:g} s",
                 "met": False}]
    measured = f"{ss['start']:.3f} s"
    ratio = f"{ss['start'] / TARGET_START_S:.3f} of the limit"
    if mo["start"] is not None:
        measured += f" vs {MOSAIC} {mo['start']:.3f} s"
        ratio += f"; {MOSAIC} takes {mo['start'] / ss['start']:.1f}x as long"
    elif mo["error"]:
        measured += f" ({MOSAIC}: {mo['error']})"
    return [{"target": f"{TARGET_STREAMS:,} streams: construction + first sample < {TARGET_START_S:g} s "
                       f"(median of fresh processes; {MOSAIC} for comparison)",
             "measured": measured, "ratio": ratio, "required": f"< {TARGET_START_S:g} s",
             "met": ss["start"] < TARGET_START_S}]


def _sps(x) -> str:
    return "n/a" if not x else f"{x:,.0f}"


def _row_label(lib: str, m: str) -> str:
    return f"{NAMES[lib]}, `{m}`"


def markdown(R: dict) -> str:
    """The mixing benchmark as a Markdown section."""
    cfg, m = R["config"], R["machine"]
    vers = {}
    for c in R["cases"]:
        for part in ("epoch", "start", "resume"):
            for key, v in c[part].items():
                for r in v if isinstance(v, list) else [v]:
                    if "version" in r:
                        vers.setdefault(r["library"], r)
    vtext = "; ".join(f"{lib} {r['version']} (" + (f"git {R['git']}, " if lib == "shardstream" else "")
                      + f"Python {r['python']}, numpy {r['numpy']})" for lib, r in vers.items())
    n_max = max(cfg["streams"])
    per = cfg["shards"] * cfg["shard_samples"]
    L = ["## Mixing many streams", "",
         f"Run on {R['date']}, total {R['total_s']:.0f} s."
         + (f" Command: `{R['command']}`." if R.get("command") else ""), "",
         (f"- Machine: {m['cpu']}, {m['logical_cpus']} logical CPUs ({m.get('usable_cpus')} usable), RAM "
          f"{m.get('ram_gib', 0):.1f} GiB, {m['os']}; load average before / after: {R['loadavg_before']} / "
          f"{R['loadavg_after']} (the machine is shared; every measurement ran alone, one after the other)"),
         f"- Versions: {vtext or 'n/a'}",
         (f"- Data: {n_max:,} streams, each its own MDS dataset of {cfg['shards']} shards x "
          f"{cfg['shard_samples']} samples ({per:,} samples; a sample is `x`: `ndarray:uint8:56` + `label`: int, "
          f"{cfg['sample_bytes']} B), {R.get('disk_bytes', 0) / 1e6:,.1f} MB in all, written once by "
          f"shardstream's `MDSWriter` in {R.get('write_s', 0):.1f} s and read by both libraries from the page "
          "cache. A run with S streams mixes the first S."),
         (f"- Dataset: `StreamingDataset(streams=[Stream(local=dir_i, proportion=w_i) for i in range(S)], "
          f"epoch_size={cfg['epoch_size']}, batch_size={cfg['batch_size']}, shuffle=True, "
          "num_canonical_nodes=1, batching_method=...)` in both libraries, `w_i` = 1, 2, 3, 1, 2, 3, ... ("
          + "; ".join(_coverage(S, cfg['epoch_size'], per) for S in cfg["streams"])
          + "); the default world (one process, no DataLoader)."),
         (f"- Other processes used {_share(R)} of the CPUs while the measurements ran (`/proc/stat` minus "
          "the measurement's own CPU time, as a share of all CPUs; the machine is shared)."), ""]
    for c in R["cases"]:
        for key, r in c["epoch"].items():
            if "error" in r:
                lib, meth = key.split("/")
                L += [f"**{NAMES[lib]} epoch run ({c['streams']} streams, `{meth}`) failed** ({r['error']}):", "",
                      "```", r.get("stderr_tail", "")[-1500:], "```", ""]

    L += ["### Construction, first sample and resumption", ""]
    header = ["Streams", "Library, batching", "construct (s)", "first sample (s)", "construct + first sample (s)",
              "resume at 50 %: construct + `load_state_dict` + first sample (s)",
              "`load_state_dict` + first sample (s)", "checked"]
    rows = []
    for c in R["cases"]:
        for key in c["start"]:
            lib, meth = key.split("/")
            st, rs = c["start"][key], c["resume"].get(key, [])
            resume_first = [dict(r, after=r["load_state_dict_s"] + r["first_sample_s"]) for r in _good(rs)]
            resume_first += [r for r in rs if "error" in r]
            rows.append([f"{c['streams']:,}", _row_label(lib, meth), _cell(st, "construct_s"),
                         _cell(st, "first_sample_s"), _cell(st, "total_s"), _cell(rs, "total_s") if rs else "n/a",
                         _cell(resume_first, "after") if rs else "n/a", _check(st + rs)])
    L += _table(header, rows)
    imports = {lib: [r["import_s"] for c in R["cases"] for key, v in c["start"].items() if key.startswith(lib)
                     for r in _good(v)] for lib in ("shardstream", "mosaic")}
    procs = f"{cfg['repeats']} fresh process{'es' if cfg['repeats'] != 1 else ''}"
    L += ["", (f"Median (min-max) of {procs} per row, the rows alternating. *Construct*: "
               "building the `Stream` list and `StreamingDataset(streams=...)` (every stream's `index.json` read). "
               "*First sample*: `next(iter(ds))`, epoch 0 (mosaicml-streaming builds the epoch's sample ids here: "
               "its per-stream resampling, partition and shuffle, and its shared memory). *Resume*: a new "
               f"process constructs the dataset, loads the state saved after {cfg['resume_at']:,} samples (50 % "
               "of the epoch, a whole number of global batches) and takes the first sample. *Checked*: the first "
               "sample equals the first sample of the uninterrupted epoch, and the resumed one the sample that "
               "followed the saved state there. Not included: the imports ("
               + ", ".join(f"{NAMES[lib]} median {statistics.median(v):.2f} s" for lib, v in imports.items() if v)
               + "; mosaicml-streaming imports torch)."), ""]

    L += ["### Epoch throughput in one process", ""]
    header = ["Streams", "Library, batching", "samples in the epoch", "plan only: sample ids/s",
              "samples/s, epoch 0 (fresh dataset object)", "samples/s, epoch 1", "per-stream counts"]
    rows = []
    for c in R["cases"]:
        for key, r in c["epoch"].items():
            lib, meth = key.split("/")
            if "error" in r:
                rows.append([f"{c['streams']:,}", _row_label(lib, meth), f"**{r['error']}**"] + [""] * 4)
                continue
            eps = r["epochs"]
            counts = ("exact" if r["counts_exact"] else
                      f"+{r['counts_extra']:,} padding (at most {r['counts_max_abs_diff']} per stream)"
                      if r["counts_extra"] >= 0 else f"off by up to {r['counts_max_abs_diff']}")
            rows.append([f"{c['streams']:,}", _row_label(lib, meth), f"{eps[0]['count']:,}",
                         _sps(get(r, "plan", "samples_per_s")), _sps(eps[0]["samples_per_s"]),
                         _sps(eps[1]["samples_per_s"]) if len(eps) > 1 else "n/a", counts])
    L += _table(header, rows)
    L += ["", ("One process per row. *Plan only* (shardstream): the sample ids of the whole of epoch 0 from "
               "`ds.epoch_plan(0, World()).iter_worker(World())`, no sample read: what the mixed plan costs per "
               "sample. *samples/s*: `for s in ds` reading each sample's label, on another dataset object "
               "(every shard opened during epoch 0), then epoch 1 on the same object (shardstream; "
               "mosaicml-streaming runs epoch 0 only, where it also records its state). *Per-stream counts*: the "
               "samples of each stream in epoch 0 (from the labels) against what the dataset reports "
               "(`ds.stream_counts(0)`; mosaicml-streaming: `ds.streams[i].choose`): `exact`, or the padding "
               "`per_stream` adds (each stream's last global batch is completed, then the epoch's last one).")]
    rows = target_rows(R)
    if rows:
        r = rows[0]
        L += ["", f"Target: {r['target']}: {r['measured']} (**{'MET' if r['met'] else 'NOT MET'}**)."]
    return "\n".join(L) + "\n"


def _coverage(streams: int, epoch: int, per: int) -> str:
    x = epoch / (streams * per)
    if x < 1:
        return f"with {streams:,} streams an epoch draws ~{x:.0%} of their samples"
    return f"with {streams:,} streams each sample comes ~{x:.0f} times per epoch on average"


def _share(R: dict) -> str:
    v = [r["others_cpu_share"] for c in R["cases"] for part in ("epoch", "start", "resume")
         for runs in c[part].values() for r in (runs if isinstance(runs, list) else [runs])
         if r.get("others_cpu_share") is not None]
    if not v:
        return "an unknown share"
    return f"{statistics.median(v):.0%} (median; {min(v):.0%}-{max(v):.0%})"


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    return out + ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]


def failed(R: dict) -> list[str]:
    out = []
    for c in R["cases"]:
        for part in ("epoch", "start", "resume"):
            for key, v in c[part].items():
                for r in v if isinstance(v, list) else [v]:
                    if "error" in r or r.get("ok") is False:
                        out.append(f"{part}-{key}-{c['streams']}")
    return sorted(set(out))


def parse_streams(text: str) -> tuple[int, ...]:
    out = tuple(int(x) for x in text.split(",") if x.strip())
    if any(n < 1 for n in out):
        raise ValueError(f"stream counts must be >= 1: {out}")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--work", default=os.path.join(HERE, ".data", "mix"))
    ap.add_argument("--peer-python", default=os.path.join(ROOT, ".venv-peers", "bin", "python"),
                    help="python of the venv with mosaicml-streaming ('' to skip it)")
    ap.add_argument("--streams", default=",".join(map(str, DEFAULT_STREAMS)),
                    help="stream counts, comma-separated (the data is written once for the largest)")
    ap.add_argument("--epoch-size", type=int, default=DEFAULT_EPOCH)
    ap.add_argument("--shards", type=int, default=DEFAULT_SHARDS, help="shards per stream")
    ap.add_argument("--shard-samples", type=int, default=DEFAULT_SHARD_SAMPLES, help="samples per shard")
    ap.add_argument("--repeats", type=int, default=3, help="fresh processes per library for start and resume")
    ap.add_argument("--methods", default="random,per_stream", help="shardstream's batching methods")
    ap.add_argument("--mosaic-methods", default="random", help="mosaicml-streaming's batching methods")
    ap.add_argument("--timeout", type=float, default=TIMEOUT_S, help="seconds per measurement")
    ap.add_argument("--wait", type=float, default=0.0,
                    help="before each measurement, wait up to this many seconds for the CPUs to be at most 25%% busy "
                    "(0: never wait; each result records the CPU share other processes used while it ran)")
    ap.add_argument("--out", help="also write the Markdown here")
    ap.add_argument("--json", help="write the raw results here")
    ap.add_argument("--keep-data", action="store_true")
    args = ap.parse_args()
    if args.child:
        with open(args.child) as f:
            cfg = json.load(f)
        common.emit(child(cfg), cfg["out"])
        return
    R = run_mix(args.work, args.peer_python or None, parse_streams(args.streams), epoch_size=args.epoch_size,
                shards=args.shards, shard_samples=args.shard_samples, repeats=args.repeats,
                methods=tuple(m for m in args.methods.split(",") if m),
                mosaic_methods=tuple(m for m in args.mosaic_methods.split(",") if m), timeout=args.timeout,
                wait_s=args.wait, keep_data=args.keep_data)
    common.publish(R, markdown, __file__, args.out, args.json)
    if failed(R):
        log(f"failed or wrong: {', '.join(failed(R))}")
        sys.exit(1)


if __name__ == "__main__":
    main()
