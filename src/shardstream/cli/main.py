"""``shardstream`` command line: ``convert`` data to MDS; ``inspect`` and ``verify`` a dataset, local or remote; ``pipeline run`` and
``pipeline validate`` a pipeline's YAML configuration; ``profile`` a loader (see cli/profile.py)."""

from __future__ import annotations

import argparse
import json
import sys

import shardstream
from shardstream.cli.convert import add_convert_command
from shardstream.cli.pipeline import add_pipeline_commands
from shardstream.cli.profile import add_profile_command
from shardstream.units import format_bytes


EXIT_CODES = """exit status:
  0  verified: every shard matches its recorded digests and decodes
  1  damage found (a shard missing, truncated, not matching its digest, or not decoding)
  2  usage error, or no readable index.json at PATH
  3  not verified: nothing damaged was found, but some shards record no digest, so damage to
     their values cannot be detected (write with hashes=['xxh3_64'], MDSWriter's default)"""


def storage_options_of(pairs: list[str]) -> dict:
    """``key=value`` strings -> storage_options; values are parsed as JSON when they are (``anon=true``)."""
    options = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise shardstream.InvalidArgumentError(
                f"--storage-option {pair!r} should be key=value, e.g. anon=true or "
                'client_kwargs={"endpoint_url": "http://localhost:9000"}'
            )
        try:
            options[key] = json.loads(value)
        except ValueError:
            options[key] = value
    return options


def _inspect(args) -> int:
    info = shardstream.inspect_dataset(args.path, storage_options=storage_options_of(args.storage_option))
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
    report = shardstream.verify_dataset(args.path, decode_samples=not args.quick,
                                        progress=True if args.progress else None,
                                        storage_options=storage_options_of(args.storage_option), cache=args.cache)
    for p in report.problems:
        print(f"DAMAGED shard {p.shard} ({p.basename}): {p.error}")
    summary = (f"{report.shards} shards, {report.samples} samples, {format_bytes(report.bytes)}, "
               f"{report.hashes_checked} digests checked")
    if not report.ok:
        print(f"{len(report.problems)} damaged shard(s): {summary}")
        return 1
    summary += f", {report.samples_decoded} samples decoded"
    if report.verified:
        print(f"OK: {summary}")
        return 0
    decoded = ("samples not decoded (--quick)" if args.quick
               else f"the structure of all {report.samples_decoded} samples checked, no problems")
    print(f"NOT VERIFIED: {report.unhashed_shards} of {report.shards} shards record no digest, so damage to "
          f"their values cannot be detected; {decoded}. {summary}. Write the dataset with "
          "hashes=['xxh3_64'] (MDSWriter's default) to make damage detectable")
    return 3


def _add_location(p: argparse.ArgumentParser) -> None:
    p.add_argument("path", help="the dataset: a directory holding index.json, or any URL shardstream reads "
                                "(s3://, gs://, az://, https://, hf://, file://)")
    p.add_argument("--storage-option", action="append", default=[], metavar="KEY=VALUE",
                   help="passed to the fsspec backend (repeatable); VALUE is parsed as JSON when it is, "
                        "e.g. anon=true")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="shardstream", description="Convert data to MDS; inspect and verify MDS "
                                                                     "datasets; run pipelines; profile a loader "
                                                                     "(docs/profile.md).",
                                     epilog=EXIT_CODES, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"shardstream {shardstream.__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("inspect", help="shards, samples, columns, bytes, compression (reads index.json only)")
    _add_location(p)
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=_inspect)
    p = sub.add_parser("verify", help="check sizes, digests, headers and every sample (exit status below)",
                       epilog=EXIT_CODES, formatter_class=argparse.RawDescriptionHelpFormatter)
    _add_location(p)
    p.add_argument("--quick", action="store_true", help="check files and digests but do not decode samples")
    p.add_argument("--cache", metavar="DIR", help="keep a remote dataset's downloaded shards in DIR "
                                                  "(default: a temporary directory, removed afterwards)")
    p.add_argument("--progress", action="store_true",
                   help="show the progress bar and summary line even when not on a terminal "
                        "(also SHARDSTREAM_PROGRESS=1; =0 silences them)")
    p.set_defaults(func=_verify)
    add_convert_command(sub)
    add_pipeline_commands(sub)
    add_profile_command(sub)
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except shardstream.ShardstreamError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
