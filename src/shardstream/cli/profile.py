"""``shardstream profile DATASET_OR_CONFIG``: run a loader as a training job would and say where the time goes.

It builds the loader a training job would build (PyTorch's ``StreamingDataLoader`` with worker
processes when torch is installed, else ``BatchLoader``; a pipeline configuration's own loader),
with stats on, takes ``--batches`` batches or ``--seconds`` seconds of them while simulating a
``--step-time`` training step, and prints the stats table and the verdict of
:func:`shardstream.stats.verdict.verdict`; ``--plot out.png`` draws the timeline. Exit status: 0
profiled, 2 bad input (the message says what and how to fix it).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import tempfile
import time

import shardstream
from shardstream.stats import StatsConfig
from shardstream.stats.verdict import verdict

PROFILE_HELP = """examples:
  shardstream profile /data/train --batch-size 64 --num-workers 8 --step-time 0.12
  shardstream profile s3://bucket/train --cache /tmp/cache --shuffle --seconds 60 --plot profile.png
  shardstream profile 'data/*.parquet' --loader numpy --batches 500 --json
  shardstream profile train.yaml --step-time 0.2            # a pipeline configuration

The world comes from the environment (RANK, WORLD_SIZE, LOCAL_WORLD_SIZE ...), as in training.
exit status: 0 profiled, 2 bad input or settings"""

DEFAULT_BATCHES = 200


def add_profile_command(sub) -> None:
    """Add ``profile`` to the ``shardstream`` parser's subcommands."""
    p = sub.add_parser("profile", help="run a loader as a training job would; print where the time goes, whether "
                                       "it keeps up with the step, and plot the timeline (see docs/profile.md)",
                       epilog=PROFILE_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("target", metavar="DATASET_OR_CONFIG",
                   help="a dataset (a directory, data files, a glob, or any URL shardstream reads) or a pipeline's "
                        "YAML configuration (.yaml / .yml)")
    p.add_argument("--batch-size", type=int, default=None, help="samples per batch (default 32)")
    p.add_argument("--num-workers", type=int, default=None,
                   help="DataLoader worker processes (default: the CPUs, at most 8; --loader torch only)")
    p.add_argument("--transfer", choices=("auto", "ring", "queue"), default=None,
                   help="how batches cross from the workers: the shared ring (auto, the default), or torch's queue")
    p.add_argument("--step-time", type=float, default=0.0, metavar="SECONDS",
                   help="the simulated training step, slept after each batch (default 0: none; the verdict then "
                        "says which step the loader sustains)")
    p.add_argument("--shuffle", action="store_true", help="shuffle the samples, as training does")
    p.add_argument("--batches", type=int, default=None, metavar="N",
                   help=f"stop after N batches (default {DEFAULT_BATCHES} unless --seconds is given)")
    p.add_argument("--seconds", type=float, default=None, metavar="S", help="stop after S seconds")
    p.add_argument("--columns", nargs="+", default=None, metavar="NAME", help="decode only these columns")
    p.add_argument("--loader", choices=("torch", "numpy"), default=None,
                   help="torch: StreamingDataLoader (default when torch is installed); numpy: BatchLoader")
    p.add_argument("--cache", metavar="DIR", default=None,
                   help="the shard cache of a remote dataset (default: a temporary directory, removed afterwards); "
                        "with a local dataset, read it through this cache as a remote one")
    p.add_argument("--cache-limit", default=None, metavar="BYTES", help="cap the cache, e.g. 10gb")
    p.add_argument("--predownload", type=int, default=None, metavar="SAMPLES",
                   help="samples downloaded ahead per worker")
    p.add_argument("--download-threads", type=int, default=None, metavar="N", help="shard downloads at once")
    p.add_argument("--storage-option", action="append", default=[], metavar="KEY=VALUE",
                   help="passed to the fsspec backend (repeatable); VALUE is parsed as JSON when it is")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", dest="overrides",
                   help="change one setting of a pipeline configuration (repeatable), e.g. load.batch_size=16")
    p.add_argument("--json", action="store_true", help="print the report, the verdict and the run as JSON")
    p.add_argument("--plot", metavar="OUT.png", default=None,
                   help="draw the timeline into this PNG (needs matplotlib: pip install 'shardstream[plot]')")
    p.set_defaults(func=run_profile)


def _bad(message: str) -> shardstream.InvalidArgumentError:
    return shardstream.InvalidArgumentError(message)


def check_args(args) -> None:
    """Refuse values no run can use, saying which and what to give instead."""
    for name in ("batch_size", "batches", "num_workers", "download_threads", "predownload"):
        value = getattr(args, name)
        low = 0 if name in ("num_workers", "predownload") else 1
        if value is not None and value < low:
            raise _bad(f"--{name.replace('_', '-')} {value}: give a number >= {low}")
    if args.step_time < 0:
        raise _bad(f"--step-time {args.step_time}: give the training step's seconds (>= 0; 0: no step)")
    if args.seconds is not None and args.seconds <= 0:
        raise _bad(f"--seconds {args.seconds}: give a number of seconds > 0")
    if args.plot is not None and not args.plot.lower().endswith(".png"):
        raise _bad(f"--plot {args.plot!r}: give a .png path, e.g. --plot profile.png")


def is_config(target: str) -> bool:
    return target.lower().endswith((".yaml", ".yml"))


def default_workers() -> int:
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return min(8, cpus)


def loader_kind(requested) -> str:
    """``requested``, or torch when it is importable, else numpy."""
    if requested is not None:
        return requested
    try:
        import importlib.util

        return "torch" if importlib.util.find_spec("torch") is not None else "numpy"
    except (ImportError, ValueError):
        return "numpy"


def open_dataset(args, cache_dir):
    """The ``StreamingDataset`` of ``args.target``, streamed through ``cache_dir`` when it is remote."""
    from shardstream.cli.main import storage_options_of

    kwargs = {"batch_size": args.batch_size or 32, "shuffle": args.shuffle,
              "storage_options": storage_options_of(args.storage_option) or None}
    for name in ("cache_limit", "predownload", "download_threads"):
        if getattr(args, name) is not None:
            kwargs[name] = getattr(args, name)
    target = args.target
    if target.startswith("file://"):
        target = target[len("file://"):]
    remote = "://" in target
    if remote or args.cache is not None:
        return shardstream.StreamingDataset(remote=target, local=cache_dir, **kwargs)
    if not os.path.exists(target) and not any(c in target for c in "*?["):
        raise shardstream.IndexNotFoundError(
            f"no dataset at {target!r}: the path does not exist; give a dataset directory, data files, a glob, a URL "
            "or a pipeline's .yaml configuration")
    return shardstream.StreamingDataset(local=target, **kwargs)


def make_loader(args, dataset, stats: StatsConfig, pipeline: bool = False):
    """The loader a training job would use over ``dataset`` (a StreamingDataset or a processing chain;
    ``pipeline``: built from a pipeline configuration, whose numpy loader is its load stage's kind)."""
    kind = loader_kind(args.loader)
    batch_size = args.batch_size or 32
    columns = {} if args.columns is None else {"columns": args.columns}
    if kind == "torch":
        workers = default_workers() if args.num_workers is None else args.num_workers
        transfer = {} if args.transfer is None else {"transfer": args.transfer}
        return shardstream.StreamingDataLoader(dataset, batch_size=batch_size, num_workers=workers, stats=stats,
                                               **columns, **transfer)
    if args.transfer is not None:
        raise _bad(f"--transfer {args.transfer} with --loader numpy: the numpy loader makes batches in one "
                   "background thread, nothing crosses between processes; use --loader torch")
    if args.num_workers is not None:
        raise _bad(f"--num-workers {args.num_workers} with --loader numpy: the numpy loader makes batches in one "
                   "background thread; drop --num-workers, or use --loader torch for worker processes")
    if pipeline or isinstance(dataset, shardstream.IterableDataset):
        if args.columns is not None:
            raise _bad("--columns with a pipeline configuration: select the columns in the configuration instead")
        return shardstream.AsyncDataLoader(dataset, batch_size=batch_size, stats=stats)
    return shardstream.BatchLoader(dataset, stats=stats, **columns)


NOT_FOR_CONFIGS = ("shuffle", "columns", "cache", "cache_limit", "predownload", "download_threads", "storage_option")


def pipeline_loader(args, stats: StatsConfig):
    """The loader of a pipeline configuration: its load stage's, or (without one) the loader a training
    job would put over its chain."""
    given = [n for n in NOT_FOR_CONFIGS if getattr(args, n) not in (None, False, [])]
    if given:
        raise _bad(f"--{given[0].replace('_', '-')} with a pipeline configuration: the configuration sets how its "
                   "datasets are read; change it in the file or with --set KEY=VALUE")
    overrides = list(args.overrides)
    pipeline = shardstream.Pipeline.from_yaml(args.target, overrides)
    if "load" not in pipeline.stages:
        return make_loader(args, pipeline.build(), stats, pipeline=True)
    if args.loader == "torch" or args.num_workers is not None:
        raise _bad("the pipeline's load stage makes its batches in threads (AsyncDataLoader), not in worker "
                   "processes: drop --loader torch / --num-workers, or remove the load stage to profile its chain "
                   "through StreamingDataLoader's workers")
    if args.batch_size is not None:
        overrides.append(f"load.batch_size={args.batch_size}")
        pipeline = shardstream.Pipeline.from_yaml(args.target, overrides)
    before = os.environ.get("SHARDSTREAM_STATS")
    os.environ["SHARDSTREAM_STATS"] = "1"  # the load stage's loader is built with the defaults' stats=None
    try:
        return pipeline.build()
    finally:
        if before is None:
            del os.environ["SHARDSTREAM_STATS"]
        else:
            os.environ["SHARDSTREAM_STATS"] = before


def drive(loader, batches, seconds, step_s: float) -> dict:
    """Take batches from ``loader`` as a training loop would, pass after pass, sleeping ``step_s`` after
    each, until ``batches`` batches or ``seconds`` seconds (whichever comes first)."""
    start = time.monotonic()
    done = passes = 0
    stopped = "dataset ended"
    while stopped == "dataset ended":
        passes += 1
        before = done
        it = iter(loader)
        try:
            for _ in it:
                done += 1
                if step_s:
                    time.sleep(step_s)
                if batches is not None and done >= batches:
                    stopped = f"{batches} batches"
                    break
                if seconds is not None and time.monotonic() - start >= seconds:
                    stopped = f"{seconds:g} seconds"
                    break
        finally:
            close = getattr(it, "close", None)
            if close is not None:
                close()
        if done == before:  # an empty pass: nothing more will come
            break
    return {"batches": done, "passes": passes, "seconds": time.monotonic() - start, "stopped_after": stopped,
            "step_time_s": step_s}


def _plain(value):
    item = getattr(value, "item", None)  # numpy scalars
    if callable(item):
        return item()
    raise TypeError(f"{type(value).__name__} is not JSON")


def run_profile(args) -> int:
    check_args(args)
    batches = args.batches if args.batches is not None or args.seconds is not None else DEFAULT_BATCHES
    stats = StatsConfig(stall_warning=None)  # the verdict says it, once, at the end
    with tempfile.TemporaryDirectory(prefix="shardstream-profile-") as tmp:
        if is_config(args.target):
            loader = pipeline_loader(args, stats)
        else:
            loader = make_loader(args, open_dataset(args, args.cache or tmp), stats)
        if not callable(getattr(loader, "stats", None)):
            raise shardstream.NotYetSupportedError(
                f"{type(loader).__name__} keeps no stats yet, so it cannot be profiled; profile the datasets the "
                "configuration reads instead (shardstream profile DATASET)")
        try:
            run = drive(loader, batches, args.seconds, args.step_time)
            report = loader.stats()
            timeline = loader.stats_timeline()
        finally:
            close = getattr(loader, "close_stats", None)
            if close is not None:
                close()
        judged = verdict(report, args.step_time or None)
        if args.plot is not None:
            from shardstream.stats.plot import plot_timeline

            plot_timeline(timeline, report, args.plot, title=judged.text)
    if args.json:
        out = {**report, "verdict": dataclasses.asdict(judged), "run": run, "plot": args.plot}
        print(json.dumps(out, indent=2, default=_plain))
        return 0
    print(report)
    print(f"run: {run['batches']} batches in {run['seconds']:.1f} s over {run['passes']} pass(es), stopped after "
          f"{run['stopped_after']}" + (f"; plot: {args.plot}" if args.plot else ""))
    print(f"verdict: {judged}")
    return 0
