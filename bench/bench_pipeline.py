"""The text LM input pipeline, side by side: shardstream vs Hugging Face ``datasets`` vs Grain.

    .venv/bin/python bench/bench_pipeline.py [--out pipeline.md] [--json pipeline.json]
    .venv/bin/python bench/run.py --only pipeline     # the same, as a section of docs/benchmarks.md

(``--peer-python`` defaults to ``.venv-peers/bin/python``; ``--help`` lists the options.)

The workload (``bench_pipeline_data.py``: ~32,000 English-like documents, ~49 MB of JSON Lines in
4 files and the same as Parquet, a byte-level BPE of 8,192 tokens trained on them) is generated
once and kept under ``--data`` (``bench/.data/pipeline``). Every side runs one pipeline::

    shuffle(buffer 10,000, seed 0) -> tokenize, batches of 1,000, one end-of-document token per
    document -> concatenate and chunk into rows of 1,024 tokens -> batches of 8 rows

- shardstream: ``load_dataset("json", data_files=...)`` (or ``StreamingDataset(local=*.parquet)``)
  ``.shuffle(seed=0, buffer_size=10_000).map(Tokenize(tok, append_eos=True), batched=True,
  batch_size=1000, remove_columns=["text"]).pack(1024).batch(8)``;
- HF ``datasets``: ``load_dataset("json", data_files=..., streaming=True).shuffle(buffer_size=10_000,
  seed=0).map(tok_fn, batched=True, batch_size=1000, remove_columns=["text"])``, then the run_clm
  concatenate-and-chunk written as a generator and batches of 8 stacked with numpy;
- Grain (peer venv): the documents read into memory with pyarrow, ``MapDataset.source(...).shuffle``,
  tokenized (batched or per document), ``ConcatThenSplitIterDataset``, ``.batch(8)``.

Measured, each in a fresh process pinned to ``--cpus`` (one after the other, never two at once):
tokens/s over one epoch (real tokens, padding excluded; the steady rate leaves out the time to the
first batch), packing efficiency, peak RSS; resumption at 10/50/90 % of an epoch
(``load_state_dict`` -> first batch, the next 20 batches compared with an uninterrupted epoch's)
and the checkpoint's size (``json.dumps``), shardstream and HF. Every epoch is checked against the
generator's token count and id sum. ``bench/run.py`` calls :func:`run_pipeline`, :func:`markdown`
and :func:`target_rows`.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
if HERE not in sys.path:
    sys.path.insert(0, HERE)
import bench_loader  # noqa: E402
import bench_pipeline_data  # noqa: E402
import bench_pipeline_report  # noqa: E402
import bench_pipeline_sides  # noqa: E402
import common  # noqa: E402
from common import log  # noqa: E402

DEFAULT_DOCS = 32_000
DEFAULT_FILES = 4
DATA = os.path.join(HERE, ".data", "pipeline")
POSITIONS = (0.1, 0.5, 0.9)
RUN_TIMEOUT_S = 900
EPOCH_TIMEOUT_S = 400.0
# name -> (library, config): the throughput cases, in the order each repeat runs them
CASES: dict[str, tuple[str, dict]] = {
    "shardstream-jsonl": ("shardstream", {"format": "json"}),
    "shardstream-parquet": ("shardstream", {"format": "parquet"}),
    "shardstream-jsonl-loader": ("shardstream", {"format": "json", "loader": {}}),
    "hf-jsonl": ("hf", {"format": "json", "tokenize": "tokenizers"}),
    "hf-jsonl-transformers": ("hf", {"format": "json", "tokenize": "transformers"}),
    "grain-batched": ("grain", {"format": "json", "tokenize": "batched"}),
    "grain-per-row": ("grain", {"format": "json", "tokenize": "per_row"}),
    "baseline-tokenize": ("baseline", {"format": "json"}),
}
RESUME_CASES = {"shardstream-jsonl": CASES["shardstream-jsonl"], "hf-jsonl": CASES["hf-jsonl"]}
markdown = bench_pipeline_report.markdown
target_rows = bench_pipeline_report.target_rows
failed = bench_pipeline_report.failed


class Runner:
    """Runs one measurement in a fresh process of its library's venv and returns its JSON result."""

    def __init__(self, work: str, peer_python: str | None, cpus: list[int], wait_s: float,
                 max_busy: float = 0.25) -> None:
        self.work, self.peer_python, self.cpus = work, peer_python, cpus
        self.wait_s, self.max_busy = wait_s, max_busy
        self.count = 0
        os.makedirs(work, exist_ok=True)

    def env(self, library: str) -> dict:
        env = dict(os.environ, PYTHONUNBUFFERED="1", HF_DATASETS_OFFLINE="1", HF_HUB_OFFLINE="1",
                   HF_HOME=os.path.join(self.work, "hf-home"), TMPDIR=os.path.join(self.work, "tmp"),
                   SHARDSTREAM_CACHE_DIR=os.path.join(self.work, "ss-cache"))
        os.makedirs(env["TMPDIR"], exist_ok=True)
        return env

    def run(self, library: str, tag: str, cfg: dict, wrap: list[str] | None = None) -> dict:
        self.count += 1
        tag = f"{self.count:03d}-{tag}"
        out = os.path.join(self.work, f"result-{tag}.json")
        cfg_path = os.path.join(self.work, f"config-{tag}.json")
        with open(cfg_path, "w") as f:
            json.dump(dict(cfg, library=library, out=out, cpus=self.cpus), f)
        script = "bench_pipeline_peers.py" if library == "grain" else "bench_pipeline_sides.py"
        cmd = (wrap or []) + [self.peer_python if library == "grain" else sys.executable, os.path.join(HERE, script),
                              cfg_path]
        quiet = bench_loader.wait_quiet(self.max_busy, self.wait_s) if self.wait_s > 0 else {}
        log(f"== {tag}: {' '.join(shlex.quote(c) for c in cmd)}"
            + (f" (CPUs {quiet['busy_before']:.0%} busy)" if quiet.get("busy_before") is not None else ""))
        err_log = os.path.join(self.work, f"stderr-{tag}.log")
        return bench_loader.measured_run(cmd, self.env(library), ROOT, out, err_log, tag, quiet, RUN_TIMEOUT_S)


def have_loader() -> bool:
    """Whether this checkout has ``AsyncDataLoader`` (the loader case runs only then)."""
    try:
        import shardstream
    except ImportError:
        return False
    return hasattr(shardstream, "AsyncDataLoader")


def run_pipeline(data_root: str, peer_python: str | None, docs: int = DEFAULT_DOCS, *, n_files: int = DEFAULT_FILES,
                 repeats: int = 3, resume_repeats: int = 3, cases: tuple[str, ...] = tuple(CASES),
                 cpus: list[int] | None = None, wait_s: float = 60.0, profile: bool = True) -> dict:
    """Run the section and return its raw results (see :func:`markdown`). The data is generated under
    ``data_root`` unless it is there already; ``peer_python`` None (or missing) leaves Grain out; with
    ``profile``, a shardstream epoch that misses a target is profiled (:func:`add_profile`)."""
    total_start = time.perf_counter()
    have_peer = bool(peer_python) and os.path.exists(peer_python)
    cpus = cpus or sorted(os.sched_getaffinity(0))[:2]
    data = bench_pipeline_data.prepare(data_root, docs, n_files)
    wanted = [c for c in cases if (CASES[c][0] != "grain" or have_peer) and ("loader" not in CASES[c][1]
                                                                           or have_loader())]
    R: dict = {"date": datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z"),
               "machine": machine(), "git": common.git_rev(), "project_venv": project_versions(),
               "loadavg_before": bench_loader._loadavg(), "data": data,
               "config": {"docs": docs, "files": n_files, "repeats": repeats, "resume_repeats": resume_repeats,
                          "cases": wanted, "cpus": cpus, "positions": list(POSITIONS),
                          "peer_python": peer_python if have_peer else None, "wait_s": wait_s},
               "throughput": {c: [] for c in wanted}, "resume": {}}
    shutil.rmtree(os.path.join(data["dir"], "runs"), ignore_errors=True)
    run = Runner(os.path.join(data["dir"], "runs"), peer_python if have_peer else None, cpus, wait_s)
    base = {"tokenizer": data["tokenizer"], "expect": data["expect"], "timeout_s": EPOCH_TIMEOUT_S}
    for rep in range(repeats):
        for case in wanted:
            library, extra = CASES[case]
            cfg = dict(base, **extra, task="throughput", files=_files(data, extra["format"]))
            R["throughput"][case].append(run.run(library, f"{case}-{rep}", cfg))
    rows = -(-data["expect"]["tokens"] // bench_pipeline_sides.SEQ_LEN)  # concatenate and chunk: all full but the last
    batches = -(-rows // bench_pipeline_sides.BATCH)
    if resume_repeats and batches:
        ks = [max(1, int(round(p * batches))) for p in POSITIONS]
        for case, (library, extra) in RESUME_CASES.items():
            if case in wanted:
                cfg = dict(base, **extra, task="resume", files=_files(data, extra["format"]), positions=ks,
                           repeats=resume_repeats)
                R["resume"][case] = run.run(library, f"{case}-resume", cfg)
    R["loadavg_after"] = bench_loader._loadavg()
    if profile and any(t["met"] is False for t in target_rows(R)):
        add_profile(R, run)
    R["total_s"] = time.perf_counter() - total_start
    return R


def project_versions() -> dict:
    """Versions of the project venv's packages the shardstream and HF sides use."""
    from importlib import metadata

    out = {}
    for name in ("tokenizers", "transformers", "pyarrow"):
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return out


def add_epochs(R: dict, more: dict) -> None:
    """Put the epochs of a later run (``more``, same data) into ``R``, noting when and how busy the machine was."""
    for case, runs in more["throughput"].items():
        R["throughput"].setdefault(case, []).extend(runs)
    R.setdefault("added", []).append({"date": more["date"], "cases": more["config"]["cases"],
                                      "repeats": more["config"]["repeats"], "loadavg_before": more["loadavg_before"],
                                      "loadavg_after": more["loadavg_after"], "total_s": more["total_s"]})


def py_spy() -> str | None:
    """The py-spy next to this interpreter or on PATH (``pip install py-spy``), or None."""
    here = os.path.join(os.path.dirname(sys.executable), "py-spy")
    return here if os.path.exists(here) else shutil.which("py-spy")


def add_profile(R: dict, run: "Runner | None" = None, case: str = "shardstream-jsonl", top: int = 12) -> None:
    """One more epoch of ``case`` under py-spy (100 Hz, idle samples included): ``R['profile']`` gets the
    frames where its main thread spent the epoch's wall time (own time, then shardstream's frames with
    what they call)."""
    R.setdefault("project_venv", project_versions())
    spy = py_spy()
    if not spy:
        R["profile"] = ["not profiled: py-spy is not installed (pip install py-spy)"]
        return
    data = R["data"]
    run = run or Runner(os.path.join(data["dir"], "runs-profile"), None, R["config"]["cpus"], 0)
    library, extra = CASES[case]
    raw = os.path.join(run.work, "profile.raw")
    cfg = dict(extra, tokenizer=data["tokenizer"], expect=data["expect"], timeout_s=EPOCH_TIMEOUT_S,
               task="throughput", files=_files(data, extra["format"]))
    res = run.run(library, f"{case}-profile", cfg, wrap=[spy, "record", "-r", "100", "--idle", "--format", "raw",
                                                          "-o", raw, "--"])
    if "error" in res or not os.path.exists(raw):
        R["profile"] = [f"profiling failed: {res.get('error', 'no samples written')}"]
        return
    R["profile"] = summarize_profile(raw, top)
    R["profile_case"] = case


def summarize_profile(raw: str, top: int) -> list[str]:
    """py-spy's collapsed stacks -> the main thread's frames during ``epoch()``: own time, and time under."""
    own: dict[str, int] = {}
    under: dict[str, int] = {}
    total = 0
    with open(raw) as f:
        for line in f:
            stack, _, n = line.rstrip().rpartition(" ")
            frames = stack.split(";")
            if not any(fr.startswith("epoch (") for fr in frames):
                continue
            total += int(n)
            own[frames[-1]] = own.get(frames[-1], 0) + int(n)
            for fr in {re.sub(r":\d+\)$", ")", fr) for fr in frames if "shardstream/" in fr}:
                under[fr] = under.get(fr, 0) + int(n)
    if not total:
        return ["no samples of the epoch"]
    lines = [f"own time {n / total:.1%}: `{fr}`" for fr, n in sorted(own.items(), key=lambda x: -x[1])[:top]]
    lines += [f"under {n / total:.1%}: `{fr}`" for fr, n in sorted(under.items(), key=lambda x: -x[1])[:top]]
    return [f"{total:,} samples of the main thread during the epoch (100 Hz, waiting included)"] + lines


def _files(data: dict, fmt: str) -> list[str] | str:
    return data["jsonl"] if fmt == "json" else os.path.join(os.path.dirname(data["parquet"][0]), "*.parquet")


def machine() -> dict:
    """CPU model, cores and RAM (``lscpu`` and ``/proc``), as the other sections record them."""
    info = bench_loader.machine_info()
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
        fields = dict(line.split(":", 1) for line in out.splitlines() if ":" in line)
        info["lscpu"] = {k: fields[k].strip() for k in ("Model name", "CPU(s)", "Thread(s) per core",
                                                        "Core(s) per socket", "Hypervisor vendor") if k in fields}
    except (OSError, subprocess.CalledProcessError):
        pass
    return info


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--peer-python", default=os.path.join(ROOT, ".venv-peers", "bin", "python"),
                    help="python of the venv holding Grain ('' leaves Grain out)")
    ap.add_argument("--docs", type=int, default=DEFAULT_DOCS)
    ap.add_argument("--files", type=int, default=DEFAULT_FILES)
    ap.add_argument("--repeats", type=int, default=3, help="epochs (each in a fresh process) per case")
    ap.add_argument("--resume-repeats", type=int, default=3, help="resumptions per position (0 skips them)")
    ap.add_argument("--cases", default=",".join(CASES), help="comma-separated subset of " + ",".join(CASES))
    ap.add_argument("--cpus", default="", help="CPUs every child is pinned to (default: the first two usable)")
    ap.add_argument("--wait", type=float, default=60.0, help="before each measurement, wait up to this many "
                    "seconds for the CPUs to be at most 25%% busy (0: never wait)")
    ap.add_argument("--data", default=DATA, help="where the generated workload is kept (reused by later runs)")
    ap.add_argument("--out", help="Markdown report")
    ap.add_argument("--json", help="raw results")
    ap.add_argument("--no-profile", action="store_true", help="do not profile shardstream when it misses a target")
    ap.add_argument("--from-json", help="only re-render --out from the raw results of an earlier run (with "
                    "--profile-again, profile shardstream's epoch anew first)")
    ap.add_argument("--add-to", help="raw results of an earlier run: run the throughput cases again (--repeats "
                    "epochs each, no resumption, no profile), add their epochs to those results and write them back "
                    "(or to --json) and --out")
    ap.add_argument("--profile-again", action="store_true", help="with --from-json: profile shardstream's epoch "
                    "anew, then write --json and --out")
    return ap


def main() -> None:
    ap = parser()
    args = ap.parse_args()
    cases = tuple(c for c in args.cases.split(",") if c)
    unknown = [c for c in cases if c not in CASES]
    if unknown:
        ap.error(f"unknown case(s) {', '.join(unknown)}; choose among {', '.join(CASES)}")
    if args.from_json:
        with open(args.from_json) as f:
            R = json.load(f)
        if args.profile_again:
            add_profile(R)
    elif args.add_to:
        with open(args.add_to) as f:
            R = json.load(f)
        more = run_pipeline(args.data, args.peer_python or None, R["config"]["docs"], n_files=R["config"]["files"],
                            repeats=args.repeats, resume_repeats=0, cases=cases, cpus=R["config"]["cpus"],
                            wait_s=args.wait, profile=False)
        add_epochs(R, more)
        args.json = args.json or args.add_to
    else:
        R = run_pipeline(args.data, args.peer_python or None, args.docs, n_files=args.files, repeats=args.repeats,
                         resume_repeats=args.resume_repeats, cases=cases,
                         cpus=[int(c) for c in args.cpus.split(",") if c] or None, wait_s=args.wait,
                         profile=not args.no_profile)
    common.publish(R, markdown, __file__, args.out, args.json if not args.from_json or args.profile_again else None)
    if args.json:
        log(f"wrote {args.json}")
    wrong = failed(R)
    if wrong:
        log(f"!! failed or wrong: {', '.join(wrong)}")
        sys.exit(1)


if __name__ == "__main__":
    main()
