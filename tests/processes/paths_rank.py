"""One rank of a job that reads every front door of the engine to the end of the epoch, for ``test_rank_paths.py``.

    python paths_rank.py '<json config>'

The rank joins the job as ``balance_rank.py`` does (gloo over ``tcp://127.0.0.1:<port>``, or
``jax.distributed`` on the CPU), then, with no collective of its own:

- reads every case of ``cases`` to its end: ``<out>/rank<r>.json`` gets case -> the batches it
  received, each as the list of ids (packed: tokens) it holds;
- for each case of ``save``, reads ``save_at`` batches, then every rank's state is gathered and
  rank 0 writes the list to ``<out>/<case>.state.json`` (the record keeps the batches read before);
- for each case of ``load``, loads the states ``<states>/<case>.state.json`` (saved by a job of
  another size) and reads the rest of that epoch.
"""

from __future__ import annotations

import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from balance_rank import BATCH, join, keep, record, tokens  # noqa: E402


def count(row):
    """A map that keeps the count: one row out per row in."""
    return {"n": len(row["text"])}


def chain(cfg, name: str, world=None):
    """``mapbuf``: row map + shuffle buffer + batch; ``filter``: filter + batch; ``pack``: batched token map +
    pack + batch."""
    import shardstream as ss

    ds = ss.StreamingDataset(local=cfg["data"], world=world)
    if name == "mapbuf":
        return ds.map(count).shuffle(seed=3, buffer_size=50).batch(BATCH)
    if name == "filter":
        return ds.filter(keep).batch(BATCH)
    if name == "pack":
        return ds.map(tokens, batched=True, batch_size=16, remove_columns=["text"]).pack(seq_len=32).batch(4)
    raise ValueError(name)


def source(cfg, name: str):
    from shardstream import JsonShardedSource

    src = JsonShardedSource(cfg["data"])
    if name == "source_filter":
        return src.filter(keep)
    if name == "source_map":
        return src.map(lambda row: {**row, "n": len(row["text"])})
    return src


def loader(cfg, case: str):
    """The loader of ``case``: ``ds_loader_w<n>`` (StreamingDataLoader over a StreamingDataset), ``ds_batches``
    (BatchLoader), ``ds_jax`` (JaxLoader), a chain name (plain iteration), ``source*`` (AsyncDataLoader over a
    sharded source), ``pipeline_torch`` (StreamingDataLoader over a Pipeline's packed rows)."""
    import shardstream as ss

    if case.startswith("ds_"):
        ds = ss.StreamingDataset(local=cfg["data"], batch_size=BATCH, shuffle=True, shuffle_seed=5)
        if case.startswith("ds_loader_w"):
            return ss.StreamingDataLoader(ds, batch_size=BATCH, num_workers=int(case[len("ds_loader_w"):]))
        if case == "ds_jax":
            from shardstream.integrations.jax import JaxLoader

            return JaxLoader(ds)
        return ss.BatchLoader(ds)
    if case.startswith("source"):
        return ss.AsyncDataLoader(source(cfg, case), batch_size=BATCH, format=None)
    if case == "pipeline_torch":
        config = {"datasets": [{"data_files": os.path.join(cfg["data"], "*.jsonl"), "type": "jsonl"}],
                  "tokenize": {"tokenizer": cfg["tokenizer"]}, "pack": {"seq_len": 32}}
        rows = ss.Pipeline.from_config(config).source().tokenize().pack().build()
        return ss.StreamingDataLoader(rows, batch_size=4)
    return chain(cfg, case)


def ids(batch) -> list:
    if "segment_ids" not in batch and "id" in batch:
        return np.asarray(batch["id"]).tolist()
    return record(batch)


def saved(cfg, case: str, gather) -> list:
    """The first ``save_at`` batches; every rank's state after them, written by rank 0."""
    it = loader(cfg, case)
    before = []
    for batch in it:
        before.append(ids(batch))
        if len(before) == cfg["save_at"]:
            break
    states = gather(it.state_dict())
    if cfg["rank"] == 0:
        with open(os.path.join(cfg["out"], f"{case}.state.json"), "w") as fh:
            json.dump(states, fh)
    if hasattr(it, "close"):
        it.close()
    return before


def loaded(cfg, case: str) -> list:
    with open(os.path.join(cfg["states"], f"{case}.state.json")) as fh:
        states = json.load(fh)
    it = loader(cfg, case)
    it.load_state_dict(states)
    return [ids(b) for b in it]


def main() -> None:
    cfg = json.loads(sys.argv[1])
    gather, leave = join(cfg)
    out = {case: [ids(b) for b in loader(cfg, case)] for case in cfg.get("cases", [])}
    out.update({f"save {case}": saved(cfg, case, gather) for case in cfg.get("save", [])})
    out.update({f"load {case}": loaded(cfg, case) for case in cfg.get("load", [])})
    with open(os.path.join(cfg["out"], f"rank{cfg['rank']}.json"), "w") as fh:
        json.dump(out, fh)
    gather(None)  # every rank has written its record
    leave()


if __name__ == "__main__":
    main()
