"""PyTorch: ``StreamingDataLoader``, a DataLoader that knows what the training loop consumed.

It runs a :class:`~shardstream.StreamingDataset` like a plain DataLoader does (any
``num_workers``, ``persistent_workers``, fork or spawn, ``pin_memory``, any
``collate_fn``) and adds:

- ``state_dict()`` / ``load_state_dict()`` that count the batches handed to the loop,
  not those the workers prefetched, as a global position (every rank receives the
  same number of batches per step, so each rank computes the same position without
  talking to the others). The state resumes on any number of nodes, ranks and workers.
- Epochs that advance by themselves: each ``iter(loader)`` runs the next epoch, with
  or without persistent workers; a ``load_state_dict`` or ``set_epoch`` between two
  epochs restarts persistent workers so that they see it.
- A batch path (``batch_decode``): workers decode each step's samples at once into
  column arrays instead of collating per-sample dicts; the main process turns the
  arrays into tensors without copying. It is on by default when it gives what
  ``default_collate`` would (numeric and fixed-shape array columns, ``str`` and
  ``bytes`` as lists) and no ``collate_fn`` is given.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Iterator, Optional, Sequence

import numpy as np
import torch
from torch.utils.data import DataLoader, IterableDataset

from ..errors import InvalidArgumentError
from ..format.batch import Ragged
from ..keywords import checked_keywords
from ..loader.batches import Consumed
from ..loader.options import check_batch_size

_BYTES_LIKE = ("str", "bytes")


class StepBatches(IterableDataset):
    """A dataset's epochs as one column batch per step (see ``StreamingDataset.iterate_batches``)."""

    def __init__(self, dataset, columns: Optional[Sequence[str]] = None) -> None:
        self.dataset = dataset
        self.columns = None if columns is None else list(columns)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return self.dataset.iterate_batches(columns=self.columns)


def keep(batch):
    """The identity collate: a step's column batch crosses to the main process as numpy arrays."""
    return batch


def to_torch(batch: Any, pin: bool = False) -> Any:
    """numpy arrays -> tensors sharing their memory (recursively through dicts, lists, Ragged)."""
    if isinstance(batch, np.ndarray):
        t = torch.from_numpy(batch) if batch.dtype != object else batch
        return t.pin_memory() if pin and isinstance(t, torch.Tensor) else t
    if isinstance(batch, dict):
        return {k: to_torch(v, pin) for k, v in batch.items()}
    if isinstance(batch, Ragged):
        return Ragged(to_torch(batch.values, pin), to_torch(np.asarray(batch.offsets), pin), batch.shapes)
    if isinstance(batch, tuple):
        return tuple(to_torch(v, pin) for v in batch)
    return batch


def collates_alike(dataset, columns: Optional[Sequence[str]] = None) -> bool:
    """True if decoding whole steps gives what ``default_collate`` gives for per-sample dicts."""
    if dataset._overridden_getitem() or not dataset.shards:
        return False
    wanted = None if columns is None else set(columns)
    shard = dataset.shards[0]  # every shard of a dataset has the same columns
    for name, enc, fixed in zip(shard.column_names, shard.encodings, shard.column_sizes):
        if wanted is not None and name not in wanted:
            continue
        array = enc.np_dtype is not None and enc.shape is not None and fixed is not None
        if not (array or enc.name in _BYTES_LIKE):
            return False
    return True


class StreamingDataLoader(DataLoader):
    """A DataLoader over a :class:`~shardstream.StreamingDataset` with checkpointable state.

    ``batch_size`` is the per-device batch; it must equal the dataset's ``batch_size``
    (adopted from here when the dataset was built without one). ``batch_decode``:
    ``None`` (decode whole steps when equivalent, see the module docstring), ``True``
    (always; variable-length array columns arrive as :class:`~shardstream.Ragged` of
    tensors, other columns as lists, and a ``collate_fn`` receives the numpy column
    batch), or ``False`` (per-sample dicts through ``collate_fn`` or ``default_collate``).
    ``columns`` limits the batch path to those columns.
    """

    @checked_keywords(DataLoader.__init__)
    def __init__(self, dataset, batch_size: Optional[int] = 1, *, num_workers: int = 0, collate_fn=None,
                 pin_memory: bool = False, batch_decode: Optional[bool] = None,
                 columns: Optional[Sequence[str]] = None, **kwargs) -> None:
        if not hasattr(dataset, "iterate_batches") or not hasattr(dataset, "_order"):
            raise InvalidArgumentError(
                f"StreamingDataLoader reads a shardstream StreamingDataset, got {type(dataset).__name__}; "
                "use torch.utils.data.DataLoader for other datasets"
            )
        for key in ("shuffle", "sampler", "batch_sampler"):
            if kwargs.get(key) not in (None, False):
                raise InvalidArgumentError(
                    f"{key}={kwargs[key]!r}: the dataset's epoch plan orders the samples; pass shuffle=True, "
                    "shuffle_seed=... to StreamingDataset instead"
                )
        if kwargs.get("in_order") is False:
            raise InvalidArgumentError("in_order=False would hand out batches out of plan order; leave it True")
        check_batch_size(batch_size)
        if batch_decode is None:
            if collate_fn is None and len(dataset._stream_layouts()) > 1:
                dataset._check_batchable(columns)  # refuses, saying the streams have different columns
            batch_decode = collate_fn is None and collates_alike(dataset, columns)
        elif batch_decode:
            dataset._check_batchable(columns)
        _adopt_batch_size(dataset, batch_size)  # last: a refused loader leaves the dataset as it was
        self.streaming_dataset = dataset
        self.batch_decode = bool(batch_decode)
        self._convert = self.batch_decode and collate_fn is None
        self._pin = pin_memory
        self._consumed = Consumed(dataset)
        self._expect: Optional[tuple] = None  # (next epoch, pending) the persistent workers will run
        if self.batch_decode:
            kwargs.pop("drop_last", None)  # every step is a full batch; torch refuses it without auto-batching
            super().__init__(StepBatches(dataset, columns), batch_size=None, num_workers=num_workers,
                             collate_fn=collate_fn or keep, pin_memory=False, **kwargs)
        else:
            super().__init__(dataset, batch_size=batch_size, num_workers=num_workers, collate_fn=collate_fn,
                             pin_memory=pin_memory, **kwargs)

    # -- iteration -------------------------------------------------------------------------
    def __iter__(self) -> Iterator[Any]:
        ds = self.streaming_dataset
        order = ds._order
        if self.num_workers and self._iterator is not None and self._expect != (order.next_epoch, order.pending):
            self._drop_workers()  # persistent workers would run another pass than the one asked for
        world = dataclasses.replace(ds.detect_world(), num_workers=self.num_workers, worker=0)
        if self.num_workers:
            order.upcoming(world)  # the plan is built (and cached) once here, before workers fork
        it = super().__iter__()  # workers start (or resume) here, from the dataset's state as it is now
        if self.num_workers:  # the main process keeps the record of the pass the workers run
            order.begin(world)
        self._expect = (order.next_epoch, order.pending)
        self._consumed.begin()
        return self._count(it)

    def _count(self, it) -> Iterator[Any]:
        pin = self._pin and torch.cuda.is_available()
        for batch in it:
            self._consumed.batches += 1
            yield to_torch(batch, pin) if self._convert else batch
        self._consumed.finished = True

    def _drop_workers(self) -> None:
        it = self._iterator
        self._iterator = None
        if it is not None and hasattr(it, "_shutdown_workers"):
            it._shutdown_workers()

    def __len__(self) -> int:
        """Batches this rank receives in the pass in progress (else in the next one)."""
        return self._consumed.length(self.streaming_dataset.detect_world())

    # -- state ---------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """The dataset's state after the batches this loader handed to the training loop."""
        return self._consumed.state_dict()

    def mixture_weights(self):
        """The streams' weights in effect where the training loop is (a weight schedule moves them)."""
        return self._consumed.mixture_weights()

    def load_state_dict(self, obj: dict[str, Any]) -> None:
        """Resume at the state's position on the next ``iter(loader)`` (any world size); persistent
        workers are restarted by the next ``iter`` (it sees the pending state)."""
        self.streaming_dataset.load_state_dict(obj)
        self._consumed.reset()

    def __del__(self) -> None:
        try:
            self._drop_workers()
        except Exception:
            pass


def _adopt_batch_size(dataset, batch_size: int) -> None:
    if dataset.batch_size is None:
        dataset._adopt_batch_size(batch_size)
    elif dataset.batch_size != batch_size:
        raise InvalidArgumentError(
            f"the loader's batch_size={batch_size} differs from the dataset's batch_size={dataset.batch_size}; "
            "they must be equal (the per-device batch) so that every batch is one step of the epoch plan"
        )
