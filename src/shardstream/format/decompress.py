"""Decompressing a whole data file (``.gz``, ``.zst``, ``.bz2``, ``.xz``) into the cache, atomically,
and opening one as a stream.

Every codec refuses a file cut short: gzip, bz2 and xz raise ``EOFError`` at the end of a stream that
stops inside its data; zstd through :class:`~.zstdframes.ZstdStream`, which checks that the last frame
is complete. :class:`NamedStream` turns such failures into :class:`~shardstream.errors.CorruptShardError`
naming the file."""

from __future__ import annotations

import bz2
import gzip
import lzma
import os
import shutil
from typing import Any, BinaryIO, Optional

from ..errors import CorruptShardError, ShardstreamError
from .atomic import remove_quietly, temp_name


def open_decompressed(raw: BinaryIO, codec: Optional[str]) -> Any:
    """A binary stream of ``raw``'s decompressed bytes (``raw`` itself when ``codec`` is None)."""
    if codec is None:
        return raw
    if codec == "gzip":
        return gzip.GzipFile(fileobj=raw, mode="rb")
    if codec == "zstd":
        from .zstdframes import ZstdStream

        return ZstdStream(raw)
    if codec == "bz2":
        return bz2.BZ2File(raw, "rb")
    if codec == "xz":
        return lzma.LZMAFile(raw, "rb")
    raise CorruptShardError(f"unknown compression {codec!r}")


def damaged(where: str, codec: str, exc: BaseException) -> CorruptShardError:
    """The error for file ``where`` that its codec could not read (``exc``: the codec's own error)."""
    return CorruptShardError(f"{where} cannot be read as {codec} ({type(exc).__name__}: {exc}); the file is damaged "
                             "or truncated: write it again")


class NamedStream:
    """The decompressed bytes of file ``where`` read from ``raw``: what its codec cannot read (a damaged or
    truncated file) raises :func:`damaged`; a failure of ``raw`` itself passes unchanged."""

    def __init__(self, raw: BinaryIO, codec: str, where: str) -> None:
        self.codec, self.where = codec, where
        self._raw = _Flagged(raw)
        self._stream = open_decompressed(self._raw, codec)
        self._done = 0

    def read(self, size: int = -1) -> bytes:
        try:
            data = self._stream.read(size)
        except ShardstreamError:
            raise
        except Exception as exc:  # each codec has its own error types (gzip: OSError, EOFError; zstd's)
            if self._raw.failed:
                raise
            raise damaged(self.where, self.codec, exc) from None
        self._done += len(data)
        return data

    def tell(self) -> int:
        return self._done

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return False

    @property
    def closed(self) -> bool:
        return self._stream.closed

    def close(self) -> None:
        self._stream.close()

    def __enter__(self) -> "NamedStream":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class _Flagged:
    """``raw``, noting whether a read of it failed."""

    def __init__(self, raw: BinaryIO) -> None:
        self.raw, self.failed = raw, False

    def read(self, size: int = -1) -> bytes:
        try:
            return self.raw.read(size)
        except BaseException:
            self.failed = True
            raise

    def close(self) -> None:
        self.raw.close()


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
