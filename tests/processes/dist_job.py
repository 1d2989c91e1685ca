"""One rank of a multi-process job, started by ``test_distributed.py``.

    python dist_job.py '<json config>'

The config says how the rank joins the process group (``"init": "env"`` reads ``RANK``,
``WORLD_SIZE``, ``MASTER_ADDR`` and ``MASTER_PORT`` from the environment; ``"init": "tcp"``
passes ``rank``, ``world_size`` and a ``tcp://`` address explicitly, with no launcher
variables at all), which dataset to read, and what to do with it:

- ``"mode": "epoch"``: run one epoch of a ``StreamingDataLoader``;
- ``"mode": "train"``: train a tiny model with ``DistributedDataParallel`` (gloo), from a
  checkpoint if ``"resume"`` names one; with ``"stop_after": N`` rank 0 saves a checkpoint
  after step N, every rank writes its record, creates ``ready-<rank>`` and then blocks until
  it is killed.

Every step ends with one ``all_reduce`` that checks the ranks are at the same step, and the
epoch ends with one that checks they all stopped after the same number of batches (a rank
with a batch more or less fails that check instead of waiting for a collective that never
comes). Each rank writes ``<out>/rank<r>.json``: the ids of every batch it received, its
world as the dataset detected it, the loader's length, and (train) the losses. ``SIGUSR1``
makes a rank or one of its DataLoader workers print the stacks of all its threads (into
``$DIST_JOB_STACKS/stacks-<pid>.txt`` when that variable is set).
"""

from __future__ import annotations

import dataclasses
import datetime
import faulthandler
import functools
import json
import math
import os
import signal
import sys
import threading
import time

_stacks = {}  # pid -> the open file this process prints its stacks into


def print_stacks_on_sigusr1(role: str) -> None:
    """On SIGUSR1 this process prints the stacks of all its threads, into a file of its own
    (``$DIST_JOB_STACKS/stacks-<pid>.txt``, else stderr) so that processes do not interleave."""
    pid = os.getpid()
    folder = os.environ.get("DIST_JOB_STACKS")
    if not folder:
        faulthandler.register(signal.SIGUSR1, all_threads=True)
        return
    if pid not in _stacks:
        _stacks[pid] = open(os.path.join(folder, f"stacks-{pid}.txt"), "w")
    f = _stacks[pid]
    f.write(f"process {pid}: {role}\n")
    f.flush()
    faulthandler.register(signal.SIGUSR1, file=f, all_threads=True)


# before anything slow, so that spawned DataLoader workers (which import this module) are covered from
# their start; forked ones inherit the rank's registration until their worker_init_fn
print_stacks_on_sigusr1("a rank, or a spawned DataLoader worker starting")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

from shardstream import Stream, StreamingDataLoader, StreamingDataset  # noqa: E402

STEP, END = 1, 2  # what a rank says it is doing in the lockstep all_reduce


def write_record(cfg: dict, rank: int, node: int, record: dict) -> None:
    record.update(rank=rank, node=node, pid=os.getpid())
    write_json(os.path.join(cfg["out"], f"rank{rank}.json"), record)


def write_json(path: str, obj) -> None:
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(obj, f)
    os.replace(tmp, path)


def lockstep(kind: int, step: int) -> None:
    """All ranks must be doing the same thing (``kind``) at the same ``step``: one all_reduce(MAX)
    of (kind, -kind, step, -step) gives the largest and smallest of each across the ranks."""
    mine = torch.tensor([kind, -kind, step, -step], dtype=torch.int64)
    seen = mine.clone()
    dist.all_reduce(seen, op=dist.ReduceOp.MAX)
    if not torch.equal(seen, mine):
        raise AssertionError(
            f"rank {dist.get_rank()} is out of step: it is at ({'step' if kind == STEP else 'end'}, {step}); "
            f"across the ranks kind in [{-seen[1]}, {seen[0]}], step in [{-seen[3]}, {seen[2]}]"
        )


class Watchdog(threading.Thread):
    """If no batch arrives for ``stall`` seconds, every process of this rank (the rank and its
    DataLoader workers: its process group) prints its stacks, once per stall. The job's own
    timeouts, which are longer, then fail it; the stacks show where it hung before the DataLoader
    shuts down its workers."""

    def __init__(self, stall: float) -> None:
        super().__init__(daemon=True)
        self.stall = stall
        self.last = time.monotonic()
        self.active = True
        self.start()

    def beat(self) -> None:
        self.last = time.monotonic()

    def run(self) -> None:
        fired = None
        while True:
            time.sleep(0.5)
            if self.active and time.monotonic() - self.last > self.stall and fired != self.last:
                fired = self.last
                print(f"--- no batch for {self.stall:g} s: stacks of every process of this rank", file=sys.stderr,
                      flush=True)
                if os.getpgrp() == os.getpid():  # started as a group leader, as the test does
                    os.killpg(os.getpgrp(), signal.SIGUSR1)
                else:
                    os.kill(os.getpid(), signal.SIGUSR1)


def join_group(cfg: dict) -> tuple[int, int]:
    """Initialise the gloo process group; (rank, node)."""
    timeout = datetime.timedelta(seconds=cfg["timeout"])
    if cfg["init"] == "env":
        dist.init_process_group("gloo", timeout=timeout)
        rank = dist.get_rank()
        return rank, rank // int(os.environ["LOCAL_WORLD_SIZE"])
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{cfg['port']}", rank=cfg["rank"],
                            world_size=cfg["world_size"], timeout=timeout)
    rank = dist.get_rank()
    return rank, rank  # no launcher variables: every rank is a node of its own


def record_worker_world(out: str, rank: int, worker: int) -> None:
    """``worker_init_fn``: write the world this DataLoader worker's dataset copy reads as."""
    print_stacks_on_sigusr1(f"rank {rank}, DataLoader worker {worker}")
    ds = torch.utils.data.get_worker_info().dataset
    ds = getattr(ds, "dataset", ds)  # the batch path wraps the StreamingDataset
    write_json(os.path.join(out, f"worker-{rank}-{worker}.json"),
               {"world": dataclasses.asdict(ds.detect_world()), "pid": os.getpid(),
                "dist_initialized": dist.is_initialized()})


def make_loader(cfg: dict, node: int, rank: int):
    local = cfg["local"].format(node=node)
    if cfg.get("streams"):  # a mixture: each stream its own cache directory under the node's
        where = [Stream(remote=cfg["remote"], local=os.path.join(local, f"stream{k}"), proportion=p)
                 for k, p in enumerate(cfg["streams"])]
        source = {"streams": where, "epoch_size": cfg["epoch_size"], "batching_method": cfg["batching"]}
    else:
        source = {"remote": cfg["remote"], "local": local}
    ds = StreamingDataset(**source, shuffle=True, shuffle_seed=cfg["seed"], batch_size=cfg["batch_size"],
                          num_canonical_nodes=cfg["canonical_nodes"])
    workers = cfg["workers"]
    extra = {"multiprocessing_context": cfg["context"]} if workers and cfg.get("context") else {}
    if workers:
        extra["worker_init_fn"] = functools.partial(record_worker_world, cfg["out"], rank)
    loader = StreamingDataLoader(ds, batch_size=cfg["batch_size"], num_workers=workers,
                                 timeout=cfg["timeout"] if workers else 0, **extra)
    return ds, loader


def run_epoch(cfg: dict, rank: int, node: int) -> dict:
    ds, loader = make_loader(cfg, node, rank)
    record = {"world": dataclasses.asdict(ds.detect_world()), "len_before": len(loader), "steps": []}
    watchdog = Watchdog(cfg["stall"])
    for step, batch in enumerate(loader):
        watchdog.beat()
        ids = batch["id"]
        if not isinstance(ids, torch.Tensor) or ids.shape != (cfg["batch_size"],):
            raise AssertionError(f"rank {rank} step {step}: the id column is {type(ids).__name__} "
                                 f"{getattr(ids, 'shape', None)}, not a tensor of {cfg['batch_size']}")
        record["steps"].append(ids.tolist())
        lockstep(STEP, step)
    lockstep(END, len(record["steps"]))
    watchdog.active = False
    return record


def run_train(cfg: dict, rank: int, node: int) -> dict:
    from torch.nn.parallel import DistributedDataParallel

    ds, loader = make_loader(cfg, node, rank)
    torch.manual_seed(cfg["model_seed"])  # a resumed job starts from other weights than the checkpoint's
    model = torch.nn.Linear(64, 1)
    step = 0
    record: dict = {"world": dataclasses.asdict(ds.detect_world()), "steps": [], "losses": []}
    if cfg.get("resume"):
        ckpt = torch.load(cfg["resume"], weights_only=True)
        model.load_state_dict(ckpt["model"])
        loader.load_state_dict(ckpt["loader"])
        step = ckpt["step"]
        record["loaded_model"] = {k: v.flatten().tolist() for k, v in model.state_dict().items()}
    record["first_step"] = step
    record["len_before"] = len(loader)
    ddp = DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
    out = cfg["out"]
    watchdog = Watchdog(cfg["stall"])
    for batch in loader:
        watchdog.beat()
        x = batch["x"].float() / 255.0
        y = (batch["id"] % 7).float().unsqueeze(1) / 7.0
        loss = torch.nn.functional.mse_loss(ddp(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if not math.isfinite(loss.item()):
            raise AssertionError(f"rank {rank} step {step}: loss {loss.item()}")
        record["steps"].append(batch["id"].tolist())
        record["losses"].append(loss.item())
        lockstep(STEP, step)
        step += 1
        if step == cfg.get("stop_after"):
            watchdog.active = False
            state = loader.state_dict()
            record["loader_state"] = state
            if rank == 0:
                ckpt = os.path.join(out, "ckpt.pt")
                torch.save({"loader": state, "model": model.state_dict(), "step": step}, ckpt + ".tmp")
                os.replace(ckpt + ".tmp", ckpt)
                record["saved_model"] = {k: v.flatten().tolist() for k, v in model.state_dict().items()}
            write_record(cfg, rank, node, record)
            with open(os.path.join(out, f"ready-{rank}"), "w"):
                pass
            while True:  # the workers keep prefetching until the test kills everything with SIGKILL
                time.sleep(60)
    lockstep(END, step)
    watchdog.active = False
    return record


def main() -> None:
    cfg = json.loads(sys.argv[1])
    torch.set_num_threads(1)
    rank, node = join_group(cfg)
    record = (run_epoch if cfg["mode"] == "epoch" else run_train)(cfg, rank, node)
    write_record(cfg, rank, node, record)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
