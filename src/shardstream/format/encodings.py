"""Column encodings of the MDS format, byte-compatible with mosaicml-streaming.

Each encoding turns one column value into bytes and back. ``size`` is the fixed
encoded size in bytes, or ``None`` for variable-size columns (whose lengths are
stored in each sample's header). Decoders take a ``memoryview`` (usually a slice of
a memory-mapped shard) and avoid copies where they can: ``ndarray`` columns come
back as read-only views into the shard when the bytes are suitably aligned.

Encodings are looked up by name (``get_encoding('ndarray:int32:4,4')``); image
encodings import Pillow on first use.
"""

from __future__ import annotations

import json
import pickle
import struct
import sys
from decimal import Decimal, InvalidOperation
from functools import lru_cache
from typing import Any, Optional

import numpy as np

from ..errors import CorruptShardError, EncodeError, UnsupportedFormatError


class Encoding:
    """Base class: ``encode(value) -> bytes`` and ``decode(memoryview) -> value``."""

    name: str = ""
    size: Optional[int] = None  # fixed encoded size in bytes, None if variable
    safe: bool = True  # False: decoding may run arbitrary code (pickle)
    np_dtype: Optional[np.dtype] = None  # numeric columns: dtype of the decoded values
    shape: Optional[tuple] = None  # numeric columns with a fixed shape (() for scalars)

    def encode(self, value: Any) -> bytes:
        raise NotImplementedError

    def decode(self, data: memoryview) -> Any:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"<encoding {self.name}>"


def type_error(enc: Encoding, value: Any, expected: str) -> EncodeError:
    return EncodeError(f"encoding {enc.name!r} expects {expected}, got {type(value).__name__}: {value!r:.80}")


class Bytes(Encoding):
    name = "bytes"

    def encode(self, value):
        if isinstance(value, (bytearray, memoryview)):
            return bytes(value)
        if not isinstance(value, bytes):
            raise type_error(self, value, "bytes")
        return value

    def decode(self, data):
        return bytes(data)


class Str(Encoding):
    name = "str"

    def encode(self, value):
        if not isinstance(value, str):
            raise type_error(self, value, "str")
        try:
            return value.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise EncodeError(f"encoding 'str': the string is not valid Unicode text ({exc})") from None

    def decode(self, data):
        try:
            return str(data, "utf-8")
        except UnicodeDecodeError as exc:
            raise CorruptShardError(f"str column holds invalid UTF-8 ({exc})") from None


_INT64 = struct.Struct("<q")


class Int(Encoding):
    """Python int stored as little-endian int64; decodes to ``int``."""

    name = "int"
    size = 8
    np_dtype = np.dtype("<i8")
    shape = ()

    def encode(self, value):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise type_error(self, value, "int")
        try:
            return _INT64.pack(int(value))
        except struct.error:
            raise EncodeError(f"encoding 'int' holds int64; {value} is out of range") from None

    def decode(self, data):
        return int.from_bytes(data, "little", signed=True)


_STRUCT_CODES = {"int8": "b", "uint8": "B", "int16": "h", "uint16": "H", "int32": "i", "uint32": "I",
                 "int64": "q", "uint64": "Q", "float16": "e", "float32": "f", "float64": "d"}


class Scalar(Encoding):
    """Fixed-width numpy scalar; decodes to a numpy scalar (as mosaicml-streaming does)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.np_dtype = np.dtype("<" + np.dtype(name).char)
        self.size = self.np_dtype.itemsize
        self.shape = ()
        self.scalar_type = np.dtype(name).type
        self.struct = struct.Struct("<" + _STRUCT_CODES[name])
        self.is_float = self.np_dtype.kind == "f"
        self._limits = None if self.is_float else (int(np.iinfo(self.np_dtype).min), int(np.iinfo(self.np_dtype).max))

    def encode(self, value):
        ok = isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, (bool, np.bool_))
        if not ok:
            raise type_error(self, value, "a number")
        if not self.is_float:
            if isinstance(value, (float, np.floating)):
                raise type_error(self, value, "an integer")
            lo, hi = self._limits
            if not lo <= int(value) <= hi:
                raise EncodeError(f"encoding {self.name!r}: {value!r} is outside [{lo}, {hi}]")
            return self.struct.pack(int(value))
        try:
            with np.errstate(over="raise"):
                return self.scalar_type(value).astype(self.np_dtype).tobytes()
        except (OverflowError, FloatingPointError, ValueError) as exc:
            raise EncodeError(f"encoding {self.name!r}: {value!r} does not fit ({exc})") from None

    def decode(self, data):
        if self.is_float:  # keep the stored bits (NaN payloads) exactly
            return np.frombuffer(data, self.np_dtype, 1)[0]
        return self.scalar_type(self.struct.unpack(data)[0])


class StrInt(Encoding):
    name = "str_int"

    def encode(self, value):
        if isinstance(value, bool) or not isinstance(value, int):
            raise type_error(self, value, "int")
        return str(value).encode("utf-8")

    def decode(self, data):
        try:
            return int(str(data, "utf-8"))
        except (ValueError, UnicodeDecodeError):
            raise CorruptShardError(f"str_int column holds {bytes(data)[:40]!r}, not an integer") from None


class StrFloat(Encoding):
    name = "str_float"

    def encode(self, value):
        if not isinstance(value, float):
            raise type_error(self, value, "float")
        return str(value).encode("utf-8")

    def decode(self, data):
        try:
            return float(str(data, "utf-8"))
        except (ValueError, UnicodeDecodeError):
            raise CorruptShardError(f"str_float column holds {bytes(data)[:40]!r}, not a float") from None


class StrDecimal(Encoding):
    name = "str_decimal"

    def encode(self, value):
        if not isinstance(value, Decimal):
            raise type_error(self, value, "decimal.Decimal")
        return str(value).encode("utf-8")

    def decode(self, data):
        try:
            return Decimal(str(data, "utf-8"))
        except (InvalidOperation, UnicodeDecodeError):
            raise CorruptShardError(f"str_decimal column holds {bytes(data)[:40]!r}, not a decimal") from None


class Pickle(Encoding):
    name = "pkl"
    safe = False

    def encode(self, value):
        return pickle.dumps(value)

    def decode(self, data):
        try:
            return pickle.loads(data)
        except Exception as exc:
            raise CorruptShardError(f"pkl column could not be unpickled ({type(exc).__name__}: {exc})") from None


class JSON(Encoding):
    name = "json"

    def encode(self, value):
        if isinstance(value, np.ndarray):
            value = value.tolist()
        try:
            return json.dumps(value).encode("utf-8")
        except (TypeError, ValueError) as exc:
            raise EncodeError(f"encoding 'json': value is not JSON-serialisable ({exc})") from None
        except RecursionError:
            raise EncodeError("encoding 'json': the value is nested deeper than Python's json module encodes (about "
                              f"{sys.getrecursionlimit()} levels, less the calls under way); flatten it, or store it "
                              "as a JSON string (encoding 'str')") from None

    def decode(self, data):
        try:
            return json.loads(str(data, "utf-8"))
        except (ValueError, UnicodeDecodeError, RecursionError) as exc:
            raise CorruptShardError(f"json column holds invalid JSON ({exc})") from None


# ndarray: dtype codes and shape packing as in mosaicml-streaming.
_CODE_TO_DTYPE = {8: "uint8", 9: "int8", 16: "uint16", 17: "int16", 18: "float16", 32: "uint32",
                  33: "int32", 34: "float32", 64: "uint64", 65: "int64", 66: "float64"}
_DTYPE_TO_CODE = {v: k for k, v in _CODE_TO_DTYPE.items()}
_NATIVE_CODE = {np.dtype(name): code for name, code in _DTYPE_TO_CODE.items()}  # fast lookup by dtype
_SHAPE_HEAD = [struct.Struct(f"<B{f}") for f in "BHIQ"]
_SHAPE_DTYPES = ("<u1", "<u2", "<u4", "<u8")


class NDArray(Encoding):
    """``ndarray``, ``ndarray:<dtype>`` or ``ndarray:<dtype>:<d0>,<d1>,...``.

    Untyped arrays store a dtype code byte; arrays without a fixed shape store a byte
    ``ndim << 2 | shape_width_code`` followed by the shape at that width. The payload
    is the array's C-order bytes.
    """

    def __init__(self, dtype: Optional[str] = None, shape: Optional[tuple] = None) -> None:
        if dtype is not None and dtype not in _DTYPE_TO_CODE:
            raise UnsupportedFormatError(
                f"ndarray dtype {dtype!r} is not supported; use one of {', '.join(_DTYPE_TO_CODE)}"
            )
        if shape is not None and (not shape or any(d < 1 for d in shape)):
            raise UnsupportedFormatError(f"ndarray shape {shape} must have dimensions >= 1")
        if shape is not None and dtype is None:
            raise UnsupportedFormatError("ndarray with a fixed shape needs a dtype: 'ndarray:<dtype>:<shape>'")
        self.dtype = dtype
        self.np_dtype = np.dtype("<" + np.dtype(dtype).char) if dtype else None
        self.shape = tuple(shape) if shape is not None else None
        parts = ["ndarray"] + ([dtype] if dtype else []) + ([",".join(map(str, shape))] if shape else [])
        self.name = ":".join(parts)
        self.size = int(np.prod(self.shape)) * self.np_dtype.itemsize if self.shape else None

    @classmethod
    def from_config(cls, text: str) -> "NDArray":
        args = text.split(":") if text else []
        if len(args) > 2:
            raise UnsupportedFormatError(f"ndarray encoding 'ndarray:{text}' has too many parts")
        dtype = args[0] if args else None
        shape = None
        if len(args) == 2:
            try:
                shape = tuple(int(x) for x in args[1].split(","))
            except ValueError:
                raise UnsupportedFormatError(f"ndarray shape {args[1]!r} is not comma-separated ints") from None
        return cls(dtype, shape)

    def encode(self, value):
        if self.shape is None and type(value) is np.ndarray and value.ndim == 1 and value.size and value.dtype is self.np_dtype:
            # fast path: 1-D array of the column's dtype
            n = value.shape[0]
            width = 0 if n < 256 else 1 if n < 65536 else 2 if n < 1 << 32 else 3
            return _SHAPE_HEAD[width].pack(4 | width, n) + value.tobytes()
        return self._encode_general(value)

    def _encode_general(self, value):
        if not isinstance(value, np.ndarray):
            if self.dtype is None or isinstance(value, (str, bytes, dict)) or value is None:
                raise type_error(self, value, "numpy.ndarray")
            value = _as_typed_array(self, value)
        code = _NATIVE_CODE.get(value.dtype)
        if code is None and value.dtype.byteorder == ">":
            code = _NATIVE_CODE.get(value.dtype.newbyteorder("<"))
            value = value.astype(value.dtype.newbyteorder("<"))
        if code is None:
            raise EncodeError(f"encoding {self.name!r}: dtype {value.dtype} is not supported; "
                              f"convert to one of {', '.join(_DTYPE_TO_CODE)}")
        name = _CODE_TO_DTYPE[code]
        if value.size == 0:
            raise EncodeError(f"encoding {self.name!r}: arrays with 0 elements cannot be stored")
        parts = []
        if self.dtype is None:
            parts.append(bytes((code,)))
        elif name != self.dtype:
            raise EncodeError(f"encoding {self.name!r}: expected dtype {self.dtype}, got {name}")
        if self.shape is None:
            ndim = value.ndim
            if ndim == 0:
                raise EncodeError(f"encoding {self.name!r}: got a 0-d array; use a scalar encoding")
            if ndim >= 64:
                raise EncodeError(f"encoding {self.name!r}: at most 63 axes, got {ndim}")
            width = _shape_width(max(value.shape))
            parts.append(bytes(((ndim << 2) | width,)))
            parts.append(np.asarray(value.shape, _SHAPE_DTYPES[width]).tobytes())
        elif value.shape != self.shape:
            raise EncodeError(f"encoding {self.name!r}: expected shape {self.shape}, got {value.shape}")
        parts.append(value.tobytes())
        return b"".join(parts)

    def decode(self, data):
        n = len(data)
        pos = 0
        try:
            if self.dtype is None:
                dtype = np.dtype(_CODE_TO_DTYPE[data[0]]).newbyteorder("<")
                pos = 1
            else:
                dtype = self.np_dtype
            if self.shape is None:
                byte = data[pos]
                ndim, width = byte >> 2, byte & 3
                sdt = np.dtype(_SHAPE_DTYPES[width])
                end = pos + 1 + ndim * sdt.itemsize
                if ndim == 0 or end > n:
                    raise ValueError("bad shape header")
                shape = tuple(np.frombuffer(data, sdt, ndim, pos + 1).tolist())
                pos = end
            else:
                shape = self.shape
        except (KeyError, IndexError, ValueError):
            raise CorruptShardError(f"{self.name} column has a damaged header") from None
        count = 1
        for d in shape:
            count *= d
        if count * dtype.itemsize != n - pos:
            raise CorruptShardError(
                f"{self.name} column: shape {shape} of {dtype.name} needs {count * dtype.itemsize} bytes, "
                f"found {n - pos}"
            )
        arr = np.frombuffer(data, dtype, count, pos)
        if not arr.flags.aligned:
            arr = arr.copy()
        return arr.reshape(shape)


def _as_typed_array(enc: "NDArray", value) -> np.ndarray:
    """A sequence given for an ``ndarray:<dtype>`` column, converted only if no value changes."""
    try:
        arr = np.asarray(value)
        if arr.dtype.kind not in "biuf":
            raise ValueError(f"elements of type {arr.dtype} are not numbers")
        cast = arr.astype(enc.np_dtype)
        with np.errstate(invalid="ignore"):
            same = np.array_equal(cast, arr) if enc.np_dtype.kind in "iu" else True
    except (ValueError, TypeError, OverflowError) as exc:
        raise EncodeError(f"encoding {enc.name!r}: cannot convert {type(value).__name__} to {enc.dtype} ({exc})") from None
    if not same:
        raise EncodeError(f"encoding {enc.name!r}: converting to {enc.dtype} would change values; "
                          f"pass a numpy array of dtype {enc.dtype}")
    return cast


def _shape_width(largest: int) -> int:
    if largest < 1 << 8:
        return 0
    if largest < 1 << 16:
        return 1
    if largest < 1 << 32:
        return 2
    return 3


_SCALARS = ("uint8", "uint16", "uint32", "uint64", "int8", "int16", "int32", "int64",
            "float16", "float32", "float64")
_SIMPLE = {"bytes": Bytes, "str": Str, "int": Int, "str_int": StrInt, "str_float": StrFloat,
           "str_decimal": StrDecimal, "pkl": Pickle, "json": JSON}
_IMAGES = ("pil", "jpeg", "png", "jpeg_array", "jpegarray")


@lru_cache(maxsize=None)
def get_encoding(name: str) -> Encoding:
    """The encoding for a column type name; raises :class:`UnsupportedFormatError`."""
    if not isinstance(name, str):
        raise UnsupportedFormatError(f"column encoding must be a string, got {name!r}")
    custom = registered_encodings.coder(name)
    if custom is not None:
        return custom
    if name in _SIMPLE:
        enc = _SIMPLE[name]()
        enc.name = name
        return enc
    if name in _SCALARS:
        return Scalar(name)
    if name in _IMAGES or (name.startswith("list[") and name.endswith("]") and name[5:-1] in ("pil", "jpeg", "png")):
        from .images import image_encoding  # imported on first use

        return image_encoding(name)
    if name == "ndarray" or name.startswith("ndarray:"):
        return NDArray.from_config(name[8:])
    raise UnsupportedFormatError(
        f"unknown column encoding {name!r}; known: {', '.join(encoding_names())}, "
        f"'ndarray:<dtype>' and 'ndarray:<dtype>:<shape>'"
    )


def builtin_encoding_names() -> set[str]:
    """The names of the encodings of the MDS format itself (those mosaicml-streaming knows)."""
    return set(_SIMPLE) | set(_SCALARS) | set(_IMAGES) | {"ndarray", "list[pil]", "list[jpeg]", "list[png]"}


def encoding_names() -> list[str]:
    """Every encoding name a column may use: the built-in ones and those registered."""
    return sorted(builtin_encoding_names() | set(registered_encodings))


from .customencodings import registered_encodings  # noqa: E402  (it uses Encoding above)
