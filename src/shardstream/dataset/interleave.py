"""``interleave_datasets``: HF's function, as a mixture of streams in the plan.

The datasets become the streams of one :class:`~shardstream.StreamingDataset`, drawn by
``probabilities`` (uniform when left out) in a seeded, world-independent order: the plan's
mixing, so the result shuffles, splits over ranks and workers and resumes like any dataset,
and operations chain on it. ``stopping_strategy`` sizes the epoch as HF does:
``"first_exhausted"`` ends when the first dataset would run out (each dataset is read at
most once), ``"all_exhausted"`` when the last one has been read whole (the others repeat).
"""

from __future__ import annotations

from typing import Optional, Sequence

from ..errors import InvalidArgumentError

STRATEGIES = ("first_exhausted", "all_exhausted")


def interleave_datasets(datasets: Sequence, probabilities: Optional[Sequence[float]] = None,
                        seed: Optional[int] = None, stopping_strategy: str = "first_exhausted",
                        weight_schedule=None, shuffle: bool = False, **kwargs):
    """One dataset drawing from ``datasets`` by ``probabilities`` (see the module docstring).

    ``weight_schedule`` (a :class:`~shardstream.WeightSchedule`) moves the weights during the epoch
    instead; other keywords go to :class:`~shardstream.StreamingDataset` (``batch_size``,
    ``storage_options``, ...)."""
    from .streaming import StreamingDataset
    from ..engine.stream import Stream

    datasets = list(datasets)
    if len(datasets) < 1:
        raise InvalidArgumentError("interleave_datasets needs at least one dataset")
    if stopping_strategy not in STRATEGIES:
        raise InvalidArgumentError(f"stopping_strategy={stopping_strategy!r}: choose one of {list(STRATEGIES)}")
    for i, ds in enumerate(datasets):
        if getattr(ds, "source_args", None) is None:
            kind = type(ds).__name__
            hint = ("apply the operations after interleave_datasets (mixing happens in the plan, before any "
                    "operation)" if kind == "IterableDataset" else "pass StreamingDataset objects (or "
                    "shardstream.load_dataset results) built from one location each")
            raise InvalidArgumentError(f"interleave_datasets: dataset {i} is a {kind} that cannot be a stream; {hint}")
    n = len(datasets)
    if probabilities is None:
        probabilities = [1.0 / n] * n
    probabilities = [float(p) for p in probabilities]
    if len(probabilities) != n or any(p < 0 for p in probabilities) or sum(probabilities) <= 0:
        raise InvalidArgumentError(f"probabilities={probabilities!r} must be {n} non-negative numbers with a "
                                   "positive sum")
    total = sum(probabilities)
    probabilities = [p / total for p in probabilities]
    sizes = [len(ds) for ds in datasets]
    ratios = [size / p for size, p in zip(sizes, probabilities) if p > 0]
    epoch = int(min(ratios) if stopping_strategy == "first_exhausted" else max(ratios))
    if weight_schedule is not None:
        streams = [Stream(**ds.source_args) for ds in datasets]
    else:
        streams = [Stream(**ds.source_args, proportion=p) for ds, p in zip(datasets, probabilities)]
    options = datasets[0].storage_options
    kwargs.setdefault("shuffle_seed", 0 if seed is None else int(seed))
    return StreamingDataset(streams=streams, epoch_size=max(epoch, 1), storage_options=options, shuffle=shuffle,
                            weight_schedule=weight_schedule, **kwargs)
