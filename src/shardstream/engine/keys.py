"""Item keys: where each item of a processing chain came from, as plan positions.

An item's key is the global plan position of its source sample (an ``int``) for the
source and for the stages that keep one output per input (``map`` with one row per
row, ``filter``, ``shuffle``, column operations). A stage that makes new items from
several inputs keys them by a tuple that names the inputs: a batched ``map`` that
changes the number of rows gives ``("m", (input keys...), row)``, a packer
``("p", ((key, start, stop), ...))``, ``batch`` ``("b", (keys...))``. Any other operation that makes
an item from several inputs keys it with :func:`made_from` (``("g", (input keys...), extra...)``),
which needs nothing of this module. A checkpoint holds
keys, never values: a stage that holds items (a shuffle buffer, a partial pack) saves
their keys, and on resume asks the stage before it to make the values again
(:meth:`~.stage.Stage.recreate`).

Keys cross into JSON as nested lists and come back as tuples (:func:`encode`, :func:`decode`).
"""

from __future__ import annotations

from typing import Any

from ..errors import IncompatibleStateError


def encode(key: Any) -> Any:
    """``key`` as JSON: ints stay ints, tuples become lists (recursively), strings stay strings."""
    if type(key) is int:
        return key
    if isinstance(key, tuple):
        return [encode(k) for k in key]
    if isinstance(key, str):
        return key
    return int(key)  # numpy integers


def decode(obj: Any) -> Any:
    """The key :func:`encode` made ``obj`` from."""
    if type(obj) is int:
        return obj
    if isinstance(obj, list):
        return tuple(decode(k) for k in obj)
    if isinstance(obj, str):
        return obj
    raise IncompatibleStateError(f"the state holds an item key of type {type(obj).__name__} ({obj!r}); "
                                 "was it edited by hand?")


def encode_all(keys) -> list:
    if all(type(k) is int for k in keys):
        return [int(k) for k in keys]
    return [encode(k) for k in keys]


def decode_all(objs) -> list:
    if not isinstance(objs, list):
        raise IncompatibleStateError(f"the state holds {objs!r} where a list of item keys belongs")
    return [decode(o) for o in objs]


def made_from(inputs, *extra) -> tuple:
    """The key of an item made from the items keyed ``inputs`` (in order); ``extra``: ints or strings that tell
    apart several items made from the same inputs (a row number, a piece)."""
    return ("g", tuple(inputs), *extra)


def positions(key: Any) -> list[int]:
    """The source positions an item with ``key`` was made from (its provenance), in order."""
    if type(key) is int:
        return [key]
    out: list[int] = []
    _collect(key, out)
    return out


def _collect(key: Any, out: list[int]) -> None:
    if type(key) is int:
        out.append(key)
        return
    tag = key[0]
    if tag == "m":  # ("m", inputs, row)
        for k in key[1]:
            _collect(k, out)
    elif tag == "p":  # ("p", ((key, start, stop), ...))
        for piece in key[1]:
            _collect(piece[0], out)
    elif tag in ("b", "g"):  # ("b", keys), ("g", inputs, extra...)
        for k in key[1]:
            _collect(k, out)
    else:
        raise IncompatibleStateError(f"unknown item key {key!r}")
