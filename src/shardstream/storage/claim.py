"""Which directory may cache a remote: a cache directory says whose cache it is, and nothing
else is ever written to or deleted from.

Before anything else is written into a cache directory, ``.shardstream/cache.json`` is created
in it atomically, naming the remote it caches. A later run with the same remote uses it. Any
other directory that holds files is refused with
:class:`~shardstream.errors.CacheDirectoryError` and left as it is:

- one whose marker names another remote (the cache of another dataset);
- one without a marker that holds anything else, such as a dataset written by ``MDSWriter``.

Caches written without a marker keep working: a directory whose ``index.json`` is the remote's
own, byte for byte or entry for entry (an earlier mosaicml-streaming cache of the same remote,
or the local half of ``MDSWriter(out=(local, remote))``), or whose index record from an earlier
shardstream names this remote, is taken over as this remote's cache.

A directory holding only unfinished downloads (``*.tmp`` files) is an interrupted cache: they are
deleted and it is claimed as an empty one.

A ``local=`` that is the remote's own directory, or lies inside it, is not a cache at all: the
dataset is read in place (see :func:`within`).
"""

from __future__ import annotations

import json
import os
import tempfile
from typing import Optional

from ..errors import CacheDirectoryError, ShardstreamError
from ..format.atomic import read_json, remove_quietly, temp_name
from ..format.source import ShardFormat, get_format
from .fetch import Fetcher
from .fs import cache_root, is_remote, local_path

META = ".shardstream"  # the cache's own folder in a cache directory: marker, records, locks
MARKER = "cache.json"  # names the remote a cache directory caches
RECORD = "index.source.json"  # where the cached index came from (written by storage/index.py)


def claim(dirname: str, fetcher: Fetcher, fmt: Optional[ShardFormat] = None) -> bool:
    """Make ``dirname`` the cache of ``fetcher``'s remote, or refuse with CacheDirectoryError.

    True when a directory without a marker was taken over because its index file (``index.json``
    for MDS, read as ``fmt`` reads it) is the remote's current one (the caller may then trust that
    cached index as it is)."""
    fmt = get_format("mds") if fmt is None else fmt
    marker = os.path.join(dirname, META, MARKER)
    owner = _owner(marker)
    if owner is not None:
        if not same_remote(owner, fetcher.remote):
            raise _refusal(dirname, fetcher.remote, f"is the cache of {owner}")
        return False
    contents = _drop_interrupted(dirname, _contents(dirname))
    adopted = False
    if contents and not _recorded(dirname, fetcher, fmt):
        if fmt.index_name not in contents:
            shown = ", ".join(contents[:3]) + (", ..." if len(contents) > 3 else "")
            raise _refusal(dirname, fetcher.remote, f"holds other files ({shown})")
        if not _same_index(dirname, fetcher, fmt):
            raise _refusal(dirname, fetcher.remote, f"holds another dataset (its {fmt.index_name} is not the remote's)")
        adopted = True
    _write_marker(marker, fetcher.remote)
    owner = _owner(marker)
    if owner is None or not same_remote(owner, fetcher.remote):  # another process claimed it meanwhile
        raise _refusal(dirname, fetcher.remote, f"is the cache of {owner}")
    return adopted


def same_remote(a: str, b: str) -> bool:
    """Whether two remote URLs name the same place (local paths and ``file://`` URLs by their real path)."""
    a, b = a.rstrip("/"), b.rstrip("/")
    if a == b:
        return True
    if is_remote(a) or is_remote(b):
        return False
    return os.path.realpath(local_path(a)) == os.path.realpath(local_path(b))


def within(path: str, root: str) -> bool:
    """Whether directory ``path`` is ``root`` or lies inside it, through symlinks and bind mounts
    (compared by device and inode, so two names of one directory are recognised)."""
    try:
        root_stat = os.stat(root)
    except OSError:
        return False
    p = os.path.realpath(path)
    while True:
        try:
            if os.path.samestat(os.stat(p), root_stat):
                return True
        except OSError:  # not created yet: its parents decide
            pass
        parent = os.path.dirname(p)
        if parent == p:
            return False
        p = parent


def _refusal(dirname: str, remote: str, what: str) -> CacheDirectoryError:
    return CacheDirectoryError(
        f"local={dirname!r} {what}, so it cannot be the cache of remote {remote!r}; shardstream leaves it "
        f"untouched. Give this dataset another local= directory (an empty or new one, or leave local= out "
        f"for one under {cache_root()}), or delete {dirname!r} if nothing in it is needed"
    )


def _drop_interrupted(dirname: str, contents: list[str]) -> list[str]:
    """A directory holding nothing but unfinished downloads (``*.tmp`` files, what a download killed
    midway leaves, by shardstream or mosaicml-streaming) is an interrupted cache: they are deleted, and
    it is then empty. Anything else in it keeps them all."""
    if not contents or not all(n.endswith(".tmp") and os.path.isfile(os.path.join(dirname, n)) for n in contents):
        return contents
    for name in contents:
        remove_quietly(os.path.join(dirname, name))
    return []


def _contents(dirname: str) -> list[str]:
    """The names in ``dirname`` other than the cache's metadata folder (none if it does not exist)."""
    try:
        names = os.listdir(dirname)
    except FileNotFoundError:
        return []
    except NotADirectoryError:
        raise CacheDirectoryError(
            f"local={dirname!r} is a file, not a directory; give local= a directory for the cache"
        ) from None
    return sorted(n for n in names if n != META)


def _recorded(dirname: str, fetcher: Fetcher, fmt: ShardFormat) -> bool:
    """Whether an earlier shardstream, which kept no marker, recorded fetching this remote's index here."""
    record = _read_json(os.path.join(dirname, META, RECORD))
    url = record.get("url", (record.get("signature") or {}).get("url"))
    return isinstance(url, str) and same_remote(url, fetcher.url(fmt.index_name))


def _same_index(dirname: str, fetcher: Fetcher, fmt: ShardFormat) -> bool:
    """Whether the local index file is the remote's current one (same bytes, or same entries)."""
    name = fmt.index_name
    with tempfile.TemporaryDirectory(prefix="shardstream-index-") as tmp:
        path = os.path.join(tmp, name)
        fetcher.fetch(name, path)
        with open(path, "rb") as f:
            theirs = f.read()
    try:
        with open(os.path.join(dirname, name), "rb") as f:
            if f.read() == theirs:
                return True
        return fmt.read_shards(dirname) == fmt.parse_index(theirs, fetcher.url(name))
    except (OSError, ShardstreamError):  # unreadable or not an index: not this remote's
        return False


def cache_owner(dirname: str) -> Optional[str]:
    """The remote whose cache ``dirname`` is, by its marker; None if it has none."""
    return _owner(os.path.join(dirname, META, MARKER))


def _owner(marker: str) -> Optional[str]:
    """The remote a marker names; None if there is no marker."""
    if not os.path.exists(marker):
        return None
    remote = _read_json(marker).get("remote")
    if not isinstance(remote, str):
        raise CacheDirectoryError(
            f"{marker} does not say which remote its directory caches (it is damaged); delete "
            f"{os.path.dirname(os.path.dirname(marker))!r} or give another local= directory"
        )
    return remote


def _write_marker(marker: str, remote: str) -> None:
    """Create the marker atomically, unless one exists (the first writer wins)."""
    os.makedirs(os.path.dirname(marker), exist_ok=True)
    tmp = temp_name(marker)
    try:
        with open(tmp, "wb") as f:
            f.write(json.dumps({"remote": remote}).encode())
        try:
            os.link(tmp, marker)
        except FileExistsError:
            pass
        except OSError:  # a filesystem without hard links: rename (atomic, but the last writer wins)
            if not os.path.exists(marker):
                os.replace(tmp, marker)
    finally:
        remove_quietly(tmp)


def _read_json(path: str) -> dict:
    data = read_json(path)
    return data if isinstance(data, dict) else {}
