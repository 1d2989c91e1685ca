"""``python -m shardstream.compat [--epoch-tail TAIL] script.py [args...]`` (or ``-m module [args...]``):
run a mosaicml-streaming script unchanged, its ``import streaming`` resolving to shardstream
(``--epoch-tail mosaic``: its datasets size epochs as mosaicml-streaming does, see :func:`install`)."""

from __future__ import annotations

import os
import runpy
import sys

from . import install

USAGE = ("usage: python -m shardstream.compat [--epoch-tail pad|drop|mosaic] script.py [args...]  |  "
         "python -m shardstream.compat [--epoch-tail ...] -m module [args...]")


def main(argv: list[str]) -> None:
    epoch_tail = None
    if argv and argv[0].startswith("--epoch-tail"):
        flag, _, value = argv[0].partition("=")
        if not value:
            if len(argv) < 2:
                print(f"shardstream.compat: {flag} needs a value\n{USAGE}", file=sys.stderr)
                raise SystemExit(2)
            value, argv = argv[1], argv[1:]
        epoch_tail, argv = value, argv[1:]
    if not argv or argv[0] in ("-h", "--help") or (argv[0] == "-m" and len(argv) < 2):
        print(USAGE, file=sys.stderr if not argv or argv[0] == "-m" else sys.stdout)
        raise SystemExit(0 if argv and argv[0] in ("-h", "--help") else 2)
    try:
        install(epoch_tail=epoch_tail)
    except ValueError as e:
        print(f"shardstream.compat: {e}\n{USAGE}", file=sys.stderr)
        raise SystemExit(2)
    if argv[0] == "-m":
        sys.argv = argv[1:]
        sys.path.insert(0, os.getcwd())
        runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
        return
    script = argv[0]
    if not os.path.isfile(script):
        print(f"shardstream.compat: no such script: {script!r}\n{USAGE}", file=sys.stderr)
        raise SystemExit(2)
    sys.argv = argv
    sys.path[0] = os.path.dirname(os.path.abspath(script))  # as `python script.py` sets it
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main(sys.argv[1:])
