"""Copying many byte ranges of a shard at once, with C loops rather than a Python loop per range.

- :func:`rows_at`: ranges of one width, as the rows of a 2-D array (one fancy index into a
  view of the buffer whose item ``k`` is the ``width`` bytes from offset ``k``);
- :func:`gather_spans`: ranges of any sizes, one after another (the bytes of a ragged column);
- :func:`gather_strs`: ranges of UTF-8 text as a list of ``str``.

A range of any size is copied as fixed-size chunks of the output, each a row read from where
its first byte lies: chunk ``j`` holds output bytes ``j*C .. j*C + C - 1`` and is read from the
range that holds output byte ``j*C`` (so its tail may hold bytes of the next range, or of
whatever follows its range in the buffer). A second gather writes each range's first ``C``
bytes over its output start, which mends every such tail: ``C`` is at most the smallest range,
so those head rows neither overlap one another nor reach past their own range. Neither step
depends on the order in which numpy copies rows. A few ranges, or ranges of fewer than 16 bytes,
are joined by ``bytearray.join`` over views of them instead (a C loop too, cheaper to set up).
"""

from __future__ import annotations

from typing import Optional

import numpy as np

#: the largest chunk (bytes) a range is copied in, and the smallest worth the chunked copy
_MAX_CHUNK = 4096
_MIN_CHUNK = 16
#: fewer ranges than this are joined by ``bytes.join``, whose set-up is cheaper
_MIN_RANGES = 64
_SEP = "\x00"
_VOIDS: dict[int, np.dtype] = {}  # width -> the void dtype of that many bytes


def window(buf, dtype) -> np.ndarray:
    """Item ``k`` of the result is the ``dtype`` item whose bytes start at ``buf[k]`` (``buf`` holds one
    item or more; the view is writable when ``buf`` is). Indexing it copies whole items."""
    dtype = np.dtype(dtype)
    return np.ndarray((len(buf) - dtype.itemsize + 1,), dtype, buffer=buf, strides=(1,))


def void(width: int) -> np.dtype:
    """The dtype of ``width`` raw bytes."""
    dtype = _VOIDS.get(width)
    if dtype is None:
        dtype = _VOIDS[width] = np.dtype((np.void, width))
    return dtype


class Windows:
    """:func:`window` views of one buffer, made once per dtype."""

    def __init__(self, buf) -> None:
        self.buf = memoryview(buf)
        self.size = len(self.buf)
        self._views: dict = {}

    def __call__(self, dtype) -> np.ndarray:
        view = self._views.get(dtype)
        if view is None:
            view = self._views[dtype] = window(self.buf, dtype)
        return view


def rows_at(src: Windows, starts: np.ndarray, width: int) -> np.ndarray:
    """The ``width`` bytes at each of ``starts`` (each range inside the buffer) as a new ``(n, width)`` array."""
    n = len(starts)
    if n == 0 or width == 0:
        return np.empty((n, width), np.uint8)
    return src(void(width))[starts].view(np.uint8).reshape(n, width)


def span_offsets(sizes: np.ndarray, gap: int = 0) -> np.ndarray:
    """Where each of ranges of ``sizes`` starts when they are laid one after another with ``gap``
    bytes after each but the last: ``n + 1`` int64 offsets, the last one the total."""
    n = len(sizes)
    offsets = np.zeros(n + 1, np.int64)
    np.cumsum(sizes, out=offsets[1:])
    if gap and n:
        offsets[1:] += np.arange(gap, gap * n + 1, gap)
        offsets[-1] -= gap
    return offsets


def gather_spans(src: Windows, starts: np.ndarray, sizes: np.ndarray, gap: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """The ranges ``buf[starts[i]:starts[i] + sizes[i]]`` (each inside the buffer) copied one after another
    into a new writable uint8 array, with ``gap`` bytes of unspecified value after each but the last;
    returns ``(bytes, offsets)``, offsets as :func:`span_offsets` gives them."""
    offsets = span_offsets(sizes, gap)
    n = len(sizes)
    smallest = int(sizes.min()) if n else 0
    if n < _MIN_RANGES or smallest < _MIN_CHUNK:
        return _joined(src.buf, starts, sizes, gap), offsets
    chunk = min(1 << (smallest.bit_length() - 1), _MAX_CHUNK)
    return _chunked(src, starts, offsets, chunk), offsets


def _joined(mv: memoryview, starts: np.ndarray, sizes: np.ndarray, gap: int) -> np.ndarray:
    """:func:`gather_spans` by ``bytearray.join`` over views of the ranges."""
    stops = (starts + sizes).tolist()
    out = bytearray(gap).join(map(mv.__getitem__, map(slice, starts.tolist(), stops)))
    return np.frombuffer(out, np.uint8) if out else np.empty(0, np.uint8)


def _chunked(src: Windows, starts: np.ndarray, offsets: np.ndarray, chunk: int) -> np.ndarray:
    """:func:`gather_spans` by chunks of ``chunk`` bytes, ``chunk`` at most the smallest range (see the
    module docstring)."""
    size = src.size
    total = int(offsets[-1])
    shift = chunk.bit_length() - 1
    first = (offsets + (chunk - 1)) >> shift  # the first chunk starting at or after each range's start
    counts = first[1:] - first[:-1]
    at = np.repeat(starts - offsets[:-1], counts)
    at += np.arange(0, int(first[-1]) << shift, chunk)
    limit = size - chunk
    late = None
    if int(at.max()) > limit:  # chunks that would read past the buffer: copied below, as far as it goes
        late = np.flatnonzero(at > limit)
        late_at = at[late].tolist()
        np.minimum(at, limit, out=at)
    source = src(void(chunk))
    heads = source[starts[1:]]  # read first: it brings each range's start into the cache for the chunks
    out = source[at].view(np.uint8)
    if late is not None:
        for j, a in zip(late.tolist(), late_at):
            k = max(0, min(chunk, size - a, total - (j << shift)))
            out[j << shift:(j << shift) + k] = src.buf[a:a + k]
    window(out, void(chunk))[offsets[1:-1]] = heads
    return out[:total]


def gather_strs(src: Windows, starts: np.ndarray, sizes: np.ndarray) -> Optional[list]:
    """``str(buf[a:b], 'utf-8')`` for each range of the buffer, decoded at once: the ranges are gathered with a
    NUL byte between them, decoded as one string and split at the NULs. None when that cannot
    give exactly the per-range strings (a range holds a NUL, or some range is not valid UTF-8);
    decode range by range then."""
    n = len(starts)
    if n == 0:
        return []
    data, offsets = gather_spans(src, starts, sizes, 1)
    data[offsets[1:-1] - 1] = 0
    try:
        parts = str(data, "utf-8").split(_SEP)
    except UnicodeDecodeError:
        return None
    return parts if len(parts) == n else None


def decode_each(decode, src: Windows, starts: np.ndarray, sizes) -> list:
    """``decode(view)`` of each range of the buffer, in order (a C loop builds the views)."""
    mv = src.buf
    stops = (starts + sizes).tolist()
    return list(map(decode, map(mv.__getitem__, map(slice, starts.tolist(), stops))))

