"""What JAX knows about this process, asked only if the process has imported jax.

Reads the state ``jax.distributed.initialize()`` leaves behind; never starts a JAX
backend (which could claim accelerator memory) and never imports jax itself.
"""

from __future__ import annotations

import sys


def distributed_world() -> tuple[int, int] | None:
    """``(process index, process count)`` after ``jax.distributed.initialize()``, else ``None``."""
    if "jax" not in sys.modules:
        return None
    try:
        from jax._src import distributed
    except ImportError:
        return None
    state = getattr(distributed, "global_state", None)
    if state is None or getattr(state, "client", None) is None:
        return None
    count = getattr(state, "num_processes", None)
    index = getattr(state, "process_id", None)
    if not isinstance(count, int) or not isinstance(index, int) or not 0 <= index < count:
        return None
    return index, count
