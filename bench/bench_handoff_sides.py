"""What the handoff benchmark measures in each fresh process, and the project venv's sides.

    python bench/bench_handoff_sides.py CONFIG.json

Started by ``bench/bench_handoff.py``. ``CONFIG.json`` names the task (``probe``, ``handoff`` or
``collate``), the library (``shardstream`` or ``torch``: torch's own DataLoader over ready-made
batches, the reference) and where to write the result. mosaicml-streaming's side
(``bench_handoff_peers.py``, peer venv) shares :func:`measure`, :func:`collate` and
:func:`mover`; this module needs only the standard library and numpy at import.

:func:`measure` runs a loader's epochs one after the other. In each epoch the first ``skip`` batches
are left out (worker start-up, the prefetch fill); the steady window runs from there to the end of
the epoch, or to the batch where the steady time of all windows reaches ``window_s`` (the epoch is
then left unfinished). With ``skip_next`` 0 (persistent workers), only the first epoch leaves
batches out: the later windows run from ``iter(loader)``, the time between epochs included. Over the
windows it takes the samples, the payload bytes (``x`` + the 8-byte label), and the training
process's CPU time (``getrusage(RUSAGE_SELF)``, all its threads). The workers' CPU
(``RUSAGE_CHILDREN``) is counted once they have exited, over the whole run. Every finished epoch is
checked: sample count, sum of the labels, sum of ``x[:, 0]`` (which reads every page of ``x``); the
sums are kept as tensors where the batch lies, so a batch on the GPU is never waited for until its
epoch ends.
"""

from __future__ import annotations

import gc
import json
import os
import platform
import resource
import sys
import time
from typing import Any, Callable, Optional

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)
import common

SAMPLE_BYTES = 1000 + 8  # x + the label as int64: the payload each sample carries


# -- shared by every side (stdlib + numpy at import) --------------------------------------------------
def collate(samples: list[dict]) -> dict:
    """The user's ``collate_fn`` of the per-sample part, the same for every library."""
    import torch

    return {"x": torch.from_numpy(np.stack([s["x"] for s in samples])),
            "label": torch.tensor([s["label"] for s in samples])}


def mover(mode: str) -> Optional[Callable[[dict], dict]]:
    """What the loop does with each batch before reading it: ``pinned`` moves it to the GPU
    (``.to("cuda", non_blocking=True)``); otherwise it is read where it arrived."""
    if mode != "pinned":
        return None

    def move(batch: dict) -> dict:
        return {k: v.to("cuda", non_blocking=True) for k, v in batch.items()}

    return move


def _usage() -> tuple[float, int, int]:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime, r.ru_minflt, r.ru_nvcsw + r.ru_nivcsw


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


class Window:
    """The steady windows' totals: seconds, samples, the training process's CPU, faults, switches."""

    def __init__(self) -> None:
        self.s = 0.0
        self.samples = 0
        self.cpu_s = 0.0
        self.minflt = 0
        self.switches = 0

    def add(self, seconds: float, samples: int, u0: tuple, u1: tuple) -> None:
        self.s += seconds
        self.samples += samples
        self.cpu_s += u1[0] - u0[0]
        self.minflt += u1[1] - u0[1]
        self.switches += u1[2] - u0[2]


def _epoch(loader, cfg: dict, skip: int, win: Window, move, sync: Callable[[], None], t_start: float) -> dict:
    """One epoch (or its first part, once the windows reach ``window_s`` or the run ``max_s``); its steady
    window starts after ``skip`` batches, or with ``skip`` 0 before ``iter(loader)`` (the time between two
    epochs is then counted)."""
    window_s, max_s = cfg.get("window_s") or 0.0, cfg.get("max_s") or float("inf")
    n = n_w = 0
    lab = x0 = 0
    stopped = False
    t0 = time.perf_counter()
    t_w, u_w = (t0, _usage()) if skip == 0 else (None, None)
    it = iter(loader)
    for i, b in enumerate(it):
        if move is not None:
            b = move(b)
        lab = lab + b["label"].sum()
        x0 = x0 + b["x"][:, 0].sum()
        n += len(b["label"])
        if i + 1 == skip:
            sync()
            t_w, u_w, n_w = time.perf_counter(), _usage(), n
        elif t_w is not None and window_s and win.s + time.perf_counter() - t_w >= window_s:
            stopped = True
            break
        if time.perf_counter() - t_start >= max_s:
            stopped = True
            break
    sync()
    t_end = time.perf_counter()
    if t_w is not None and t_end > t_w:
        win.add(t_end - t_w, n - n_w, u_w, _usage())
    it = None  # an unfinished epoch's workers are shut down and joined here
    gc.collect()
    out = {"count": n, "finished": not stopped, "epoch_s": t_end - t0, "label_sum": int(lab), "x0_sum": int(x0)}
    if t_w is not None and t_end > t_w:
        out["steady_samples_per_s"] = (n - n_w) / (t_end - t_w)
    return out


def measure(make: Callable[[], Any], cfg: dict, info: dict) -> dict:
    """Build the loader with ``make()``, run ``cfg['warmup']`` untimed epochs, then timed ones until
    ``cfg['epochs']`` finished and the windows reach ``cfg['window_s']`` (see the module docstring)."""
    import torch

    mode = cfg.get("mode", "unpinned")
    on_gpu = mode in ("pinned", "device")
    sync = torch.cuda.synchronize if on_gpu else (lambda: None)
    move = mover(mode)
    t = time.perf_counter()
    loader = make()
    open_s = time.perf_counter() - t
    for _ in range(cfg.get("warmup", 0)):
        _epoch(loader, dict(cfg, window_s=0, max_s=None), cfg["skip"], Window(), move, sync, time.perf_counter())
    win, epochs = Window(), []
    kids0, t_start = _children_cpu(), time.perf_counter()
    while True:
        skip = cfg["skip"] if not epochs else cfg.get("skip_next", cfg["skip"])
        epochs.append(_epoch(loader, cfg, skip, win, move, sync, t_start))
        done = sum(e["finished"] for e in epochs)
        if not epochs[-1]["finished"] or (done >= cfg.get("epochs", 0) and win.s >= (cfg.get("window_s") or 0)):
            break
    loader = None
    gc.collect()
    return _result(info, cfg, epochs, win, _children_cpu() - kids0, open_s)


def _result(info: dict, cfg: dict, epochs: list[dict], win: Window, workers_cpu_s: float, open_s: float) -> dict:
    """The figures of a run: rates over the steady windows, CPU per MB delivered, the epochs' checks."""
    expect = cfg["expect"]
    finished = [e for e in epochs if e["finished"]]
    for e in finished:
        e["ok"] = all(e[k] == expect[k] for k in ("count", "label_sum", "x0_sum"))
    mb = win.samples * SAMPLE_BYTES / 1e6
    all_mb = sum(e["count"] for e in epochs) * SAMPLE_BYTES / 1e6
    res = dict(info)
    res.update({
        "ok": all(e["ok"] for e in finished), "epochs_finished": len(finished), "epochs": epochs, "open_s": open_s,
        "steady_s": win.s, "steady_samples": win.samples,
        "steady_samples_per_s": win.samples / win.s if win.s else None,
        "GB_per_s": mb / 1e3 / win.s if win.s else None,
        "main_cpu_us_per_MB": win.cpu_s / mb * 1e6 if mb else None,
        "main_minflt_per_MB": win.minflt / mb if mb else None,
        "main_switches_per_MB": win.switches / mb if mb else None,
        "main_cpu_share": win.cpu_s / win.s if win.s else None,
        "workers_cpu_us_per_MB": workers_cpu_s / all_mb * 1e6 if all_mb and workers_cpu_s > 0 else None,
        "delivered_MB": all_mb,
    })
    rate = res["GB_per_s"]
    common.log(f"{cfg['name']}: {res['steady_samples_per_s'] or 0:,.0f} samples/s, {rate or 0:.2f} GB/s over "
               f"{win.s:.2f} s, main CPU {res['main_cpu_us_per_MB'] or 0:,.0f} us/MB; {len(finished)} epochs "
               f"checked, ok={res['ok']}")
    return res


def versions(library: str) -> dict:
    """The library's, torch's, Python's and numpy's versions, and whether CUDA is there."""
    import torch

    out = {"library": library, "torch": torch.__version__, "python": platform.python_version(),
           "numpy": np.__version__, "cuda": torch.cuda.is_available()}
    if library == "shardstream":
        import shardstream

        out["version"] = shardstream.__version__
    elif library == "torch":
        out["version"] = torch.__version__
    return out


# -- the project venv's sides ---------------------------------------------------------------------------
def probe() -> dict:
    """What this checkout's loader offers (the ``transfer`` and ``device`` keywords) and the machine's GPU."""
    import inspect

    import torch

    from shardstream import StreamingDataLoader

    params = inspect.signature(StreamingDataLoader.__init__).parameters
    out = versions("shardstream")
    out.update({"transfer": "transfer" in params, "device": "device" in params,
                "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
                "torch_cuda": torch.version.cuda})
    return out


class ReadyBatches:
    """torch's own mechanism, without decoding: ``ds[i]`` is batch ``i`` sliced out of the arrays in
    memory and copied (``.clone()``, in the worker), so what is measured is the crossing of torch's
    shared-memory tensors and queue."""

    def __init__(self, x: np.ndarray, labels: np.ndarray, batch: int) -> None:
        self.x, self.labels, self.batch = x, labels, batch

    def __len__(self) -> int:
        return len(self.labels) // self.batch

    def __getitem__(self, i: int) -> dict:
        import torch

        s = slice(i * self.batch, (i + 1) * self.batch)
        return {"x": torch.from_numpy(self.x[s]).clone(), "label": torch.from_numpy(self.labels[s]).clone()}


def make_torch(cfg: dict) -> Callable[[], Any]:
    """torch's ``DataLoader(ReadyBatches, batch_size=None, sampler=RandomSampler)`` over the source arrays."""
    from torch.utils.data import DataLoader, RandomSampler

    import bench_loader

    x, labels = bench_loader.load(cfg["npz"])
    ds = ReadyBatches(x, labels, cfg["batch"])
    return lambda: DataLoader(ds, batch_size=None, sampler=RandomSampler(ds), num_workers=cfg["workers"],
                              pin_memory=cfg.get("mode") == "pinned", persistent_workers=cfg.get("persistent", False))


def make_shardstream(cfg: dict) -> Callable[[], Any]:
    """shardstream's ``StreamingDataLoader`` with the case's options (``transfer``, pinning, ``device``)."""
    from shardstream import StreamingDataLoader, StreamingDataset

    def make():
        ds = StreamingDataset(local=cfg["path"], shuffle=True, batch_size=cfg["batch"])
        kw: dict[str, Any] = dict(cfg.get("options") or {})
        if cfg.get("mode") == "pinned":
            kw["pin_memory"] = True
        elif cfg.get("mode") == "device":
            kw["device"] = "cuda"
        return StreamingDataLoader(ds, batch_size=cfg["batch"], num_workers=cfg["workers"],
                                   persistent_workers=cfg.get("persistent", False), **kw)

    return make


def main() -> None:
    with open(sys.argv[1]) as f:
        cfg = json.load(f)
    if cfg["task"] == "probe":
        common.emit(probe(), cfg["out"])
        return
    info = versions(cfg["library"])
    if cfg["task"] == "collate":
        import bench_loader
        from shardstream import StreamingDataLoader, StreamingDataset

        def make_collate():
            ds = StreamingDataset(local=cfg["path"], shuffle=True, batch_size=cfg["batch"])
            return ds, StreamingDataLoader(ds, batch_size=cfg["batch"], num_workers=cfg["workers"],
                                           collate_fn=collate)

        res = bench_loader.throughput(cfg, make_collate, info)
    else:
        make = make_torch(cfg) if cfg["library"] == "torch" else make_shardstream(cfg)
        res = measure(make, cfg, info)
    common.emit(res, cfg["out"])


if __name__ == "__main__":
    main()
