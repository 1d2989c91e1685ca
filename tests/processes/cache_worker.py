"""A process that uses a shared shard cache, for the multi-process cache tests.

Run as ``python cache_worker.py MODE JSON`` where JSON holds the options below. The
worker reports through files only (no pipes to block on):

- ``stream``: build ``StreamingDataset(remote, local, cache_limit, shuffle, shuffle_seed)``,
  iterate one epoch and write ``result`` as JSON: the ids in order, a sha256 of every
  payload, the files this process downloaded and the largest ``cache_usage`` it saw.
  With ``ready``/``go``, it creates ``ready`` once imported and waits for ``go`` to exist
  before building the dataset, so that several workers start at the same moment.
- ``pin``: pin shard ``shard`` (downloading it if needed), create ``ready``, then sleep
  until killed or until ``stop`` exists; it exits without unpinning.
- ``prepare``: ``prepare_shard(shard)`` and write ``result``. With ``stall``
  (``{name, after_reads, chunk, marker}``), reads of remote file ``name`` hang after the first
  ``after_reads`` chunks of ``chunk`` bytes, like a stalled connection, and ``marker`` is
  created then (the test kills the process there).

Nothing here checks data: the test process compares what the workers report with what
it wrote.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time


def _touch(path: str) -> None:
    with open(path, "wb"):
        pass


def _write_json(path: str, obj: dict) -> None:
    tmp = f"{path}.part"
    with open(tmp, "w") as f:
        json.dump(obj, f)
    os.replace(tmp, path)


def _wait_for(path: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {path}")
        time.sleep(0.001)


def _dataset(opts: dict):
    from shardstream import StreamingDataset

    return StreamingDataset(remote=opts["remote"], local=opts["local"], cache_limit=opts.get("cache_limit"),
                            shuffle=opts.get("shuffle", False), shuffle_seed=opts.get("seed", 9176))


def stream(opts: dict) -> None:
    import shardstream  # noqa: F401  (import before signalling ready, so the start is simultaneous)

    if opts.get("ready"):
        _touch(opts["ready"])
    if opts.get("go"):
        _wait_for(opts["go"])
    ds = _dataset(opts)
    every = int(opts.get("usage_every", 5))
    ids, digests, usage = [], [], 0
    for n, sample in enumerate(ds):
        ids.append(int(sample["id"]))
        digests.append(hashlib.sha256(sample["payload"]).hexdigest())
        if n % every == 0:
            usage = max(usage, ds.cache_usage)
    _write_json(opts["result"], {"pid": os.getpid(), "ids": ids, "digests": digests, "max_usage": usage,
                                 "files": ds.table.stores[0].fetcher.files, "bytes": ds.table.stores[0].fetcher.bytes})


def pin(opts: dict) -> None:
    ds = _dataset(opts)
    ds.table.pin(opts["shard"])
    _touch(opts["ready"])
    deadline = time.monotonic() + float(opts.get("timeout", 60))
    while not os.path.exists(opts["stop"]) and time.monotonic() < deadline:
        time.sleep(0.01)
    os._exit(0)  # no unpin, no clean-up: the kernel drops the lock


def _stall_downloads(name: str, after_reads: int, chunk: int, marker: str) -> None:
    """Make every read of remote file ``name`` after the first ``after_reads`` hang, as a stalled
    connection would (reads are ``chunk`` bytes); ``marker`` is created when the stall begins."""
    from fsspec.implementations.local import LocalFileOpener

    from shardstream.storage import fetch

    fetch._CHUNK = chunk
    original = LocalFileOpener.read
    reads = [0]

    def read(self, *args, **kwargs):
        if os.path.basename(self.path) == name:
            if reads[0] >= after_reads:
                _touch(marker)
                time.sleep(3600)
            reads[0] += 1
        return original(self, *args, **kwargs)

    LocalFileOpener.read = read


def prepare(opts: dict) -> None:
    if opts.get("stall"):
        stall = opts["stall"]
        _stall_downloads(stall["name"], stall["after_reads"], stall["chunk"], stall["marker"])
    ds = _dataset(opts)
    ok = ds.prepare_shard(opts["shard"])
    _write_json(opts["result"], {"pid": os.getpid(), "ok": ok, "files": ds.table.stores[0].fetcher.files})


if __name__ == "__main__":
    mode, raw = sys.argv[1], sys.argv[2]
    {"stream": stream, "pin": pin, "prepare": prepare}[mode](json.loads(raw))
