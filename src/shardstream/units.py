"""Human-readable sizes and counts ("64mb", "100k")."""

from __future__ import annotations

from .errors import InvalidArgumentError

_BYTE_UNITS = {
    "b": 1, "kb": 1 << 10, "mb": 1 << 20, "gb": 1 << 30, "tb": 1 << 40, "pb": 1 << 50,
    "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40, "pib": 1 << 50,
}
_COUNT_UNITS = {"": 1, "k": 10**3, "m": 10**6, "b": 10**9, "t": 10**12}


def _finite(number: float, name: str) -> int:
    if isinstance(number, int):
        return number
    if number != number or number in (float("inf"), float("-inf")):
        raise InvalidArgumentError(f"{name}={number!r} is not a finite number")
    return int(number)


def _split(text: str) -> tuple[str, str]:
    text = text.strip().lower().replace("_", "")
    i = len(text)
    while i > 0 and text[i - 1].isalpha():
        i -= 1
    return text[:i].strip(), text[i:]


def parse_bytes(value: int | str, name: str = "size") -> int:
    """Parse ``1024``, ``"64mb"``, ``"1.5gb"`` or ``"512kib"`` into bytes.

    Units are powers of 1024 (as in mosaicml-streaming): ``kb`` = ``kib`` = 1024.
    """
    if isinstance(value, bool):
        raise InvalidArgumentError(f"{name}={value!r} is a bool; give bytes as an int or a string like '64mb'")
    if isinstance(value, (int, float)):
        return _finite(value, name)
    if not isinstance(value, str):
        raise InvalidArgumentError(f"{name}={value!r} should be an int or a string like '64mb'")
    number, unit = _split(value)
    unit = unit or "b"  # a bare number string is bytes, as in mosaicml-streaming
    if unit not in _BYTE_UNITS:
        raise InvalidArgumentError(
            f"{name}={value!r} has unknown unit {unit!r}; use one of {sorted(_BYTE_UNITS)}, e.g. '64mb'"
        )
    try:
        return _finite(float(number) * _BYTE_UNITS[unit], name)
    except ValueError:
        raise InvalidArgumentError(f"{name}={value!r} is not a number followed by a unit, e.g. '64mb'") from None


def parse_count(value: int | str, name: str = "count") -> int:
    """Parse ``100``, ``"100k"``, ``"64M"``, ``"2b"`` into an int (powers of 1000)."""
    if isinstance(value, bool):
        raise InvalidArgumentError(f"{name}={value!r} is a bool; give an int or a string like '100k'")
    if isinstance(value, (int, float)):
        return _finite(value, name)
    if not isinstance(value, str):
        raise InvalidArgumentError(f"{name}={value!r} should be an int or a string like '100k'")
    number, unit = _split(value)
    if unit not in _COUNT_UNITS:
        raise InvalidArgumentError(
            f"{name}={value!r} has unknown suffix {unit!r}; use one of k, m, b, t (e.g. '100k')"
        )
    try:
        return _finite(float(number) * _COUNT_UNITS[unit], name)
    except ValueError:
        raise InvalidArgumentError(f"{name}={value!r} is not a number with an optional k/m/b/t suffix") from None


def format_bytes(n: int) -> str:
    """``1536`` -> ``'1.5 KiB'``."""
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(size) < 1024 or unit == "TiB":
            return f"{int(size)} B" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"  # pragma: no cover
