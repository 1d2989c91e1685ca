"""Checking a dataset: every shard present, intact, hashed as recorded, decodable."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Callable, Optional

from ..errors import ShardstreamError
from .compression import decompress
from .hashing import digest
from .index import ShardInfo, read_index, shard_path
from .reader import ShardReader, _map


@dataclass
class ShardProblem:
    shard: int
    basename: str
    error: str


@dataclass
class VerifyReport:
    shards: int = 0
    samples: int = 0
    bytes: int = 0
    hashes_checked: int = 0
    problems: list[ShardProblem] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def verify_shard(dirname: str, info: ShardInfo, decode_samples: bool = True) -> int:
    """Raise a :class:`ShardstreamError` describing the first problem; return digests checked."""
    checked = 0
    stored = info.stored
    path = shard_path(dirname, stored.basename)
    raw_path = shard_path(dirname, info.raw_data.basename)
    if not os.path.exists(path) and info.zip_data is not None and os.path.exists(raw_path):
        path, stored = raw_path, info.raw_data  # only the decompressed copy is present
    from ..errors import CorruptShardError, HashMismatchError, ShardNotFoundError

    if not os.path.exists(path):
        raise ShardNotFoundError(f"missing file {stored.basename!r}")
    buf = _map(path)
    if len(buf) != stored.bytes:
        raise CorruptShardError(f"{stored.basename!r} is {len(buf)} bytes, the index says {stored.bytes}")
    for algo, want in stored.hashes.items():
        got = digest(algo, buf)
        checked += 1
        if got != want:
            raise HashMismatchError(f"{stored.basename!r}: {algo} digest {got} != recorded {want}")
    raw = buf
    if stored is info.zip_data:
        raw = decompress(info.compression, buf, info.raw_data.bytes, stored.basename)
        for algo, want in info.raw_data.hashes.items():
            got = digest(algo, raw)
            checked += 1
            if got != want:
                raise HashMismatchError(f"{info.raw_data.basename!r} (decompressed): {algo} digest {got} != {want}")
    reader = ShardReader(info, raw)
    if decode_samples:
        for _ in reader.iter_range():
            pass
    return checked


def verify_dataset(dirname: str, decode_samples: bool = True,
                   progress: Optional[Callable[[int, int], None]] = None) -> VerifyReport:
    """Check every shard of the dataset in ``dirname``; problems are collected, not raised
    (a missing or unreadable index is raised)."""
    shards = read_index(dirname)
    report = VerifyReport(shards=len(shards))
    for i, info in enumerate(shards):
        report.samples += info.samples
        report.bytes += info.stored.bytes
        try:
            report.hashes_checked += verify_shard(dirname, info, decode_samples)
        except (ShardstreamError, OSError) as exc:
            report.problems.append(ShardProblem(i, info.stored.basename, f"{type(exc).__name__}: {exc}"))
        if progress is not None:
            progress(i + 1, len(shards))
    return report
