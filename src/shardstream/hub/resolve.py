"""Finding a Hugging Face dataset's files: a local directory, any fsspec URL, or a Hub repository.

``path`` is a local directory, a URL (``s3://b/ds``, ``hf://datasets/user/name``), or a Hub
dataset id (``user/name``), which is read as ``hf://datasets/user/name`` through
``huggingface_hub``'s ``HfFileSystem`` (``pip install 'shardstream[hf]'``). One recursive listing
of the directory, and the few small files that describe it (``dataset_dict.json``,
``state.json``, ``README.md``), give its :class:`~shardstream.hub.layout.Layout`; the rows are then
read by the engine like any other data files.
"""

from __future__ import annotations

import os
import posixpath
import re
from dataclasses import dataclass
from typing import Any, Optional
from urllib.parse import quote

from ..errors import DownloadError, InvalidArgumentError, NoFilesError
from ..storage.fs import filesystem, is_remote, local_path
from .layout import (
    Layout,
    config_layout,
    dict_splits,
    infer_layout,
    pattern_layout,
    saved_layout,
)

HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[A-Za-z0-9][\w.-]*)?$")
README = "README.md"


def hub_url(repo_id: str, revision: Optional[str] = None) -> str:
    """The ``hf://`` URL of Hub dataset ``repo_id`` at ``revision`` (a branch, tag, commit, or a ref such as
    ``refs/convert/parquet``, quoted as ``HfFileSystem`` expects)."""
    return f"hf://datasets/{repo_id}" + (f"@{quote(revision, safe='')}" if revision else "")


def dataset_root(path: Any, revision: Optional[str] = None) -> str:
    """The directory ``path`` names: an absolute local path, or a URL (a Hub id becomes its ``hf://`` URL)."""
    if not isinstance(path, (str, os.PathLike)):
        raise InvalidArgumentError(f"path={path!r} must be a directory, a URL or a Hub dataset id ('user/name')")
    text = os.fspath(path)
    if "://" in text and is_remote(text):
        if revision is None:
            return text.rstrip("/")
        if not text.startswith("hf://datasets/") or "@" in text:
            raise InvalidArgumentError(f"revision={revision!r} applies to a Hub dataset id or an hf://datasets/ URL "
                                       f"without a revision, not to {text!r}")
        return hub_url(text[len("hf://datasets/"):].rstrip("/"), revision)
    local = os.path.abspath(local_path(text))
    if os.path.isdir(local):
        return local
    if os.path.exists(local):
        raise InvalidArgumentError(f"{text!r} is a file; read data files with a builder name, e.g. "
                                   f"load_dataset('parquet', data_files={text!r})")
    if "://" not in text and HUB_ID.match(text) and not text.startswith((".", "/")):
        return hub_url(text, revision)
    raise NoFilesError(f"{text!r} is neither a directory, a URL nor a Hub dataset id ('user/name'); check the path")


@dataclass(frozen=True)
class Located:
    """A dataset directory (``root``: absolute path or URL) and its layout."""

    root: str
    layout: Layout

    def urls(self, names: list) -> list[str]:
        """Where the files ``names`` (relative to the root) are."""
        if is_remote(self.root):
            return [f"{self.root.rstrip('/')}/{name}" for name in names]
        return [os.path.join(self.root, *name.split("/")) for name in names]


def locate(path: Any, storage_options: Optional[dict] = None, data_files: Any = None,
           data_dir: Optional[str] = None, revision: Optional[str] = None) -> Located:
    """The layout of the dataset directory ``path`` (see the module docstring); ``data_files`` (patterns
    relative to it) or ``data_dir`` (a subdirectory) narrow it as ``datasets.load_dataset`` does."""
    root = dataset_root(path, revision)
    fs, base = filesystem(root if is_remote(root) else "file://" + root, storage_options)
    names = list_names(fs, base, root)
    if data_files is not None:
        return Located(root, pattern_layout(data_files, names, root, data_dir))
    if data_dir:
        prefix = data_dir.strip("/") + "/"
        inside = [n[len(prefix):] for n in names if n.startswith(prefix)]
        if not inside:
            raise NoFilesError(f"data_dir={data_dir!r} holds no files in {root}")
        return Located(root + "/" + prefix.rstrip("/") if is_remote(root) else os.path.join(root, data_dir),
                       infer_layout(inside))
    return Located(root, described_layout(fs, base, root, names))


def described_layout(fs: Any, base: str, root: str, names: list) -> Layout:
    """What the directory's own files say of it (save_to_disk, a dataset card's configs), else the naming rules."""
    have = set(names)

    def text(name: str) -> str:
        try:
            return fs.cat_file(posixpath.join(base, name)).decode("utf-8", "replace")
        except FileNotFoundError:
            raise NoFilesError(f"{root}/{name} is missing; the directory is an incomplete save_to_disk") from None
        except OSError as exc:
            raise DownloadError(f"reading {root}/{name} failed ({type(exc).__name__}: {exc})") from exc

    if "dataset_dict.json" in have:
        listing = text("dataset_dict.json")
        return saved_layout(listing, {s: text(f"{s}/state.json") for s in dict_splits(listing)})
    if "state.json" in have:
        return saved_layout(None, {"": text("state.json")})
    if README in have:
        found = config_layout(text(README), names, root)
        if found is not None:
            return found
    return infer_layout(names)


def list_names(fs: Any, base: str, root: str) -> list[str]:
    """Every file under ``base`` (one recursive listing), relative and '/'-separated, sorted."""
    try:
        found = fs.find(base, detail=False)
    except FileNotFoundError:
        raise NoFilesError(f"{root} does not exist; check the path (and storage_options / token)") from None
    except OSError as exc:
        raise DownloadError(f"listing {root} failed ({type(exc).__name__}: {exc}); check the path and "
                            "storage_options / token") from exc
    top = base.rstrip("/") + "/"
    names = sorted(p[len(top):] for p in found if p.startswith(top))
    if not names:
        raise NoFilesError(f"{root} holds no files; check the path")
    return names
