"""Writing MDS shards to a local directory.

Shard layout (little-endian, as in mosaicml-streaming)::

    uint32 num_samples
    uint32 offsets[num_samples + 1]   absolute byte offsets of each sample, then the end
    config JSON                       the shard's column/compression settings
    samples                           each: uint32 sizes of variable-size columns, then
                                      the column payloads, columns in sorted-name order

Shards are named ``shard.NNNNN.mds`` (plus ``.<compression>``). Every file is
written under a hidden temp name and renamed into place; ``index.json`` is written
last, atomically, so a writer killed at any point never leaves an index that claims
shards which are not there.
"""

from __future__ import annotations

import errno
import json
import os
import struct
import threading
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import Any, Callable, Optional, Sequence

import numpy as np

from ..errors import EncodeError, InvalidArgumentError, OutputWriteError, WriterError
from ..units import parse_bytes
from .atomic import TMP_PREFIX, atomic_write
from .compression import compress, compression_extension, parse_compression
from .encodings import Int, Str, get_encoding
from .hashing import check_hash, digest
from .index import INDEX_BASENAME, FileInfo, ShardInfo, write_index_atomic
from .outdir import clear_local

MAX_SHARD_BYTES = (1 << 32) - 1  # offsets are uint32
DEFAULT_SIZE_LIMIT = 1 << 26
DEFAULT_HASHES = ("xxh3_64",)  # MDSWriter's default: cheap, and makes damage detectable


class ShardWriter:
    """Write samples (dicts) into MDS shards in a local directory.

    ``on_file(path, basename)`` is called after each file (shards, then the index)
    is complete in place; remote writers use it to upload.
    """

    format = "mds"

    def __init__(
        self,
        *,
        columns: dict[str, str],
        local: str,
        compression: Optional[str] = None,
        hashes: Optional[Sequence[str]] = None,
        size_limit: Optional[int | str] = DEFAULT_SIZE_LIMIT,
        exist_ok: bool = False,
        max_workers: Optional[int] = None,
        on_file: Optional[Callable[[str, str], None]] = None,
    ) -> None:
        if not isinstance(columns, dict) or not columns:
            raise InvalidArgumentError(f"columns must be a non-empty dict of name -> encoding, got {columns!r}")
        self._set_file_settings(compression, hashes)
        limit = parse_bytes(size_limit, "size_limit") if size_limit else None
        if limit is not None and not 0 < limit <= MAX_SHARD_BYTES:
            raise InvalidArgumentError(
                f"`size_limit` must be less than 2**32 (and at least 1 byte), got size_limit={size_limit!r}: "
                f"shard offsets are uint32; the default is {DEFAULT_SIZE_LIMIT} (64 MiB)"
            )
        self.size_limit = limit
        self.column_names = sorted(columns)
        self.column_encodings = [columns[n] for n in self.column_names]
        self._coders = [get_encoding(e) for e in self.column_encodings]
        for name, enc in zip(self.column_names, self.column_encodings):
            if not isinstance(name, str):
                raise InvalidArgumentError(f"column names must be strings, got {name!r}")
        self.column_sizes = [c.size for c in self._coders]
        self._cols = list(zip(self.column_names, self._coders, self.column_sizes))
        self._n_var = sum(1 for s in self.column_sizes if s is None)
        self._head = struct.Struct(f"<{self._n_var}I")
        self._fast_encode = make_sample_encoder(self._cols, self.encode_sample)
        self.config_data = json.dumps(self._config(), sort_keys=True).encode("utf-8")
        self._extra_per_shard = 8 + len(self.config_data)

        self._start_output(local, exist_ok, max_workers, on_file)
        self.shards: list[ShardInfo] = []
        self._lock = threading.Lock()
        self._closed = False
        self._reset()

    # -- set-up ---------------------------------------------------------------------
    def _config(self) -> dict[str, Any]:
        return {
            "version": 2,
            "format": self.format,
            "compression": self.compression,
            "hashes": self.hashes,
            "size_limit": self.size_limit,
            "column_names": self.column_names,
            "column_encodings": self.column_encodings,
            "column_sizes": self.column_sizes,
        }

    def _set_file_settings(self, compression: Optional[str], hashes: Optional[Sequence[str]]) -> None:
        """``compression`` and ``hashes`` of every shard file, checked."""
        self.compression = compression or None
        if self.compression:
            parse_compression(self.compression)
        self.hashes = list(hashes or [])
        if self.hashes != sorted(set(self.hashes)):
            raise InvalidArgumentError(f"hashes={self.hashes} must be unique and sorted, e.g. {sorted(set(self.hashes))}")
        for algo in self.hashes:
            check_hash(algo)

    def _start_output(self, local: str, exist_ok: bool, max_workers: Optional[int],
                      on_file: Optional[Callable[[str, str], None]]) -> None:
        """The output directory (cleared as ``exist_ok`` says) and the threads that store shards."""
        self.local = os.path.abspath(os.path.expanduser(local))
        self._prepare_dir(exist_ok)
        self._on_file = on_file
        self._pool = ThreadPoolExecutor(max_workers=max_workers or 2, thread_name_prefix="shardstream-writer")
        self._pending: list[Future] = []
        self._max_pending = (max_workers or 2) + 1

    def _prepare_dir(self, exist_ok: bool) -> None:
        clear_local(self.local, exist_ok)
        os.makedirs(self.local, exist_ok=True)

    def _reset(self) -> None:
        self._buf = bytearray()
        self._sizes: list[int] = []
        self._shard_bytes = self._extra_per_shard

    # -- writing --------------------------------------------------------------------
    def encode_sample(self, sample: dict[str, Any]) -> bytes:
        """Encode one sample dict to its MDS bytes (size header + payloads)."""
        sizes = []
        parts = [b""]
        for name, coder, fixed in self._cols:
            try:
                value = sample[name]
            except KeyError:
                raise EncodeError(f"sample has no column {name!r}; expected columns {self.column_names}") from None
            except TypeError:
                raise EncodeError(f"a sample must be a dict of column -> value, got {type(sample).__name__}") from None
            try:
                data = value if type(value) is bytes else coder.encode(value)
            except EncodeError as exc:
                raise EncodeError(f"column {name!r}: {exc}") from None
            if fixed is None:
                sizes.append(len(data))
            elif len(data) != fixed:
                raise EncodeError(
                    f"column {name!r} ({coder.name}) must encode to {fixed} bytes, got {len(data)}; "
                    "pre-encoded bytes must match the column's fixed size"
                )
            parts.append(data)
        parts[0] = self._head.pack(*sizes)
        return b"".join(parts)

    def write(self, sample: dict[str, Any]) -> None:
        """Add one sample; may complete a shard."""
        if self._closed:
            raise WriterError("this writer is finished; create a new MDSWriter to write more")
        data = self._fast_encode(sample)
        need = len(data) + 4
        if self._extra_per_shard + need > MAX_SHARD_BYTES:
            raise EncodeError(
                f"a sample of {len(data)} bytes cannot fit in one shard (offsets are uint32, max 4 GiB); "
                "split it across samples"
            )
        if self._sizes and (
            (self.size_limit is not None and self._shard_bytes + need > self.size_limit)
            or self._shard_bytes + need > MAX_SHARD_BYTES
        ):
            self.flush_shard()
        self._buf += data
        self._sizes.append(len(data))
        self._shard_bytes += need

    def write_encoded(self, body, sizes: np.ndarray) -> None:
        """Add samples already encoded (as :meth:`encode_sample` would): ``body`` holds them back to back,
        ``sizes`` their lengths. Shards are cut exactly where writing them one by one would cut them."""
        if self._closed:
            raise WriterError("this writer is finished; create a new MDSWriter to write more")
        sizes = np.asarray(sizes, dtype=np.int64)
        big = np.flatnonzero(sizes + 4 + self._extra_per_shard > MAX_SHARD_BYTES)
        if big.size:
            raise EncodeError(f"a sample of {int(sizes[big[0]])} bytes cannot fit in one shard (offsets are uint32, "
                              "max 4 GiB); split it across samples")
        limit = min(self.size_limit or MAX_SHARD_BYTES, MAX_SHARD_BYTES)
        need = np.cumsum(sizes + 4)  # bytes the samples up to each one add to a shard
        i, pos, n = 0, 0, len(sizes)
        view = memoryview(body)
        while i < n:
            before = int(need[i - 1]) if i else 0
            j = int(np.searchsorted(need, limit - self._shard_bytes + before, side="right"))
            if j <= i:
                if self._sizes:
                    self.flush_shard()
                    continue
                j = i + 1  # a sample larger than size_limit gets a shard of its own
            end = pos + int(need[j - 1] - before) - 4 * (j - i)
            self._buf += view[pos:end]
            self._sizes.extend(sizes[i:j].tolist())
            self._shard_bytes += int(need[j - 1]) - before
            i, pos = j, end
            if i < n:
                self.flush_shard()

    def flush_shard(self) -> None:
        """Complete the current shard (no-op when it holds no samples)."""
        self._check_jobs()
        if not self._sizes:
            return
        n = len(self._sizes)
        offsets = np.empty(n + 1, np.int64)
        offsets[0] = 0
        np.cumsum(self._sizes, out=offsets[1:])
        offsets += 4 + 4 * (n + 1) + len(self.config_data)
        header = struct.pack("<I", n) + offsets.astype("<u4").tobytes() + self.config_data
        body = self._buf
        index = len(self.shards)
        self.shards.append(None)  # placeholder, filled in order by the worker
        if len(self._pending) >= self._max_pending:  # bound the memory held by shards in flight
            wait(self._pending[:len(self._pending) - self._max_pending + 1])
            self._check_jobs()
        self._pending.append(self._pool.submit(self._store_shard, index, n, header, body))
        self._reset()

    def _store_shard(self, index: int, n: int, header: bytes, body: bytearray) -> None:
        raw = header + body
        del body
        raw_info, zip_info = store_file(self.local, raw, f"shard.{index:05d}.{self.format}", self.hashes,
                                        self.compression, self._on_file)
        info = ShardInfo(tuple(self.column_encodings), tuple(self.column_names), tuple(self.column_sizes),
                         self.compression, tuple(self.hashes), raw_info, n, self.size_limit, zip_info)
        with self._lock:
            self.shards[index] = info

    def _check_jobs(self, all_jobs: bool = False) -> None:
        """Collect finished shard jobs (all of them when ``all_jobs``); on the first failure,
        abort (no index is written) and raise it as a :class:`WriterError`."""
        if all_jobs:
            done, self._pending = self._pending, []
        else:
            done = [f for f in self._pending if f.done()]
            self._pending = [f for f in self._pending if not f.done()]
        first = next((f.exception() for f in done if f.exception() is not None), None)
        if first is not None:
            self._abort()
            if isinstance(first, WriterError):
                raise first
            raise WriterError(f"writing a shard failed: {type(first).__name__}: {first}") from first

    def finish(self) -> None:
        """Flush the last shard, wait for all files, then write ``index.json``."""
        if self._closed:
            return
        self.flush_shard()
        self._check_jobs(all_jobs=True)
        self._pool.shutdown(wait=True)
        self._closed = True
        try:
            path = write_index_atomic(self.local, self.shards)
        except OSError as exc:
            self._abort()
            raise output_write_error(os.path.join(self.local, INDEX_BASENAME), exc) from exc
        if self._on_file is not None:
            self._on_file(path, INDEX_BASENAME)

    def _abort(self) -> None:
        """Stop without writing an index; remove temp files. Completed shards stay on
        disk but nothing claims them, so the directory is not a readable dataset."""
        self._closed = True
        self._pool.shutdown(wait=True, cancel_futures=True)
        try:
            names = os.listdir(self.local)
        except FileNotFoundError:  # a staging directory already removed
            names = []
        for name in names:
            if name.startswith(TMP_PREFIX):
                try:
                    os.unlink(os.path.join(self.local, name))
                except OSError:
                    pass

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.finish()
        else:
            for fut in self._pending:
                fut.cancel()
            self._pending = []
            self._abort()


_FULL = {errno.ENOSPC, errno.EFBIG, getattr(errno, "EDQUOT", errno.ENOSPC)}
_DENIED = {errno.EACCES, errno.EPERM, errno.EROFS}


def output_write_error(path: str, exc: OSError) -> OutputWriteError:
    """``exc``, raised writing ``path``, as an :class:`OutputWriteError` that says what to do."""
    if exc.errno in _FULL:
        fix = "free space on that disk (or raise the file size limit), or write to another out"
    elif exc.errno in _DENIED:
        fix = "make the directory writable, or write to another out"
    else:
        fix = "check the output directory, or write to another out"
    err = OutputWriteError(f"writing {path!r} failed: {exc.strerror or exc}; {fix}. No index.json was written, "
                           "so the partial output is not taken for a dataset")
    err.errno = exc.errno
    return err


def make_sample_encoder(cols: list, slow: Callable[[dict], bytes]) -> Callable[[dict], bytes]:
    """A per-schema ``encode(sample) -> bytes`` for the common case: plain ``int``/``str``
    values inline, other values through their encoding. Anything unusual (a missing
    column, a wrong type, an overflow, a wrong fixed size) is handed to ``slow``, the
    general encoder, which produces the same bytes or the precise :class:`EncodeError`."""
    env: dict[str, Any] = {"slow": slow, "_q": struct.Struct("<q").pack}
    n_var = sum(1 for _, _, size in cols if size is None)
    env["_head"] = struct.Struct(f"<{n_var}I").pack
    lines = ["def encode(sample):", "    try:"]
    var_lens, parts, checks = [], [], []
    for k, (name, coder, size) in enumerate(cols):
        env[f"E{k}"] = coder.encode
        lines.append(f"        v{k} = sample[{name!r}]")
        general = f"(v{k} if type(v{k}) is bytes else E{k}(v{k}))"
        if type(coder) is Int:
            expr = f"_q(v{k}) if type(v{k}) is int else {general}"
        elif type(coder) is Str:
            expr = f"v{k}.encode('utf-8') if type(v{k}) is str else {general}"
        else:
            expr = general
        lines.append(f"        d{k} = {expr}")
        if size is None:
            var_lens.append(f"len(d{k})")
        else:
            checks.append(f"len(d{k}) != {size}")
        parts.append(f"d{k}")
    if checks:
        lines.append(f"        if {' or '.join(checks)}:")
        lines.append("            return slow(sample)")
    head = f"_head({', '.join(var_lens)})"
    lines.append(f"        return b''.join(({head}, {', '.join(parts)}))")
    lines.append("    except Exception:")
    lines.append("        return slow(sample)")
    exec(compile("\n".join(lines), "<shardstream encoder>", "exec"), env)
    return env["encode"]


def store_file(local: str, raw: bytes, raw_name: str, hashes: Sequence[str], compression: Optional[str],
               on_file: Optional[Callable[[str, str], None]] = None) -> tuple[FileInfo, Optional[FileInfo]]:
    """Write one file of a shard into ``local``: ``raw`` as ``raw_name``, or compressed as
    ``raw_name.<ext>`` with ``compression``; its description (and the raw one) with ``hashes``'
    digests. ``on_file(path, basename)`` is called once the file is in place (an upload)."""
    raw_info = FileInfo(raw_name, len(raw), {a: digest(a, raw) for a in hashes})
    zip_info, data = None, raw
    if compression:
        data = compress(compression, raw)
        zip_name = f"{raw_name}.{compression_extension(compression)}"
        zip_info = FileInfo(zip_name, len(data), {a: digest(a, data) for a in hashes})
    stored = zip_info or raw_info
    path = os.path.join(local, stored.basename)
    try:
        atomic_write(path, data, fsync=False)
    except OSError as exc:
        raise output_write_error(path, exc) from exc
    if on_file is not None:
        on_file(path, stored.basename)
    return raw_info, zip_info
