"""The demo's text section: JSON Lines -> tokenize -> pack -> train a few steps -> kill -> resume identically.

    python examples/demo_text.py [--dir demo-text]     (also run by examples/demo.py)

Writes generated English-like documents as JSON Lines and trains a small byte-level BPE tokenizer on
such text (nothing is downloaded), then streams the documents through one resumable chain:

    StreamingDataset(local=...).shuffle(seed=42, buffer_size=1000)
      .map(Tokenize(tokenizer, append_eos=True), batched=True, batch_size=1000, remove_columns=["text"])
      .pack(seq_len=256).batch(16, drop_last_batch=True).with_format("numpy")

into a bigram softmax model trained by plain numpy SGD (numpy is all it needs besides ``tokenizers``):

1. an uninterrupted run, for reference and for the throughput;
2. a job in a process of its own that writes a checkpoint after every step (the weights, then a JSON
   file with the step, the weights' file and the chain's ``state_dict()``, each written to a temporary
   file and renamed) and is killed with SIGKILL a few steps in;
3. a new process that resumes from the last checkpoint: its batches and losses must be exactly those of
   the uninterrupted run from that step on.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import multiprocessing
import os
import shutil
import signal
import time

import numpy as np

from shardstream import StreamingDataset
from shardstream.errors import MissingDependencyError

VOCAB, SEQ_LEN, BATCH = 512, 256, 16
TITLE = "text: JSON Lines -> tokenize -> pack -> train a few steps -> kill -> resume identically:"


def write_texts(workdir: str, docs: int = 6000) -> tuple[str, str]:
    """``docs`` generated documents in 4 JSON Lines files, and a byte-level BPE tokenizer trained on such
    text, saved as a tokenizer.json; returns both paths."""
    from shardstream.testing.text import generated_texts, tiny_tokenizer

    out = os.path.join(workdir, "texts")
    os.makedirs(out, exist_ok=True)
    texts = generated_texts(docs, seed=0, max_sentences=12)
    for f in range(4):
        with open(os.path.join(out, f"part-{f}.jsonl"), "w") as fh:
            fh.writelines(json.dumps({"id": i, "text": texts[i]}) + "\n" for i in range(f, docs, 4))
    tokenizer = os.path.join(workdir, "tokenizer.json")
    tiny_tokenizer(VOCAB).save(tokenizer)
    return out, tokenizer


def text_chain(data: str, tokenizer: str):
    """Shuffle buffer -> batched tokenization -> packing into rows of SEQ_LEN tokens -> numpy batches."""
    from shardstream.text import Tokenize

    return (StreamingDataset(local=data)
            .shuffle(seed=42, buffer_size=1000)
            .map(Tokenize(tokenizer, append_eos=True), batched=True, batch_size=1000, remove_columns=["text"])
            .pack(seq_len=SEQ_LEN)
            .batch(BATCH, drop_last_batch=True)
            .with_format("numpy"))


def bigram_step(weights: np.ndarray, batch: dict, lr: float = 200.0) -> float:
    """One SGD step of a bigram softmax model (``weights[a]``: the logits of the token after ``a``) on the
    pairs of consecutive tokens of one document (``segment_ids`` tell documents and padding apart);
    ``weights`` is updated in place; returns the loss."""
    ids, seg = batch["input_ids"], batch["segment_ids"]
    keep = (seg[:, 1:] == seg[:, :-1]) & (seg[:, 1:] > 0)
    prev, nxt = ids[:, :-1][keep], ids[:, 1:][keep]
    logits = weights[prev]
    logits -= logits.max(axis=1, keepdims=True)
    probs = np.exp(logits)
    probs /= probs.sum(axis=1, keepdims=True)
    rows = np.arange(len(nxt))
    loss = float(-np.log(probs[rows, nxt] + 1e-9).mean())
    probs[rows, nxt] -= 1
    order = np.argsort(prev, kind="stable")  # the gradient summed per previous token, in one pass
    tokens, starts = np.unique(prev[order], return_index=True)
    weights[tokens] -= lr / len(nxt) * np.add.reduceat(probs[order], starts, axis=0)
    return loss


def save_checkpoint(path: str, step: int, weights: np.ndarray, loader_state: dict) -> None:
    """The weights, then the JSON file ``path`` naming them with the step and the chain's state, each
    written to a temporary file and renamed: whenever the job dies, ``path`` names a whole checkpoint."""
    folder = os.path.dirname(path)
    name = os.path.join(folder, f"weights-{step}.npy")
    with open(name + ".tmp", "wb") as f:
        np.save(f, weights)
    os.replace(name + ".tmp", name)
    with open(path + ".tmp", "w") as f:
        json.dump({"step": step, "weights": name, "loader": loader_state}, f)
    os.replace(path + ".tmp", path)
    old = os.path.join(folder, f"weights-{step - 1}.npy")
    if os.path.exists(old):
        os.remove(old)


def fingerprint(*arrays) -> str:
    h = hashlib.blake2b(digest_size=8)
    for a in arrays:
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()


def train(data: str, tokenizer: str, steps: int, checkpoint: str = "", resume: bool = False):
    """Train the bigram model up to step ``steps`` (from ``checkpoint`` with ``resume``), checkpointing after
    every step if ``checkpoint``; returns each step's loss and batch fingerprint, and the tokens trained on."""
    chain = text_chain(data, tokenizer)
    weights, done = np.zeros((VOCAB, VOCAB), np.float32), 0
    if resume:
        with open(checkpoint) as f:
            saved = json.load(f)
        chain.load_state_dict(saved["loader"])  # refused if the chain (or the tokenizer) changed
        weights, done = np.load(saved["weights"]), saved["step"]
    losses, seen, tokens = [], [], 0
    for batch in chain if done < steps else ():
        losses.append(bigram_step(weights, batch))
        seen.append(fingerprint(batch["input_ids"], batch["segment_ids"], batch["loss_mask"]))
        tokens += int((batch["segment_ids"] > 0).sum())
        done += 1
        if checkpoint:
            save_checkpoint(checkpoint, done, weights, chain.state_dict())
        if done == steps:
            break
    chain.close()
    return losses, seen, tokens


def _job(data: str, tokenizer: str, steps: int, checkpoint: str, resume: bool, report: str) -> None:
    losses, seen, _ = train(data, tokenizer, steps, checkpoint, resume)
    with open(report, "w") as f:
        json.dump({"losses": losses, "batches": seen}, f)


def killed_job(data: str, tokenizer: str, checkpoint: str, kill_after: int) -> int:
    """Start a training job that checkpoints every step, kill it with SIGKILL once it has checkpointed
    ``kill_after`` steps; returns the step of its last checkpoint."""
    job = multiprocessing.get_context("spawn").Process(target=_job, args=(data, tokenizer, 10**9, checkpoint,
                                                                          False, checkpoint + ".report"))
    job.start()
    step = 0
    while step < kill_after:
        if not job.is_alive():
            raise SystemExit("the text training job ended before it was killed")
        time.sleep(0.01)
        if os.path.exists(checkpoint):
            with open(checkpoint) as f:
                step = json.load(f)["step"]
    os.kill(job.pid, signal.SIGKILL)  # mid-epoch, with no chance to clean up
    job.join()
    with open(checkpoint) as f:
        return json.load(f)["step"]


def resumed_job(data: str, tokenizer: str, checkpoint: str, steps: int) -> dict:
    """Resume from ``checkpoint`` in a new process and train to ``steps``; returns its losses and batches."""
    report = checkpoint + ".resumed"
    job = multiprocessing.get_context("spawn").Process(target=_job, args=(data, tokenizer, steps, checkpoint,
                                                                          True, report))
    job.start()
    job.join()
    if job.exitcode != 0:
        raise SystemExit(f"the resumed text training job failed (exit code {job.exitcode})")
    with open(report) as f:
        return json.load(f)


def train_kill_resume(workdir: str, steps: int = 40, kill_after: int = 5) -> None:
    """The section (see the module docstring)."""
    try:
        data, tokenizer = write_texts(workdir)
    except MissingDependencyError as exc:  # tokenizers comes with the demo's environment
        print(f"  skipped: {exc}")
        return
    start = time.perf_counter()
    losses, reference, tokens = train(data, tokenizer, steps)
    took = time.perf_counter() - start
    print(f"  uninterrupted: {steps} batches of {BATCH} x {SEQ_LEN} tokens, {tokens / took:,.0f} tokens/s (read, "
          f"tokenized, packed and trained on); bigram loss {losses[0]:.3f} -> {losses[-1]:.3f}")

    checkpoint = os.path.join(workdir, "text-checkpoint.json")
    step = killed_job(data, tokenizer, checkpoint, kill_after)
    print(f"  job 1 checkpointed after every step and was killed with SIGKILL; its last checkpoint: step {step}")
    resumed = resumed_job(data, tokenizer, checkpoint, steps)
    same = (resumed["batches"] == reference[step:] and len(resumed["batches"]) == steps - step
            and np.allclose(resumed["losses"], losses[step:], rtol=1e-5))
    if not same:
        raise SystemExit("the batches or losses after the resume differ from those of the uninterrupted run")
    print(f"  job 2 resumed from it in a new process to step {steps}: resumed identically: "
          f"{len(resumed['batches'])} batches compared (and their losses)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dir", default="demo-text")
    parser.add_argument("--steps", type=int, default=40)
    args = parser.parse_args()
    if args.steps < 20:
        parser.error(f"--steps={args.steps}: give 20 or more (the first job is killed after 5 steps)")
    print(TITLE)
    try:
        train_kill_resume(args.dir, args.steps)
    finally:
        shutil.rmtree(args.dir, ignore_errors=True)


if __name__ == "__main__":
    main()
