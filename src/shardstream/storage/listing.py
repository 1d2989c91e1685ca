"""Finding the data files of a dataset given as a file, a directory, a glob or a list of them,
local or remote, and reading parts of them.

One listing request per directory or glob (``fs.glob`` / ``fs.find`` with details) gives every
file's name, size and version (ETag, generation or modification time), which is all a cached
description of the file is keyed by: a dataset whose files were described before opens with
these requests alone. Files are named relative to the deepest directory holding them all (the
*root*), sorted within each glob or directory; a list keeps its order.
"""

from __future__ import annotations

import io
import os
import posixpath
from dataclasses import dataclass
from functools import partial
from typing import Any, Callable, Optional, Sequence

from ..errors import InvalidArgumentError, NoFilesError, ShardNotFoundError
from ..format.decompress import open_decompressed
from ..format.files import SourceFile, codec_of, local_version, plain_name
from .attempts import attempts, bounded, short_check
from .fs import filesystem, is_remote, local_path
from .options import DEFAULT_DOWNLOAD_RETRY, DEFAULT_DOWNLOAD_TIMEOUT
from .versions import object_signature

GLOB_CHARS = "*?["
_SKIPPED = (".", "_")  # hidden files and markers such as _SUCCESS are not data
STREAM_BLOCK = 16 << 20  # bytes of each ranged read when a remote file is read as a stream (compressed files)


def has_glob(path: str) -> bool:
    return any(c in path for c in GLOB_CHARS)


@dataclass
class Listing:
    """The data files found: the ``root`` URL they are relative to, the filesystem and its path of
    the root, and the files in dataset order."""

    root: str
    fs: Any
    root_path: str
    files: list[SourceFile]
    local: bool


def entries_of(data: Any) -> list[str]:
    """The user's ``remote=`` / ``local=`` as a list of strings."""
    if isinstance(data, (str, os.PathLike)):
        return [os.fspath(data)]
    if isinstance(data, (list, tuple)) and data and all(isinstance(d, (str, os.PathLike)) for d in data):
        return [os.fspath(d) for d in data]
    raise InvalidArgumentError(f"{data!r} must be a path or URL (a file, directory or glob) or a list of them")


def list_files(data: Any, suffixes: Sequence[str], storage_options: Optional[dict] = None,
               split: Optional[str] = None, retry: int = DEFAULT_DOWNLOAD_RETRY,
               timeout: float = DEFAULT_DOWNLOAD_TIMEOUT) -> Listing:
    """The data files ``data`` names; a directory's files are those whose name ends with one of
    ``suffixes`` (optionally compressed), under ``split`` when given. Refuses with
    :class:`~shardstream.errors.NoFilesError` an entry that matches nothing. Each request to a remote store
    is made within ``timeout`` seconds and tried ``retry`` more times (:mod:`.attempts`)."""
    entries = entries_of(data)
    local = not is_remote(entries[0])
    if local:
        entries = [os.path.abspath(local_path(e)) for e in entries]
    fs, _ = filesystem(entries[0] if not local else "file://" + entries[0], storage_options)
    found: list[tuple[str, int, str]] = []
    seen: set[str] = set()
    for entry in entries:
        ask = _asker(fs, entry, local, retry, timeout)
        for path, info in _expand(ask, fs, entry, local, suffixes, split):
            if path not in seen:
                seen.add(path)
                found.append((path, int(info.get("size") or 0), _version(path, info, local)))
    join = os.path if local else posixpath
    scheme = found[0][0].partition("://")[0] + "://" if "://" in found[0][0] else ""  # HTTP paths keep theirs
    root_path = scheme + join.commonpath([join.dirname(path[len(scheme):]) for path, _, _ in found])
    proto = entries[0].partition("://")[0]
    root = root_path if local or scheme else f"{proto}://{root_path}"
    files = [SourceFile(_relative(path[len(scheme):], root_path[len(scheme):]), size, version)
             for path, size, version in found]
    return Listing(root, fs, root_path, files, local)


def _relative(path: str, root: str) -> str:
    prefix = root.rstrip("/" + os.sep) + ("/" if "/" in root or not os.path.isabs(path) else os.sep)
    if path.startswith(prefix):
        return path[len(prefix):].replace(os.sep, "/")
    rel = posixpath.relpath(path, root) if not os.path.isabs(path) else os.path.relpath(path, root)
    return rel.replace(os.sep, "/")


def _asker(fs, entry: str, local: bool, retry: int, timeout: float) -> Callable:
    """``ask(method, *args, **kwargs)``: ``fs.<method>`` as one request of listing ``entry``."""
    if local:
        return lambda method, *args, **kwargs: getattr(fs, method)(*args, **kwargs)
    return lambda method, *args, **kwargs: attempts(partial(bounded, fs, method, *args, timeout=timeout, **kwargs),
                                                    entry, retry, timeout, "listing", fs, (FileNotFoundError,))


def _expand(ask: Callable, fs, entry: str, local: bool, suffixes: Sequence[str],
            split: Optional[str]) -> list[tuple[str, dict]]:
    path = entry if local else fs._strip_protocol(entry)
    if has_glob(path):
        hits = ask("glob", path, detail=True)
        out = sorted((p, i) for p, i in hits.items() if i.get("type", "file") != "directory")
        if not out:
            raise NoFilesError(f"{entry!r} matches no file; check the pattern and storage_options")
        return out
    try:
        info = ask("info", path)
    except FileNotFoundError:
        if local and os.path.islink(path):
            raise _dangling(path) from None
        raise NoFilesError(f"{entry!r} does not exist; check the path (and storage_options for a remote)") from None
    if info.get("type") != "directory":
        return [(path, info)]
    if split:
        sub = posixpath.join(path, split) if not local else os.path.join(path, split)
        if ask("isdir", sub):
            path = sub
    hits = ask("find", path, detail=True)
    out = sorted((p, i) for p, i in hits.items() if _is_data(p, path, suffixes, split))
    if not out:
        want = ", ".join(suffixes) or "any"
        raise NoFilesError(f"{entry!r} holds no data files (looked for names ending {want}, also compressed"
                           f"{f', of split {split!r}' if split else ''}); give a glob or format=")
    return out


def _is_data(path: str, top: str, suffixes: Sequence[str], split: Optional[str]) -> bool:
    rel = _relative(path, top)
    if any(part.startswith(_SKIPPED) for part in rel.split("/")):
        return False
    name = plain_name(rel.rsplit("/", 1)[-1]).lower()
    if suffixes and not name.endswith(tuple(suffixes)):
        return False
    return not split or split in rel.split("/")[0] or rel.rsplit("/", 1)[-1].startswith(split)


def _version(path: str, info: dict, local: bool) -> str:
    if local:
        try:
            return local_version(os.stat(path))
        except FileNotFoundError:
            if os.path.islink(path):
                raise _dangling(path) from None
            raise ShardNotFoundError(f"{path} was listed, then disappeared; open the dataset again") from None
    return version_of(info)


def _dangling(path: str) -> ShardNotFoundError:
    return ShardNotFoundError(f"{path} is a symbolic link to {os.readlink(path)}, which does not exist; restore its "
                              "target, or remove the link (or leave it out of the paths given)")


def version_of(info: dict) -> str:
    """What identifies a remote file's version, from fsspec's ``info`` (the same from a listing and a HEAD)."""
    sig = object_signature(info)
    tag = sig.get("etag") or sig.get("generation") or sig.get("version") or sig.get("md5")
    if tag is None and sig.get("modified") is not None:
        tag = str(int(sig["modified"]))
    return f"{sig.get('size')}:{tag or ''}"


class FileSource:
    """One listed file as a format describes it (see :class:`~shardstream.format.files.RangeSource`):
    ranged reads of a remote file, each within ``timeout`` seconds, checked to hold the bytes asked for,
    and tried again on transient failures (:mod:`.attempts`)."""

    def __init__(self, listing: Listing, file: SourceFile, retry: int = DEFAULT_DOWNLOAD_RETRY,
                 timeout: float = DEFAULT_DOWNLOAD_TIMEOUT) -> None:
        self.name, self.size, self.version = file.name, file.bytes, file.version
        self.listing = listing
        self.path = (os.path.join(listing.root_path, *file.name.split("/")) if listing.local
                     else posixpath.join(listing.root_path, file.name))
        self.url = self.path if listing.local else f"{listing.root.rstrip('/')}/{file.name}"
        self.retry, self.timeout = retry, timeout
        self.requests = 0
        self.bytes_read = 0

    def read(self, offset: int, length: int) -> bytes:
        if self.listing.local:
            with open(self.path, "rb") as f:
                data = os.pread(f.fileno(), length, offset)
        else:
            want = max(0, min(length, self.size - offset))  # what the file held when it was listed
            fs = self.listing.fs
            data = attempts(lambda: short_check(bounded(fs, "cat_file", self.path, start=offset, end=offset + length,
                                                        timeout=self.timeout), want, offset),
                            self.url, self.retry, self.timeout, "reading", fs)
        self.requests += 1
        self.bytes_read += len(data)
        return data

    def open(self) -> Any:
        """The whole file as a stream: a local file opened, a remote one read by ranges of :data:`STREAM_BLOCK`."""
        if self.listing.local:
            raw: Any = open(self.path, "rb")
            self.requests += 1
        else:
            raw = io.BufferedReader(_Ranged(self), buffer_size=STREAM_BLOCK)
        return open_decompressed(raw, codec_of(self.name))


class _Ranged(io.RawIOBase):
    """A remote file as a raw stream over :meth:`FileSource.read` (each read bounded, checked and retried)."""

    def __init__(self, source: FileSource) -> None:
        self.source, self.pos = source, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self.pos, io.SEEK_END: self.source.size}[whence]
        self.pos = max(0, base + offset)
        return self.pos

    def readinto(self, buffer) -> int:
        n = min(len(buffer), self.source.size - self.pos)
        if n <= 0:
            return 0
        data = self.source.read(self.pos, n)[:n]
        buffer[:len(data)] = data
        self.pos += len(data)
        return len(data)
