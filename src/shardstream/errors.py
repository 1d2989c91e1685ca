"""Typed errors. Every error the library raises on bad input derives from
:class:`ShardstreamError` and also from the builtin exception a caller would
naturally catch (``ValueError``, ``FileNotFoundError``, ``IndexError`` ...).

Messages say what was received, what was expected, and how to fix it.
"""

from __future__ import annotations

import json


class ShardstreamError(Exception):
    """Base class of every error raised by shardstream."""


class InvalidArgumentError(ShardstreamError, ValueError):
    """An argument has a wrong value or type."""


class MissingDependencyError(ShardstreamError, ImportError):
    """An optional dependency is needed; the message names the extra to install."""


class IndexNotFoundError(ShardstreamError, FileNotFoundError):
    """The dataset directory has no ``index.json``."""


class NotADatasetError(IndexNotFoundError, NotADirectoryError):
    """The dataset location is a file; shardstream reads MDS datasets: a directory with ``index.json``."""


class CorruptIndexError(ShardstreamError, ValueError):
    """``index.json`` is not valid JSON or does not describe an MDS dataset."""


class IndexJSONError(CorruptIndexError, json.JSONDecodeError):
    """``index.json`` is empty or not JSON. Also a :class:`json.JSONDecodeError` (as mosaicml-streaming
    raises): ``doc``, ``pos``, ``lineno`` and ``colno`` locate the fault; the message names the file."""

    def __init__(self, message: str, doc: str = "", pos: int = 0) -> None:
        Exception.__init__(self, message)
        self.msg, self.doc, self.pos = message, doc, pos
        self.lineno = doc.count("\n", 0, pos) + 1
        self.colno = pos - doc.rfind("\n", 0, pos)

    def __reduce__(self):
        return type(self), (self.args[0], self.doc, self.pos)


class LocalIndexMissingError(IndexNotFoundError, RuntimeError):
    """A dataset with no remote whose local directory has no index file. Also a ``RuntimeError``, as
    mosaicml-streaming raises in this case."""


class EmptyStreamError(ShardstreamError, RuntimeError):
    """A dataset (or a stream of a mixture) whose index lists no samples; the message names the index."""


class TemporaryDirectoryExistsError(ShardstreamError, FileExistsError):
    """``Stream()`` with neither ``remote`` nor ``local`` would make a temporary local directory that exists
    already; the message names it and the fix."""


class UnsupportedFormatError(ShardstreamError, ValueError):
    """A version, format, encoding, compression or hash that this library does not know."""


class UnsafePathError(ShardstreamError, ValueError):
    """A shard basename would resolve outside the dataset directory."""


class ShardNotFoundError(ShardstreamError, FileNotFoundError):
    """A shard listed in the index is missing on disk."""


class CorruptShardError(ShardstreamError, ValueError):
    """A shard's bytes do not match its index entry or its own header."""


class HashMismatchError(CorruptShardError):
    """A shard's digest differs from the one recorded in the index."""


class UnsafeEncodingError(ShardstreamError, ValueError):
    """A column uses an encoding that can execute code on read (``pkl``)."""


class EncodeError(ShardstreamError, TypeError, AttributeError):
    """A value given to the writer does not fit its column's encoding (mosaicml-streaming's encoders
    raise AttributeError there, so this is one too)."""


class SampleIndexError(ShardstreamError, IndexError):
    """A sample index is out of range."""


class WriterError(ShardstreamError, RuntimeError):
    """The writer cannot continue (closed, failed upload, output directory in use)."""


class OutputExistsError(WriterError, FileExistsError):
    """The writer's output directory already holds files."""


class UploadError(WriterError, OSError):
    """Uploading a written file to its remote location failed."""


class OutputWriteError(WriterError, OSError):
    """Writing a file of the dataset to its local directory failed (disk full, size limit,
    permissions); the message names the file. ``errno`` is the underlying error's."""


class NotYetSupportedError(ShardstreamError, NotImplementedError):
    """An option that is accepted for compatibility but not implemented in this version."""


class IncompatibleStateError(ShardstreamError, ValueError):
    """A resumption state that does not belong to this dataset or these settings."""


def require(module: str, extra: str, feature: str):
    """Import an optional dependency or raise :class:`MissingDependencyError`
    naming the extra that provides it."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise MissingDependencyError(
            f"{feature} needs the optional package {module!r}, which is not installed; "
            f"install it with: pip install 'shardstream[{extra}]'"
        ) from exc


class DownloadError(ShardstreamError, OSError):
    """A file could not be fetched from the remote (after retries); the message names it and its URL."""


class RemoteChangedError(DownloadError):
    """A remote file changed after the dataset's index was read; the message names it and what changed."""


class CacheLimitError(InvalidArgumentError):
    """``cache_limit`` is too small for the shards it must hold; the message gives the minimum."""


class CacheDirectoryError(ShardstreamError, FileExistsError):
    """``local=`` already holds something other than the cache of this ``remote`` (another dataset,
    or another remote's cache); the message names both and the fix."""


class UnknownKeywordError(ShardstreamError, TypeError, ValueError):
    """A keyword argument that the function does not take; the message names the closest one it does.
    A ``TypeError`` as Python raises, and a ``ValueError`` as mosaicml-streaming's writers raise."""


class NoFilesError(IndexNotFoundError):
    """A path, glob or list of files names no file of the dataset's format; the message says where it
    looked and what it matched."""


class SchemaMismatchError(CorruptIndexError):
    """The files of one dataset disagree on their columns; the message names the file and the column."""


class BadRowError(CorruptShardError):
    """A row of a text file (JSON Lines, CSV) cannot be parsed; the message names the file and the line
    number, and how to skip such rows (``on_bad_rows="skip"``)."""


class DecompressedSizeError(InvalidArgumentError):
    """A compressed text file (JSON Lines, CSV, text) that decompresses to more than
    ``SHARDSTREAM_MAX_DECOMPRESSED`` bytes (1 GiB unless set): such a file is read as one piece, whose
    rows are decoded at once. The message names the file and how to read it (decompress or split it)."""


class FileChangedError(RemoteChangedError):
    """A data file changed (size, ETag or modification time) after the dataset listed it; its rows would
    no longer be the ones the plan counted. Open the dataset again to list the new version."""


class SplitNotFoundError(InvalidArgumentError):
    """A split or subset (configuration) that the dataset does not have; the message lists those it has."""


class ConfigError(ShardstreamError, ValueError):
    """A pipeline configuration with an unknown key, a value of the wrong type or out of range; the message
    starts with the key's path (``pipeline.load.batch_size``) and says what is allowed.

    ``field`` is the path below the object that found the problem, ``detail`` the message without it."""

    def __init__(self, message: str, field: str | None = None, detail: str | None = None) -> None:
        super().__init__(message)
        self.field = field
        self.detail = detail if detail is not None else message


class CacheMismatchError(OutputExistsError):
    """The output of ``cache_to_mds`` holds processed data of another source or chain of stages (its
    fingerprint differs); the message says to pass ``overwrite=True`` or choose another output."""


class ConvertMismatchError(OutputExistsError):
    """A conversion's output was made with other settings, or from inputs that have since changed or gone;
    the message names what differs and says to rerun with the same settings or pass ``overwrite=True``."""


class ConvertVerifyError(CorruptShardError):
    """A converted dataset does not match its inputs (another row count, or a row whose values differ); the
    message names the row and the column."""


class InvalidRowError(ShardstreamError, ValueError):
    """A row (or batch) given to a transform lacks the column it reads, or holds a value of the wrong type or
    shape there; the message names the column, what it found and the row's columns."""


class SequenceTooLongError(InvalidArgumentError):
    """A tokenized row is longer than ``max_length`` and truncation is off; the message gives both lengths."""


class ChatTemplateError(InvalidArgumentError):
    """A chat template is missing, does not compile, fails on a conversation, or writes a message's content
    in a form whose tokens cannot be found (for the loss mask); the message says which and the fix."""


class TransformError(ShardstreamError, RuntimeError):
    """A function given to ``map`` or ``filter`` raised: the message names the source sample
    (dataset, shard, row, plan position) and holds the function's own traceback."""


class DocumentTooLongError(ShardstreamError, ValueError):
    """A document is longer than a pack's ``seq_len`` and packing keeps documents whole; the message names
    its length and the fixes (``truncate=True``, ``keep_remainder=True`` or a larger ``seq_len``)."""


class ColumnTypeError(EncodeError, AttributeError):
    """A value of a JSON, CSV, TSV or XSV shard's column is not of the column's type (``str``, ``int``,
    ``float``); an ``AttributeError`` too, as mosaicml-streaming raises there."""


class DelimiterInValueError(EncodeError, AssertionError):
    """A CSV, TSV or XSV value holds the separator or the newline, which would split its row; an
    ``AssertionError`` too, as mosaicml-streaming raises there."""


class MissingColumnError(EncodeError, KeyError):
    """A sample given to a JSON, CSV, TSV or XSV writer lacks one of its columns (a ``KeyError`` too)."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class TextColumnsError(InvalidArgumentError, AssertionError):
    """``columns=`` of a JSON, CSV, TSV or XSV writer names an encoding those shards cannot hold, or a
    column name that holds the separator or the newline; an ``AssertionError`` too, as
    mosaicml-streaming raises there."""


class StatsDisabledError(ShardstreamError, RuntimeError):
    """``loader.stats()`` on a loader built without stats."""


class ExportPathError(ShardstreamError, FileNotFoundError):
    """A stats exporter was given a file path whose directory does not exist."""


class PortInUseError(ShardstreamError, OSError):
    """A stats exporter's HTTP endpoint could not listen on the port it was given."""
