"""Shard digests by name: every ``hashlib`` algorithm plus xxhash's
(``xxh32``, ``xxh64``, ``xxh3_64``, ``xxh3_128``, ``xxh128``). Digests are hex
strings, as in mosaicml-streaming's index files."""

from __future__ import annotations

import hashlib
from typing import Callable

from ..errors import UnsupportedFormatError

_XXH = ("xxh32", "xxh64", "xxh3_64", "xxh3_128", "xxh128")


def _constructor(algo: str) -> Callable:
    if algo in _XXH:
        import xxhash

        return getattr(xxhash, algo)
    if algo in hashlib.algorithms_available and not algo.startswith("shake_") and hasattr(hashlib, algo):
        return getattr(hashlib, algo)
    raise UnsupportedFormatError(f"unknown hash {algo!r}; known: {', '.join(hashes())}")


def hashes() -> list[str]:
    names = {a for a in hashlib.algorithms_available if hasattr(hashlib, a) and not a.startswith("shake_")}
    return sorted(names | set(_XXH))


def check_hash(algo: str) -> None:
    _constructor(algo)


def digest(algo: str, data) -> str:
    """Hex digest of ``data`` (bytes, memoryview or mmap)."""
    return _constructor(algo)(data).hexdigest()


def digest_file(algo: str, path: str, chunk: int = 1 << 22) -> str:
    h = _constructor(algo)()
    with open(path, "rb") as f:
        while True:
            block = f.read(chunk)
            if not block:
                break
            h.update(block)
    return h.hexdigest()
