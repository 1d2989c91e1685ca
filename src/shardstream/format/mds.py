"""MDS as a :class:`~shardstream.format.source.ShardFormat`: ``index.json`` lists the shards;
a compressed shard is fetched as its ``zip_data`` file and decompressed once into its
``raw_data`` file, which readers map (see :mod:`.reader`)."""

from __future__ import annotations

from typing import Any, Optional, Sequence

from .batch import shard_kinds
from .index import INDEX_BASENAME, FileInfo, ShardInfo, loads_index, read_index
from .reader import ShardReader, open_shard
from .source import ShardFormat


class MDSFormat(ShardFormat):
    name = "mds"
    index_name = INDEX_BASENAME

    def read_shards(self, dirname: str) -> list[ShardInfo]:
        return read_index(dirname)

    def parse_index(self, text: bytes, source: str) -> list[ShardInfo]:
        return loads_index(text, source)

    def fetched_files(self, shard: ShardInfo) -> list[FileInfo]:
        return [shard.stored]

    def resident_file(self, shard: ShardInfo) -> FileInfo:
        return shard.raw_data

    def prepare(self, dirname: str, shard: ShardInfo, keep_fetched: bool) -> None:
        open_shard(dirname, shard, None, keep_zip=keep_fetched)  # checks the header; decompresses to raw_data

    def open(self, dirname: str, shard: ShardInfo, validate_hash: Optional[str] = None) -> ShardReader:
        # with the compressed file as the only copy, it is decompressed beside it and kept
        return open_shard(dirname, shard, validate_hash, keep_zip=True)

    def kinds(self, shard: ShardInfo, columns: Optional[Sequence[str]] = None) -> list[tuple[str, str, Any]]:
        return shard_kinds(shard, columns)

    def layout(self, shard: ShardInfo) -> tuple:
        return tuple(shard.column_names), tuple(e.name for e in shard.encodings)

    def unsafe_columns(self, shard: ShardInfo) -> list[tuple[str, str]]:
        return [(name, enc.name) for name, enc in zip(shard.column_names, shard.encodings) if not enc.safe]


MDS_FORMAT = MDSFormat()
