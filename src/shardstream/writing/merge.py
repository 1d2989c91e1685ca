"""``merge_index``: one index.json over sub-datasets written in parallel into subdirectories."""

from __future__ import annotations

import dataclasses
import os
import posixpath
import tempfile
from typing import Optional, Sequence, Union

from ..errors import IndexNotFoundError, InvalidArgumentError
from ..format.index import INDEX_BASENAME, ShardInfo, check_basename, loads_index, read_index, write_index_atomic
from ..storage.fs import filesystem, is_remote
from ..storage.upload import Uploader

IndexRef = Union[str, tuple[str, str]]
_FILE_FIELDS = ("raw_data", "zip_data", "raw_meta", "zip_meta")


def prefix_shards(shards: list[ShardInfo], prefix: str) -> list[ShardInfo]:
    """Shard entries of a sub-dataset as seen from its parent directory."""
    check_basename(prefix, "merge prefix")
    out = []
    for s in shards:  # an MDS shard's data files; a JSON/CSV/TSV/XSV shard's ``.meta`` files too
        moved = {key: dataclasses.replace(f, basename=posixpath.join(prefix, f.basename))
                 for key in _FILE_FIELDS if (f := getattr(s, key, None)) is not None}
        out.append(dataclasses.replace(s, **moved))
    return out


def _relative(index_url: str, out: str) -> str:
    parent = posixpath.dirname(index_url.replace(os.sep, "/").rstrip("/"))
    root = out.replace(os.sep, "/").rstrip("/")
    if not parent.startswith(root + "/"):
        raise InvalidArgumentError(
            f"index {index_url!r} is not inside out={out!r}; sub-datasets must live in subdirectories of out"
        )
    return parent[len(root) + 1:]


def _load(ref: IndexRef, storage_options: Optional[dict]) -> tuple[str, list[ShardInfo]]:
    if isinstance(ref, (tuple, list)):
        local, remote = ref
        ref = local if os.path.exists(local) else remote
    if is_remote(ref):
        fs, path = filesystem(ref, storage_options)
        if not fs.exists(path):
            raise IndexNotFoundError(f"sub-dataset index {ref!r} does not exist")
        return ref, loads_index(fs.cat_file(path), ref)
    path = ref[7:] if ref.startswith("file://") else ref
    if not os.path.isfile(path):
        raise IndexNotFoundError(f"sub-dataset index {ref!r} does not exist")
    return ref, read_index(os.path.dirname(path))


def _find_indexes(out: str, storage_options: Optional[dict]) -> list[str]:
    if is_remote(out):
        fs, root = filesystem(out, storage_options)
        proto = out.split("://", 1)[0]
        found = [p for p in fs.find(root) if posixpath.basename(p) == INDEX_BASENAME]
        found = [f"{proto}://{p}" for p in found if posixpath.dirname(p).rstrip("/") != root.rstrip("/")]
    else:
        root = out[7:] if out.startswith("file://") else out
        found = []
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames.sort()
            if INDEX_BASENAME in filenames and os.path.abspath(dirpath) != os.path.abspath(root):
                found.append(os.path.join(dirpath, INDEX_BASENAME))
    if not found:
        raise IndexNotFoundError(f"no sub-dataset index.json found below {out!r}")
    return sorted(found)


def merge_index(*args, **kwargs) -> list[ShardInfo]:
    """Write ``<out>/index.json`` listing the shards of every sub-dataset.

    Two forms, as in mosaicml-streaming::

        merge_index(out)                     # every */index.json below out
        merge_index(index_file_urls, out)    # the given index files (paths, URLs or (local, remote))

    ``out`` may be a local directory or an fsspec URL. Shard basenames in the merged
    index are relative paths (``part0/shard.00000.mds``). Returns the merged shard list.
    """
    storage_options = kwargs.pop("storage_options", None)
    kwargs.pop("keep_local", None)
    kwargs.pop("download_timeout", None)
    if args and isinstance(args[0], (list, tuple)) and not (len(args[0]) == 2 and isinstance(args[0], tuple) and len(args) == 1):
        refs: Sequence[IndexRef] = list(dict.fromkeys(args[0]))
        out = args[1] if len(args) > 1 else kwargs.pop("out")
    else:
        out = args[0] if args else kwargs.pop("out")
        refs = _find_indexes(out if isinstance(out, str) else out[0], storage_options)
    local_out, remote_out = (out, None) if isinstance(out, str) else out
    if isinstance(out, str) and is_remote(out):
        local_out, remote_out = None, out
    merged: list[ShardInfo] = []
    for ref in refs:
        name, shards = _load(ref, storage_options)
        base = remote_out if (is_remote(name) or local_out is None) else local_out
        ref_path = name[7:] if name.startswith("file://") else name
        base_path = base[7:] if base.startswith("file://") else base
        if not is_remote(ref_path) and not is_remote(base_path):
            ref_path, base_path = os.path.abspath(ref_path), os.path.abspath(base_path)
        merged += prefix_shards(shards, _relative(ref_path, base_path))
    if local_out is not None:
        os.makedirs(local_out, exist_ok=True)
        write_index_atomic(local_out, merged)
    if remote_out is not None:
        with tempfile.TemporaryDirectory(prefix="shardstream-merge-") as tmp:
            path = write_index_atomic(tmp, merged)
            Uploader(remote_out, storage_options=storage_options).upload_now(path, INDEX_BASENAME)
    return merged
