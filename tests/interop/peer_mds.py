"""Drive mosaicml-streaming for the interop tests. Runs under the PEER interpreter.

Usage (with ``PYTHONPATH=tests/peer_stubs`` so that ``import streaming`` works)::

    python tests/interop/peer_mds.py write OUTDIR SPEC.json
    python tests/interop/peer_mds.py read DATADIR RESULT.pkl [OPTIONS.json]
    python tests/interop/peer_mds.py merge OUTDIR
    python tests/interop/peer_mds.py info RESULT.pkl
    python tests/interop/peer_mds.py batch JOBS.json RESULT.pkl

``write`` writes the samples of ``samples.make_samples(spec)`` with
``streaming.MDSWriter``. ``read`` reads every sample with
``streaming.StreamingDataset(local=DATADIR, remote=None, shuffle=False,
batch_size=1, allow_unsafe_types=True)``, by iteration and by ``ds[i]``, and
pickles ``{"len", "iter", "items"}`` (samples normalised by ``samples.norm``).
``merge`` runs ``streaming.base.util.merge_index(OUTDIR)``. ``batch`` runs a list
of ``{"cmd": ..., "args": [...]}`` jobs in this one process (importing streaming
takes seconds) and pickles ``[{"ok": bool, "result"| "error": ...}, ...]``: one
failing job does not stop the others.

Everything pickled is plain builtins, so the tests' interpreter can load it.
"""

from __future__ import annotations

import gc
import json
import os
import pickle
import sys
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

import samples  # noqa: E402  (shared with the tests)

for _var in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
    os.environ.pop(_var, None)

_cleaned = False


def _clean_shm() -> None:
    global _cleaned
    if not _cleaned:
        from streaming.base.util import clean_stale_shared_memory

        clean_stale_shared_memory()
        _cleaned = True


def _fast_index_wait() -> None:
    """MDSWriter polls its (no-op, local-only) upload queue with ``sleep(1)`` before
    writing index.json; poll every millisecond instead. Only the waiting changes."""
    import time

    import streaming.base.format.base.writer as base_writer

    base_writer.sleep = lambda seconds: time.sleep(min(seconds, 0.001))


def write(outdir: str, spec) -> dict:
    from streaming import MDSWriter

    _fast_index_wait()

    if isinstance(spec, str):
        with open(spec) as f:
            spec = json.load(f)
    kwargs = {}
    if "size_limit" in spec:
        kwargs["size_limit"] = spec["size_limit"]
    with MDSWriter(out=outdir, columns=spec["columns"], compression=spec.get("compression"),
                   hashes=spec.get("hashes"), **kwargs) as out:
        for sample in samples.make_samples(spec):
            out.write(sample)
    return {"files": sorted(os.listdir(outdir))}


_reads = 0


def _maybe_collect() -> None:
    # Datasets hold shared memory until collected; a full collection costs ~0.1 s with
    # torch loaded, so collect every few datasets rather than after each one.
    global _reads
    _reads += 1
    if _reads % 16 == 0:
        gc.collect()


def read(datadir: str, options=None) -> dict:
    from streaming import StreamingDataset

    if isinstance(options, str):
        with open(options) as f:
            options = json.load(f)
    options = options or {}
    _clean_shm()
    ds = StreamingDataset(local=datadir, remote=None, shuffle=False, batch_size=1,
                          allow_unsafe_types=True, validate_hash=options.get("validate_hash"))
    try:
        n = len(ds)
        iterated = [samples.norm_sample(s) for s in ds]
        items = {i: samples.norm_sample(ds[i]) for i in range(n)}
        return {"len": n, "iter": iterated, "items": items, "num_samples": int(ds.num_samples)}
    finally:
        del ds
        _maybe_collect()


def merge(outdir: str) -> dict:
    from streaming.base.util import merge_index

    merge_index(outdir)
    with open(os.path.join(outdir, "index.json")) as f:
        return {"index": json.load(f)}


def info() -> dict:
    import numpy
    import PIL
    import PIL.features
    import streaming

    return {
        "streaming": streaming.__version__,
        "numpy": numpy.__version__,
        "pillow": PIL.__version__,
        "libjpeg": PIL.features.version("jpg"),
        "zlib": PIL.features.version("zlib"),
        "python": sys.version,
    }


COMMANDS = {"write": write, "read": read, "merge": merge, "info": info}


def run_batch(jobs_path: str, result_path: str) -> None:
    with open(jobs_path) as f:
        jobs = json.load(f)
    results = []
    for job in jobs:
        try:
            results.append({"ok": True, "result": COMMANDS[job["cmd"]](*job.get("args", []))})
        except BaseException as exc:  # noqa: BLE001 - report every failure to the test
            results.append({"ok": False, "error": f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}"})
    _dump(results, result_path)


def _dump(obj, path: str) -> None:
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        pickle.dump(obj, f, protocol=4)
    os.replace(tmp, path)


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    cmd, args = argv[0], argv[1:]
    if cmd == "write" and len(args) == 2:
        write(args[0], args[1])
    elif cmd == "read" and len(args) in (2, 3):
        _dump(read(args[0], args[2] if len(args) == 3 else None), args[1])
    elif cmd == "merge" and len(args) == 1:
        merge(args[0])
    elif cmd == "info" and len(args) == 1:
        _dump(info(), args[0])
    elif cmd == "batch" and len(args) == 2:
        run_batch(args[0], args[1])
    else:
        print(__doc__, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
