"""A resume on another number of readers deals the unread positions evenly (plan/compact.py): every unread
position is read exactly once, every reader owns as many positions (padded or cut by fewer than one per
reader), each reader's positions come in increasing order, and this holds pass after pass."""

from __future__ import annotations

from collections import Counter

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shardstream.plan.compact import CompactGrid, deal_unread, grid_of
from shardstream.plan.partition import Grid

PROPS = settings(max_examples=200, deadline=None, derandomize=True, database=None,
                 suppress_health_check=[HealthCheck.too_slow])


def shares(grid) -> list[list[int]]:
    return [[p for c in grid.chunks(j, grid.first(j)) for p in c.tolist()] for j in range(grid.readers)]


def stop(data, grid) -> tuple[list[int], list[int], list[int]]:
    """Each reader stopped somewhere in its share: the frontiers, the positions read, and some of them handed
    back to be read again (what a chain's stages held)."""
    frontiers, read = [], []
    for share in shares(grid):
        k = data.draw(st.integers(0, len(share)))
        frontiers.append(share[k - 1] + 1 if k else grid.first(len(frontiers)))
        read += share[:k]
    back = data.draw(st.lists(st.sampled_from(read), max_size=12, unique=True)) if read else []
    return frontiers, read, back


@PROPS
@given(n=st.integers(0, 700), block=st.integers(1, 9), worlds=st.lists(st.integers(1, 9), min_size=2, max_size=4),
       tail=st.sampled_from(["pad", "drop"]), data=st.data())
def test_resumes_on_other_worlds_read_every_position_once_in_equal_shares(n, block, worlds, tail, data):
    grid = Grid.even(0, n, block, worlds[0], tail)
    consumed = Counter()
    for readers in worlds[1:]:
        frontiers, read, back = stop(data, grid)
        consumed.update(read)
        consumed.subtract(back)
        limit = min(grid.end, n)
        fresh_pads = grid.pads_from(n)
        unread = grid.unread(frontiers, back)
        grid = deal_unread(unread, limit, fresh_pads, block, readers, tail)
        dealt = shares(grid)
        assert len({len(s) for s in dealt}) == 1 and grid.balanced, [len(s) for s in dealt]
        assert all(s == sorted(set(s)) for s in dealt)  # increasing: a reader's progress is one number
        every = [p for s in dealt for p in s]
        assert not set(every) & {p for p, c in consumed.items() if c > 0}, "a position read twice"
        pads = [p for p in every if p >= n]
        assert all(p >= fresh_pads for p in pads), "padding from a position an earlier pass padded with"
        assert len(pads) == max(grid.added, 0) < readers and (tail == "pad" or not pads)
        assert -readers < grid.added <= 0 or tail == "pad"
        again = grid_of(grid.describe(), n)  # as a state describes it
        assert isinstance(again, CompactGrid) and shares(again) == dealt
        for j, s in enumerate(dealt):  # from any frontier, the rest of the share
            if s:
                k = data.draw(st.integers(0, len(s) - 1))
                assert [p for c in grid.chunks(j, s[k] + 1) for p in c.tolist()] == s[k + 1:]
    consumed.update(p for s in shares(grid) for p in s)  # the last world reads to the end
    real = {p: c for p, c in consumed.items() if c and p < n}
    assert all(c == 1 for c in consumed.values() if c), "a position read twice"
    if tail == "pad":
        assert sorted(real) == list(range(n)), "a position lost"
    else:  # each pass may cut fewer than one position per reader
        assert n - len(real) < sum(worlds)


@PROPS
@given(n=st.integers(1, 400), old=st.integers(1, 6), new=st.integers(1, 6), data=st.data())
def test_a_grid_with_skipped_positions_of_an_earlier_redistribution_moves_on(n, old, new, data):
    """States saved before the even dealing hold a grid with ``skip`` (dealt unevenly): a resume from one on
    another world deals what it left evenly too."""
    fresh = Grid.even(0, n, 4, 3, "pad")
    frontiers, read, _ = stop(data, fresh)
    anchor = min(frontiers)
    skip = np.concatenate([fresh.owned(j, anchor, f) for j, f in enumerate(frontiers)])
    legacy = grid_of(Grid.even(anchor, fresh.end, 4, old, "keep", skip).describe(), n)
    assert isinstance(legacy, Grid)
    frontiers2, read2, back = stop(data, legacy)
    grid = deal_unread(legacy.unread(frontiers2, back), min(legacy.end, n), legacy.pads_from(n), 4, new)
    every = read + [p for p in read2 if p not in set(back)] + [p for s in shares(grid) for p in s]
    assert len({len(s) for s in shares(grid)}) == 1
    assert sorted(p for p in every if p < n) == list(range(n))
    assert len(every) == len(set(every))
