"""JAX: the host's world from ``jax.process_index()`` and a loader of per-host numpy batches.

``JaxLoader`` takes a StreamingDataset, any processing chain or a sharded source, as
:class:`~shardstream.loaders.batches.BatchLoader` does. Each JAX process (host) reads its own
``batch_size`` samples of every global step; ``batch_size * jax.process_count()`` is the global batch. Batches are numpy arrays,
decoded ahead in a background thread; place them on devices with ``sharding``
(``jax.make_array_from_process_local_data``, the multi-host way to build one global
array from each host's part) or leave them on the host.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

import jax
import numpy as np

from ..errors import InvalidArgumentError
from ..loaders.batches import BatchLoader
from ..plan import World


def jax_world(replication: Optional[int] = None) -> World:
    """One rank per JAX process: ``node = jax.process_index()`` of ``jax.process_count()``.

    Asking starts JAX's backend if it is not running yet (``JaxLoader`` needs it anyway)."""
    return World(num_nodes=jax.process_count(), ranks_per_node=1, node=jax.process_index(),
                 replication=replication or 1)


def _placer(sharding):
    def place(batch: dict[str, Any]) -> dict[str, Any]:
        out = {}
        for name, value in batch.items():
            if isinstance(value, np.ndarray) and value.dtype != object:
                out[name] = jax.make_array_from_process_local_data(sharding, value)
            else:  # lists stay on the host; Ragged rows need padding (Ragged.to_padded) to be sharded
                out[name] = value
        return out
    return place


def _putter(device):
    def put(batch: dict[str, Any]) -> dict[str, Any]:
        return {name: jax.device_put(value, device) if isinstance(value, np.ndarray) and value.dtype != object
                else value for name, value in batch.items()}
    return put


class JaxLoader(BatchLoader):
    """A :class:`~shardstream.loaders.batches.BatchLoader` for JAX hosts.

    ``sharding``: a ``jax.sharding.Sharding`` of the global batch; each numpy column is
    turned into a global ``jax.Array`` in the background thread (its time counts as ``transform`` in
    :meth:`stats`). ``device``: a ``jax.Device`` (or sharding) to put each host's batch on, in the same
    thread, instead. Either way the copies run ``prefetch`` batches ahead of the loop. Without them,
    batches stay numpy arrays on the host.
    """

    def __init__(self, dataset, *, sharding=None, device=None, columns: Optional[Sequence[str]] = None,
                 prefetch: int = 2, world: Optional[World] = None, stats=None,
                 batch_size: Optional[int] = None) -> None:
        if sharding is not None and device is not None:
            raise InvalidArgumentError("pass sharding= (a global array from every host's part) or device= (this "
                                       "host's batch on one device), not both")
        transform = _placer(sharding) if sharding is not None else _putter(device) if device is not None else None
        super().__init__(dataset, world=world or jax_world(_replication(dataset)), columns=columns,
                         prefetch=prefetch, transform=transform, stats=stats, batch_size=batch_size)


def _replication(source) -> Optional[int]:
    """The replication of ``source``'s dataset (a chain's root's; a sharded source's dataset has none)."""
    root = getattr(source, "root", source)
    options = getattr(root, "options", None)
    return getattr(options, "replication", None)
