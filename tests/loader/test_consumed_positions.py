"""A checkpoint records how far the epoch plan was consumed, not ``batches x batch size``.

A dataset whose own ``__iter__`` drops samples (a filter) hands the loop fewer samples than
the plan positions it read; the state after some batches must resume right after the
last plan position read, so the resumed run repeats no sample handed out and skips none.
(A state inside a global step resumes as a new plan segment, whose last step is padded
anew with the epoch's latest samples: ``epoch_tail="pad"`` repeats those, as a fresh
epoch's padding does.)
"""

from __future__ import annotations

import pytest

from shardstream import BatchLoader, StreamingDataset
from shardstream.engine.nodes import PlanNode
from shardstream.testing import write_dataset

N = 240


@pytest.fixture(scope="module")
def ints(tmp_path_factory) -> str:
    samples = ({"id": i} for i in range(N))
    return write_dataset(tmp_path_factory.mktemp("positions") / "ints", {"id": "int"}, samples, size_limit=400)


class Evens(StreamingDataset):
    """Only the samples with an even id (a filter in the dataset's own iterator)."""

    def __iter__(self):
        return (s for s in self.iterate() if s["id"] % 2 == 0)


def _ids(batch) -> list[int]:
    return [int(i) for i in batch["id"]]


@pytest.mark.parametrize("shuffle", [False, True])
def test_a_filtered_pass_resumes_after_the_plan_positions_it_read(ints, shuffle):
    torch_loader = pytest.importorskip("shardstream.integrations.torch")
    make = lambda: Evens(local=ints, batch_size=4, shuffle=shuffle, shuffle_seed=3)  # noqa: E731
    whole = [i for b in torch_loader.StreamingDataLoader(make(), batch_size=4, batch_decode=False) for i in _ids(b)]
    assert len(whole) == N // 2 and all(i % 2 == 0 for i in whole)

    loader = torch_loader.StreamingDataLoader(make(), batch_size=4, batch_decode=False)
    seen = []
    for k, batch in enumerate(loader):
        seen += _ids(batch)
        if k == 4:
            break
    state = loader.state_dict()
    # the plan position is right after the last sample read, odd ones included: not 5 batches x 4
    plan_order = [int(s["id"]) for s in StreamingDataset(local=ints, batch_size=4, shuffle=shuffle, shuffle_seed=3)]
    assert seen == whole[:20] and state["sample_in_epoch"] == plan_order.index(seen[-1]) + 1 > 20

    again = torch_loader.StreamingDataLoader(make(), batch_size=4, batch_decode=False)
    again.load_state_dict(state)
    rest = [i for b in again for i in _ids(b)]
    assert not set(seen) & set(rest)  # nothing handed out before is read again
    assert set(seen) | set(rest) == set(whole)  # nothing is skipped
    padded = rest[len(whole) - len(seen):]  # the resumed segment's new padding (see the module docstring)
    assert rest[:len(whole) - len(seen)] == whole[len(seen):] and len(padded) <= 2


def test_the_root_node_state_is_the_dataset_state_after_its_items(ints):
    ds = StreamingDataset(local=ints, batch_size=6)
    node = PlanNode(ds, lambda d: d.iterate_batches())
    node.reset()
    first = [node.next() for _ in range(3)]
    state = node.get_state()
    assert state["sample_in_epoch"] == 18 and [int(i) for b in first for i in b["id"]] == list(range(18))

    other = PlanNode(StreamingDataset(local=ints, batch_size=6), lambda d: d.iterate_batches())
    other.reset(state)
    assert [int(i) for i in other.next()["id"]] == list(range(18, 24))


def test_batch_loader_records_the_stamp_of_the_last_batch_handed_out(ints):
    ds = StreamingDataset(local=ints, batch_size=5)
    loader = BatchLoader(ds, prefetch=4)
    it = iter(loader)
    next(it), next(it)
    assert loader.state_dict()["sample_in_epoch"] == 10  # not the batches decoded ahead by the thread
    loader.close()
