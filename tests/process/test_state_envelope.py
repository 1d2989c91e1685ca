"""A chain's state names each operation and the version of its stage's state; states of version 1 still load."""

from __future__ import annotations

import json

import numpy as np
import pytest

import shardstream as ss
from shardstream.errors import IncompatibleStateError


@pytest.fixture()
def rows(tmp_path):
    with ss.MDSWriter(out=str(tmp_path), columns={"id": "int", "tokens": "ndarray:int32"}, size_limit=1 << 11) as w:
        for i in range(60):
            w.write({"id": i, "tokens": np.arange(i % 7 + 1, dtype=np.int32) + 100 * i})
    return str(tmp_path)


def chain(rows):
    return ss.StreamingDataset(local=rows).map(lambda r: {"input_ids": r["tokens"]}, remove_columns=["id", "tokens"]
                                              ).shuffle(seed=2, buffer_size=5).pack(16)


def head_and_state(rows, n):
    c = chain(rows)
    it = iter(c)
    head = [next(it)["input_ids"].tolist() for _ in range(n)]
    return head, c.state_dict()


def test_the_state_names_every_operation_and_its_state_version(rows):
    _, state = head_and_state(rows, 3)
    assert state["version"] == 2 and state["kind"] == "shardstream.pipeline"
    assert state["operations"] == [{"op": "map", "version": 1}, {"op": "shuffle", "version": 1},
                                   {"op": "pack", "version": 1}]
    assert chain(rows).state_dict()["operations"] == state["operations"]  # between passes too


def test_a_version_1_state_still_loads_and_resumes_exactly(rows):
    head, state = head_and_state(rows, 3)
    straight = [p["input_ids"].tolist() for p in chain(rows)]
    old = {k: v for k, v in json.loads(json.dumps(state)).items() if k != "operations"} | {"version": 1}
    resumed = chain(rows)
    resumed.load_state_dict(old)
    assert head + [p["input_ids"].tolist() for p in resumed] == straight


def test_a_stage_state_of_another_version_is_refused_naming_the_operation(rows):
    _, state = head_and_state(rows, 3)
    state["operations"][2]["version"] = 7
    with pytest.raises(IncompatibleStateError, match=r"operation 2 \(pack\) saved its state at version 7"):
        chain(rows).load_state_dict(state)
    state["version"] = 9
    with pytest.raises(IncompatibleStateError, match="version 9 is not supported"):
        chain(rows).load_state_dict(state)
