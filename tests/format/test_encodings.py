"""Column encodings: round trips, exact byte layouts (mosaicml-streaming compatible),
and typed errors for values that do not fit."""

from __future__ import annotations

import io
import math
import pickle
import struct
from decimal import Decimal

import numpy as np
import pytest
from PIL import Image

import shardstream
from shardstream import EncodeError, MDSWriter, StreamingDataset, UnsupportedFormatError
from shardstream.format.encodings import get_encoding

DTYPES = ["uint8", "int8", "uint16", "int16", "float16", "uint32", "int32", "float32", "uint64", "int64", "float64"]
DTYPE_CODES = {"uint8": 8, "int8": 9, "uint16": 16, "int16": 17, "float16": 18, "uint32": 32, "int32": 33,
               "float32": 34, "uint64": 64, "int64": 65, "float64": 66}


def rgb_image(w=7, h=5, seed=0, mode="RGB"):
    rng = np.random.default_rng(seed)
    if mode == "L":
        return Image.fromarray(rng.integers(0, 256, (h, w), dtype=np.uint8), "L")
    if mode == "RGBA":
        return Image.fromarray(rng.integers(0, 256, (h, w, 4), dtype=np.uint8), "RGBA")
    return Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8), "RGB")


def jpeg_bytes(img) -> bytes:
    out = io.BytesIO()
    img.save(out, format="JPEG", quality=95)
    return out.getvalue()


def roundtrip(name, value):
    enc = get_encoding(name)
    data = enc.encode(value)
    assert isinstance(data, bytes)
    if enc.size is not None:
        assert len(data) == enc.size
    return enc.decode(memoryview(data))


def pixels_equal(a, b) -> bool:
    return a.mode == b.mode and a.size == b.size and a.tobytes() == b.tobytes()


# -- one value and one check per encoding name ----------------------------------------
def _check_scalar(dtype):
    def check(got, want):
        assert type(got) is np.dtype(dtype).type
        assert got == want
    return check


def _check_eq_type(got, want):
    assert type(got) is type(want)
    assert got == want


def _check_ndarray(got, want):
    assert isinstance(got, np.ndarray)
    assert got.dtype == want.dtype and got.shape == want.shape
    assert np.array_equal(got, want)


def _check_decimal(got, want):
    assert type(got) is Decimal and str(got) == str(want)


def _check_pixels(got, want):
    assert pixels_equal(got, want), "pixels differ"


def _check_images_exact(got, want):
    assert isinstance(got, list) and len(got) == len(want)
    for g, w in zip(got, want):
        assert pixels_equal(g, w)


def _check_jpegs(got, want):
    assert isinstance(got, list) and len(got) == len(want)
    for g, w in zip(got, want):
        assert g.format == "JPEG" and g.size == w.size and g.mode == w.mode


def _check_jpeg(got, want):
    assert got.format == "JPEG" and got.size == want.size and got.mode == want.mode
    # lossy, but close: mean absolute error small for a smooth-ish random image at default quality
    diff = np.abs(np.asarray(got, np.int16) - np.asarray(want, np.int16))
    assert diff.mean() < 60


CASES = {
    "bytes": (lambda: b"\x00\xffabc", _check_eq_type),
    "str": (lambda: "héllo wörld ✓", _check_eq_type),
    "int": (lambda: -(2**62) + 5, _check_eq_type),
    "str_int": (lambda: -123456789012345678901234567890, _check_eq_type),
    "str_float": (lambda: 3.141592653589793, _check_eq_type),
    "str_decimal": (lambda: Decimal("-12.3400"), _check_decimal),
    "pkl": (lambda: {"a": [1, 2.5, None], "b": (3, "x")}, _check_eq_type),
    "json": (lambda: {"a": [1, 2.5, None, True], "b": {"c": "d"}}, _check_eq_type),
    "ndarray": (lambda: np.arange(12, dtype=np.float32).reshape(3, 4), _check_ndarray),
    "pil": (lambda: rgb_image(), _check_pixels),
    "png": (lambda: rgb_image(mode="RGBA"), _check_pixels),
    "jpeg": (lambda: rgb_image(16, 16), _check_jpeg),
    "list[pil]": (lambda: [rgb_image(seed=1), rgb_image(3, 9, seed=2, mode="L")], _check_images_exact),
    "list[png]": (lambda: [rgb_image(seed=3), rgb_image(4, 4, seed=4, mode="RGBA")], _check_images_exact),
    "list[jpeg]": (lambda: [rgb_image(8, 8, seed=5), rgb_image(16, 8, seed=6)], _check_jpegs),
    "jpeg_array": (lambda: [rgb_image(8, 8, seed=7), rgb_image(9, 3, seed=8)], _check_jpegs),
    "jpegarray": (lambda: [rgb_image(8, 8, seed=9)], _check_jpegs),
}
SCALAR_VALUES = {"uint8": 255, "int8": -128, "uint16": 65535, "int16": -32768, "uint32": 2**32 - 1,
                 "int32": -(2**31), "uint64": 2**64 - 1, "int64": -(2**63), "float16": 0.5,
                 "float32": 1.25, "float64": -1e300}
for _dt, _v in SCALAR_VALUES.items():
    CASES[_dt] = ((lambda v=_v: v), _check_scalar(_dt))


def test_every_encoding_name_has_a_roundtrip_case():
    names = set(shardstream.encoding_names())
    assert names == set(CASES), f"untested: {names - set(CASES)}; unknown: {set(CASES) - names}"


@pytest.mark.parametrize("name", sorted(CASES))
def test_roundtrip_every_encoding(name):
    make, check = CASES[name]
    value = make()
    check(roundtrip(name, value), value)


@pytest.mark.parametrize("name", sorted(CASES))
def test_roundtrip_every_encoding_through_a_dataset(tmp_path, name):
    make, check = CASES[name]
    values = [make() for _ in range(3)]
    with MDSWriter(out=str(tmp_path / "ds"), columns={"c": name, "n": "int"}) as out:
        for i, v in enumerate(values):
            out.write({"c": v, "n": i})
    ds = StreamingDataset(local=str(tmp_path / "ds"), allow_unsafe_types=True)
    assert len(ds) == 3
    for i, want in enumerate(values):
        got = ds[i]
        assert got["n"] == i
        check(got["c"], want)
    for got, want in zip(ds, values):
        check(got["c"], want)


# -- scalars ----------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES)
def test_scalar_decodes_to_numpy_scalar_type(dtype):
    enc = get_encoding(dtype)
    assert enc.size == np.dtype(dtype).itemsize
    value = 3 if np.dtype(dtype).kind in "iu" else 2.5
    got = enc.decode(memoryview(enc.encode(value)))
    assert type(got) is np.dtype(dtype).type
    assert got == value
    assert enc.encode(value) == np.asarray(value, np.dtype(dtype).newbyteorder("<")).tobytes()


@pytest.mark.parametrize("dtype", ["uint8", "int16", "int32", "uint64", "int64"])
def test_scalar_integer_limits(dtype):
    info = np.iinfo(dtype)
    for v in (int(info.min), int(info.max)):
        got = roundtrip(dtype, v)
        assert int(got) == v
    with pytest.raises(EncodeError):
        get_encoding(dtype).encode(int(info.max) + 1)
    with pytest.raises(EncodeError):
        get_encoding(dtype).encode(int(info.min) - 1)


def test_scalar_accepts_numpy_scalars_in_range():
    assert roundtrip("int32", np.int64(-7)) == -7
    assert roundtrip("float32", np.float64(0.25)) == np.float32(0.25)
    assert roundtrip("uint16", np.uint8(200)) == 200


@pytest.mark.parametrize("dtype,value", [
    ("int32", np.int64(2**40)),
    ("uint8", np.int64(-1)),
    ("int8", np.int16(300)),
    ("int32", np.uint64(2**63)),
])
def test_scalar_numpy_integer_out_of_range_raises(dtype, value):
    # A numpy integer that does not fit must be refused like a Python int, not wrapped around.
    with pytest.raises(EncodeError):
        get_encoding(dtype).encode(value)


def test_float_overflow_raises():
    with pytest.raises(EncodeError):
        get_encoding("float16").encode(1e10)
    with pytest.raises(EncodeError):
        get_encoding("float32").encode(1e300)


def test_float_nan_and_inf_roundtrip():
    assert math.isnan(roundtrip("float64", float("nan")))
    assert roundtrip("float32", float("inf")) == np.inf
    assert math.isnan(roundtrip("str_float", float("nan")))
    assert roundtrip("str_float", float("-inf")) == -math.inf


def test_int_is_little_endian_int64_and_decodes_to_python_int():
    enc = get_encoding("int")
    for v in (0, 1, -1, 2**63 - 1, -(2**63), 123456789):
        data = enc.encode(v)
        assert data == struct.pack("<q", v)
        got = enc.decode(memoryview(data))
        assert type(got) is int and got == v
    assert enc.encode(np.int64(5)) == struct.pack("<q", 5)
    with pytest.raises(EncodeError):
        enc.encode(2**63)
    with pytest.raises(EncodeError):
        enc.encode(-(2**63) - 1)


def test_scalar_byte_layouts():
    assert get_encoding("int32").encode(-2) == struct.pack("<i", -2)
    assert get_encoding("uint16").encode(513) == b"\x01\x02"
    assert get_encoding("float64").encode(1.5) == struct.pack("<d", 1.5)
    assert get_encoding("float16").encode(1.0) == struct.pack("<e", 1.0)


# -- string-ish -------------------------------------------------------------------------
def test_str_int_float_decimal_layouts():
    assert get_encoding("str_int").encode(-42) == b"-42"
    assert get_encoding("str_float").encode(0.1) == b"0.1"
    assert get_encoding("str_decimal").encode(Decimal("1.50")) == b"1.50"
    assert get_encoding("str").encode("ü") == "ü".encode("utf-8")
    got = roundtrip("str_decimal", Decimal("1E+3"))
    assert got == Decimal("1000") and str(got) == "1E+3"
    assert type(roundtrip("str_int", 0)) is int


def test_json_accepts_ndarray_and_nested():
    arr = np.arange(6, dtype=np.int64).reshape(2, 3)
    assert roundtrip("json", arr) == [[0, 1, 2], [3, 4, 5]]
    assert get_encoding("json").encode(arr) == b"[[0, 1, 2], [3, 4, 5]]"
    got = roundtrip("json", np.array([0.5, -1.0], np.float32))
    assert got == [0.5, -1.0]


def test_json_roundtrips_lists_and_scalars():
    for v in ([], {}, "s", 1, 1.5, None, True, [{"a": [1, {"b": None}]}]):
        got = roundtrip("json", v)
        assert got == v and type(got) is type(v)


def test_pkl_roundtrips_arbitrary_objects():
    value = {"set": {1, 2}, "arr": np.arange(3), "tuple": (1, "a")}
    got = roundtrip("pkl", value)
    assert got["set"] == {1, 2} and got["tuple"] == (1, "a")
    assert np.array_equal(got["arr"], np.arange(3))
    assert get_encoding("pkl").encode(value) == pickle.dumps(value)
    assert get_encoding("pkl").safe is False
    assert all(get_encoding(n).safe for n in shardstream.encoding_names() if n != "pkl")


def test_bytes_accepts_bytearray_and_memoryview():
    assert get_encoding("bytes").encode(bytearray(b"ab")) == b"ab"
    assert get_encoding("bytes").encode(memoryview(b"cd")) == b"cd"
    got = roundtrip("bytes", b"")
    assert got == b"" and type(got) is bytes


# -- ndarray ----------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(5,), (3, 4), (2, 3, 4)])
def test_untyped_ndarray_every_dtype_and_ndim(dtype, shape):
    rng = np.random.default_rng(1)
    arr = (rng.standard_normal(shape) * 100).astype(dtype)
    data = get_encoding("ndarray").encode(arr)
    assert data[0] == DTYPE_CODES[dtype]
    assert data[1] == (len(shape) << 2) | 0
    assert data[2:2 + len(shape)] == bytes(shape)
    assert data[2 + len(shape):] == arr.tobytes()
    got = get_encoding("ndarray").decode(memoryview(data))
    assert got.dtype == np.dtype(dtype) and got.shape == shape
    assert np.array_equal(got, arr, equal_nan=True)


@pytest.mark.parametrize("dtype", DTYPES)
def test_typed_ndarray_every_dtype(dtype):
    arr = np.arange(1, 7).astype(dtype).reshape(2, 3)
    got = roundtrip(f"ndarray:{dtype}", arr)
    assert got.dtype == np.dtype(dtype) and got.shape == (2, 3)
    assert np.array_equal(got, arr)
    got = roundtrip(f"ndarray:{dtype}:2,3", arr)
    assert got.dtype == np.dtype(dtype) and np.array_equal(got, arr)


@pytest.mark.parametrize("dtype", DTYPES)
def test_fixed_shape_1d_ndarray_is_payload_only(dtype):
    arr = np.arange(1, 7).astype(dtype)
    enc = get_encoding(f"ndarray:{dtype}:6")
    assert enc.size == arr.nbytes
    assert enc.encode(arr) == arr.tobytes()
    got = enc.decode(memoryview(arr.tobytes()))
    assert got.dtype == np.dtype(dtype) and got.shape == (6,) and np.array_equal(got, arr)
    with pytest.raises(EncodeError):
        enc.encode(arr[:5])


@pytest.mark.parametrize("shape,width", [((300,), 1), ((2, 256), 1), ((65535,), 1), ((65536,), 2),
                                         ((1, 70000), 2), ((255, 2), 0)])
def test_ndarray_shape_width_codes(shape, width):
    arr = np.ones(shape, np.uint8)
    arr.flat[-1] = 7
    for name, head in (("ndarray", bytes([8])), ("ndarray:uint8", b"")):
        data = get_encoding(name).encode(arr)
        ndim = len(shape)
        sdt = ["<u1", "<u2", "<u4", "<u8"][width]
        expected = head + bytes([(ndim << 2) | width]) + np.asarray(shape, sdt).tobytes() + arr.tobytes()
        assert data == expected
        got = get_encoding(name).decode(memoryview(data))
        assert got.shape == shape and np.array_equal(got, arr)


@pytest.mark.parametrize("width", [0, 1, 2, 3])
def test_ndarray_decodes_any_shape_width(width):
    # Another writer may use a wider shape code than needed; decoding must still work.
    arr = np.array([[1, -2, 3], [4, 5, -6]], np.int16)
    sdt = ["<u1", "<u2", "<u4", "<u8"][width]
    data = bytes([17, (2 << 2) | width]) + np.asarray(arr.shape, sdt).tobytes() + arr.tobytes()
    got = get_encoding("ndarray").decode(memoryview(data))
    assert got.shape == (2, 3) and got.dtype == np.int16 and np.array_equal(got, arr)


def test_ndarray_exact_layouts():
    arr = np.array([1, 2, 3], np.int32)
    assert get_encoding("ndarray").encode(arr) == bytes([33, (1 << 2) | 0, 3]) + arr.tobytes()
    assert get_encoding("ndarray:int32").encode(arr) == bytes([(1 << 2) | 0, 3]) + arr.tobytes()
    fixed = np.arange(6, dtype=np.float16).reshape(2, 3)
    enc = get_encoding("ndarray:float16:2,3")
    assert enc.size == 12
    assert enc.encode(fixed) == fixed.tobytes()
    assert enc.name == "ndarray:float16:2,3"


def test_ndarray_int32_and_float16_fixed_roundtrip():
    arr = np.array([7, -8, 2**31 - 1], np.int32)
    got = roundtrip("ndarray:int32", arr)
    assert got.dtype == np.int32 and np.array_equal(got, arr)
    fixed = np.array([[0.5, -1, 2], [np.inf, 0, 65504]], np.float16)
    got = roundtrip("ndarray:float16:2,3", fixed)
    assert got.dtype == np.float16 and got.shape == (2, 3) and np.array_equal(got, fixed)


def test_ndarray_big_endian_and_non_contiguous_inputs():
    big = np.array([1, 256, -3], ">i4")
    data = get_encoding("ndarray").encode(big)
    assert data == bytes([33, 4, 3]) + np.array([1, 256, -3], "<i4").tobytes()
    got = get_encoding("ndarray").decode(memoryview(data))
    assert np.array_equal(got, [1, 256, -3])
    base = np.arange(24, dtype=np.int64).reshape(4, 6)
    for view in (base.T, base[:, ::2], base[::-1]):
        got = roundtrip("ndarray", view)
        assert got.shape == view.shape and np.array_equal(got, view)
        got = roundtrip("ndarray:int64", view)
        assert np.array_equal(got, view)


def test_typed_ndarray_accepts_sequences_of_the_right_type():
    got = roundtrip("ndarray:int32", [1, 2, 3])
    assert got.dtype == np.int32 and got.tolist() == [1, 2, 3]
    got = roundtrip("ndarray:float32:2,2", [[1, 2], [3, 4]])
    assert got.dtype == np.float32 and got.tolist() == [[1, 2], [3, 4]]


@pytest.mark.parametrize("name,value", [
    ("ndarray:uint8", [300]),
    ("ndarray:int32", ["a"]),
    ("ndarray:int32", [[1, 2], [3]]),
    ("ndarray:int32", None),
    ("ndarray:int32", {"a": 1}),
])
def test_typed_ndarray_bad_sequences_raise_encode_error(name, value):
    with pytest.raises(EncodeError):
        get_encoding(name).encode(value)


def test_typed_ndarray_refuses_float_list_for_int_dtype():
    with pytest.raises(EncodeError):
        get_encoding("ndarray:int32").encode([1.5])


@pytest.mark.parametrize("name", ["ndarray", "ndarray:int64", "ndarray:int64:2,2"])
def test_ndarray_decode_is_a_view_when_aligned_and_a_copy_when_not(name):
    arr = np.array([[1, -2], [3, 2**40]], np.int64)
    data = get_encoding(name).encode(arr)
    header = len(data) - arr.nbytes
    for shift in range(8):
        # Place the payload at address (aligned base + 8 + shift - header ...) inside a read-only buffer.
        pad = (8 - header) % 8 + shift
        store = np.zeros(pad + len(data) + 8, np.uint8)
        store[pad:pad + len(data)] = np.frombuffer(data, np.uint8)
        store.setflags(write=False)
        assert store.ctypes.data % 8 == 0
        got = get_encoding(name).decode(memoryview(store)[pad:pad + len(data)])
        assert np.array_equal(got, arr) and got.dtype == np.int64
        if shift == 0:
            assert np.shares_memory(got, store), "aligned payload must be decoded without a copy"
            assert not got.flags.writeable
        else:
            assert not np.shares_memory(got, store), "an unaligned payload must be copied"


# -- images -----------------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["RGB", "L", "RGBA", "1", "I", "F", "I;16", "CMYK", "LA"])
def test_pil_exact_pixels_every_mode(mode):
    if mode == "I;16":
        img = Image.frombytes("I;16", (11, 6), (np.arange(66, dtype="<u2") * 900).tobytes())
    else:
        img = rgb_image(11, 6, seed=3).convert(mode)
    got = roundtrip("pil", img)
    assert got.mode == mode and got.size == (11, 6)
    assert got.tobytes() == img.tobytes()


def test_pil_byte_layout():
    img = rgb_image(3, 2)
    data = get_encoding("pil").encode(img)
    assert data == struct.pack("<III", 3, 2, 3) + b"RGB" + img.tobytes()


@pytest.mark.parametrize("mode", ["RGB", "L", "RGBA", "LA", "I;16"])
def test_png_exact_pixels(mode):
    if mode == "I;16":
        img = Image.frombytes("I;16", (7, 5), (np.arange(35, dtype="<u2") * 1800).tobytes())
    else:
        img = rgb_image(7, 5, seed=4).convert(mode)
    data = get_encoding("png").encode(img)
    assert data.startswith(b"\x89PNG\r\n\x1a\n")
    got = get_encoding("png").decode(memoryview(data))
    assert got.format == "PNG" and got.size == img.size
    assert np.array_equal(np.asarray(got), np.asarray(img))


@pytest.mark.parametrize("mode", ["RGB", "L"])
def test_jpeg_is_lossy_but_keeps_size_and_mode(mode):
    img = rgb_image(33, 17, seed=5).convert(mode)
    data = get_encoding("jpeg").encode(img)
    assert data[:2] == b"\xff\xd8"
    got = get_encoding("jpeg").decode(memoryview(data))
    assert got.format == "JPEG" and got.size == (33, 17) and got.mode == mode


def test_jpeg_opened_from_file_is_stored_unchanged(tmp_path):
    path = tmp_path / "x.jpg"
    raw = jpeg_bytes(rgb_image(20, 10, seed=6))
    path.write_bytes(raw)
    with Image.open(path) as img:
        assert get_encoding("jpeg").encode(img) == raw


def test_image_lists_layout_and_roundtrip():
    imgs = [rgb_image(4, 3, seed=1), rgb_image(2, 5, seed=2, mode="L")]
    data = get_encoding("list[pil]").encode(imgs)
    parts = [get_encoding("pil").encode(i) for i in imgs]
    assert data == struct.pack("<III", 0, 2, len(parts[0])) + struct.pack("<I", len(parts[1])) + b"".join(parts)
    assert [pixels_equal(g, w) for g, w in zip(roundtrip("list[pil]", imgs), imgs)] == [True, True]
    pngs = roundtrip("list[png]", imgs)
    assert [pixels_equal(g, w) for g, w in zip(pngs, imgs)] == [True, True]
    jpegs = roundtrip("list[jpeg]", imgs)
    assert [(j.format, j.size, j.mode) for j in jpegs] == [("JPEG", (4, 3), "RGB"), ("JPEG", (2, 5), "L")]
    assert roundtrip("list[png]", []) == []


def test_jpeg_array_from_raw_bytes_and_images():
    raws = [jpeg_bytes(rgb_image(6, 4, seed=s)) for s in range(3)]
    data = get_encoding("jpeg_array").encode(raws)
    assert data == struct.pack("<I", 3) + np.asarray([len(r) for r in raws], "<u4").tobytes() + b"".join(raws)
    got = get_encoding("jpeg_array").decode(memoryview(data))
    assert len(got) == 3
    for g, r in zip(got, raws):
        want = Image.open(io.BytesIO(r))
        assert g.size == (6, 4) and np.array_equal(np.asarray(g), np.asarray(want))
    imgs = [rgb_image(5, 5, seed=9), rgb_image(3, 8, seed=10)]
    got = roundtrip("jpegarray", imgs)
    assert [(g.format, g.size) for g in got] == [("JPEG", (5, 5)), ("JPEG", (3, 8))]
    mixed = roundtrip("jpeg_array", [raws[0], imgs[0]])
    assert [g.size for g in mixed] == [(6, 4), (5, 5)]


# -- errors -----------------------------------------------------------------------------
@pytest.mark.parametrize("name,value", [
    ("int", "3"), ("int", 3.0), ("int", True), ("int", None),
    ("int32", 1.5), ("int32", "1"), ("int32", True), ("uint8", 300), ("uint8", -1), ("int8", 128),
    ("float32", "1.0"), ("float64", None), ("float32", True),
    ("str", b"abc"), ("str", 5), ("bytes", "abc"), ("bytes", 5),
    ("str_int", "5"), ("str_int", 5.0), ("str_int", False), ("str_float", 5), ("str_float", "5.0"),
    ("str_decimal", 1.5), ("str_decimal", "1.5"),
    ("json", {1, 2}), ("json", object()), ("json", {"a": np.int64(1)}),
    ("pil", b"not an image"), ("png", np.zeros((2, 2), np.uint8)), ("jpeg", "x.jpg"),
    ("list[pil]", "x"), ("list[png]", [b"x"]), ("jpeg_array", "x"),
    ("ndarray", [1, 2, 3]), ("ndarray", "abc"), ("ndarray:int32", "abc"), ("ndarray:int32", b"ab"),
])
def test_wrong_value_types_raise_encode_error(name, value):
    with pytest.raises(EncodeError):
        get_encoding(name).encode(value)


def test_str_with_lone_surrogate_raises_encode_error():
    with pytest.raises(EncodeError):
        get_encoding("str").encode("bad \ud800 text")


@pytest.mark.parametrize("name,value", [
    ("ndarray:int32", np.zeros(3, np.int64)),
    ("ndarray:int32", np.zeros(3, np.float32)),
    ("ndarray:float16:2,3", np.zeros((3, 2), np.float16)),
    ("ndarray:float16:2,3", np.zeros((2, 3), np.float32)),
    ("ndarray:float16:2,3", np.zeros(6, np.float16)),
    ("ndarray", np.zeros(0, np.int32)),
    ("ndarray:int32", np.zeros((0, 3), np.int32)),
    ("ndarray", np.array(5, np.int32)),
    ("ndarray:int32", np.array(5, np.int32)),
    ("ndarray", np.zeros(3, bool)),
    ("ndarray", np.zeros(3, np.complex64)),
    ("ndarray", np.array(["a"], object)),
    ("ndarray", np.zeros((1,) * 64, np.uint8)),
])
def test_ndarray_wrong_dtype_shape_or_size_raise_encode_error(name, value):
    with pytest.raises(EncodeError):
        get_encoding(name).encode(value)


def test_encode_errors_are_shardstream_and_type_errors():
    with pytest.raises(EncodeError) as info:
        get_encoding("int32").encode("seven")
    assert isinstance(info.value, shardstream.ShardstreamError) and isinstance(info.value, TypeError)
    assert "int32" in str(info.value) and "str" in str(info.value)


@pytest.mark.parametrize("name", ["float128", "list[str]", "ndarray:bool", "ndarray:int32:0,3", "ndarray::3",
                                  "ndarray:int32:a", "ndarray:int32:2:3", "ndarray:int32:", "ndarray:int32:-1",
                                  "Int", "", "jpeg ", "str:utf8", 5, None])
def test_unknown_encoding_names_raise_unsupported_format(name):
    with pytest.raises(UnsupportedFormatError):
        get_encoding(name)


def test_writer_refuses_unknown_encoding(tmp_path):
    with pytest.raises(UnsupportedFormatError):
        MDSWriter(out=str(tmp_path / "x"), columns={"a": "varchar"})
