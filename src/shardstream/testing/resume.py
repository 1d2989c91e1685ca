"""A reusable check: a dataset resumes identically at every step, on any world.

    from shardstream.testing import check_resumes_identically

    report = check_resumes_identically(
        lambda batch_size: StreamingDataset(local=path, shuffle=True, batch_size=batch_size),
        global_batch=8, worlds=[(1, 1, 0), (2, 2, 2)],
    )

A reference pass reads one epoch in a single process and saves ``state_dict()`` at
every global step. Then, for every step and every world ``(nodes, ranks_per_node,
workers)``, fresh datasets load that state, every rank and worker reads its share,
and the shares are put back together in the order a PyTorch DataLoader and the
ranks deliver them. The result must equal the reference order from that step on,
sample for sample. The same state is also loaded into the reference dataset object
itself, which must honour it on its next pass.

Processing chains (``ds.shuffle(buffer_size=...).map(...).pack(...)``) have their own check,
:func:`~shardstream.testing.chains.check_chain_resumes`, which also saves on several worlds.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..plan import World


@dataclass
class ResumeReport:
    steps: int
    worlds: int
    samples_compared: int


def sample_key(sample: dict[str, Any]) -> tuple:
    """A hashable, comparable fingerprint of a decoded sample."""
    parts = []
    for name in sorted(sample):
        value = sample[name]
        if isinstance(value, np.ndarray):
            value = (value.dtype.str, value.shape, value.tobytes())
        elif isinstance(value, (list, dict)):
            value = repr(value)
        elif hasattr(value, "tobytes"):  # images and other buffer-like values
            value = value.tobytes()
        parts.append((name, value))
    return tuple(parts)


def read_world(make: Callable[[int], Any], state: dict | None, global_batch: int,
               world: tuple[int, int, int], key: Callable = sample_key) -> list:
    """The global order that world ``(nodes, ranks_per_node, workers)`` delivers from ``state``.

    A state saved inside a global step resumes with the rest of that step: each rank's first
    batch holds its share of it from the saved position on, and a rank whose share was already
    read begins with the next step (its batches line up with the others' from the end)."""
    nodes, per_node, workers = world
    ranks = nodes * per_node
    if global_batch % ranks:
        raise ValueError(f"global batch {global_batch} does not split over {ranks} ranks")
    bs = global_batch // ranks
    per_rank = []
    for rank in range(ranks):
        streams = []
        for worker in range(max(workers, 1)):
            ds = make(bs)
            if state is not None:
                ds.load_state_dict(state)
            w = World(nodes, per_node, rank // per_node, rank % per_node, workers, worker)
            it = ds.iterate(w)  # the pass begins now
            streams.append(([key(s) for s in it], ds.cursor.current.head() or bs))
        per_rank.append(_round_robin(streams, bs))
    steps = max((len(r) for r in per_rank), default=0)
    out = []
    for step in range(steps):
        for r in per_rank:
            at = step - (steps - len(r))
            if at >= 0:
                out.extend(r[at])
    return out


def _round_robin(streams: list[tuple[list, int]], bs: int) -> list[list]:
    """The batches a DataLoader collects from the workers' ``(samples, first batch size)`` in turn."""
    batches = [[s[:first]] + [s[i:i + bs] for i in range(first, len(s), bs)] if s else [] for s, first in streams]
    out = []
    for i in range(max((len(b) for b in batches), default=0)):
        for b in batches:
            if i < len(b):
                out.append(b[i])
    return out


def check_resumes_identically(make: Callable[[int], Any], global_batch: int,
                              worlds: Iterable[tuple[int, int, int]] = ((1, 1, 0),),
                              key: Callable = sample_key, steps: Iterable[int] | None = None) -> ResumeReport:
    """Raise ``AssertionError`` at the first step or world whose resumed order differs.

    ``make(batch_size)`` must return a fresh dataset with that per-device batch size
    (and every other setting fixed). ``steps`` limits the checked steps (default: all).
    """
    worlds = list(worlds)
    ref_ds = make(global_batch)
    states, order = [], []
    it = ref_ds.iterate(World())
    while True:
        if len(order) % global_batch == 0:
            states.append(ref_ds.state_dict())
        try:
            order.append(key(next(it)))
        except StopIteration:
            break
    total = len(order) // global_batch
    chosen = range(total) if steps is None else [s for s in steps if 0 <= s < total]
    compared = 0
    for step in chosen:
        expected = order[step * global_batch:]
        state = states[step]
        if state["sample_in_epoch"] != step * global_batch:
            raise AssertionError(f"state at step {step} says sample_in_epoch={state['sample_in_epoch']}")
        for world in worlds:
            got = read_world(make, state, global_batch, world, key)
            _compare(got, expected, f"resume at step {step} of {total} on world {world}")
            compared += len(got)
        ref_ds.load_state_dict(state)  # the same object, reused, must honour the state too
        got = [key(s) for s in ref_ds.iterate(World())]
        _compare(got, expected, f"resume at step {step} on the reused dataset object")
    return ResumeReport(len(chosen), len(worlds), compared)


def _compare(got: list, expected: list, what: str) -> None:
    if got == expected:
        return
    first = next((i for i, (a, b) in enumerate(zip(got, expected)) if a != b), min(len(got), len(expected)))
    raise AssertionError(
        f"{what}: {len(got)} samples instead of {len(expected)}; first difference at sample {first} of the tail"
    )
