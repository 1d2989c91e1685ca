"""Shuffled DataLoader epochs and mid-epoch resumption over Parquet files (project venv).

Called by the children of ``bench_files_sides.py`` (tasks ``shuffled`` and ``resume``):

- *Shuffled epoch*: shardstream's ``StreamingDataLoader(ds, batch_size=B, num_workers=2)`` over
  ``StreamingDataset(local=..., batch_size=B, shuffle=True)``, against Hugging Face streaming
  ``.shuffle(seed=..., buffer_size=10_000)`` through ``torch.utils.data.DataLoader(num_workers=2)``
  with a collate that builds the batch shardstream's loader gives by default (``id`` tensor,
  ``tokens`` padded with zeros plus ``tokens_lengths``, ``text`` list). Each epoch is timed from
  ``iter(loader)`` (worker start included) to its last batch; one still running after
  ``epoch_timeout_s`` is abandoned and reported as not finished, with the rows it read.
- *Resumption*: one pass in file order records ``state_dict()`` after k rows (10/50/90 % of the
  epoch); then, per position and repeat, a new dataset object, and the time from
  ``load_state_dict(state)`` to the first sample of ``next(iter(ds))``, which must be row k.
"""

from __future__ import annotations

import statistics
import time
from typing import Any, Callable

import numpy as np

from bench_files_sides import hf_open, log, ss_dataset

HF_BUFFER = 10_000
WORKERS = 2


# -- shuffled epochs -------------------------------------------------------------------------------
def pad_collate(samples: list[dict]) -> dict[str, Any]:
    """HF samples -> the batch form of shardstream's StreamingDataLoader (``ragged='pad'``)."""
    import torch

    lengths = [len(s["tokens"]) for s in samples]
    tokens = np.zeros((len(samples), max(lengths)), np.int32)
    for row, s in enumerate(samples):
        tokens[row, :lengths[row]] = s["tokens"]
    return {"id": torch.tensor([s["id"] for s in samples], dtype=torch.int64), "tokens": torch.from_numpy(tokens),
            "tokens_lengths": torch.tensor(lengths, dtype=torch.int64), "text": [s["text"] for s in samples]}


def loader_epoch(loader, limit: int, timeout_s: float) -> dict:
    """One epoch (at most ``limit`` rows): rows, sums of ``id`` and token counts, times. An epoch still
    short of ``limit`` rows after ``timeout_s`` is abandoned (``timed_out``: it did not finish)."""
    n = ids = toks = 0
    first_batch_s = None
    timed_out = False
    t = time.perf_counter()
    for b in loader:
        take = min(len(b["id"]), limit - n)
        ids += int(b["id"][:take].sum())
        toks += int(b["tokens_lengths"][:take].sum())
        n += take
        if first_batch_s is None:
            first_batch_s = time.perf_counter() - t
        if n >= limit:
            break
        if time.perf_counter() - t > timeout_s:
            timed_out = True
            break
    took = time.perf_counter() - t
    return {"count": n, "id_sum": ids, "tok_sum": toks, "seconds": took, "rows_per_s": n / took,
            "first_batch_s": first_batch_s, "timed_out": timed_out}


def epochs(make_loader: Callable[[], Any], cfg: dict) -> dict:
    """Up to ``cfg['epochs']`` epochs of one loader object (no new one once they took ``cfg['budget_s']``);
    median rows/s; checks every epoch."""
    loader = make_loader()
    runs = []
    whole = cfg["limit"] == cfg["total"]
    for e in range(cfg["epochs"]):
        if hasattr(loader.dataset, "set_epoch"):
            loader.dataset.set_epoch(e)
        r = loader_epoch(loader, cfg["limit"], cfg["epoch_timeout_s"])
        r["ok"] = r["count"] == cfg["limit"] and (not whole or (r["id_sum"], r["tok_sum"]) == (
            cfg["expect"]["id_sum"], cfg["expect"]["tok_sum"]))
        runs.append(r)
        stop = r["timed_out"] or (cfg.get("budget_s") and sum(x["seconds"] for x in runs) >= cfg["budget_s"])
        log(f"   epoch {e}: {r['count']:,} rows in {r['seconds']:.2f}s = {r['rows_per_s']:,.0f} rows/s "
            f"(first batch after {r['first_batch_s']:.2f}s); ok={r['ok']}")
        if stop:
            break
    if runs[-1]["timed_out"]:
        return {"epochs": runs, "timed_out": True, "ok": False, "rows_read": runs[-1]["count"],
                "seconds": runs[-1]["seconds"], "observed_rows_per_s": runs[-1]["rows_per_s"]}
    med = statistics.median(r["seconds"] for r in runs)
    return {"epochs": runs, "repeats": len(runs), "stat": "median", "seconds": med, "rows": cfg["limit"],
            "rows_per_s": cfg["limit"] / med, "ok": all(r["ok"] for r in runs), "batch_size": cfg["batch_size"],
            "num_workers": WORKERS, "checked": "count, id sum, token sum" if whole else "count"}


def ss_shuffled(cfg: dict, files: str) -> dict:
    from shardstream import StreamingDataLoader

    options = cfg.get("loader_options", {})

    def make():
        ds = ss_dataset(cfg, files, batch_size=cfg["batch_size"], shuffle=True, shuffle_seed=cfg["seed"])
        return StreamingDataLoader(ds, batch_size=cfg["batch_size"], num_workers=WORKERS, **options)

    res = epochs(make, cfg)
    res["loader_options"] = options
    return res


def hf_shuffled(cfg: dict) -> dict:
    from torch.utils.data import DataLoader

    def make():
        ds = hf_open("parquet", cfg["files"]).shuffle(seed=cfg["seed"], buffer_size=HF_BUFFER)
        return DataLoader(ds, batch_size=cfg["batch_size"], num_workers=WORKERS, collate_fn=pad_collate)

    res = epochs(make, cfg)
    res["buffer_size"] = HF_BUFFER
    return res


# -- resumption ------------------------------------------------------------------------------------------
def record_states(ds, ks: list[int]) -> tuple[dict[int, Any], dict[int, int], float]:
    """One pass of ``ds`` up to the largest k: the state after k rows and the id of row k (the next)."""
    states, next_ids = {}, {}
    wanted = set(ks)
    n = 0
    t = time.perf_counter()
    it = iter(ds)
    for s in it:
        if n in states:
            next_ids[n] = int(s["id"])
        n += 1
        if n in wanted:
            states[n] = ds.state_dict()
        if n > max(ks):
            break
    close = getattr(it, "close", None)
    if close is not None:
        close()
    return states, next_ids, time.perf_counter() - t


def resume_times(make: Callable[[], Any], states: dict, next_ids: dict, repeats: int) -> dict:
    """Per position: new dataset (timed apart), then ``load_state_dict`` -> first sample, ``repeats`` times."""
    out = {}
    for k in sorted(states):
        runs = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            ds = make()
            t1 = time.perf_counter()
            ds.load_state_dict(states[k])
            it = iter(ds)
            s = next(it)
            t2 = time.perf_counter()
            close = getattr(it, "close", None)
            if close is not None:
                close()
            runs.append({"construct_s": t1 - t0, "load_to_first_s": t2 - t1, "first_id": int(s["id"])})
        secs = [r["load_to_first_s"] for r in runs]
        ok = all(r["first_id"] == next_ids.get(k) for r in runs)
        out[str(k)] = {"consumed": k, "runs": runs, "median_s": statistics.median(secs), "first_s": secs[0],
                       "construct_median_s": statistics.median(r["construct_s"] for r in runs),
                       "expect_id": next_ids.get(k), "ok": ok}
        log(f"   resume after {k:,} rows: load_state_dict -> first sample median "
            f"{out[str(k)]['median_s'] * 1e3:,.1f} ms ({', '.join(f'{x * 1e3:.1f}' for x in secs)}); ok={ok}")
    return out


def ss_resume(cfg: dict, files: str) -> dict:
    shuffle = cfg.get("shuffle", False)

    def make():
        return ss_dataset(cfg, files, batch_size=cfg["batch_size"], shuffle=shuffle, shuffle_seed=cfg["seed"])

    states, next_ids, pass_s = record_states(make(), cfg["positions"])
    return {"positions": resume_times(make, states, next_ids, cfg["repeats"]), "record_pass_s": pass_s,
            "shuffle": shuffle}


def hf_resume(cfg: dict) -> dict:
    def make():
        return hf_open("parquet", cfg["files"])

    states, next_ids, pass_s = record_states(make(), cfg["positions"])
    return {"positions": resume_times(make, states, next_ids, cfg["repeats"]), "record_pass_s": pass_s,
            "shuffle": False}
