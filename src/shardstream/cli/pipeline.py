"""``shardstream pipeline run|validate config.yaml``: build a pipeline from its YAML configuration.

``run`` builds it; with a save stage it writes the MDS cache (or finds it already written) and prints
where and how many rows and tokens it holds; without one it iterates ``--steps`` batches (default: all)
and prints the throughput. ``validate`` only reads and checks the configuration. A bad configuration
exits with status 2 and the error's message.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time

import numpy as np

import shardstream

PIPELINE_HELP = """examples:
  shardstream pipeline validate train.yaml
  shardstream pipeline run train.yaml --set load.batch_size=16 --steps 100
  shardstream pipeline run train.yaml --set save.output=/data/packed

--set KEY=VALUE changes one setting of the file (VALUE is read as YAML: 16, true, [0.7, 0.3]);
list items are datasets[0].weight or datasets.0.weight."""


def add_pipeline_commands(sub) -> None:
    """Add ``pipeline run`` and ``pipeline validate`` to the ``shardstream`` parser's subcommands."""
    p = sub.add_parser("pipeline", help="run or validate a pipeline's YAML configuration",
                       epilog=PIPELINE_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = p.add_subparsers(dest="pipeline_command", required=True)
    run = commands.add_parser("run", help="build the pipeline: write its save stage's cache, or iterate its batches",
                              epilog=PIPELINE_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    _add_config(run)
    run.add_argument("--steps", type=int, default=None, metavar="N",
                     help="iterate N batches (default: all of them); with a save stage, also iterate N batches "
                          "after writing")
    run.set_defaults(func=run_pipeline)
    check = commands.add_parser("validate", help="read and check the configuration; build nothing")
    _add_config(check)
    check.add_argument("--print", action="store_true", help="print the configuration with every default filled in")
    check.set_defaults(func=validate_pipeline)


def _add_config(p: argparse.ArgumentParser) -> None:
    p.add_argument("config", help="the pipeline's YAML file")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", dest="overrides",
                   help="change one setting (repeatable), e.g. load.batch_size=16")


def validate_pipeline(args) -> int:
    pipeline = shardstream.Pipeline.from_yaml(args.config, args.overrides)
    if args.print:
        print(pipeline.config.to_yaml(), end="")
    print(f"OK: {args.config}: {len(pipeline.config.datasets)} dataset(s); stages {' -> '.join(pipeline.stages)}")
    return 0


def run_pipeline(args) -> int:
    if args.steps is not None and args.steps < 0:
        raise shardstream.InvalidArgumentError(f"--steps {args.steps}: give a number of batches >= 0")
    _log_to_stderr()
    pipeline = shardstream.Pipeline.from_yaml(args.config, args.overrides)
    before = pipeline.cache_summary()
    start = time.monotonic()
    built = pipeline.build()
    if pipeline.config.save is not None:
        summary = pipeline.cache_summary() or {}
        reused = before is not None and before.get("written_at") == summary.get("written_at") \
            and before.get("fingerprint") == summary.get("fingerprint")
        tokens = summary.get("tokens")
        print(f"cache   {pipeline.config.save.output} ({'reused: nothing written' if reused else 'written'}, "
              f"{time.monotonic() - start:.1f} s)")
        print(f"rows    {summary.get('rows')}")
        print(f"tokens  {tokens if tokens is not None else 'n/a (no input_ids column)'}")
        print(f"shards  {summary.get('shards')}, columns {', '.join(summary.get('columns', {}))}")
        if args.steps is None:
            return 0
    _iterate(built, args.steps)
    return 0


def _iterate(built, steps) -> None:
    count = tokens = 0
    start = time.monotonic()
    first = None
    iterator = iter(built)
    try:
        while steps is None or count < steps:
            try:
                batch = next(iterator)
            except StopIteration:
                break
            if first is None:
                first = time.monotonic() - start
            count += 1
            tokens += batch_tokens(batch)
    finally:
        close = getattr(built, "close", None)
        if callable(close):
            close()
    elapsed = max(time.monotonic() - start, 1e-9)
    print(f"batches {count} in {elapsed:.2f} s (first after {first or 0.0:.2f} s)")
    print(f"rate    {count / elapsed:.1f} batches/s, {tokens / elapsed:.0f} tokens/s ({tokens} tokens)")


def batch_tokens(batch) -> int:
    """Real tokens in a batch (or a row): ``segment_ids != 0`` when packed, else the ``input_ids``."""
    if not isinstance(batch, dict) or "input_ids" not in batch:
        return 0
    segments = batch.get("segment_ids")
    if segments is not None:
        return int(sum(np.count_nonzero(np.asarray(s)) for s in _rows(segments)))
    return int(sum(np.size(ids) for ids in _rows(batch["input_ids"])))


def _rows(column):
    if isinstance(column, np.ndarray) or hasattr(column, "numpy"):
        return [np.asarray(column)]
    return column if isinstance(column, (list, tuple)) else [column]


def _log_to_stderr() -> None:
    logger = logging.getLogger("shardstream")
    if not logger.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(message)s"))
        logger.addHandler(handler)
    logger.setLevel(logging.INFO)

