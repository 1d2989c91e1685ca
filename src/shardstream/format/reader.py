"""Reading MDS shards from memory maps.

A :class:`ShardReader` checks a shard's header against its index entry once, when
it is opened (sample count, monotonic in-range offsets, config), so that decoding a
sample afterwards needs no further checks beyond its own size header. Shards stay
mapped while the reader lives: no open/seek/read per sample.
"""

from __future__ import annotations

import json
import mmap
import os
import struct
from typing import Any, Callable, Iterator, Optional, Sequence, Union

import numpy as np

from ..errors import CorruptShardError, HashMismatchError, SampleIndexError, ShardNotFoundError
from .atomic import atomic_write
from .compression import decompress
from .fastdecode import make_sample_decoder
from .gather import Windows
from .hashing import digest
from .index import ShardInfo, shard_path
from .source import ShardRows

_PAIR = struct.Struct("<II")
_UNKNOWN = object()  # a lazily computed attribute not computed yet
_U32 = struct.Struct("<I")
Buffer = Union[bytes, bytearray, memoryview, mmap.mmap]


class ShardReader(ShardRows):
    """Random access to the samples of one uncompressed MDS shard held in ``buf``."""

    def __init__(self, info: ShardInfo, buf: Buffer, name: Optional[str] = None) -> None:
        self.info = info
        self.name = name or info.raw_data.basename
        self.buf = buf
        self.mv = memoryview(buf)
        self.samples = info.samples
        self._check_header()
        self.windows = Windows(self.mv)  # views for gathering many samples' bytes at once
        self.var_columns = sum(1 for size in info.column_sizes if size is None)
        self._stride: Any = _UNKNOWN
        self.column_names = info.column_names
        base = np.frombuffer(self.mv, np.uint8).ctypes.data if len(self.mv) else 0
        self.decode_at, self.get_unchecked = make_sample_decoder(info.column_names, info.encodings, info.column_sizes,
                                             self.mv, base, self._corrupt)
        self._base = base
        self._subsets: dict[tuple, tuple] = {}  # columns -> (decode_at, get_unchecked) of those columns

    def _corrupt(self, what: str) -> CorruptShardError:
        return CorruptShardError(
            f"shard {self.name!r}: {what}; the file is damaged or does not belong to this index. "
            "Delete it and write or download it again"
        )

    def _check_header(self) -> None:
        size = len(self.mv)
        expected = self.info.raw_data.bytes
        if size != expected:
            raise self._corrupt(f"it is {size} bytes but the index says {expected} (truncated?)")
        n = self.samples
        if size < 4 or _U32.unpack_from(self.mv, 0)[0] != n:
            found = _U32.unpack_from(self.mv, 0)[0] if size >= 4 else None
            raise self._corrupt(f"its header counts {found} samples but the index says {n}")
        table_end = 4 + 4 * (n + 1)
        if table_end > size:
            raise self._corrupt(f"its offset table ({table_end} bytes) runs past the end of the file ({size})")
        offsets = np.frombuffer(self.mv, "<u4", n + 1, 4).astype(np.int64)
        if offsets[0] < table_end or offsets[-1] != size or (n and np.any(np.diff(offsets) < 0)):
            raise self._corrupt("its sample offsets are out of range or not increasing")
        try:
            config = json.loads(bytes(self.mv[table_end:offsets[0]]))
        except (ValueError, UnicodeDecodeError, RecursionError):
            raise self._corrupt("its embedded config is not valid JSON") from None
        if not isinstance(config, dict) or (
            config.get("column_names") != list(self.info.column_names)
            or config.get("column_encodings") != list(self.info.column_encodings)
        ):
            raise self._corrupt("its columns differ from the index entry")
        self.offsets = offsets

    # -- access ---------------------------------------------------------------------
    def sample_bytes(self, i: int) -> memoryview:
        if not 0 <= i < self.samples:
            raise SampleIndexError(f"sample {i} is out of range for shard {self.name!r} ({self.samples} samples)")
        begin, end = _PAIR.unpack_from(self.mv, 4 + 4 * i)
        return self.mv[begin:end]

    def get(self, i: int) -> dict[str, Any]:
        """Sample ``i`` of this shard as a dict of column values."""
        if not 0 <= i < self.samples:
            raise SampleIndexError(f"sample {i} is out of range for shard {self.name!r} ({self.samples} samples)")
        begin, end = _PAIR.unpack_from(self.mv, 4 + 4 * i)
        return self.decode_at(begin, end)

    def iter_range(self, start: int = 0, stop: Optional[int] = None,
                   columns: Optional[Sequence[str]] = None) -> Iterator[dict[str, Any]]:
        """Samples ``start..stop-1`` in order (with only ``columns`` decoded, if given)."""
        stop = self.samples if stop is None else stop
        offs = self.offsets[start:stop + 1].tolist()
        return map(self.decoders(columns)[0], offs[:-1], offs[1:])

    def decoders(self, columns: Optional[Sequence[str]] = None) -> tuple[Callable, Callable]:
        """``(decode_at(begin, end), get_unchecked(i))`` that decode only ``columns`` (all if None)."""
        if columns is None:
            return self.decode_at, self.get_unchecked
        key = tuple(columns)
        pair = self._subsets.get(key)
        if pair is None:
            info = self.info
            pair = self._subsets[key] = make_sample_decoder(info.column_names, info.encodings, info.column_sizes,
                                                            self.mv, self._base, self._corrupt, frozenset(key))
        return pair

    def stride_rows(self) -> Optional[np.ndarray]:
        """The samples as the rows of a read-only ``(samples, stride)`` uint8 view, when every column has
        a fixed size and the samples lie one after another at that stride; else None."""
        if self._stride is _UNKNOWN:
            self._stride = None
            sizes = self.info.column_sizes
            n = self.samples
            if n and None not in sizes and sum(sizes):
                stride = sum(sizes)
                offsets = self.offsets
                if int(offsets[-1] - offsets[0]) == n * stride and not (np.diff(offsets) != stride).any():
                    table = np.ndarray((n, stride), np.uint8, buffer=self.mv, offset=int(offsets[0]))
                    table.flags.writeable = False
                    self._stride = table
        return self._stride

    def batch_rows(self, rows, columns: Optional[Sequence[str]] = None) -> dict[str, Any]:
        from .batch import decode_batch

        return decode_batch(self, rows, columns)

    def batch_range(self, lo: int, hi: int, columns: Optional[Sequence[str]] = None) -> dict[str, Any]:
        from .batch import decode_range

        return decode_range(self, lo, hi, columns)

    def kinds(self, columns: Optional[Sequence[str]] = None) -> list[tuple[str, str, Any]]:
        from .batch import shard_kinds

        return shard_kinds(self.info, columns)

    def __len__(self) -> int:
        return self.samples


def map_file(path: str) -> Buffer:
    """The file at ``path`` mapped read-only (an empty file is empty bytes; a directory is refused)."""
    if os.path.isdir(path):
        raise CorruptShardError(f"{path!r} is a directory, not a shard file; remove it and restore the shard")
    with open(path, "rb") as f:
        if os.fstat(f.fileno()).st_size == 0:
            return b""
        return mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)


def check_digests(info_hashes: dict, data: Buffer, name: str, algos) -> None:
    for algo in algos:
        want = info_hashes.get(algo)
        if want is None:
            raise HashMismatchError(
                f"shard {name!r}: validate_hash={algo!r} but the index records no {algo} digest "
                f"(it has {sorted(info_hashes) or 'none'}); choose one of those or rewrite with hashes=[{algo!r}]"
            )
        got = digest(algo, data)
        if got != want:
            raise HashMismatchError(
                f"shard {name!r}: {algo} digest is {got}, the index says {want}; the file is damaged, "
                "delete it and write or download it again"
            )


def open_shard(
    dirname: str,
    info: ShardInfo,
    validate_hash: Optional[str] = None,
    keep_zip: bool = True,
) -> ShardReader:
    """Open a shard of the dataset in ``dirname``; decompress it first if only the
    compressed file is present (to a file beside it when the directory is writable,
    else in memory)."""
    algos = [validate_hash] if validate_hash else []
    raw_path = shard_path(dirname, info.raw_data.basename)
    if os.path.exists(raw_path) or info.zip_data is None:
        try:
            buf = map_file(raw_path)
        except FileNotFoundError:
            raise ShardNotFoundError(
                f"shard {info.raw_data.basename!r} listed in the index is missing from {dirname!r}"
            ) from None
        if algos:
            check_digests(info.raw_data.hashes, buf, info.raw_data.basename, algos)
        return ShardReader(info, buf)
    zip_path = shard_path(dirname, info.zip_data.basename)
    try:
        zbuf = map_file(zip_path)
    except FileNotFoundError:
        raise ShardNotFoundError(
            f"shard {info.zip_data.basename!r} listed in the index is missing from {dirname!r}"
        ) from None
    if len(zbuf) != info.zip_data.bytes:
        raise CorruptShardError(
            f"shard {info.zip_data.basename!r} is {len(zbuf)} bytes but the index says "
            f"{info.zip_data.bytes} (truncated?); delete it and write or download it again"
        )
    check_digests(info.zip_data.hashes, zbuf, info.zip_data.basename, algos)
    raw = decompress(info.compression, zbuf, info.raw_data.bytes, info.zip_data.basename)
    if isinstance(zbuf, mmap.mmap):
        zbuf.close()
    reader = ShardReader(info, raw)  # validates before anything is written to disk
    try:
        atomic_write(raw_path, raw, fsync=False)
    except OSError:
        return reader  # read-only dataset directory: serve from memory
    if not keep_zip:
        try:
            os.unlink(zip_path)
        except OSError:
            pass
    return ShardReader(info, map_file(raw_path))
