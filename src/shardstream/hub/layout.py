"""Which files of a Hugging Face dataset directory make which subset and split: pure path logic.

A dataset directory (local, on an object store, or a Hub repository) is one of:

- a ``save_to_disk`` directory: ``state.json`` lists its Arrow files (one split), or
  ``dataset_dict.json`` lists its splits, each a subdirectory with its ``state.json``;
- a repository whose ``README.md`` declares ``configs:`` (each a subset with ``data_files`` per
  split, as ``push_to_hub`` writes it): those patterns are the truth;
- otherwise a directory laid out the way the Hub names files, read by these rules, in order:
  a file named ``{split}-00000-of-00003.*`` is in ``split`` (``push_to_hub``); a top directory
  other than ``data`` and the split names is a subset, and inside a subset a directory is a
  split (the ``refs/convert/parquet`` tree ``{subset}/{split}/0000.parquet``, ``partial-{split}``
  too); a directory or file name containing a split keyword (``train``, ``validation``/``valid``/
  ``dev``/``val``, ``test``/``eval`` ...) is in that split; anything else is ``train``.

The functions here take the directory's file names (relative, ``/``-separated) and the texts of
its JSON and README files, and return a :class:`Layout`; :mod:`.resolve` reads them.
"""

from __future__ import annotations

import json
import posixpath
import re
from dataclasses import dataclass
from typing import Any, Optional, Sequence

from ..errors import CorruptIndexError, InvalidArgumentError, NoFilesError, SplitNotFoundError, require
from ..format.files import plain_name
from ..format.source import SUFFIX_FORMATS
from ..yamlsafe import load_bounded

DEFAULT = "default"
SPLIT_KEYWORDS = {
    "train": ("train", "training"),
    "validation": ("validation", "valid", "dev", "val"),
    "test": ("test", "testing", "eval", "evaluation"),
}
_CANONICAL = {word: split for split, words in SPLIT_KEYWORDS.items() for word in words}
_SHARDED = re.compile(r"^(\w+?)-\d{5}-of-\d{5}")  # train-00000-of-00003[-fingerprint].parquet
_SEP = r"[-._ 0-9]"
_IN_NAME = {split: re.compile(rf"(^|{_SEP})({'|'.join(words)})({_SEP}|$)") for split, words in SPLIT_KEYWORDS.items()}
#: files of a dataset directory that describe it rather than hold rows
METADATA_NAMES = {"dataset_info.json", "dataset_infos.json", "state.json", "dataset_dict.json"}


@dataclass(frozen=True)
class Layout:
    """The subsets of a dataset directory, each a mapping of split -> file names (relative to the
    directory, in reading order); ``kind`` says how they were found, ``default`` is the subset read
    when none is named (None: the directory has several and none is marked default)."""

    kind: str
    subsets: dict
    default: Optional[str]

    def subset(self, name: Optional[str]) -> dict:
        """The splits of subset ``name`` (the default subset when None)."""
        if name is None:
            if self.default is None:
                raise SplitNotFoundError(f"this dataset has several subsets ({', '.join(self.subsets)}) and none is "
                                         "the default; name one: load_dataset(path, name=...) / subset=...")
            name = self.default
        if name not in self.subsets:
            raise SplitNotFoundError(f"the dataset has no subset {name!r}; it has {', '.join(self.subsets)}")
        return self.subsets[name]

    def files(self, name: Optional[str], split: str) -> list:
        """The files of ``split`` of subset ``name``."""
        splits = self.subset(name)
        if split not in splits:
            raise SplitNotFoundError(f"the dataset{f' subset {name!r}' if name else ''} has no split {split!r}; it "
                                     f"has {', '.join(splits)}")
        return splits[split]


def is_data_name(name: str) -> bool:
    """Whether ``name`` (relative) is a data file of a format shardstream reads, not hidden or metadata."""
    parts = name.split("/")
    if any(p.startswith((".", "_")) for p in parts) or parts[-1] in METADATA_NAMES:
        return False
    base = plain_name(parts[-1]).lower()
    return posixpath.splitext(base)[1] in SUFFIX_FORMATS


def _ordered(splits: dict) -> dict:
    """``splits`` with train, validation and test first, the others after in name order."""
    first = [s for s in SPLIT_KEYWORDS if s in splits]
    return {s: splits[s] for s in first + sorted(set(splits) - set(first))}


def keyword_split(word: str) -> Optional[str]:
    """The split a directory name stands for (``valid`` -> ``validation``), or None."""
    return _CANONICAL.get(word.lower())


def split_of(name: str, in_subset: bool) -> str:
    """The split of file ``name`` (relative to its subset's directory; see the module docstring)."""
    parts = name.split("/")
    if parts[0] == "data" and len(parts) > 1 and not in_subset:
        parts = parts[1:]
    base = parts[-1]
    sharded = _SHARDED.match(base)
    if sharded:
        return sharded.group(1)
    if len(parts) > 1:
        top = parts[0][len("partial-"):] if parts[0].startswith("partial-") else parts[0]
        if keyword_split(top) or in_subset:
            return keyword_split(top) or top
    stem = plain_name(base).rsplit(".", 1)[0].lower()
    for split, pattern in _IN_NAME.items():
        if pattern.search(stem):
            return split
    return "train"


def infer_layout(names: Sequence[str]) -> Layout:
    """The layout of a directory holding ``names`` by the Hub's naming rules (module docstring)."""
    subsets: dict[str, dict[str, list[str]]] = {}
    for name in sorted(n for n in names if is_data_name(n)):
        top, _, rest = name.partition("/")
        if not rest or top == "data" or keyword_split(top) or top.startswith("partial-"):
            subset, split = DEFAULT, split_of(name, False)
        else:
            subset, split = top, split_of(rest, True)
        subsets.setdefault(subset, {}).setdefault(split, []).append(name)
    if not subsets:
        raise NoFilesError("the directory holds no data files (looked for names ending "
                           f"{', '.join(sorted(SUFFIX_FORMATS))}, also compressed); give data_files=")
    default = DEFAULT if DEFAULT in subsets else (next(iter(subsets)) if len(subsets) == 1 else None)
    ordered = {k: _ordered(v) for k, v in sorted(subsets.items(), key=lambda kv: (kv[0] != DEFAULT, kv[0]))}
    return Layout("inferred", ordered, default)


# -- patterns (README configs, data_files= relative to a dataset directory) ------------------------

def pattern_regex(pattern: str) -> re.Pattern:
    """A glob as a regex over '/'-separated names: ``*`` and ``?`` stay within a directory, ``**``
    crosses them, ``[...]`` is a character class."""
    out, i = [], 0
    while i < len(pattern):
        c = pattern[i]
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
            continue
        if pattern.startswith("**", i):
            out.append(".*")
            i += 2
            continue
        if c == "*":
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "[":
            end = pattern.find("]", i + 1)
            if end < 0:
                out.append(re.escape(c))
            else:
                body = pattern[i + 1:end]
                out.append("[" + ("^" + body[1:] if body.startswith("!") else body) + "]")
                i = end
        else:
            out.append(re.escape(c))
        i += 1
    return re.compile("".join(out) + r"\Z")


def match(patterns: Sequence[str], names: Sequence[str], where: str) -> list[str]:
    """The names matched by any of ``patterns`` (in name order; a pattern matching nothing is refused)."""
    found: list[str] = []
    for pattern in patterns:
        rx = pattern_regex(pattern.lstrip("/"))
        hits = [n for n in names if rx.match(n) and n not in found]
        if not hits and not any(rx.match(n) for n in found):
            raise NoFilesError(f"data_files pattern {pattern!r} matches no file of {where}; check it against the "
                               "repository's file names")
        found += hits
    return sorted(found)


def split_patterns(data_files: Any, what: str = "data_files") -> dict[str, list[str]]:
    """``data_files`` as ``{split: [patterns]}``: a string or list is the train split; a mapping or a list of
    ``{"split": ..., "path": ...}`` names the splits."""
    if isinstance(data_files, str):
        return {"train": [data_files]}
    if isinstance(data_files, dict):
        return {str(k): [v] if isinstance(v, str) else [str(x) for x in v] for k, v in data_files.items()}
    if isinstance(data_files, (list, tuple)) and data_files and all(isinstance(d, dict) for d in data_files):
        out: dict[str, list[str]] = {}
        for entry in data_files:
            if "path" not in entry:
                raise CorruptIndexError(f"{what} entry {entry!r} has no path")
            paths = entry["path"]
            out.setdefault(str(entry.get("split", "train")), []).extend([paths] if isinstance(paths, str) else paths)
        return out
    if isinstance(data_files, (list, tuple)) and data_files and all(isinstance(d, str) for d in data_files):
        return {"train": list(data_files)}
    raise InvalidArgumentError(f"{what}={data_files!r} must be a path or glob, a list of them, or a mapping of "
                               "split name -> paths")


def pattern_layout(data_files: Any, names: Sequence[str], where: str, data_dir: Optional[str] = None) -> Layout:
    """The one subset that ``data_files`` patterns (relative to the directory) select among ``names``."""
    prefix = (data_dir.strip("/") + "/") if data_dir else ""
    splits = {split: match([prefix + p for p in patterns], names, where)
              for split, patterns in split_patterns(data_files).items()}
    return Layout("data_files", {DEFAULT: splits}, DEFAULT)


# -- README configs ------------------------------------------------------------------------------

def front_matter(readme: str) -> Optional[dict]:
    """The YAML block that opens a dataset card, parsed (None without one)."""
    if not readme.startswith("---"):
        return None
    end = readme.find("\n---", 3)
    if end < 0:
        return None
    yaml = require("yaml", "hf", "reading a dataset card's configs")
    try:
        meta = load_bounded(yaml, readme[3:end], "the README.md's YAML header", CorruptIndexError, "dataset card")
    except yaml.YAMLError as exc:
        raise CorruptIndexError(f"the README.md's YAML header cannot be parsed ({exc}); fix the dataset card") from None
    return meta if isinstance(meta, dict) else None


def config_layout(readme: str, names: Sequence[str], where: str) -> Optional[Layout]:
    """The subsets a dataset card's ``configs:`` declares (None when it declares none)."""
    meta = front_matter(readme)
    configs = (meta or {}).get("configs")
    if not configs:
        return None
    if not isinstance(configs, list) or not all(isinstance(c, dict) for c in configs):
        raise CorruptIndexError(f"the configs: of {where}/README.md must be a list of mappings; fix the dataset card")
    subsets, default = {}, None
    for config in configs:
        subset = str(config.get("config_name", DEFAULT))
        data_dir = config.get("data_dir")
        if config.get("data_files") is not None:
            splits = pattern_layout(config["data_files"], names, where, data_dir).subsets[DEFAULT]
        else:
            prefix = str(data_dir or "").strip("/") + "/"
            inside = [n[len(prefix):] for n in names if data_dir and n.startswith(prefix)]
            found = infer_layout(inside).subsets.get(DEFAULT, {}) if inside else {}
            splits = {split: [prefix + n for n in files] for split, files in found.items()}
        subsets[subset] = _ordered(splits)
        if config.get("default"):
            default = subset
    if default is None:
        default = DEFAULT if DEFAULT in subsets else (next(iter(subsets)) if len(subsets) == 1 else None)
    return Layout("configs", subsets, default)


# -- save_to_disk ----------------------------------------------------------------------------------

def _state(state_text: str, where: str) -> tuple[dict, list[str]]:
    """A ``state.json``'s contents and the Arrow files it lists."""
    try:
        state = json.loads(state_text)
        names = [entry["filename"] for entry in state["_data_files"]]
    except (ValueError, KeyError, TypeError) as exc:
        raise CorruptIndexError(f"{where} is not a save_to_disk state.json ({exc!r}); it lists the dataset's Arrow "
                                "files under _data_files: save the dataset again") from None
    if state.get("_indices_data_files"):
        raise CorruptIndexError(f"{where} keeps an indices mapping (an old save_to_disk of a selection); save it "
                                "again with a current datasets, which writes the selected rows")
    for name in names:
        if not isinstance(name, str) or "/" in name or "\\" in name or name.startswith("."):
            raise CorruptIndexError(f"{where} lists {name!r}, which is not a file name in its directory")
    return state, names


def saved_layout(dataset_dict: Optional[str], states: dict) -> Layout:
    """The layout of a ``save_to_disk`` directory: ``dataset_dict`` is ``dataset_dict.json``'s text (None for a
    single Dataset), ``states`` maps each split's directory ('' for a single Dataset) to its ``state.json``."""
    if dataset_dict is None:
        state, names = _state(states[""], "state.json")
        return Layout("save_to_disk", {DEFAULT: {str(state.get("_split") or "train"): names}}, DEFAULT)
    splits = {}
    for split in dict_splits(dataset_dict):
        splits[split] = [f"{split}/{name}" for name in _state(states[split], f"{split}/state.json")[1]]
    return Layout("save_to_disk", {DEFAULT: splits}, DEFAULT)


def dict_splits(dataset_dict: str) -> list[str]:
    """The split names a ``dataset_dict.json`` lists."""
    try:
        splits = json.loads(dataset_dict)["splits"]
        if not all(isinstance(s, str) and s and "/" not in s for s in splits):
            raise TypeError(f"split names {splits!r}")
    except (ValueError, KeyError, TypeError) as exc:
        raise CorruptIndexError(f"dataset_dict.json is not a save_to_disk DatasetDict listing ({exc!r}); save the "
                                "dataset again") from None
    return list(splits)
