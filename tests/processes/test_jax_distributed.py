"""Two real JAX processes (jax.distributed on 127.0.0.1): each host reads its share, and the
hosts' batches put together step by step equal the single-process order."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from shardstream import MDSWriter, StreamingDataset

pytest.importorskip("jax")

HOST = textwrap.dedent("""
    import json, sys
    pid, port, data, out = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
    import jax
    jax.distributed.initialize(coordinator_address=f"127.0.0.1:{port}", num_processes=2, process_id=pid,
                               initialization_timeout=60)
    from shardstream import StreamingDataset
    from shardstream.integrations.jax import JaxLoader
    ds = StreamingDataset(local=data, shuffle=True, shuffle_seed=5, batch_size=8, num_canonical_nodes=2)
    world = ds.detect_world()  # from jax.distributed, with no launcher variables set
    loader = JaxLoader(ds, columns=["id"])
    steps = [b["id"].tolist() for b in loader]
    with open(out, "w") as f:
        json.dump({"world": [world.num_nodes, world.node], "len": len(loader), "steps": steps}, f)
""")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_jax_hosts_share_the_global_order(tmp_path):
    data = str(tmp_path / "ds")
    with MDSWriter(out=data, columns={"id": "int"}, size_limit=2048) as w:
        for i in range(1000):
            w.write({"id": i})
    port = _free_port()
    env = {k: v for k, v in __import__("os").environ.items()
           if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE")}
    outs = [str(tmp_path / f"host{i}.json") for i in range(2)]
    procs = [subprocess.Popen([sys.executable, "-c", HOST, str(i), str(port), data, outs[i]], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(2)]
    try:
        for p in procs:
            _, err = p.communicate(timeout=180)
            assert p.returncode == 0, err[-3000:]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    hosts = [json.load(open(o)) for o in outs]
    assert [h["world"] for h in hosts] == [[2, 0], [2, 1]]
    assert hosts[0]["len"] == hosts[1]["len"] == len(hosts[0]["steps"]) == len(hosts[1]["steps"])
    joined = [i for a, b in zip(hosts[0]["steps"], hosts[1]["steps"]) for i in a + b]
    single = StreamingDataset(local=data, shuffle=True, shuffle_seed=5, batch_size=16, num_canonical_nodes=2)
    expected = [int(s["id"]) for s in single]
    assert joined == expected
    assert sorted(set(joined)) == list(range(1000))
    assert not np.array_equal(joined, np.arange(len(joined)))
