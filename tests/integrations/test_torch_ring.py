"""StreamingDataLoader's batches through the shared ring (transfer="ring"/"auto"), with real worker processes.

The reference is always ``StreamingDataset.iterate()`` in one process: whatever crosses the
ring, in bundles or not, spilled or not, the loop must get the same samples in the same
order, and a checkpoint must resume where the loop was.
"""

from __future__ import annotations

import gc
import os
import signal
import subprocess
import sys
import textwrap
import time
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from shardstream import InvalidArgumentError, StreamingDataset  # noqa: E402
from shardstream.integrations.torch import StreamingDataLoader  # noqa: E402
from shardstream.integrations.torchring import RingFallbackWarning  # noqa: E402
from shardstream.ring import RingUnavailableError  # noqa: E402
from shardstream.testing import write_dataset  # noqa: E402

pytestmark = [pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")]

BS = 4
N = 150
SEED = 5
COLUMNS = {"id": "int", "x": "ndarray:uint8:6", "tokens": "ndarray:int32", "s": "str"}


def _sample(i: int) -> dict:
    return {"id": i, "x": np.full(6, i % 256, np.uint8), "tokens": np.arange(1 + i % 7, dtype=np.int32) + i, "s": f"s{i}"}


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> str:
    return write_dataset(tmp_path_factory.mktemp("ring") / "data", COLUMNS, map(_sample, range(N)), size_limit=700)


def make(path: str, **kwargs) -> StreamingDataset:
    kwargs.setdefault("batch_size", BS)
    return StreamingDataset(local=path, shuffle=True, shuffle_seed=SEED, **kwargs)


def reference(path: str) -> list[int]:
    return [s["id"] for s in make(path).iterate()]


def check(batch) -> list[int]:
    """The batch's ids, after checking every column against them."""
    got = batch["id"].tolist()
    assert batch["x"][:, 0].tolist() == [i % 256 for i in got]
    lengths = batch["tokens_lengths"].tolist()
    assert lengths == [1 + i % 7 for i in got]
    for row, i, n in zip(batch["tokens"].tolist(), got, lengths):
        assert row[:n] == list(range(i, i + n)) and not any(row[n:])
    assert batch["s"] == [f"s{i}" for i in got]
    return got


def epoch_ids(loader) -> list[int]:
    return [i for b in loader for i in check(b)]


@pytest.mark.parametrize("workers", [1, 2, 3])
@pytest.mark.parametrize("bundle", [1, 2, 5])
@pytest.mark.parametrize("batch_decode", [None, False])
def test_bundles_of_any_size_keep_the_plan_order(data, workers, bundle, batch_decode):
    loader = StreamingDataLoader(make(data), batch_size=BS, num_workers=workers, transfer="ring",
                                 transfer_batches=bundle, batch_decode=batch_decode)
    ref = reference(data)
    assert epoch_ids(loader) == ref
    assert epoch_ids(loader) == [s["id"] for s in _second_epoch(data)]
    assert loader._plane.ring is not None and loader._plane.spilled == 0


def _second_epoch(path):
    ds = make(path)
    ds.set_epoch(1)
    return ds.iterate()


@pytest.mark.parametrize("bundle", [1, 3])
@pytest.mark.parametrize("stop", [1, 6, 17])
def test_a_checkpoint_resumes_where_the_loop_was_on_other_worker_counts(data, bundle, stop):
    loader = StreamingDataLoader(make(data), batch_size=BS, num_workers=2, transfer_batches=bundle)
    seen = []
    for j, batch in enumerate(loader):
        seen.extend(check(batch))
        if j + 1 == stop:
            break
    state = loader.state_dict()
    for workers in (1, 3):
        resumed = StreamingDataLoader(make(data), batch_size=BS, num_workers=workers, transfer_batches=bundle)
        resumed.load_state_dict(state)
        assert seen + epoch_ids(resumed) == reference(data)


def test_batches_kept_by_the_loop_stay_intact_and_the_rest_spill(data):
    loader = StreamingDataLoader(make(data), batch_size=BS, num_workers=2, transfer_batches=2)
    batches = list(loader)  # every batch held at once: the slots run out
    assert [i for b in batches for i in check(b)] == reference(data)
    assert loader._plane.spilled > 0
    del batches
    gc.collect()
    assert loader._plane.ring.held() == 0


def test_a_batch_too_big_for_its_slot_spills_and_the_next_ring_is_bigger(data, monkeypatch):
    from shardstream.integrations import torchring

    monkeypatch.setattr(torchring, "_MIN_SLOT", 4096)
    loader = StreamingDataLoader(make(data), batch_size=BS, num_workers=2, transfer="ring")
    loader._slot_bytes = 1  # as if the estimate were far too small: a slot of 4096 bytes
    monkeypatch.setattr(loader.dataset, "finish", _Padded(loader.dataset.finish))  # batches of 8,000+ bytes
    with pytest.warns(RingFallbackWarning, match="did not fit in a ring slot"):
        assert epoch_ids(loader) == reference(data)
    first = loader._plane.ring
    assert loader._plane.spilled >= N // BS // 2 and loader._plane.needed > first.slot_bytes // 8
    spilled = loader._plane.spilled
    assert epoch_ids(loader) == [s["id"] for s in _second_epoch(data)]
    assert loader._plane.ring.slot_bytes >= loader._plane.needed and loader._plane.spilled == spilled


class _Padded:
    """Adds an 8,000-byte column to each batch before it is written into the ring."""

    def __init__(self, finish) -> None:
        self.finish = finish

    def __getattr__(self, name):
        return getattr(self.finish, name)

    def __setattr__(self, name, value):
        if name == "finish":
            object.__setattr__(self, name, value)
        else:
            setattr(self.finish, name, value)

    def __call__(self, stamp):
        if stamp.item is not None:
            stamp.item["pad"] = np.zeros(8000, np.uint8)
        return self.finish(stamp)


def test_a_user_collate_fn_s_tensors_cross_the_ring_with_their_dtypes(data):
    def collate(samples):
        ids = torch.tensor([s["id"] for s in samples])
        return {"id": ids, "half": ids.to(torch.bfloat16), "scalar": ids.sum(), "every_other": ids[::2],
                "x": [torch.from_numpy(s["x"]) for s in samples], "s": [s["s"] for s in samples]}

    loader = StreamingDataLoader(make(data), batch_size=BS, num_workers=2, collate_fn=collate,
                                 multiprocessing_context="fork")
    got = []
    for batch in loader:
        ids = batch["id"].tolist()
        assert batch["half"].dtype == torch.bfloat16 and batch["half"].tolist() == [float(i) for i in ids]
        assert batch["scalar"].shape == () and int(batch["scalar"]) == sum(ids)
        assert batch["every_other"].tolist() == ids[::2]
        assert [int(x[0]) for x in batch["x"]] == [i % 256 for i in ids] and batch["s"] == [f"s{i}" for i in ids]
        got.extend(ids)
    assert got == reference(data)
    assert loader._plane.spilled == 0


@pytest.mark.parametrize("persistent", [False, True])
def test_spawned_workers_map_the_ring(data, persistent):
    loader = StreamingDataLoader(make(data), batch_size=BS, num_workers=2, multiprocessing_context="spawn",
                                 persistent_workers=persistent)
    assert epoch_ids(loader) == reference(data)
    assert epoch_ids(loader) == [s["id"] for s in _second_epoch(data)]
    assert loader._plane.ring is not None and loader._plane.spilled == 0


def test_a_tiny_ring_falls_back_to_the_queue_once_with_the_size_to_raise(data):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loader = StreamingDataLoader(make(data), batch_size=BS, num_workers=2, ring_bytes=8192)
        assert epoch_ids(loader) == reference(data)
        assert epoch_ids(loader) == [s["id"] for s in _second_epoch(data)]
    said = [str(w.message) for w in caught if issubclass(w.category, RingFallbackWarning)]
    assert len(said) == 1 and "ring_bytes=8,192" in said[0] and "raise it to at least" in said[0]
    assert loader._plane.ring is None
    with pytest.raises(RingUnavailableError, match="raise it to at least"):
        list(StreamingDataLoader(make(data), batch_size=BS, num_workers=2, transfer="ring", ring_bytes=8192))


def test_no_shared_memory_falls_back_to_the_queue(data, monkeypatch):
    def refuse(*args, **kwargs):
        raise OSError(38, "Function not implemented")

    monkeypatch.setattr(os, "memfd_create", refuse)
    with pytest.warns(RingFallbackWarning, match="could not be made"):
        loader = StreamingDataLoader(make(data), batch_size=BS, num_workers=2, multiprocessing_context="fork")
        assert epoch_ids(loader) == reference(data)


def test_without_memfd_forked_workers_share_an_anonymous_mapping_and_spawned_ones_fall_back(data, monkeypatch):
    monkeypatch.delattr(os, "memfd_create")
    forked = StreamingDataLoader(make(data), batch_size=BS, num_workers=2, multiprocessing_context="fork")
    assert epoch_ids(forked) == reference(data)
    assert forked._plane.ring is not None and forked._plane.ring.fd is None and forked._plane.spilled == 0
    with pytest.warns(RingFallbackWarning, match="reaches forked workers only"):
        spawned = StreamingDataLoader(make(data), batch_size=BS, num_workers=2, multiprocessing_context="spawn")
        assert epoch_ids(spawned) == reference(data)
    assert spawned._plane.ring is None


def test_the_environment_sets_the_ring_size(data, monkeypatch):
    monkeypatch.setenv("SHARDSTREAM_RING_BYTES", "8192")
    with pytest.warns(RingFallbackWarning, match="ring_bytes=8,192"):
        assert epoch_ids(StreamingDataLoader(make(data), batch_size=BS, num_workers=1)) == reference(data)
    monkeypatch.setenv("SHARDSTREAM_RING_BYTES", "lots")
    with pytest.raises(InvalidArgumentError, match="SHARDSTREAM_RING_BYTES"):
        StreamingDataLoader(make(data), batch_size=BS, num_workers=1)


def test_bad_transfer_arguments(data):
    with pytest.raises(InvalidArgumentError, match="transfer='pipe'"):
        StreamingDataLoader(make(data), batch_size=BS, num_workers=2, transfer="pipe")
    with pytest.raises(InvalidArgumentError, match="needs num_workers"):
        StreamingDataLoader(make(data), batch_size=BS, transfer="ring")
    with pytest.raises(InvalidArgumentError, match="ring_bytes"):
        StreamingDataLoader(make(data), batch_size=BS, num_workers=2, ring_bytes=10)
    with pytest.raises(InvalidArgumentError, match="transfer_batches"):
        StreamingDataLoader(make(data), batch_size=BS, num_workers=2, transfer_batches=0)
    with pytest.raises(InvalidArgumentError, match="device_prefetch"):
        StreamingDataLoader(make(data), batch_size=BS, device="cpu", device_prefetch=0)
    if not torch.cuda.is_available():
        with pytest.raises(InvalidArgumentError, match="CUDA is not available"):
            StreamingDataLoader(make(data), batch_size=BS, device="cuda")


def test_queue_transfer_and_no_workers_use_no_ring(data):
    for kwargs in ({"num_workers": 2, "transfer": "queue"}, {"num_workers": 0}):
        loader = StreamingDataLoader(make(data), batch_size=BS, **kwargs)
        assert loader._plane is None and epoch_ids(loader) == reference(data)


def test_batches_on_a_device(data):
    loader = StreamingDataLoader(make(data), batch_size=BS, num_workers=2, device="cpu", pin_memory=True)
    assert epoch_ids(loader) == reference(data)


def test_a_killed_worker_raises_and_the_next_pass_is_whole(data):
    loader = StreamingDataLoader(make(data), batch_size=BS, num_workers=2, multiprocessing_context="fork")
    it = iter(loader)
    next(it)
    os.kill(loader._torch_it()._workers[0].pid, signal.SIGKILL)
    with pytest.raises(RuntimeError, match="(?i)worker"):
        for _ in it:
            pass
    del it
    gc.collect()
    loader.load_state_dict(make(data).state_dict())  # the start of the first epoch again
    assert epoch_ids(loader) == reference(data)
    assert loader._plane.spilled == 0  # the crashed pass's slots were reclaimed


_JOB = textwrap.dedent("""
    import os, sys, time
    from shardstream import StreamingDataset
    from shardstream.integrations.torch import StreamingDataLoader
    def main():
        ds = StreamingDataset(local=sys.argv[1], shuffle=True, shuffle_seed=5, batch_size=4)
        # one batch per crossing: the workers stay mid-pass (a worker done with its share exits at once)
        loader = StreamingDataLoader(ds, batch_size=4, num_workers=2, multiprocessing_context=sys.argv[2],
                                     transfer_batches=1 if sys.argv[3] == "hold" else None)
        if sys.argv[3] == "ids":
            print(" ".join(str(i) for b in loader for i in b["id"].tolist()), flush=True)
            return
        it = iter(loader)
        held = [next(it) for _ in range(3)]
        pids = [w.pid for w in loader._torch_it()._workers]
        print(os.getpid(), *pids, flush=True)
        time.sleep(600)
    if __name__ == "__main__":
        main()
""")


def _ring_mappers() -> set[int]:
    """Pids of processes that map a shardstream ring."""
    out = set()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/maps") as f:
                if "memfd:shardstream-ring" in f.read():
                    out.add(int(pid))
        except OSError:
            pass
    return out


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[-1][0] != "Z"
    except OSError:
        return False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="memfd and /proc are Linux's")
@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_a_killed_training_process_leaves_nothing_behind(data, tmp_path, context):
    script = tmp_path / "job.py"
    script.write_text(_JOB)
    shm_before = set(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else set()
    proc = subprocess.Popen([sys.executable, str(script), data, context, "hold"], stdout=subprocess.PIPE, text=True)
    try:
        pids = [int(p) for p in proc.stdout.readline().split()]
        assert len(pids) == 3 and set(pids) <= _ring_mappers()  # the job and its workers map the ring
        os.kill(pids[0], signal.SIGKILL)
        proc.wait(30)
        end = time.monotonic() + 30
        while any(_alive(p) for p in pids) and time.monotonic() < end:
            time.sleep(0.1)
        assert not any(_alive(p) for p in pids)
        assert not set(pids) & _ring_mappers()
        shm_after = set(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else set()
        assert not [n for n in shm_after - shm_before if "shardstream" in n or "torch" in n]
    finally:
        proc.kill()
        proc.stdout.close()


def test_two_jobs_on_one_host_each_read_their_own_batches(data, tmp_path):
    script = tmp_path / "job.py"
    script.write_text(_JOB)
    jobs = [subprocess.Popen([sys.executable, str(script), data, "fork", "ids"], stdout=subprocess.PIPE, text=True)
            for _ in range(2)]
    outs = [job.communicate(timeout=120)[0] for job in jobs]
    assert all(job.returncode == 0 for job in jobs)
    assert [[int(i) for i in out.split()] for out in outs] == [reference(data)] * 2


def test_two_loaders_in_one_process_have_their_own_rings(data):
    a = StreamingDataLoader(make(data), batch_size=BS, num_workers=2)
    b = StreamingDataLoader(make(data), batch_size=BS, num_workers=1, batch_decode=False)
    got_a, got_b = [], []
    for batch_a, batch_b in zip(a, b, strict=True):
        got_a.extend(check(batch_a))
        got_b.extend(check(batch_b))
    assert got_a == got_b == reference(data)
    assert a._plane.ring is not b._plane.ring and a._plane.ring.key != b._plane.ring.key
