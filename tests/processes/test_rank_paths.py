"""Every front door gives every rank the same number of batches, in real jobs of 2, 3 and 8 gloo ranks and two
``jax.distributed`` CPU processes, and loses or repeats no row beyond the documented policy.

The paths (``paths_rank.py`` reads them; ``test_rank_balance.py`` covers plain chains with filter and pack, the
StreamingDataLoader over chains and the Pipeline's AsyncDataLoader):

- a StreamingDataset through ``StreamingDataLoader``, ``BatchLoader`` and ``JaxLoader``: every global step cut
  evenly, the epoch padded to whole global steps (fewer than ``ranks x batch_size`` repeats);
- a chain that keeps the count (row map, shuffle buffer, batch), and a sharded source (plain, or with a row
  map) through ``AsyncDataLoader``: every reader an equal share, the epoch padded with fewer than ``readers``
  repeats of its first rows;
- a sharded source with ``filter`` through ``AsyncDataLoader`` and a Pipeline's packed rows through
  ``StreamingDataLoader``: each rank its own share up to the step at which the first rank runs out;
- a chain (count kept, filter, pack) saved mid-epoch on one world and resumed on another: the rest of the
  epoch dealt evenly among the new readers, each rank its new share up to the first rank's end, the rows read
  before and after together the epoch's, none twice beyond the padding of the saving pass and the resumed one;
  the count-keeping chain's shares are equal (no rank left anything out) and it lost no row.

What each rank must receive is worked out here, in one process, from the same chains on explicit worlds.
"""

from __future__ import annotations

import collections
import json
import os
import sys

import pytest

from shardstream import World
from shardstream.testing.datasets import write_text_rows

HERE = os.path.dirname(os.path.abspath(__file__))
JOB = os.path.join(HERE, "paths_rank.py")
sys.path.insert(0, HERE)

from balance_rank import keep  # noqa: E402
from jobs import ranks_env, run_job  # noqa: E402

ROWS = 1001  # divided by none of the worlds' readers
BATCH = 8
DATASET = ("ds_loader_w0", "ds_loader_w1", "ds_batches", "ds_jax")  # global steps cut evenly
KEEPS_COUNT = ("mapbuf", "source", "source_map")  # equal shares, no agreement needed
AGREED = ("source_filter", "pipeline_torch", "filter")  # the ranks agree where the epoch ends


@pytest.fixture(scope="module")
def cfg(tmp_path_factory):
    pytest.importorskip("tokenizers")
    from shardstream.testing.text import tiny_tokenizer

    root = tmp_path_factory.mktemp("paths")
    tokenizer = str(root / "tokenizer.json")
    tiny_tokenizer().save(tokenizer)
    return {"data": write_text_rows(root / "rows", files=1, rows=ROWS), "tokenizer": tokenizer, "save_at": 3}


def need_gloo() -> None:
    pytest.importorskip("torch")
    dist = pytest.importorskip("torch.distributed")
    if not (dist.is_available() and dist.is_gloo_available()):
        pytest.skip("needs torch.distributed gloo")


def flat(batches: list) -> list:
    return [i for b in batches for i in b]


def share(cfg: dict, case: str, rank: int, ranks: int, states=None) -> list:
    """Rank ``rank``'s whole share of ``case`` (before the ranks agree where the epoch ends), in this process."""
    from paths_rank import chain, ids, loader, source

    if case == "pipeline_torch":
        with ranks_env(rank, ranks):
            return [ids(b) for b in loader(cfg, case)]
    world = World(num_nodes=ranks, node=rank)
    it = source(cfg, case).as_iterable(world=world).batch(BATCH) if case.startswith("source") else \
        chain(cfg, case, world)
    if states is not None:
        it.load_state_dict(states)
    return [ids(b) for b in it]


def check_agreed(got: list[list], want: list[list], what: str) -> None:
    """Every rank received its own share up to the step at which the first rank ran out."""
    steps = min(len(w) for w in want)
    assert [len(g) for g in got] == [steps] * len(got), f"{what}: {[len(g) for g in got]} batches, want {steps}"
    for r, (g, w) in enumerate(zip(got, want)):
        assert g == w[:steps], f"{what}: rank {r} received other batches than its share"


def check_paths(cfg: dict, records: list[dict], cases: list[str], ranks: int) -> None:
    for case in cases:
        got = [rec[case] for rec in records]
        counts = [len(g) for g in got]
        assert len(set(counts)) == 1 and counts[0] > 0, f"{case}: the ranks received {counts} batches"
        seen = collections.Counter(i for g in got for i in flat(g))
        if case in DATASET:  # whole global steps: fewer than ranks x batch repeats
            assert set(seen) == set(range(ROWS)), f"{case}: rows lost"
            assert sum(seen.values()) - ROWS == -ROWS % (ranks * BATCH), f"{case}: not whole global steps"
        elif case in KEEPS_COUNT:  # equal shares: fewer than `readers` repeats of the epoch's first rows
            assert set(seen) == set(range(ROWS)), f"{case}: rows lost"
            assert sum(seen.values()) - ROWS == -ROWS % ranks, f"{case}: not padded to a multiple of {ranks}"
            assert all(seen[i] == 1 for i in range(ranks, ROWS)), f"{case}: a row repeated that is no padding"
        else:
            check_agreed(got, [share(cfg, case, r, ranks) for r in range(ranks)], case)


TORCH_CASES = ["ds_loader_w0", "ds_batches", "mapbuf", "source", "source_map", "source_filter", "pipeline_torch"]


@pytest.mark.parametrize("ranks", [2, 3, 8])
def test_torch_ranks_get_equal_batches_on_every_path(tmp_path, cfg, ranks):
    need_gloo()
    cases = TORCH_CASES + (["ds_loader_w1"] if ranks < 8 else [])  # 8 ranks x a worker each: too many on 2 cores
    records = run_job(JOB, tmp_path, {**cfg, "mode": "torch", "cases": cases}, ranks)
    check_paths(cfg, records, cases, ranks)


def test_two_jax_processes_get_equal_batches_on_every_path(tmp_path, cfg):
    pytest.importorskip("jax")
    cases = ["ds_batches", "ds_jax", "mapbuf", "filter", "source", "source_filter"]
    records = run_job(JOB, tmp_path, {**cfg, "mode": "jax", "cases": cases}, 2)
    check_paths(cfg, records, cases, 2)


def resumed_padding(cfg: dict, case: str, ranks: int, states) -> int:
    """The positions the pass that continues ``states`` on ``ranks`` ranks deals past what was left (padding)."""
    from paths_rank import chain

    from shardstream.dataset.chain import merge_states
    from shardstream.engine.run import setup

    world = World(num_nodes=ranks)
    c = chain(cfg, case, world)
    made = setup(c.root, c.specs, world, 0, merge_states(states))
    return made.grid.added


@pytest.mark.parametrize("saved_on,resumed_on", [(2, 3), (3, 8), (8, 2)])
def test_a_chain_saved_on_one_world_resumes_on_another_with_equal_batches(tmp_path, cfg, saved_on, resumed_on):
    need_gloo()
    cases = ["mapbuf", "filter", "pack"]
    first = run_job(JOB, tmp_path / "a", {**cfg, "mode": "torch", "save": cases}, saved_on)
    states_dir = tmp_path / "a" / next(p for p in os.listdir(tmp_path / "a") if p.startswith("job"))
    then = run_job(JOB, tmp_path / "b", {**cfg, "mode": "torch", "load": cases, "states": str(states_dir)},
                   resumed_on)
    for case in cases:
        what = f"{case} saved on {saved_on} ranks, resumed on {resumed_on}"
        states = json.load(open(states_dir / f"{case}.state.json"))
        want = [share(cfg, case, r, resumed_on, states) for r in range(resumed_on)]
        got = [rec[f"load {case}"] for rec in then]
        check_agreed(got, want, what)
        before = [i for rec in first for i in flat(rec[f"save {case}"])]
        read = collections.Counter(before + [i for g in got for i in flat(g)])
        whole = collections.Counter(before + [i for w in want for i in flat(w)])
        # ids (packed: tokens) of the rows the epoch repeats: the saving pass's padding, then the resumed pass's
        padding = (saved_on + resumed_on) * (100 if case == "pack" else 1)
        assert all(n == 1 for i, n in read.items() if i >= padding), f"{what}: a row read twice"
        assert all(n <= 2 for n in read.values()), f"{what}: a row read three times"
        if case == "mapbuf":  # an even redistribution: every rank as many batches, nothing left out
            assert len({len(w) for w in want}) == 1, f"{what}: shares of {[len(w) for w in want]} batches"
            assert set(read) == set(range(ROWS)), f"{what}: rows lost by the redistribution"
            added = resumed_padding(cfg, case, resumed_on, states)
            assert 0 <= added < resumed_on
            repeats = sum(read.values()) - ROWS  # the saving pass's padding read before, and the resumed pass's
            assert added <= repeats <= added + (-ROWS % saved_on), f"{what}: {repeats} rows repeated"
        if case == "filter":  # the ranks' shares end apart by what the filter keeps of equal shares only
            assert set(whole) == {i for i in range(ROWS) if keep({"id": i})}, f"{what}: rows lost"
