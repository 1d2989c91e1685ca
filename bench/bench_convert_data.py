"""The Parquet files ``bench/bench_convert.py`` converts to MDS, and the rows they hold.

Generated once from a fixed seed and kept under the data directory (``bench/.data/convert/<key>``,
the key naming every parameter), so a rerun of the section reuses them. Every row ``i`` of the whole
set (files in order) is::

    id      int64            i
    tokens  list<int32>      uniform length 64..512, values uniform 0..50,256
    text    string           40..120 ASCII characters: a slice of a fixed text of made-up words

The rows are split evenly over ``files`` Parquet files written by pyarrow (row groups of 32,768
rows, pyarrow's other defaults: snappy pages, dictionary encoding where it pays). :func:`row`
rebuilds any row from the files' layout alone, so every side's output can be checked by ``id``.
Runs in either venv (numpy, pyarrow).
"""

from __future__ import annotations

import json
import os
import time

import numpy as np

SEED = 20240611 + 18
FORMAT = 1  # bump when the generator changes: the data directory's key changes with it
ROW_GROUP = 32_768
MIN_TOKENS, MAX_TOKENS, VOCAB = 64, 512, 50_257
MIN_TEXT, MAX_TEXT = 40, 120
SYLLABLES = ("ka", "lo", "mi", "ne", "su", "ta", "ri", "po", "an", "el", "ou", "st", "th", "er", "in", "qu")


def corpus(n_chars: int = 1 << 20, seed: int = SEED) -> bytes:
    """A fixed ASCII text of made-up words that every row's ``text`` is a slice of."""
    rng = np.random.default_rng(seed)
    words = ["".join(rng.choice(SYLLABLES, int(k))) for k in rng.integers(1, 5, 4096)]
    out, size = [], 0
    for i in rng.integers(0, len(words), n_chars // 3):
        out.append(words[i])
        size += len(words[i]) + 1
        if size > n_chars + MAX_TEXT:
            break
    return " ".join(out).encode()


def file_columns(index: int, rows: int, seed: int = SEED) -> dict[str, np.ndarray]:
    """File ``index``'s columns as flat arrays: ``id``, token ``offsets`` + ``values``, text ``starts`` + ``lengths``."""
    rng = np.random.default_rng([seed, index])
    lengths = rng.integers(MIN_TOKENS, MAX_TOKENS + 1, rows)
    offsets = np.zeros(rows + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    values = rng.integers(0, VOCAB, int(offsets[-1]), dtype=np.int32)
    text_len = rng.integers(MIN_TEXT, MAX_TEXT + 1, rows)
    starts = rng.integers(0, (1 << 20) - MAX_TEXT, rows)
    return {"id": np.arange(index * rows, (index + 1) * rows, dtype=np.int64), "offsets": offsets, "values": values,
            "starts": starts, "lengths": text_len}


def table(index: int, rows: int, text: bytes):
    """File ``index`` as a ``pyarrow.Table`` (id, tokens, text)."""
    import pyarrow as pa

    c = file_columns(index, rows)
    byte_idx = np.repeat(c["starts"] - np.concatenate([[0], np.cumsum(c["lengths"])[:-1]]), c["lengths"])
    byte_idx += np.arange(int(c["lengths"].sum()))
    data = np.frombuffer(text, np.uint8)[byte_idx]
    text_off = np.zeros(rows + 1, np.int32)
    np.cumsum(c["lengths"], out=text_off[1:])
    strings = pa.StringArray.from_buffers(rows, pa.py_buffer(text_off), pa.py_buffer(data.tobytes()))
    tokens = pa.ListArray.from_arrays(pa.array(c["offsets"].astype(np.int32)), pa.array(c["values"]))
    return pa.table({"id": pa.array(c["id"]), "tokens": tokens, "text": strings})


def prepare(root: str, rows: int, files: int) -> dict:
    """The Parquet files of ``rows`` rows in ``files`` files under ``root/<key>``, written unless already there;
    returns their paths, sizes and ``reused``."""
    import pyarrow.parquet as pq

    if rows % files:
        raise ValueError(f"{rows} rows do not split evenly into {files} files; pick a multiple of {files}")
    key = f"rows{rows}-files{files}-seed{SEED}-v{FORMAT}"
    d = os.path.join(os.path.abspath(root), key)
    meta_path = os.path.join(d, "meta.json")
    names = [f"part-{i:03d}.parquet" for i in range(files)]
    if os.path.exists(meta_path):
        with open(meta_path) as f:
            return dict(json.load(f), dir=d, files=[os.path.join(d, n) for n in names], reused=True)
    os.makedirs(d, exist_ok=True)
    start, text, paths = time.perf_counter(), corpus(), []
    for i, name in enumerate(names):
        path = os.path.join(d, name)
        pq.write_table(table(i, rows // files, text), path, row_group_size=ROW_GROUP)
        paths.append(path)
    meta = {"dir": d, "files": paths, "rows": rows, "rows_per_file": rows // files, "seed": SEED,
            "bytes": sum(os.path.getsize(p) for p in paths), "generate_s": time.perf_counter() - start}
    with open(meta_path + ".tmp", "w") as f:
        json.dump(meta, f, indent=1)
    os.replace(meta_path + ".tmp", meta_path)
    return dict(meta, reused=False)


def row(meta: dict, i: int) -> dict:
    """Row ``i`` of the set as ``{'id', 'tokens' (int32 array), 'text'}``, read back from its Parquet file."""
    import pyarrow.parquet as pq

    f, at = divmod(i, meta["rows_per_file"])
    pf = pq.ParquetFile(meta["files"][f])
    g, k = divmod(at, ROW_GROUP)
    r = pf.read_row_group(g).slice(k, 1).to_pylist()[0]
    return {"id": r["id"], "tokens": np.asarray(r["tokens"], np.int32), "text": r["text"]}


def check_rows(meta: dict, count: int, get, picks: int = 16) -> dict:
    """Whether a written copy holds ``meta['rows']`` rows (``count``) and its rows ``get(j)`` equal the Parquet
    rows of the same ``id``, for ``picks`` positions ``j`` spread over the copy (any order of rows is fine)."""
    n = meta["rows"]
    js = sorted({0, count - 1, *np.random.default_rng(0).integers(0, max(count, 1), picks).tolist()}) if count else []
    bad = []
    for j in js:
        got = get(j)
        want = row(meta, int(got["id"]))
        if not (np.array_equal(np.asarray(got["tokens"]), want["tokens"]) and got["text"] == want["text"]):
            bad.append(j)
    return {"rows": count, "expected_rows": n, "compared": len(js), "mismatched": bad,
            "ok": count == n and not bad}
