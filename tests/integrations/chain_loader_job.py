"""A training process reading a processing chain through ``StreamingDataLoader`` with persistent workers.

    python chain_loader_job.py '<json config>'

Builds the chain of :func:`make` over ``data``, loads the state at ``resume`` (a JSON file) if given, then
runs ``epochs`` passes of the loader (``num_workers=2, persistent_workers=True``), the last one stopped
after ``steps`` batches if given, and writes to ``out`` the ids of every batch it received and its
``state_dict()`` at the end.
"""

from __future__ import annotations

import json
import sys

import shardstream as ss

BATCH = 6


def words(batch):
    return {"n": [len(t.split()) for t in batch["text"]]}


def keep(row):
    return row["id"] % 5 != 0


def make(data):
    root = ss.StreamingDataset(local=data, shuffle=True, shuffle_seed=11)
    return root.shuffle(seed=4, buffer_size=30).map(words, batched=True, batch_size=7).filter(keep)


def loader(data):
    return ss.StreamingDataLoader(make(data), batch_size=BATCH, num_workers=2, persistent_workers=True)


def run(dl, epochs: int, steps=None) -> list:
    """Ids of each batch over ``epochs`` passes of ``dl``, the last one stopped after ``steps`` batches."""
    got = []
    for epoch in range(epochs):
        for i, batch in enumerate(dl):
            got.append(batch["id"].tolist())
            if steps is not None and epoch == epochs - 1 and i + 1 >= steps:
                break
    return got


def main(config: dict) -> None:
    dl = loader(config["data"])
    if config.get("resume"):
        with open(config["resume"]) as f:
            dl.load_state_dict(json.load(f))
    got = run(dl, config["epochs"], config.get("steps"))
    with open(config["out"], "w") as f:
        json.dump({"batches": got, "state": dl.state_dict()}, f)


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
