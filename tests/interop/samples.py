"""Deterministic samples for the interop tests, shared by both sides.

This module is imported by the tests (our venv) AND by ``peer_mds.py`` running
under the peer interpreter (mosaicml-streaming's venv), so it uses only the
standard library, numpy and Pillow. ``make_sample(spec, i)`` returns the same
sample on both sides for the same ``(spec, i)``: randomness comes from
``random.Random`` seeded with a string (stable across Python 3 versions) and
arrays are built from random bytes (no dependence on numpy's RNG streams).

``norm(value)`` turns a decoded value into plain builtins (tuples, lists, str,
bytes, int) that can be pickled across the two venvs and compared with ``==``:
it keeps types (numpy scalar type, dtype, ``int`` vs ``numpy.int64`` ...) and
exact bytes (NaN payloads, -0.0).

A spec is a dict::

    {"name": "case id", "columns": {column: encoding}, "gens": {column: generator},
     "n": 24, "seed": "s", "compression": None | "zstd" | ..., "hashes": None | [...],
     "size_limit": int | None}

``gens`` is optional; a column's generator defaults to its encoding name.
"""

from __future__ import annotations

import io
import json
import random
import struct
from decimal import Decimal

import numpy as np

# ----------------------------------------------------------------------------------
# Encodings of mosaicml-streaming 0.13.0 (names accepted by streaming.MDSWriter).
# ----------------------------------------------------------------------------------

SCALAR_ENCODINGS = ["uint8", "uint16", "uint32", "uint64", "int8", "int16", "int32", "int64",
                    "float16", "float32", "float64"]
NDARRAY_DTYPES = ["uint8", "int8", "uint16", "int16", "float16", "uint32", "int32", "float32",
                  "uint64", "int64", "float64"]
FIXED_NDARRAYS = ["ndarray:float64:2,3", "ndarray:uint8:16", "ndarray:int16:2,2,2",
                  "ndarray:float32:1", "ndarray:uint64:3", "ndarray:float16:4,1"]

ALL_ENCODINGS = (
    ["bytes", "str", "int"] + SCALAR_ENCODINGS
    + ["str_int", "str_float", "str_decimal", "json", "pkl"]
    + ["pil", "png", "jpeg", "list[pil]", "list[png]", "list[jpeg]", "jpeg_array", "jpegarray"]
    + ["ndarray"] + [f"ndarray:{d}" for d in NDARRAY_DTYPES] + FIXED_NDARRAYS
)

# Lossy image encodings: decoded pixels are compared between the two readers, and
# only mode/size against the source.
LOSSY = {"jpeg", "list[jpeg]", "jpeg_array", "jpegarray"}
# Encodings whose bytes come from Pillow's codecs (identical only with identical Pillow builds).
IMAGE_CODECS = {"png", "jpeg", "list[png]", "list[jpeg]", "jpeg_array", "jpegarray"}
UNSAFE = {"pkl"}


# ----------------------------------------------------------------------------------
# Generators
# ----------------------------------------------------------------------------------

def _rng(spec: dict, column: str, i: int) -> random.Random:
    return random.Random(f"{spec.get('seed', 's')}|{column}|{i}")


_TEXT_CHARS = "abcxyzABC0123 _-.,;:!?\n\t\\\"'é中文🙂\x00\x7f€ß"

PIL_MODES = ["RGB", "L", "RGBA", "1", "I", "F", "I;16", "LA", "CMYK", "P", "YCbCr", "HSV"]
PNG_MODES = ["RGB", "L", "RGBA", "1", "I;16", "LA", "P"]
JPEG_MODES = ["RGB", "L", "CMYK"]


def _text(r: random.Random, n: int) -> str:
    return "".join(r.choice(_TEXT_CHARS) for _ in range(n))


def _image(r: random.Random, mode: str, w: int, h: int, smooth: bool = False):
    from PIL import Image

    size = len(Image.new(mode, (w, h)).tobytes())
    if smooth:  # gradients with a little noise: realistic for JPEG
        data = bytes(((k * 7 + (k // 31) * 3 + r.randrange(8)) & 0xFF) for k in range(size))
    else:
        data = r.randbytes(size)
    img = Image.frombytes(mode, (w, h), data)
    if mode == "P":
        img.putpalette(list(r.randbytes(256 * 3)))
    return img


def _jpeg_bytes(img) -> bytes:
    out = io.BytesIO()
    img.save(out, format="JPEG")
    return out.getvalue()


def _int_edges(dtype: str) -> list[int]:
    info = np.iinfo(dtype)
    return [int(info.min), int(info.max), 0, 1, int(info.max) - 1]


# NaNs with payloads, as bit patterns: a quiet NaN with a payload, a negative quiet NaN
# and a signalling NaN. Readers must return the stored bits unchanged.
_NAN_BITS = {"float16": (0x7EB2, 0xFE01, 0x7C01),
             "float32": (0x7FC00123, 0xFFC00001, 0x7F800001),
             "float64": (0x7FF8000000000123, 0xFFF8000000000001, 0x7FF0000000000001)}


def _float_edges(dtype: str) -> list:
    t = np.dtype(dtype).type
    info = np.finfo(dtype)
    nans = [np.array([bits], f"<u{np.dtype(dtype).itemsize}").view(dtype)[0] for bits in _NAN_BITS[dtype]]
    return [t("nan"), t("inf"), t("-inf"), t("-0.0"), info.max, info.min, info.tiny,
            info.smallest_subnormal, t(1) / t(3), *nans]


def _scalar(enc: str, r: random.Random, i: int):
    t = np.dtype(enc).type
    if np.dtype(enc).kind == "f":
        edges = _float_edges(enc)
        if i < len(edges):
            return t(edges[i])
        # random bit patterns: NaNs with payloads, subnormals, anything
        return np.frombuffer(r.randbytes(np.dtype(enc).itemsize), enc)[0]
    edges = _int_edges(enc)
    if i < len(edges):
        return t(edges[i])
    return np.frombuffer(r.randbytes(np.dtype(enc).itemsize), enc)[0]


def _array(r: random.Random, dtype: str, shape: tuple) -> np.ndarray:
    count = int(np.prod(shape))
    arr = np.frombuffer(r.randbytes(count * np.dtype(dtype).itemsize), dtype).reshape(shape)
    return arr.copy()


def _dyn_shape(r: random.Random, i: int) -> tuple:
    if i == 3:
        return (300,)  # shape stored as uint16
    if i == 5:
        return (2, 257)  # uint16 shape, 2-D
    ndim = 1 + r.randrange(3)
    return tuple(1 + r.randrange(6) for _ in range(ndim))


def _ndarray(enc: str, r: random.Random, i: int, spec: dict) -> np.ndarray:
    parts = enc.split(":")
    if len(parts) == 3:
        shape = tuple(int(x) for x in parts[2].split(","))
        return _array(r, parts[1], shape)
    if len(parts) == 2:
        dtype = parts[1]
    else:
        dtype = NDARRAY_DTYPES[i % len(NDARRAY_DTYPES)]
    if spec.get("big_array_at") == i:
        return _array(r, "uint8" if len(parts) == 1 else dtype, (65540,))  # shape stored as uint32
    shape = _dyn_shape(r, i)
    arr = _array(r, dtype, shape)
    if i % 4 == 2 and arr.ndim >= 2:
        arr = arr.T  # non-contiguous source: both writers store C order
    return arr


def _json_value(r: random.Random, i: int):
    kind = i % 6
    if kind == 1:
        return [r.random(), r.randrange(-10**12, 10**12), None, True, False, _text(r, 5)]
    if kind == 3:
        return _text(r, r.randrange(0, 12))
    if kind == 5:
        return None if i % 12 == 5 else r.randrange(-1000, 1000)
    return {
        "i": i,
        "text": _text(r, r.randrange(0, 10)),
        "floats": [r.random() * 10 ** r.randrange(-5, 20) for _ in range(r.randrange(0, 4))],
        "nested": {"a": [1, None, True, False, {"b": []}], "é": "中"},
        "big": 2 ** 70 + i,
    }


def _pkl_value(r: random.Random, i: int):
    return {
        "i": i,
        "tuple": (1, "a", b"\x00\xff", None),
        "decimal": Decimal("3.14159265358979323846264338327950288") + i,
        "frozenset": frozenset({1, 2, 3, i}),
        "complex": complex(r.random(), -r.random()),
        "float": float("inf") if i % 2 else r.random(),
        "bytes": r.randbytes(r.randrange(0, 20)),
        "list": [_text(r, 3), [i, [i + 1]]],
        "big": -(3 ** 90),
    }


def _str_float(r: random.Random, i: int) -> float:
    edges = [float("nan"), float("inf"), float("-inf"), -0.0, 0.0, 5e-324, 1.7976931348623157e308,
             0.1, 1e16, 123456789.125]
    if i < len(edges):
        return edges[i]
    return struct.unpack("<d", r.randbytes(8))[0]


def _str_decimal(r: random.Random, i: int) -> Decimal:
    edges = ["0", "-0", "1.10", "1E+10", "-1.5E-7", "NaN", "-Infinity", "Infinity", "sNaN",
             "0.000000000000000000000000000000000001",
             "123456789012345678901234567890.123456789012345678901234567890"]
    if i < len(edges):
        return Decimal(edges[i])
    return Decimal(f"{'-' if r.random() < 0.5 else ''}{r.getrandbits(80)}.{r.getrandbits(40)}").scaleb(
        r.randrange(-30, 30))


def _str_int(r: random.Random, i: int) -> int:
    edges = [0, -1, 1, 2 ** 63, -(2 ** 63) - 1, 10 ** 40, -(10 ** 60)]
    if i < len(edges):
        return edges[i]
    return r.randrange(-(2 ** 100), 2 ** 100)


def make_value(gen: str, spec: dict, column: str, i: int):
    """The value of ``column`` in sample ``i`` for generator ``gen``."""
    r = _rng(spec, column, i)
    if gen == "bytes":
        if i == 0:
            return b""
        if i == 1:
            return b"\x00" * 5
        return r.randbytes(r.randrange(0, 120))
    if gen == "bytes_big_first":  # the first sample alone is bigger than the spec's size_limit
        return r.randbytes(3000 if i == 0 else r.randrange(0, 120))
    if gen == "str":
        return "" if i == 0 else _text(r, r.randrange(0, 40))
    if gen == "int":
        edges = [-(2 ** 63), 2 ** 63 - 1, 0, -1]
        return edges[i] if i < len(edges) else r.randrange(-(2 ** 63), 2 ** 63)
    if gen in SCALAR_ENCODINGS:
        return _scalar(gen, r, i)
    if gen == "str_int":
        return _str_int(r, i)
    if gen == "str_float":
        return _str_float(r, i)
    if gen == "str_decimal":
        return _str_decimal(r, i)
    if gen == "json":
        return _json_value(r, i)
    if gen == "pkl":
        return _pkl_value(r, i)
    if gen == "pil":
        return _image(r, PIL_MODES[i % len(PIL_MODES)], 1 + r.randrange(9), 1 + r.randrange(7))
    if gen == "png":
        return _image(r, PNG_MODES[i % len(PNG_MODES)], 1 + r.randrange(12), 1 + r.randrange(9))
    if gen == "jpeg":
        return _image(r, JPEG_MODES[i % len(JPEG_MODES)], 8 + r.randrange(17), 8 + r.randrange(9), smooth=True)
    if gen in ("list[pil]", "list[png]", "list[jpeg]"):
        inner = gen[5:-1]
        count = 0 if i == 0 else r.randrange(1, 4)
        return [make_value(inner, spec, f"{column}/{k}", i) for k in range(count)]
    if gen in ("jpeg_array", "jpegarray"):
        # mosaicml-streaming stores JPEG *bytes* for jpeg_array (and refuses to decode 0 images)
        count = r.randrange(1, 4)
        return [_jpeg_bytes(make_value("jpeg", spec, f"{column}/{k}", i + k)) for k in range(count)]
    if gen.startswith("ndarray1d:"):  # 1-D arrays of any length (for an ndarray:<dtype> column)
        return _array(r, gen.split(":")[1], (1 + r.randrange(40),))
    if gen == "ndarray" or gen.startswith("ndarray:"):
        return _ndarray(gen, r, i, spec)
    raise ValueError(f"no generator {gen!r}")


def make_sample(spec: dict, i: int) -> dict:
    gens = spec.get("gens") or {}
    return {col: make_value(gens.get(col, enc), spec, col, i) for col, enc in spec["columns"].items()}


def make_samples(spec: dict) -> list[dict]:
    return [make_sample(spec, i) for i in range(spec["n"])]


def column_name(encoding: str) -> str:
    """A column name for an encoding in the all-encodings ("mixed") dataset."""
    return "c_" + "".join(ch if ch.isalnum() else "_" for ch in encoding)


# ----------------------------------------------------------------------------------
# Normalisation
# ----------------------------------------------------------------------------------

def norm(x):
    """Plain, picklable, ``==``-comparable description of a decoded value (types kept)."""
    try:
        from PIL import Image
    except ImportError:  # pragma: no cover
        Image = None
    if x is None:
        return ("None",)
    if isinstance(x, np.generic):
        return ("np", type(x).__name__, x.dtype.str, x.tobytes())
    if isinstance(x, np.ndarray):
        return ("ndarray", x.dtype.str, tuple(int(d) for d in x.shape), x.tobytes())
    if isinstance(x, bool):
        return ("bool", x)
    if isinstance(x, int):
        return (type(x).__name__, int(x))
    if isinstance(x, float):
        return (type(x).__name__, repr(float(x)))
    if isinstance(x, complex):
        return ("complex", repr(x))
    if isinstance(x, str):
        return (type(x).__name__, str(x))
    if isinstance(x, (bytes, bytearray, memoryview)):
        return (type(x).__name__, bytes(x))
    if isinstance(x, Decimal):
        return ("Decimal", str(x))
    if Image is not None and isinstance(x, Image.Image):
        palette = x.getpalette() if x.mode in ("P", "PA") else None
        return ("image", type(x).__name__, x.mode, tuple(x.size), x.tobytes(),
                tuple(palette) if palette else None)
    if isinstance(x, (list, tuple)):
        return (type(x).__name__, [norm(v) for v in x])
    if isinstance(x, dict):
        return (type(x).__name__, [(norm(k), norm(v)) for k, v in x.items()])
    if isinstance(x, (set, frozenset)):
        return (type(x).__name__, sorted((norm(v) for v in x), key=repr))
    return ("other", type(x).__module__ + "." + type(x).__qualname__, repr(x))


def norm_sample(sample: dict) -> dict:
    return {k: norm(v) for k, v in sample.items()}


def source_view(n, lossy: bool):
    """Reduce a normalised value for comparison with the *source* value.

    Images drop their class (a decoded PNG is a ``PngImageFile``, the source an
    ``Image``) and palette (the raw ``pil`` encoding does not store it); for lossy
    encodings only mode and size remain. JPEG bytes (``jpeg_array`` sources) become
    ``("jpeg-bytes",)`` placeholders matched against any decoded image.
    """
    if isinstance(n, tuple) and n and n[0] == "image":
        return ("image", n[2], n[3]) if lossy else ("image", n[2], n[3], n[4])
    if isinstance(n, tuple) and len(n) == 2 and isinstance(n[1], list):
        return (n[0], [source_view(v, lossy) for v in n[1]])
    return n


def jpeg_sizes(data: bytes) -> tuple:
    """(mode, size) of JPEG bytes, for comparing ``jpeg_array`` sources with decoded images."""
    from PIL import Image

    img = Image.open(io.BytesIO(data))
    return ("image", img.mode, tuple(img.size))


def expected_source_view(value, encoding: str):
    """What a reader must return for a written ``value``, as seen by :func:`source_view`."""
    lossy = encoding in LOSSY
    if encoding in ("jpeg_array", "jpegarray"):
        return ("list", [jpeg_sizes(b) for b in value])
    if encoding == "json":
        value = json.loads(json.dumps(value.tolist() if isinstance(value, np.ndarray) else value))
    if encoding == "int" and isinstance(value, np.integer):
        value = int(value)
    if encoding in SCALAR_ENCODINGS and not isinstance(value, np.generic):
        value = np.dtype(encoding).type(value)
    return source_view(norm(value), lossy)


def describe_diff(a, b, path: str = "") -> str:
    """First place where two normalised values differ, for readable failure messages."""
    if type(a) is not type(b):
        return f"{path or '<root>'}: {short(a)} != {short(b)}"
    if isinstance(a, (tuple, list)):
        if len(a) != len(b):
            return f"{path or '<root>'}: length {len(a)} != {len(b)}: {short(a)} != {short(b)}"
        for k, (x, y) in enumerate(zip(a, b)):
            if x != y:
                return describe_diff(x, y, f"{path}[{k}]")
    if a != b:
        return f"{path or '<root>'}: {short(a)} != {short(b)}"
    return ""


def short(v, limit: int = 200) -> str:
    text = repr(v)
    return text if len(text) <= limit else text[:limit] + f"... ({len(text)} chars)"


# ----------------------------------------------------------------------------------
# The grid of datasets (sizes are chosen by the tests: see conftest.choose_size_limit)
# ----------------------------------------------------------------------------------

COMPRESSIONS = [None, "zstd", "zstd:7", "gz", "bz2", "br", "snappy"]
HASHES = ["sha1", "xxh64"]
N_SAMPLES = 24


def _case(what: str, columns: dict, compression=None, hashes=None, **extra) -> dict:
    # Test ids stay usable in `pytest -k` expressions: no '@' or ','.
    name = f"{what.replace(',', 'x')}-{compression or 'raw'}{'+hash' if hashes else ''}"
    spec = {"name": name, "columns": columns, "n": N_SAMPLES, "seed": what,
            "compression": compression, "hashes": hashes}
    spec.update(extra)
    return spec


def mixed_columns() -> dict:
    return {column_name(enc): enc for enc in ALL_ENCODINGS}


def grid() -> list[dict]:
    """Every dataset written by both libraries (names are unique test ids).

    * each encoding alone (beside an ``int`` id column), uncompressed without hashes
      and zstd with sha1+xxh64;
    * one dataset holding every encoding as a column, across every compression, with
      and without hashes;
    * two single-encoding datasets across every compression (with hashes);
    * one dataset with every encoding and ``xxh3_64``, MDSWriter's default digest;
    * a dataset whose first sample alone exceeds ``size_limit``.
    """
    cases = []
    for enc in ALL_ENCODINGS:
        extra = {"big_array_at": 7} if enc == "ndarray" else {}
        for compression, hashes in ((None, None), ("zstd", HASHES)):
            cases.append(_case(enc, {"value": enc, "id": "int"}, compression, hashes, **extra))
    for compression in COMPRESSIONS:
        for hashes in (None, HASHES):
            cases.append(_case("mixed", mixed_columns(), compression, hashes))
    for enc in ("str", "ndarray:float64:2,3"):
        for compression in COMPRESSIONS:
            if compression in (None, "zstd"):
                continue  # already above
            cases.append(_case(enc, {"value": enc, "id": "int"}, compression, HASHES))
    # MDSWriter's default digest, written by both libraries and checked by both readers
    cases.append(_case("default_hash", mixed_columns(), "zstd", ["xxh3_64"]))
    cases.append(_case("oversize_first", {"value": "bytes", "id": "int"}, None, None,
                       gens={"value": "bytes_big_first"}, size_limit=1000))
    names = [c["name"] for c in cases]
    assert len(names) == len(set(names)), "duplicate case names"
    return cases


def validate_hash_for(spec: dict):
    """The digest a reader checks for ``spec``: xxh64 or xxh3_64 when the spec records one."""
    hashes = spec.get("hashes") or []
    return next((algo for algo in ("xxh64", "xxh3_64") if algo in hashes), None)


def encodings_of(spec: dict) -> dict:
    """column -> encoding of a spec."""
    return dict(spec["columns"])


# Merge tests exercise merging: plain column kinds, each covered on its own above.
MERGE_PART_COLUMNS = {"id": "int", "text": "str", "arr": "ndarray:int32", "img": "png", "mat": "ndarray:float32:2,3"}


def merge_part_spec(part: int, writer: str) -> dict:
    return {"name": f"merge-{writer}-part{part}", "columns": dict(MERGE_PART_COLUMNS), "n": 10 + part,
            "gens": {"arr": "ndarray1d:int32"}, "seed": f"merge-{writer}-{part}", "compression": "zstd",
            "hashes": ["xxh64"]}
