"""Every rank gets the same number of batches from a chain, a StreamingDataLoader or an AsyncDataLoader over a
chain, and a Pipeline, in real jobs: 2, 3 and 8 ranks joined by gloo, and two jax.distributed CPU processes.

The epoch has 1,001 rows, which none of these worlds' readers divide. Each rank reads every case to its end
with no collective of its own (``balance_rank.py``), so a rank with a batch more or less shows as a count
instead of a hang. What each rank must receive is worked out here, in one process, from the same chains on
explicit worlds:

- a chain that makes one item per item (a shuffle buffer, batches): every reader's whole share, each
  share as long as the others (the epoch padded with fewer than ``readers`` repeats of its first rows);
- a chain with ``filter`` or ``pack``: each rank's own batches, up to the step at which the first rank
  runs out, on every rank (the rest are not handed out), and a resume from a state saved before or at
  that end reads what the uninterrupted run reads.
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
JOB = os.path.join(HERE, "balance_rank.py")
sys.path.insert(0, HERE)

import jobs  # noqa: E402
from jobs import ranks_env  # noqa: E402

ROWS = 1001  # divided by none of the worlds' readers (2, 3, 4, 6, 8, 16)
BALANCED = ("buffer", "pipeline", "loader_buffer_w2")  # every reader's whole share, and shares alike


@pytest.fixture(scope="module")
def cfg(tmp_path_factory):
    root = tmp_path_factory.mktemp("balance")
    data = write_text_rows(root / "rows", files=1, rows=ROWS)
    tokenizer = str(root / "tokenizer.json")
    pytest.importorskip("tokenizers")
    from shardstream.testing.text import tiny_tokenizer

    tiny_tokenizer().save(tokenizer)
    return {"data": data, "tokenizer": tokenizer}


def run_job(tmp_path, cfg: dict, ranks: int) -> list[dict]:
    """Start ``ranks`` processes of ``balance_rank.py`` and return their records."""
    return jobs.run_job(JOB, tmp_path, cfg, ranks)


# -- what each rank must receive, worked out in this process ----------------------------------------------------

def interleave(shares: list[list]) -> list:
    """A rank's batches from its DataLoader workers: one from each in turn, a worker that ran out left out."""
    its, out = [iter(s) for s in shares], []
    while its:
        for it in list(its):
            try:
                out.append(next(it))
            except StopIteration:
                its.remove(it)
    return out


def expected_batches(cfg: dict, case: str, rank: int, ranks: int) -> list:
    """Rank ``rank``'s whole share of ``case`` (before the ranks agree where the epoch ends)."""
    from balance_rank import chain, loader, record

    if case.startswith("pipeline"):
        with ranks_env(rank, ranks):
            return [record(b) for b in loader(cfg, case)]
    name = case.split("_")[1] if "_" in case else case
    size = 4 if "pack" in case else 8
    workers = int(case.split("_w")[1]) if case.startswith("loader_") else 0
    shares = [[record(b) for b in chain(cfg, name, World(num_nodes=ranks, node=rank, num_workers=workers,
                                                          worker=w)).batch(size)] for w in range(max(workers, 1))]
    return interleave(shares)


def check_case(cfg: dict, case: str, records: list[dict], ranks: int) -> None:
    got = [r[case] for r in records]
    counts = [len(g) for g in got]
    assert len(set(counts)) == 1, f"{case}: the ranks received different numbers of batches: {counts}"
    want = [expected_batches(cfg, case, r, ranks) for r in range(ranks)]
    steps = min(len(w) for w in want)
    assert counts[0] == steps > 0, f"{case}: {counts[0]} batches, the first rank to run out has {steps}"
    for r in range(ranks):
        assert got[r] == want[r][:steps], f"{case}: rank {r} received other batches"
    if case not in BALANCED:  # the filter or packer makes the first reader's share shorter or longer
        assert len(set(len(w) for w in want)) > 1, f"{case}: the shares are alike: nothing to agree on"
    seen = collections.Counter(i for g in got for batch in g for i in batch)
    if case in BALANCED:  # nothing left out, and the padding: fewer than `readers` repeats
        readers = ranks * (2 if case.endswith("_w2") else 1)
        assert len(set(len(w) for w in want)) == 1, f"{case}: the shares differ in length"
        assert set(seen) == set(range(ROWS)), f"{case}: rows lost"
        assert sum(seen.values()) - ROWS == -ROWS % readers, f"{case}: not padded to a multiple of {readers}"


CHAINS = ["buffer", "filter", "pack", "async_filter", "pipeline", "pipeline_pack", "loader_buffer_w2",
          "loader_filter_w0", "loader_filter_w1"]
TORCH_CASES = {2: CHAINS + ["loader_filter_w2", "loader_pack_w2", "batchloader_filter"],
               3: CHAINS + ["loader_filter_w2", "loader_pack_w2"],
               8: CHAINS + ["loader_pack_w1"]}  # 8 ranks x 2 workers: one case, on 2 cores
RESUMED = {2: "loader_filter_w2", 3: "loader_filter_w2", 8: "loader_filter_w1"}


def check_resume(records: list[dict], case: str) -> None:
    for r, rec in enumerate(records):
        res = rec[f"resume {case}"]
        assert res["epoch0"] == rec[case], f"{case}: rank {r} read another epoch the second time"
        assert all(res["end_complete"]), f"{case}: a state saved where the ranks ended the epoch is not complete"
        assert res["after_mid"] == res["epoch0"][2:], f"{case}: rank {r} resumed after 2 batches to other batches"
        assert res["after_end"] == res["epoch1"], f"{case}: rank {r} resumed at the epoch's end, not the next epoch"
    for part in ("epoch1", "after_mid"):
        assert len({len(rec[f"resume {case}"][part]) for rec in records}) == 1, f"{case} {part}: counts differ"


@pytest.mark.parametrize("ranks", [2, 3, 8])
def test_torch_ranks_get_equal_batches(tmp_path, cfg, ranks):
    pytest.importorskip("torch")
    dist = pytest.importorskip("torch.distributed")
    if not (dist.is_available() and dist.is_gloo_available()):
        pytest.skip("needs torch.distributed gloo")
    cases, resumed = TORCH_CASES[ranks], [RESUMED[ranks], "async_filter"]  # the loader's and the thread's paths
    records = run_job(tmp_path, {**cfg, "mode": "torch", "cases": cases, "resume": resumed}, ranks)
    for case in cases:
        check_case(cfg, case, records, ranks)
    for case in resumed:
        check_resume(records, case)


def test_two_jax_processes_get_equal_batches(tmp_path, cfg):
    pytest.importorskip("jax")
    cases = ["buffer", "filter", "pack", "async_filter", "jaxloader_filter", "jaxloader_pack"]
    resumed = ["filter", "async_filter", "jaxloader_filter"]
    records = run_job(tmp_path, {**cfg, "mode": "jax", "cases": cases, "resume": resumed}, 2)
    for case in cases:
        check_case(cfg, case, records, 2)
    for case in resumed:
        check_resume(records, case)
