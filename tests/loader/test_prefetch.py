"""The prefetcher: many chunks that need one shard while its pin is still under way all wait on that pin,
and all get the shard when it is ready (a single-piece file of many rows is such a shard)."""

from __future__ import annotations

import threading
import time

import numpy as np

from shardstream.engine.prefetch import Chunk, Prefetcher


class HeldCache:
    """What the prefetcher pins through (``pin``, ``add_ref``, ``unpin``, ``describe``), with a pin that
    takes as long as the test says: it returns once ``release`` is set, like a shard being downloaded
    or decoded while the plan runs ahead."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.pins = 0
        self.refs = 0
        self.lock = threading.Lock()

    def pin(self, shard: int, must: bool = False) -> bool:
        self.release.wait(60)
        with self.lock:
            self.pins += 1
            self.refs += 1
        return True

    def add_ref(self, shard: int) -> bool:
        with self.lock:
            if not self.pins:
                return False
            self.refs += 1
            return True

    def unpin(self, shard: int) -> None:
        with self.lock:
            self.refs -= 1

    def describe(self, shard: int) -> str:
        return f"shard {shard}"


def test_thousands_of_chunks_waiting_for_one_shard_all_get_it():
    n = 3000
    cache = HeldCache()
    taken = [0]

    def chunks():
        for k in range(n):
            yield Chunk(np.array([k]), np.array([0]), np.array([k]))
            taken[0] += 1  # the prefetcher asked for the next one: chunk k's pin was submitted

    prefetcher = Prefetcher(cache, chunks(), predownload=10 * n, threads=2)
    deadline = time.monotonic() + 60
    while taken[0] < n and time.monotonic() < deadline:  # the plan runs ahead of the held pin
        time.sleep(0.01)
    cache.release.set()
    got: list = []
    failed: list = []

    def consume() -> None:
        try:
            for chunk, pinned in prefetcher:
                got.append(pinned)
                prefetcher.done(chunk, pinned)
        except BaseException as exc:  # noqa: BLE001 - reported below
            failed.append(exc)

    reader = threading.Thread(target=consume, daemon=True)
    reader.start()
    reader.join(60)
    prefetcher.close()
    assert not reader.is_alive(), "the consumer still waits for a pin"
    assert not failed, failed
    assert len(got) == n and all(p == {0} for p in got)
    assert cache.pins == 1 and cache.refs == 0  # one pin; every reference taken was dropped


class QuickCache(HeldCache):
    """Pins at once; ``on_pin`` runs on the download thread that pins."""

    def __init__(self, on_pin=None) -> None:
        super().__init__()
        self.release.set()
        self.on_pin = on_pin

    def pin(self, shard: int, must: bool = False) -> bool:
        if self.on_pin is not None:
            self.on_pin()
        return super().pin(shard, must)


def drain(prefetcher: Prefetcher) -> int:
    n = 0
    for chunk, pinned in prefetcher:
        prefetcher.done(chunk, pinned)
        n += 1
    return n


def test_a_prefetcher_closed_from_its_own_prefetch_thread_stops_without_joining_itself():
    """What a consumer's generator finalised by the garbage collector on the prefetch thread does."""
    cache, made, ready = QuickCache(), [], threading.Event()

    def chunks():
        for k in range(50):
            if k == 3:
                assert ready.wait(10)  # the prefetcher exists (its thread starts walking in its constructor)
                made[0].close()  # the plan is walked on the prefetch thread
            yield Chunk(np.array([k]), np.array([k]), np.array([0]))

    made.append(Prefetcher(cache, chunks(), predownload=100, threads=2))
    ready.set()
    assert drain(made[0]) <= 4  # no RuntimeError("cannot join current thread") handed to the consumer
    made[0].close()
    assert cache.refs == 0  # every pin of a prepared chunk dropped


def test_a_prefetcher_closed_from_a_download_thread_stops_without_joining_it():
    made, errors, ready = [], [], threading.Event()

    def close_once():
        if len(errors) == 0:
            errors.append(None)
            assert ready.wait(10)  # the prefetcher exists (its downloads start in its constructor)
            made[0].close()

    cache = QuickCache(close_once)
    made.append(Prefetcher(cache, (Chunk(np.array([k]), np.array([k]), np.array([0])) for k in range(50)),
                           predownload=100, threads=2))
    ready.set()
    drain(made[0])  # the download thread's pin did not raise: its chunk ends the pass or comes whole
    made[0].close()
    time.sleep(0.2)
    assert cache.refs == 0
