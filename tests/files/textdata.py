"""Rows and files of the text-format tests: JSON rows whose values say which row they are, and the
samples shardstream must give for them.

Row ``i`` is ``{"id": i, "text": ..., "tokens": [...], "score": i / 4, "meta": {...}}`` with a unicode
text of a length that varies with ``i``, so a sample read from the wrong line shows as wrong data.
"""

from __future__ import annotations

import bz2
import gzip
import json
import os
from typing import Any, Optional, Sequence

import numpy as np

WORDS = ["alpha", "βeta", "gamma", "дельта", "ε", "zêta", "🚀", "naïve", "\u00e9t\u00e9", "x"]


def row(i: int, width: int = 7) -> dict:
    text = " ".join(WORDS[(i + k) % len(WORDS)] for k in range(i % width + 1))
    return {"id": i, "text": f"{i}: {text}", "tokens": list(range(i % 5, i % 5 + i % 4)),
            "score": i / 4, "meta": {"lang": ["en", "fr"][i % 2], "pos": [i, -i]}}


def rows(n: int, start: int = 0, width: int = 7) -> list[dict]:
    return [row(i, width) for i in range(start, start + n)]


def sample(r: dict) -> dict:
    """What shardstream gives for row ``r`` (lists of numbers as int64 arrays, a float score)."""
    out: dict[str, Any] = {}
    for k, v in r.items():
        if k == "tokens":
            out[k] = np.asarray(v, np.int64)
        elif k == "score":
            out[k] = float(v)
        elif k == "meta":
            out[k] = {"lang": v["lang"], "pos": np.asarray(v["pos"], np.int64)}
        else:
            out[k] = v
    return out


def jsonl_bytes(items: Sequence[Any], newline: str = "\n", trailing: bool = True, blank: Sequence[int] = ()) -> bytes:
    """JSON Lines of ``items`` (``blank``: indices before which a blank line is written)."""
    lines = []
    for k, item in enumerate(items):
        if k in blank:
            lines.append("   " if k % 2 else "")
        lines.append(item if isinstance(item, str) else json.dumps(item, ensure_ascii=False))
    text = newline.join(lines) + (newline if trailing and lines else "")
    return text.encode()


def write(path: str, data: bytes, codec: Optional[str] = None) -> str:
    """Write ``data`` to ``path``, compressed with ``codec`` ("gzip", "zstd", "bz2") if given."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    if codec == "gzip":
        data = gzip.compress(data)
    elif codec == "zstd":
        import zstandard

        data = zstandard.ZstdCompressor().compress(data)
    elif codec == "bz2":
        data = bz2.compress(data)
    with open(path, "wb") as f:
        f.write(data)
    return path


def write_jsonl(path: str, items: Sequence[Any], codec: Optional[str] = None, **kwargs: Any) -> str:
    return write(path, jsonl_bytes(items, **kwargs), codec)


def by_id(samples) -> list[int]:
    return [s["id"] for s in samples]
