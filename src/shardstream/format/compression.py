"""Shard compression codecs, looked up by ``name`` or ``name:level``.

Names, extensions and default levels match mosaicml-streaming so datasets move
between the two libraries unchanged: ``br`` (brotli, 0-11, default 11), ``bz2``
(1-9, default 9), ``gz`` (0-9, default 9), ``snappy`` (no level) and ``zstd``
(1-22, default 3). Codecs that need an optional package are imported on first use.
"""

from __future__ import annotations

import bz2
import gzip
from dataclasses import dataclass
from typing import Callable, Optional

from ..errors import CorruptShardError, UnsupportedFormatError, require


@dataclass(frozen=True)
class _Family:
    levels: Optional[range]  # None: the codec takes no level
    default: Optional[int]
    compress: Callable[[bytes, Optional[int]], bytes]
    decompress: Callable[[bytes, int], bytes]  # (data, expected raw size)


def _zstd_compress(data: bytes, level: Optional[int]) -> bytes:
    import zstandard

    # One worker thread, as mosaicml-streaming's ``zstd.compress`` uses: past a few MB its frames are cut
    # into jobs, so without it a large shard's bytes would differ from mosaicml-streaming's.
    return zstandard.ZstdCompressor(level=level, threads=1).compress(data)


def _zstd_decompress(data: bytes, raw_size: int) -> bytes:
    import zstandard

    # Frames written by other tools may omit the content size; bound it by the index.
    return zstandard.ZstdDecompressor().decompress(data, max_output_size=max(raw_size, 1))


def _br_compress(data: bytes, level: Optional[int]) -> bytes:
    return require("brotli", "brotli", "br compression").compress(data, quality=level)


def _br_decompress(data: bytes, raw_size: int) -> bytes:
    return require("brotli", "brotli", "br compression").decompress(data)


def _snappy_compress(data: bytes, level: Optional[int]) -> bytes:
    return require("snappy", "snappy", "snappy compression").compress(data)


def _snappy_decompress(data: bytes, raw_size: int) -> bytes:
    return require("snappy", "snappy", "snappy compression").decompress(data)


def _gzip(data: bytes, level: Optional[int]) -> bytes:
    """gzip with mtime 0: reproducible, and the same header (OS byte 255) as GzipFile writes."""
    import io

    out = io.BytesIO()
    with gzip.GzipFile(fileobj=out, mode="wb", compresslevel=level, mtime=0) as f:
        f.write(data)
    return out.getvalue()


_FAMILIES: dict[str, _Family] = {
    "br": _Family(range(0, 12), 11, _br_compress, _br_decompress),
    "bz2": _Family(range(1, 10), 9, lambda d, lv: bz2.compress(d, lv), lambda d, n: bz2.decompress(d)),
    "gz": _Family(range(0, 10), 9, lambda d, lv: _gzip(d, lv), lambda d, n: gzip.decompress(d)),
    "snappy": _Family(None, None, _snappy_compress, _snappy_decompress),
    "zstd": _Family(range(1, 23), 3, _zstd_compress, _zstd_decompress),
}


def parse_compression(algo: str) -> tuple[str, Optional[int]]:
    """Split ``'zstd:7'`` into ``('zstd', 7)``; validate name and level."""
    if not isinstance(algo, str) or not algo:
        raise UnsupportedFormatError(f"compression={algo!r} should be a string such as 'zstd' or 'zstd:7'")
    name, _, level_text = algo.partition(":")
    family = _FAMILIES.get(name)
    if family is None:
        raise UnsupportedFormatError(
            f"unknown compression {algo!r}; known: {', '.join(sorted(_FAMILIES))} (optionally 'name:level')"
        )
    if not level_text:
        return name, family.default
    if family.levels is None:
        raise UnsupportedFormatError(f"compression {name!r} takes no level, got {algo!r}; use {name!r}")
    try:
        level = int(level_text)
    except ValueError:
        level = None
    if level is None or level not in family.levels:
        raise UnsupportedFormatError(
            f"compression {algo!r} has an invalid level; {name} levels are "
            f"{family.levels.start}..{family.levels.stop - 1}"
        )
    return name, level


def compression_extension(algo: str) -> str:
    """File extension for a compression: ``'zstd:7'`` -> ``'zstd'``."""
    return parse_compression(algo)[0]


def compress(algo: str, data: bytes) -> bytes:
    name, level = parse_compression(algo)
    return _FAMILIES[name].compress(data, level)


def decompress(algo: str, data: bytes, raw_size: int, what: str = "shard") -> bytes:
    """Decompress ``data``; any codec failure or size mismatch is a :class:`CorruptShardError`."""
    name, _ = parse_compression(algo)
    try:
        raw = _FAMILIES[name].decompress(data, raw_size)
    except (ImportError, UnsupportedFormatError):
        raise
    except Exception as exc:  # codecs raise their own assorted error types
        raise CorruptShardError(
            f"{what}: {name} decompression failed ({type(exc).__name__}: {exc}); the file is damaged, "
            f"delete it and fetch or write it again"
        ) from exc
    if len(raw) != raw_size:
        raise CorruptShardError(
            f"{what}: decompressed to {len(raw)} bytes but the index says {raw_size}; the file is damaged"
        )
    return raw


def compressions() -> list[str]:
    """Names of the known compression families."""
    return sorted(_FAMILIES)
