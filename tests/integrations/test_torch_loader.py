"""PyTorch: StreamingDataset in plain DataLoaders and StreamingDataLoader, with real worker processes.

Loaders with workers run real DataLoader worker processes (fork unless a test says spawn).
The reference order is always ``StreamingDataset.iterate()`` in one process with the
same settings: the concatenated batches must equal it, sample for sample.
"""

from __future__ import annotations

import contextlib
import gc
import multiprocessing
import os
import signal
import time

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from torch.utils.data import DataLoader, IterableDataset  # noqa: E402

import shardstream  # noqa: E402
from shardstream import (  # noqa: E402
    CorruptShardError,
    InvalidArgumentError,
    Ragged,
    StreamingDataset,
    World,
)
from shardstream.integrations.torch import StreamingDataLoader  # noqa: E402
from shardstream.testing import write_dataset  # noqa: E402

pytestmark = [
    pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning"),
    pytest.mark.filterwarnings("ignore:.*pin_memory.*:UserWarning"),
    pytest.mark.filterwarnings("ignore:The given NumPy array is not writable:UserWarning"),
]

BS = 4
N = 90  # not a multiple of BS: the last step is padded
SEED = 11
COLUMNS = {"id": "int", "x": "ndarray:uint8:4", "f": "float32", "s": "str", "b": "bytes"}


# -- datasets --------------------------------------------------------------------------------

def _plain_sample(i: int) -> dict:
    return {"id": i, "x": np.full(4, i % 256, np.uint8), "f": np.float32(i / 4), "s": f"s{i}" * (i % 3),
            "b": bytes([i % 256]) * (i % 4)}


@pytest.fixture(scope="module")
def plain(tmp_path_factory) -> str:
    out = write_dataset(tmp_path_factory.mktemp("torch") / "plain", COLUMNS, map(_plain_sample, range(N)),
                        size_limit=600)
    assert len(StreamingDataset(local=out).shards) >= 6
    return out


@pytest.fixture(scope="module")
def ragged(tmp_path_factory) -> str:
    rng = np.random.default_rng(3)
    samples = [{"id": i, "tokens": rng.integers(-99, 99, int(rng.integers(1, 9))).astype(np.int32),
                "x": np.full(4, i, np.uint8)} for i in range(40)]
    return write_dataset(tmp_path_factory.mktemp("torch") / "ragged",
                         {"id": "int", "tokens": "ndarray:int32", "x": "ndarray:uint8:4"}, samples, size_limit=300)


def make(path: str, **kwargs) -> StreamingDataset:
    kwargs.setdefault("batch_size", BS)
    kwargs.setdefault("shuffle", True)
    kwargs.setdefault("shuffle_seed", SEED)
    return StreamingDataset(local=path, **kwargs)


def reference(path: str, epochs: int = 1, first: int = 0, **kwargs) -> list[list[int]]:
    """The ids of each epoch from ``first`` on, read by ``iterate()`` in this process."""
    ds = make(path, **kwargs)
    ds.set_epoch(first)
    return [[s["id"] for s in ds.iterate()] for _ in range(epochs)]


def ids(batch) -> list[int]:
    return [int(i) for i in batch["id"]]


def run_epoch(loader) -> list[int]:
    out = []
    for batch in loader:
        got = ids(batch)
        assert len(got) == BS
        out.extend(got)
    return out


def take(loader, k: int) -> list[int]:
    """The ids of the first ``k`` batches of the next pass (the pass is left unfinished)."""
    out = []
    for j, batch in enumerate(loader):
        out.extend(ids(batch))
        if j + 1 == k:
            break
    return out


def error_of(loader) -> tuple[type, str]:
    """Run a pass that must fail: (type, message) of the error (the traceback is dropped so
    that the failed iterator, and its workers, are released now)."""
    try:
        for _ in loader:
            pass
    except Exception as exc:  # noqa: BLE001
        return type(exc), str(exc)
    finally:
        gc.collect()
    raise AssertionError("the pass ended without an error")


@contextlib.contextmanager
def deadline(seconds: float):
    """Fail (instead of hanging) if the block runs longer than ``seconds``."""
    def fire(signum, frame):
        raise TimeoutError(f"still running after {seconds} s")

    previous = signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@pytest.fixture(autouse=True)
def no_hang():
    with deadline(90):
        yield
    gc.collect()


# -- a plain torch DataLoader ----------------------------------------------------------------

def test_is_an_iterable_dataset(plain):
    ds = make(plain)
    assert isinstance(ds, IterableDataset)
    assert isinstance(ShoutingIds(local=plain, batch_size=BS), IterableDataset)
    assert shardstream.StreamingDataLoader is StreamingDataLoader


def test_plain_dataloader_persistent_workers_run_successive_epochs(plain):
    ds = make(plain)
    loader = DataLoader(ds, batch_size=BS, num_workers=2, persistent_workers=True, multiprocessing_context="fork")
    assert [run_epoch(loader) for _ in range(2)] == reference(plain, 2)


def test_plain_dataloader_with_set_epoch(plain):
    ds = make(plain)
    loader = DataLoader(ds, batch_size=BS, num_workers=2, multiprocessing_context="fork")
    ref = reference(plain, 3)
    assert ref[0] != ref[1] != ref[2]
    for epoch in (0, 1, 2):
        ds.set_epoch(epoch)
        assert run_epoch(loader) == ref[epoch]
    ds.set_epoch(1)
    assert run_epoch(loader) == ref[1]


# -- StreamingDataLoader: order over epochs ------------------------------------------------------

@pytest.mark.parametrize("batch_decode", [None, True, False])
@pytest.mark.parametrize("num_workers,persistent", [(0, False), (1, False), (1, True), (2, False), (2, True),
                                                    (3, False), (3, True)])
def test_epochs_follow_the_plan(plain, num_workers, persistent, batch_decode):
    ds = make(plain)
    loader = StreamingDataLoader(ds, batch_size=BS, num_workers=num_workers, persistent_workers=persistent,
                                 batch_decode=batch_decode,
                                 multiprocessing_context="fork" if num_workers else None)
    assert loader.batch_decode is (batch_decode is not False)  # None: these columns collate alike
    ref = reference(plain, 2)
    assert ref[0] != ref[1] and sorted(set(ref[0])) == list(range(N))
    for epoch in range(2):
        assert len(loader) == len(ref[epoch]) // BS
        assert run_epoch(loader) == ref[epoch], f"epoch {epoch}"
    assert ds.next_epoch == 2


@pytest.mark.parametrize("num_workers,persistent,batch_decode", [(2, True, None), (1, False, False)])
def test_epochs_follow_the_plan_with_spawned_workers(plain, num_workers, persistent, batch_decode):
    loader = StreamingDataLoader(make(plain), batch_size=BS, num_workers=num_workers, persistent_workers=persistent,
                                 batch_decode=batch_decode, multiprocessing_context="spawn")
    assert [run_epoch(loader) for _ in range(2)] == reference(plain, 2)


def test_unshuffled_and_dataset_without_batch_size(plain):
    ds = StreamingDataset(local=plain)  # no batch_size: the loader's is adopted
    loader = StreamingDataLoader(ds, batch_size=5, num_workers=2, multiprocessing_context="fork")
    assert ds.batch_size == 5
    got = [int(i) for batch in loader for i in batch["id"]]
    assert got == list(range(N))
    with pytest.raises(InvalidArgumentError, match="batch_size"):
        StreamingDataLoader(ds, batch_size=4)


def test_len_counts_the_batches_left_in_a_resumed_pass(plain):
    loader = StreamingDataLoader(make(plain), batch_size=BS, num_workers=2, multiprocessing_context="fork")
    total = len(loader)
    assert total == -(-N // BS)
    take(loader, 5)
    state = loader.state_dict()
    resumed = StreamingDataLoader(make(plain), batch_size=BS, num_workers=1, multiprocessing_context="fork")
    resumed.load_state_dict(state)
    assert len(resumed) == total - 5
    assert sum(1 for _ in resumed) == total - 5
    assert sum(1 for _ in resumed) == total  # the next pass is a whole epoch


def test_len_after_a_finished_resumed_pass_is_the_next_pass(plain):
    # regression: len() kept reporting the finished (resumed, shorter) pass
    loader = StreamingDataLoader(make(plain), batch_size=BS)
    take(loader, 5)
    resumed = StreamingDataLoader(make(plain), batch_size=BS)
    resumed.load_state_dict(loader.state_dict())
    assert sum(1 for _ in resumed) == len(loader) - 5
    assert len(resumed) == len(loader)  # no pass in progress: the next one, a whole epoch


# -- batch_decode ----------------------------------------------------------------------------------

NUMERIC = ("int", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "float16", "float32", "float64")


@pytest.fixture(scope="module")
def typed(tmp_path_factory) -> str:
    columns = {f"c_{name}": name for name in NUMERIC}
    columns.update({"id": "int", "fixed": "ndarray:int16:3", "grid": "ndarray:float32:2,3", "s": "str", "b": "bytes"})

    def sample(i: int) -> dict:
        out = {f"c_{name}": (i if name == "int" else np.dtype(name).type(i % 100)) for name in NUMERIC}
        out.update({"id": i, "fixed": np.arange(3, dtype=np.int16) * i,
                    "grid": np.arange(6, dtype=np.float32).reshape(2, 3) + i, "s": "é" * (i % 4),
                    "b": b"\x00" * (i % 3)})
        return out

    return write_dataset(tmp_path_factory.mktemp("torch") / "typed", columns, map(sample, range(30)), size_limit=900)


def _same_batches(a, b) -> None:
    assert a.keys() == b.keys()
    for key in a:
        x, y = a[key], b[key]
        if isinstance(y, torch.Tensor):
            assert isinstance(x, torch.Tensor), key
            assert x.dtype == y.dtype and x.shape == y.shape and torch.equal(x, y), key
        else:
            assert type(x) is type(y) and x == y, key


@pytest.mark.parametrize("num_workers", [0, 2])
def test_batch_path_gives_what_default_collate_gives(typed, num_workers):
    ctx = "fork" if num_workers else None
    fast = StreamingDataLoader(make(typed), batch_size=BS, num_workers=num_workers, multiprocessing_context=ctx)
    slow = StreamingDataLoader(make(typed), batch_size=BS, num_workers=num_workers, batch_decode=False,
                               multiprocessing_context=ctx)
    assert fast.batch_decode and not slow.batch_decode
    pairs = list(zip(fast, slow, strict=True))
    assert len(pairs) == len(fast) == 8
    for a, b in pairs:
        _same_batches(a, b)
    assert pairs[0][0]["grid"].shape == (BS, 2, 3) and pairs[0][0]["c_float16"].dtype == torch.float16


def test_batch_path_with_columns(ragged):
    ds = make(ragged)
    loader = StreamingDataLoader(ds, batch_size=BS, num_workers=2, columns=["id", "x"], multiprocessing_context="fork")
    assert loader.batch_decode
    batches = list(loader)
    assert all(set(b) == {"id", "x"} for b in batches)
    got = [int(i) for b in batches for i in b["id"]]
    assert got == reference(ragged)[0]
    for b in batches:
        assert torch.equal(b["x"], b["id"].to(torch.uint8)[:, None].expand(BS, 4))


def test_variable_length_column_of_equal_rows_is_padded_with_lengths(tmp_path):
    # equal lengths, so default_collate could stack them; the column is still variable-length
    samples = [{"id": i, "tokens": np.full(3, i, np.int32)} for i in range(16)]
    path = write_dataset(tmp_path / "ds", {"id": "int", "tokens": "ndarray:int32"}, samples, size_limit=200)
    loader = StreamingDataLoader(make(path), batch_size=BS, num_workers=2, multiprocessing_context="fork")
    assert loader.batch_decode is True
    batches = list(loader)
    assert all(isinstance(b["tokens"], torch.Tensor) and b["tokens"].shape == (BS, 3) for b in batches)
    assert all(torch.equal(b["tokens_lengths"], torch.full((BS,), 3)) for b in batches)
    assert [int(i) for b in batches for i in b["id"]] == reference(path)[0]
    for b in batches:
        assert torch.equal(b["tokens"], b["id"].to(torch.int32)[:, None].expand(BS, 3))


class ShoutingIds(StreamingDataset):
    """A subclass that transforms samples in ``__getitem__``."""

    def __getitem__(self, key):
        sample = super().__getitem__(key)
        return {**sample, "shout": sample["id"] * 1000}


class ShoutingByGetItem(StreamingDataset):
    """A subclass that transforms samples in ``get_item`` (mosaicml-streaming's hook)."""

    def get_item(self, sample_id, retry=7):
        sample = super().get_item(sample_id, retry)
        return {**sample, "shout": sample["id"] * 1000}


@pytest.mark.parametrize("cls", [ShoutingIds, ShoutingByGetItem])
def test_overridden_getitem_falls_back_to_per_sample_through_it(plain, cls):
    ds = cls(local=plain, batch_size=BS, shuffle=True, shuffle_seed=SEED)
    loader = StreamingDataLoader(ds, batch_size=BS, num_workers=2, multiprocessing_context="fork")
    assert loader.batch_decode is False
    batches = list(loader)
    assert [int(i) for b in batches for i in b["id"]] == reference(plain)[0]
    for b in batches:
        assert torch.equal(b["shout"], b["id"] * 1000)


def test_forced_batch_decode_gives_ragged_tensors(ragged):
    ds = make(ragged)
    loader = StreamingDataLoader(ds, batch_size=BS, num_workers=2, batch_decode=True, ragged="ragged",
                                 multiprocessing_context="fork")
    batches = list(loader)
    rows = {}
    for b in batches:
        tokens = b["tokens"]
        assert isinstance(tokens, Ragged)
        assert isinstance(tokens.values, torch.Tensor) and tokens.values.dtype == torch.int32
        assert isinstance(tokens.offsets, torch.Tensor) and len(tokens) == BS
        for i, k in zip(ids(b), range(BS)):
            rows[i] = tokens.values[tokens.offsets[k]:tokens.offsets[k + 1]].numpy()
    assert [i for b in batches for i in ids(b)] == reference(ragged)[0]
    plain = StreamingDataset(local=ragged)
    for i, row in rows.items():
        np.testing.assert_array_equal(row, plain[i]["tokens"])


def _ids_only(samples):
    return [s["id"] for s in samples]


def _column_ids(batch):
    assert isinstance(batch["id"], np.ndarray)  # the numpy column batch, not tensors
    return batch["id"].tolist()


@pytest.mark.parametrize("batch_decode,collate", [(None, _ids_only), (False, _ids_only), (True, _column_ids)])
def test_user_collate_fn(plain, batch_decode, collate):
    loader = StreamingDataLoader(make(plain), batch_size=BS, num_workers=2, collate_fn=collate,
                                 batch_decode=batch_decode, multiprocessing_context="fork")
    assert loader.batch_decode is (batch_decode is True)  # a collate_fn turns the default off
    batches = list(loader)
    assert all(isinstance(b, list) and len(b) == BS for b in batches)
    assert [i for b in batches for i in b] == reference(plain)[0]


@pytest.mark.parametrize("batch_decode", [None, False])
def test_pin_memory_on_cpu(plain, batch_decode):
    loader = StreamingDataLoader(make(plain), batch_size=BS, num_workers=2, pin_memory=True,
                                 batch_decode=batch_decode, multiprocessing_context="fork")
    batches = list(loader)
    assert [i for b in batches for i in ids(b)] == reference(plain)[0]
    assert all(isinstance(b["x"], torch.Tensor) and b["x"].shape == (BS, 4) for b in batches)


# -- state: what the loop consumed ----------------------------------------------------------------

@pytest.mark.parametrize("batch_decode", [None, False])
@pytest.mark.parametrize("persistent", [False, True])
def test_state_counts_consumed_batches_and_resumes(plain, batch_decode, persistent):
    ds = make(plain)
    loader = StreamingDataLoader(ds, batch_size=BS, num_workers=2, prefetch_factor=4, persistent_workers=persistent,
                                 batch_decode=batch_decode, multiprocessing_context="fork")
    full = reference(plain, 2)
    k = 3
    before = take(loader, k)
    time.sleep(0.2)  # let the workers prefetch well past the k batches
    state = loader.state_dict()
    assert (state["epoch"], state["sample_in_epoch"]) == (0, k * BS)
    assert loader.state_dict() == state  # asking twice changes nothing
    # the same loader and dataset objects continue exactly where the loop stopped
    loader.load_state_dict(state)
    assert loader.state_dict()["sample_in_epoch"] == k * BS
    rest = run_epoch(loader)
    assert before + rest == full[0]
    assert run_epoch(loader) == full[1]
    # a new loader with another number of workers continues the same way
    for workers in (0, 3):
        other = StreamingDataLoader(make(plain), batch_size=BS, num_workers=workers, batch_decode=batch_decode,
                                    multiprocessing_context="fork" if workers else None)
        other.load_state_dict(state)
        assert before + run_epoch(other) == full[0]
        assert run_epoch(other) == full[1]


def test_state_of_a_resumed_pass_counts_from_the_resume_point(plain):
    full = reference(plain)[0]
    loader = StreamingDataLoader(make(plain), batch_size=BS, num_workers=2, multiprocessing_context="fork")
    first = take(loader, 2)
    loader.load_state_dict(loader.state_dict())
    second = take(loader, 3)
    state = loader.state_dict()
    assert state["sample_in_epoch"] == 5 * BS
    other = StreamingDataLoader(make(plain), batch_size=BS, num_workers=1, multiprocessing_context="fork")
    other.load_state_dict(state)
    assert first + second + run_epoch(other) == full


@pytest.mark.parametrize("batch_decode", [None, False])
@pytest.mark.parametrize("workers", [0, 2])
def test_a_state_saved_inside_a_step_resumes_there_through_the_loader(plain, batch_decode, workers):
    """A per-sample loop saves after 4*BS + 1 samples; the loader reads the rest of that step as its first,
    short batch, then whole steps: the epoch is the uninterrupted one, and so is one resumed from its state."""
    full = reference(plain, 2)
    ds = make(plain)
    it = ds.iterate(World())
    before = [next(it)["id"] for _ in range(4 * BS + 1)]
    state = ds.state_dict()
    kw = {"multiprocessing_context": "fork"} if workers else {}
    loader = StreamingDataLoader(make(plain), batch_size=BS, num_workers=workers, batch_decode=batch_decode,
                                 drop_last=True, **kw)  # the short first batch is not a short last one
    loader.load_state_dict(state)
    assert len(loader) == len(full[0]) // BS - 4
    sizes, got = [], []
    for j, batch in enumerate(loader):
        sizes.append(len(ids(batch)))
        got.extend(ids(batch))
        if j == 2:
            mid = loader.state_dict()
    assert sizes == [BS - 1] + [BS] * (len(full[0]) // BS - 5)
    assert before + got == full[0]
    assert mid["sample_in_epoch"] == 7 * BS  # the end of the third step read
    other = StreamingDataLoader(make(plain), batch_size=BS, num_workers=workers, batch_decode=batch_decode, **kw)
    other.load_state_dict(mid)
    assert before + got[:2 * BS + BS - 1] + run_epoch(other) == full[0]
    assert run_epoch(other) == full[1]


@pytest.mark.parametrize("workers", [0, 2])
def test_a_state_saved_inside_a_step_gives_every_rank_the_same_number_of_batches(plain, workers, monkeypatch):
    """A one-rank loop of global batch 2*BS saves inside a step; two ranks of BS resume it. The rest of that
    step is cut evenly between them, so both get the same number of batches (a collective per step would
    hang otherwise), and together they read the rest of the epoch once."""
    g = 2 * BS
    full = reference(plain, batch_size=g)[0]
    kw = {"multiprocessing_context": "fork"} if workers else {}
    for k in (1, g // 2 - 1, g // 2, g // 2 + 1, 3 * g + g - 2, 5 * g + 3):
        ds = make(plain, batch_size=g)
        it = ds.iterate(World())
        before = [next(it)["id"] for _ in range(k)]
        state = ds.state_dict()
        counts, got = [], []
        for rank in range(2):
            monkeypatch.setenv("RANK", str(rank))
            monkeypatch.setenv("LOCAL_RANK", str(rank))
            for name in ("WORLD_SIZE", "LOCAL_WORLD_SIZE"):
                monkeypatch.setenv(name, "2")
            loader = StreamingDataLoader(make(plain), batch_size=BS, num_workers=workers, **kw)
            loader.load_state_dict(state)
            expected = len(loader)
            batches = [ids(b) for b in loader]
            assert len(batches) == expected, (k, rank)
            counts.append(len(batches))
            got += [i for b in batches for i in b]
        assert counts[0] == counts[1], (k, counts)
        assert before == full[:k] and sorted(got) == sorted(full[k:]), k


def test_state_at_the_end_of_an_epoch_resumes_at_the_next(plain):
    loader = StreamingDataLoader(make(plain), batch_size=BS, num_workers=2, multiprocessing_context="fork")
    ref = reference(plain, 2)
    assert run_epoch(loader) == ref[0]
    state = loader.state_dict()
    other = StreamingDataLoader(make(plain), batch_size=BS, num_workers=2, multiprocessing_context="fork")
    other.load_state_dict(state)
    assert run_epoch(other) == ref[1]


def test_persistent_workers_honour_load_state_dict_between_epochs(plain):
    ds = make(plain)
    loader = StreamingDataLoader(ds, batch_size=BS, num_workers=2, persistent_workers=True,
                                 multiprocessing_context="fork")
    ref = reference(plain, 3)
    head = take(loader, 4)
    state = loader.state_dict()
    assert run_epoch(loader) == ref[1]  # the workers go on to the next epoch
    first_workers = [w.pid for w in loader._iterator._workers]
    loader.load_state_dict(state)  # back to epoch 0, batch 4: the workers must be restarted
    assert head + run_epoch(loader) == ref[0]
    assert [w.pid for w in loader._iterator._workers] != first_workers
    assert run_epoch(loader) == ref[1]
    ds.set_epoch(0)  # set_epoch between epochs is honoured too
    assert run_epoch(loader) == ref[0]
    ds.set_epoch(2)
    assert run_epoch(loader) == ref[2]


def test_persistent_workers_after_an_unfinished_epoch(plain):
    loader = StreamingDataLoader(make(plain), batch_size=BS, num_workers=2, persistent_workers=True,
                                 prefetch_factor=4, multiprocessing_context="fork")
    ref = reference(plain, 2)
    assert take(loader, 2) == ref[0][:2 * BS]
    assert run_epoch(loader) == ref[1]  # breaking off epoch 0 leaves no batch of it behind


# -- errors ------------------------------------------------------------------------------------------

def test_bad_arguments(plain):
    ds = make(plain)
    with pytest.raises(InvalidArgumentError, match="batch_size"):
        StreamingDataLoader(ds, batch_size=BS * 2)
    for bad in (0, -1, True, 2.0, None):
        with pytest.raises(InvalidArgumentError):
            StreamingDataLoader(make(plain, batch_size=None), batch_size=bad)
    with pytest.raises(InvalidArgumentError, match="shuffle"):
        StreamingDataLoader(ds, batch_size=BS, shuffle=True)
    with pytest.raises(InvalidArgumentError, match="sampler"):
        StreamingDataLoader(ds, batch_size=BS, sampler=range(N))
    with pytest.raises(InvalidArgumentError, match="batch_sampler"):
        StreamingDataLoader(ds, batch_size=BS, batch_sampler=[[0, 1, 2, 3]])
    with pytest.raises(InvalidArgumentError, match="in_order"):
        StreamingDataLoader(ds, batch_size=BS, in_order=False)
    for other in (list(range(8)), torch.utils.data.TensorDataset(torch.arange(8))):
        with pytest.raises(InvalidArgumentError, match="StreamingDataset"):
            StreamingDataLoader(other, batch_size=BS)
    # shuffle=False is what the loader does anyway
    assert run_epoch(StreamingDataLoader(ds, batch_size=BS, shuffle=False)) == reference(plain)[0]


class FailsAtFive(StreamingDataset):
    def __getitem__(self, key):
        sample = super().__getitem__(key)
        if sample["id"] == 5:
            raise ValueError("cannot transform sample 5")
        return sample


class KilledAtNine(StreamingDataset):
    def __getitem__(self, key):
        sample = super().__getitem__(key)
        if sample["id"] == 9 and torch.utils.data.get_worker_info() is not None:
            os.kill(os.getpid(), signal.SIGKILL)
        return sample


# After a worker error, torch takes up to 5 s to stop non-persistent workers (it also does so
# for its own datasets); the tests below mostly use persistent workers, which stop at once.

@pytest.mark.parametrize("num_workers,persistent", [(0, False), (1, False), (2, True)])
def test_an_error_in_getitem_reaches_the_loop(plain, num_workers, persistent):
    ds = FailsAtFive(local=plain, batch_size=BS)
    loader = StreamingDataLoader(ds, batch_size=BS, num_workers=num_workers, persistent_workers=persistent,
                                 multiprocessing_context="fork" if num_workers else None)
    with deadline(20):
        kind, message = error_of(loader)
    assert issubclass(kind, ValueError) and "cannot transform sample 5" in message
    del loader


@pytest.mark.parametrize("batch_decode", [True, False])
def test_a_corrupt_shard_is_reported_by_the_loop(plain, tmp_path, batch_decode):
    import shutil

    path = shutil.copytree(plain, str(tmp_path / "ds"))
    ds = StreamingDataset(local=path, batch_size=BS)
    shard = ds.shards[1].raw_data.basename
    with open(os.path.join(path, shard), "r+b") as f:  # the header's sample count
        f.write(b"\xff\xff\x00\x00")
    loader = StreamingDataLoader(ds, batch_size=BS, num_workers=2, batch_decode=batch_decode,
                                 persistent_workers=True, multiprocessing_context="fork")
    with deadline(20):
        kind, message = error_of(loader)
    assert issubclass(kind, CorruptShardError), (kind, message)
    assert shard in message
    del loader


def test_a_killed_worker_raises_promptly(plain):
    loader = StreamingDataLoader(KilledAtNine(local=plain, batch_size=BS), batch_size=BS, num_workers=2,
                                 multiprocessing_context="fork")
    started = time.monotonic()
    with deadline(30):
        kind, message = error_of(loader)
    assert issubclass(kind, RuntimeError) and "exited unexpectedly" in message, (kind, message)
    assert time.monotonic() - started < 20
    # a new loader works afterwards
    loader = StreamingDataLoader(make(plain), batch_size=BS, num_workers=2, multiprocessing_context="fork")
    assert run_epoch(loader) == reference(plain)[0]


# -- several loaders at once ---------------------------------------------------------------------

def test_two_datasets_on_one_directory_at_the_same_time(plain):
    a = StreamingDataLoader(make(plain), batch_size=BS, num_workers=2, multiprocessing_context="fork")
    b = StreamingDataLoader(make(plain, shuffle_seed=SEED + 1), batch_size=BS, num_workers=2,
                            persistent_workers=True, batch_decode=False, multiprocessing_context="fork")
    got_a, got_b = [], []
    for batch_a, batch_b in zip(a, b, strict=True):
        got_a.extend(ids(batch_a))
        got_b.extend(ids(batch_b))
    assert got_a == reference(plain)[0]
    assert got_b == reference(plain, shuffle_seed=SEED + 1)[0]


def test_two_loaders_share_a_cache_directory(plain, tmp_path):
    from shardstream.format.atomic import TMP_PREFIX

    before = set(multiprocessing.active_children())
    cache = str(tmp_path / "cache")
    first = StreamingDataset(remote=plain, local=cache, batch_size=BS, shuffle=True, shuffle_seed=SEED)
    second = StreamingDataset(remote=plain, local=cache, batch_size=BS, shuffle=True, shuffle_seed=SEED,
                              cache_limit="4kb")
    a = StreamingDataLoader(first, batch_size=BS, num_workers=2, multiprocessing_context="fork")
    b = StreamingDataLoader(second, batch_size=BS, num_workers=2, batch_decode=False, multiprocessing_context="fork")
    ref = reference(plain, 2)
    for epoch in range(2):
        ia, ib = iter(a), iter(b)
        got_a, got_b = [], []
        for batch_a, batch_b in zip(ia, ib, strict=True):
            got_a.extend(ids(batch_a))
            got_b.extend(ids(batch_b))
        del ia, ib
        assert got_a == ref[epoch] and got_b == ref[epoch]
    gc.collect()
    assert set(multiprocessing.active_children()) <= before  # every worker has exited
    assert not [n for n in os.listdir(cache) if n.startswith(TMP_PREFIX)]


def test_nothing_is_left_running_after_a_pass(plain):
    before = set(multiprocessing.active_children())  # workers of other tests' loaders, if any
    loader = StreamingDataLoader(make(plain), batch_size=BS, num_workers=2, multiprocessing_context="fork")
    assert run_epoch(loader) == reference(plain)[0]
    gc.collect()
    assert set(multiprocessing.active_children()) <= before
    take(loader, 2)  # an unfinished pass: its workers end once the iterator is dropped
    gc.collect()
    deadline_at = time.monotonic() + 10
    while set(multiprocessing.active_children()) - before and time.monotonic() < deadline_at:
        time.sleep(0.05)
    assert set(multiprocessing.active_children()) <= before


def test_world_of_the_main_process_is_kept_by_its_workers(plain):
    w = World(num_nodes=2, node=1)
    ds = make(plain, batch_size=2, world=w)
    loader = StreamingDataLoader(ds, batch_size=2, num_workers=2, multiprocessing_context="fork")
    got = [int(i) for b in loader for i in b["id"]]
    ref = make(plain, batch_size=2)
    assert got == [s["id"] for s in ref.iterate(w)]
    state = loader.state_dict()
    assert state["sample_in_epoch"] == len(got) * 2  # global positions: both ranks' samples
