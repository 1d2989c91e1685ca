"""What a dataset built without ``batch_size`` does, said once where it matters."""

from __future__ import annotations

from typing import Optional

from ..plan import World
from .caller import warn_caller

ONE_PER_STEP = ("each step holds 1 sample per rank (DataLoader workers take turns by steps, so a DataLoader "
                "batch of several samples is not a run of the plan)")


def warn_unset_batch_size(dataset, what: str, world: Optional[World] = None) -> None:
    """Warn that several ranks or DataLoader workers, or a loader's batch adopted, plan the epoch in steps
    the user did not choose (mosaicml-streaming refuses such a dataset). The dataset says it once."""
    ranks = (world or dataset.detect_world()).readers
    per, size, tail = dataset.batch_size or 1, dataset.epoch_size, dataset.options.epoch_tail
    steps = -(-size // (per * ranks)) if tail == "pad" else size // (per * ranks)
    warn_caller(
        f"StreamingDataset was built without batch_size, so {what}: the epoch is planned in global steps of "
        f"{per} sample(s) per rank x {ranks} rank(s), and with epoch_tail={tail!r} an epoch of {size} "
        f"samples is read as {steps * per * ranks} (whole global steps). mosaicml-streaming refuses a "
        "dataset without batch_size; pass StreamingDataset(..., batch_size=N), the per-device batch of your "
        "training loop, to plan the epoch and its checkpoints in the steps you train with")
