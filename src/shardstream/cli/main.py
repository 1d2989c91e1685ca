"""``shardstream`` command line: ``inspect`` and ``verify`` a dataset."""

from __future__ import annotations

import argparse
import json
import sys
import time

import shardstream
from shardstream.units import format_bytes


class _Progress:
    """A one-line progress bar on stderr, shown for long runs on a terminal (or with --progress)."""

    def __init__(self, label: str, force: bool) -> None:
        self.label = label
        self.enabled = force or sys.stderr.isatty()
        self.start = time.monotonic()
        self.last = 0.0

    def __call__(self, done: int, total: int) -> None:
        now = time.monotonic()
        if not self.enabled or (now - self.last < 0.2 and done < total):
            return
        self.last = now
        width = 30
        filled = int(width * done / max(total, 1))
        rate = done / max(now - self.start, 1e-9)
        eta = (total - done) / rate if rate else 0
        sys.stderr.write(f"\r{self.label} [{'#' * filled}{'.' * (width - filled)}] {done}/{total} shards "
                         f"{rate:.1f}/s eta {eta:.0f}s")
        if done >= total:
            sys.stderr.write("\n")
        sys.stderr.flush()


def _inspect(args) -> int:
    info = shardstream.inspect_dataset(args.path)
    if args.json:
        print(json.dumps(info, indent=2, sort_keys=True))
        return 0
    print(f"dataset      {info['path']}")
    print(f"shards       {info['shards']}")
    print(f"samples      {info['samples']} (per shard {info['samples_per_shard']['min']}..{info['samples_per_shard']['max']})")
    print(f"bytes        {format_bytes(info['raw_bytes'])} raw, {format_bytes(info['stored_bytes'])} stored")
    print(f"compression  {', '.join(f'{k} ({v} shards)' for k, v in info['compression'].items())}")
    print(f"hashes       {', '.join(info['hashes']) or 'none'}")
    print("columns")
    for name, enc in info["columns"].items():
        print(f"  {name:<20} {enc}")
    return 0


def _verify(args) -> int:
    progress = _Progress("verify", args.progress)
    report = shardstream.verify_dataset(args.path, decode_samples=not args.quick, progress=progress)
    for p in report.problems:
        print(f"DAMAGED shard {p.shard} ({p.basename}): {p.error}")
    status = "OK" if report.ok else f"{len(report.problems)} damaged shard(s)"
    print(f"{status}: {report.shards} shards, {report.samples} samples, {format_bytes(report.bytes)}, "
          f"{report.hashes_checked} digests checked")
    return 0 if report.ok else 1


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="shardstream", description="Inspect and verify MDS datasets.")
    parser.add_argument("--version", action="version", version=f"shardstream {shardstream.__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("inspect", help="shards, samples, columns, bytes, compression")
    p.add_argument("path", help="dataset directory (holding index.json)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=_inspect)
    p = sub.add_parser("verify", help="check structure and digests; exit 1 if anything is damaged")
    p.add_argument("path", help="dataset directory (holding index.json)")
    p.add_argument("--quick", action="store_true", help="check files and digests but do not decode samples")
    p.add_argument("--progress", action="store_true", help="show the progress bar even when not on a terminal")
    p.set_defaults(func=_verify)
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except shardstream.ShardstreamError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
