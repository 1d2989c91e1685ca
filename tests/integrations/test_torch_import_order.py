"""A dataset built before ``import torch`` is still an IterableDataset to torch: a plain DataLoader
reads this rank's share of the shuffled plan, whatever the order of the imports."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytest.importorskip("torch")

# Runs in a fresh interpreter: shardstream first, datasets built, and only then torch.
SCRIPT = """
import sys
from shardstream import MDSWriter, StreamingDataset, World

with MDSWriter(out="data", columns={"id": "int"}, size_limit=200) as writer:
    for i in range(50):
        writer.write({"id": i})

class Transformed(StreamingDataset):
    def __getitem__(self, key):
        return {"id": super().__getitem__(key)["id"] * 10}

ds = StreamingDataset(local="data", shuffle=True, batch_size=4)
sub = Transformed(local="data", shuffle=True, batch_size=4)
assert "torch" not in sys.modules, "shardstream must not import torch"

import torch
from torch.utils.data import DataLoader, IterableDataset

assert isinstance(ds, IterableDataset) and isinstance(sub, IterableDataset)
expected = [s["id"] for s in StreamingDataset(local="data", shuffle=True, batch_size=4,
                                              world=World(ranks_per_node=2, local_rank=1))]
assert expected != sorted(expected)
got = [int(i) for batch in DataLoader(ds, batch_size=4) for i in batch["id"]]
assert got == expected, (got, expected)
got = [int(i) for batch in DataLoader(sub, batch_size=4) for i in batch["id"]]
assert got == [i * 10 for i in expected], got
print("ok")
"""


def test_dataset_built_before_torch_is_imported_reads_its_rank_share(tmp_path):
    env = {**os.environ, "RANK": "1", "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2"}
    proc = subprocess.run([sys.executable, "-c", SCRIPT], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-4000:]
