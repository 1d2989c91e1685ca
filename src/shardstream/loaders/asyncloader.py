"""``AsyncDataLoader``: batches made in the background while the training step runs (EasyDeL's names).

It takes a StreamingDataset, any processing chain (:mod:`.dataset`) or a sharded source, and adds a
shuffle buffer (``shuffle_buffer_size``), batching and a format; a background thread keeps
``prefetch_buffer_size`` batches ready (``prefetch_enabled``): the thread loader
(:mod:`shardstream.loaders.threadloader`) that ``BatchLoader`` and ``JaxLoader`` run on too.
``prefetch_workers`` threads download shards ahead of the reader (the engine's download threads). Its
``state_dict()`` counts only the batches the loop took, and resumes exactly, on any world (see
:mod:`.run`); every rank ends a pass at the same step (:mod:`.agree`). For CPU-heavy maps across
processes use ``StreamingDataLoader(chain, num_workers=...)`` instead.

``stats=True`` keeps loader stats (``loader.stats()``, see docs/stats-pipelines.md): the
background thread is the worker ("thread"; "main" without prefetch), it stamps each batch
with what making it cost, and ``__iter__`` times how long the loop waited for each one.
"""

from __future__ import annotations

from typing import Optional

from ..errors import InvalidArgumentError
from .threadloader import ChainRun, ThreadLoader


def as_chain(source):
    """``source`` as a processing chain: an IterableDataset as it is, a StreamingDataset's own chain, a
    sharded source's dataset."""
    from ..dataset.chain import IterableDataset

    if isinstance(source, IterableDataset):
        return source
    if hasattr(source, "as_iterable"):
        return source.as_iterable()
    make = getattr(source, "dataset", None)
    if callable(make):
        return make().as_iterable()
    raise InvalidArgumentError(
        f"AsyncDataLoader reads a StreamingDataset, a processing chain (ds.map(...)) or a sharded source "
        f"(ParquetShardedSource(...)); got {type(source).__name__}")


class AsyncDataLoader(ThreadLoader):
    """Batches of ``batch_size`` rows from ``source``, made ahead in a background thread (see the module
    docstring). ``format``: ``"numpy"`` (default), ``"torch"``, ``"jax"`` or None (lists). ``stats``: keep
    loader stats (``True``, a list of exporters, or a :class:`~shardstream.stats.StatsConfig`; see
    :meth:`stats`). Without ``prefetch_enabled`` batches are made in the loop's thread (or as far ahead as the
    chain's own ``prefetch(n)`` says)."""

    def __init__(self, source, batch_size: int = 8, prefetch_enabled: bool = True, prefetch_workers: int = 2,
                 prefetch_buffer_size: int = 4, shuffle_buffer_size: Optional[int] = None,
                 seed: Optional[int] = None, drop_last: bool = False, format: Optional[str] = "numpy",
                 stats=None) -> None:
        for name, value, low in (("prefetch_workers", prefetch_workers, 1),
                                 ("prefetch_buffer_size", prefetch_buffer_size, 1)):
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise InvalidArgumentError(f"{name}={value!r} must be an int >= {low}")
        config = self._stats_config(stats)
        chain = as_chain(source)
        chain.root.download_threads = max(chain.root.download_threads, prefetch_workers)
        if shuffle_buffer_size:
            chain = chain.shuffle(seed=seed, buffer_size=shuffle_buffer_size)
        chain = chain.batch(batch_size, drop_last_batch=drop_last).with_format(format)
        self.chain = chain
        self.batch_size = batch_size
        depth = prefetch_buffer_size if prefetch_enabled else chain.prefetch_depth
        self._start_loader(ChainRun(chain, None), depth, None, config)

    def set_epoch(self, epoch: int) -> None:
        """Make the next iteration run ``epoch`` from its start."""
        self.close()
        self._run.set_epoch(epoch)
