"""What a function does, as JSON-able data: the part of a pipeline's fingerprint a function adds.

A callable with a ``describe()`` method (``Tokenize``, ``ChatTemplateTransform``, ``Pack``)
describes itself. Any other function is described by its qualified name and a digest of its
code (bytecode and constants, recursively through nested code objects) and of the simple
values it closes over or has as defaults (numbers, strings, tuples of them). Editing the
function's body changes the fingerprint; values reached through globals or objects do not,
so give such a function a ``describe()`` when a cache must follow them.
"""

from __future__ import annotations

import functools
import types
from typing import Any

import xxhash

_SIMPLE = (int, float, str, bytes, bool, type(None))


def describe_callable(fn: Any) -> Any:
    own = getattr(fn, "describe", None)
    if callable(own) and not isinstance(fn, type):
        return {"callable": type(fn).__qualname__, "describe": own()}
    if isinstance(fn, functools.partial):
        return {"partial": describe_callable(fn.func), "args": _values(fn.args),
                "keywords": _values(tuple(sorted(fn.keywords.items())))}
    code = getattr(fn, "__code__", None)
    name = getattr(fn, "__qualname__", type(fn).__qualname__)
    if code is None:
        call = getattr(type(fn), "__call__", None)
        code = getattr(call, "__code__", None)
    h = xxhash.xxh64()
    if code is not None:
        _hash_code(code, h)
    h.update(repr(_values(getattr(fn, "__defaults__", None) or ())).encode())
    cells = getattr(fn, "__closure__", None) or ()
    closed = []
    for cell in cells:
        try:
            closed.append(cell.cell_contents)
        except ValueError:
            closed.append(None)
    h.update(repr(_values(tuple(closed))).encode())
    return {"callable": name, "code": h.hexdigest()}


def _hash_code(code: types.CodeType, h) -> None:
    h.update(code.co_code)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            _hash_code(const, h)
        else:
            h.update(repr(_values((const,))).encode())
    h.update(repr(code.co_names).encode())


def _values(values: tuple) -> tuple:
    out = []
    for v in values:
        if isinstance(v, _SIMPLE):
            out.append(v)
        elif isinstance(v, (tuple, list, frozenset)) and all(isinstance(x, _SIMPLE) for x in v):
            out.append(tuple(v))
        elif callable(v) and hasattr(v, "__code__"):
            out.append(describe_callable(v)["code"])
        else:
            out.append(type(v).__qualname__)
    return tuple(out)
