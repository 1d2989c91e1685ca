"""mosaicml-streaming side of the remote benchmark (runs in the peer venv).

    PYTHONPATH=tests/peer_stubs .venv-peers/bin/python bench/bench_remote_mosaic.py CONFIG.json

Started by ``bench/bench_remote.py`` with ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY`` and
``S3_ENDPOINT_URL`` pointing at the loopback S3 server, and a private ``TMPDIR``. ``CONFIG.json``
names the remote, the local directory, the batch size and where to write the result. One epoch,
timed by :func:`bench_remote.measure_epoch`, in the main process (no DataLoader).
"""

from __future__ import annotations

import os
import platform
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import common
import numpy as np
import streaming
from bench_remote import load_config, measure_epoch
from common import log
from streaming import StreamingDataset


def _shm_trouble(exc: BaseException) -> bool:
    text = str(exc).lower()
    return any(k in text for k in ("shared memory", "local directory", "shm", "filelock"))


def main() -> None:
    import torch

    cfg = load_config(sys.argv[1])
    log(f"mosaicml-streaming {streaming.__version__}: {cfg['name']} ({cfg['phase']}), local {cfg['local']}")

    def open_dataset():
        return StreamingDataset(remote=cfg["remote"], local=cfg["local"], batch_size=cfg["batch_size"],
                                shuffle=False)

    def stop(ds) -> None:  # closing the generator does not end 0.13's download threads; this does
        ds._iterator.exit()

    def measure():
        return measure_epoch(open_dataset, cfg["first_only"], stop)

    cleaned = False
    try:
        ds, res = measure()
    except Exception as exc:  # stale shared memory of a crashed earlier run: clean it once and retry
        if not _shm_trouble(exc):
            raise
        from bench_mosaic import clean_shm

        log(f"{type(exc).__name__}: {exc}; cleaning stale shared memory and retrying once")
        clean_shm()
        cleaned = True
        ds, res = measure()
    if cfg["first_only"]:
        log(f"{cfg['name']} ({cfg['phase']}): first sample {res['first_sample_s']:.2f}s")
        common.emit(res, cfg["out"])
        return
    res.update({"library": "mosaicml-streaming", "version": streaming.__version__, "torch": torch.__version__,
                "numpy": np.__version__, "python": platform.python_version(), "predownload": ds.predownload,
                "cleaned_shared_memory": cleaned, "local_bytes": common.dir_bytes(cfg["local"])})
    log(f"{cfg['name']} ({cfg['phase']}): first sample {res['first_sample_s']:.2f}s, "
        f"{res['samples_per_s']:,.0f} samples/s, {res['count']:,} samples")
    common.emit(res, cfg["out"])


if __name__ == "__main__":
    main()
