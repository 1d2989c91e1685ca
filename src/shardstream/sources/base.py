"""The sharded-source protocol of EasyDeL (after Levanter's ``ShardedDataSource``): a fixed list of
named shards, each opened as an iterator of sample dicts, at its start or at any row.

A training loop that checkpoints ``(shard, row)`` resumes with ``open_shard_at_row(name, row)``;
:meth:`ShardedSource.iter_shards` walks shards from such a point. Sources compose:
:class:`TransformedShardedSource` (and :meth:`ShardedSource.map` / :meth:`ShardedSource.filter`)
apply a function to each row while keeping the shard layout, so resuming still works (rows are
counted in the underlying source). The file sources (:mod:`.files`) implement it over the engine.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator, Optional, Sequence

from ..errors import InvalidArgumentError, NotYetSupportedError


class ShardCount(int):
    """A number of shards that is also callable: ``source.num_shards`` (Levanter's property) and
    ``source.num_shards()`` (EasyDeL's method) both give it."""

    def __call__(self) -> int:
        return int(self)


@dataclass(frozen=True)
class ShardInfo:
    """What is known of one shard without reading it (EasyDeL's ``ShardInfo``)."""

    shard_id: int
    shard_name: str
    num_rows: Optional[int] = None
    byte_size: Optional[int] = None
    url: Optional[str] = None
    checksum: Optional[str] = None


class ShardedSource:
    """Named shards, each an iterator of rows (see the module docstring). Subclasses give
    :attr:`shard_names` and :meth:`open_shard_at_row`; the rest has working defaults."""

    @property
    def shard_names(self) -> list[str]:
        raise NotImplementedError

    @property
    def num_shards(self) -> ShardCount:
        return ShardCount(len(self.shard_names))

    def open_shard(self, shard_name: str) -> Iterator[dict]:
        """The rows of shard ``shard_name`` in order."""
        return self.open_shard_at_row(shard_name, 0)

    def open_shard_at_row(self, shard_name: str, row: int) -> Iterator[dict]:
        """The rows of shard ``shard_name`` from row ``row`` on (nothing when ``row`` is past its end)."""
        raise NotImplementedError

    def get_shard_info(self, shard_name: str) -> Optional[ShardInfo]:
        return None

    def iter_shards(self, shard_indices: Optional[Sequence[int]] = None, start_shard: int = 0,
                    start_row: int = 0) -> Iterator[dict]:
        """Rows of the shards ``shard_indices`` (all by default) in that order, starting at position
        ``start_shard`` of that list and row ``start_row`` of its shard (a checkpoint's place)."""
        names = self.shard_names
        indices = list(range(len(names))) if shard_indices is None else list(shard_indices)
        for i, k in enumerate(indices):
            if i < start_shard:
                continue
            yield from self.open_shard_at_row(names[k], start_row if i == start_shard else 0)

    def __iter__(self) -> Iterator[dict]:
        return self.iter_shards()

    def map(self, fn: Callable[[dict], dict]) -> "TransformedShardedSource":
        """This source with ``fn`` applied to each row, lazily."""
        return TransformedShardedSource(self, fn)

    def filter(self, predicate: Callable[[dict], bool]) -> "TransformedShardedSource":
        """This source with only the rows ``predicate`` keeps."""
        return TransformedShardedSource(self, lambda row: row if predicate(row) else None)


#: EasyDeL's and Levanter's name for the protocol
ShardedDataSource = ShardedSource


def applied(transform: Callable[[dict], Any], rows: Iterable[dict]) -> Iterator[dict]:
    """The rows ``transform`` makes of ``rows``: one per row (None drops it), or, for an expanding transform
    (``is_expand``), every row it yields."""
    if getattr(transform, "is_expand", False):
        for row in rows:
            yield from transform(row)
        return
    for row in rows:
        out = transform(row)
        if out is not None:
            yield out


class TransformedShardedSource(ShardedSource):
    """``source`` with ``transform`` applied to each row as it is read: a function returning the new row,
    or None to drop it; a transform with ``is_expand = True`` returns an iterable of rows instead.
    Shards and rows (for :meth:`open_shard_at_row`) are the underlying source's."""

    def __init__(self, source: ShardedSource, transform: Callable[[dict], Any]) -> None:
        if not callable(transform):
            raise InvalidArgumentError(f"transform={transform!r} must be callable: row -> row (or None to drop it)")
        self.source, self.transform = source, transform

    @property
    def shard_names(self) -> list[str]:
        return self.source.shard_names

    def open_shard_at_row(self, shard_name: str, row: int) -> Iterator[dict]:
        return self._apply(self.source.open_shard_at_row(shard_name, row))

    def _apply(self, rows: Iterator[dict]) -> Iterator[dict]:
        return applied(self.transform, rows)

    def get_shard_info(self, shard_name: str) -> Optional[ShardInfo]:
        return self.source.get_shard_info(shard_name)

    def __len__(self) -> int:
        return len(self.source)  # type: ignore[arg-type]

    def as_iterable(self, **kwargs: Any) -> Any:
        """This source as a processing chain: its files' StreamingDataset (``kwargs``: its settings) with the
        transform applied to each row (see :mod:`.transformed`). ``AsyncDataLoader(source)`` reads it so."""
        from .transformed import transformed_chain

        return transformed_chain(self, **kwargs)

    def dataset(self, **kwargs: Any) -> Any:
        """Refused: a StreamingDataset reads the files' rows, without this transform."""
        raise NotYetSupportedError(
            "a transformed source has no StreamingDataset of its own (its rows would miss the transform); use "
            "source.as_iterable(...), the dataset's chain with the transform applied, or source.source.dataset(...) "
            "and apply the transform to its samples")

    def __repr__(self) -> str:
        return f"TransformedShardedSource({self.source!r}, {self.transform!r})"
