"""Checking a dataset: every shard present, intact, hashed as recorded, decodable (MDS shards, and
mosaicml-streaming's JSON, CSV, TSV and XSV shards with their ``.meta`` files)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Callable, Optional, Union

from ..errors import CorruptShardError, HashMismatchError, InvalidArgumentError, ShardNotFoundError, ShardstreamError
from ..progress import Progress
from ..units import format_bytes
from .compression import decompress
from .hashing import digest
from .index import FileInfo, ShardInfo, read_index, shard_path
from .reader import ShardReader, map_file
from .textformat import TextRows
from .textshards import TextShardInfo

# a bar (True), none (False), on a terminal only (None), or a callable(shards done, shards)
ProgressArg = Union[bool, None, Callable[[int, int], None]]


@dataclass
class ShardProblem:
    shard: int
    basename: str
    error: str


@dataclass
class VerifyReport:
    """What :func:`verify_dataset` found. ``verified`` is true only when nothing is damaged and every
    shard was checked against a digest; ``unhashed_shards`` counts shards whose index records no
    digest, so that damage to their values (a flipped byte in an int) cannot be detected."""

    shards: int = 0
    samples: int = 0
    bytes: int = 0
    hashes_checked: int = 0
    unhashed_shards: int = 0
    samples_decoded: int = 0
    problems: list[ShardProblem] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """No damage found (which, for shards without digests, does not mean there is none)."""
        return not self.problems

    @property
    def verified(self) -> bool:
        """No damage found, and every shard's bytes checked against a recorded digest."""
        return self.ok and not self.unhashed_shards


def _check_digests(name: str, data, hashes: dict) -> int:
    for algo, want in hashes.items():
        got = digest(algo, data)
        if got != want:
            raise HashMismatchError(f"{name!r}: {algo} digest {got} != recorded {want}")
    return len(hashes)


def _decode_all(reader: ShardReader) -> int:
    """Decode every sample; raise one :class:`CorruptShardError` naming the first bad one and the count.

    Columns whose encoding can run code when read (``pkl``) are never decoded here, only their sizes
    checked: verifying a dataset must be safe whoever wrote it."""
    info = reader.info
    safe = [name for name, enc in zip(info.column_names, info.encodings) if enc.safe]
    decode_at = reader.decoders(None if len(safe) == len(info.column_names) else safe)[0]
    offsets = reader.offsets.tolist()
    bad, first = 0, None
    for i in range(reader.samples):
        try:
            decode_at(offsets[i], offsets[i + 1])
        except ShardstreamError as exc:
            bad += 1
            first = first or f"sample {i}: {exc}"
    if bad:
        raise CorruptShardError(f"{first} ({bad} of {reader.samples} samples fail to decode)")
    return reader.samples


def _file_bytes(dirname: str, raw: FileInfo, packed: Optional[FileInfo], compression: Optional[str]):
    """The decompressed bytes of one file of a shard (from its compressed copy when present, else from the
    decompressed one) after checking its size and recorded digests; and the number of digests checked."""
    stored = packed if packed is not None else raw
    path = shard_path(dirname, stored.basename)
    raw_path = shard_path(dirname, raw.basename)
    if not os.path.exists(path) and packed is not None and os.path.exists(raw_path):
        path, stored = raw_path, raw  # only the decompressed copy is present
    if not os.path.exists(path):
        raise ShardNotFoundError(f"missing file {stored.basename!r}")
    buf = map_file(path)
    if len(buf) != stored.bytes:
        raise CorruptShardError(f"{stored.basename!r} is {len(buf)} bytes, the index says {stored.bytes}")
    checked = _check_digests(stored.basename, buf, stored.hashes)
    if stored is packed:
        buf = decompress(compression, buf, raw.bytes, stored.basename)
        checked += _check_digests(f"{raw.basename} (decompressed)", buf, raw.hashes)
    return buf, checked


def _decode_text(rows: TextRows) -> int:
    """Parse every sample of a JSON/CSV/TSV/XSV shard; one :class:`CorruptShardError` for the first bad one."""
    bad, first = 0, None
    for i in range(rows.samples):
        try:
            rows.get_unchecked(i)
        except (ShardstreamError, ValueError) as exc:  # a broken line: bad JSON, UTF-8 or number
            bad += 1
            first = first or f"sample {i}: {exc}"
    if bad:
        raise CorruptShardError(f"{first} ({bad} of {rows.samples} samples fail to decode)")
    return rows.samples


def verify_shard(dirname: str, info: ShardInfo, decode_samples: bool = True) -> tuple[int, int]:
    """Raise a :class:`ShardstreamError` describing the first problem; return (digests checked, samples decoded).

    A JSON, CSV, TSV or XSV shard's ``.meta`` file is checked as its data file is, and must hold the
    sample count and offsets the data file needs."""
    raw, checked = _file_bytes(dirname, info.raw_data, info.zip_data, info.compression)
    if isinstance(info, TextShardInfo):
        meta, more = _file_bytes(dirname, info.raw_meta, info.zip_meta, info.compression)
        rows = TextRows(info, raw, meta)  # checks the meta file's count and offsets
        return checked + more, _decode_text(rows) if decode_samples else 0
    reader = ShardReader(info, raw)
    return checked, _decode_all(reader) if decode_samples else 0


def verify_shards(dirname: str, shards: list[ShardInfo], decode_samples: bool = True,
                  progress: ProgressArg = None,
                  fetch: Optional[Callable[[ShardInfo], None]] = None,
                  release: Optional[Callable[[ShardInfo], None]] = None) -> VerifyReport:
    """Check ``shards`` in ``dirname``; problems are collected, not raised. ``fetch(info)`` is called
    before a shard is checked (to bring it into ``dirname``) and ``release(info)`` after. ``progress``: a
    bar (True), none (False), on a terminal only (None), or a callable ``(shards done, shards)``; the
    summary line is logged in every case (see :mod:`shardstream.progress`)."""
    report = VerifyReport(shards=len(shards))
    shown = _progress_of(progress, len(shards))
    try:
        for i, info in enumerate(shards):
            _verify_one(dirname, i, info, decode_samples, report, fetch, release)
            shown.update(1)
            if callable(progress):
                progress(i + 1, len(shards))
    except BaseException:
        shown.abandon()
        raise
    damaged = f"{len(report.problems)} damaged" if report.problems else "no damage found"
    shown.finish(f"verify: {report.shards} shards, {report.samples:,} samples, {format_bytes(report.bytes)} in "
                 f"{shown.elapsed():.1f}s ({shown.rate()}, {format_bytes(report.bytes / shown.elapsed())}/s); "
                 f"{damaged}")
    return report


def _progress_of(progress: ProgressArg, shards: int) -> Progress:
    if progress is not None and not isinstance(progress, bool) and not callable(progress):
        raise InvalidArgumentError(f"progress={progress!r} should be True (a progress bar), False (none), None (on a "
                                   "terminal only) or a callable(shards done, shards)")
    return Progress("verify", shards, "shards", show=False if callable(progress) else progress)


def _verify_one(dirname: str, i: int, info: ShardInfo, decode_samples: bool, report: VerifyReport,
                fetch: Optional[Callable[[ShardInfo], None]], release: Optional[Callable[[ShardInfo], None]]) -> None:
    """Check shard ``i`` into ``report``."""
    report.samples += info.samples
    report.bytes += info.stored.bytes + (info.stored_meta.bytes if isinstance(info, TextShardInfo) else 0)
    report.unhashed_shards += not (info.stored.hashes or info.raw_data.hashes)
    try:
        if fetch is not None:
            fetch(info)
        checked, decoded = verify_shard(dirname, info, decode_samples)
        report.hashes_checked += checked
        report.samples_decoded += decoded
    except (ShardstreamError, OSError) as exc:
        report.problems.append(ShardProblem(i, info.stored.basename, f"{type(exc).__name__}: {exc}"))
    finally:
        if release is not None:
            release(info)


def verify_dataset(dirname: str, decode_samples: bool = True, progress: ProgressArg = None) -> VerifyReport:
    """Check every shard of the dataset in ``dirname``; problems are collected, not raised
    (a missing or unreadable index is raised). ``progress``: as :func:`verify_shards`'s."""
    return verify_shards(dirname, read_index(dirname), decode_samples, progress)
