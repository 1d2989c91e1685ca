"""Reading files people already have: the measuring children of ``bench/bench_files.py``.

    python bench/bench_files_sides.py CONFIG.json

One child per measurement, in the project venv: shardstream, Hugging Face ``datasets``
(streaming, local files only) and a plain pyarrow loop. ``CONFIG`` names the library
(``shardstream`` / ``hf`` / ``pyarrow``), the task and the files; the result is written to
``CONFIG['out']`` as JSON. The peers' children (``bench_files_peers.py``, peer venv) import
the helpers of the first section, so this module imports only the stdlib and numpy at
import time.

Every pass reads exactly ``CONFIG['limit']`` rows (the first ones, in file order, unless
shuffled) and touches each row as a training loop would: ``id`` and the number of tokens;
the sums are checked against the generator's.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import sys
import time
from typing import Any, Callable, Iterable, Iterator

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)
import common  # noqa: E402
from common import log  # noqa: E402


# -- shared with the peers' children (stdlib + numpy) -------------------------------------------
def load_config(path: str) -> dict:
    with open(path) as f:
        return json.load(f)


class Rows:
    """The generated rows (``rows.npz`` of the driver): ``id``, ``tokens`` (int32, ragged), ``text``."""

    def __init__(self, path: str) -> None:
        with np.load(path) as z:
            self.ids = z["ids"]
            self.tokens = z["tokens"]
            self.tok_offsets = z["tok_offsets"]
            self.text_bytes = z["text_bytes"].tobytes()
            self.text_offsets = z["text_offsets"]
        self.n = len(self.ids)

    def sample(self, i: int) -> dict[str, Any]:
        o, t = self.tok_offsets, self.text_offsets
        return {"id": int(self.ids[i]), "tokens": self.tokens[o[i]:o[i + 1]],
                "text": self.text_bytes[t[i]:t[i + 1]].decode("utf-8")}

    def expect(self, limit: int) -> dict[str, int]:
        """What a pass over the first ``limit`` rows must count and sum."""
        return self.expect_rows(np.arange(limit))

    def expect_rows(self, rows: np.ndarray) -> dict[str, int]:
        """What a pass over ``rows`` (positions) must count and sum."""
        lengths = np.diff(self.tok_offsets)[rows]
        return {"count": int(len(rows)), "id_sum": int(self.ids[rows].sum()), "tok_sum": int(lengths.sum())}


def touch_rows(rows: Iterable[dict], limit: int) -> dict[str, int]:
    """Read ``limit`` rows as a training loop would (its ``id`` and token count)."""
    n = ids = toks = 0
    if limit <= 0:
        return {"count": 0, "id_sum": 0, "tok_sum": 0}
    for s in rows:
        ids += int(s["id"])
        toks += len(s["tokens"])
        n += 1
        if n == limit:
            break
    return {"count": n, "id_sum": ids, "tok_sum": toks}


def passes(make_iter: Callable[[], Iterable[dict]], limit: int, repeats: int, expect: dict,
           touch: Callable[[Iterable, int], dict] = touch_rows, budget_s: float = 0.0) -> dict:
    """Up to ``repeats`` timed passes of ``limit`` rows, each from a fresh iterator; median rows/s.

    With ``budget_s``, no further pass starts once the passes so far took that long (a slow
    library then has fewer passes; every pass still reads the same ``limit`` rows)."""
    times, ok = [], True
    for _ in range(repeats):
        t = time.perf_counter()
        it = make_iter()
        got = touch(it, limit)
        times.append(time.perf_counter() - t)
        close = getattr(it, "close", None)
        if close is not None:
            close()
        ok = ok and got == expect
        if got != expect:
            log(f"!! pass read {got}, expected {expect}")
        if budget_s and sum(times) >= budget_s:
            break
    med = statistics.median(times)
    res = {"times": times, "repeats": len(times), "stat": "median", "seconds": med, "rows": limit,
           "rows_per_s": limit / med, "first_pass_rows_per_s": limit / times[0], "ok": ok}
    log(f"   {limit:,} rows: median {res['rows_per_s']:,.0f} rows/s over {len(times)} passes "
        f"({', '.join(f'{t:.2f}' for t in times)} s); ok={ok}")
    return res


def sample_types(sample: dict) -> dict[str, str]:
    """The type of each value of a sample (``int``, ``ndarray[int32]``, ``list[int]`` ...)."""
    out = {}
    for k, v in sample.items():
        if isinstance(v, np.ndarray):
            out[k] = f"ndarray[{v.dtype}]"
        elif isinstance(v, list):
            out[k] = f"list[{type(v[0]).__name__}]" if v else "list"
        else:
            out[k] = type(v).__name__
    return out


def timed_passes(make_ds: Callable[[], Any], cfg: dict, fresh: bool,
                 iterate: Callable[[Any], Iterable] = iter,
                 touch: Callable[[Iterable, int], dict] = touch_rows) -> dict:
    """Open the dataset (timed: ``open_s``), then :func:`passes` over it; with ``fresh`` each pass
    after the first reads a new dataset object (built untimed), so nothing decoded in one pass
    is kept for the next."""
    t = time.perf_counter()
    holder = [make_ds()]
    open_s = time.perf_counter() - t
    count = [0]

    def make_iter():
        if fresh and count[0]:
            holder[0] = None
            holder[0] = make_ds()
        count[0] += 1
        return iterate(holder[0])

    res = passes(make_iter, cfg["limit"], cfg["repeats"], cfg["expect"], touch, cfg.get("budget_s", 0.0))
    res.update(open_s=open_s, fresh_object_per_pass=fresh)
    if iterate is iter:
        it = iter(holder[0])
        res["sample_types"] = sample_types(next(it))
        close = getattr(it, "close", None)
        if close is not None:
            close()
    return res


def proc_io() -> dict[str, int]:
    """This process's I/O counters (``/proc/self/io``: rchar counts bytes read, page cache included)."""
    out = {}
    try:
        with open("/proc/self/io") as f:
            for line in f:
                k, v = line.split(":")
                out[k.strip()] = int(v)
    except OSError:
        pass
    return out


def io_delta(before: dict, after: dict) -> dict[str, int]:
    return {k: after[k] - before.get(k, 0) for k in ("rchar", "syscr", "read_bytes") if k in after}


def info(library: str, version: str, **more: Any) -> dict:
    return {"library": library, "version": version, "python": platform.python_version(), "numpy": np.__version__,
            **more}


# -- shardstream ---------------------------------------------------------------------------------
def ss_dataset(cfg: dict, files: str, **kw: Any):
    from shardstream import StreamingDataset

    return StreamingDataset(local=files, **kw)


def ss_sequential(cfg: dict, files: str) -> dict:
    """Dict samples in file order: constructor (caches as the config says), then timed passes, each
    over a new dataset object (a dataset keeps recently decoded row groups)."""
    return timed_passes(lambda: ss_dataset(cfg, files), cfg, fresh=True)


def touch_batches(batches: Iterable[dict], limit: int) -> dict[str, int]:
    """Column batches: the first ``limit`` rows' ids and token counts."""
    n = ids = toks = 0
    for b in batches:
        take = min(len(b["id"]), limit - n)
        ids += int(np.asarray(b["id"][:take]).sum())
        tok = b["tokens"]
        lengths = tok.lengths if hasattr(tok, "lengths") else np.array([len(r) for r in tok])
        toks += int(lengths[:take].sum())
        n += take
        if n >= limit:
            break
    return {"count": n, "id_sum": ids, "tok_sum": toks}


def ss_batches(cfg: dict, files: str) -> dict:
    res = timed_passes(lambda: ss_dataset(cfg, files, batch_size=cfg["batch_size"]), cfg, True,
                       lambda ds: ds.iterate_batches(), touch_batches)
    res["batch_size"] = cfg["batch_size"]
    return res


def ss_first_open(cfg: dict, files: str) -> dict:
    """Constructor and first sample with the cache directory the driver emptied (JSONL: the index is built)."""
    io0 = proc_io()
    t0 = time.perf_counter()
    ds = ss_dataset(cfg, files)
    t1 = time.perf_counter()
    it = iter(ds)
    first = next(it)
    t2 = time.perf_counter()
    io1 = proc_io()
    del it
    return {"construct_s": t1 - t0, "first_sample_s": t2 - t0, "io": io_delta(io0, io1),
            "first_id": int(first["id"]), "ok": int(first["id"]) == 0,
            "cache_bytes": common.dir_bytes(os.environ.get("SHARDSTREAM_CACHE_DIR", "/nonexistent"))}


def shardstream_child(cfg: dict) -> dict:
    t = time.perf_counter()
    import shardstream

    import_s = time.perf_counter() - t
    out = info("shardstream", shardstream.__version__, import_s=import_s,
               source=os.path.dirname(os.path.dirname(shardstream.__file__)))
    files, task = cfg.get("files"), cfg["task"]
    if task == "sequential":
        out.update(ss_sequential(cfg, files))
    elif task == "batches":
        out.update(ss_batches(cfg, files))
    elif task == "first_open":
        out.update(ss_first_open(cfg, files))
    elif task == "shuffled":
        import bench_files_loaders

        out.update(bench_files_loaders.ss_shuffled(cfg, files))
    elif task == "resume":
        import bench_files_loaders

        out.update(bench_files_loaders.ss_resume(cfg, files))
    elif task == "write_mds":
        out.update(write_mds(cfg))
    else:
        raise SystemExit(f"unknown task {task!r}")
    return out


def write_mds(cfg: dict) -> dict:
    """The MDS copy of the rows the passes read (the first ``limit``; shardstream's MDSWriter, 64 MB
    shards, uncompressed)."""
    from shardstream import MDSWriter

    rows = Rows(cfg["npz"])
    t = time.perf_counter()
    with MDSWriter(out=cfg["path"], columns={"id": "int64", "tokens": "ndarray:int32", "text": "str"},
                   exist_ok=True) as w:
        for i in range(cfg["limit"]):
            w.write(rows.sample(i))
    return {"write_s": time.perf_counter() - t, "rows": cfg["limit"], "disk_bytes": common.dir_bytes(cfg["path"])}


# -- Hugging Face datasets and pyarrow ----------------------------------------------------------------
def hf_open(builder: str, files: list[str]):
    from datasets import load_dataset

    return load_dataset(builder, data_files=files, split="train", streaming=True)


def hf_child(cfg: dict) -> dict:
    t = time.perf_counter()
    import datasets

    out = info("datasets", datasets.__version__, import_s=time.perf_counter() - t)
    task = cfg["task"]
    if task == "sequential":
        out.update(timed_passes(lambda: hf_open(cfg["builder"], cfg["files"]), cfg, fresh=False))
    elif task == "shuffled":
        import bench_files_loaders

        out.update(bench_files_loaders.hf_shuffled(cfg))
    elif task == "resume":
        import bench_files_loaders

        out.update(bench_files_loaders.hf_resume(cfg))
    else:
        raise SystemExit(f"unknown task {task!r}")
    return out


def pyarrow_rows(files: list[str], batch_rows: int) -> Iterator[dict]:
    """The plain loop: ``ParquetFile(f).iter_batches(...)`` and ``to_pylist()`` per batch."""
    import pyarrow.parquet as pq

    for f in files:
        for batch in pq.ParquetFile(f).iter_batches(batch_size=batch_rows):
            yield from batch.to_pylist()


def pyarrow_child(cfg: dict) -> dict:
    import pyarrow

    out = info("pyarrow", pyarrow.__version__, batch_rows=cfg["batch_rows"])
    out.update(passes(lambda: pyarrow_rows(cfg["files"], cfg["batch_rows"]), cfg["limit"], cfg["repeats"],
                      cfg["expect"], budget_s=cfg.get("budget_s", 0.0)))
    out["sample_types"] = sample_types(next(pyarrow_rows(cfg["files"], cfg["batch_rows"])))
    return out


def main() -> None:
    cfg = load_config(sys.argv[1])
    child = {"shardstream": shardstream_child, "hf": hf_child, "pyarrow": pyarrow_child}[cfg["library"]]
    res = child(cfg)
    common.emit(res, cfg["out"])


if __name__ == "__main__":
    main()
