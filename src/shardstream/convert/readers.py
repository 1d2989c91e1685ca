"""Reading one input file as Arrow record batches, a bounded amount at a time.

Each reader yields ``(batch, done)``: a ``pyarrow.RecordBatch`` and how many bytes of the file have been
read so far (for progress). Memory stays at a batch or a row group whatever the file's size: Parquet is
read row group by row group (``row_groups`` narrows a file to some of them), Arrow IPC batch by batch,
CSV and JSON Lines in blocks of ``block_size`` bytes (compressed files are decompressed as a stream, and
refused, naming the file, when damaged or cut short),
text files in blocks of lines, and an image folder one file per row.
"""

from __future__ import annotations

import json
from contextlib import contextmanager
from typing import Any, Iterator, Optional, Sequence

from ..errors import CorruptShardError, InvalidArgumentError, SchemaMismatchError
from ..format.arrowrows import pyarrow
from ..format.decompress import NamedStream
from ..format.files import codec_of, plain_name
from ..storage.fs import filesystem, is_remote
from .badlines import json_lines_error
from .inputs import InputFile

BATCH_ROWS = 8192
BLOCK_SIZE = 16 << 20


@contextmanager
def open_raw(file: InputFile, storage_options: Optional[dict]):
    """The file as a seekable ``pyarrow`` input (a local memory map, or an fsspec file for a URL)."""
    pa = pyarrow()
    if is_remote(file.url):
        fs, path = filesystem(file.url, storage_options)
        with fs.open(path, "rb", block_size=8 << 20) as f:
            yield pa.PythonFile(f, mode="r")
    else:
        with pa.OSFile(file.url, "rb") as f:
            yield f


@contextmanager
def open_stream(file: InputFile, storage_options: Optional[dict]):
    """``(stream, raw)``: the file's decompressed bytes as a stream, and the raw file (whose position is
    the progress). A compressed file that is damaged or cut short raises
    :class:`~shardstream.errors.CorruptShardError` naming it."""
    pa = pyarrow()
    codec = codec_of(file.name)
    with open_raw(file, storage_options) as raw:
        if codec is None:
            yield raw, raw
        else:
            with NamedStream(raw, codec, file.url) as plain:
                yield pa.PythonFile(plain, mode="r"), raw


def read_batches(kind: str, file: InputFile, storage_options: Optional[dict] = None, *,
                 schema=None, row_groups: Optional[Sequence[int]] = None, label_names: Sequence[str] = (),
                 batch_rows: int = BATCH_ROWS) -> Iterator[tuple[Any, int]]:
    """The rows of ``file`` (an input of kind ``kind``) as ``(record batch, bytes read)`` pairs. ``schema``:
    the types JSON Lines and CSV columns are parsed as (the first input's), so blocks agree."""
    try:
        if kind == "parquet":
            yield from _parquet(file, storage_options, row_groups, batch_rows)
        elif kind == "arrow":
            yield from _arrow(file, storage_options, batch_rows)
        elif kind in ("jsonl", "json"):
            yield from _json(file, storage_options, schema, kind)
        elif kind == "csv":
            yield from _csv(file, storage_options, schema)
        elif kind == "text":
            yield from _text(file, storage_options, batch_rows)
        elif kind == "imagefolder":
            yield from _image(file, storage_options, label_names)
        else:
            raise InvalidArgumentError(f"the converter does not read inputs of kind {kind!r}")
    except pyarrow().ArrowInvalid as exc:
        raise CorruptShardError(f"{file.name} could not be read as {kind}: {exc}; fix or leave out the file") from None


def _parquet(file: InputFile, storage_options, row_groups, batch_rows: int):
    pq = _pq()
    with open_raw(file, storage_options) as raw:
        pf = pq.ParquetFile(raw)
        groups = list(range(pf.num_row_groups)) if row_groups is None else list(row_groups)
        rows = pf.metadata.num_rows or 1  # progress: this run of row groups' share of the file
        done = 0
        for g in groups:
            for batch in pf.iter_batches(batch_size=batch_rows, row_groups=[g], use_threads=False):
                done += batch.num_rows
                yield batch, file.size * done // rows


def _pq():
    pyarrow()
    import pyarrow.parquet as pq

    return pq


def parquet_row_groups(file: InputFile, storage_options: Optional[dict]) -> list[tuple[int, int]]:
    """``(rows, bytes)`` of each row group of a Parquet file (its footer only is read)."""
    with open_raw(file, storage_options) as raw:
        meta = _pq().ParquetFile(raw).metadata
        return [(meta.row_group(g).num_rows, meta.row_group(g).total_byte_size) for g in range(meta.num_row_groups)]


def _arrow(file: InputFile, storage_options, batch_rows: int):
    pa = pyarrow()
    with open_raw(file, storage_options) as raw:
        try:
            reader = pa.ipc.open_file(raw)
            batches = (reader.get_batch(i) for i in range(reader.num_record_batches))
        except pa.ArrowInvalid:
            raw.seek(0)
            batches = iter(pa.ipc.open_stream(raw))
        for batch in batches:
            for start in range(0, batch.num_rows, batch_rows):
                yield batch.slice(start, batch_rows), raw.tell()


def _json(file: InputFile, storage_options, schema, kind: str):
    pa = pyarrow()
    import pyarrow.json as pj

    if kind == "json":
        yield from _json_array(file, storage_options)
        return
    parse = pj.ParseOptions(explicit_schema=schema) if schema is not None else pj.ParseOptions()
    with open_stream(file, storage_options) as (stream, raw):
        try:
            try:
                reader = pj.open_json(stream, read_options=pj.ReadOptions(block_size=BLOCK_SIZE, use_threads=False),
                                      parse_options=parse)
            except StopIteration:  # an empty file
                return
            for batch in reader:
                yield batch, raw.tell()
        except pa.ArrowInvalid as exc:  # named by its line, as the streaming reader names it
            raise json_lines_error(file, numbered_lines(file, storage_options), schema, exc) from None


def numbered_lines(file: InputFile, storage_options: Optional[dict]) -> Iterator[tuple[int, bytes]]:
    """``(number from 1, line)`` of every line of the (decompressed) file, read a block at a time."""
    number = 0
    with open_stream(file, storage_options) as (stream, _):
        for lines in line_blocks(stream):
            for number, line in enumerate(lines, number + 1):
                yield number, line


def line_blocks(stream) -> Iterator[list]:
    """The lines of ``stream`` (without their ``\\n``), a list per block of :data:`BLOCK_SIZE` bytes read; a
    last line without its ``\\n`` comes last, alone."""
    tail = b""
    while True:
        block = stream.read(BLOCK_SIZE)
        if not block:
            break
        lines = (tail + block).split(b"\n")
        tail = lines.pop()
        yield lines
    if tail:
        yield [tail]


def _json_array(file: InputFile, storage_options):
    """A file holding one JSON array of rows (or ``{"data": [...]}``), read whole as ``datasets`` reads one;
    a ``.json`` file that holds JSON Lines is read as JSON Lines."""
    pa = pyarrow()
    with open_stream(file, storage_options) as (stream, raw):
        text = stream.read()
    try:
        value = json.loads(text)
    except ValueError:
        yield from _json(file, storage_options, None, "jsonl")
        return
    rows = value.get("data") if isinstance(value, dict) else value
    if not isinstance(rows, list):
        raise CorruptShardError(f"{file.name} holds no array of rows; give JSON Lines (.jsonl) or a JSON array")
    yield pa.RecordBatch.from_pylist(rows), file.size


def _csv(file: InputFile, storage_options, schema):
    pa = pyarrow()
    import pyarrow.csv as pc

    delimiter = "\t" if plain_name(file.name).lower().endswith(".tsv") else ","
    convert = pc.ConvertOptions(column_types=dict(zip(schema.names, schema.types))) if schema is not None else None
    with open_stream(file, storage_options) as (stream, raw):
        try:
            reader = pc.open_csv(stream, read_options=pc.ReadOptions(block_size=BLOCK_SIZE, use_threads=False),
                                 parse_options=pc.ParseOptions(delimiter=delimiter), convert_options=convert)
        except StopIteration:
            return
        for batch in reader:
            yield batch, raw.tell()
    del pa


def _text(file: InputFile, storage_options, batch_rows: int):
    """One row per line, ``{"text": line}`` (the line ending is not part of the text)."""
    pa = pyarrow()
    with open_stream(file, storage_options) as (stream, raw):
        for lines in line_blocks(stream):
            yield from _text_batches(lines, batch_rows, raw.tell(), file)
    del pa


def _text_batches(lines: list, batch_rows: int, done: int, file: InputFile):
    pa = pyarrow()
    for start in range(0, len(lines), batch_rows):
        chunk = [line[:-1] if line.endswith(b"\r") else line for line in lines[start:start + batch_rows]]
        try:
            text = [line.decode("utf-8") for line in chunk]
        except UnicodeDecodeError as exc:
            raise CorruptShardError(f"{file.name} is not UTF-8 text ({exc}); convert it to UTF-8 first") from None
        yield pa.record_batch({"text": pa.array(text, pa.string())}), done


def _image(file: InputFile, storage_options, label_names: Sequence[str]):
    pa = pyarrow()
    label = file.name.split("/", 1)[0]
    if label not in label_names:
        raise SchemaMismatchError(f"{file.name} is in class folder {label!r}, which the conversion did not list")
    with open_raw(file, storage_options) as raw:
        data = raw.read()
    yield pa.record_batch({"image": pa.array([data], pa.binary()),
                           "label": pa.array([label_names.index(label)], pa.int64())}), file.size
