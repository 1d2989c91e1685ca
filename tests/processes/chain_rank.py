"""One rank of a job reading a processing chain through a StreamingDataLoader with workers.

    python chain_rank.py '<json config>'

The rank joins a gloo group over ``tcp://`` (``rank``, ``world_size``, ``port``), reads the
chain of :func:`make` over ``data`` (``steps`` batches, or all), checks at every step that the
ranks are at the same step (one all_reduce), then gathers every rank's ``state_dict()`` with
``all_gather_object``. It writes ``<out>/rank<r>.json``: the ids of each batch it received and
the list of all ranks' states. ``resume`` names such a list to load first.
"""

from __future__ import annotations

import datetime
import json
import os
import sys

import numpy as np
import torch
import torch.distributed as dist

import shardstream as ss


def tokens(batch):
    return {"input_ids": [np.arange(3 * len(t.split()), dtype=np.int32) + 100 * i
                          for t, i in zip(batch["text"], batch["id"])]}


def keep(row):
    return row["id"] % 5 != 0


def make(data):
    a, b = data
    root = ss.StreamingDataset(streams=[ss.Stream(local=a, proportion=0.6), ss.Stream(local=b, proportion=0.4)],
                               epoch_size=600, shuffle=True)
    return (root.shuffle(seed=1, buffer_size=40).map(tokens, batched=True, batch_size=8, remove_columns=["text"])
            .filter(keep).pack(seq_len=48))


def main() -> None:
    cfg = json.loads(sys.argv[1])
    rank, world = cfg["rank"], cfg["world_size"]
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{cfg['port']}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=60))
    loader = ss.StreamingDataLoader(make(cfg["data"]), batch_size=4, num_workers=cfg["workers"])
    if cfg.get("resume"):
        with open(cfg["resume"]) as fh:
            loader.load_state_dict(json.load(fh)["states"])
    batches = []
    it = iter(loader)
    while cfg.get("steps") is None or len(batches) < cfg["steps"]:
        try:
            batch = next(it)
            have = torch.ones(1)
        except StopIteration:
            batch, have = None, torch.zeros(1)
        dist.all_reduce(have, op=dist.ReduceOp.MIN)  # stop together when one rank runs out
        if have.item() == 0:
            break
        ids = batch["input_ids"]
        batches.append([row[mask].tolist() for row, mask in zip(ids.numpy(), (batch["segment_ids"] > 0).numpy())])
    states = [None] * world
    dist.all_gather_object(states, loader.state_dict())
    with open(os.path.join(cfg["out"], f"rank{rank}.json"), "w") as fh:
        json.dump({"batches": batches, "states": states}, fh)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
