"""The text LM input pipeline: the measuring children of ``bench/bench_pipeline.py`` (project venv).

    python bench/bench_pipeline_sides.py CONFIG.json

One child per measurement: Hugging Face ``datasets`` streaming or shardstream, one task each
(``throughput``: one timed epoch; ``resume``: checkpoints at 10/50/90 % of an epoch, then
``load_state_dict`` -> first batch and the next batches compared with the uninterrupted epoch's).
The result is written to ``CONFIG['out']`` as JSON. Grain's child (``bench_pipeline_peers.py``,
peer venv) imports the measuring helpers of the first section, so this module imports only the
stdlib and numpy at import time.

Every side runs the same pipeline over the same documents with the same ``tokenizer.json``:
shuffle (buffer 10,000, seed 0) -> tokenize in batches of 1,000, one end-of-document token
appended -> concatenate and chunk into rows of 1,024 tokens (the last one padded) -> batches
of 8 rows. An epoch's batches are checked against the generator's token count and id sum.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import resource
import sys
import time
from typing import Any, Callable, Iterator

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)
from common import log  # noqa: E402

SEQ_LEN = 1024
BATCH = 8
BUFFER = 10_000
MAP_BATCH = 1000
SEED = 0
FOLLOW = 20  # batches compared after a resumption


# -- shared with Grain's child (stdlib + numpy) -----------------------------------------------------------
def load_config(path: str) -> dict:
    with open(path) as f:
        return json.load(f)


def pin(cfg: dict) -> list[int]:
    """Run on ``cfg['cpus']`` (every side on the same cores; tokenizers' threads follow)."""
    cpus = cfg.get("cpus")
    if cpus and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, set(cpus))
    return sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []


def info(library: str, version: str, **more: Any) -> dict:
    return {"library": library, "version": version, "python": platform.python_version(), "numpy": np.__version__,
            **more}


def tokens_of(batch: dict) -> tuple[np.ndarray, np.ndarray]:
    """``(input_ids, mask of the real tokens)`` of a batch of packed rows, whatever the side calls them."""
    ids = np.asarray(batch["input_ids"])
    for name in ("attention_mask", "input_ids_segment_ids", "segment_ids"):
        if name in batch:
            return ids, np.asarray(batch[name]) > 0
    raise KeyError(f"no mask of the real tokens among {sorted(batch)}")


def digest(ids: np.ndarray, mask: np.ndarray) -> str:
    """A batch's fingerprint: its real tokens, row by row (padding and dtype left out)."""
    h = hashlib.sha1()
    for row, m in zip(ids, mask):
        h.update(np.ascontiguousarray(row[m], dtype=np.int64).tobytes())
        h.update(b"|")
    return h.hexdigest()[:16]


def epoch(batches: Iterator[dict], timeout_s: float, t0: float) -> dict:
    """Consume one epoch of batches: real tokens, slots, id sum, time to the first batch and the steady
    rate after it (warm-up, i.e. the shuffle buffer's fill, excluded). ``t0``: when the pipeline was built."""
    tokens = slots = total = n = 0
    first_s = first_tokens = None
    start = time.perf_counter()
    cpu0 = time.process_time()
    timed_out = False
    for b in batches:
        ids, mask = tokens_of(b)
        real = int(mask.sum())
        tokens += real
        slots += ids.size
        total += int(ids[mask].sum(dtype=np.int64))
        n += 1
        if first_s is None:
            first_s, first_tokens = time.perf_counter() - start, tokens
            if ids.shape[1:] != (SEQ_LEN,):
                raise SystemExit(f"rows of {ids.shape[1:]} tokens, expected ({SEQ_LEN},)")
        if time.perf_counter() - start > timeout_s:
            timed_out = True
            break
    took = time.perf_counter() - start
    steady_s = took - (first_s or 0.0)
    out = {"batches": n, "tokens": tokens, "slots": slots, "token_sum": total, "packing_efficiency": tokens / slots,
           "first_batch_s": first_s, "epoch_s": took, "since_build_s": time.perf_counter() - t0,
           "tokens_per_s": tokens / took, "steady_tokens_per_s": (tokens - first_tokens) / steady_s if n > 1 else None,
           "cpu_s": time.process_time() - cpu0, "timed_out": timed_out,
           "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}
    log(f"   {n:,} batches, {tokens:,} tokens in {took:.1f}s: {out['tokens_per_s']:,.0f} tokens/s "
        f"(steady {out['steady_tokens_per_s'] or 0:,.0f}; first batch {first_s or 0:.2f}s; "
        f"packing {out['packing_efficiency']:.4f})")
    return out


def check(res: dict, expect: dict) -> dict:
    """``ok`` when the epoch carried every token once (count and id sum) and was not cut short."""
    res["ok"] = (not res["timed_out"] and res["tokens"] == expect["tokens"]
                 and res["token_sum"] == expect["token_sum"])
    if not res["ok"]:
        log(f"!! epoch carried {res['tokens']:,} tokens (sum {res['token_sum']:,}), expected "
            f"{expect['tokens']:,} (sum {expect['token_sum']:,})")
    return res


class Side:
    """One library's pipeline, as the resumption measurement drives it."""

    def make(self) -> Any:
        raise NotImplementedError

    def batches(self, p: Any) -> Iterator[dict]:
        return iter(p)

    def state(self, p: Any) -> Any:
        return p.state_dict()

    def load(self, p: Any, state: Any) -> None:
        p.load_state_dict(state)


def throughput(side: Side, cfg: dict) -> dict:
    t0 = time.perf_counter()
    p = side.make()
    build_s = time.perf_counter() - t0
    res = epoch(side.batches(p), cfg["timeout_s"], t0)
    res["build_s"] = build_s
    return check(res, cfg["expect"])


def record(side: Side, ks: list[int]) -> tuple[dict[int, Any], list[str], dict[int, tuple[int, int]], float]:
    """One uninterrupted epoch: every batch's digest, and after k batches the state (through JSON) and the
    real tokens so far (count, id sum)."""
    p = side.make()
    states: dict[int, Any] = {}
    before: dict[int, tuple[int, int]] = {}
    digests: list[str] = []
    tokens = total = 0
    t = time.perf_counter()
    wanted = set(ks)
    for b in side.batches(p):
        ids, mask = tokens_of(b)
        digests.append(digest(ids, mask))
        tokens += int(mask.sum())
        total += int(ids[mask].sum(dtype=np.int64))
        if len(digests) in wanted:
            states[len(digests)] = json.loads(json.dumps(side.state(p)))
            before[len(digests)] = (tokens, total)
    return states, digests, before, time.perf_counter() - t


def rest_of_epoch(it: Iterator[dict], got: list[str], before: tuple[int, int], expect: dict) -> dict:
    """Finish a resumed epoch: do the tokens before the checkpoint and those after it make the whole epoch?"""
    tokens, total = before
    for b in it:
        ids, mask = tokens_of(b)
        if len(got) < FOLLOW:
            got.append(digest(ids, mask))
        tokens += int(mask.sum())
        total += int(ids[mask].sum(dtype=np.int64))
    return {"epoch_tokens": tokens, "epoch_token_sum": total,
            "epoch_complete": tokens == expect["tokens"] and total == expect["token_sum"]}


def resume(side: Side, cfg: dict) -> dict:
    """Per position: checkpoint bytes; per repeat a new pipeline, ``load_state_dict`` -> first batch (timed),
    and the next ``FOLLOW`` batches compared with the uninterrupted epoch's; the first repeat also reads the
    rest of the epoch and checks that, with the batches before the checkpoint, it carried every token once."""
    ks = cfg["positions"]
    states, ref, before, pass_s = record(side, ks)
    out = {"record_pass_s": pass_s, "epoch_batches": len(ref), "positions": {}}
    for k in ks:
        if k not in states:
            continue
        runs = []
        for rep in range(cfg["repeats"]):
            t0 = time.perf_counter()
            p = side.make()
            t1 = time.perf_counter()
            side.load(p, states[k])
            it = side.batches(p)
            ids, mask = tokens_of(next(it))
            t2 = time.perf_counter()
            got = [digest(ids, mask)]
            run = {"construct_s": t1 - t0, "load_to_first_s": t2 - t1}
            if rep == 0:
                first = (before[k][0] + int(mask.sum()), before[k][1] + int(ids[mask].sum(dtype=np.int64)))
                run.update(rest_of_epoch(it, got, first, cfg["expect"]))
            else:
                for b in it:
                    got.append(digest(*tokens_of(b)))
                    if len(got) == FOLLOW:
                        break
            want = ref[k:k + FOLLOW]
            run.update(compared=len(want), equal=sum(a == b for a, b in zip(got, want)), first_equal=got[0] == want[0])
            runs.append(run)
        secs = sorted(r["load_to_first_s"] for r in runs)
        out["positions"][str(k)] = {
            "consumed_batches": k, "fraction": k / len(ref), "checkpoint_bytes": len(json.dumps(states[k])),
            "runs": runs, "median_s": secs[len(secs) // 2], "equal_min": min(r["equal"] for r in runs),
            "compared": runs[0]["compared"], "epoch_complete": runs[0]["epoch_complete"],
            "epoch_tokens": runs[0]["epoch_tokens"]}
        r = out["positions"][str(k)]
        log(f"   resume after {k:,} batches: first batch median {r['median_s'] * 1e3:,.0f} ms, "
            f"{r['equal_min']}/{r['compared']} next batches equal, epoch complete: {r['epoch_complete']} "
            f"({r['epoch_tokens']:,} tokens), checkpoint {r['checkpoint_bytes']:,} B")
    return out


# -- Hugging Face datasets -----------------------------------------------------------------------------
def hf_tokenize_fn(tokenizer: str, how: str) -> Callable[[dict], dict]:
    """The batched map function: ``tokenizers`` directly, or the transformers fast tokenizer over it."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(tokenizer)
    eos = tok.token_to_id("<|endoftext|>")
    if how == "tokenizers":
        def tok_fn(batch: dict) -> dict:
            return {"input_ids": [e.ids + [eos] for e in tok.encode_batch(batch["text"])]}
    else:
        from transformers import PreTrainedTokenizerFast

        fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>")

        def tok_fn(batch: dict) -> dict:
            ids = fast(batch["text"], return_attention_mask=False)["input_ids"]
            return {"input_ids": [x + [eos] for x in ids]}
    return tok_fn


def group_texts(rows: Iterator[dict], buf: list[int]) -> Iterator[list[int]]:
    """Concatenate ``input_ids`` and cut rows of ``SEQ_LEN`` (the run_clm recipe, written as a generator);
    ``buf`` holds what is not yet cut (the packer's state); the last row is the remainder."""
    while True:
        while len(buf) >= SEQ_LEN:
            row = buf[:SEQ_LEN]
            del buf[:SEQ_LEN]
            yield row
        ex = next(rows, None)
        if ex is None:
            break
        buf.extend(ex["input_ids"])
    if buf:
        row = buf[:]
        del buf[:]
        yield row


def batches_of(rows: Iterator[list[int]]) -> Iterator[dict]:
    """Rows -> ``{"input_ids", "attention_mask"}`` numpy batches of ``BATCH`` (the last row padded with 0)."""
    chunk: list[list[int]] = []
    for row in rows:
        chunk.append(row)
        if len(chunk) == BATCH:
            yield _stack(chunk)
            chunk = []
    if chunk:
        yield _stack(chunk)


def _stack(rows: list[list[int]]) -> dict:
    if all(len(r) == SEQ_LEN for r in rows):
        return {"input_ids": np.array(rows, np.int32), "attention_mask": np.ones((len(rows), SEQ_LEN), np.int8)}
    ids = np.zeros((len(rows), SEQ_LEN), np.int32)
    mask = np.zeros((len(rows), SEQ_LEN), np.int8)
    for i, r in enumerate(rows):
        ids[i, :len(r)] = r
        mask[i, :len(r)] = 1
    return {"input_ids": ids, "attention_mask": mask}


class HFPipeline:
    def __init__(self, ds) -> None:
        self.ds = ds
        self.buf: list[int] = []


class HFSide(Side):
    def __init__(self, cfg: dict) -> None:
        self.files, self.tok_fn = cfg["files"], hf_tokenize_fn(cfg["tokenizer"], cfg["tokenize"])
        self.builder = cfg["format"]

    def make(self) -> HFPipeline:
        from datasets import load_dataset

        ds = load_dataset(self.builder, data_files=self.files, split="train", streaming=True)
        ds = ds.shuffle(buffer_size=BUFFER, seed=SEED).map(self.tok_fn, batched=True, batch_size=MAP_BATCH,
                                                           remove_columns=["text"])
        return HFPipeline(ds)

    def batches(self, p: HFPipeline) -> Iterator[dict]:
        return batches_of(group_texts(iter(p.ds), p.buf))

    def state(self, p: HFPipeline) -> dict:
        """The dataset's state and the packer's uncut tokens (HF has no packer: kept by hand, as a user would)."""
        return {"dataset": p.ds.state_dict(), "packer_tokens": list(p.buf)}

    def load(self, p: HFPipeline, state: dict) -> None:
        p.ds.load_state_dict(state["dataset"])
        p.buf[:] = state["packer_tokens"]


def hf_child(cfg: dict) -> dict:
    t = time.perf_counter()
    import datasets

    out = info("datasets", datasets.__version__, import_s=time.perf_counter() - t, tokenize=cfg["tokenize"])
    side = HFSide(cfg)
    out.update(throughput(side, cfg) if cfg["task"] == "throughput" else resume(side, cfg))
    return out


# -- shardstream ----------------------------------------------------------------------------------------
class OursSide(Side):
    def __init__(self, cfg: dict) -> None:
        self.cfg = cfg

    def make(self) -> Any:
        import shardstream
        from shardstream import Tokenize

        cfg = self.cfg
        if cfg["format"] == "json":
            ds = shardstream.load_dataset("json", data_files=cfg["files"], split="train")
        else:
            ds = shardstream.StreamingDataset(local=cfg["files"])
        p = (ds.shuffle(seed=SEED, buffer_size=BUFFER)
             .map(Tokenize(cfg["tokenizer"], append_eos=True), batched=True, batch_size=MAP_BATCH,
                  remove_columns=["text"])
             .pack(SEQ_LEN))
        if cfg.get("loader"):
            return shardstream.AsyncDataLoader(p, batch_size=BATCH, **cfg["loader"])
        return p.batch(BATCH).with_format("numpy")


def ours_child(cfg: dict) -> dict:
    t = time.perf_counter()
    import shardstream

    out = info("shardstream", shardstream.__version__, import_s=time.perf_counter() - t,
               source=os.path.dirname(os.path.dirname(shardstream.__file__)))
    side = OursSide(cfg)
    out.update(throughput(side, cfg) if cfg["task"] == "throughput" else resume(side, cfg))
    return out


# -- the tokenizer alone ---------------------------------------------------------------------------------
def baseline_child(cfg: dict) -> dict:
    """The floor under every side: ``encode_batch`` over the documents (read into memory first, untimed) in
    batches of ``MAP_BATCH``, in file order, nothing else (no shuffle, packing or batching)."""
    import pyarrow.json as pj
    import tokenizers
    from tokenizers import Tokenizer

    texts: list[str] = []
    for f in cfg["files"]:
        texts.extend(pj.read_json(f).column("text").to_pylist())
    tok = Tokenizer.from_file(cfg["tokenizer"])
    n = 0
    t, cpu0 = time.perf_counter(), time.process_time()
    for i in range(0, len(texts), MAP_BATCH):
        n += sum(len(e.ids) + 1 for e in tok.encode_batch(texts[i:i + MAP_BATCH]))
    took = time.perf_counter() - t
    log(f"   tokenizer alone: {n:,} tokens in {took:.1f}s: {n / took:,.0f} tokens/s")
    return info("tokenizers", tokenizers.__version__, tokens=n, epoch_s=took, tokens_per_s=n / took,
                steady_tokens_per_s=None, first_batch_s=None, packing_efficiency=None,
                cpu_s=time.process_time() - cpu0, peak_rss_mb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                ok=n == cfg["expect"]["tokens"])


def main() -> None:
    cfg = load_config(sys.argv[1])
    cpus = pin(cfg)
    res = {"hf": hf_child, "shardstream": ours_child, "baseline": baseline_child}[cfg["library"]](cfg)
    res["cpus"] = cpus
    import common

    common.emit(res, cfg["out"])


if __name__ == "__main__":
    main()
