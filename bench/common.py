"""Workload shared by every side of the benchmark (numpy only, no library imports).

The driver (``bench/run.py``) generates the data ONCE from a seed and saves it as
uncompressed ``.npz`` files under the work directory; each library's benchmark
process (its own venv, its own numpy) loads those files, so every library writes
and reads byte-identical samples, whatever numpy version it runs.

Workloads:

- ``mixed``: ~1.2 KB samples ``{"tokens": int32[64..512], "text": str (30..60 chars),
  "label": int}``; MDS columns ``tokens: ndarray:int32, text: str, label: int``.
- ``vec``:   fixed-shape ``{"x": float32[1024], "label": int}`` (4 KB + 8 B per sample);
  MDS columns ``x: ndarray:float32:1024, label: int``.
- ``img``:   fixed-shape ``{"img": uint8[3, 64, 64], "label": int}`` (12 KB + 8 B);
  MDS columns ``img: ndarray:uint8:3,64,64, label: int``.
"""

from __future__ import annotations

import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import time
from typing import Any, Callable

import numpy as np

SEED = 20240611
WORDS = ["stream", "shard", "token", "batch", "epoch", "node", "rank", "cache", "model", "loss",
         "gradient", "optimizer", "loader", "worker", "index", "sample", "mosaic", "lightning"]

MIXED_COLUMNS = {"tokens": "ndarray:int32", "text": "str", "label": "int"}
VEC_COLUMNS = {"x": "ndarray:float32:1024", "label": "int"}
IMG_COLUMNS = {"img": "ndarray:uint8:3,64,64", "label": "int"}
FIXED_COLUMNS = {"vec": VEC_COLUMNS, "img": IMG_COLUMNS}
FIXED_KEY = {"vec": "x", "img": "img"}


# -- generation (driver only) ------------------------------------------------------------
def _texts(rng: np.random.Generator, n: int) -> list[str]:
    """Short sentences of 30..60 characters built from WORDS."""
    picks = rng.integers(0, len(WORDS), (n, 12))
    targets = rng.integers(30, 61, n)
    out = []
    for row, target in zip(picks.tolist(), targets.tolist()):
        words, length = [], -1
        for j in row:
            w = WORDS[j]
            if length + 1 + len(w) > target:
                break
            words.append(w)
            length += 1 + len(w)
        text = " ".join(words)
        out.append((text + " " + "x" * 60)[:target] if len(text) < 30 else text)
    return out


def generate_mixed(path: str, n: int, seed: int = SEED) -> None:
    rng = np.random.default_rng(seed)
    lengths = rng.integers(64, 513, n).astype(np.int64)
    offsets = np.zeros(n + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    tokens = rng.integers(0, 50_000, int(offsets[-1]), dtype=np.int32)
    labels = rng.integers(0, 10, n).astype(np.int64)
    texts = _texts(rng, n)
    encoded = [t.encode("utf-8") for t in texts]
    text_offsets = np.zeros(n + 1, np.int64)
    np.cumsum([len(b) for b in encoded], out=text_offsets[1:])
    text_bytes = np.frombuffer(b"".join(encoded), np.uint8)
    _save(path, tokens=tokens, tok_offsets=offsets, text_bytes=text_bytes, text_offsets=text_offsets,
          labels=labels)


def generate_fixed(path: str, kind: str, n: int, seed: int = SEED) -> None:
    rng = np.random.default_rng(seed + (1 if kind == "vec" else 2))
    if kind == "vec":
        data = rng.standard_normal((n, 1024), dtype=np.float32)
    else:
        data = rng.integers(0, 256, (n, 3, 64, 64), dtype=np.uint8)
    labels = rng.integers(0, 1000, n).astype(np.int64)
    _save(path, data=data, labels=labels)


def generate_indices(path: str, n_samples: int, count: int, seed: int = SEED) -> None:
    rng = np.random.default_rng(seed + 7)
    _save(path, indices=rng.integers(0, n_samples, count).astype(np.int64))


def _save(path: str, **arrays: np.ndarray) -> None:
    tmp = path + ".tmp.npz"
    np.savez(tmp, **arrays)
    os.replace(tmp, path)


# -- loading (every side) -----------------------------------------------------------------
class Mixed:
    """The mixed workload, loaded from ``generate_mixed``'s file."""

    def __init__(self, path: str) -> None:
        with np.load(path) as z:
            self.tokens = z["tokens"]
            self.tok_offsets = z["tok_offsets"]
            self.text_bytes = z["text_bytes"].tobytes()
            self.text_offsets = z["text_offsets"]
            self.labels = z["labels"]
        self.n = len(self.labels)

    def sample(self, i: int) -> dict[str, Any]:
        o, t = self.tok_offsets, self.text_offsets
        return {"tokens": self.tokens[o[i]:o[i + 1]],
                "text": self.text_bytes[t[i]:t[i + 1]].decode("utf-8"),
                "label": int(self.labels[i])}

    def samples(self) -> list[dict[str, Any]]:
        """Every sample as a dict (built before any timer starts)."""
        o = self.tok_offsets.tolist()
        t = self.text_offsets.tolist()
        tb, tok = self.text_bytes, self.tokens
        return [{"tokens": tok[o[i]:o[i + 1]], "text": tb[t[i]:t[i + 1]].decode("utf-8"), "label": lab}
                for i, lab in enumerate(self.labels.tolist())]

    @property
    def payload_bytes(self) -> int:
        """Logical bytes of all samples: token bytes + UTF-8 text bytes + 8 per int label."""
        return int(self.tokens.nbytes + len(self.text_bytes) + 8 * self.n)

    def expect_touch(self, indices=None) -> int:
        """What ``touch`` summed over the given samples (all if None) must return."""
        lengths = np.diff(self.tok_offsets)
        if indices is None:
            return int(lengths.sum() + self.labels.sum())
        return int(lengths[indices].sum() + self.labels[indices].sum())


class Fixed:
    def __init__(self, path: str, kind: str) -> None:
        with np.load(path) as z:
            self.data = z["data"]
            self.labels = z["labels"]
        self.kind = kind
        self.key = FIXED_KEY[kind]
        self.columns = FIXED_COLUMNS[kind]
        self.n = len(self.labels)

    def samples(self) -> list[dict[str, Any]]:
        d, key = self.data, self.key
        return [{key: d[i], "label": lab} for i, lab in enumerate(self.labels.tolist())]

    @property
    def sample_bytes(self) -> int:
        return int(self.data[0].nbytes + 8)

    @property
    def payload_bytes(self) -> int:
        return int(self.data.nbytes + 8 * self.n)


def load_indices(path: str) -> np.ndarray:
    with np.load(path) as z:
        return z["indices"]


def touch(sample: dict) -> int:
    """What a training loop reads from a mixed sample: the token count and the label."""
    return len(sample["tokens"]) + int(sample["label"])


# -- timing -------------------------------------------------------------------------------
def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    start = time.perf_counter()
    result = fn()
    return time.perf_counter() - start, result


def summarize(times: list[float], count: int, nbytes: int | None = None, how: str = "best") -> dict[str, Any]:
    """Throughput from repeat times: ``best`` (min time) or ``median``."""
    t = min(times) if how == "best" else statistics.median(times)
    out = {"seconds": t, "times": times, "repeats": len(times), "stat": how, "count": count,
           "samples_per_s": count / t}
    if nbytes is not None:
        out["bytes"] = nbytes
        out["MB_per_s"] = nbytes / t / 1e6
        out["GB_per_s"] = nbytes / t / 1e9
    return out


def dir_bytes(path: str) -> int:
    total = 0
    for root, _, files in os.walk(path):
        for f in files:
            try:
                total += os.path.getsize(os.path.join(root, f))
            except OSError:
                pass
    return total


def emit(result: dict, path: str) -> None:
    """Write one side's results as JSON (atomically)."""
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(result, f, indent=1, default=_jsonable)
    os.replace(tmp, path)


def _jsonable(x):
    if isinstance(x, (np.integer,)):
        return int(x)
    if isinstance(x, (np.floating,)):
        return float(x)
    if isinstance(x, np.ndarray):
        return x.tolist()
    raise TypeError(type(x))


def log(*args) -> None:
    print(f"[{time.strftime('%H:%M:%S')}]", *args, flush=True)


def env_info() -> dict[str, Any]:
    return {"python": platform.python_version(), "numpy": np.__version__}


def repeat_checked(run: Callable[[], Any], expect: Any, repeats: int) -> list[float]:
    """Time ``run`` ``repeats`` times; every run must return ``expect``."""
    times = []
    for _ in range(repeats):
        t, acc = timed(run)
        assert acc == expect, (acc, expect)
        times.append(t)
    return times


def random_access_times(ds, idx: list, expect: int, repeats: int) -> list[float]:
    """Time ``touch(ds[i])`` over ``idx``, checked against ``expect``."""

    def run() -> int:
        acc = 0
        for i in idx:
            acc += touch(ds[i])
        return acc

    return repeat_checked(run, expect, repeats)


def bench_writes(work: str, prefix: str, mixed, write: Callable[[str, Any], None], repeats: int) -> dict:
    """Time ``write(out, compression)`` without compression and with zstd (one repeat fewer)."""
    import gc
    import shutil

    res = {}
    for comp, reps in ((None, repeats), ("zstd", max(1, repeats - 1))):
        out = os.path.join(work, prefix + (f"-{comp}" if comp else ""))
        times = []
        for _ in range(reps):
            shutil.rmtree(out, ignore_errors=True)
            gc.collect()
            t, _ = timed(lambda: write(out, comp))
            times.append(t)
        r = summarize(times, mixed.n, mixed.payload_bytes)
        r["disk_bytes"] = dir_bytes(out)
        res[comp or "none"] = r
        log(f"write {comp or 'none'}: {r['samples_per_s']:,.0f} samples/s, {r['MB_per_s']:,.0f} MB/s")
    shutil.rmtree(os.path.join(work, prefix + "-zstd"), ignore_errors=True)
    return res


def side_args(**extra_int_options: int):
    """Command-line options every benchmark side takes, plus ``--name`` int options with defaults."""
    import argparse

    ap = argparse.ArgumentParser()
    ap.add_argument("--work", required=True)
    ap.add_argument("--json", required=True)
    ap.add_argument("--repeats", type=int, default=3)
    for name, default in extra_int_options.items():
        ap.add_argument("--" + name.replace("_", "-"), type=int, default=default)
    return ap.parse_args()


def touch_all(ds) -> int:
    """Iterate ``ds`` once, touching each sample as a training loop would; returns a checksum."""
    acc = 0
    for s in ds:
        acc += len(s["tokens"]) + s["label"]
    return acc


def first_and_warm(ds, mixed, repeats: int) -> dict:
    """Time one first pass over ``ds`` and ``repeats`` warm passes, each checked."""
    expect = mixed.expect_touch()
    first = summarize(repeat_checked(lambda: touch_all(ds), expect, 1), mixed.n)
    warm = summarize(repeat_checked(lambda: touch_all(ds), expect, repeats), mixed.n)
    log(f"iterate: first {first['samples_per_s']:,.0f}, warm {warm['samples_per_s']:,.0f} samples/s")
    return {"first": first, "warm": warm}



def get(d, *keys):
    """``d[k1][k2]...``, or None where a key is missing (results of runs that failed or were skipped)."""
    for k in keys:
        if not isinstance(d, dict) or k not in d:
            return None
        d = d[k]
    return d


# -- provenance of a benchmark run ---------------------------------------------------------
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def git_rev() -> str:
    """The commit under test, and whether src/ differs from it."""
    try:
        rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                             check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "src"], cwd=ROOT, capture_output=True,
                               text=True, check=False).stdout.strip()
        return rev + (" (src/ has uncommitted changes)" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def command_line(script: str) -> str:
    """This process's command line, with paths inside the repository made relative to it."""
    python = os.path.relpath(sys.executable, ROOT) if sys.executable.startswith(ROOT) else sys.executable
    return " ".join(shlex.quote(a) for a in [python, os.path.relpath(os.path.abspath(script), ROOT), *sys.argv[1:]])


def publish(R: dict, render: Callable[[dict], str], script: str, out: str | None, json_path: str | None) -> None:
    """Stamp ``R`` with ``script``'s command line, print its report (``render(R)``), and write the
    report and ``R`` where asked."""
    R["command"] = command_line(script)
    text = render(R)
    print(text)
    if out:
        with open(out, "w") as f:
            f.write(text)
    if json_path:
        with open(json_path, "w") as f:
            json.dump(R, f, indent=1)


def add_run_options(ap, data: str, what: str, wait: float = 30.0) -> None:
    """The options every section's command line shares: the CPU wait, where its ``what`` (input data) is kept,
    keeping the outputs, and where the report and raw results go (or re-rendering them)."""
    ap.add_argument("--wait", type=float, default=wait, help="before each measurement, wait up to this many "
                    "seconds for the CPUs to be at most 25%% busy (0: never wait)")
    ap.add_argument("--data", default=data, help=f"where {what} are kept (reused by later runs)")
    ap.add_argument("--keep-data", action="store_true", help="keep the outputs and the runs' logs")
    ap.add_argument("--out", help="Markdown report")
    ap.add_argument("--json", help="raw results")
    ap.add_argument("--from-json", help="only re-render --out from the raw results of an earlier run")
