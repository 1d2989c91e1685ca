"""How many of shardstream's modules and packages a sample crosses on its way to the training loop.

Runs two journeys on generated data and records, with ``sys.setprofile``, every shardstream function
called while they run (imports excluded), in the main process and in DataLoader workers:

1. ``load_dataset("json") -> map -> shuffle(buffer) -> pack -> StreamingDataLoader(num_workers=2) -> loop``
2. ``StreamingDataset(remote, local) -> StreamingDataLoader(num_workers=2) -> loop``

and prints, per journey, the modules whose code ran (over the whole journey, and on the path every batch
after the first takes in a loader without workers) and the package changes: distinct
``(caller's package, callee's package)`` pairs with different packages (a top-level module such as
``errors.py`` counts as a package of its own).

    .venv/bin/python bench/journey.py [--verbose]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile

ROOT = "shardstream"


def _package(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 2 else module.removeprefix(ROOT + ".")


class Recorder:
    """Appends each new module and each new (caller module, callee module) pair to a file per process."""

    def __init__(self, folder: str) -> None:
        self.folder, self.seen, self.pid, self.out = folder, set(), None, None

    def __call__(self, frame, event, arg) -> None:
        if event != "call":
            return
        code = frame.f_code
        if code.co_name == "<module>":
            return
        callee = frame.f_globals.get("__name__", "")
        if not callee.startswith(ROOT + "."):
            return
        back = frame.f_back
        while back is not None and not back.f_globals.get("__name__", "").startswith(ROOT + "."):
            back = back.f_back  # through the standard library and torch, to the shardstream caller
        caller = back.f_globals.get("__name__", "") if back is not None else ""
        key = (caller, callee)
        if key in self.seen:
            return
        self.seen.add(key)
        if self.pid != os.getpid():
            self.pid, self.seen = os.getpid(), {key}
            self.out = open(os.path.join(self.folder, f"{self.pid}.jsonl"), "a", buffering=1)
        self.out.write(json.dumps(key) + "\n")

    def install(self) -> None:
        import threading

        sys.setprofile(self)
        threading.setprofile(self)


def collect(folder: str) -> tuple[set, set]:
    modules, changes = set(), set()
    for name in os.listdir(folder):
        with open(os.path.join(folder, name)) as f:
            for line in f:
                caller, callee = json.loads(line)
                modules.add(callee)
                if caller and _package(caller) != _package(callee):
                    changes.add((_package(caller), _package(callee)))
    return modules, changes


def _json_files(tmp: str) -> str:
    import numpy as np

    folder = os.path.join(tmp, "json")
    os.makedirs(folder)
    rng = np.random.default_rng(0)
    for f in range(4):
        with open(os.path.join(folder, f"part-{f}.jsonl"), "w") as out:
            for i in range(500):
                out.write(json.dumps({"id": f * 500 + i, "tokens": rng.integers(0, 1000, 20 + i % 30).tolist()}) + "\n")
    return folder


def _mds(tmp: str) -> str:
    import numpy as np

    from shardstream import MDSWriter

    remote = os.path.join(tmp, "mds")
    with MDSWriter(out=remote, columns={"id": "int", "x": "ndarray:float32:8"}, size_limit=1 << 15) as w:
        for i in range(2000):
            w.write({"id": i, "x": np.full(8, i, np.float32)})
    return remote


def journey_chain(tmp: str, record, workers: int = 2, steady: bool = False) -> int:
    from shardstream import StreamingDataLoader, load_dataset

    folder = _json_files(tmp)
    if not steady:
        record()
    ds = load_dataset("json", data_files=os.path.join(folder, "*.jsonl"), split="train", streaming=True)
    chain = (ds.map(lambda row: {"input_ids": row["tokens"]}, remove_columns=["id", "tokens"])
             .shuffle(seed=0, buffer_size=100).pack(64).batch(8))
    return _loop(StreamingDataLoader(chain, num_workers=workers), record, steady)


def journey_dataset(tmp: str, record, workers: int = 2, steady: bool = False) -> int:
    from shardstream import StreamingDataLoader, StreamingDataset

    remote = _mds(tmp)
    if not steady:
        record()
    ds = StreamingDataset(remote=remote, local=os.path.join(tmp, "cache"), batch_size=16)
    return _loop(StreamingDataLoader(ds, batch_size=16, num_workers=workers), record, steady)


def _loop(loader, record, steady: bool) -> int:
    n = 0
    for _ in loader:
        n += 1
        if steady and n == 2:
            record()  # from the second batch on: the path every batch takes
    return n


def measure(journey, steady: bool = False) -> tuple[set, set]:
    with tempfile.TemporaryDirectory() as tmp:
        trace = os.path.join(tmp, "trace")
        os.makedirs(trace)
        recorder = Recorder(trace)
        journey(tmp, recorder.install, 0 if steady else 2, steady)
        sys.setprofile(None)
        import threading

        threading.setprofile(None)
        return collect(trace)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--verbose", action="store_true", help="list the modules and package changes")
    args = parser.parse_args()
    for title, journey in (("load_dataset('json') -> map -> shuffle -> pack -> StreamingDataLoader(num_workers=2)",
                            journey_chain),
                           ("StreamingDataset(remote, local) -> StreamingDataLoader(num_workers=2)", journey_dataset)):
        for steady in (False, True):
            modules, changes = measure(journey, steady)
            packages = {_package(m) for m in modules}
            what = "every batch after the first, num_workers=0" if steady else "the whole journey"
            print(f"{title} ({what}): {len(modules)} modules in {len(packages)} packages, "
                  f"{len(changes)} package changes")
            if args.verbose:
                print("  modules:", ", ".join(sorted(m.removeprefix(ROOT + ".") for m in modules)))
                print("  changes:", ", ".join(f"{a}->{b}" for a, b in sorted(changes)))


if __name__ == "__main__":
    main()
