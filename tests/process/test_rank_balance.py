"""A chain's pass deals every reader an equally long share, so ranks get equally many batches by construction
where the operations keep the count; where they do not, the pass says so (the ranks agree where it ends: see
tests/processes/test_rank_balance.py for real jobs)."""

from __future__ import annotations

import collections
import functools
import warnings

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import shardstream as ss
from shardstream import World
import shardstream.engine.agree as agree
from shardstream.engine.agree import RankBalanceWarning
from shardstream.dataset.chain import merge_states
from shardstream.engine.run import setup
from shardstream.testing.chains import check_chain_resumes
from shardstream.testing.datasets import write_text_rows


@pytest.fixture(scope="module")
def rows_dir(tmp_path_factory) -> str:
    return write_text_rows(tmp_path_factory.mktemp("rows"), files=1, rows=1001)  # ids 0 .. 1000


@functools.lru_cache(maxsize=None)
def root(path: str, size: int, tail: str = "pad") -> ss.StreamingDataset:
    return ss.StreamingDataset(local=path, epoch_size=size, epoch_tail=tail)


def shares(grid) -> list[list[int]]:
    return [[p for chunk in grid.chunks(j, grid.first(j)) for p in chunk.tolist()] for j in range(grid.readers)]


@settings(max_examples=150, deadline=None)
@given(size=st.integers(1, 5000), ranks=st.integers(1, 9), workers=st.integers(0, 3),
       tail=st.sampled_from(["pad", "drop"]))
def test_a_fresh_pass_deals_every_reader_as_many_positions(rows_dir, size, ranks, workers, tail):
    made = setup(root(rows_dir, size, tail), (), World(num_nodes=ranks, num_workers=workers), 0, None)
    readers = ranks * max(workers, 1)
    dealt = shares(made.grid)
    assert len(dealt) == readers and len({len(s) for s in dealt}) == 1, [len(s) for s in dealt]
    extra = made.grid.end - made.plan.end  # padded (> 0) or dropped (< 0): fewer than one per reader
    assert (0 <= extra < readers) if tail == "pad" else (-readers < extra <= 0)
    every = sorted(p for s in dealt for p in s)
    assert every == list(range(made.plan.origin, made.grid.end))  # each position once
    assert all(s == sorted(s) for s in dealt)  # each reader's in increasing order: its frontier is one number


def batches_per_rank(path: str, ranks: int, workers: int, chain, tail: str = "pad") -> tuple[list, list]:
    """Each rank's batches of ``chain(dataset)`` (its workers' together), read in this process on explicit worlds."""
    counts, ids = [], []
    for r in range(ranks):
        n = 0
        for w in range(max(workers, 1)):
            ds = ss.StreamingDataset(local=path, epoch_tail=tail,
                                     world=World(num_nodes=ranks, node=r, num_workers=workers, worker=w))
            for batch in chain(ds):
                n += 1
                ids.extend(batch["id"])
        counts.append(n)
    return counts, ids


@pytest.mark.parametrize("ranks,workers", [(2, 0), (3, 0), (8, 0), (2, 2), (3, 2), (8, 1)])
def test_ranks_get_equal_batches_from_a_chain_that_keeps_the_count(rows_dir, ranks, workers):
    def chain(ds):
        return ds.shuffle(seed=1, buffer_size=30).map(lambda r: {"n": len(r["text"])}).batch(8)
    counts, ids = batches_per_rank(rows_dir, ranks, workers, chain)
    assert len(set(counts)) == 1, counts
    readers = ranks * max(workers, 1)
    pad = -1001 % readers
    # every row once, and the epoch's first `pad` rows (its first plan positions: the dataset is not shuffled) again
    assert collections.Counter(ids) == collections.Counter(range(1001)) + collections.Counter(range(pad))


def test_drop_tail_leaves_out_fewer_than_one_row_per_reader(rows_dir):
    counts, ids = batches_per_rank(rows_dir, 3, 2, lambda ds: ds.shuffle(seed=1, buffer_size=30).batch(8), "drop")
    assert len(set(counts)) == 1
    assert sorted(ids) == list(range(1001 - 1001 % 6))  # the epoch's last 5 positions are left out


def test_a_padded_pass_resumes_exactly_and_redistributes(rows_dir):
    """Shuffle buffers hold padded positions too (read again by position on resume); a state saved on a padded
    world resumes item for item on it, and with nothing repeated or lost on others."""
    def make(world):
        return ss.StreamingDataset(local=rows_dir, world=world, epoch_size=301).shuffle(seed=2, buffer_size=20)
    report = check_chain_resumes(make, [(1, 1, 0), (4, 1, 0), (2, 1, 3)], atoms=lambda r: [r["id"]],
                                 key=lambda r: r["id"], steps=[0, 3, 40, 75, 76])
    assert report.saves >= 12 and report.resumes == report.saves * 3


def test_which_passes_are_balanced(rows_dir):
    ds = root(rows_dir, 1001)
    two = World(num_nodes=2)
    keeps = ds.shuffle(seed=0, buffer_size=10).map(lambda r: r).take(500).batch(4).select_columns(["id"])
    assert setup(ds, keeps.specs, two, 0, None).balanced
    for changes in (ds.filter(bool), ds.map(lambda b: b, batched=True), ds.map(lambda r: r, skip_errors=True),
                    ds.pack(seq_len=8)):
        assert not setup(ds, changes.specs, two, 0, None).balanced
    states = []
    for rank in range(2):
        chain = ss.StreamingDataset(local=rows_dir, world=World(num_nodes=2, node=rank)).shuffle(seed=0, buffer_size=10)
        it = iter(chain)
        for _ in range(5):
            next(it)
        states.append(chain.state_dict())
        chain.close()
    loaded, ds = merge_states(states), ss.StreamingDataset(local=rows_dir)
    assert setup(ds, chain.specs, two, 0, loaded).balanced  # the same split continues balanced
    assert not setup(ds, chain.specs, World(num_nodes=1, num_workers=2), 0, loaded).balanced  # 2 readers, 1 rank
    # redistributed evenly: what the buffers held is read again, every new reader owns as many positions
    three = setup(ds, chain.specs, World(num_nodes=3), 0, loaded)
    assert three.balanced and three.generation == 1
    assert {len([p for c in three.grid.chunks(j, three.grid.first(j)) for p in c]) for j in range(3)} == {331}
    assert setup(ds, chain.specs, World(num_nodes=3), 0, merge_states(three.full_state(
        three.states, loaded["fingerprint"], loaded["operations"]))).balanced  # and continues balanced there
    for counted in (lambda c: c.take(400), lambda c: c.filter(lambda r: r["id"] % 3)):  # dealt as before: agreed
        states = []
        for rank in range(2):
            c = counted(ss.StreamingDataset(local=rows_dir, world=World(num_nodes=2, node=rank)).shuffle(
                seed=0, buffer_size=10))
            it = iter(c)
            for _ in range(5):
                next(it)
            states.append(c.state_dict())
            c.close()
        assert not setup(ds, c.specs, World(num_nodes=3), 0, merge_states(states)).balanced


def test_ranks_from_the_environment_without_a_runtime_are_warned(rows_dir, monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setattr(agree, "_warned", False)
    ds = ss.StreamingDataset(local=rows_dir)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert len(list(ds.shuffle(seed=0, buffer_size=10).batch(8))) == 63  # balanced: nothing to agree on
        assert len(list(ds.filter(lambda r: r["id"] % 3 != 0))) > 300  # rows, not batches: no step to agree on
    with pytest.warns(RankBalanceWarning, match="init_process_group"):
        list(ds.filter(lambda r: r["id"] % 3 != 0).batch(8))
    explicit = ss.StreamingDataset(local=rows_dir, world=World(num_nodes=2, node=1))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        monkeypatch.setattr(agree, "_warned", False)
        list(explicit.filter(lambda r: r["id"] % 3 != 0).batch(8))  # a world given in one process: a test's
