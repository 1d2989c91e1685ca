"""What an output directory holds that belongs to an MDS dataset, and clearing only that.

A writer given ``exist_ok=True`` replaces a dataset: its ``index.json``, the shard files
that index lists (and the ``index.json`` of each sub-dataset a merged index lists shards
of), shard files of a writer killed before writing its index (``shard.NNNNN.mds[.ext]``),
hidden temp files (``.tmp-*``) and the shard cache's records (``.shardstream/``) when the
directory was a stream's ``local``. Anything else in the directory is someone's data: the
writer refuses, naming it, and deletes nothing.
The same rule applies to a local directory and to a remote listing.
"""

from __future__ import annotations

import json
import os
import re
from typing import Iterable, Optional

from ..errors import OutputExistsError
from .atomic import TMP_PREFIX
from .index import INDEX_BASENAME

SHARD_NAME = re.compile(r"shard\.\d{5}\.(mds|(json|csv|tsv|xsv)(\.meta)?)(\.[A-Za-z0-9]+)?")
CACHE_META = ".shardstream/"  # the shard cache's locks and records, when the directory was a stream's local
_SHOWN = 10


def listed_files(index_text: Optional[bytes]) -> set[str]:
    """The shard basenames (raw and compressed) an ``index.json`` lists; none if it is unreadable."""
    try:
        shards = json.loads(index_text)["shards"]
        names = set()
        for shard in shards:
            for key in ("raw_data", "zip_data", "raw_meta", "zip_meta"):  # meta: JSON/CSV/TSV/XSV shards
                if shard.get(key):
                    names.add(str(shard[key]["basename"]))
        return names
    except (TypeError, ValueError, KeyError, AttributeError):
        return set()


def split_dataset_files(names: Iterable[str], index_text: Optional[bytes]) -> tuple[list[str], list[str]]:
    """``names`` (paths relative to the directory, ``/``-separated) -> (the dataset's files, other files).

    The dataset's files are ``index.json`` first, then the rest in sorted order."""
    listed = listed_files(index_text)
    parts = {name.rsplit("/", 1)[0] for name in listed if "/" in name}  # sub-datasets of a merged index
    ours, others = [], []
    for name in sorted(names):
        head, _, tail = name.rpartition("/")
        interrupted = not head and (SHARD_NAME.fullmatch(name) or name.startswith(TMP_PREFIX))
        sub_index = head in parts and tail == INDEX_BASENAME
        if name == INDEX_BASENAME:
            ours.insert(0, name)
        elif name in listed or interrupted or sub_index or name.startswith(CACHE_META):
            ours.append(name)
        else:
            others.append(name)
    return ours, others


def refuse_others(where: str, others: list[str]) -> None:
    """Raise :class:`OutputExistsError` naming the files in ``where`` that are not a dataset's."""
    if not others:
        return
    shown = ", ".join(repr(n) for n in others[:_SHOWN])
    more = f" and {len(others) - _SHOWN} more" if len(others) > _SHOWN else ""
    raise OutputExistsError(
        f"output {where!r} holds files that are not part of an MDS dataset: {shown}{more}. exist_ok=True "
        "replaces only a dataset (index.json, the shards it lists, shard and temp files of an interrupted "
        "writer); move those files away, or choose another out. Nothing was deleted"
    )


def refuse_non_empty(where: str, count: int) -> None:
    raise OutputExistsError(
        f"Directory is not empty: output {where!r} holds {count} file(s); pass exist_ok=True to replace the dataset there, "
        "or choose an empty directory"
    )


def _local_files(dirname: str) -> list[str]:
    found = []
    for dirpath, _, filenames in os.walk(dirname):
        rel = os.path.relpath(dirpath, dirname)
        for name in filenames:
            found.append(name if rel == "." else "/".join([*rel.split(os.sep), name]))
    return found


def clear_local(dirname: str, exist_ok: bool) -> None:
    """Make ``dirname`` ready for a new dataset: refuse if it holds anything (without ``exist_ok``)
    or anything but a dataset (with it); else delete the dataset, its index first."""
    if not os.path.isdir(dirname) or not os.listdir(dirname):
        return
    files = _local_files(dirname)
    if not exist_ok:
        refuse_non_empty(dirname, len(files))
    index = os.path.join(dirname, INDEX_BASENAME)
    text = None
    if os.path.isfile(index):
        with open(index, "rb") as f:
            text = f.read()
    ours, others = split_dataset_files(files, text)
    refuse_others(dirname, others)
    # The index goes first: a crash from here on must not leave an index whose shards are half gone.
    for name in ours:
        try:
            os.unlink(os.path.join(dirname, *name.split("/")))
        except FileNotFoundError:
            pass
    for name in ours:  # subdirectories of a merged dataset's shards, once empty
        parts = name.split("/")[:-1]
        while parts:
            try:
                os.rmdir(os.path.join(dirname, *parts))
            except OSError:
                break
            parts.pop()
