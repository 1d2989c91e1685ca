"""PyTorch: StreamingDataLoader over datasets mixed from several streams, with real worker processes.

The reference order is ``StreamingDataset.iterate()`` in one process with the same settings:
the loader's batches, put end to end, must equal it sample for sample, with or without workers,
on the column-batch path and the per-sample path, and after a resume on another number of workers.
"""

from __future__ import annotations

import gc
import json
import time
from collections import Counter

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from shardstream import InvalidArgumentError, Stream, StreamingDataset, WeightSchedule  # noqa: E402
from shardstream.errors import IncompatibleStateError  # noqa: E402
from shardstream.integrations.torch import StreamingDataLoader  # noqa: E402
from shardstream.testing import write_dataset  # noqa: E402

pytestmark = [
    pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning"),
    pytest.mark.filterwarnings("ignore:The given NumPy array is not writable:UserWarning"),
]

BS = 4
SIZES = {"a": 40, "b": 25, "c": 30}
COLUMNS = {"id": "int", "src": "str", "x": "ndarray:int32:2", "f": "float32"}


def _sample(tag: str, i: int) -> dict:
    return {"id": i, "src": tag, "x": np.array([i, ord(tag)], np.int32), "f": np.float32(i / 8)}


@pytest.fixture(scope="module")
def paths(tmp_path_factory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("mixed-loader")
    out = {tag: write_dataset(root / tag, COLUMNS, (_sample(tag, i) for i in range(n)), size_limit=300)
           for tag, n in SIZES.items()}
    out["d"] = write_dataset(root / "d", {"id": "int", "src": "str", "extra": "int"},
                             ({"id": i, "src": "d", "extra": i * 10} for i in range(20)), size_limit=300)
    for tag, path in out.items():
        assert len(StreamingDataset(local=path).shards) >= 3, tag
    return out


def make(paths, method: str = "random", tags: str = "abc", schedule=None, **kwargs) -> StreamingDataset:
    """Streams ``tags`` in proportions 2 : 1 : 1 (or under ``schedule``), 96 samples an epoch."""
    if schedule is None:
        streams = [Stream(local=paths[t], proportion=w) for t, w in zip(tags, (2, 1, 1))]
    else:
        streams = [Stream(local=paths[t]) for t in tags]
    kwargs.setdefault("batch_size", BS)
    return StreamingDataset(streams=streams, epoch_size=96, shuffle=True, shuffle_seed=5, batching_method=method,
                            weight_schedule=schedule, **kwargs)


def key(sample) -> tuple[str, int]:
    return sample["src"], int(sample["id"])


def reference(paths, epochs: int = 1, first: int = 0, **kwargs) -> list[list[tuple[str, int]]]:
    ds = make(paths, **kwargs)
    ds.set_epoch(first)
    return [[key(s) for s in ds.iterate()] for _ in range(epochs)]


def batch_keys(batch) -> list[tuple[str, int]]:
    """(stream, id) of each sample of a collated batch, checking the other columns against the id."""
    src, ids = list(batch["src"]), [int(i) for i in batch["id"]]
    assert len(ids) == BS
    x = batch["x"]
    assert isinstance(x, torch.Tensor) and x.dtype == torch.int32 and tuple(x.shape) == (BS, 2)
    for row, tag, i in zip(x.tolist(), src, ids):
        assert row == [i, ord(tag)]
    assert torch.allclose(batch["f"], torch.tensor([i / 8 for i in ids], dtype=torch.float32))
    return list(zip(src, ids))


def run_epoch(loader) -> list[tuple[str, int]]:
    return [k for batch in loader for k in batch_keys(batch)]


def take(loader, k: int) -> list[tuple[str, int]]:
    out = []
    for j, batch in enumerate(loader):
        out.extend(batch_keys(batch))
        if j + 1 == k:
            break
    return out


def loader_for(ds, num_workers: int, **kwargs) -> StreamingDataLoader:
    return StreamingDataLoader(ds, batch_size=BS, num_workers=num_workers,
                               multiprocessing_context="fork" if num_workers else None, **kwargs)


@pytest.fixture(autouse=True)
def collect():
    yield
    gc.collect()


# -- the loader gives what one process iterates --------------------------------------------------

@pytest.mark.parametrize("batch_decode", [None, False])
@pytest.mark.parametrize("num_workers", [0, 2])
@pytest.mark.parametrize("method", ["random", "stratified", "per_stream", "device_per_stream"])
def test_batches_equal_single_process_iteration(paths, method, num_workers, batch_decode):
    ds = make(paths, method)
    loader = loader_for(ds, num_workers, batch_decode=batch_decode)
    assert loader.batch_decode is (batch_decode is None)  # the streams share their columns
    ref = reference(paths, 2, method=method)
    assert ref[0] != ref[1]
    for epoch in range(2):
        assert len(loader) == len(ref[epoch]) // BS
        got = run_epoch(loader)
        assert got == ref[epoch], f"epoch {epoch}"
        assert Counter(t for t, _ in got) == Counter(dict(zip("abc", ds.stream_counts(epoch).tolist())))
    assert ds.next_epoch == 2


def test_device_per_stream_batches_come_from_one_stream(paths):
    loader = loader_for(make(paths, "device_per_stream"), 2)
    batches = [batch_keys(b) for b in loader]
    assert all(len({t for t, _ in b}) == 1 for b in batches)
    assert len({b[0][0] for b in batches}) == 3


def test_scheduled_mixture_through_workers(paths):
    schedule = WeightSchedule([(0, [1, 0, 0]), (96, [0, 1, 1])], kind="linear")
    ds = make(paths, schedule=schedule)
    loader = loader_for(ds, 2, persistent_workers=True)
    ref = reference(paths, 2, schedule=schedule)
    assert [run_epoch(loader) for _ in range(2)] == ref
    assert Counter(t for t, _ in ref[1]) == Counter({"b": 48, "c": 48})


# -- resumption ----------------------------------------------------------------------------------

@pytest.mark.parametrize("batch_decode", [None, False])
@pytest.mark.parametrize("before,after", [(2, 0), (0, 2), (2, 3), (1, 2)])
def test_state_mid_epoch_resumes_on_another_number_of_workers(paths, before, after, batch_decode):
    full = reference(paths, 2, method="stratified")
    extra = {"prefetch_factor": 4} if before else {}
    loader = loader_for(make(paths, "stratified"), before, batch_decode=batch_decode, **extra)
    k = 5
    first = take(loader, k)
    time.sleep(0.1)  # let the workers read ahead of the loop
    state = loader.state_dict()
    assert (state["epoch"], state["sample_in_epoch"]) == (0, k * BS)
    assert state["mixture"]["batching_method"] == "stratified"
    state = json.loads(json.dumps(state))
    other = loader_for(make(paths, "stratified"), after, batch_decode=batch_decode)
    other.load_state_dict(state)
    assert len(other) == (len(full[0]) - k * BS) // BS
    assert first + run_epoch(other) == full[0]
    assert run_epoch(other) == full[1]


def test_state_at_the_end_of_an_epoch_resumes_at_the_next(paths):
    full = reference(paths, 3)
    loader = loader_for(make(paths), 2)
    assert run_epoch(loader) == full[0]
    assert run_epoch(loader) == full[1]
    state = json.loads(json.dumps(loader.state_dict()))
    assert (state["epoch"], state["sample_in_epoch"]) == (1, 96)
    other = loader_for(make(paths), 0)
    other.load_state_dict(state)
    assert run_epoch(other) == full[2]


def test_a_state_of_another_mixture_is_refused_by_the_loader(paths):
    loader = loader_for(make(paths), 0)
    take(loader, 2)
    state = loader.state_dict()
    other = loader_for(make(paths, "per_stream"), 0)
    with pytest.raises(IncompatibleStateError, match="batching_method: state has 'random'"):
        other.load_state_dict(state)
    assert run_epoch(other) == reference(paths, method="per_stream")[0]  # the refused state left it alone


# -- streams with different columns ------------------------------------------------------------------

def test_different_columns_are_refused_for_column_batches(paths):
    ds = make(paths, tags="ad")
    with pytest.raises(InvalidArgumentError, match="different columns") as info:
        loader_for(ds, 2, batch_decode=True)
    assert "collate" in str(info.value)
    assert ds.batch_size == BS  # the refused loader left the dataset alone
    with pytest.raises(InvalidArgumentError, match="different columns"):
        ds.iterate_batches()
    assert ds.next_epoch == 0  # nothing was started


def test_different_columns_on_the_default_path_fail_clearly(paths):
    with pytest.raises(InvalidArgumentError, match="different columns"):
        list(loader_for(make(paths, tags="ad"), 0))


def test_default_batch_path_is_not_chosen_for_different_columns(paths):
    """The first stream's columns alone must not pick the column-batch path: refused at once (or per sample)."""
    ds = make(paths, tags="ad")
    try:
        loader = loader_for(ds, 2, collate_fn=None)
    except InvalidArgumentError as exc:  # refusing at once, with the clear message, would do too
        assert "different columns" in str(exc)
        return
    assert loader.batch_decode is False


def _as_list(samples):
    return [dict(s) for s in samples]


@pytest.mark.parametrize("num_workers", [0, 2])
def test_different_columns_iterate_per_sample_with_a_collate_fn(paths, num_workers):
    ds = make(paths, tags="ad")
    loader = loader_for(ds, num_workers, collate_fn=_as_list)
    assert loader.batch_decode is False
    ref = make(paths, tags="ad")
    want = [key(s) for s in ref.iterate()]
    batches = list(loader)
    assert all(isinstance(b, list) and len(b) == BS for b in batches)
    samples = [s for b in batches for s in b]
    assert [key(s) for s in samples] == want
    for s in samples:
        if s["src"] == "d":
            assert set(s) == {"id", "src", "extra"} and s["extra"] == s["id"] * 10
        else:
            assert set(s) == set(COLUMNS)
            assert s["x"].tolist() == [s["id"], ord(s["src"])]
    assert {s["src"] for s in samples} == {"a", "d"}
