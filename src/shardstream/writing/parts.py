"""The output of a write in parts (``out/part-NNNNN/`` and one merged ``out/index.json``), as
``shardstream convert``, the Spark writer and the Ray datasink make it: the parts' names, refusing a
non-empty output, and replacing what such a write (or any MDS dataset) left there.

Files that belong to it: ``index.json``, what :mod:`~shardstream.format.outdir` counts as an MDS
dataset's (the shards the index lists, an interrupted writer's shards and temp files), and inside
``part-NNNNN/`` directories a part's ``index.json``, shards and temp files, so the parts of a failed
write (which has no top-level index) are replaced too. Anything else is someone's data: refused,
nothing deleted.
"""

from __future__ import annotations

import os
import re
from typing import Optional

from ..errors import OutputExistsError, UploadError
from ..format.atomic import TMP_PREFIX
from ..format.index import INDEX_BASENAME
from ..format.outdir import SHARD_NAME, split_dataset_files
from ..storage.fs import filesystem, is_remote, local_path

PART_PREFIX = "part-"
PART_DIR = re.compile(r"part-\d{5}")
_SHOWN = 10


def part_name(number: int) -> str:
    """The subdirectory part ``number`` is written into: ``part-00042``."""
    return f"{PART_PREFIX}{number:05d}"


def is_part_file(name: str) -> bool:
    head, _, tail = name.partition("/")
    return bool(PART_DIR.fullmatch(head)) and (
        tail == INDEX_BASENAME or bool(SHARD_NAME.fullmatch(tail)) or tail.startswith(TMP_PREFIX))


def list_output(out: str, storage_options: Optional[dict]) -> tuple[list[str], Optional[bytes]]:
    """Every file below ``out`` (relative, ``/``-separated) and the bytes of its ``index.json``, if any."""
    if not is_remote(out):
        root = local_path(out)
        if os.path.isfile(root):
            raise OutputExistsError(f"output {out!r} is a file; name a directory (it is created if missing)")
        names = []
        for dirpath, _, filenames in os.walk(root):
            rel = os.path.relpath(dirpath, root)
            names += [n if rel == "." else "/".join([*rel.split(os.sep), n]) for n in filenames]
        index = os.path.join(root, INDEX_BASENAME)
        text = open(index, "rb").read() if os.path.isfile(index) else None
        return sorted(names), text
    fs, root = filesystem(out, storage_options)
    try:
        found = fs.find(root)
    except (FileNotFoundError, NotADirectoryError):
        return [], None
    except Exception as exc:
        raise UploadError(f"listing {out} (to check what is there) failed: {type(exc).__name__}: {exc}") from exc
    prefix = root.rstrip("/") + "/"
    names = sorted(p[len(prefix):] for p in found if p.startswith(prefix))
    text = fs.cat_file(prefix + INDEX_BASENAME) if INDEX_BASENAME in names else None
    return names, text


def clear_output(out: str, overwrite: bool, storage_options: Optional[dict] = None,
                 also: tuple[str, ...] = ()) -> None:
    """Make ``out`` ready for a write in parts: refuse it if it holds files (unless ``overwrite``), or
    files that are not a dataset's (even with it; ``also`` names more top-level files that belong to the
    writer); else delete the dataset there, its index first."""
    names, index_text = list_output(out, storage_options)
    if not names:
        return
    if not overwrite:
        raise OutputExistsError(f"output {out!r} is not empty ({len(names)} file(s)); pass overwrite=True to "
                                "replace the MDS dataset there, or choose an empty directory")
    ours, others = split_dataset_files(names, index_text)
    ours += [n for n in others if is_part_file(n) or n in also]
    others = [n for n in others if not (is_part_file(n) or n in also)]
    if others:
        shown = ", ".join(repr(n) for n in others[:_SHOWN])
        more = f" and {len(others) - _SHOWN} more" if len(others) > _SHOWN else ""
        raise OutputExistsError(f"output {out!r} holds files that are not part of an MDS dataset: {shown}{more}. "
                                "overwrite=True replaces only a dataset (index.json, its shards, part-NNNNN/ "
                                "directories of a write in parts); move those files away, or choose another "
                                "out. Nothing was deleted")
    remove(out, ours, storage_options)


def remove(out: str, names: list[str], storage_options: Optional[dict]) -> None:
    """Delete ``names`` below ``out``, ``index.json`` first (a crash never leaves an index without shards)."""
    names = sorted(names, key=lambda n: n != INDEX_BASENAME)
    if not is_remote(out):
        root = local_path(out)
        for name in names:
            try:
                os.unlink(os.path.join(root, *name.split("/")))
            except FileNotFoundError:
                pass
        for entry in os.listdir(root):  # the parts' directories, now empty
            if PART_DIR.fullmatch(entry) and os.path.isdir(os.path.join(root, entry)):
                try:
                    os.rmdir(os.path.join(root, entry))
                except OSError:
                    pass
        return
    fs, root = filesystem(out, storage_options)
    root = root.rstrip("/")
    if INDEX_BASENAME in names:
        fs.rm_file(f"{root}/{INDEX_BASENAME}")
    rest = [f"{root}/{n}" for n in names if n != INDEX_BASENAME]
    if rest:
        fs.rm(rest)
    fs.invalidate_cache(root)
