"""``AsyncDataLoader``: batches made in the background while the training step runs (EasyDeL's names).

It is a processing chain (:mod:`.dataset`) with a shuffle buffer (``shuffle_buffer_size``),
batching, a format, and a background thread that keeps ``prefetch_buffer_size`` batches
ready (``prefetch_enabled``). ``prefetch_workers`` threads download shards ahead of the
reader (the engine's download threads). Its ``state_dict()`` counts only the batches the
loop took, and resumes exactly, on any world (see :mod:`.run`). For CPU-heavy maps
across processes use ``StreamingDataLoader(chain, num_workers=...)`` instead.

``stats=True`` keeps loader stats (``loader.stats()``, see docs/stats-pipelines.md): the
background thread is the worker ("thread"; "main" without prefetch), it stamps each batch
with what making it cost, and ``__iter__`` times how long the loop waited for each one.
"""

from __future__ import annotations

from typing import Any, Iterator, Optional

from ..errors import InvalidArgumentError
from ..stats.loaders import LoaderStatsMixin, rows_of, timed_items
from ..stats.meter import BatchMeter


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


class AsyncDataLoader(LoaderStatsMixin):
    """Batches of ``batch_size`` rows from ``source``, made ahead in a background thread (see the module
    docstring). ``format``: ``"numpy"`` (default), ``"torch"``, ``"jax"`` or None (lists). ``stats``: keep
    loader stats (``True``, a list of exporters, or a :class:`~shardstream.stats.StatsConfig`; see
    :meth:`stats`)."""

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
        if prefetch_enabled:
            chain = chain.prefetch(prefetch_buffer_size)
        self.chain = chain
        self.batch_size = batch_size
        self._start_stats(config, chain.root, num_workers=0, parallel=False)

    def __iter__(self) -> Iterator[Any]:
        if self._loop_stats is None:
            return iter(self.chain)
        chain = self.chain
        ticket = (chain._next_epoch, chain._loaded)  # what iter(chain) runs
        chain._loaded = None
        prefetched = bool(chain._prefetch)
        meter = BatchMeter("thread" if prefetched else "main")
        it = chain.run_pass(ticket, meter if prefetched else None)
        return self._timed(it, meter, prefetched)

    def _timed(self, it, meter: BatchMeter, prefetched: bool) -> Iterator[Any]:
        """The chain's batches, timing the loop's waits for the stats (see the module docstring)."""
        loop = self._loop_stats
        for batch, asked, got in timed_items(it, loop):
            rows = rows_of(batch)
            if prefetched:  # the thread stamped it; its conversion to the format ran here
                loop.batch(asked, got, it.stats, rows, it.convert_s)
            else:
                loop.batch(asked, got, meter.stamp(got - asked, rows), rows)
            yield batch

    def state_dict(self) -> dict:
        """Where the loop is: after the batches it took (not those made ahead)."""
        return self.chain.state_dict()

    def load_state_dict(self, state) -> None:
        """Resume at the next iteration (any world)."""
        self.chain.load_state_dict(state)

    def set_epoch(self, epoch: int) -> None:
        self.chain.set_epoch(epoch)

    def close(self) -> None:
        """Stop the pass in progress (``close_stats()`` closes the stats' exporters)."""
        self.chain.close()

    def __del__(self) -> None:
        try:
            self.close_stats()
        except Exception:
            pass
