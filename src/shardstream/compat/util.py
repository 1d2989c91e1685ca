"""The helpers of ``streaming.base.util`` that scripts call, with mosaicml-streaming's behaviour."""

from __future__ import annotations

import os
import time

from ..errors import InvalidArgumentError
from ..format.index import INDEX_BASENAME
from ..writing.merge import merge_index

__all__ = ["get_list_arg", "wait_for_file_to_exist", "bytes_to_int", "number_abbrev_to_int",
           "clean_stale_shared_memory", "get_import_exception_message", "merge_index", "get_index_basename"]

_BYTE_UNITS = {"kb": 1 << 10, "mb": 1 << 20, "gb": 1 << 30, "tb": 1 << 40, "pb": 1 << 50, "eb": 1 << 60,
               "zb": 1 << 70, "yb": 1 << 80}
_COUNT_UNITS = {"k": 10**3, "m": 10**6, "b": 10**9, "t": 10**12}


def get_list_arg(text: str) -> list[str]:
    """``"a,b,c"`` -> ``["a", "b", "c"]``; an empty string or None -> ``[]``."""
    return text.split(",") if text else []


def get_index_basename() -> str:
    return INDEX_BASENAME


def _scaled(value, units: dict, what: str) -> int:
    if isinstance(value, (int, float)):
        return int(value)
    text = str(value).lower().strip()
    for suffix, scale in units.items():
        if text.endswith(suffix):
            try:
                return int(float(text[: -len(suffix)]) * scale)
            except ValueError:
                break
    else:
        plain = text[:-1] if what == "bytes" and text.endswith("b") else text
        if plain.isdigit():
            return int(plain)
    suffixes = (['b'] if what == 'bytes' else []) + list(units)
    raise InvalidArgumentError(f"Unsupported value/suffix {value!r}: not a number of {what}. Supported suffix are "
                               f"{suffixes}: use digits with one of them, e.g. '2{list(units)[1]}'")


def bytes_to_int(bytes_str: int | str) -> int:
    """``"1.5kb"`` -> 1536 (units of 1024), ``"100b"`` / ``"100"`` -> 100; ints pass through."""
    return _scaled(bytes_str, _BYTE_UNITS, "bytes")


def number_abbrev_to_int(abbrev_str: int | str) -> int:
    """``"1.5k"`` -> 1500, ``"2m"``, ``"3b"`` (billions), ``"1t"``; ints pass through."""
    return _scaled(abbrev_str, _COUNT_UNITS, "samples")


def clean_stale_shared_memory() -> None:
    """Does nothing: shardstream keeps no shared memory that a crash could leave behind (processes
    coordinate through file locks that die with their holder), so there is nothing to clean."""


def wait_for_file_to_exist(filename: str, poll_interval: float, timeout: float, err_msg: str) -> None:
    """Poll every ``poll_interval`` seconds until ``filename`` exists; RuntimeError after ``timeout``."""
    start = time.monotonic()
    while True:
        time.sleep(poll_interval)
        if os.path.exists(filename):
            time.sleep(poll_interval)
            return
        waited = time.monotonic() - start
        if waited > timeout:
            raise RuntimeError(f"{err_msg}{timeout:.3f} < {waited:.3f} secs.")


def get_import_exception_message(package_name: str, extra_deps: str) -> str:
    """The message for a missing optional dependency, naming the extra that installs it."""
    return (f"{package_name} is needed here but not installed; install it with: "
            f"pip install 'shardstream[{extra_deps}]'")
