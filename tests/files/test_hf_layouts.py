"""Hugging Face dataset directories through the engine: ``save_to_disk`` output (written here with the real
``datasets``), directories laid out like Hub repositories (``push_to_hub``'s ``data/{split}-*``, subsets,
the ``refs/convert/parquet`` tree, split directories and names, a dataset card's ``configs:``), and
``hf://`` paths, with a local directory standing in for the Hub.

Rows are ``{"x": n, "split": name}`` with ``n`` counting up within each split, so a file read in the
wrong order or in the wrong split shows up as wrong data.
"""

from __future__ import annotations

import os

import pytest

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

from shardstream import SplitNotFoundError, StreamingDataset, load_dataset  # noqa: E402
from shardstream.errors import CorruptIndexError, InvalidArgumentError, NoFilesError  # noqa: E402
from shardstream.hub.layout import infer_layout, pattern_regex, split_of  # noqa: E402
from shardstream.hub.resolve import dataset_root, hub_url, locate  # noqa: E402
from shardstream.testing.resume import check_resumes_identically  # noqa: E402


def write_repo(root, files: dict) -> str:
    """``files``: relative name -> (split, first x, rows); Parquet unless the name says otherwise."""
    for name, (split, first, rows) in files.items():
        path = os.path.join(str(root), *name.split("/"))
        os.makedirs(os.path.dirname(path), exist_ok=True)
        t = pa.table({"x": list(range(first, first + rows)), "split": [split] * rows})
        if name.endswith(".arrow"):
            with pa.ipc.new_stream(path, t.schema) as w:
                w.write_table(t)
        else:
            pq.write_table(t, path, row_group_size=7)
    return str(root)


def xs(ds) -> list[int]:
    return [s["x"] for s in ds]


PUSHED = {f"data/train-{k:05d}-of-00003.parquet": ("train", 20 * k, 20) for k in range(3)}
PUSHED.update({"data/test-00000-of-00001.parquet": ("test", 0, 15), "README.md": None})


def pushed_repo(root) -> str:
    files = {k: v for k, v in PUSHED.items() if v}
    write_repo(root, files)
    with open(os.path.join(str(root), "README.md"), "w") as f:
        f.write("# a dataset card without configs\n")
    return str(root)


# -- the naming rules on their own ----------------------------------------------------------------

@pytest.mark.parametrize("name,in_subset,split", [
    ("data/train-00000-of-00003.parquet", False, "train"),
    ("data/train_sft-00001-of-00002-3f2a.parquet", False, "train_sft"),
    ("train-00000-of-00001.parquet", True, "train"),
    ("train/0000.parquet", True, "train"),
    ("partial-validation/0003.parquet", True, "validation"),
    ("my_split/0000.parquet", True, "my_split"),
    ("valid/a.jsonl", False, "validation"),
    ("data/dev.jsonl.zst", False, "validation"),
    ("eval_set.csv", False, "test"),
    ("interval.csv", False, "train"),
    ("notes/2024.parquet", False, "train"),
])
def test_split_of_a_file_name(name, in_subset, split):
    assert split_of(name, in_subset) == split


def test_inferred_subsets_and_splits():
    names = ["README.md", "en/train/0000.parquet", "en/train/0001.parquet", "en/partial-test/0000.parquet",
             "fr/train-00000-of-00001.parquet", ".gitattributes", "state_notes.txt.tmp"]
    layout = infer_layout(names)
    assert layout.subsets == {"en": {"train": ["en/train/0000.parquet", "en/train/0001.parquet"],
                                     "test": ["en/partial-test/0000.parquet"]},
                              "fr": {"train": ["fr/train-00000-of-00001.parquet"]}}
    assert layout.default is None
    with pytest.raises(SplitNotFoundError, match="several subsets \\(en, fr\\) and none is the default"):
        layout.subset(None)
    with pytest.raises(SplitNotFoundError, match="no split 'validation'; it has train, test"):
        layout.files("en", "validation")
    plain = infer_layout(["b.parquet", "a.parquet", "test.parquet"])
    assert plain.default == "default" and plain.subsets["default"] == {"train": ["a.parquet", "b.parquet"],
                                                                     "test": ["test.parquet"]}
    with pytest.raises(NoFilesError, match="holds no data files"):
        infer_layout(["README.md", "script.py"])


def test_glob_patterns_of_data_files():
    assert pattern_regex("data/train-*").match("data/train-00000-of-00001.parquet")
    assert not pattern_regex("data/*.parquet").match("data/sub/x.parquet")
    assert pattern_regex("data/**/*.parquet").match("data/sub/deeper/x.parquet")
    assert pattern_regex("**/*.parquet").match("x.parquet")
    not_t = pattern_regex("data/[!t]*.csv")
    assert not_t.match("data/a.csv") and not not_t.match("data/t.csv")


# -- save_to_disk ----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    datasets = pytest.importorskip("datasets")
    root = tmp_path_factory.mktemp("saved")
    train = datasets.Dataset.from_dict({"x": list(range(3000)), "split": ["train"] * 3000,
                                        "tokens": [[i, i + 1, i + 2] for i in range(3000)]})
    test = datasets.Dataset.from_dict({"x": list(range(40)), "split": ["test"] * 40,
                                       "tokens": [[i] for i in range(40)]})
    train.save_to_disk(str(root / "one"), num_shards=4)
    datasets.DatasetDict({"train": train, "test": test.select(range(5, 40))}).save_to_disk(str(root / "dict"))
    return root


def test_a_saved_dataset_reads_as_its_arrow_files_in_order(saved):
    located = locate(str(saved / "one"))
    assert located.layout.kind == "save_to_disk"
    assert located.layout.subsets == {"default": {"train": [f"data-{k:05d}-of-00004.arrow" for k in range(4)]}}
    ds = load_dataset(str(saved / "one"), split="train")
    assert isinstance(ds, StreamingDataset) and len(ds) == 3000
    got = list(ds)
    assert xs(got) == list(range(3000)) and all(s["tokens"].tolist() == [s["x"] + k for k in range(3)] for s in got)


def test_a_saved_dataset_dict_gives_its_splits(saved):
    splits = load_dataset(str(saved / "dict"), columns=["x", "split"])
    assert list(splits) == ["train", "test"]
    assert xs(splits["train"]) == list(range(3000))
    assert xs(splits["test"]) == list(range(5, 40))  # the selection, not the table it was selected from
    assert {s["split"] for s in splits["test"]} == {"test"} and splits["test"].column_names == ("x", "split")
    with pytest.raises(SplitNotFoundError, match="has no split 'validation'; it has train, test"):
        load_dataset(str(saved / "dict"), split="validation")


def test_a_damaged_save_to_disk_listing_is_refused(tmp_path):
    write_repo(tmp_path, {"data-00000-of-00001.arrow": ("train", 0, 3)})
    (tmp_path / "state.json").write_text('{"_data_files": "nope"}')
    with pytest.raises(CorruptIndexError, match="not a save_to_disk state.json"):
        load_dataset(str(tmp_path), split="train")
    (tmp_path / "state.json").write_text('{"_data_files": [{"filename": "../elsewhere.arrow"}]}')
    with pytest.raises(CorruptIndexError, match="not a file name in its directory"):
        load_dataset(str(tmp_path), split="train")


# -- Hub-style directories -------------------------------------------------------------------------

def test_push_to_hub_layout_with_its_shards_in_order(tmp_path):
    root = pushed_repo(tmp_path / "repo")
    splits = load_dataset(root)
    assert list(splits) == ["train", "test"]
    assert xs(splits["train"]) == list(range(60)) and xs(splits["test"]) == list(range(15))
    assert len(splits["train"].shards) == 9  # three files of row groups of 7, 7, 6


def test_subsets_and_the_parquet_conversion_tree(tmp_path):
    root = write_repo(tmp_path / "conv", {
        "en/train/0000.parquet": ("train", 0, 10), "en/train/0001.parquet": ("train", 10, 5),
        "en/partial-validation/0000.parquet": ("validation", 0, 4),
        "fr/train/0000.parquet": ("train", 100, 3),
    })
    assert xs(load_dataset(root, "en", split="train")) == list(range(15))
    assert xs(load_dataset(root, "en", split="validation")) == list(range(4))
    assert xs(load_dataset(root, name="fr", split="train")) == [100, 101, 102]
    with pytest.raises(SplitNotFoundError, match="several subsets \\(en, fr\\)"):
        load_dataset(root, split="train")
    with pytest.raises(SplitNotFoundError, match="no subset 'de'; it has en, fr"):
        load_dataset(root, "de", split="train")


def test_split_directories_and_split_names(tmp_path):
    root = write_repo(tmp_path / "dirs", {"train/a.parquet": ("train", 0, 5), "train/b.parquet": ("train", 5, 5),
                                          "valid/x.parquet": ("validation", 0, 2), "test.parquet": ("test", 0, 3)})
    splits = load_dataset(root)
    assert list(splits) == ["train", "validation", "test"] and xs(splits["train"]) == list(range(10))
    assert xs(load_dataset(root, data_dir="train", split="train")) == list(range(10))


def test_a_dataset_card_configs_are_the_truth(tmp_path):
    root = write_repo(tmp_path / "card", {
        "data/main/part-0.parquet": ("train", 0, 6), "data/main/part-1.parquet": ("train", 6, 6),
        "data/main/holdout.parquet": ("test", 0, 2), "extra/bits.parquet": ("train", 50, 3),
    })
    (tmp_path / "card" / "README.md").write_text(
        "---\nlicense: mit\nconfigs:\n- config_name: main\n  default: true\n  data_files:\n  - split: train\n"
        "    path: data/main/part-*\n  - split: test\n    path: [data/main/holdout.parquet]\n"
        "- config_name: extra\n  data_dir: extra\n---\n# card\n")
    located = locate(root)
    assert located.layout.kind == "configs" and located.layout.default == "main"
    assert xs(load_dataset(root, split="train")) == list(range(12))
    assert xs(load_dataset(root, split="test")) == [0, 1]
    assert xs(load_dataset(root, "extra", split="train")) == [50, 51, 52]
    (tmp_path / "card" / "README.md").write_text("---\nconfigs:\n- config_name: main\n  data_files: nothing/*\n---\n")
    with pytest.raises(NoFilesError, match="pattern 'nothing/\\*' matches no file"):
        load_dataset(root, split="train")


def test_data_files_relative_to_a_dataset_directory(tmp_path):
    root = pushed_repo(tmp_path / "repo")
    got = load_dataset(root, data_files={"a": "data/train-0000[01]-*", "b": ["data/test-*"]})
    assert list(got) == ["a", "b"] and xs(got["a"]) == list(range(40)) and xs(got["b"]) == list(range(15))


def test_layouts_read_as_datasets_reads_them(tmp_path, monkeypatch):
    """The real ``datasets.load_dataset(dir, streaming=True)`` on the same directories is the oracle."""
    datasets = pytest.importorskip("datasets")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    pushed = pushed_repo(tmp_path / "pushed")
    dirs = write_repo(tmp_path / "dirs", {"train/a.parquet": ("train", 0, 5), "train/b.parquet": ("train", 5, 5),
                                          "test/x.parquet": ("test", 0, 2)})
    for root, name in ((pushed, None), (dirs, None)):
        theirs = datasets.load_dataset(root, name, streaming=True)
        ours = load_dataset(root, name)
        assert sorted(ours) == sorted(theirs)
        for split in ours:
            assert [(s["x"], s["split"]) for s in ours[split]] == [(r["x"], r["split"]) for r in theirs[split]]


# -- hf:// paths, with a local directory standing in for the Hub ---------------------------------

@pytest.fixture
def local_hub(tmp_path, monkeypatch):
    """``hf://`` URLs served from ``tmp_path/hub`` (``hf://datasets/user/name`` is ``hub/datasets/user/name``)
    by an fsspec filesystem registered for the ``hf`` protocol in place of ``HfFileSystem``."""
    import importlib

    import fsspec
    from fsspec.implementations.dirfs import DirFileSystem

    hub = tmp_path / "hub"
    hub.mkdir()

    class LocalHub(DirFileSystem):
        protocol = "hf"
        async_impl = False  # HfFileSystem is synchronous too

        def __init__(self, **kwargs):
            super().__init__(path=str(hub), fs=fsspec.filesystem("file"), **kwargs)

    monkeypatch.setitem(importlib.import_module("fsspec.registry")._registry, "hf", LocalHub)
    return hub


def test_hub_ids_and_urls():
    assert hub_url("user/name") == "hf://datasets/user/name"
    assert hub_url("user/name", "refs/convert/parquet") == "hf://datasets/user/name@refs%2Fconvert%2Fparquet"
    assert dataset_root("user/name", "v1.0") == "hf://datasets/user/name@v1.0"
    assert dataset_root("hf://datasets/user/name", "main") == "hf://datasets/user/name@main"
    assert dataset_root("squad") == "hf://datasets/squad"
    with pytest.raises(InvalidArgumentError, match="revision='main' applies to a Hub dataset id"):
        dataset_root("s3://bucket/ds", "main")
    with pytest.raises(NoFilesError, match="neither a directory, a URL nor a Hub dataset id"):
        dataset_root("./no/such/dir")


def test_a_hub_id_reads_through_the_cache(local_hub, tmp_path):
    pushed_repo(local_hub / "datasets" / "user" / "name")
    write_repo(local_hub / "datasets" / "user" / "name@refs%2Fconvert%2Fparquet",
               {"default/train/0000.parquet": ("train", 0, 8), "default/train/0001.parquet": ("train", 8, 4)})
    ds = load_dataset("user/name", split="train", cache_dir=str(tmp_path / "cache"), batch_size=4)
    assert ds.remote.startswith("hf://datasets/user/name/data") and xs(ds) == list(range(60))
    (cache,) = os.listdir(tmp_path / "cache")  # one directory per split's files
    assert sorted(os.listdir(tmp_path / "cache" / cache))[1:4] == [f"train-00000-of-00003.parquet.{k:05d}.piece"
                                                                   for k in range(3)]
    converted = load_dataset("user/name", split="train", revision="refs/convert/parquet")
    assert xs(converted) == list(range(12))
    report = check_resumes_identically(
        lambda bs: load_dataset("hf://datasets/user/name", split="train", batch_size=bs, shuffle=True), 8,
        [(1, 1, 0), (1, 2, 0)], steps=[0, 3])
    assert report.samples_compared > 0


CARD_CHILD = """
import resource, sys
resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))
from shardstream import load_dataset
from shardstream.errors import CorruptIndexError
try:
    load_dataset(sys.argv[1], split="train")
    print("accepted")
except CorruptIndexError as exc:
    print("CorruptIndexError", exc)
"""


def test_a_dataset_card_whose_aliases_stand_for_a_billion_values_is_refused(tmp_path):
    pytest.importorskip("yaml")
    import subprocess
    import sys

    root = write_repo(tmp_path / "card", {"data/train-0.parquet": ("train", 0, 3)})
    levels = ['  k0: &a0 ["data/*", "data/*", "data/*", "data/*", "data/*", "data/*", "data/*", "data/*", '
              '"data/*", "data/*"]']
    levels += [f"  k{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, 9)]
    card = "---\nbombs:\n" + "\n".join(levels) + "\nconfigs:\n- config_name: main\n  data_files: *a8\n---\n"
    (tmp_path / "card" / "README.md").write_text(card)
    assert len(card) < 1024
    try:  # limited to 2 GiB and 60 s: an unbounded expansion fails the test, not the machine
        done = subprocess.run([sys.executable, "-c", CARD_CHILD, root], capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail("reading the dataset card ran past the 60 s guard")
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith("CorruptIndexError") and "more than 100,000 values" in done.stdout, done.stdout
    assert "README.md" in done.stdout
