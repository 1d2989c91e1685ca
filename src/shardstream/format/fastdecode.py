"""Per-schema sample decoders for the hot path.

For each shard schema we generate (once, with ``exec``, as ``dataclasses`` and
``namedtuple`` do) a function ``decode(begin, end) -> dict`` that reads one sample
at absolute offsets of a shard buffer: one ``struct`` call for the size header,
straight-line position arithmetic, builtins for ``int``/``str``/``bytes`` columns
and ``np.frombuffer`` views for arrays. No per-column loop, no per-sample slicing
of the size header, no intermediate objects.

Any inconsistency (sizes that do not add up, a damaged array header, invalid UTF-8)
raises :class:`CorruptShardError`.
"""

from __future__ import annotations

import struct
from typing import Any, Callable, Optional

import numpy as np

from ..errors import CorruptShardError, ShardstreamError
from .encodings import Encoding, Int, NDArray, Scalar, Str, Bytes

_SHAPE_STRUCTS = [struct.Struct("<B"), struct.Struct("<H"), struct.Struct("<I"), struct.Struct("<Q")]


def _ndarray_decoder(mv: memoryview, base: int, enc: NDArray):
    """``f(a, z)``: the fixed-shape array stored at ``mv[a:z]``, a view when aligned, else a copy."""
    dtype = enc.np_dtype
    isz = dtype.itemsize
    frombuffer = np.frombuffer
    fixed_shape = enc.shape

    count = int(np.prod(fixed_shape))
    reshape = len(fixed_shape) > 1

    def fixed(a: int, z: int):
        arr = frombuffer(mv, dtype, count, a)
        if (base + a) % isz:
            arr = arr.copy()
        return arr.reshape(fixed_shape) if reshape else arr

    return fixed


def make_sample_decoder(
    names: tuple[str, ...],
    encodings: tuple[Encoding, ...],
    sizes: tuple[Any, ...],
    mv: memoryview,
    base: int,
    corrupt: Callable[[str], Exception],
    wanted: Optional[frozenset] = None,
) -> tuple[Callable[[int, int], dict], Callable[[int], dict]]:
    """Build ``decode(begin, end)`` and ``get(i)`` for samples stored in ``mv`` (whose address is ``base``).

    ``wanted``: decode only these columns (the others are skipped, their sizes still checked).
    """
    n_var = sum(1 for s in sizes if s is None)
    env: dict[str, Any] = {
        "mv": mv, "corrupt": corrupt, "CorruptShardError": CorruptShardError,
        "ShardstreamError": ShardstreamError, "struct_error": struct.error,
        "_head": struct.Struct(f"<{n_var}I").unpack_from, "_q": struct.Struct("<q").unpack_from,
    }
    lines = ["def decode(begin, end):", "    try:"]
    var_names = [f"s{k}" for k in range(n_var)]
    if n_var:
        lines.append(f"        {', '.join(var_names)}{',' if n_var == 1 else ''} = _head(mv, begin)")
    lines.append(f"        p0 = begin + {4 * n_var}")
    k_var = 0
    exprs = []
    body: list[str] = []  # statements that run after the size check, before the dict is built
    for k, (name, enc, size) in enumerate(zip(names, encodings, sizes)):
        if size is None:
            lines.append(f"        p{k + 1} = p{k} + {var_names[k_var]}")
            k_var += 1
        else:
            lines.append(f"        p{k + 1} = p{k} + {size}")
        a, z = f"p{k}", f"p{k + 1}"
        if wanted is not None and name not in wanted:
            continue
        if type(enc) is Int:
            expr = f"_q(mv, {a})[0]"
        elif type(enc) is Str:
            expr = f"str(mv[{a}:{z}], 'utf-8')"
        elif type(enc) is Bytes:
            expr = f"bytes(mv[{a}:{z}])"
        elif isinstance(enc, Scalar) and enc.is_float:
            env[f"F{k}"] = np.frombuffer
            env[f"DT{k}"] = enc.np_dtype
            expr = f"F{k}(mv, DT{k}, 1, {a})[0]"
        elif isinstance(enc, Scalar):
            env[f"T{k}"] = enc.scalar_type
            env[f"S{k}"] = enc.struct.unpack_from
            expr = f"T{k}(S{k}(mv, {a})[0])"
        elif isinstance(enc, NDArray) and enc.dtype is not None and enc.shape is None:
            # 1-D arrays inline (the common token case); other shapes via the general decoder
            isz = enc.np_dtype.itemsize
            env[f"D{k}"] = enc.decode
            env[f"DT{k}"] = enc.np_dtype
            env["_fb"], env["_ss"], env["_base"] = np.frombuffer, [x.unpack_from for x in _SHAPE_STRUCTS], base
            body += [
                f"        h = mv[{a}]",
                "        if h >> 2 == 1:",
                f"            (n,) = _ss[h & 3](mv, {a} + 1)",
                f"            q = {a} + 1 + (1 << (h & 3))",
                f"            if n * {isz} != {z} - q:",
                f"                raise corrupt(f'a {enc.name} value of {{n}} elements does not fill its {{{z} - q}} bytes')",
                f"            v{k} = _fb(mv, DT{k}, n, q)",
                f"            if (_base + q) % {isz}:",
                f"                v{k} = v{k}.copy()",
                "        else:",
                f"            v{k} = D{k}(mv[{a}:{z}])",
            ]
            expr = f"v{k}"
        elif isinstance(enc, NDArray) and enc.dtype is not None:  # fixed shape
            env[f"D{k}"] = _ndarray_decoder(mv, base, enc)
            expr = f"D{k}({a}, {z})"
        else:
            env[f"D{k}"] = enc.decode
            expr = f"D{k}(mv[{a}:{z}])"
        exprs.append(f"{name!r}: {expr}")
    last = f"p{len(names)}"
    lines.append(f"        if {last} != end:")
    lines.append(f"            raise corrupt(f'a sample\\'s column sizes add to {{{last} - begin}} bytes, "
                 f"the sample is {{end - begin}}')")
    lines += body
    lines.append("        return {" + ", ".join(exprs) + "}")
    lines.append("    except ShardstreamError:")
    lines.append("        raise")
    lines.append("    except (ValueError, IndexError, struct_error, UnicodeDecodeError) as exc:")
    lines.append("        raise corrupt(f'a sample could not be decoded ({type(exc).__name__}: {exc})') from None")
    # get(i): sample i of the shard, reading its offsets from the table (i must be in range).
    lines += ["", "def get(i):", "    begin, end = _pair(mv, 4 + 4 * i)", "    return decode(begin, end)"]
    env["_pair"] = struct.Struct("<II").unpack_from
    source = "\n".join(lines)
    exec(compile(source, f"<shardstream decoder {','.join(names)}>", "exec"), env)
    return env["decode"], env["get"]
