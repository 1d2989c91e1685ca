"""Image column encodings (``pil``, ``jpeg``, ``png``, ``list[...]``, ``jpeg_array``),
byte-compatible with mosaicml-streaming. Pillow is imported on first use."""

from __future__ import annotations

import struct
from io import BytesIO

import numpy as np

from ..errors import CorruptShardError, require
from .encodings import Encoding, type_error


def _pil():
    return require("PIL.Image", "images", "image encodings (pil, jpeg, png)")


def _require_image(enc: Encoding, value):
    """Pillow's Image module, after checking that ``value`` is an image."""
    image = _pil()
    if not isinstance(value, image.Image):
        raise type_error(enc, value, "PIL.Image.Image")
    return image


class PILRaw(Encoding):
    """Raw pixels: uint32 width, height, len(mode), then mode and pixel bytes."""

    name = "pil"

    def encode(self, value):
        _require_image(self, value)
        mode = value.mode.encode("utf-8")
        width, height = value.size
        return struct.pack("<III", width, height, len(mode)) + mode + value.tobytes()

    def decode(self, data):
        image = _pil()
        try:
            width, height, mode_size = struct.unpack_from("<III", data)
            mode = str(data[12:12 + mode_size], "utf-8")
            pixels = data[12 + mode_size:]
            bits = {"1": 1, "L": 8, "P": 8, "I;16": 16}.get(mode)
            if bits is None:
                bits = 8 * len(image.new(mode, (1, 1)).tobytes())
            if (width * bits + 7) // 8 * height != len(pixels):
                raise ValueError(f"{width}x{height} {mode} needs other than {len(pixels)} pixel bytes")
            return image.frombytes(mode, (width, height), bytes(pixels))
        except Exception as exc:
            raise CorruptShardError(f"pil column could not be decoded ({exc})") from None


class _Compressed(Encoding):
    format = ""

    def encode(self, value):
        _require_image(self, value)
        return self._encode_image(value)

    def _encode_image(self, value) -> bytes:
        out = BytesIO()
        value.save(out, format=self.format)
        return out.getvalue()

    def decode(self, data):
        image = _pil()
        try:
            img = image.open(BytesIO(bytes(data)))
        except Exception as exc:
            raise CorruptShardError(f"{self.name} column is not a readable {self.format} image ({exc})") from None
        return img


class JPEG(_Compressed):
    name = "jpeg"
    format = "JPEG"

    def _encode_image(self, value) -> bytes:
        # An image opened from a JPEG file is stored as the file's own bytes (no re-encoding).
        filename = getattr(value, "filename", None)
        if getattr(value, "format", None) == "JPEG" and filename:
            try:
                with open(filename, "rb") as f:
                    return f.read()
            except OSError:
                pass
        return super()._encode_image(value)


class PNG(_Compressed):
    name = "png"
    format = "PNG"


_U32 = struct.Struct("<I")


def _pack_list(items: list) -> bytes:
    sizes = np.asarray([len(b) for b in items], "<u4").tobytes()
    return b"".join([_U32.pack(0), _U32.pack(len(items)), sizes, *items])


def _unpack_list(data: memoryview, first: int, what: str) -> list:
    """Split ``[u32 count][u32 sizes...][payloads]`` starting at byte ``first``."""
    n = len(data)
    try:
        (count,) = _U32.unpack_from(data, first)
        head = first + 4 + 4 * count
        if head > n:
            raise ValueError
        sizes = np.frombuffer(data, "<u4", count, first + 4).tolist()
    except (struct.error, ValueError):
        raise CorruptShardError(f"{what} column has a damaged element table") from None
    if head + sum(sizes) != n:
        raise CorruptShardError(f"{what} column: element sizes add to {sum(sizes)}, payload is {n - head} bytes")
    out, pos = [], head
    for size in sizes:
        out.append(data[pos:pos + size])
        pos += size
    return out


class ImageList(Encoding):
    """``list[pil]``, ``list[jpeg]``, ``list[png]``: u32 placeholder, u32 count, u32 sizes, payloads."""

    def __init__(self, inner: Encoding) -> None:
        self.inner = inner
        self.name = f"list[{inner.name}]"

    def encode(self, value):
        if not isinstance(value, list):
            raise type_error(self, value, "a list of PIL images")
        return _pack_list([self.inner.encode(v) for v in value])

    def decode(self, data):
        return [self.inner.decode(part) for part in _unpack_list(data, 4, self.name)]


class JPEGArray(Encoding):
    """``jpeg_array``: u32 count, u32 sizes, JPEG payloads; decodes to a list of images.

    Elements may be JPEG bytes (stored as they are) or PIL images (encoded as JPEG)."""

    name = "jpeg_array"

    def encode(self, value):
        if not isinstance(value, (list, tuple)):
            raise type_error(self, value, "a list of JPEG bytes or PIL images")
        parts = [bytes(v) if isinstance(v, (bytes, bytearray, memoryview)) else JPEG().encode(v) for v in value]
        return b"".join([_U32.pack(len(parts)), np.asarray([len(p) for p in parts], "<u4").tobytes(), *parts])

    def decode(self, data):
        return [JPEG().decode(part) for part in _unpack_list(data, 0, self.name)]


def image_encoding(name: str) -> Encoding:
    simple = {"pil": PILRaw, "jpeg": JPEG, "png": PNG, "jpeg_array": JPEGArray, "jpegarray": JPEGArray}
    if name in simple:
        enc = simple[name]()
        enc.name = name
        return enc
    return ImageList(image_encoding(name[5:-1]))
