"""Decompressing a whole data file (``.gz``, ``.zst``, ``.bz2``, ``.xz``) into the cache, atomically,
and opening one as a stream."""

from __future__ import annotations

import bz2
import gzip
import lzma
import os
import shutil
from typing import Any, BinaryIO, Optional

from ..errors import CorruptShardError
from .atomic import remove_quietly, temp_name


def open_decompressed(raw: BinaryIO, codec: Optional[str]) -> Any:
    """A binary stream of ``raw``'s decompressed bytes (``raw`` itself when ``codec`` is None)."""
    if codec is None:
        return raw
    if codec == "gzip":
        return gzip.GzipFile(fileobj=raw, mode="rb")
    if codec == "zstd":
        import zstandard

        return zstandard.ZstdDecompressor().stream_reader(raw, read_across_frames=True)
    if codec == "bz2":
        return bz2.BZ2File(raw, "rb")
    if codec == "xz":
        return lzma.LZMAFile(raw, "rb")
    raise CorruptShardError(f"unknown compression {codec!r}")


def decompress_file(src: str, dest: str, codec: str, size: int, keep_src: bool = True) -> None:
    """Decompress ``src`` into ``dest`` (renamed into place only once complete and ``size`` bytes long)."""
    tmp = temp_name(dest)
    try:
        with open(src, "rb") as raw, open_decompressed(raw, codec) as stream, open(tmp, "wb") as out:
            shutil.copyfileobj(stream, out, 1 << 22)
        got = os.path.getsize(tmp)
    except Exception as exc:  # OSError, EOFError, and each codec's own error type
        remove_quietly(tmp)
        raise CorruptShardError(f"{src} is not a readable {codec} file ({type(exc).__name__}: {exc})") from None
    if got != size:
        remove_quietly(tmp)
        raise CorruptShardError(f"{src} decompresses to {got} bytes, but it held {size} when the dataset listed it; "
                                "the file changed or is damaged: open the dataset again")
    os.replace(tmp, dest)
    if not keep_src:
        remove_quietly(src)
