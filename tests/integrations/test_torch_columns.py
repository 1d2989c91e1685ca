"""StreamingDataLoader without a collate_fn: every column type gives a batch, in one form on every
path (variable-length arrays padded with their lengths, images and other values as lists), and
``columns=`` decodes only the columns named, also on the per-sample path."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from shardstream import InvalidArgumentError, Ragged, StreamingDataset  # noqa: E402
from shardstream.integrations.torch import StreamingDataLoader  # noqa: E402
from shardstream.testing import write_dataset  # noqa: E402

pytestmark = [pytest.mark.filterwarnings("ignore:The given NumPy array is not writable:UserWarning")]

BS = 4
N = 30


def _sample(i: int) -> dict:
    return {"id": i, "tokens": np.arange(i % 7 + 1, dtype=np.int32) + i, "text": f"t{i}",
            "meta": {"i": i}, "grid": np.full((i % 2 + 1, 2), i, np.int16)}


@pytest.fixture(scope="module")
def varied(tmp_path_factory) -> str:
    columns = {"id": "int", "tokens": "ndarray:int32", "text": "str", "meta": "json", "grid": "ndarray:int16"}
    return write_dataset(tmp_path_factory.mktemp("cols") / "varied", columns, map(_sample, range(N)), size_limit=400)


def make(path: str, cls=StreamingDataset) -> StreamingDataset:
    return cls(local=path, batch_size=BS, shuffle=True, shuffle_seed=5)


def _same(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for key in a:
        x, y = a[key], b[key]
        if isinstance(x, torch.Tensor):
            assert isinstance(y, torch.Tensor) and x.dtype == y.dtype and torch.equal(x, y), key
        elif key == "grid":
            assert len(x) == len(y) and all(torch.equal(p, q) for p, q in zip(x, y)), key
        else:
            assert x == y, key


@pytest.mark.parametrize("num_workers", [0, 2])
def test_variable_length_and_other_columns_batch_alike_on_every_path(varied, num_workers):
    ctx = "fork" if num_workers else None
    loaders = [StreamingDataLoader(make(varied), batch_size=BS, num_workers=num_workers, batch_decode=bd,
                                   multiprocessing_context=ctx) for bd in (None, True, False)]
    assert [loader.batch_decode for loader in loaders] == [True, True, False]
    runs = [list(loader) for loader in loaders]
    assert len(runs[0]) == len(loaders[0]) == -(-N // BS)
    for batches in runs[1:]:
        for a, b in zip(runs[0], batches, strict=True):
            _same(a, b)
    whole = StreamingDataset(local=varied)
    for batch in runs[0]:
        ids = batch["id"].tolist()
        lengths = batch["tokens_lengths"]
        assert lengths.dtype == torch.int64 and lengths.tolist() == [i % 7 + 1 for i in ids]
        assert batch["tokens"].shape == (BS, max(lengths.tolist())) and batch["tokens"].dtype == torch.int32
        for row, i, n in zip(batch["tokens"], ids, lengths.tolist()):
            assert row[:n].tolist() == whole[i]["tokens"].tolist() and not row[n:].any()
        assert batch["text"] == [f"t{i}" for i in ids] and batch["meta"] == [{"i": i} for i in ids]
        assert [tuple(g.shape) for g in batch["grid"]] == [(i % 2 + 1, 2) for i in ids]  # rows of 2-D arrays


def test_ragged_form_gives_ragged_tensors_on_the_per_sample_path(varied):
    loader = StreamingDataLoader(make(varied), batch_size=BS, batch_decode=False, ragged="ragged",
                                 columns=["id", "tokens"])
    for batch in loader:
        tokens = batch["tokens"]
        assert isinstance(tokens, Ragged) and isinstance(tokens.values, torch.Tensor)
        assert [len(tokens[k]) for k in range(BS)] == [i % 7 + 1 for i in batch["id"].tolist()]


def test_images_arrive_as_lists_of_pil_images(tmp_path):
    image = pytest.importorskip("PIL.Image")
    samples = ({"id": i, "img": image.new("RGB", (4 + i % 3, 4), (i, 0, 0))} for i in range(12))
    path = write_dataset(tmp_path / "img", {"id": "int", "img": "png"}, samples, size_limit=400)
    for bd in (None, False):
        for batch in StreamingDataLoader(make(path), batch_size=BS, batch_decode=bd):
            assert all(isinstance(img, image.Image) for img in batch["img"])
            assert [img.size for img in batch["img"]] == [(4 + i % 3, 4) for i in batch["id"].tolist()]


@pytest.fixture(scope="module")
def undecodable(tmp_path_factory) -> str:
    # a jpeg column holding bytes that are no image: decoding it raises
    samples = ({"id": i, "x": np.full(2, i, np.uint8), "img": b"not a jpeg"} for i in range(N))
    return write_dataset(tmp_path_factory.mktemp("cols") / "undecodable", {"id": "int", "x": "ndarray:uint8:2",
                                                                           "img": "jpeg"}, samples, size_limit=400)


class Doubled(StreamingDataset):
    """A subclass that makes its own samples."""

    def get_item(self, sample_id, retry=7):
        sample = super().get_item(sample_id, retry)
        return {"id": sample["id"] * 2, "x": sample["x"], "img": sample["img"]}


@pytest.mark.parametrize("batch_decode", [None, True, False])
@pytest.mark.parametrize("num_workers", [0, 2])
def test_columns_decode_only_those_columns_on_every_path(undecodable, batch_decode, num_workers):
    loader = StreamingDataLoader(make(undecodable), batch_size=BS, num_workers=num_workers, batch_decode=batch_decode,
                                 columns=["id", "x"], multiprocessing_context="fork" if num_workers else None)
    batches = list(loader)
    assert batches and all(set(b) == {"id", "x"} for b in batches)
    ids = [i for b in batches for i in b["id"].tolist()]
    assert ids == [s["id"] for s in make(undecodable).iterate(columns=["id"])]
    for b in batches:
        assert torch.equal(b["x"], b["id"].to(torch.uint8)[:, None].expand(BS, 2))


def test_columns_keep_those_keys_of_a_subclass_samples(tmp_path):
    samples = ({"id": i, "x": np.full(2, i, np.uint8), "img": b"raw"} for i in range(N))
    columns = {"id": "int", "x": "ndarray:uint8:2", "img": "bytes"}
    path = write_dataset(tmp_path / "raw", columns, samples, size_limit=400)
    loader = StreamingDataLoader(make(path, Doubled), batch_size=BS, columns=["id"])
    assert loader.batch_decode is False
    got = [i for b in loader for i in b["id"].tolist()]
    assert set(next(iter(loader))) == {"id"}
    assert got == [2 * s["id"] for s in make(path).iterate(columns=["id"])]


def test_iterate_with_columns_skips_the_others(undecodable):
    ds = make(undecodable)
    assert all(set(s) == {"id", "x"} for s in ds.iterate(columns=["id", "x"]))
    with pytest.raises(InvalidArgumentError, match="are not in this dataset"):
        ds.iterate(columns=["id", "nope"])
    with pytest.raises(InvalidArgumentError, match="must be a list of column names"):
        ds.iterate(columns="id")


def test_a_lengths_key_that_is_a_column_is_refused(tmp_path):
    samples = ({"tokens": np.arange(i + 1, dtype=np.int32), "tokens_lengths": i} for i in range(8))
    columns = {"tokens": "ndarray:int32", "tokens_lengths": "int"}
    path = write_dataset(tmp_path / "clash", columns, samples, size_limit=400)
    with pytest.raises(InvalidArgumentError, match="'tokens_lengths', which is a column of the dataset"):
        StreamingDataLoader(make(path), batch_size=BS)
    loader = StreamingDataLoader(make(path), batch_size=BS, ragged="ragged")
    assert isinstance(next(iter(loader))["tokens"], Ragged)
    with pytest.raises(InvalidArgumentError, match="ragged='padded' is not one of 'pad', 'ragged'"):
        StreamingDataLoader(make(path), batch_size=BS, ragged="padded")


def test_adopting_the_loaders_batch_size_says_so(varied):
    ds = StreamingDataset(local=varied, shuffle=True)
    with pytest.warns(UserWarning, match="built without batch_size, so it takes the loader's batch_size=4") as rec:
        loader = StreamingDataLoader(ds, batch_size=BS)
    assert f"an epoch of {N} samples is read as 32" in str(rec[0].message)
    assert sum(len(b["id"]) for b in loader) == 32
