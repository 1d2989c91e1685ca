"""Warnings about settings that work but read slower or shuffle worse than the user may expect.

Both are the ones mosaicml-streaming gives for the same settings, with its opening words:
``predownload`` below the batch size (at construction), and a shuffle block smaller than a
shard (when a shuffled pass begins).
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from .caller import warn_caller

#: shuffle algorithms that move a sample only about ``shuffle_block_size`` positions
BLOCK_ALGOS = ("py1b", "py1br", "py1e")


def warn_small_predownload(predownload: Optional[int], batch_size: Optional[int]) -> None:
    """Warn when ``predownload`` (samples prepared ahead) is below the per-device ``batch_size``."""
    if predownload is not None and batch_size is not None and predownload < batch_size:
        warn_caller(
            f"predownload < batch_size ({predownload} < {batch_size}). This may result in slower batch time. "
            f"Recommendation is to set predownload to at least batch_size (or leave it out: it defaults to "
            f"8 * batch_size): a batch waits for shards nobody started to download")


def warn_small_shuffle_block(plan, shard_sizes: np.ndarray) -> None:
    """Warn when a shuffled pass moves samples less far than the largest shard holds, so that the samples of
    such shards are hardly mixed with other shards' (``plan``: the pass's epoch plan)."""
    spec = next((getattr(p, "spec") for p in (plan, getattr(plan, "plan", None), getattr(plan, "mixture", None))
                 if hasattr(p, "spec")), None)
    algo = getattr(spec, "algo", None)
    block = getattr(spec, "resolved_block_size", None)
    if not getattr(spec, "shuffle", False) or algo not in BLOCK_ALGOS or block is None or not len(shard_sizes):
        return
    largest = int(np.max(shard_sizes))
    if block < largest:
        warn_caller(
            f"Shuffle block size was smaller than shard size for some shards: shuffle_block_size={block} "
            f"samples, and the largest shard holds {largest}. A sample moves only about a block from its place, "
            f"so these shards are hardly shuffled with other shards. Set shuffle_block_size to a larger value "
            f"(several shards' worth) for a higher quality shuffle")
