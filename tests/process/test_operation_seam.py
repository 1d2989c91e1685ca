"""The operation seam: a new operation is one stage (a spec and a Stage, in one file) plus one method.

``pairs()`` below exists only in this test. It joins every two consecutive items of a reader into one
(``{"ids": [a, b]}``; a reader's last, odd item alone), so it changes the number of items and holds one
between calls: what a checkpoint must save, make again on resume, and deal out on another world. It is
registered as a method of every chain and of ``StreamingDataset``, and the chain checker then proves it
resumes at every step: exactly on its own world, and with nothing repeated or lost on other numbers of
ranks and DataLoader workers.
"""

from __future__ import annotations

import functools
from typing import Any, Optional

import pytest

import shardstream as ss
from shardstream.dataset.chain import IterableDataset, register_operation
from shardstream.dataset.operations import Operations
from shardstream.engine.keys import decode_all, encode_all, made_from
from shardstream.engine.stage import ReaderContext, Stage, deal
from shardstream.errors import InvalidArgumentError
from shardstream.testing.chains import check_chain_resumes


class PairsStage(Stage):
    name = "pairs"

    def __init__(self, source: Stage, ctx: ReaderContext) -> None:
        super().__init__(source, ctx)
        self.held: list[tuple[Any, Any]] = []  # items taken and not handed on (dealt here on another world)

    def _take(self) -> tuple[Any, Any]:
        return self.held.pop(0) if self.held else self.source.next()

    def next(self) -> tuple[Any, Any]:
        first = self._take()  # StopIteration ends the pass
        self.held.insert(0, first)  # held until its partner comes: a state saved in between keeps it
        try:
            second = self.source.next() if len(self.held) == 1 else self.held.pop(1)
        except StopIteration:
            second = None
        self.held.pop(0)
        pair = [first] if second is None else [first, second]
        return made_from([k for k, _ in pair]), _join([v for _, v in pair])

    def get_state(self) -> dict:
        return {"held": encode_all([k for k, _ in self.held])}

    def reset(self, state: Optional[dict] = None) -> None:
        keys = decode_all(state["held"]) if state else []
        self.held = list(zip(keys, self.source.recreate(keys)))

    def recreate(self, keys: list) -> list:
        inputs = [list(k[1]) for k in keys]
        values = iter(self.source.recreate([i for group in inputs for i in group]))
        return [_join([next(values) for _ in group]) for group in inputs]

    @staticmethod
    def redistribute(states: list[dict], n: int) -> list[dict]:
        held = [k for s in states for k in s.get("held", [])]
        return [{"held": share} for share in deal(held, n)]


def _join(rows: list) -> dict:
    return {"ids": [r["id"] for r in rows]}


class PairsSpec:
    """Every two consecutive items of a reader as one ``{"ids": [a, b]}``."""

    stage = PairsStage
    keeps_count = False

    def build(self, source: Stage, ctx: ReaderContext) -> Stage:
        return PairsStage(source, ctx)

    def describe(self) -> dict:
        return {"op": "pairs"}


@pytest.fixture(scope="module", autouse=True)
def pairs_method():
    register_operation("pairs", PairsSpec)
    yield
    delattr(IterableDataset, "pairs")
    delattr(Operations, "pairs")


@pytest.fixture(scope="module")
def rows(tmp_path_factory):
    out = tmp_path_factory.mktemp("pairs")
    with ss.MDSWriter(out=str(out), columns={"id": "int"}, size_limit=1 << 10) as w:
        for i in range(97):
            w.write({"id": i})
    return str(out)


def test_the_method_adds_the_operation_to_a_dataset_and_to_a_chain(rows):
    ds = ss.StreamingDataset(local=rows)
    assert [p["ids"] for p in ds.pairs()][:3] == [[0, 1], [2, 3], [4, 5]]
    assert [p["ids"] for p in ds.map(lambda r: r).pairs()][-1] == [96]
    assert "pairs" in repr(ds.pairs())


def test_an_operation_resumes_at_every_step_on_every_world(rows):
    roots = functools.lru_cache(maxsize=None)(lambda world: ss.StreamingDataset(local=rows, world=world))
    report = check_chain_resumes(lambda world: roots(world).shuffle(seed=1, buffer_size=8).pairs(),
                                 [(1, 1, 0), (1, 2, 0), (1, 3, 0), (1, 1, 2)], atoms=lambda p: p["ids"],
                                 key=lambda p: tuple(p["ids"]))
    assert report.saves > 100 and report.resumes == report.saves * 4


def test_a_spec_without_the_contract_is_refused(rows):
    with pytest.raises(InvalidArgumentError, match="needs"):
        ss.StreamingDataset(local=rows).as_iterable().apply(object())
    with pytest.raises(InvalidArgumentError, match="public identifier"):
        register_operation("map", PairsSpec)
