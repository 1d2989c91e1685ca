"""A reusable check: a processing chain resumes exactly, at every step, on any world.

    from shardstream.testing.chains import check_chain_resumes

    check_chain_resumes(lambda world: StreamingDataset(local=path, world=world)
                        .shuffle(buffer_size=100).map(tok, batched=True).pack(seq_len=64),
                        worlds=[(1, 1, 0), (2, 2, 0), (1, 2, 2)], atoms=lambda item: ...)

For every world ``(nodes, ranks_per_node, workers)`` a run reads the chain with every reader
(one per rank and worker) in lockstep, one item per reader per step, and saves every
reader's ``state_dict()`` at the chosen steps. Each saved list of states is then loaded by
fresh chains on every world:

- on the world it was saved on, the items from there on must equal the run's, item for item;
- on any other world, the items before the save and after it together must hold exactly the
  atoms of one reader's whole pass (``atoms(item)``: what an item is made of, e.g. a row's
  id, or a pack's tokens): nothing repeated, nothing lost; unless the saving pass or the resumed
  one pads (only repeats of atoms of it added) or drops (only atoms of it, none twice), as a
  resume on another world deals what is left evenly among the new readers, padded like a fresh pass.

And every world's whole pass holds exactly the atoms of one reader's, unless the world's readers
do not divide the epoch: a pass deals every reader as many positions, padding the epoch with
fewer than ``readers`` of its first samples (or, with ``epoch_tail="drop"``, leaving out fewer
than ``readers``), and then it holds every atom of one reader's pass and only repeats of them
(or only atoms of it, none twice).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from ..plan import World


@dataclass
class ChainResumeReport:
    saves: int
    resumes: int
    items_compared: int


def readers_of(world: tuple[int, int, int]) -> list[World]:
    nodes, per_node, workers = world
    out = []
    for rank in range(nodes * per_node):
        for worker in range(max(workers, 1)):
            out.append(World(nodes, per_node, rank // per_node, rank % per_node, workers, worker))
    return out


def run_world(make: Callable[[World], Any], world: tuple[int, int, int], states=None,
              save_at: Iterable[int] = ()) -> tuple[list, dict]:
    """Items of one pass on ``world`` (readers in lockstep), and the readers' states at ``save_at`` steps."""
    chains = [make(w) for w in readers_of(world)]
    if states is not None:
        for c in chains:
            c.load_state_dict(states)
    its = [iter(c) for c in chains]
    alive = [True] * len(its)
    wanted = set(save_at)
    items, saved, step = [], {}, 0
    while any(alive):
        if step in wanted:
            saved[step] = (len(items), [json.loads(json.dumps(c.state_dict())) for c in chains])
        for i, it in enumerate(its):
            if alive[i]:
                try:
                    items.append(next(it))
                except StopIteration:
                    alive[i] = False
        step += 1
    for c in chains:
        c.close()
    return items, saved


def check_chain_resumes(make: Callable[[World], Any], worlds: Iterable[tuple[int, int, int]] = ((1, 1, 0),),
                        atoms: Callable[[Any], list] = None, key: Callable[[Any], Any] = None,
                        steps: Iterable[int] | None = None) -> ChainResumeReport:
    """Raise ``AssertionError`` at the first save and world whose resumed items are wrong (see the module
    docstring). ``key(item)`` makes items comparable (default: ``repr``); ``steps`` (default: every step
    of each run) are the steps at which states are saved."""
    worlds = list(worlds)
    key = key or _repr
    atoms = atoms or (lambda item: [key(item)])
    whole, _ = run_world(make, (1, 1, 0))
    expected = Counter(a for item in whole for a in atoms(item))
    saves = resumes = compared = 0
    for saved_on in worlds:
        items, _ = run_world(make, saved_on)
        whole_pass = Counter(a for item in items for a in atoms(item))
        _check_pass(whole_pass, expected, padding(make, saved_on), f"a whole pass on world {saved_on}")
        chosen = range(len(items) + 1) if steps is None else steps
        _, saved = run_world(make, saved_on, save_at=chosen)
        for step, (done, states) in sorted(saved.items()):
            saves += 1
            before = items[:done]
            for world in worlds:
                after, _ = run_world(make, world, states)
                resumes += 1
                compared += len(after)
                what = f"saved at step {step} on world {saved_on}, resumed on world {world}"
                if world == saved_on:
                    _same([key(i) for i in after], [key(i) for i in items[done:]], what)
                else:
                    got = Counter(a for item in before + after for a in atoms(item))
                    pad = _joined(padding(make, saved_on), padding(make, world, states))
                    _check_pass(got, expected, pad, what)
    return ChainResumeReport(saves, resumes, compared)


def padding(make: Callable[[World], Any], world: tuple[int, int, int], states=None) -> int:
    """Positions a fresh pass on ``world`` (or the one that continues ``states`` there) deals past the epoch's end
    (> 0: padded) or short of it (< 0: dropped)."""
    from ..dataset.chain import merge_states
    from ..engine.run import setup

    first = readers_of(world)[0]
    chain = make(first)
    made = setup(chain.root, chain.specs, first, 0, None if states is None else merge_states(states))
    return getattr(made.grid, "added", made.grid.end - made.plan.end)  # a resume on another world: its own


def _joined(saved: int, resumed: int) -> int:
    """The padding of an epoch read partly by a pass padded by ``saved`` and partly by one padded by ``resumed``
    (each of :func:`padding`): any drop leaves out, any padding repeats."""
    return min(saved, resumed) if min(saved, resumed) < 0 else max(saved, resumed)


def _check_pass(got: Counter, expected: Counter, pad: int, what: str) -> None:
    extra, lost = got - expected, expected - got
    if pad == 0 and (extra or lost):
        raise AssertionError(f"{what}: {sum(extra.values())} atoms repeated (e.g. {list(extra)[:3]}), "
                             f"{sum(lost.values())} lost (e.g. {list(lost)[:3]}) in an epoch its readers divide")
    if pad > 0 and (lost or set(extra) - set(expected)):
        raise AssertionError(f"{what}, padded by {pad} positions: {sum(lost.values())} atoms lost (e.g. "
                             f"{list(lost)[:3]}), atoms {sorted(set(extra) - set(expected))[:3]} not in the data")
    if pad < 0 and extra:
        raise AssertionError(f"{what}, {-pad} positions dropped: {sum(extra.values())} atoms repeated (e.g. "
                             f"{list(extra)[:3]})")


def _same(got: list, expected: list, what: str) -> None:
    if got == expected:
        return
    first = next((i for i, (a, b) in enumerate(zip(got, expected)) if a != b), min(len(got), len(expected)))
    raise AssertionError(f"{what}: {len(got)} items instead of {len(expected)}; first difference at item {first}")


def _repr(item: Any) -> str:
    if isinstance(item, dict):
        return repr({k: (v.tolist() if hasattr(v, "tolist") else v) for k, v in sorted(item.items())})
    return repr(item)
