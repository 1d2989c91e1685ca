"""A processing chain is a ``torch.utils.data.IterableDataset``: a plain DataLoader reads it, with or without
workers, each worker its own share (registered lazily: ``import shardstream`` still imports no torch)."""

from __future__ import annotations

import collections
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

import shardstream as ss  # noqa: E402


def shout(batch):
    return {"loud": [t.upper() for t in batch["text"]]}


def keep(row):
    return row["id"] % 5 != 0


def make(jsonl_dir):
    root = ss.StreamingDataset(local=jsonl_dir, shuffle=True, shuffle_seed=3)
    return root.shuffle(seed=2, buffer_size=40).map(shout, batched=True, batch_size=9).filter(keep)


def test_a_chain_is_a_torch_iterable_dataset(jsonl_dir):
    chain = make(jsonl_dir)
    assert isinstance(chain, torch.utils.data.IterableDataset)
    assert isinstance(chain.batch(4).with_format("torch"), torch.utils.data.IterableDataset)


def test_a_chain_registers_before_torch_is_imported(jsonl_dir):
    code = ("import sys, shardstream as ss\n"
            f"chain = ss.StreamingDataset(local={jsonl_dir!r}).map(lambda r: r)\n"
            "assert 'torch' not in sys.modules, 'building a chain imported torch'\n"
            "import torch.utils.data\n"
            "print(isinstance(chain, torch.utils.data.IterableDataset))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "True"


@pytest.mark.parametrize("workers", [0, 1, 2])
@pytest.mark.parametrize("batching", ["none", "collated", "chain"])
def test_a_plain_dataloader_reads_each_item_once(jsonl_dir, workers, batching):
    want = collections.Counter(row["id"] for row in make(jsonl_dir))
    assert sum(want.values()) == 480  # 600 rows, a fifth filtered out
    if batching == "none":
        loader = torch.utils.data.DataLoader(make(jsonl_dir), batch_size=None, num_workers=workers)
        got = [int(row["id"]) for row in loader]
        assert all(isinstance(row["loud"], str) for row in loader)
    elif batching == "collated":  # torch's default_collate over the chain's rows
        loader = torch.utils.data.DataLoader(make(jsonl_dir), batch_size=8, num_workers=workers)
        got = [i for batch in loader for i in batch["id"].tolist()]
    else:  # the chain makes the batches
        loader = torch.utils.data.DataLoader(make(jsonl_dir).batch(8), batch_size=None, num_workers=workers)
        batches = list(loader)
        assert all(len(b["id"]) == 8 for b in batches[:-workers or None])
        got = [i for b in batches for i in b["id"]]
    assert collections.Counter(got) == want
    if workers == 0:  # one reader: the chain's own order
        assert got == [row["id"] for row in make(jsonl_dir)]
