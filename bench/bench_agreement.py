"""What the ranks' agreement on where a pass ends costs per batch (see shardstream/engine/agree.py).

    .venv/bin/python bench/bench_agreement.py [--steps 3000] [--ranks 2 4 8]

For each number of ranks, starts that many processes on this machine, joined by torch.distributed
(gloo over the loopback), and times ``TorchAgreement.all_have(True)`` (one ``all_reduce(MIN)`` of
one int over the loader's own gloo group), then the same through jax.distributed's key-value store
with two processes. Prints microseconds per step: the median over the ranks of each rank's mean (and, for
torch, that of a bare ``all_reduce`` on the job's own group, for reference).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import textwrap
import time

RANK = textwrap.dedent("""
    import json, sys, time
    mode, rank, ranks, port, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], int(sys.argv[5])
    if mode == "torch":
        import torch.distributed as dist
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=ranks)
        from shardstream.runtime.agreement import runtime_agreement
    else:
        import jax
        jax.distributed.initialize(coordinator_address=f"127.0.0.1:{port}", num_processes=ranks, process_id=rank)
        from shardstream.runtime.agreement import runtime_agreement
    agreement = runtime_agreement(ranks)
    for _ in range(50):  # the group is made at the first step; warm up
        agreement.all_have(True)
    t0 = time.perf_counter()
    for _ in range(steps):
        agreement.all_have(True)
    out = {"us": (time.perf_counter() - t0) / steps * 1e6}
    if mode == "torch":  # the bare collective on the job's own group, for reference
        import torch
        flag = torch.ones(1, dtype=torch.int32)
        t0 = time.perf_counter()
        for _ in range(steps):
            dist.all_reduce(flag, op=dist.ReduceOp.MIN)
        out["bare_us"] = (time.perf_counter() - t0) / steps * 1e6
    print(json.dumps(out), flush=True)
    dist.destroy_process_group() if mode == "torch" else jax.distributed.shutdown()
""")


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def measure(mode: str, ranks: int, steps: int) -> tuple[float, float]:
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE")}
    env.update(OMP_NUM_THREADS="1", GLOO_SOCKET_IFNAME=env.get("GLOO_SOCKET_IFNAME", "lo"))
    port = str(_port())
    procs = [subprocess.Popen([sys.executable, "-c", RANK, mode, str(r), str(ranks), port, str(steps)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for r in range(ranks)]
    done = [p.communicate(timeout=600) for p in procs]
    outs = [o for o, _ in done]
    if any(p.returncode for p in procs):
        raise SystemExit(f"{mode} with {ranks} ranks failed:\n" + "\n".join(e[-2000:] for _, e in done))
    found = [json.loads(o.strip().splitlines()[-1]) for o in outs]
    means = sorted(f["us"] for f in found)
    bare = sorted(f.get("bare_us", 0.0) for f in found)
    return means[len(means) // 2], bare[len(bare) // 2]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--ranks", type=int, nargs="+", default=[2, 4, 8])
    args = parser.parse_args()
    print(f"{os.cpu_count()} cores, {args.steps} steps")
    for ranks in args.ranks:
        agreed, bare = measure("torch", ranks, args.steps)
        print(f"torch gloo, {ranks} ranks: {agreed:.0f} us per step (a bare all_reduce: {bare:.0f} us)")
    print(f"jax key-value store, 2 processes: {measure('jax', 2, max(args.steps // 5, 100))[0]:.0f} us per step")


if __name__ == "__main__":
    main()
