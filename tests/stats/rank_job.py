"""One rank of a small job for ``test_ranks.py``: reads its share of a dataset with stats on, then
gathers every rank's ``rank_summary`` with ``all_gather_object`` (gloo on 127.0.0.1).

    python rank_job.py '<json config>'

Config: ``rank``, ``world_size``, ``port`` (the rendezvous), ``data`` (an MDS directory), ``batch_size``,
``out`` (rank 0 writes ``gathered.json`` and ``summary.txt`` there), ``lockstep`` (an ``all_reduce``
after every batch, as data-parallel training does), ``loop_sleep`` and ``transform_sleep``: seconds this
rank's loop, or its loader's transform, spends on each batch.
"""

from __future__ import annotations

import datetime
import json
import os
import sys
import time


def main(cfg: dict) -> None:
    import torch
    import torch.distributed as dist

    from shardstream import BatchLoader, StreamingDataset
    from shardstream.stats import gather, rank_summary, summary

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{cfg['port']}", rank=cfg["rank"],
                            world_size=cfg["world_size"], timeout=datetime.timedelta(seconds=60))

    def slow(batch):
        time.sleep(cfg["transform_sleep"])
        return batch

    dataset = StreamingDataset(local=cfg["data"], batch_size=cfg["batch_size"], shuffle=False)
    loader = BatchLoader(dataset, stats=True, transform=slow if cfg["transform_sleep"] else None)
    step = torch.zeros(1)
    for _ in loader:
        time.sleep(cfg["loop_sleep"])
        if cfg["lockstep"]:
            dist.all_reduce(step)
    gathered = [None] * cfg["world_size"]
    dist.all_gather_object(gathered, rank_summary(loader))
    if cfg["rank"] == 0:
        result = gather(gathered)
        with open(os.path.join(cfg["out"], "gathered.json"), "w") as f:
            json.dump(result, f)
        with open(os.path.join(cfg["out"], "summary.txt"), "w") as f:
            f.write(summary(result))
    dist.destroy_process_group()


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
