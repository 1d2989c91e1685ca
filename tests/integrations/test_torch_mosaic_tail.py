"""StreamingDataLoader with epoch_tail="mosaic": a short last batch, dropped with drop_last=True on every
path, counted as consumed, and left out of len(loader), as a DataLoader over mosaicml-streaming does."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from shardstream import StreamingDataset  # noqa: E402
from shardstream.integrations.torch import StreamingDataLoader  # noqa: E402
from shardstream.testing import write_dataset  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")

N, BS = 117, 4  # 117 = 29 batches of 4 and a short one of 1


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> str:
    rows = ({"id": i, "x": np.full(3, i % 256, np.uint8)} for i in range(N))
    return write_dataset(tmp_path_factory.mktemp("mtail") / "d", {"id": "int", "x": "ndarray:uint8:3"}, rows,
                         size_limit=400)


def _ids(batch) -> list[int]:
    return [int(v) for v in (batch["id"] if isinstance(batch, dict) else [s["id"] for s in batch])]


@pytest.mark.parametrize("path", ["batch", "samples", "collate"])
@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("drop_last", [False, True])
def test_short_last_batch_dropped_only_with_drop_last(data, path, workers, drop_last):
    ds = StreamingDataset(local=data, batch_size=BS, epoch_tail="mosaic", shuffle=True, shuffle_seed=3,
                          num_canonical_nodes=1)
    kwargs = {"batch_decode": False} if path == "samples" else {}
    if path == "collate":
        kwargs["collate_fn"] = list
    loader = StreamingDataLoader(ds, batch_size=BS, num_workers=workers, drop_last=drop_last, **kwargs)
    expected = N // BS if drop_last else -(-N // BS)
    assert len(loader) == expected
    batches = [_ids(b) for b in loader]
    assert len(batches) == expected
    sizes = [len(b) for b in batches]
    assert sizes == [BS] * (N // BS) + ([] if drop_last else [N % BS])
    seen = [i for b in batches for i in b]
    assert len(set(seen)) == len(seen) == (N // BS * BS if drop_last else N)


@pytest.mark.parametrize("batch_decode", [True, False])
def test_dropped_batch_counts_as_consumed(data, batch_decode):
    ds = StreamingDataset(local=data, batch_size=BS, epoch_tail="mosaic", num_canonical_nodes=1)
    loader = StreamingDataLoader(ds, batch_size=BS, drop_last=True, batch_decode=batch_decode)
    assert len(list(loader)) == N // BS
    state = loader.state_dict()
    # the epoch is over: resuming from this state starts the next epoch, it does not replay the short step
    ds2 = StreamingDataset(local=data, batch_size=BS, epoch_tail="mosaic", num_canonical_nodes=1)
    loader2 = StreamingDataLoader(ds2, batch_size=BS, drop_last=True, batch_decode=batch_decode)
    loader2.load_state_dict(state)
    assert len(list(loader2)) == N // BS


@pytest.mark.parametrize("workers", [0, 2])
def test_mosaic_epochs_need_the_datasets_batch_size(data, workers):
    ds = StreamingDataset(local=data, epoch_tail="mosaic")
    loader = StreamingDataLoader(ds, batch_size=BS, num_workers=workers)  # built: the epoch is refused
    with pytest.raises(ValueError, match="Please pass `batch_size` to StreamingDataset"):
        next(iter(loader))
    with pytest.raises(ValueError, match="Please pass `batch_size` to StreamingDataset"):
        next(iter(ds))
    # the default tail takes the loader's batch_size instead, with a warning
    with pytest.warns(UserWarning, match="without batch_size"):
        ok = StreamingDataLoader(StreamingDataset(local=data), batch_size=BS, num_workers=workers)
    assert len(next(iter(ok))["id"]) == BS


def test_mosaic_epochs_refuse_fewer_samples_than_canonical_nodes(tmp_path):
    out = write_dataset(tmp_path / "one", {"id": "int"}, [{"id": 0}])
    ds = StreamingDataset(local=out, batch_size=1, shuffle=True, num_canonical_nodes=2, epoch_tail="mosaic")
    with pytest.raises(ValueError, match="The number of samples assigned to a canonical node"):
        list(ds)
    padded = StreamingDataset(local=out, batch_size=1, shuffle=True, num_canonical_nodes=2)
    assert [s["id"] for s in padded] == [0]
