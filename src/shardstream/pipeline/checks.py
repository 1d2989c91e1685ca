"""Checks of configuration values, each raising :class:`~shardstream.errors.ConfigError` that names the
field, the value received and what is allowed; and building a config dataclass from a mapping, refusing
unknown keys with the closest known one."""

from __future__ import annotations

import dataclasses
import difflib
import os
from collections.abc import Mapping
from typing import Any, Optional, Sequence

from ..errors import ConfigError


def bad(owner: str, field: str, detail: str) -> ConfigError:
    """The error of ``owner.field`` (``owner``: the class, or a path such as ``pipeline.load``)."""
    return ConfigError(f"{owner}.{field}: {detail}", field=field, detail=detail)


def shown(value: Any) -> str:
    return f"{value!r:.80} ({type(value).__name__})"


def check_int(owner: str, field: str, value: Any, minimum: int, optional: bool = False) -> None:
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        none = " or null" if optional else ""
        raise bad(owner, field, f"expected an integer >= {minimum}{none}, got {shown(value)}")


def check_number(owner: str, field: str, value: Any, minimum: float = 0.0) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= minimum:
        raise bad(owner, field, f"expected a number >= {minimum:g}, got {shown(value)}")
    return float(value)


def check_bool(owner: str, field: str, value: Any) -> None:
    if not isinstance(value, bool):
        raise bad(owner, field, f"expected true or false, got {shown(value)}")


def check_str(owner: str, field: str, value: Any, optional: bool = False) -> None:
    if value is None and optional:
        return
    if isinstance(value, os.PathLike):
        return
    if not isinstance(value, str) or not value:
        none = " or null" if optional else ""
        raise bad(owner, field, f"expected a non-empty string{none}, got {shown(value)}")


def check_choice(owner: str, field: str, value: Any, choices: Sequence[Any]) -> None:
    if value not in choices or isinstance(value, bool):
        allowed = ", ".join("null" if c is None else repr(c) for c in choices)
        raise bad(owner, field, f"{value!r} is not one of the allowed values: {allowed}")


def check_mapping(owner: str, field: str, value: Any) -> Optional[dict]:
    if value is None:
        return None
    if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
        raise bad(owner, field, f"expected a mapping of option name -> value or null, got {shown(value)}")
    return dict(value)


def check_names(owner: str, field: str, value: Any) -> Optional[tuple]:
    """A list of column names (a tuple), or None."""
    if value is None:
        return None
    if isinstance(value, str) or not isinstance(value, Sequence) or not value \
            or not all(isinstance(v, str) and v for v in value):
        raise bad(owner, field, f"expected a non-empty list of column names or null, got {shown(value)}")
    return tuple(value)


def closest(name: str, allowed: Sequence[str]) -> str:
    """`` did you mean 'x'?`` when ``name`` looks like one of ``allowed``, else nothing."""
    close = difflib.get_close_matches(name, list(allowed), n=1, cutoff=0.6)
    return f" did you mean {close[0]!r}?" if close else ""


def from_mapping(cls: type, data: Any, path: str) -> Any:
    """An instance of the config dataclass ``cls`` from ``data`` (a mapping, or already one), found at
    ``path``; an error's ``field`` is the key's path from there (``load.batch_size``)."""
    if isinstance(data, cls):
        return data
    names = [f.name for f in dataclasses.fields(cls) if f.init]
    if not isinstance(data, Mapping):
        raise ConfigError(f"{path}: expected a mapping with keys {', '.join(names)}, got {shown(data)}",
                          field=path, detail=f"expected a mapping, got {shown(data)}")
    for key in data:
        if key not in names:
            detail = f"unknown key;{closest(str(key), names)} allowed: {', '.join(names)}"
            raise ConfigError(f"{path}.{key}: {detail}", field=f"{path}.{key}", detail=detail)
    required = [f.name for f in dataclasses.fields(cls)
                if f.init and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
    for key in required:
        if key not in data:
            detail = f"missing; {cls.__name__} needs {', '.join(required)}"
            raise ConfigError(f"{path}.{key}: {detail}", field=f"{path}.{key}", detail=detail)
    try:
        return cls(**data)
    except ConfigError as exc:
        raise at(exc, path) from None


def at(exc: ConfigError, path: str) -> ConfigError:
    """``exc`` (whose ``field`` is relative to the object that raised it) with its field placed under
    ``path``."""
    sub = exc.field or ""
    field = f"{path}{sub}" if not sub or sub.startswith("[") else f"{path}.{sub}"
    return ConfigError(f"{field}: {exc.detail}", field=field, detail=exc.detail)


def plain(value: Any) -> Any:
    """``value`` as plain YAML/JSON data: tuples become lists, path-likes strings, mappings dicts."""
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    return value
