"""The ring with CUDA: page-locked slots, copies that outlive the batch, batches moved ahead to the GPU.

Skipped where torch has no CUDA device (the CI machine); run on a GPU machine.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device", allow_module_level=True)

from shardstream import StreamingDataset  # noqa: E402
from shardstream.integrations.torch import StreamingDataLoader  # noqa: E402
from shardstream.testing import write_dataset  # noqa: E402

BS = 64
N = 64 * 40
WIDTH = 4096


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> str:
    samples = ({"id": i, "x": np.full(WIDTH, i % 251, np.uint8)} for i in range(N))
    return write_dataset(tmp_path_factory.mktemp("cuda") / "data", {"id": "int", "x": f"ndarray:uint8:{WIDTH}"},
                         samples, size_limit=1 << 20)


def make(path: str) -> StreamingDataset:
    return StreamingDataset(local=path, shuffle=True, shuffle_seed=1, batch_size=BS)


def reference(path: str) -> list[int]:
    return [s["id"] for s in make(path).iterate()]


def test_pinned_batches_land_in_the_page_locked_ring(data):
    loader = StreamingDataLoader(make(data), batch_size=BS, num_workers=2, pin_memory=True)
    ids = []
    for batch in loader:
        assert batch["x"].is_pinned() and batch["id"].is_pinned()
        ids.extend(batch["id"].tolist())
    assert ids == reference(data)
    assert loader._plane.ring.pinned and loader._plane.spilled == 0


def test_a_slot_is_not_rewritten_while_a_copy_from_it_is_pending(data):
    """Each copy is held back on the GPU (a spin kernel before it) while the loop drops the host batch at
    once: a slot handed back before its copy ran would be overwritten by its worker."""
    loader = StreamingDataLoader(make(data), batch_size=BS, num_workers=2, pin_memory=True, transfer_batches=2)
    on_gpu, ids = [], []
    for batch in loader:
        torch.cuda._sleep(2_000_000)  # about a millisecond of GPU time ahead of the copy
        on_gpu.append(batch["x"].to("cuda", non_blocking=True))
        ids.append(batch["id"].tolist())
        del batch
    torch.cuda.synchronize()
    for x, batch_ids in zip(on_gpu, ids):
        want = torch.tensor([i % 251 for i in batch_ids], dtype=torch.uint8, device="cuda")
        assert torch.equal(x[:, 0], want) and torch.equal(x[:, -1], want)
    assert [i for b in ids for i in b] == reference(data)


@pytest.mark.parametrize("depth", [1, 3])
def test_batches_arrive_on_the_gpu_in_order(data, depth):
    loader = StreamingDataLoader(make(data), batch_size=BS, num_workers=2, device="cuda", device_prefetch=depth)
    ids = []
    for batch in loader:
        assert batch["x"].is_cuda and batch["id"].is_cuda
        x = batch["x"].float().mean(dim=1)  # used on the loop's stream right away
        assert torch.equal(x.to(torch.uint8), batch["id"] % 251)
        ids.extend(batch["id"].tolist())
    assert ids == reference(data)


def test_a_chain_s_batches_are_pinned_too(data):
    chain = make(data).map(lambda row: {"id": row["id"], "x": row["x"][:8]})
    loader = StreamingDataLoader(chain, batch_size=BS, num_workers=2, pin_memory=True)
    got = []
    for batch in loader:
        assert batch["x"].is_pinned()
        got.extend(batch["id"].tolist())
    assert sorted(got) == list(range(N))
