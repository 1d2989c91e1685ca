"""Digests of cached shards: which one a download is checked with, and checking a shard that is
already in the cache against ``validate_hash`` once per process and file, not per sample or pin.

A file is known by its identity (device, inode, size, modification time), so a shard replaced
by a new download is checked again, and one this process checked before is not.
"""

from __future__ import annotations

import os
from typing import Optional

from ..errors import HashMismatchError
from ..format.hashing import digest_file
from ..format.index import FileInfo

FAST_HASHES = ("xxh3_64", "xxh64", "xxh128", "xxh3_128", "xxh32")


def check_hashes(hashes: dict, validate_hash: Optional[str]) -> dict:
    """The digest to verify a download with: ``validate_hash`` if set, else the fastest one recorded."""
    if validate_hash:
        if validate_hash not in hashes:
            raise HashMismatchError(
                f"validate_hash={validate_hash!r} but the index records no {validate_hash} digest (it has "
                f"{sorted(hashes) or 'none'}); choose one of those or rewrite with hashes=[{validate_hash!r}]"
            )
        return {validate_hash: hashes[validate_hash]}
    for algo in FAST_HASHES:
        if algo in hashes:
            return {algo: hashes[algo]}
    return {}


def identity(path: str) -> Optional[tuple]:
    """What tells one file at ``path`` from a later one there; None if there is none."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns


class CheckedFiles:
    """The files this process found intact under ``algo`` (None: nothing is checked)."""

    def __init__(self, algo: Optional[str]) -> None:
        self.algo = algo
        self._intact: dict[str, tuple] = {}

    def mismatch(self, path: str, info: FileInfo) -> Optional[tuple[tuple, str, str]]:
        """``(identity, digest found, digest recorded)`` if the file at ``path`` does not match
        ``info``'s digest, else None (also when it was found intact before, or has gone)."""
        if not self.algo:
            return None
        ident = identity(path)
        if ident is None or self._intact.get(path) == ident:
            return None
        want = check_hashes(info.hashes, self.algo)[self.algo]
        got = digest_file(self.algo, path)
        if got != want:
            return ident, got, want
        if identity(path) == ident:  # the digest is of this very file
            self._intact[path] = ident
        return None
