"""Who is reading: the distributed world of this process, plus its DataLoader worker.

The ranks come from, in this order:

1. a :class:`~shardstream.plan.World` passed explicitly (``StreamingDataset(world=...)``);
2. inside a DataLoader worker, the world of the rank process that started it (recorded
   when the dataset was handed to the worker, so workers agree with their rank even when
   the launcher's variables are not in their environment);
3. an initialised ``torch.distributed`` process group (rank and world size; the ranks per
   node from ``LOCAL_WORLD_SIZE`` if set, else one rank per node), else an initialised
   ``jax.distributed`` (one reader per JAX process);
4. the launcher's environment: ``WORLD_SIZE``, ``RANK``, ``LOCAL_WORLD_SIZE``, ``LOCAL_RANK``
   (set by torchrun and most launchers);
5. else a single process.

The DataLoader worker (id and count) is always taken from torch when running in one.
The library never initialises a process group; the one collective it issues is a processing chain's
agreement on where an epoch ends (:mod:`shardstream.engine.agree`).
"""

from __future__ import annotations

import dataclasses
import os
from typing import Optional

from ..errors import InvalidArgumentError
from ..runtime.jaxenv import distributed_world as jax_world
from ..runtime.torchenv import distributed_world, worker_info
from ..plan import World


def _env_int(env, name: str, default: int) -> int:
    raw = env.get(name)
    if raw in (None, ""):
        return default
    try:
        return int(raw)
    except ValueError:
        raise InvalidArgumentError(f"environment variable {name}={raw!r} is not an integer") from None


def rank_world(replication: Optional[int] = None, env=None) -> World:
    """The ranks of this process (no DataLoader worker), from torch.distributed or the environment."""
    env = os.environ if env is None else env
    dist = distributed_world() if env is os.environ else None
    jax_dist = jax_world() if env is os.environ and dist is None else None
    if jax_dist is not None:  # one reader per JAX process (host)
        index, count = jax_dist
        return World(num_nodes=count, ranks_per_node=1, node=index, replication=replication or 1)
    if dist is not None:
        rank, world_size = dist
        local_world = _env_int(env, "LOCAL_WORLD_SIZE", 1)
        if world_size % max(local_world, 1):
            local_world = 1  # the variable belongs to another launch: one rank per node is always right
        local_rank = rank % max(local_world, 1)
    else:
        world_size = _env_int(env, "WORLD_SIZE", 1)
        rank = _env_int(env, "RANK", 0)
        local_world = _env_int(env, "LOCAL_WORLD_SIZE", world_size)
        local_rank = _env_int(env, "LOCAL_RANK", rank % max(local_world, 1))
    if local_world < 1 or world_size % local_world:
        raise InvalidArgumentError(
            f"LOCAL_WORLD_SIZE={local_world} must be >= 1 and divide WORLD_SIZE={world_size} "
            "(every node runs the same number of ranks)"
        )
    if not 0 <= rank < world_size:
        raise InvalidArgumentError(f"RANK={rank} is outside [0, WORLD_SIZE={world_size})")
    return World(num_nodes=world_size // local_world, ranks_per_node=local_world, node=rank // local_world,
                 local_rank=local_rank, replication=replication or 1)


def detect_world(replication: Optional[int] = None, env=None, explicit: Optional[World] = None,
                 parent: Optional[World] = None) -> World:
    """The world of this process: its ranks (see the module docstring) and its DataLoader worker."""
    info = worker_info()
    if explicit is not None:
        ranks = explicit
    elif info is not None and parent is not None:
        ranks = parent
    else:
        ranks = rank_world(replication, env)
    if info is None:
        return ranks
    worker, workers = info
    return dataclasses.replace(ranks, num_workers=workers, worker=worker)
