"""The first input's Arrow schema as text in the manifest, and back.

A schema is kept as its Arrow IPC bytes, in base64. Arrow's IPC reader refuses a schema nested more
than about a hundred levels (the depth limit of its flatbuffers verifier), which JSON rows reach (orjson
parses 1,024 levels): such a schema is kept as :data:`FIELDS` and base64 of a JSON object listing its
fields in preorder, one entry per list, struct or map, and each other type as a one-field IPC schema.
Either reads back as the same schema, metadata included; neither walks the schema by recursion.
"""

from __future__ import annotations

import base64
import json
from typing import Any, Optional

from ..format.arrowrows import pyarrow

FIELDS = "fields:"  # how a schema kept field by field starts


def schema_text(schema) -> str:
    data = schema.serialize().to_pybytes()
    try:
        _ipc_schema(data)
        return _b64(data)
    except (OSError, pyarrow().ArrowInvalid):  # too deep for Arrow's IPC reader ("Invalid flatbuffers message")
        return FIELDS + _b64(json.dumps(_nodes(schema)).encode())


def schema_of(text: str):
    if not text.startswith(FIELDS):
        return _ipc_schema(base64.b64decode(text))
    kept = json.loads(base64.b64decode(text[len(FIELDS):]))
    return pyarrow().schema(_fields(kept["nodes"]), metadata=_unmeta(kept["metadata"]))


def _ipc_schema(data: bytes):
    pa = pyarrow()
    return pa.ipc.read_schema(pa.py_buffer(data))


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _nodes(schema) -> dict:
    """The fields of ``schema`` in preorder: ``[kind, name, nullable, metadata, size or keys_sorted, children]``
    for a list, struct or map, ``["leaf", one-field IPC schema]`` for any other."""
    pa = pyarrow()
    nodes: list = []
    todo = list(reversed(list(schema)))
    while todo:
        field = todo.pop()
        kind, children, extra = _shape(field.type)
        if kind == "leaf":
            nodes.append(["leaf", _b64(pa.schema([field]).serialize().to_pybytes())])
            continue
        nodes.append([kind, field.name, field.nullable, _meta(field.metadata), extra, len(children)])
        todo.extend(reversed(children))
    return {"metadata": _meta(schema.metadata), "nodes": nodes}


def _shape(t) -> tuple[str, list, Any]:
    types = pyarrow().types
    if types.is_map(t):
        return "map", [t.key_field, t.item_field], t.keys_sorted
    if types.is_fixed_size_list(t):
        return "fixed_size_list", [t.value_field], t.list_size
    if types.is_list(t) or types.is_large_list(t):
        return ("list" if types.is_list(t) else "large_list"), [t.value_field], None
    if types.is_struct(t):
        return "struct", [t.field(i) for i in range(t.num_fields)], None
    return "leaf", [], None


def _fields(nodes: list) -> list:
    """The top-level fields that :func:`_nodes` listed, built from the innermost out."""
    pa = pyarrow()
    built: list = []
    for node in reversed(nodes):
        if node[0] == "leaf":
            built.append(_ipc_schema(base64.b64decode(node[1])).field(0))
            continue
        kind, name, nullable, meta, extra, n = node
        children = [built.pop() for _ in range(n)]
        if kind == "map":
            t = pa.map_(children[0], children[1], keys_sorted=extra)
        elif kind == "struct":
            t = pa.struct(children)
        elif kind == "large_list":
            t = pa.large_list(children[0])
        else:
            t = pa.list_(children[0], extra if kind == "fixed_size_list" else -1)
        built.append(pa.field(name, t, nullable, _unmeta(meta)))
    return built[::-1]


def _meta(metadata: Optional[dict]) -> Optional[list]:
    return None if metadata is None else [[_b64(k), _b64(v)] for k, v in metadata.items()]


def _unmeta(kept: Optional[list]) -> Optional[dict]:
    return None if kept is None else {base64.b64decode(k): base64.b64decode(v) for k, v in kept}
