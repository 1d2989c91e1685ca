"""One measurement of ``bench/bench_textshards.py``, in either venv: the same code drives shardstream
(project venv) and mosaicml-streaming (peer venv), since both offer the same names and keywords.

    python bench/bench_textshards_sides.py CONFIG.json

``CONFIG`` names the library (``shardstream`` or ``mosaic``), the step and the files:

- ``write``: load the samples (JSON Lines, untimed), write them with the library's ``JSONWriter`` or
  ``CSVWriter`` (default ``size_limit``, the given compression), timed; then the SHA-256 of every
  file written, so the driver can compare both libraries' outputs byte for byte.
- ``read``: open the written directory with the library's ``StreamingDataset`` (``local=`` only,
  ``shuffle=False``), iterate every sample once (a first pass: zstd shards are decompressed on the
  way), then ``ds[i]`` over the given random indices; each pass keeps a checksum of what it read.

Both record the process's peak RSS (``VmHWM``, else ``ru_maxrss``). Only the standard library at import.
"""

from __future__ import annotations

import hashlib
import json
import os
import resource
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

COLUMNS = {"id": "int", "text": "str", "score": "float"}


def library(name: str):
    """The package whose ``JSONWriter``, ``CSVWriter`` and ``StreamingDataset`` are measured."""
    if name == "mosaic":
        import streaming

        from bench_mosaic import clean_shm

        clean_shm()  # stale shared memory of an earlier run would make StreamingDataset refuse to start
        return streaming
    import shardstream

    return shardstream


def load_samples(path: str) -> list[dict]:
    with open(path) as f:
        return [json.loads(line) for line in f]


def peak_rss_mb() -> float:
    """This process's peak resident memory since it started. Linux's ``ru_maxrss`` carries over
    through fork + exec, so a side started by a large runner would report the runner's peak;
    ``VmHWM`` belongs to this process's own address space."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def digests(out: str) -> dict[str, str]:
    """SHA-256 of every file under ``out``, by path relative to it."""
    found = {}
    for d, _, files in os.walk(out):
        for name in files:
            path = os.path.join(d, name)
            with open(path, "rb") as f:
                found[os.path.relpath(path, out)] = hashlib.sha256(f.read()).hexdigest()
    return dict(sorted(found.items()))


def write(lib, cfg: dict) -> dict:
    samples = load_samples(cfg["samples"])
    writer = {"json": lib.JSONWriter, "csv": lib.CSVWriter}[cfg["format"]]
    start = time.perf_counter()
    with writer(out=cfg["out"], columns=COLUMNS, compression=cfg["compression"]) as w:
        put = w.write
        for s in samples:
            put(s)
    took = time.perf_counter() - start
    files = digests(cfg["out"])
    size = sum(os.path.getsize(os.path.join(cfg["out"], p)) for p in files)
    return {"samples": len(samples), "write_s": took, "samples_per_s": len(samples) / took,
            "out_bytes": size, "MB_per_s": size / 1e6 / took, "digests": files}


class Checksum:
    """What a pass read: the count, the sum of ``id``, an order-sensitive sum of ``id``, the characters of
    ``text`` and the sum of ``score`` (the same additions in the same order on both sides)."""

    def __init__(self) -> None:
        self.count = self.id_sum = self.id_order = self.chars = 0
        self.score = 0.0

    def add(self, s: dict) -> None:
        i = s["id"]
        self.count += 1
        self.id_sum += i
        self.id_order += self.count * i
        self.chars += len(s["text"])
        self.score += s["score"]

    def to_json(self) -> dict:
        return {"count": self.count, "id_sum": self.id_sum, "id_order": self.id_order, "chars": self.chars,
                "score": repr(self.score)}


def read(lib, cfg: dict) -> dict:
    with open(cfg["indices"]) as f:
        indices = json.load(f)
    start = time.perf_counter()
    ds = lib.StreamingDataset(local=cfg["out"], shuffle=False, batch_size=cfg["batch_size"])
    open_s = time.perf_counter() - start
    seq = Checksum()
    limit = cfg.get("limit") or len(ds)
    start = time.perf_counter()
    for n, s in enumerate(ds):
        if n == limit:
            break
        seq.add(s)
    iter_s = time.perf_counter() - start
    rnd = Checksum()
    start = time.perf_counter()
    for i in indices:
        rnd.add(ds[i])
    rand_s = time.perf_counter() - start
    return {"samples": len(ds), "open_s": open_s, "iterate_s": iter_s, "iterate_samples_per_s": seq.count / iter_s,
            "random_s": rand_s, "random_samples_per_s": len(indices) / rand_s, "sequential": seq.to_json(),
            "random": rnd.to_json()}


def version(lib) -> str:
    return getattr(lib, "__version__", "unknown")


def main(path: str) -> None:
    with open(path) as f:
        cfg = json.load(f)
    lib = library(cfg["library"])
    res = (write if cfg["step"] == "write" else read)(lib, cfg)
    res.update(peak_rss_mb=peak_rss_mb(), version=version(lib), python=sys.version.split()[0])
    if cfg["library"] == "mosaic":
        from bench_mosaic import clean_shm

        clean_shm()
    with open(cfg["result"], "w") as f:
        json.dump(res, f)


if __name__ == "__main__":
    main(sys.argv[1])
