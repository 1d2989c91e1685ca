"""``BatchLoader``: column batches of numpy arrays, made ahead in a background thread.

For training loops with no PyTorch DataLoader (JAX, plain numpy). ``BatchLoader`` takes

- a ``StreamingDataset``: each ``iter(loader)`` runs the dataset's next pass and yields this process's
  ``batch_size`` samples of every global step as one column batch (see ``StreamingDataset.iterate_batches``);
- any processing chain (``ds.filter(...).pack(...)``): its rows, ``batch_size`` (the root dataset's, or the
  loader's ``batch_size=``) at a time, as numpy columns; a chain that already ends in ``batch`` keeps its
  batches. Every rank ends the pass at the same step (see :mod:`shardstream.engine.agree`);
- a sharded source (``ParquetShardedSource(...)``): the StreamingDataset of its files
  (``source.dataset(batch_size=...)``).

A thread makes up to ``prefetch`` batches ahead (:mod:`.threadloader`, the engine under every thread
loader); ``state_dict()`` is the state after the last batch handed to the loop, not after those made
ahead, so a checkpoint resumes exactly where the loop was, on any world size.
"""

from __future__ import annotations

from typing import Any, Callable, Optional, Sequence

from ..errors import InvalidArgumentError
from ..plan import World
from .threadloader import ChainRun, DatasetRun, LoaderError, ThreadLoader

__all__ = ["BatchLoader", "LoaderError", "batch_run"]


class BatchLoader(ThreadLoader):
    """Column batches of ``dataset`` (a StreamingDataset, a chain or a sharded source) for this process (see the
    module docstring).

    ``world``: this process's place in the job (default: the dataset's ``detect_world``).
    ``columns``: decode (or keep) only these. ``transform``: applied to each batch in the thread (for example to
    place it on devices). ``prefetch``: batches made ahead (>= 1). ``batch_size``: rows per batch, for a source
    or a chain whose dataset has none (a dataset's own must agree). ``stats``: keep loader stats (``True``, a
    list of exporters, or a :class:`~shardstream.stats.StatsConfig`; see :meth:`stats`).
    """

    def __init__(self, dataset, *, world: Optional[World] = None, columns: Optional[Sequence[str]] = None,
                 prefetch: int = 2, transform: Optional[Callable[[dict], Any]] = None, stats=None,
                 batch_size: Optional[int] = None) -> None:
        if isinstance(prefetch, bool) or not isinstance(prefetch, int) or prefetch < 1:
            raise InvalidArgumentError(f"prefetch={prefetch!r} must be an int >= 1")
        if world is not None and not isinstance(world, World):
            raise InvalidArgumentError(f"world={world!r} must be a shardstream.plan.World or None")
        config = self._stats_config(stats)
        run = batch_run(dataset, world, columns, batch_size, type(self).__name__)
        self.dataset = run.dataset
        self.world = world
        self.columns = None if columns is None else list(columns)
        self.prefetch = prefetch
        self.transform = transform
        self._start_loader(run, prefetch, transform, config, world)

    def __len__(self) -> int:
        """Batches this process receives in the pass in progress (else in the next one); a dataset's only."""
        return self._run.length()


def batch_run(source, world: Optional[World], columns: Optional[Sequence[str]], batch_size: Optional[int],
              who: str = "BatchLoader"):
    """What a loader of column batches runs for ``source``: a :class:`~.threadloader.DatasetRun` for a
    StreamingDataset (or a sharded source's), a :class:`~.threadloader.ChainRun` for a processing chain."""
    if batch_size is not None and (isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1):
        raise InvalidArgumentError(f"batch_size={batch_size!r} must be an int >= 1 or None")
    if hasattr(source, "take_pass"):  # a processing chain
        return ChainRun(_batched(source, columns, batch_size), world)
    if not hasattr(source, "iterate_batches") and callable(getattr(source, "dataset", None)) \
            and hasattr(source, "shard_names"):  # a sharded source: the StreamingDataset of its files
        if batch_size is None:
            raise InvalidArgumentError(f"{who} over a sharded source needs batch_size= (rows per batch per process)")
        source = source.dataset(batch_size=batch_size)
    if not hasattr(source, "iterate_batches"):
        raise InvalidArgumentError(
            f"{who} reads a shardstream StreamingDataset, a processing chain (ds.map(...)) or a sharded source "
            f"(ParquetShardedSource(...)); got {type(source).__name__}")
    if source.batch_size is None and batch_size is not None:
        source.adopt_batch_size(batch_size)
    if source.batch_size is None:
        raise InvalidArgumentError(
            "the dataset has no batch_size; build it with StreamingDataset(..., batch_size=N), N samples "
            f"per process per step, or give {who}(..., batch_size=N)")
    if batch_size is not None and batch_size != source.batch_size:
        raise InvalidArgumentError(f"batch_size={batch_size} differs from the dataset's batch_size="
                                   f"{source.batch_size}; leave it out or build the dataset with it")
    source.check_batchable(columns)
    return DatasetRun(source, world, None if columns is None else list(columns))


def _batched(chain, columns: Optional[Sequence[str]], batch_size: Optional[int]):
    """``chain``'s rows as batches of numpy columns (a chain of batches as it is, in numpy unless formatted)."""
    if columns is not None:
        chain = chain.select_columns(list(columns))
    if not chain.batched:
        size = batch_size if batch_size is not None else chain.root.batch_size
        if size is None:
            raise InvalidArgumentError(
                "the chain's dataset has no batch_size; give the loader batch_size=N (rows per batch per "
                "process) or build the dataset with StreamingDataset(..., batch_size=N)")
        chain = chain.batch(size)
    return chain if chain.format is not None else chain.with_format("numpy")
