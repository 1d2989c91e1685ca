"""Start the ranks of a real job on this machine: one Python process per rank, joined over 127.0.0.1."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import warnings

LAUNCHER_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "NODE_RANK",
                 "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_job(job: str, tmp_path, cfg: dict, ranks: int, timeout: float = 300) -> list[dict]:
    """Start ``ranks`` processes of the script ``job``, each given ``cfg`` with its ``rank``, ``world_size``,
    ``port`` and ``out`` (a fresh directory), and return their records ``<out>/rank<r>.json`` (one retry on a
    taken port). A rank that fails fails the job with every rank's log."""
    env = {k: v for k, v in os.environ.items() if k not in LAUNCHER_VARS}
    env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", GLOO_SOCKET_IFNAME=env.get("GLOO_SOCKET_IFNAME", "lo"))
    for attempt in range(2):
        out = tmp_path / f"job{ranks}-{attempt}"
        out.mkdir(parents=True)
        port = free_port()
        procs = [subprocess.Popen([sys.executable, job, json.dumps({**cfg, "rank": r, "world_size": ranks,
                                                                    "port": port, "out": str(out)})],
                                  env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
                 for r in range(ranks)]
        logs = []
        try:
            for p in procs:
                logs.append(p.communicate(timeout=timeout)[0])
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()
        if all(p.returncode == 0 for p in procs):
            return [json.load(open(out / f"rank{r}.json")) for r in range(ranks)]
        text = "\n".join(f"--- rank {r} (exit {p.returncode}):\n{log[-3000:]}"
                         for r, (p, log) in enumerate(zip(procs, logs)))
        if attempt == 0 and "address already in use" in text.lower():
            continue
        raise AssertionError(f"the job of {ranks} ranks failed:\n{text}")


@contextlib.contextmanager
def ranks_env(rank: int, ranks: int):
    """This process as rank ``rank`` of ``ranks`` by the launcher's variables (a Pipeline opens its datasets so),
    with no runtime to agree through: what is worked out so is each rank's whole share."""
    saved = {k: os.environ.get(k) for k in ("RANK", "WORLD_SIZE")}
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(ranks))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        for k, v in saved.items():
            os.environ.pop(k) if v is None else os.environ.__setitem__(k, v)
