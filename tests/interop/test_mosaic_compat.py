"""Format compatibility with mosaicml-streaming 0.13.0, both directions.

1. datasets written by ``streaming.MDSWriter`` read by shardstream (iteration,
   ``ds[i]``, ``get_batch``/``batches``), compared with the written samples and
   with what ``streaming.StreamingDataset`` reads from the same files;
2. datasets written by ``shardstream.MDSWriter`` read by
   ``streaming.StreamingDataset``, compared likewise;
3. for the same samples and settings both writers produce byte-identical shard
   files and the same ``index.json``;
4. ``merge_index`` output of each library read by the other.

The datasets are built once per session by the ``world`` fixture (conftest.py);
the cases are listed in ``samples.grid()``.
"""

from __future__ import annotations

import json
import shutil
import warnings
from pathlib import Path

import numpy as np
import pytest

from shardstream import Ragged, StreamingDataset

from . import samples
from .samples import LOSSY, SCALAR_ENCODINGS, describe_diff, norm, norm_sample, short, source_view

pytestmark = pytest.mark.interop

CASES = samples.grid()
CASE_NAMES = [c["name"] for c in CASES]
DETERMINISTIC_COMPRESSIONS = {None, "zstd", "zstd:7", "bz2", "br", "snappy", "gz"}  # gz: mtime masked
MAX_REPORTED = 6


# ----------------------------------------------------------------------------------
# Reading with shardstream
# ----------------------------------------------------------------------------------

def validate_hash_for(spec: dict):
    return samples.validate_hash_for(spec)


def copy_dataset(src: Path, tmp_path: Path, name: str = "ds") -> Path:
    """Each test reads its own copy: reading a compressed dataset writes decompressed shards."""
    assert (src / "index.json").exists(), f"{src} has no index.json (the writer failed?)"
    dst = tmp_path / name
    shutil.copytree(src, dst)
    return dst


def open_ours(datadir: Path, validate_hash=None) -> StreamingDataset:
    return StreamingDataset(local=str(datadir), remote=None, shuffle=False, batch_size=1,
                            allow_unsafe_types=True, validate_hash=validate_hash)


def read_ours(ds: StreamingDataset) -> dict:
    n = len(ds)
    return {
        "len": n,
        "iter": [norm_sample(s) for s in ds],
        "items": {i: norm_sample(ds[i]) for i in range(n)},
        "neg": {-k: norm_sample(ds[-k]) for k in (1, 2) if k <= n},
    }


# ----------------------------------------------------------------------------------
# Comparisons
# ----------------------------------------------------------------------------------

def expected_views(specs: list[dict]) -> list[dict]:
    """Source samples, reduced for comparison (see samples.source_view)."""
    out = []
    for spec in specs:
        for sample in samples.make_samples(spec):
            out.append({col: samples.expected_source_view(sample[col], enc) for col, enc in spec["columns"].items()})
    return out


def assert_matches_source(rows: list[dict], specs: list[dict], who: str) -> None:
    columns = specs[0]["columns"]
    expected = expected_views(specs)
    assert len(rows) == len(expected), f"{who}: {len(rows)} samples, {len(expected)} were written"
    problems = []
    for i, (row, exp) in enumerate(zip(rows, expected)):
        if set(row) != set(exp):
            problems.append(f"sample {i}: columns {sorted(row)} != written {sorted(exp)}")
            continue
        for col, enc in columns.items():
            got = source_view(row[col], enc in LOSSY)
            if got != exp[col]:
                problems.append(f"sample {i} column {col!r} ({enc}): {describe_diff(got, exp[col])}")
    if problems:
        pytest.fail(f"{who} differs from the written samples in {len(problems)} values:\n  "
                    + "\n  ".join(problems[:MAX_REPORTED]), pytrace=False)


def assert_same_rows(a: list[dict], b: list[dict], what: str) -> None:
    """Exact equality of normalised rows (types, classes, pixels, palettes)."""
    assert len(a) == len(b), f"{what}: {len(a)} != {len(b)} samples"
    problems = []
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            for col in sorted(set(x) | set(y)):
                if x.get(col) != y.get(col):
                    problems.append(f"sample {i} column {col!r}: {describe_diff(x.get(col), y.get(col))}")
    if problems:
        pytest.fail(f"{what}: {len(problems)} values differ:\n  " + "\n  ".join(problems[:MAX_REPORTED]),
                    pytrace=False)


def assert_consistent(read: dict, who: str) -> None:
    """``ds[i]`` (and negative indices) return what iteration yields."""
    assert read["len"] == len(read["iter"]), f"{who}: len() is {read['len']}, iteration gave {len(read['iter'])}"
    by_index = [read["items"][i] for i in range(read["len"])]
    assert_same_rows(by_index, read["iter"], f"{who}: ds[i] vs iteration")
    for k, row in read.get("neg", {}).items():
        assert row == read["iter"][k], f"{who}: ds[{k}] differs from iteration"


def _batch_container_ok(enc: str, value, m: int) -> str:
    """'' if the batch column has the documented container type, else a description."""
    if enc == "int" or enc in SCALAR_ENCODINGS:
        want = np.dtype("int64" if enc == "int" else enc)
        if not (isinstance(value, np.ndarray) and value.shape == (m,) and value.dtype == want):
            return f"expected a ({m},) {want} array, got {type(value).__name__} {getattr(value, 'shape', '')} " \
                   f"{getattr(value, 'dtype', '')}"
        return ""
    parts = enc.split(":")
    if parts[0] == "ndarray" and len(parts) == 3:
        shape = (m,) + tuple(int(x) for x in parts[2].split(","))
        if not (isinstance(value, np.ndarray) and value.shape == shape and value.dtype == np.dtype(parts[1])):
            return f"expected a {shape} {parts[1]} array, got {type(value).__name__} {getattr(value, 'shape', '')}"
        return ""
    if parts[0] == "ndarray":
        return "" if isinstance(value, (Ragged, list)) and len(value) == m else \
            f"expected a Ragged or list of {m}, got {type(value).__name__}"
    return "" if isinstance(value, list) and len(value) == m else f"expected a list of {m}, got {type(value).__name__}"


def check_batch(batch: dict, idx: list[int], columns: dict, rows: list[dict], what: str) -> list[str]:
    problems = []
    n = len(rows)
    if set(batch) != set(columns):
        return [f"{what}: columns {sorted(batch)} != {sorted(columns)}"]
    for col, enc in columns.items():
        value = batch[col]
        bad = _batch_container_ok(enc, value, len(idx))
        if bad:
            problems.append(f"{what} column {col!r} ({enc}): {bad}")
            continue
        for k, i in enumerate(idx):
            row = value[k]
            expected = rows[i % n][col]
            got = norm(int(row)) if enc == "int" and isinstance(row, np.integer) else norm(row)
            if got != expected:
                problems.append(f"{what} row {k} (sample {i}) column {col!r} ({enc}): {describe_diff(got, expected)}")
    return problems


def assert_batches(ds: StreamingDataset, spec_columns: dict, rows: list[dict]) -> None:
    """get_batch over everything, over a scattered cross-shard selection, and batches()."""
    n = len(rows)
    problems = []
    selections = [list(range(n)), [n - 1, 0, n // 2, n // 2, 1, -1, n - 2, 3]]
    for idx in selections:
        try:
            batch = ds.get_batch(idx)
        except Exception as exc:  # noqa: BLE001 - report as a failure with the selection
            problems.append(f"get_batch({idx}) raised {type(exc).__name__}: {exc}")
            continue
        problems += check_batch(batch, idx, spec_columns, rows, f"get_batch({short(idx, 60)})")
    try:
        lo = 0
        for batch in ds.batches(batch_size=5):
            m = len(next(iter(batch.values())))
            problems += check_batch(batch, list(range(lo, lo + m)), spec_columns, rows, f"batches(5)@{lo}")
            lo += m
        if lo != n:
            problems.append(f"batches(5) yielded {lo} rows, expected {n}")
    except Exception as exc:  # noqa: BLE001
        problems.append(f"batches(5) raised {type(exc).__name__}: {exc}")
    if problems:
        pytest.fail(f"{len(problems)} batch problems:\n  " + "\n  ".join(problems[:MAX_REPORTED]), pytrace=False)


def peer_result(res: dict, what: str) -> dict:
    if not res["ok"]:
        pytest.fail(f"{what} failed in mosaicml-streaming:\n{res['error'][-6000:]}", pytrace=False)
    return res["result"]


def count_shards(datadir: Path) -> list[int]:
    with open(datadir / "index.json") as f:
        return [s["samples"] for s in json.load(f)["shards"]]


def has_lossy(spec: dict) -> bool:
    return any(enc in LOSSY for enc in spec["columns"].values())


# ----------------------------------------------------------------------------------
# 1. written by mosaicml-streaming, read by shardstream
# ----------------------------------------------------------------------------------

@pytest.mark.parametrize("name", CASE_NAMES)
def test_mosaic_written_read_by_shardstream(world, tmp_path, name):
    spec = world.cases[name]
    peer_result(world.mosaic_write[name], f"writing {name!r} with streaming.MDSWriter")
    shards = count_shards(world.mosaic_dir(spec["dir"]))
    assert len(shards) >= 2, f"test design: {name} should span several shards, got {shards}"

    ds = open_ours(copy_dataset(world.mosaic_dir(spec["dir"]), tmp_path), validate_hash_for(spec))
    ours = read_ours(ds)
    assert ours["len"] == spec["n"]
    assert_consistent(ours, "shardstream")
    assert_matches_source(ours["iter"], [spec], "shardstream reading mosaic's dataset")

    # Same files read by mosaicml-streaming itself: exact equality, including decoded
    # JPEG pixels (compared between readers, not against the source).
    peer = world.peer_read_mosaic[name]
    if peer["ok"]:
        assert_same_rows(ours["iter"], peer["result"]["iter"], "shardstream vs streaming reading mosaic's dataset")
    elif has_lossy(spec):
        peer_result(peer, f"reading {name!r} (as written by streaming) with streaming.StreamingDataset")
    else:
        warnings.warn(f"mosaicml-streaming cannot read its own dataset {name!r}: {peer['error'][:300]}")

    assert_batches(ds, spec["columns"], ours["iter"])


# ----------------------------------------------------------------------------------
# 2. written by shardstream, read by mosaicml-streaming
# ----------------------------------------------------------------------------------

@pytest.mark.parametrize("name", CASE_NAMES)
def test_shardstream_written_read_by_mosaic(world, tmp_path, name):
    spec = world.cases[name]
    error = world.ours_write[name]
    if error:
        pytest.fail(f"shardstream.MDSWriter failed to write {name!r}:\n{error}", pytrace=False)
    assert len(count_shards(world.ours_dir(spec["dir"]))) >= 2

    peer = peer_result(world.peer_read_ours[name], f"reading shardstream's {name!r} with streaming.StreamingDataset")
    assert peer["len"] == spec["n"], f"streaming sees {peer['len']} samples, {spec['n']} were written"
    assert_consistent(peer, "streaming")
    assert_matches_source(peer["iter"], [spec], "streaming reading shardstream's dataset")

    # Cross-check with shardstream reading its own files (JPEG pixels between readers).
    ds = open_ours(copy_dataset(world.ours_dir(spec["dir"]), tmp_path), validate_hash_for(spec))
    ours = read_ours(ds)
    assert_same_rows(ours["iter"], peer["iter"], "shardstream vs streaming reading shardstream's dataset")


# ----------------------------------------------------------------------------------
# 3. byte-identical output
# ----------------------------------------------------------------------------------

def _files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def _explain_raw_diff(a: bytes, b: bytes, label: str) -> str:
    """Where two uncompressed MDS shards differ: count, offsets, config or a sample."""
    if a == b:
        return ""
    first = next((k for k in range(min(len(a), len(b))) if a[k] != b[k]), min(len(a), len(b)))
    msg = [f"{label}: sizes mosaic={len(a)} shardstream={len(b)}, first differing byte at {first}"]
    try:
        na, nb = int.from_bytes(a[:4], "little"), int.from_bytes(b[:4], "little")
        if na != nb:
            msg.append(f"sample counts differ: mosaic={na} shardstream={nb}")
            return "; ".join(msg)
        oa = np.frombuffer(a, "<u4", na + 1, 4)
        ob = np.frombuffer(b, "<u4", nb + 1, 4)
        ca = a[4 + 4 * (na + 1):int(oa[0])]
        cb = b[4 + 4 * (nb + 1):int(ob[0])]
        if ca != cb:
            msg.append(f"embedded config differs:\n    mosaic:      {ca.decode(errors='replace')}\n"
                       f"    shardstream: {cb.decode(errors='replace')}")
        for i in range(na):
            sa, sb = a[oa[i]:oa[i + 1]], b[ob[i]:ob[i + 1]]
            if sa != sb:
                k = next((j for j in range(min(len(sa), len(sb))) if sa[j] != sb[j]), min(len(sa), len(sb)))
                msg.append(f"sample {i} differs (sizes {len(sa)} vs {len(sb)}) from byte {k}: "
                           f"mosaic {sa[k:k + 24].hex()} shardstream {sb[k:k + 24].hex()}")
                break
        if not np.array_equal(oa, ob):
            k = int(np.flatnonzero(oa != ob)[0])
            msg.append(f"offset table differs from entry {k}: mosaic {oa[k]} shardstream {ob[k]}")
    except Exception as exc:  # noqa: BLE001 - diagnostics only
        msg.append(f"(could not parse the shards: {exc})")
    return "; ".join(msg)


def _decompress(algo: str, data: bytes, raw_size: int) -> bytes:
    from shardstream.format.compression import decompress

    return decompress(algo, data, raw_size)


def _mask_gzip(data: bytes) -> bytes:
    # gzip header bytes 4..8 hold MTIME: Python's gzip.compress (used by mosaicml-streaming)
    # stores the current time there.
    return data[:4] + b"\0\0\0\0" + data[8:] if len(data) >= 10 else data


def _index_diff(ia: dict, ib: dict, gz: bool) -> list[str]:
    problems = []
    for key in sorted(set(ia) | set(ib)):
        if key != "shards" and ia.get(key) != ib.get(key):
            problems.append(f"index.json {key!r}: mosaic={ia.get(key)!r} shardstream={ib.get(key)!r}")
    sa, sb = ia.get("shards", []), ib.get("shards", [])
    if len(sa) != len(sb):
        problems.append(f"index.json lists {len(sa)} shards (mosaic) vs {len(sb)} (shardstream): "
                        f"samples per shard mosaic={[s.get('samples') for s in sa]} "
                        f"shardstream={[s.get('samples') for s in sb]}")
    for k, (x, y) in enumerate(zip(sa, sb)):
        x, y = json.loads(json.dumps(x)), json.loads(json.dumps(y))
        if gz:
            for s in (x, y):
                if s.get("zip_data"):
                    s["zip_data"]["hashes"] = "<masked: gzip mtime>"
        for key in sorted(set(x) | set(y)):
            if x.get(key) != y.get(key):
                problems.append(f"index.json shard {k} {key!r}: mosaic={x.get(key)!r} shardstream={y.get(key)!r}")
    return problems


def compare_datasets(a: Path, b: Path, spec: dict) -> list[str]:
    """Differences between the mosaic-written dir ``a`` and the shardstream-written dir ``b``."""
    problems = []
    fa, fb = _files(a), _files(b)
    if fa != fb:
        problems.append(f"file lists differ: only mosaic {sorted(set(fa) - set(fb))}, "
                        f"only shardstream {sorted(set(fb) - set(fa))}")
    ta, tb = (a / "index.json").read_bytes(), (b / "index.json").read_bytes()
    ia, ib = json.loads(ta), json.loads(tb)
    gz = (spec.get("compression") or "").split(":")[0] == "gz"
    problems += _index_diff(ia, ib, gz)
    if not problems and ta != tb and not gz:
        warnings.warn(f"{spec['name']}: index.json parses equal but its text differs (formatting/key order)")
    raw_sizes = {}
    for s in ia.get("shards", []):
        if s.get("zip_data"):
            raw_sizes[s["zip_data"]["basename"]] = s["raw_data"]["bytes"]
    for name in sorted(set(fa) & set(fb)):
        if name == "index.json":
            continue
        da, db = (a / name).read_bytes(), (b / name).read_bytes()
        if gz and name.endswith(".gz"):
            da, db = _mask_gzip(da), _mask_gzip(db)
        if da == db:
            continue
        if name in raw_sizes:
            ra = _decompress(spec["compression"], (a / name).read_bytes(), raw_sizes[name])
            rb = _decompress(spec["compression"], (b / name).read_bytes(), raw_sizes[name])
            if ra == rb:
                where = [k for k in range(min(len(da), len(db))) if da[k] != db[k]][:8]
                detail = ", ".join(f"byte {k}: mosaic {da[k]:#04x} shardstream {db[k]:#04x}" for k in where)
                if gz and where and max(where) < 10:
                    detail += " (gzip header; byte 9 is the OS field, bytes 4-7 MTIME are masked)"
                problems.append(f"{name}: compressed bytes differ ({len(da)} vs {len(db)} bytes) but decompress "
                                f"to identical shards (codec/settings difference): {detail}")
            else:
                problems.append(_explain_raw_diff(ra, rb, f"{name} (decompressed)"))
        else:
            problems.append(_explain_raw_diff(da, db, name))
    return problems


def _pillow_matches(world) -> str:
    import PIL
    import PIL.features

    ours = {"pillow": PIL.__version__, "libjpeg": PIL.features.version("jpg"), "zlib": PIL.features.version("zlib")}
    theirs = {k: world.peer_info.get(k) for k in ours}
    return "" if ours == theirs else f"Pillow builds differ: ours {ours}, peer {theirs}"


@pytest.mark.parametrize("name", [c["name"] for c in CASES if c.get("compression") in DETERMINISTIC_COMPRESSIONS])
def test_byte_identical_output(world, name):
    spec = world.cases[name]
    if any(enc in samples.IMAGE_CODECS for enc in spec["columns"].values()):
        why = _pillow_matches(world)
        if why:
            pytest.skip(f"image codec bytes come from Pillow; {why}")
    peer_result(world.mosaic_write[name], f"writing {name!r} with streaming.MDSWriter")
    if world.ours_write[name]:
        pytest.fail(f"shardstream.MDSWriter failed:\n{world.ours_write[name]}", pytrace=False)
    mosaic_dir, ours_dir = world.mosaic_dir(spec["dir"]), world.ours_dir(spec["dir"])
    if name.startswith("oversize_first"):
        _assert_only_empty_shard_differs(mosaic_dir, ours_dir)
        return
    problems = compare_datasets(mosaic_dir, ours_dir, spec)
    if problems:
        pytest.fail(f"{name}: output differs from mosaicml-streaming's ({len(problems)} differences):\n  "
                    + "\n  ".join(problems[:MAX_REPORTED]), pytrace=False)


def _assert_only_empty_shard_differs(mosaic_dir, ours_dir) -> None:
    """A first sample larger than size_limit: mosaicml-streaming writes an empty shard
    before it; shardstream never writes empty shards. Everything else is identical:
    the non-empty shards hold the same bytes in the same order."""
    theirs = json.loads((mosaic_dir / "index.json").read_text())["shards"]
    ours = json.loads((ours_dir / "index.json").read_text())["shards"]
    assert [s["samples"] for s in theirs][0] == 0, "the peer no longer writes an empty first shard"
    theirs = [s for s in theirs if s["samples"]]
    assert len(theirs) == len(ours) and all(s["samples"] for s in ours)
    for t, o in zip(theirs, ours):
        assert (mosaic_dir / t["raw_data"]["basename"]).read_bytes() == (ours_dir / o["raw_data"]["basename"]).read_bytes()
        assert {k: v for k, v in t.items() if k not in ("raw_data", "zip_data")} == \
            {k: v for k, v in o.items() if k not in ("raw_data", "zip_data")}


# ----------------------------------------------------------------------------------
# 4. merge_index
# ----------------------------------------------------------------------------------

def _merge_sources(world, who: str) -> list[dict]:
    return world.merge["mds_parts" if who == "mds" else "ss_parts"]


def _assert_merge_built(world) -> None:
    if world.merge["ss_errors"]:
        pytest.fail(f"shardstream failed writing or merging the parts:\n{world.merge['ss_errors']}", pytrace=False)


def test_merge_by_shardstream_read_by_mosaic(world):
    _assert_merge_built(world)
    peer = peer_result(world.merge["peer_read_ss_merged"], "reading the index merged by shardstream.merge_index")
    assert_consistent(peer, "streaming")
    assert_matches_source(peer["iter"], _merge_sources(world, "ss"), "streaming reading the shardstream-merged dataset")


@pytest.mark.parametrize("parts_by", ["ss", "mds"])
def test_merge_by_mosaic_read_by_shardstream(world, tmp_path, parts_by):
    if parts_by == "ss":
        _assert_merge_built(world)
        peer_result(world.merge["mds_merge_of_ss_parts"], "streaming's merge_index over shardstream parts")
        src = world.root / "merge-ss-by-mds"
    else:
        for res in world.merge["mds_write_and_merge"]:
            peer_result(res, "writing/merging the streaming parts")
        src = world.root / "merge-mds"
    ds = open_ours(copy_dataset(src, tmp_path), "xxh64")
    ours = read_ours(ds)
    assert_consistent(ours, "shardstream")
    assert_matches_source(ours["iter"], _merge_sources(world, parts_by),
                          "shardstream reading the streaming-merged dataset")
    assert_batches(ds, samples.MERGE_PART_COLUMNS, ours["iter"])


@pytest.mark.parametrize("form", ["root", "list"])
def test_merged_index_matches_mosaic(world, form):
    _assert_merge_built(world)
    peer_result(world.merge["mds_merge_of_ss_parts"], "streaming's merge_index over shardstream parts")
    theirs = json.loads((world.root / "merge-ss-by-mds" / "index.json").read_text())
    ours = json.loads((world.root / ("merge-ss" if form == "root" else "merge-ss-list") / "index.json").read_text())
    if ours != theirs:
        problems = [f"{k}: mosaic={short(theirs.get(k))} shardstream={short(ours.get(k))}"
                    for k in sorted(set(ours) | set(theirs)) if k != "shards" and ours.get(k) != theirs.get(k)]
        sa, sb = theirs.get("shards", []), ours.get("shards", [])
        if len(sa) != len(sb):
            problems.append(f"{len(sa)} shards (mosaic) vs {len(sb)} (shardstream)")
        for k, (x, y) in enumerate(zip(sa, sb)):
            for key in sorted(set(x) | set(y)):
                if x.get(key) != y.get(key):
                    problems.append(f"shard {k} {key!r}: mosaic={short(x.get(key))} shardstream={short(y.get(key))}")
        pytest.fail("merged index.json differs from streaming's merge_index:\n  "
                    + "\n  ".join(problems[:MAX_REPORTED]), pytrace=False)
