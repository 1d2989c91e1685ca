"""Checking a dataset: every shard present, intact, hashed as recorded, decodable."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Callable, Optional

from ..errors import CorruptShardError, HashMismatchError, ShardNotFoundError, ShardstreamError
from .compression import decompress
from .hashing import digest
from .index import ShardInfo, read_index, shard_path
from .reader import ShardReader, map_file


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


def verify_shard(dirname: str, info: ShardInfo, decode_samples: bool = True) -> tuple[int, int]:
    """Raise a :class:`ShardstreamError` describing the first problem; return (digests checked, samples decoded)."""
    stored = info.stored
    path = shard_path(dirname, stored.basename)
    raw_path = shard_path(dirname, info.raw_data.basename)
    if not os.path.exists(path) and info.zip_data is not None and os.path.exists(raw_path):
        path, stored = raw_path, info.raw_data  # only the decompressed copy is present
    if not os.path.exists(path):
        raise ShardNotFoundError(f"missing file {stored.basename!r}")
    buf = map_file(path)
    if len(buf) != stored.bytes:
        raise CorruptShardError(f"{stored.basename!r} is {len(buf)} bytes, the index says {stored.bytes}")
    checked = _check_digests(stored.basename, buf, stored.hashes)
    raw = buf
    if stored is info.zip_data:
        raw = decompress(info.compression, buf, info.raw_data.bytes, stored.basename)
        checked += _check_digests(f"{info.raw_data.basename} (decompressed)", raw, info.raw_data.hashes)
    reader = ShardReader(info, raw)
    return checked, _decode_all(reader) if decode_samples else 0


def verify_shards(dirname: str, shards: list[ShardInfo], decode_samples: bool = True,
                  progress: Optional[Callable[[int, int], None]] = None,
                  fetch: Optional[Callable[[ShardInfo], None]] = None,
                  release: Optional[Callable[[ShardInfo], None]] = None) -> VerifyReport:
    """Check ``shards`` in ``dirname``; problems are collected, not raised. ``fetch(info)`` is called
    before a shard is checked (to bring it into ``dirname``) and ``release(info)`` after."""
    report = VerifyReport(shards=len(shards))
    for i, info in enumerate(shards):
        report.samples += info.samples
        report.bytes += info.stored.bytes
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
        if progress is not None:
            progress(i + 1, len(shards))
    return report


def verify_dataset(dirname: str, decode_samples: bool = True,
                   progress: Optional[Callable[[int, int], None]] = None) -> VerifyReport:
    """Check every shard of the dataset in ``dirname``; problems are collected, not raised
    (a missing or unreadable index is raised)."""
    return verify_shards(dirname, read_index(dirname), decode_samples, progress)
