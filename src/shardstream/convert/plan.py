"""Units of work (parts) and the manifest that makes a conversion resumable and incremental.

A *part* is a run of inputs written by one worker into ``OUTPUT/part-NNNNN``: consecutive small files
grouped until they hold about ``GROUP_BYTES``, a large Parquet file split into runs of row groups of
about ``SPLIT_BYTES``, and one file per part with ``shard_per_input``. Parts depend on the inputs alone
(never on the number of workers), so a rerun plans the same ones.

The manifest records the settings, the first input's Arrow schema (later inputs are checked against
it) and each part's inputs with their sizes and versions. A rerun compares: the same inputs are done
once their part's ``index.json`` exists; inputs that were not there before become new parts, appended;
an input that changed or disappeared, or other settings, are refused (``overwrite=True`` starts over).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Optional

from ..errors import ConvertMismatchError
from .inputs import InputFile, Inputs
from .schematext import schema_text
from ..writing.parts import part_name

MANIFEST_VERSION = 1
GROUP_BYTES = 32 << 20
SPLIT_BYTES = 256 << 20


@dataclass
class Part:
    """One unit of work: the part's name and its inputs (``row_groups``: a Parquet file's share)."""

    name: str
    inputs: list[dict] = field(default_factory=list)

    def record(self) -> dict:
        return {"part": self.name, "inputs": self.inputs}


def plan_parts(inputs: Inputs, files: list[InputFile], first_number: int, shard_per_input: bool,
               row_groups_of) -> list[Part]:
    """Parts for ``files`` (in order), numbered from ``first_number``. ``row_groups_of(file)`` gives a large
    Parquet file's ``(rows, bytes)`` per row group."""
    parts: list[Part] = []
    group: list[dict] = []
    group_bytes = 0

    def close() -> None:
        nonlocal group, group_bytes
        if group:
            parts.append(Part(part_name(first_number + len(parts)), group))
        group, group_bytes = [], 0

    for f in files:
        if shard_per_input:
            group = [f.record()]
            close()
            continue
        if inputs.kind == "parquet" and f.size > 2 * SPLIT_BYTES:
            close()
            for lo, hi in _row_group_runs(row_groups_of(f), f.size):
                group = [{**f.record(), "row_groups": [lo, hi]}]
                close()
            continue
        group.append(f.record())
        group_bytes += f.size
        if group_bytes >= GROUP_BYTES:
            close()
    close()
    return parts


def _row_group_runs(groups: list[tuple[int, int]], file_size: int) -> list[tuple[int, int]]:
    """``[lo, hi)`` runs of row groups holding about ``SPLIT_BYTES`` of the file each."""
    total = sum(b for _, b in groups) or 1
    runs, lo, held = [], 0, 0
    for g, (_, nbytes) in enumerate(groups):
        held += nbytes * file_size // total
        if held >= SPLIT_BYTES:
            runs.append((lo, g + 1))
            lo, held = g + 1, 0
    if lo < len(groups) or not runs:
        runs.append((lo, len(groups)))
    return runs


def new_manifest(settings: dict, inputs: Inputs, schema, parts: list[Part]) -> dict:
    return {"shardstream_convert": MANIFEST_VERSION, "settings": settings, "kind": inputs.kind,
            "root": inputs.root, "label_names": inputs.label_names, "schema": schema_text(schema),
            "parts": [p.record() for p in parts]}


def rebased(inputs: Inputs, root: str) -> Inputs:
    """``inputs`` named relative to ``root`` (the manifest's), so that a listing whose common directory moved
    (a new file elsewhere) still names the files converted before as it did; a file outside ``root`` is named
    by its whole path or URL."""
    prefix = root.rstrip("/" + os.sep) + ("/" if "://" in root else os.sep)
    files = [InputFile(f.url[len(prefix):].replace(os.sep, "/") if f.url.startswith(prefix) else f.url,
                       f.url, f.size, f.version) for f in inputs.files]
    return Inputs(inputs.kind, root, files, inputs.label_names)


def check_settings(manifest: dict, settings: dict, where: str) -> None:
    """Refuse a rerun whose settings differ from the ones the output was converted with."""
    if manifest.get("shardstream_convert") != MANIFEST_VERSION:
        raise ConvertMismatchError(f"{where} was written by another version of the converter; convert again "
                                   "with overwrite=True (--overwrite)")
    recorded = manifest["settings"]
    for key, value in settings.items():
        if recorded.get(key) != value:
            raise ConvertMismatchError(
                f"{where} was converted with {key}={recorded.get(key)!r}, and this run asks for {value!r}; rerun "
                f"with the same settings to finish or extend it, or convert again with overwrite=True (--overwrite)")


def new_files(manifest: dict, inputs: Inputs, where: str) -> list[InputFile]:
    """The inputs the manifest does not list yet; refuses one it lists that changed or is gone."""
    recorded: dict[str, dict] = {}
    for part in manifest["parts"]:
        for rec in part["inputs"]:
            recorded[rec["name"]] = rec
    current = {f.name: f for f in inputs.files}
    for name, rec in recorded.items():
        f: Optional[InputFile] = current.get(name)
        if f is None:
            raise ConvertMismatchError(f"input {name} was converted into {where} but is no longer among the inputs; "
                                       "give the same inputs (new ones may be added), or overwrite=True (--overwrite)")
        if (f.size, f.version) != (rec["size"], rec["version"]):
            raise ConvertMismatchError(f"input {name} changed since it was converted into {where} (size or version "
                                       "differs); its rows are already in the output: convert again with "
                                       "overwrite=True (--overwrite)")
    return [f for f in inputs.files if f.name not in recorded]


def manifest_parts(manifest: dict) -> list[Part]:
    return [Part(p["part"], p["inputs"]) for p in manifest["parts"]]


def next_number(parts: list[Part]) -> int:
    return max((int(p.name.rsplit("-", 1)[1]) for p in parts), default=-1) + 1


def settings_of(**values: Any) -> dict:
    """The settings a manifest records (JSON values)."""
    return {k: (list(v) if isinstance(v, tuple) else v) for k, v in values.items()}
