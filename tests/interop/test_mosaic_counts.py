"""epoch_tail="mosaic" sizes epochs as the real mosaicml-streaming package does.

For a grid of (samples, canonical nodes, nodes, ranks, workers, batch size) and resume points, the
real package's partition (run in the peer virtualenv) and our plan must give every node, rank and
worker the same batches of real samples (how many, and which one is short); a real
``StreamingDataset`` (one rank: more would need a process group) must have the same ``len()`` and
read as many samples per epoch.
"""

from __future__ import annotations

import itertools
import json
import subprocess
from pathlib import Path

import numpy as np
import pytest

from shardstream import MDSWriter, StreamingDataset
from shardstream.plan import Plan, PlanSpec, World

from .conftest import REPO_ROOT, peer_env, peer_python

SCRIPT = Path(__file__).resolve().parent / "peer_counts.py"


def run_cases(cases: list[dict], tmp_path: Path) -> list:
    (tmp_path / "tmp").mkdir(exist_ok=True)
    src, out = tmp_path / "cases.json", tmp_path / "out.json"
    src.write_text(json.dumps(cases))
    proc = subprocess.run([peer_python(), str(SCRIPT), str(src), str(out)], env=peer_env(tmp_path / "tmp"),
                          cwd=str(REPO_ROOT), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(out.read_text())


def our_batches(case: dict) -> dict:
    """Real samples per batch for every node, rank and worker of our plan (resumed at ``drop_first``)."""
    n, c, p, r, w, b, d = (case[k] for k in ("num_samples", "canonical", "nodes", "ranks", "workers", "batch",
                                             "drop_first"))
    plan = Plan([n // 2, n - n // 2], PlanSpec(shuffle=True, num_canonical_nodes=c, tail="mosaic"))
    out = {}
    for node, rank, worker in itertools.product(range(p), range(r), range(w)):
        world = World(num_nodes=p, ranks_per_node=r, node=node, local_rank=rank, num_workers=w, worker=worker)
        epoch = plan.epoch(0, b * p * r, world=world).resume(d, b * p * r)
        out[f"{node},{rank},{worker}"] = [len(row) for _, ids in epoch.iter_worker(world) for row in ids]
    return out


def grid() -> list[dict]:
    cases = []
    for n, c, p, r, w, b in itertools.product((1, 5, 117, 240, 1001), (1, 2, 4, 8), (1, 2, 4), (1, 3, 8),
                                              (1, 2, 3), (1, 4, 7)):
        if (c < p and p % c) or (p < c and c % p):
            continue  # refused by both (either count must divide the other)
        cases.append(dict(kind="partition", num_samples=n, canonical=c, nodes=p, ranks=r, workers=w, batch=b,
                          drop_first=0))
    rng = np.random.default_rng(7)
    for case in rng.choice(cases, 60, replace=False).tolist():  # resumed at a whole global step
        g = case["batch"] * case["nodes"] * case["ranks"]
        steps = -(-case["num_samples"] // g)
        cases.append(dict(case, drop_first=int(rng.integers(0, steps + 1)) * g))
    return cases


def test_partition_counts_equal_the_peer(tmp_path):
    cases = grid()
    peer = run_cases(cases, tmp_path)
    compared = 0
    for case, theirs in zip(cases, peer):
        if "error" in theirs:  # a tiny dataset the package itself fails to partition
            continue
        compared += 1
        if case["drop_first"] >= case["num_samples"] and not any(theirs.values()):
            continue
        assert our_batches(case) == theirs, case
    assert compared > 0.9 * len(cases)


@pytest.mark.parametrize("num_samples,batch,canonical", [(117, 4, 1), (117, 8, 2), (240, 7, 4), (33, 5, 8)])
def test_dataset_length_and_epoch_equal_the_peer(tmp_path, num_samples, batch, canonical):
    local = tmp_path / "data"
    with MDSWriter(out=str(local), columns={"id": "int"}, size_limit=400) as writer:
        for i in range(num_samples):
            writer.write({"id": i})
    cases = [dict(kind="dataset", local=str(local), batch=batch, canonical=canonical, world_size=1)]
    peer = run_cases(cases, tmp_path)
    for case, theirs in zip(cases, peer):
        assert "error" not in theirs, theirs
        ds = StreamingDataset(local=str(local), batch_size=batch, num_canonical_nodes=canonical, epoch_tail="mosaic",
                              world=World(ranks_per_node=case["world_size"]))
        assert len(ds) == theirs["len"], case
        if "iterated" in theirs:
            assert sum(1 for _ in ds) == theirs["iterated"], case
