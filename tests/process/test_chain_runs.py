"""A chain's stages hand on runs of items to one another (``Stage.next_run``), not an item per call: the
same items, in the same order, with the same state after each, as item by item."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

import shardstream as ss
from shardstream.plan import World
from shardstream.engine.maps import FilterStage, MapStage
from shardstream.engine.ops import ShuffleStage, swap_runs
from shardstream.engine.run import Run, setup
from shardstream.engine.source import SourceStage
from shardstream.testing.chains import check_chain_resumes

BUFFER = 50


def lengths(batch):
    return {"n": [len(t) for t in batch["text"]]}


def light(d, **map_kw):
    return (ss.StreamingDataset(local=d).shuffle(seed=3, buffer_size=BUFFER)
            .map(lengths, batched=True, batch_size=16, **map_kw).filter(lambda r: r["n"] % 3 != 0))


def test_the_stages_of_a_light_chain_pass_runs_not_single_items(jsonl_dir, monkeypatch):
    calls: Counter = Counter()
    for cls in (SourceStage, ShuffleStage, MapStage, FilterStage):
        def counting(self, _next=cls.next, _name=cls.__name__):
            calls[_name] += 1
            return _next(self)
        monkeypatch.setattr(cls, "next", counting)
    rows = list(light(jsonl_dir))
    assert len(rows) > 300 and all(r["n"] % 3 for r in rows)
    assert calls["SourceStage"] == 0 and calls["MapStage"] == 0  # the shuffle and the filter take runs
    assert calls["ShuffleStage"] < 2 * BUFFER  # only draining its buffer once the source ran out
    assert calls["FilterStage"] == 0  # and so does the loop's iterator, giving back what a state finds unused


def test_a_state_saved_inside_a_run_resumes_exactly(jsonl_dir):
    """A chain iterated takes runs of the last stage's rows; a state saved before a run is used up counts its
    rest as not handed on (on the same world and on others)."""
    roots = {}

    def make(world):
        if world not in roots:
            roots[world] = ss.StreamingDataset(local=jsonl_dir, world=world)
        return roots[world].shuffle(seed=3, buffer_size=BUFFER).map(lengths, batched=True, batch_size=16).filter(
            lambda r: r["n"] % 3 != 0)
    report = check_chain_resumes(make, [(1, 1, 0), (2, 1, 0), (1, 1, 2)], key=lambda r: r["id"],
                                 steps=[1, 2, 3, 5, 8, 40, 63, 64, 65, 100, 129, 250])
    assert report.saves >= 30 and report.resumes == report.saves * 3


def _run(chain, loaded=None) -> Run:
    made = setup(chain.root, chain.specs, World(), 0, loaded)
    return Run(chain.root, chain.specs, made, 0)


def _item_by_item(chain, loaded=None) -> list:
    run = _run(chain, loaded)
    out = []
    while True:
        try:
            k, v = run.last.next()
        except StopIteration:
            return out
        out.append((k, v, run.state()))


def _in_runs(chain, sizes, loaded=None) -> list:
    run = _run(chain, loaded)
    out, i = [], 0
    while True:
        keys, values = run.last.next_run(sizes[i % len(sizes)])
        i += 1
        if not keys:
            return out
        assert len(keys) <= sizes[(i - 1) % len(sizes)]
        out.append((keys, values, run.state()))


@pytest.mark.parametrize("sizes", [[1], [7], [1000], [3, 64, 1, 200]])
@pytest.mark.parametrize("lookahead", [0, 1])
def test_runs_give_the_items_and_states_of_single_items(jsonl_dir, sizes, lookahead):
    chain = light(jsonl_dir, lookahead=lookahead)
    single = _item_by_item(chain)
    runs = _in_runs(chain, sizes)
    at = 0
    for keys, values, state in runs:
        assert [(k, v) for k, v, _ in single[at:at + len(keys)]] == list(zip(keys, values))
        at += len(keys)
        assert state == single[at - 1][2]
    assert at == len(single)
    # and from a state saved in the middle (the buffer and a map group made again on resume)
    fp = chain.fingerprint()
    made = setup(chain.root, chain.specs, World(), 0, None)
    loaded = made.full_state({0: single[len(single) // 3][2]}, fp, chain.operations())
    rest = _item_by_item(chain, loaded)
    assert [k for k, _, _ in rest] == [k for k, _, _ in single[len(single) // 3 + 1:]]
    assert [k for keys, _, _ in _in_runs(chain, sizes, loaded) for k in keys] == [k for k, _, _ in rest]


def test_a_run_swapped_into_the_buffer_at_once_equals_one_item_after_another():
    rng = np.random.default_rng(5)
    for _ in range(500):
        size, n = int(rng.integers(2, 80)), int(rng.integers(2, 300))
        buffer, new = [("old", i) for i in range(size)], [("new", j) for j in range(n)]
        slots = rng.integers(0, size, n)  # many slots drawn twice or more in one run
        after, out = list(buffer), []
        for s, item in zip(slots.tolist(), new):
            out.append(after[s])
            after[s] = item
        assert swap_runs(buffer, new, slots) == (after, out)

