"""``StreamingDataLoader`` over a processing chain is the same loader as over a dataset, with the same keywords:
persistent workers (state and resume exact across epochs, in a new process too), ``device=``, ``ragged=``,
``pin_memory``, the ring, stats."""

from __future__ import annotations

import collections
import functools
import json
import os
import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import shardstream as ss  # noqa: E402
from shardstream.errors import InvalidArgumentError  # noqa: E402
from shardstream.testing.datasets import write_text_rows  # noqa: E402

JOB = os.path.join(os.path.dirname(os.path.abspath(__file__)), "chain_loader_job.py")
sys.path.insert(0, os.path.dirname(JOB))

from chain_loader_job import BATCH, loader, make, run  # noqa: E402


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> str:
    return write_text_rows(tmp_path_factory.mktemp("chainloader"))


def ids_of(batches) -> collections.Counter:
    return collections.Counter(i for b in batches for i in b)


def started(folder, worker_id) -> None:
    open(os.path.join(folder, f"{os.getpid()}-{worker_id}"), "w").close()


def test_the_loader_over_a_chain_is_a_streaming_dataloader(data):
    from shardstream.integrations.torch import StreamingDataLoader
    from shardstream.integrations.torchpipe import PipelineDataLoader

    dl = ss.StreamingDataLoader(make(data), batch_size=BATCH)
    assert type(dl) is StreamingDataLoader and isinstance(dl, ss.StreamingDataLoader)
    assert PipelineDataLoader is StreamingDataLoader  # the former name still imports
    with pytest.raises(TypeError, match="no length"):
        len(dl)


def test_persistent_workers_resume_exactly_in_a_new_process(data, tmp_path):
    one_pass = collections.Counter(row["id"] for row in make(data))
    starts = tmp_path / "starts"
    starts.mkdir()
    dl = ss.StreamingDataLoader(make(data), batch_size=BATCH, num_workers=2, persistent_workers=True,
                                worker_init_fn=functools.partial(started, str(starts)))
    epochs = [run(dl, 1) for _ in range(3)]
    assert len(os.listdir(starts)) == 2  # the same two workers ran the three epochs
    for epoch in epochs:  # each epoch reads every item once, in its own order
        assert ids_of(epoch) == one_pass
    assert epochs[0] != epochs[1] != epochs[2]
    straight = epochs[0] + epochs[1] + epochs[2]

    head_loader = loader(data)
    head = run(head_loader, 2, steps=7)  # epoch 0, then 7 batches of epoch 1 (an odd number: worker 1's turn)
    saved = tmp_path / "state.json"
    saved.write_text(json.dumps(head_loader.state_dict()))
    out = tmp_path / "tail.json"
    subprocess.run([sys.executable, JOB, json.dumps(
        {"data": data, "resume": str(saved), "epochs": 2, "out": str(out)})], check=True, timeout=300)
    tail = json.loads(out.read_text())["batches"]  # the rest of epoch 1, then epoch 2, by a new loader
    assert head + tail == straight


def test_a_state_loaded_between_epochs_restarts_persistent_workers(data):
    first = loader(data)
    epoch0 = run(first, 1)
    other = loader(data)
    head = run(other, 1, steps=5)
    first.load_state_dict(other.state_dict())  # the workers' own next pass (epoch 1) is not the one asked for
    assert head + run(first, 1) == epoch0
    first.set_epoch(0)
    assert run(first, 1) == epoch0


def test_device_pin_memory_ring_and_stats_over_a_chain(data):
    want = run(ss.StreamingDataLoader(make(data), batch_size=BATCH), 1)
    dl = ss.StreamingDataLoader(make(data), batch_size=BATCH, num_workers=2, device="cpu", pin_memory=True,
                                transfer="ring", stats=True)
    batches = list(dl)
    assert all(b["id"].device == torch.device("cpu") and b["n"].dtype == torch.int64 for b in batches)
    got = [b["id"].tolist() for b in batches]
    assert ids_of(got) == ids_of(want)
    assert dl.stats()["total"]["samples"] == sum(len(b) for b in got)


def tokens(row):
    return {"tok": [len(w) for w in row["text"].split()]}


def token_chain(data):
    return ss.StreamingDataset(local=data).map(tokens).select_columns(["id", "tok"])


@pytest.mark.parametrize("workers", [0, 2])
def test_ragged_forms_over_a_chain(data, workers):
    rows = {row["id"]: row["tok"] for row in token_chain(data)}
    assert len({len(t) for t in rows.values()}) > 1  # variable-length rows

    def batches(ragged):
        return list(ss.StreamingDataLoader(token_chain(data), batch_size=8, num_workers=workers, ragged=ragged))

    for b in batches("pad"):
        assert b["tok"].dtype == torch.int64 and b["tok"].shape[1] == int(b["tok_lengths"].max())
        for i, tok, n in zip(b["id"].tolist(), b["tok"], b["tok_lengths"].tolist()):
            assert tok[:n].tolist() == rows[i] and not tok[n:].any()
    for b in batches("ragged"):
        assert isinstance(b["tok"], ss.Ragged) and isinstance(b["tok"].values, torch.Tensor)
        assert [b["tok"][k].tolist() for k in range(len(b["tok"]))] == [rows[i] for i in b["id"].tolist()]
    for b in batches(None):  # as the chain made them
        assert [list(t) for t in b["tok"]] == [rows[i] for i in b["id"].tolist()]
    with pytest.raises(InvalidArgumentError, match="ragged='padded' is not one of 'pad', 'ragged'"):
        ss.StreamingDataLoader(token_chain(data), batch_size=8, ragged="padded")


def test_a_lengths_column_already_there_is_refused_with_pad(data):
    chain = token_chain(data).map(lambda row: {"tok_lengths": 0})
    with pytest.raises(InvalidArgumentError, match="tok_lengths"):
        next(iter(ss.StreamingDataLoader(chain, batch_size=4, ragged="pad")))
    batch = next(iter(ss.StreamingDataLoader(chain, batch_size=4, ragged="ragged")))
    assert isinstance(batch["tok"], ss.Ragged) and batch["tok_lengths"].tolist() == [0] * 4


def test_what_a_chain_cannot_take_is_refused(data):
    with pytest.raises(InvalidArgumentError, match="not a torch device"):
        ss.StreamingDataLoader(make(data), batch_size=BATCH, device="nowhere")
    with pytest.raises(InvalidArgumentError, match="select_columns"):
        ss.StreamingDataLoader(make(data), batch_size=BATCH, columns=["id"])
    with pytest.raises(InvalidArgumentError, match="batch_decode"):
        ss.StreamingDataLoader(make(data), batch_size=BATCH, batch_decode=True)
    with pytest.raises(InvalidArgumentError, match="ds.shuffle"):
        ss.StreamingDataLoader(make(data), batch_size=BATCH, shuffle=True)
