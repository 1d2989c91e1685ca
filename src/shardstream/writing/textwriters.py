"""``JSONWriter``, ``XSVWriter``, ``CSVWriter``, ``TSVWriter``: mosaicml-streaming's text shard formats
(:mod:`shardstream.format.textshards`), written where :class:`~shardstream.writing.MDSWriter` writes:
a local directory, any fsspec URL (staged, uploaded as shards finish, the index last) or a
``(local_dir, remote_url)`` pair, with the same ``exist_ok``, ``keep_local``, ``retry`` and
``max_workers``. Keywords and defaults are mosaicml-streaming's: no hashes unless asked, shards
of at most 64 MiB.

Example::

    with CSVWriter(out="data/csv", columns={"text": "str", "label": "int"}) as out:
        out.write({"text": "hello", "label": 1})
"""

from __future__ import annotations

from typing import Any, Optional, Sequence, Union

from ..format.shardwriter import DEFAULT_SIZE_LIMIT
from ..format.textwriter import TextShardWriter
from ..keywords import checked_keywords
from .mdswriter import MDSWriter

Out = Union[str, tuple[str, str]]


class _TextWriter(MDSWriter, TextShardWriter):
    """Where the files go (:class:`MDSWriter`) and what they hold (:class:`TextShardWriter`)."""

    def _open(self, *, columns: dict[str, str], newline: str, out: Out, keep_local: bool,
              compression: Optional[str], hashes: Optional[Sequence[str]], size_limit: Optional[Union[int, str]],
              progress_bar: bool, max_workers: Optional[int], retry: int, exist_ok: bool,
              storage_options: Optional[dict[str, Any]]) -> None:
        self.newline = newline
        MDSWriter.__init__(self, columns=columns, out=out, keep_local=keep_local, compression=compression,
                           hashes=hashes, size_limit=size_limit, progress_bar=progress_bar,
                           max_workers=max_workers, retry=retry, exist_ok=exist_ok,
                           storage_options=storage_options)

    def get_config(self) -> dict[str, Any]:
        """The shard-writing settings recorded in every shard's meta file and index entry."""
        return self._config()


class _FixedSeparator(_TextWriter):
    """A text writer whose separator (if any) is fixed by its format: the keywords of mosaicml-streaming's
    JSON, CSV and TSV writers."""

    @checked_keywords(kind="Writer")
    def __init__(self, *, columns: dict[str, str], newline: str = "\n", out: Out, keep_local: bool = False,
                 compression: Optional[str] = None, hashes: Optional[Sequence[str]] = None,
                 size_limit: Optional[Union[int, str]] = DEFAULT_SIZE_LIMIT, progress_bar: bool = False,
                 max_workers: Optional[int] = None, retry: int = 2, exist_ok: bool = False,
                 storage_options: Optional[dict[str, Any]] = None) -> None:
        self._open(columns=columns, newline=newline, out=out, keep_local=keep_local, compression=compression,
                   hashes=hashes, size_limit=size_limit, progress_bar=progress_bar, max_workers=max_workers,
                   retry=retry, exist_ok=exist_ok, storage_options=storage_options)


class JSONWriter(_FixedSeparator):
    """Write a JSON shard dataset: one JSON object per line (keys sorted), as mosaicml-streaming's
    ``JSONWriter``. Columns are ``str``, ``int`` or ``float``."""

    format = "json"


class XSVWriter(_TextWriter):
    """Write an XSV shard dataset: a header line of the column names (sorted), then one line per
    sample, fields joined by ``separator``, as mosaicml-streaming's ``XSVWriter``. Columns are
    ``str``, ``int`` or ``float``; a value holding the separator or the newline is refused."""

    format = "xsv"

    @checked_keywords(kind="Writer")
    def __init__(self, *, columns: dict[str, str], separator: str, newline: str = "\n", out: Out,
                 keep_local: bool = False, compression: Optional[str] = None,
                 hashes: Optional[Sequence[str]] = None, size_limit: Optional[Union[int, str]] = DEFAULT_SIZE_LIMIT,
                 progress_bar: bool = False, max_workers: Optional[int] = None, retry: int = 2,
                 exist_ok: bool = False, storage_options: Optional[dict[str, Any]] = None) -> None:
        self.separator = separator
        self._open(columns=columns, newline=newline, out=out, keep_local=keep_local, compression=compression,
                   hashes=hashes, size_limit=size_limit, progress_bar=progress_bar, max_workers=max_workers,
                   retry=retry, exist_ok=exist_ok, storage_options=storage_options)


class CSVWriter(_FixedSeparator):
    """An :class:`XSVWriter` whose separator is ``,`` (shards ``shard.NNNNN.csv``, format ``csv``)."""

    format = "csv"
    separator = ","


class TSVWriter(_FixedSeparator):
    """An :class:`XSVWriter` whose separator is a tab (shards ``shard.NNNNN.tsv``, format ``tsv``)."""

    format = "tsv"
    separator = "\t"
