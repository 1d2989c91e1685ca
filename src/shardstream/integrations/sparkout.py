"""The output directory of a Spark write: where each partition's part goes, and what may be replaced.

A Spark-written dataset is ``OUT/part-NNNNN/{index.json, shard.*}`` (one sub-dataset per non-empty
partition, numbered by partition id) and ``OUT/index.json`` over them. Before a job starts the driver
checks ``OUT``: an empty (or missing) directory is used as it is; a non-empty one is refused unless
``overwrite=True``, which deletes a previous write's files (the top-level index first, so nothing that
looks complete is left while the rest goes) and refuses, deleting nothing, files that are not a
dataset's. The same rule holds for a local directory and a remote URL.
"""

from __future__ import annotations

import os
import re
import shutil
from typing import Optional

from ..errors import OutputExistsError
from ..format.atomic import TMP_PREFIX
from ..format.index import INDEX_BASENAME
from ..storage.fs import filesystem, is_remote, join, local_path

#: a file of a previous write: the merged index, a part's index, shards or temp files
_OURS = re.compile(rf"(index\.json|part-\d{{5}}/(index\.json|shard\.\d{{5}}\.mds(\.\w+)?|{re.escape(TMP_PREFIX)}.*))")
_SHOWN = 10


def part_name(partition: int) -> str:
    """The subdirectory of ``OUT`` that partition ``partition`` writes."""
    return f"part-{partition:05d}"


def part_url(out: str, partition: int) -> str:
    """Where partition ``partition``'s part goes (a local path or a URL, as ``out`` is)."""
    if is_remote(out):
        return join(out, part_name(partition))
    return os.path.join(local_path(out), part_name(partition))


def index_url(out: str) -> str:
    """The merged index's location."""
    return join(out, INDEX_BASENAME) if is_remote(out) else os.path.join(local_path(out), INDEX_BASENAME)


def _listing(out: str, storage_options: Optional[dict]) -> list[str]:
    """Files below ``out``, relative to it, ``/``-separated."""
    if is_remote(out):
        fs, root = filesystem(out, storage_options)
        try:
            found = fs.find(root)
        except (FileNotFoundError, NotADirectoryError):
            return []
        prefix = root.rstrip("/") + "/"
        return sorted(p[len(prefix):] for p in found if p.startswith(prefix))
    root = local_path(out)
    if os.path.isfile(root):
        raise OutputExistsError(f"out={out!r} is a file; name a directory (it is created if missing)")
    names = []
    for dirpath, _, filenames in os.walk(root):
        rel = os.path.relpath(dirpath, root)
        names += [f if rel == "." else f"{rel}/{f}".replace(os.sep, "/") for f in filenames]
    return sorted(names)


def prepare_out(out: str, overwrite: bool, storage_options: Optional[dict]) -> None:
    """Check ``out`` before a write starts; with ``overwrite`` delete a previous write's files there."""
    names = _listing(out, storage_options)
    if not names:
        return
    if not overwrite:
        raise OutputExistsError(
            f"out={out!r} is not empty ({len(names)} file(s), e.g. {names[0]!r}); pass overwrite=True to "
            "replace the dataset there, or choose an empty directory")
    others = [n for n in names if not _OURS.fullmatch(n)]
    if others:
        shown = ", ".join(repr(n) for n in others[:_SHOWN])
        more = f" and {len(others) - _SHOWN} more" if len(others) > _SHOWN else ""
        raise OutputExistsError(
            f"out={out!r} holds files that are not part of a dataset written from Spark: {shown}{more}. "
            "overwrite=True replaces only such a dataset (index.json and part-NNNNN/); move those files away, "
            "or choose another out. Nothing was deleted")
    _delete(out, sorted(names, key=lambda n: n != INDEX_BASENAME), storage_options)


def _delete(out: str, names: list[str], storage_options: Optional[dict]) -> None:
    """Delete ``names`` below ``out``, in order (the merged index comes first)."""
    if is_remote(out):
        fs, root = filesystem(out, storage_options)
        for name in names:
            fs.rm_file(f"{root.rstrip('/')}/{name}")
        fs.invalidate_cache(root)
        return
    root = local_path(out)
    for name in names:
        os.remove(os.path.join(root, name))
    for entry in os.listdir(root):
        path = os.path.join(root, entry)
        if os.path.isdir(path) and re.fullmatch(r"part-\d{5}", entry):
            shutil.rmtree(path, ignore_errors=True)
