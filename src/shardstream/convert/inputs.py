"""What a conversion reads: the input files, their kind, and what identifies each one's version.

``inputs`` is a file, a directory, a glob or a list of them, local or any fsspec URL:

- data files (Parquet, Arrow IPC, JSON Lines and JSON, CSV/TSV, text; also ``.gz`` / ``.zst`` ...),
  their kind from their names (or ``format=``);
- a directory written by ``datasets``' ``save_to_disk`` (``state.json``, or ``dataset_dict.json`` and a
  subdirectory per split: ``split=`` picks one, ``train`` by default), or laid out as the Hub lays
  datasets out (``data/train-00000-of-00002.parquet`` ...);
- a folder of images with one sub-folder per class (``cats/001.jpg``, ``dogs/002.png``): rows of
  ``image`` (the file's bytes, as stored) and ``label`` (the class's index among the sorted sub-folder
  names; the names are kept in the manifest as ``label_names``).

Every file is listed once with its size and version (modification time, ETag or generation), which is
what a rerun compares to know which inputs are the same ones it converted before.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Optional

from ..errors import InvalidArgumentError, SplitNotFoundError
from ..format.files import plain_name
from ..format.source import SUFFIX_FORMATS
from ..hub.resolve import locate
from ..storage.fs import is_remote, local_path
from ..storage.listing import entries_of, list_files

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".gif", ".bmp", ".webp", ".tif", ".tiff")
KINDS = ("parquet", "arrow", "jsonl", "json", "csv", "text", "imagefolder")


@dataclass(frozen=True)
class InputFile:
    """One input file: ``name`` relative to the inputs' root, ``url`` (a local path or URL), size, version."""

    name: str
    url: str
    size: int
    version: str

    def record(self) -> dict:
        return {"name": self.name, "size": self.size, "version": self.version}


@dataclass
class Inputs:
    """The files to convert, in order, their ``kind`` and the class names of an image folder."""

    kind: str
    root: str
    files: list[InputFile]
    label_names: list[str] = field(default_factory=list)

    @property
    def total_bytes(self) -> int:
        return sum(f.size for f in self.files)


def kind_of_name(name: str) -> Optional[str]:
    base = plain_name(name.rstrip("/")).rsplit("/", 1)[-1]
    return SUFFIX_FORMATS.get(os.path.splitext(base)[1].lower())


def list_inputs(inputs: Any, format: Optional[str] = None, storage_options: Optional[dict] = None,
                split: Optional[str] = None) -> Inputs:
    """The :class:`Inputs` that ``inputs`` names (see the module docstring)."""
    entries = entries_of(inputs)
    if format is not None and format not in KINDS:
        raise InvalidArgumentError(f"format={format!r} is not one the converter reads; use one of {', '.join(KINDS)}")
    if format == "imagefolder" or (format is None and len(entries) == 1 and _is_image_folder(entries[0])):
        return _image_folder(entries, storage_options)
    if len(entries) == 1 and _is_dir(entries[0], storage_options):
        return _dataset_dir(entries[0], storage_options, split, format)
    kind = format or _kind_of(entries)
    suffixes = tuple(s for s, k in SUFFIX_FORMATS.items() if k == kind)
    listing = list_files(entries, suffixes, storage_options, split)
    files = [_input(listing.root, f.name, f.bytes, f.version) for f in listing.files]
    if format is None:
        kinds = {kind_of_name(f.name) for f in files}
        if len(kinds) > 1:
            raise InvalidArgumentError(f"the inputs are files of several kinds ({', '.join(sorted(map(str, kinds)))}); "
                                       "convert each kind on its own, or give format=")
    return Inputs(kind, listing.root, files)


def _input(root: str, name: str, size: int, version: str) -> InputFile:
    url = f"{root.rstrip('/')}/{name}" if is_remote(root) else os.path.join(root, *name.split("/"))
    return InputFile(name, url, size, version)


def _is_dir(entry: str, storage_options: Optional[dict]) -> bool:
    if not is_remote(entry):
        return os.path.isdir(local_path(entry))
    from ..storage.fs import filesystem

    fs, path = filesystem(entry, storage_options)
    try:
        return fs.isdir(path)
    except OSError:
        return False


def _kind_of(entries: list[str]) -> str:
    named = {kind_of_name(e) for e in entries} - {None}
    if len(named) == 1:
        return named.pop()
    if len(named) > 1:
        raise InvalidArgumentError(f"the inputs name files of several kinds ({', '.join(sorted(named))}); convert "
                                   "each kind on its own, or give format=")
    if len(entries) == 1 and not is_remote(entries[0]) and os.path.isdir(local_path(entries[0])):
        found = _kinds_below(local_path(entries[0]))
        if len(found) == 1:
            return found.pop()
        if len(found) > 1:
            raise InvalidArgumentError(f"{entries[0]} holds files of several kinds ({', '.join(sorted(found))}); "
                                       "give a glob or format=")
    raise InvalidArgumentError(f"cannot tell what kind of files {entries!r} are from their names; give format= "
                               f"(one of {', '.join(KINDS)})")


def _kinds_below(path: str) -> set:
    for top, dirs, names in os.walk(path):
        dirs[:] = sorted(d for d in dirs if not d.startswith((".", "_")))
        found = {kind_of_name(n) for n in names if not n.startswith((".", "_"))} - {None}
        if found:
            return found
    return set()


def _dataset_dir(entry: str, storage_options: Optional[dict], split: Optional[str],
                 format: Optional[str]) -> Inputs:
    """A directory as ``datasets.load_dataset`` reads one: ``save_to_disk``'s Arrow files, or data files laid out
    by split (``data/train-*.parquet``, ``test.jsonl`` ...); ``split`` picks one (``train`` by default)."""
    root = entry if is_remote(entry) else os.path.abspath(local_path(entry))
    located = locate(root, storage_options)
    splits = located.layout.subset(None)
    if split is None:
        if len(splits) == 1:
            split = next(iter(splits))
        elif "train" in splits:
            split = "train"
        else:
            raise SplitNotFoundError(f"{entry} holds the splits {', '.join(splits)}; pick one with split= (--split)")
    names = located.layout.files(None, split)
    kind = "arrow" if located.layout.kind == "save_to_disk" else (format or _kind_of(names))
    listing = list_files(located.urls(names), (), storage_options)
    files = [_input(listing.root, f.name, f.bytes, f.version) for f in listing.files]
    return Inputs(kind, listing.root, files)


def _is_image_folder(entry: str) -> bool:
    if is_remote(entry) or not os.path.isdir(local_path(entry)):
        return False
    root = local_path(entry)
    subdirs = [d for d in sorted(os.listdir(root)) if os.path.isdir(os.path.join(root, d)) and not d.startswith(".")]
    for d in subdirs[:4]:
        names = [n for n in os.listdir(os.path.join(root, d)) if not n.startswith(".")]
        if any(n.lower().endswith(IMAGE_SUFFIXES) for n in names):
            return True
    return False


def _image_folder(entries: list[str], storage_options: Optional[dict]) -> Inputs:
    if len(entries) != 1:
        raise InvalidArgumentError("an image folder is given as one directory (one sub-folder per class)")
    listing = list_files(entries, IMAGE_SUFFIXES, storage_options)
    top = entries[0].rstrip("/")
    root = top if is_remote(top) else os.path.abspath(local_path(top))
    found = [_input(listing.root, f.name, f.bytes, f.version) for f in listing.files]
    files = [InputFile(_below(f.url, root), f.url, f.size, f.version) for f in found]
    flat = [f.name for f in files if "/" not in f.name]
    if flat:
        raise InvalidArgumentError(f"{flat[0]} is not in a class sub-folder; an image folder holds one sub-folder "
                                   "per class (cats/001.jpg, dogs/002.jpg)")
    labels = sorted({f.name.split("/", 1)[0] for f in files})
    return Inputs("imagefolder", root, files, labels)


def _below(url: str, root: str) -> str:
    rel = url[len(root):].lstrip("/" + os.sep) if url.startswith(root) else url
    return rel.replace(os.sep, "/")
