"""Train a tiny causal language model in Flax NNX on packed text streamed by shardstream, checkpoint
it, and resume from the checkpoint with exactly the batches an uninterrupted run reads.

    python examples/jax_lm.py [--docs 3000] [--steps 24] [--save-at 12] [--dir lm-demo]

The pipeline is the one of a Hugging Face streaming training script, on local JSON Lines files:

    StreamingDataset(local=...)                      # JSON Lines files, read by byte ranges
      .shuffle(seed=42, buffer_size=1000)            # a shuffle buffer over the shuffled plan
      .map(Tokenize(tok, append_eos=True), batched=True, batch_size=1000, remove_columns=["text"])
      .pack(seq_len=128)                             # rows of 128 tokens with segment and position ids
    AsyncDataLoader(chain, batch_size=8, format="jax")  # batches made ahead in a thread, as jax arrays

The tokenizer is a small byte-level BPE trained here (``shardstream.testing.text.tiny_tokenizer``):
nothing is downloaded. The model is one pre-norm transformer block whose attention mask keeps each
token to the earlier tokens of its own document (the packed row's ``segment_ids``), with learned
position embeddings indexed by ``position_ids``; it trains with optax's adamw on CPU.

At step ``--save-at`` the run writes a checkpoint: the loader's ``state_dict()`` as JSON with the step,
and the model's and optimizer's arrays with numpy. A new loader and a new model then load it and train
to ``--steps``: the batches and the losses after the checkpoint must equal the uninterrupted run's.
Needs jax, flax and optax (``pip install flax optax``) and the ``text`` extra.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import tempfile
import time

import jax
import numpy as np
import optax
from flax import nnx

from shardstream import AsyncDataLoader, StreamingDataset
from shardstream.testing.text import generated_texts, tiny_tokenizer
from shardstream.text import Tokenize

SEQ_LEN, BATCH, VOCAB = 128, 8, 512
# One optax transform for every optimizer: a new one per optimizer would make each new optimizer
# compile the step again (the step's cache compares the transforms' functions by identity).
ADAMW = optax.adamw(3e-3)


def write_jsonl(root: str, docs: int, files: int = 4) -> str:
    """``docs`` English-like documents as ``{"id", "text"}`` rows in ``files`` JSON Lines files."""
    out = os.path.join(root, "docs")
    os.makedirs(out, exist_ok=True)
    texts = generated_texts(docs, seed=0, max_sentences=12)
    for f in range(files):
        with open(os.path.join(out, f"part-{f:03d}.jsonl"), "w") as fh:
            fh.writelines(json.dumps({"id": i, "text": texts[i]}) + "\n" for i in range(f, docs, files))
    return out


def make_loader(docs: str, tokenizer, state: dict | None = None) -> AsyncDataLoader:
    """The streaming pipeline (see the module docstring), resumed from ``state`` if given."""
    chain = (StreamingDataset(local=docs)
             .shuffle(seed=42, buffer_size=1000)
             .map(Tokenize(tokenizer, append_eos=True), batched=True, batch_size=1000, remove_columns=["text"])
             .pack(seq_len=SEQ_LEN))
    loader = AsyncDataLoader(chain, batch_size=BATCH, format="jax", drop_last=True)
    if state is not None:
        loader.load_state_dict(state)  # refused if the chain differs (its fingerprint is in the state)
    return loader


class TinyLM(nnx.Module):
    """Token and position embeddings, one pre-norm transformer block, and a head over the vocabulary."""

    def __init__(self, rngs: nnx.Rngs, dim: int = 64, heads: int = 4) -> None:
        self.embed = nnx.Embed(VOCAB, dim, rngs=rngs)
        self.pos = nnx.Embed(SEQ_LEN, dim, rngs=rngs)
        self.norm1, self.norm2, self.norm3 = (nnx.LayerNorm(dim, rngs=rngs) for _ in range(3))
        self.attn = nnx.MultiHeadAttention(heads, dim, decode=False, rngs=rngs)
        self.up, self.down = nnx.Linear(dim, 4 * dim, rngs=rngs), nnx.Linear(4 * dim, dim, rngs=rngs)
        self.head = nnx.Linear(dim, VOCAB, rngs=rngs)

    def __call__(self, ids, segments, positions):
        x = self.embed(ids) + self.pos(positions)
        # Each token sees the earlier tokens of its own document only (padding is segment 0).
        mask = nnx.combine_masks(nnx.make_causal_mask(ids),
                                 nnx.make_attention_mask(segments, segments, jax.numpy.equal))
        x = x + self.attn(self.norm1(x), mask=mask)
        x = x + self.down(nnx.gelu(self.up(self.norm2(x))))
        return self.head(self.norm3(x))


def build_model(seed: int = 0) -> tuple[TinyLM, nnx.Optimizer]:
    """The model and its adamw optimizer, initialised from ``seed``."""
    model = TinyLM(nnx.Rngs(seed))
    return model, nnx.Optimizer(model, ADAMW, wrt=nnx.Param)


def loss_fn(model: TinyLM, batch: dict):
    """Mean next-token cross-entropy. A target counts when it continues the document of the token before
    it (not padding, not the first token of the next document) and the packer's loss mask keeps it."""
    ids, seg = batch["input_ids"], batch["segment_ids"]
    logits = model(ids, seg, batch["position_ids"])[:, :-1]
    keep = (seg[:, 1:] == seg[:, :-1]) & (seg[:, 1:] > 0) & (batch["loss_mask"][:, 1:] > 0)
    losses = optax.softmax_cross_entropy_with_integer_labels(logits, ids[:, 1:])
    return (losses * keep).sum() / keep.sum()


@nnx.jit
def train_step(model: TinyLM, optimizer: nnx.Optimizer, batch: dict):
    loss, grads = nnx.value_and_grad(loss_fn)(model, batch)
    optimizer.update(model, grads)
    return loss


def save_arrays(path: str, *modules) -> None:
    """The arrays of ``modules`` (model, optimizer) with numpy, written to a temporary file and renamed."""
    leaves = jax.tree_util.tree_leaves([nnx.state(m) for m in modules])
    tmp = path + ".tmp.npz"
    np.savez(tmp, *[np.asarray(x) for x in leaves])
    os.replace(tmp, path)


def load_arrays(path: str, *modules) -> None:
    """Put the arrays :func:`save_arrays` wrote into ``modules`` (built with the same structure)."""
    states = [nnx.state(m) for m in modules]
    with np.load(path) as saved:
        leaves = [saved[f"arr_{i}"] for i in range(len(saved.files))]
    for module, state in zip(modules, jax.tree_util.tree_unflatten(jax.tree_util.tree_structure(states), leaves)):
        nnx.update(module, state)


def digest(batch: dict) -> str:
    h = hashlib.blake2b(digest_size=8)
    for name in ("input_ids", "segment_ids", "position_ids", "loss_mask"):
        h.update(np.asarray(batch[name]).tobytes())
    return h.hexdigest()


def train(loader, model, optimizer, first: int, last: int, checkpoint: str | None = None,
          save_at: int = -1) -> tuple[list[float], list[str]]:
    """Steps ``first`` .. ``last - 1`` on the loader's batches; returns each step's loss and batch digest.
    When ``save_at`` steps are done it writes the checkpoint ``checkpoint``. Prints the tokens per second
    after the first step (which compiles the step)."""
    losses, seen = [], []
    start = None
    for step, batch in zip(range(first, last), loader):
        loss = float(train_step(model, optimizer, batch))
        losses.append(loss)
        seen.append(digest(batch))
        start = start or time.perf_counter()
        if step % 4 == 0:
            print(f"  step {step:3d}  loss {loss:.4f}")
        if step + 1 == save_at:
            save_arrays(checkpoint + ".npz", model, optimizer)
            tmp = checkpoint + ".json.tmp"
            with open(tmp, "w") as f:
                json.dump({"step": step + 1, "loader": loader.state_dict()}, f)  # the batches consumed so far
            os.replace(tmp, checkpoint + ".json")
            print(f"  checkpoint after {step + 1} steps: {os.path.getsize(checkpoint + '.json')} bytes of loader "
                  "state (JSON) and the arrays of the model and the optimizer (numpy)")
    loader.close()
    if len(losses) > 1:
        took = time.perf_counter() - start
        print(f"  {(len(losses) - 1) * BATCH * SEQ_LEN / took:,.0f} tokens/s (reading, tokenizing, packing, training)")
    return losses, seen


def run(root: str, docs: int, steps: int, save_at: int) -> bool:
    start = time.perf_counter()
    data = write_jsonl(root, docs)
    tokenizer = tiny_tokenizer(VOCAB)
    checkpoint = os.path.join(root, "checkpoint")
    print(f"{docs} documents in JSON Lines; a {VOCAB}-token BPE trained in {time.perf_counter() - start:.1f}s")

    print(f"uninterrupted run, {steps} steps of {BATCH} x {SEQ_LEN} tokens:")
    model, optimizer = build_model()
    losses, seen = train(make_loader(data, tokenizer), model, optimizer, 0, steps, checkpoint, save_at)
    print(f"  loss {losses[0]:.3f} -> {losses[-1]:.3f}")

    print(f"a new loader and model resume from the checkpoint of step {save_at}:")
    with open(checkpoint + ".json") as f:
        saved = json.load(f)
    model, optimizer = build_model(seed=1)  # other initial weights: the checkpoint must replace them
    load_arrays(checkpoint + ".npz", model, optimizer)
    resumed_losses, resumed = train(make_loader(data, tokenizer, saved["loader"]), model, optimizer,
                                    saved["step"], steps)
    same_batches = resumed == seen[save_at:]
    same_losses = np.allclose(resumed_losses, losses[save_at:], rtol=1e-5, atol=1e-6)
    print(f"resumed identically: {len(resumed)} batches compared, {'equal' if same_batches else 'DIFFERENT'}; "
          f"losses {'equal' if same_losses else 'DIFFERENT'} to the uninterrupted run's")
    return same_batches and same_losses and len(resumed) == steps - save_at and losses[-1] < losses[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--docs", type=int, default=3000)
    parser.add_argument("--steps", type=int, default=24)
    parser.add_argument("--save-at", type=int, default=12)
    parser.add_argument("--dir", default=None)
    args = parser.parse_args()
    if not 0 < args.save_at < args.steps:
        parser.error(f"--save-at={args.save_at} must be between 1 and --steps - 1 ({args.steps - 1})")
    root = tempfile.mkdtemp(prefix="shardstream-lm-", dir=args.dir)
    try:
        if not run(root, args.docs, args.steps, args.save_at):
            raise SystemExit("the resumed run differs from the uninterrupted one (or the loss did not fall)")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
