"""Pipeline configurations in YAML files, and ``key.path=value`` overrides (the command line's ``--set``).

PyYAML is imported on first use; without it a :class:`~shardstream.errors.MissingDependencyError`
names the ``yaml`` extra. A file holds the fields of :class:`~.config.PipelineConfig`, optionally under
a top-level ``pipeline:`` key.
"""

from __future__ import annotations

import os
import re
from typing import Any, Optional, Sequence

from ..errors import ConfigError, require
from ..yamlsafe import load_bounded
from .config import PipelineConfig

_INDEX = re.compile(r"\[(\d+)\]")


def yaml_module():
    return require("yaml", "yaml", "reading and writing pipeline configurations in YAML")


def read_yaml(path: str) -> Any:
    """The data of the YAML file ``path``; errors name the file (and the line of a syntax error)."""
    yaml = yaml_module()
    path = os.fspath(path)
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the pipeline configuration ({exc.strerror or exc}); "
                          "give the path of a YAML file") from None
    try:
        data = load_yaml(text, path)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError(f"{path}:{where}: not valid YAML ({problem}); fix the file") from None
    if data is None:
        raise ConfigError(f"{path}: the file is empty; it should hold a pipeline configuration "
                          "(datasets: [...], and the stages)")
    return data


def load_yaml(text: str, where: str) -> Any:
    """The data of the YAML ``text`` (PyYAML's safe loader); a text whose aliases expand it past
    :data:`~shardstream.yamlsafe.MAX_ALIAS_EXPANSION` values or make it recursive is a :class:`ConfigError`
    naming ``where``."""
    return load_bounded(yaml_module(), text, where, ConfigError, "pipeline configuration")


def config_from_yaml(path: str, overrides: Sequence[str] = ()) -> PipelineConfig:
    """The :class:`PipelineConfig` of the YAML file ``path``, with ``overrides`` (``"load.batch_size=16"``)
    applied first."""
    data = read_yaml(path)
    if isinstance(data, dict) and set(data) == {"pipeline"}:
        data = data["pipeline"]
    return PipelineConfig.from_dict(apply_overrides(data, overrides))


def config_to_yaml(config: PipelineConfig, path: Optional[str] = None) -> str:
    """``config`` as YAML text (under a ``pipeline:`` key), also written to ``path`` when given."""
    yaml = yaml_module()
    text = yaml.safe_dump({"pipeline": config.to_dict()}, sort_keys=False, default_flow_style=False)
    if path is not None:
        with open(os.fspath(path), "w", encoding="utf-8") as f:
            f.write(text)
    return text


def apply_overrides(data: Any, overrides: Sequence[str]) -> Any:
    """``data`` with each ``key.path=value`` of ``overrides`` set; ``value`` is read as YAML (``16`` is a
    number, ``true`` a boolean, ``[1, 2]`` a list); list items are addressed ``datasets[0].weight`` or
    ``datasets.0.weight``; a leading ``pipeline.`` is optional."""
    if not overrides:
        return data
    yaml = yaml_module()
    if not isinstance(data, dict):
        raise ConfigError(f"pipeline: expected a mapping of the pipeline's fields, got {type(data).__name__}")
    for item in overrides:
        key, sep, text = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--set {item!r}: expected key.path=value, e.g. load.batch_size=16")
        try:
            value = load_yaml(text, f"--set {item!r}")
        except yaml.YAMLError:
            value = text
        _set(data, _parts(key.strip()), value, item)
    return data


def _parts(key: str) -> list:
    parts: list = []
    for piece in _INDEX.sub(r".\1", key).split("."):
        if piece == "":
            continue
        parts.append(int(piece) if piece.isdigit() else piece)
    if parts and parts[0] == "pipeline":
        parts = parts[1:]
    return parts


def _set(data: dict, parts: list, value: Any, item: str) -> None:
    if not parts:
        raise ConfigError(f"--set {item!r}: name a field, e.g. load.batch_size=16")
    node: Any = data
    for i, part in enumerate(parts[:-1]):
        nxt = parts[i + 1]
        node = _child(node, part, {} if isinstance(nxt, str) else [], item)
    last = parts[-1]
    if isinstance(node, list):
        if not isinstance(last, int) or last >= len(node):
            raise ConfigError(f"--set {item!r}: {last!r} is not an index of a list of {len(node)} items")
        node[last] = value
    elif isinstance(node, dict) and isinstance(last, str):
        node[last] = value
    else:
        raise ConfigError(f"--set {item!r}: {last!r} does not name a field there")


def _child(node: Any, part: Any, empty: Any, item: str) -> Any:
    if isinstance(node, list):
        if not isinstance(part, int) or part >= len(node):
            raise ConfigError(f"--set {item!r}: {part!r} is not an index of a list of {len(node)} items")
        return node[part]
    if not isinstance(node, dict) or not isinstance(part, str):
        raise ConfigError(f"--set {item!r}: {part!r} does not name a field there")
    if node.get(part) is None:
        node[part] = empty
    return node[part]
