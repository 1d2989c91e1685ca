"""``shardstream convert INPUT... OUTPUT``: data files, a saved HF dataset or an image folder -> MDS.

Exit status: 0 converted (or already complete: nothing to do), 1 ``--verify`` found a difference,
2 bad input or settings (the message says what and how to fix it), 130 interrupted (rerun the same
command to finish).
"""

from __future__ import annotations

import argparse
import json
import sys

import shardstream
from shardstream.units import format_bytes

CONVERT_HELP = """examples:
  shardstream convert data/*.parquet /data/mds --compression zstd
  shardstream convert 'corpus/**/*.jsonl.zst' s3://bucket/mds --storage-option anon=false --workers 8
  shardstream convert saved_hf_dataset/ out/ --split train --columns input_ids:ndarray:int32
  shardstream convert images/ out/            # images/<class>/<file>.jpg -> image (jpeg), label (int)

Interrupted, run the same command again: finished parts are kept, the rest is converted. Run again
with new input files added: they are converted and appended. --overwrite converts from scratch.

exit status: 0 done (or nothing to do), 1 --verify found a difference, 2 bad input or settings,
130 interrupted"""


def add_convert_command(sub) -> None:
    p = sub.add_parser("convert", help="convert Parquet, JSON Lines, CSV, Arrow, text, a saved HF dataset or an "
                                       "image folder into an MDS dataset, on every core",
                       epilog=CONVERT_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("paths", nargs="+", metavar="INPUT... OUTPUT",
                   help="input files, directories or globs (local or URLs), then the output directory or URL")
    p.add_argument("--columns", nargs="+", metavar="NAME:ENCODING", default=None,
                   help="encodings that replace the inferred ones, e.g. tokens:ndarray:int32 meta:json")
    p.add_argument("--format", default=None, help="what the inputs are when their names do not say: parquet, "
                                                   "arrow, jsonl, json, csv, text, imagefolder")
    p.add_argument("--split", default=None, help="the split of a saved or Hub-laid dataset directory "
                                                  "(default: train, or its only split)")
    p.add_argument("--compression", default=None, help="shard compression, e.g. zstd, zstd:7, gz, br, snappy "
                                                        "(default: none)")
    p.add_argument("--hashes", nargs="*", default=None, metavar="ALGO",
                   help="digests recorded per shard (default: xxh3_64; give none to record none)")
    p.add_argument("--size-limit", default=None, metavar="BYTES", help="shard size limit, e.g. 64mb (default)")
    p.add_argument("--shard-per-input", action="store_true", help="give every input file shards of its own")
    p.add_argument("--workers", type=int, default=None, help="processes (default: every core)")
    p.add_argument("--overwrite", action="store_true", help="convert from scratch, replacing the output")
    p.add_argument("--on-schema-mismatch", choices=("error", "cast"), default="error",
                   help="an input whose columns' types differ from the first input's: refuse (default), or "
                        "cast to the first input's types (extra columns dropped)")
    p.add_argument("--verify", nargs="?", const=1000, type=int, default=0, metavar="ROWS",
                   help="afterwards, compare row counts and ROWS sampled rows (default 1000) with the inputs")
    p.add_argument("--storage-option", action="append", default=[], metavar="KEY=VALUE",
                   help="passed to the fsspec backends of inputs and output (repeatable; VALUE read as JSON "
                        "when it is)")
    shown = p.add_mutually_exclusive_group()
    shown.add_argument("--quiet", action="store_true", help="no progress, only errors")
    shown.add_argument("--progress", action="store_true", help="progress lines even when not on a terminal")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(func=run_convert)


def run_convert(args) -> int:
    from shardstream.cli.main import storage_options_of

    if len(args.paths) < 2:
        print("error: give the inputs, then the output: shardstream convert INPUT... OUTPUT", file=sys.stderr)
        return 2
    *inputs, output = args.paths
    kwargs = {}
    if args.hashes is not None:
        kwargs["hashes"] = sorted(args.hashes)
    if args.size_limit is not None:
        kwargs["size_limit"] = args.size_limit
    try:
        result = shardstream.convert(
            inputs if len(inputs) > 1 else inputs[0], output, columns=args.columns, format=args.format,
            compression=args.compression, shard_per_input=args.shard_per_input, workers=args.workers,
            overwrite=args.overwrite, on_schema_mismatch=args.on_schema_mismatch, split=args.split,
            storage_options=storage_options_of(args.storage_option) or None,
            progress=False if args.quiet else (True if args.progress else None), verify=args.verify, **kwargs)
    except shardstream.ConvertVerifyError as exc:
        print(f"VERIFY FAILED: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted: the parts finished so far are kept; run the same command again to finish",
              file=sys.stderr)
        return 130
    if args.json:
        print(json.dumps({"output": result.output, "rows": result.rows, "shards": result.shards,
                          "parts": result.parts, "converted": result.converted, "seconds": round(result.seconds, 3),
                          "input_bytes": result.input_bytes, "output_bytes": result.output_bytes,
                          "columns": result.columns, "label_names": result.label_names,
                          "verified": result.verified}, indent=2))
        return 0
    if not args.quiet or result.nothing_to_do:
        print(result)
        if not result.nothing_to_do:
            print(f"  columns: {', '.join(f'{k}:{v}' for k, v in result.columns.items())}; "
                  f"{format_bytes(result.input_bytes)} in, {format_bytes(result.output_bytes)} of shards")
        if result.verified:
            print(f"  verified: {result.verified['rows']:,} rows counted, {result.verified['compared']} compared")
    return 0
