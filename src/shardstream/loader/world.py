"""Who is reading: the distributed world from the launcher's environment, plus DataLoader workers.

``torchrun`` and most launchers export ``WORLD_SIZE``, ``RANK``, ``LOCAL_WORLD_SIZE``
and ``LOCAL_RANK``; without them the process is a single rank.
"""

from __future__ import annotations

import os

from ..errors import InvalidArgumentError
from ..plan import World


def _env_int(env, name: str, default: int) -> int:
    raw = env.get(name)
    if raw in (None, ""):
        return default
    try:
        return int(raw)
    except ValueError:
        raise InvalidArgumentError(f"environment variable {name}={raw!r} is not an integer") from None


def detect_world(replication: int | None = None, env=None) -> World:
    """The world of this process (rank from the environment, worker from the DataLoader)."""
    env = os.environ if env is None else env
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
    from ..integrations.torch import worker_info

    worker, workers = worker_info() or (0, 0)
    return World(
        num_nodes=world_size // local_world, ranks_per_node=local_world, node=rank // local_world,
        local_rank=local_rank, num_workers=workers, worker=worker, replication=replication or 1,
    )
