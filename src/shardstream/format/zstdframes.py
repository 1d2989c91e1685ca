"""Reading a ``.zst`` file as a stream, refusing one that ends inside a frame.

zstandard's stream reader returns what it could decompress and then an empty read when its input
runs out, also in the middle of a frame: a truncated file would read as a shorter one. So the
compressed bytes it reads pass through a :class:`FrameWalker` on their way, which follows the
structure of the frames (RFC 8878: a frame header, blocks whose headers give their sizes, an
optional checksum; skippable frames with their size) without decompressing anything, and at the
end of the stream says whether the last frame was complete. The walk costs a few operations per
block (at most 128 KiB of output each), nothing per byte.
"""

from __future__ import annotations

from typing import Any, BinaryIO, Callable, Optional

_FRAME_MAGIC = 0xFD2FB528
_SKIPPABLE = 0x184D2A50  # ... 0x184D2A5F: the low 4 bits are free
_DICT_ID = (0, 1, 2, 4)  # bytes of the dictionary id, by Dictionary_ID_flag
_CONTENT_SIZE = (0, 2, 4, 8)  # bytes of the content size, by Frame_Content_Size_flag (0: 1 if single segment)


class TruncatedZstdError(EOFError):
    """A zstd stream ended inside a frame (the file was cut short)."""


class FrameWalker:
    """Follows the frames of a zstd stream fed to it in pieces of any size (see the module docstring)."""

    def __init__(self) -> None:
        self.frames = 0  # frames begun
        self.fed = 0  # compressed bytes seen
        self.unknown = False  # bytes that are no frame zstandard writes: the decompressor judges them
        self._field = bytearray()
        self._need = 4  # bytes of the field being gathered
        self._skip = 0  # bytes to pass over before the next field
        self._then: Callable[[bytes], None] = self._magic
        self._last = False  # the block being passed over is the frame's last
        self._checksum = 0

    @property
    def at_boundary(self) -> bool:
        """Whether the bytes fed so far end between two frames (or before the first)."""
        return self.unknown or (self._then == self._magic and not self._field and not self._skip)

    def feed(self, data: bytes) -> None:
        pos, n = 0, len(data)
        self.fed += n
        while pos < n and not self.unknown:
            if self._skip:
                take = min(self._skip, n - pos)
                self._skip -= take
                pos += take
                continue
            take = min(self._need - len(self._field), n - pos)
            self._field += data[pos:pos + take]
            pos += take
            if len(self._field) == self._need:
                field = bytes(self._field)
                self._field.clear()
                self._then(field)

    def _expect(self, need: int, then: Callable[[bytes], None], skip: int = 0) -> None:
        self._skip, self._need, self._then = skip, need, then

    def _magic(self, field: bytes) -> None:
        magic = int.from_bytes(field, "little")
        if magic == _FRAME_MAGIC:
            self.frames += 1
            self._expect(1, self._descriptor)
        elif magic & 0xFFFFFFF0 == _SKIPPABLE:
            self.frames += 1
            self._expect(4, self._skippable_size)
        else:
            self.unknown = True

    def _skippable_size(self, field: bytes) -> None:
        self._expect(4, self._magic, int.from_bytes(field, "little"))

    def _descriptor(self, field: bytes) -> None:
        fhd = field[0]
        single = bool(fhd & 0x20)
        size_bytes = _CONTENT_SIZE[fhd >> 6] or (1 if single else 0)
        self._checksum = 4 if fhd & 0x04 else 0
        rest = (0 if single else 1) + _DICT_ID[fhd & 0x03] + size_bytes
        self._expect(3, self._block, rest)

    def _block(self, field: bytes) -> None:
        header = int.from_bytes(field, "little")
        self._last = bool(header & 1)
        kind, size = (header >> 1) & 3, header >> 3
        body = 1 if kind == 1 else size  # an RLE block holds one byte, repeated ``size`` times
        if self._last:
            self._expect(4, self._magic, body + self._checksum)
        else:
            self._expect(3, self._block, body)


class ZstdStream:
    """The decompressed bytes of a zstd stream, read across frames; an empty read at its end raises
    :class:`TruncatedZstdError` instead when the compressed bytes stop inside a frame."""

    def __init__(self, raw: BinaryIO) -> None:
        import zstandard

        self.raw = raw
        self.walker = FrameWalker()
        self._reader = zstandard.ZstdDecompressor().stream_reader(_Watched(raw, self.walker), read_across_frames=True)
        self._ended = False

    def read(self, size: int = -1) -> bytes:
        if size is None or size < 0:
            return b"".join(iter(lambda: self.read(1 << 22), b""))
        data = self._reader.read(size)
        if not data and size and not self._ended:
            self._end()
        return data

    def readinto(self, buffer: Any) -> int:
        data = self.read(len(buffer))
        buffer[:len(data)] = data
        return len(data)

    def _end(self) -> None:
        while True:  # what the decompressor did not ask for is walked too
            rest = self.raw.read(1 << 16)
            if not rest:
                break
            self.walker.feed(rest)
        walker = self.walker
        if not walker.at_boundary:
            raise TruncatedZstdError(f"the zstd stream ends inside frame {walker.frames}, after {walker.fed} "
                                     "compressed bytes: it was cut short")
        self._ended = True

    def readable(self) -> bool:
        return True

    def close(self) -> None:
        self._reader.close()

    @property
    def closed(self) -> bool:
        return self._reader.closed

    def __enter__(self) -> "ZstdStream":
        return self

    def __exit__(self, *exc: Optional[BaseException]) -> None:
        self.close()


class _Watched:
    """``raw`` whose bytes, as they are read, are fed to a walker."""

    def __init__(self, raw: BinaryIO, walker: FrameWalker) -> None:
        self.raw, self.walker = raw, walker

    def read(self, size: int = -1) -> bytes:
        data = self.raw.read(size)
        self.walker.feed(data)
        return data

    def close(self) -> None:
        self.raw.close()
