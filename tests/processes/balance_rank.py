"""One rank of a job that reads chains and pipelines to the end of the epoch, for ``test_rank_balance.py``.

    python balance_rank.py '<json config>'

``mode`` "torch": the rank joins a gloo group over ``tcp://127.0.0.1:<port>``; "jax": it joins
``jax.distributed`` on the CPU. Then it reads every case of :data:`CASES` named in ``cases`` to its
end, with no collective of its own (so a rank with a batch more or less shows in its record instead
of hanging the job), and writes ``<out>/rank<r>.json``: case -> the batches it received, each as the
list of the ids (or, packed, the tokens) it holds. Each case of ``resume`` is read again, saving every
rank's state at step 2 and at the end, and read on from each in a new loader (see :func:`resume`).
"""

from __future__ import annotations

import json
import os
import sys

import numpy as np

BATCH = 8


def keep(row):
    """Drops one row in five, and the epoch's first 64 rows: the first reader's first block (any world)."""
    return row["id"] % 5 != 0 and row["id"] >= 64


def tokens(batch):
    """Row ``id`` gives the tokens ``100 * id + [0, 3 * words)`` (40 more for the first 64 rows: the first
    reader packs more rows than the others): a packed row's tokens say where they came from."""
    return {"input_ids": [np.arange(3 * len(t.split()) + 40 * (i < 64), dtype=np.int32) + 100 * i
                          for t, i in zip(batch["text"], batch["id"])]}


def chain(cfg, name: str, world=None):
    import shardstream as ss

    ds = ss.StreamingDataset(local=cfg["data"], world=world)
    if name == "buffer":
        return ds.shuffle(seed=3, buffer_size=50)
    if name == "filter":
        return ds.filter(keep)
    if name == "pack":
        return ds.map(tokens, batched=True, batch_size=16, remove_columns=["text"]).pack(seq_len=32)
    raise ValueError(name)


def pipeline(cfg, name: str):
    from shardstream import Pipeline

    config = {"datasets": [{"data_files": os.path.join(cfg["data"], "*.jsonl"), "type": "jsonl"}],
              "load": {"batch_size": BATCH, "shuffle_buffer_size": 50, "drop_last": False}}
    if name == "pipeline":
        return Pipeline.from_config(config).source().load().build()
    config.update(tokenize={"tokenizer": cfg["tokenizer"]}, pack={"seq_len": 32})
    return Pipeline.from_config(config).source().tokenize().pack().load(batch_size=4).build()


def loader(cfg, case: str):
    """The loader of ``case``: ``<chain>`` (plain iteration of the chain's batches), ``async_<chain>``,
    ``batchloader_<chain>``, ``jaxloader_<chain>``,
    ``loader_<chain>_w<workers>`` (StreamingDataLoader over the chain), ``pipeline`` or ``pipeline_pack``."""
    if case.startswith("pipeline"):
        return pipeline(cfg, case)
    size = 4 if "pack" in case else BATCH
    if case.startswith("async_"):
        from shardstream import AsyncDataLoader

        return AsyncDataLoader(chain(cfg, case[6:]), batch_size=size, format=None)
    if case.startswith("batchloader_"):  # the thread loader's numpy front end
        from shardstream import BatchLoader

        return BatchLoader(chain(cfg, case[12:]), batch_size=size)
    if case.startswith("jaxloader_"):  # and its JAX one (jax mode only)
        from shardstream.integrations.jax import JaxLoader

        return JaxLoader(chain(cfg, case[10:]), batch_size=size)
    if case.startswith("loader_"):
        from shardstream import StreamingDataLoader

        _, name, workers = case.split("_")
        return StreamingDataLoader(chain(cfg, name), batch_size=size, num_workers=int(workers[1:]))
    return chain(cfg, case).batch(size)


def record(batch) -> list:
    """The ids a batch holds; for packed rows, their tokens (id * 100 + offset) where a segment is."""
    if "segment_ids" in batch:
        ids, seg = np.asarray(batch["input_ids"]), np.asarray(batch["segment_ids"])
        return ids[seg > 0].tolist()
    if "id" in batch:
        return np.asarray(batch["id"]).tolist()
    return np.asarray(batch["input_ids"]).ravel().tolist()


def resume(cfg, case: str, gather) -> dict:
    """The loader of ``case`` (over a filtered chain) saves every rank's state after 2 batches and at the end of
    the epoch (the ranks stop early together), then reads the next epoch; new loaders load each gathered list
    of states."""
    first = loader(cfg, case)
    epoch0, mid = [], None
    for batch in first:
        epoch0.append(record(batch))
        if len(epoch0) == 2:
            mid = first.state_dict()
    end = first.state_dict()
    epoch1 = [record(b) for b in first]
    mids, ends = gather(mid), gather(end)
    again = loader(cfg, case)
    again.load_state_dict(mids)
    after_mid = [record(b) for b in again]
    later = loader(cfg, case)
    later.load_state_dict(ends)
    after_end = [record(b) for b in later]
    return {"epoch0": epoch0, "epoch1": epoch1, "after_mid": after_mid, "after_end": after_end,
            "end_complete": [bool(s.get("complete")) for s in ends]}


def join(cfg):
    """Join the job; ``gather(obj)``: every rank's ``obj`` (for the states the resume case saves)."""
    rank, world = cfg["rank"], cfg["world_size"]
    if cfg["mode"] == "torch":
        import datetime

        import torch.distributed as dist

        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{cfg['port']}", rank=rank, world_size=world,
                                timeout=datetime.timedelta(seconds=60))

        def gather(obj):
            out = [None] * world
            dist.all_gather_object(out, obj)
            return out
        return gather, dist.destroy_process_group
    import jax

    jax.distributed.initialize(coordinator_address=f"127.0.0.1:{cfg['port']}", num_processes=world,
                               process_id=rank, initialization_timeout=60)
    from jax._src import distributed

    client = distributed.global_state.client
    calls = iter(range(1 << 30))

    def gather(obj):
        n = next(calls)
        client.key_value_set(f"test/gather/{n}/{rank}", json.dumps(obj))
        return [json.loads(client.blocking_key_value_get(f"test/gather/{n}/{r}", 60_000)) for r in range(world)]
    return gather, jax.distributed.shutdown


def main() -> None:
    cfg = json.loads(sys.argv[1])
    gather, leave = join(cfg)
    out = {}
    for case in cfg["cases"]:
        out[case] = [record(b) for b in loader(cfg, case)]
    for case in cfg["resume"]:
        out[f"resume {case}"] = resume(cfg, case, gather)
    with open(os.path.join(cfg["out"], f"rank{cfg['rank']}.json"), "w") as fh:
        json.dump(out, fh)
    gather(None)  # every rank has written its record
    leave()


if __name__ == "__main__":
    main()
