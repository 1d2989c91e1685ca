"""A chain's state names each operation and the version of its stage's state; states of version 1 still load."""

from __future__ import annotations

import collections
import json

import numpy as np
import pytest

import shardstream as ss
from shardstream.errors import IncompatibleStateError


@pytest.fixture()
def rows(tmp_path):
    with ss.MDSWriter(out=str(tmp_path), columns={"id": "int", "tokens": "ndarray:int32"}, size_limit=1 << 11) as w:
        for i in range(60):
            w.write({"id": i, "tokens": np.arange(i % 7 + 1, dtype=np.int32) + 100 * i})
    return str(tmp_path)


def chain(rows):
    return ss.StreamingDataset(local=rows).map(lambda r: {"input_ids": r["tokens"]}, remove_columns=["id", "tokens"]
                                              ).shuffle(seed=2, buffer_size=5).pack(16)


def head_and_state(rows, n):
    c = chain(rows)
    it = iter(c)
    head = [next(it)["input_ids"].tolist() for _ in range(n)]
    return head, c.state_dict()


def test_the_state_names_every_operation_and_its_state_version(rows):
    _, state = head_and_state(rows, 3)
    assert state["version"] == 3 and state["kind"] == "shardstream.pipeline"
    assert state["operations"] == [{"op": "map", "version": 1}, {"op": "shuffle", "version": 1},
                                   {"op": "pack", "version": 1}]
    assert chain(rows).state_dict()["operations"] == state["operations"]  # between passes too


def test_a_version_1_state_still_loads_and_resumes_exactly(rows):
    head, state = head_and_state(rows, 3)
    straight = [p["input_ids"].tolist() for p in chain(rows)]
    old = {k: v for k, v in json.loads(json.dumps(state)).items() if k != "operations"} | {"version": 1}
    resumed = chain(rows)
    resumed.load_state_dict(old)
    assert head + [p["input_ids"].tolist() for p in resumed] == straight


def test_a_stage_state_of_another_version_is_refused_naming_the_operation(rows):
    _, state = head_and_state(rows, 3)
    state["operations"][2]["version"] = 7
    with pytest.raises(IncompatibleStateError, match=r"operation 2 \(pack\) saved its state at version 7"):
        chain(rows).load_state_dict(state)
    state["version"] = 9
    with pytest.raises(IncompatibleStateError, match="version 9 is not supported"):
        chain(rows).load_state_dict(state)


def saved_on_two(rows_dir) -> tuple[list, list]:
    """The ids two ranks handed on (5 each, through a shuffle buffer) and their states."""
    before, states = [], []
    for rank in range(2):
        c = ss.StreamingDataset(local=rows_dir, world=ss.World(num_nodes=2, node=rank)).shuffle(seed=0, buffer_size=10)
        it = iter(c)
        before += [next(it)["id"] for _ in range(5)]
        states.append(json.loads(json.dumps(c.state_dict())))
        c.close()
    return before, states


def as_version_2(rows_dir, states: list, readers: int) -> dict:
    """``states`` moved to ``readers`` readers as states of version 2 were: a grid from the lowest frontier that
    skips what was read ahead of it, and the shuffle buffers dealt among the readers."""
    from shardstream.dataset.chain import merge_states
    from shardstream.engine.ops import ShuffleStage
    from shardstream.plan.partition import Grid

    merged = merge_states(states)
    g = merged["grid"]
    old = Grid(g["anchor"], g["end"], g["block"], g["readers"], g["skip"] or None, g["tail"])
    frontiers = [merged["readers"][str(j)]["frontier"] for j in range(g["readers"])]
    anchor = min(frontiers)
    skip = np.concatenate([old.owned(j, anchor, f) for j, f in enumerate(frontiers)])
    new = Grid.even(anchor, old.end, old.block, readers, "keep", skip)
    buffers = ShuffleStage.redistribute([merged["readers"][str(j)]["stages"][0] for j in range(2)], readers)
    return merged | {"version": 2, "grid": new.describe() | {"generation": 1}, "ranks": readers, "turns": {},
                     "readers": {str(j): {"frontier": new.first(j), "stages": [buffers[j]], "pending": []}
                                 for j in range(readers)}}


def test_a_state_of_version_2_redistributed_unevenly_still_loads_and_resumes(tmp_path):
    """A state saved before the even dealing, after a resume on another world (its grid skips positions, its
    readers' shares differ): on its own world it continues as it did (the ranks agree), on another it is dealt
    evenly; every row is handed on once, and the epoch's padding once more."""
    from shardstream.engine.run import setup
    from shardstream.testing.datasets import write_text_rows

    rows_dir = write_text_rows(tmp_path, files=1, rows=1001)
    before, states = saved_on_two(rows_dir)
    old = as_version_2(rows_dir, states, 3)
    for ranks in (3, 2):
        after = []
        for rank in range(ranks):
            c = ss.StreamingDataset(local=rows_dir, world=ss.World(num_nodes=ranks, node=rank)).shuffle(seed=0,
                                                                                                        buffer_size=10)
            c.load_state_dict(json.loads(json.dumps(old)))
            after += [r["id"] for r in c]
        made = setup(c.root, c.specs, ss.World(num_nodes=ranks), 0, old)
        assert made.balanced == (ranks == 2)  # as today on its own world: unequal shares, agreed per batch
        # the epoch's padding: position 1001 (row 0) on the old grid; an even deal pads past it (rows 1, 2 ...)
        repeats = collections.Counter(range(1, 1 + made.grid.added) if ranks == 2 else [0])
        assert collections.Counter(before + after) == collections.Counter(range(1001)) + repeats
