"""JSON rows as shardstream samples: parsing lines in bulk, the columns of a file, and which rows fit them.

Parsing uses orjson when it is installed (``pip install 'shardstream[json]'``) and the standard
library's :mod:`json` otherwise; a line orjson refuses is tried again with :mod:`json`, so what
is a valid row is the same with or without orjson (``NaN``, integers beyond 64 bits).

**The columns of a file** are the keys of its first :data:`SCHEMA_ROWS` rows (fewer if those are
longer than :data:`SCHEMA_BYTES` together), in the order they first appear; ``columns=`` names
them instead. A column's kind comes from those rows' values:

========================================  =====================  ======================
values in the first rows                  kind (column batches)  type (must agree)
========================================  =====================  ======================
integers (64-bit)                         ``array <i8``          ``int64``
numbers, some with a fraction             ``array <f8``          ``double``
``true`` / ``false``                      ``array |b1``          ``bool``
lists of integers                         ``ragged <i8``         ``list<int64>``
lists of numbers                          ``ragged <f8``         ``list<double>``
anything else (strings, objects, mixed)   ``list``               ``json``
========================================  =====================  ======================

``null`` and a missing key are ``None`` in samples, whatever the column. **A row fits** when it
is a JSON object, its keys are among the columns (any keys when ``columns=`` is given: the
others are left out), and each value fits its column's kind (an integer where a number is
expected is read as a float; a fraction where integers are expected does not fit). A row that
does not fit is a *bad row*: ``on_bad_rows="raise"`` refuses it naming its file and line,
``"skip"`` leaves it out and counts it.

In samples, lists of numbers are numpy arrays (int64 when all are integers, else float64; in a
list column, an empty list stays ``[]``), nested objects are dicts.
"""

from __future__ import annotations

import contextlib
import gc
import itertools
import json
import sys
from operator import itemgetter
from typing import Any, Iterator, Optional, Sequence

import numpy as np

from .columnrows import Column

try:  # optional: a faster parser with the same results
    import orjson as _orjson
except ImportError:  # pragma: no cover - depends on the environment
    _orjson = None

SCHEMA_ROWS = 1000  # the rows a file's columns and their kinds are taken from
SCHEMA_BYTES = 8 << 20  # ... unless they are longer: then those in this many bytes
INT_MIN, INT_MAX = -(1 << 63), (1 << 63) - 1
FLOAT_MAX = int(sys.float_info.max)
GENERIC = ("list", "", ())
_NONE = type(None)
_TYPE_NAMES = {dict: "an object", list: "a list", str: "a string", int: "an integer", float: "a number",
               bool: "a boolean", _NONE: "null"}
_KIND_TYPES = {("array", "<i8"): "int64", ("array", "<f8"): "double", ("array", "|b1"): "bool",
               ("ragged", "<i8"): "list<int64>", ("ragged", "<f8"): "list<double>"}
_KIND_WORDS = {"int64": "an integer", "double": "a number", "bool": "true or false",
               "list<int64>": "a list of integers", "list<double>": "a list of numbers"}


def parse(text: Any) -> tuple[Any, Optional[str]]:
    """``(value, None)`` for valid JSON ``text`` (bytes or a memoryview), else ``(None, why)``."""
    if _orjson is not None:
        try:
            return _orjson.loads(text), None
        except _orjson.JSONDecodeError:
            pass
    try:
        return json.loads(bytes(text)), None
    except ValueError as exc:  # UnicodeDecodeError is a ValueError
        return None, f"it is not valid JSON ({exc})"
    except RecursionError:
        return None, ("it is nested deeper than a row may be (orjson parses 1,024 levels, Python's json module about "
                      f"{sys.getrecursionlimit()} less the calls under way)")


def _split_lines(data: bytes) -> list[bytes]:
    lines = data.split(b"\n")
    if data.endswith(b"\n"):
        lines.pop()
    return lines


def parse_lines(data: bytes) -> Optional[list]:
    """The values of every line of ``data`` (whole lines, split at newlines) when orjson parses each (then no
    line is blank or bad), else None."""
    if _orjson is None:
        return None
    try:
        return list(map(_orjson.loads, _split_lines(data)))
    except _orjson.JSONDecodeError:
        return None


def parse_many(data: bytes, units: np.ndarray, tried: bool = False) -> tuple[list, dict[int, str]]:
    """The values of lines ``units`` (indices) of ``data`` (whole lines, split at newlines), and ``{k: why}``
    of those that are not valid JSON (``k`` an index into ``units``). ``tried``: :func:`parse_lines` failed
    on ``data`` already (it is not tried again)."""
    lines = _split_lines(data)
    some = len(units) != len(lines)
    if some:
        lines = [lines[k] for k in units.tolist()]
    out: list = []
    bad: dict[int, str] = {}
    if _orjson is not None:
        fast, error = _orjson.loads, _orjson.JSONDecodeError
        if some or not tried:
            try:
                return list(map(fast, lines)), bad
            except error:
                pass
        for k, line in enumerate(lines):
            try:
                out.append(fast(line))
                continue
            except error:
                pass
            value, why = parse(line)
            out.append(value)
            if why is not None:
                bad[k] = why
        return out, bad
    for k, line in enumerate(lines):
        value, why = parse(line)
        out.append(value)
        if why is not None:
            bad[k] = why
    return out, bad


@contextlib.contextmanager
def no_gc() -> Iterator[None]:
    """The cyclic garbage collector paused: parsing makes millions of objects and no cycles, and each
    collection it would trigger walks them all (this halves the time of decoding a piece)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def type_name(value: Any) -> str:
    return _TYPE_NAMES.get(type(value), type(value).__name__)


# -- the columns of a file ---------------------------------------------------------------------

def infer_columns(rows: list, columns: Optional[Sequence[str]]) -> tuple[tuple, tuple, tuple]:
    """``(names, types, kinds)`` from the first rows (objects) of a file; ``columns`` names the columns."""
    names = tuple(columns) if columns is not None else tuple(dict.fromkeys(k for r in rows for k in r))
    kinds = tuple(kind_of([r.get(name) for r in rows]) for name in names)
    types = tuple(_KIND_TYPES.get(k[:2], "json") for k in kinds)
    return names, types, kinds


def kind_of(values: list) -> tuple:
    """The kind of a column whose first rows hold ``values`` (see the module docstring)."""
    present = [v for v in values if v is not None]
    found = set(map(type, present))
    if not found:
        return GENERIC
    if found == {bool}:
        return ("array", "|b1", ())
    if found <= {int, float}:
        dtype = "<i8" if found == {int} else "<f8"
        return ("array", dtype, ()) if _in_range(dtype, present, int in found) else GENERIC
    if found == {list}:
        flat = list(itertools.chain.from_iterable(present))
        inner = set(map(type, flat))
        if inner and inner <= {int, float}:
            dtype = "<i8" if inner == {int} else "<f8"
            return ("ragged", dtype, ()) if _in_range(dtype, flat, int in inner) else GENERIC
    return GENERIC


def _int_fits(v: Any) -> bool:
    return type(v) is int and INT_MIN <= v <= INT_MAX


def _float_fits(v: Any) -> bool:
    return type(v) is float or (type(v) is int and -FLOAT_MAX <= v <= FLOAT_MAX)


_FITS = {"<i8": _int_fits, "<f8": _float_fits, "|b1": lambda v: type(v) is bool}


def fits(kind: tuple, value: Any) -> bool:
    """Whether ``value`` (not None) fits a column of ``kind``."""
    if kind[0] == "array":
        return _FITS[kind[1]](value)
    if kind[0] == "ragged":
        return type(value) is list and all(map(_FITS[kind[1]], value))
    return True


def misfit(name: str, kind: tuple, value: Any) -> str:
    want = _KIND_WORDS[_KIND_TYPES[kind[:2]]]
    return (f"column {name!r} holds {shown(value)} ({type_name(value)}), but {want} in the file's first rows, which "
            "decided its type")


def shown(value: Any) -> str:
    """``value`` as JSON, cut to 60 characters, for an error message."""
    try:
        text = json.dumps(value, default=str)
    except RecursionError:
        return "a value nested too deep to show"
    return text if len(text) <= 60 else text[:57] + "..."


# -- which rows fit, and their columns -----------------------------------------------------------

def decode_rows(rows: list, names: Sequence[str], kinds: Sequence[tuple],
                strict: bool) -> tuple[list[Column], dict[int, str], bool]:
    """The columns of ``rows`` without those that do not fit them, ``{index: why}`` of those (see the
    module docstring), and whether ``rows`` already are the samples: every row an object with exactly the
    columns' keys in their order, whose values the columns keep as they are (no integer read as a float,
    no list made an array). A column is checked by converting it at once; value by value only when that
    fails."""
    bad: dict[int, str] = {}
    objects = set(map(type, rows)) <= {dict}
    if not objects:
        bad.update((i, f"it is {type_name(r)}, not a JSON object") for i, r in enumerate(rows) if type(r) is not dict)
    exact = objects and _exact_keys(rows, tuple(names))
    if strict and not exact:
        allowed = frozenset(names)
        for i, r in enumerate(rows):
            if i not in bad and not r.keys() <= allowed:
                extra = next(k for k in r if k not in allowed)
                bad[i] = (f"it has a key {extra!r}, which the file's first rows do not have (its columns are "
                          f"{list(names)}); give columns=[...] to name the columns to read")
    gathered, columns = [], []
    for name, kind in zip(names, kinds):
        if exact:
            values = list(map(itemgetter(name), rows))
        elif objects:
            values = [r.get(name) for r in rows]
        else:
            values = [r.get(name) if type(r) is dict else None for r in rows]
        column = _build(name, kind, values)
        if column is None:
            bad.update((i, misfit(name, kind, v)) for i, v in enumerate(values)
                       if v is not None and i not in bad and not fits(kind, v))
        gathered.append(values)
        columns.append(column)
    if bad:
        columns = [_build(name, kind, [v for i, v in enumerate(values) if i not in bad])
                   for name, kind, values in zip(names, kinds, gathered)]
        return columns, bad, False
    return columns, bad, exact and all(c.values is v for c, v in zip(columns, gathered))


def _exact_keys(rows: list, names: tuple) -> bool:
    """Whether every row (a dict) has exactly the keys ``names``, in that order (one C-level pass, tried
    when the first row has them)."""
    if not rows or not names or tuple(rows[0]) != names:
        return False
    return set(map(tuple, rows)) == {names}


def _build(name: str, kind: tuple, values: list) -> Optional[Column]:
    """The decoded column of ``values``, or None if some value does not fit ``kind``."""
    found = set(map(type, values))
    if kind[0] == "array":
        if not found <= _ALLOWED[kind[1]]:
            return None
        try:
            return _numbers(name, values, np.dtype(kind[1]), found)
        except OverflowError:
            return None
    if kind[0] == "ragged":
        if not found <= {list, _NONE}:
            return None
        try:
            return _lists(name, values, np.dtype(kind[1]))
        except (OverflowError, TypeError):
            return None
    return Column(name, [plain(v) for v in values] if found & _NESTED else values)


_ALLOWED = {"<i8": {int, _NONE}, "<f8": {int, float, _NONE}, "|b1": {bool, _NONE}}


def _in_range(dtype: str, values: list, ints: bool) -> bool:
    if not values or not ints:
        return True
    low, high = (INT_MIN, INT_MAX) if dtype == "<i8" else (-FLOAT_MAX, FLOAT_MAX)
    return low <= min(values) and max(values) <= high


def _null_mask(values: list, found: Optional[set] = None) -> Optional[np.ndarray]:
    if (_NONE not in found) if found is not None else (None not in values):
        return None
    return np.fromiter((v is None for v in values), bool, len(values))


def _numbers(name: str, values: list, dtype: np.dtype, found: set) -> Column:
    nulls = _null_mask(values, found)
    filler = dtype.type(0)
    array = np.array(values if nulls is None else [filler if v is None else v for v in values], dtype)
    if dtype.kind == "f" and int in found:  # integers in a float column are read as floats
        values = array.tolist()
        if nulls is not None:
            for i in np.flatnonzero(nulls).tolist():
                values[i] = None
    return Column(name, values, array=array, nulls=nulls)


def _lists(name: str, values: list, dtype: np.dtype) -> Column:
    """A column of lists of numbers (raises TypeError or OverflowError for a value that is not one)."""
    nulls = _null_mask(values)
    present = values if nulls is None else [v if v is not None else () for v in values]
    lengths = np.fromiter(map(len, present), np.int64, len(present))
    offsets = np.zeros(len(present) + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    items = list(itertools.chain.from_iterable(present))
    if not set(map(type, items)) <= _ALLOWED[dtype.str] - {_NONE}:
        raise TypeError("not a list of numbers")
    flat = np.array(items, dtype).reshape(-1)
    bounds = offsets.tolist()
    rows = [flat[a:b] for a, b in zip(bounds, bounds[1:])]
    if nulls is not None:
        for i in np.flatnonzero(nulls).tolist():
            rows[i] = None
    return Column(name, rows, nulls=nulls, flat=flat, offsets=offsets)


_NESTED = {list, dict}
_DEEP = 64  # the nesting levels plain() goes through by recursion; deeper ones by a stack of its own


def plain(value: Any, depth: int = 0) -> Any:
    """A JSON value as samples give it: lists of numbers as numpy arrays, objects as dicts of such values.
    Any depth the parser gives (orjson's 1,024 levels) converts: past :data:`_DEEP` levels without recursion."""
    t = type(value)
    if t is list:
        if value:
            array = _number_array(value)
            if array is not None:
                return array
        if depth == _DEEP:
            return _plain_deep(value)
        return [plain(v, depth + 1) for v in value]
    if t is dict:
        if set(map(type, value.values())) & _NESTED:
            if depth == _DEEP:
                return _plain_deep(value)
            return {k: plain(v, depth + 1) for k, v in value.items()}
    return value


def _number_array(value: list) -> Optional[np.ndarray]:
    """A non-empty list of numbers as an int64 or float64 array, else None."""
    found = set(map(type, value))
    if found <= {int, float}:
        dtype = "<i8" if found == {int} else "<f8"
        if _in_range(dtype, value, int in found):
            return np.array(value, dtype)
    return None


def _plain_deep(value: Any) -> Any:
    """:func:`plain` of a list or dict, level by level from a stack of what is still to convert."""
    out = _level(value)
    todo = [(value, out)]
    while todo:
        given, made = todo.pop()
        for key, v in (enumerate(given) if type(given) is list else given.items()):
            if type(v) is list or type(v) is dict:
                made[key] = new = _level(v)
                if new is not v and type(new) is type(v):  # a copy whose items are still to convert
                    todo.append((v, new))
    return out


def _level(value: Any) -> Any:
    """:func:`plain` of one list or dict but for the lists and dicts in it: then a copy, to convert them in."""
    if type(value) is list:
        array = _number_array(value) if value else None
        return array if array is not None else list(value)
    return dict(value) if set(map(type, value.values())) & _NESTED else value
