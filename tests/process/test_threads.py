"""A chain's background threads end with the iterator that needs them, whether or not ``close()`` is called."""

from __future__ import annotations

import gc
import json
import threading
import time
import weakref

import shardstream as ss


def shardstream_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("shardstream")]


def settled(before: int, timeout: float = 5.0) -> int:
    """The number of shardstream threads once they stop ending (at most ``timeout`` seconds)."""
    deadline = time.monotonic() + timeout
    while True:
        gc.collect()
        n = len(shardstream_threads())
        if n <= before or time.monotonic() > deadline:
            return n
        time.sleep(0.05)


def test_dropped_prefetch_iterators_and_loaders_stop_their_threads(jsonl_dir):
    ds = ss.StreamingDataset(local=jsonl_dir)
    before = settled(0)
    for _ in range(10):
        list(ds.as_iterable().prefetch(2))  # to the end
    for _ in range(10):
        next(iter(ds.shuffle(seed=1, buffer_size=8).prefetch(2)))  # half-way, then dropped with its chain
    kept = []
    for _ in range(10):
        chain = ds.map(lambda r: r).prefetch(2)
        it = iter(chain)
        next(it)
        del it  # the iterator dropped, its chain kept
        kept.append(chain)
    for _ in range(10):
        next(iter(ss.AsyncDataLoader(ds, batch_size=4)))
    loader = ss.AsyncDataLoader(ds, batch_size=4, stats=True)
    next(iter(loader))
    assert settled(before) == before, shardstream_threads()
    assert loader.state_dict()["kind"] == "shardstream.pipeline"


def test_a_dropped_iterator_is_collected_and_its_chain_resumes_exactly(jsonl_dir):
    def make():
        return ss.StreamingDataset(local=jsonl_dir).shuffle(seed=5, buffer_size=20).prefetch(8)
    full = [r["id"] for r in make()]
    before = settled(0)
    chain = make()
    it = iter(chain)
    head = [next(it)["id"] for _ in range(30)]
    gone = weakref.ref(it)
    del it
    assert settled(before) == before and gone() is None, shardstream_threads()
    state = json.loads(json.dumps(chain.state_dict()))  # items made ahead and never taken are owed
    again = make()
    again.load_state_dict(state)
    assert head + [r["id"] for r in again] == full
