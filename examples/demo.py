"""End-to-end demo: generate a dataset, write MDS shards, stream it back into a
small training loop, and report throughput. Runs on a local directory and a loopback
S3 server it starts itself; no cloud account or download is needed.

    python examples/demo.py [--samples 100000] [--dir demo-data]
"""

from __future__ import annotations

import argparse
import os
import shutil
import time

import numpy as np

import shardstream
from shardstream import MDSWriter, Stream, StreamingDataset, WeightSchedule
from shardstream.plan import Plan, PlanSpec, World
from shardstream.testing import read_world, sample_key

VOCAB = 4096
WORDS = ["stream", "shard", "token", "batch", "epoch", "node", "rank", "cache", "model", "loss"]


def generate(n: int, seed: int = 0):
    """Token sequences of 64..512 int32, a short text, and one of 4 labels. Half of a
    sample's tokens come from its label's quarter of the vocabulary, so it is learnable."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(64, 513, n)
    labels = rng.integers(0, 4, n)
    quarter = VOCAB // 4
    for i in range(n):
        tokens = rng.integers(0, VOCAB, lengths[i], dtype=np.int32)
        tokens[::2] = labels[i] * quarter + tokens[::2] % quarter
        text = " ".join(WORDS[j] for j in rng.integers(0, len(WORDS), 6))
        yield {"tokens": tokens, "text": text, "label": int(labels[i])}


def write(out: str, n: int) -> float:
    columns = {"tokens": "ndarray:int32", "text": "str", "label": "int"}
    start = time.perf_counter()
    with MDSWriter(out=out, columns=columns, compression="zstd", hashes=["xxh64"], size_limit="8mb",
                   exist_ok=True) as writer:
        for sample in generate(n):
            writer.write(sample)
    return time.perf_counter() - start


def train(ds: StreamingDataset, batch_size: int = 256, steps: int = 400) -> tuple[int, float, float]:
    """A bag-of-tokens softmax classifier trained with plain numpy SGD on column batches."""
    rng = np.random.default_rng(1)
    weights = rng.normal(0, 0.01, (VOCAB, 4)).astype(np.float32)
    seen, loss = 0, float("nan")
    start = time.perf_counter()
    for step, batch in enumerate(ds.batches(batch_size, columns=["tokens", "label"])):
        if step == steps:
            break
        tokens, labels = batch["tokens"], batch["label"]
        # Features: normalised token counts per row (from the ragged token column).
        rows = np.repeat(np.arange(len(labels)), tokens.lengths)
        counts = np.bincount(rows * VOCAB + tokens.values, minlength=len(labels) * VOCAB)
        feats = counts.reshape(len(labels), VOCAB).astype(np.float32) / tokens.lengths[:, None]
        logits = feats @ weights
        logits -= logits.max(axis=1, keepdims=True)
        probs = np.exp(logits)
        probs /= probs.sum(axis=1, keepdims=True)
        loss = float(-np.log(probs[np.arange(len(labels)), labels] + 1e-9).mean())
        probs[np.arange(len(labels)), labels] -= 1
        weights -= 20.0 * feats.T @ probs / len(labels)
        seen += len(labels)
        if step % 100 == 0:
            print(f"  step {step:4d}  loss {loss:.4f}")
    return seen, time.perf_counter() - start, loss


def resume_elsewhere(out: str, global_batch: int = 64) -> None:
    """Read half of a shuffled epoch in one process, save the state, resume it on
    2 nodes x 2 ranks x 2 DataLoader workers, and check the rest of the epoch is identical."""
    def make(batch_size: int) -> StreamingDataset:
        return StreamingDataset(local=out, shuffle=True, batch_size=batch_size)

    ds = make(global_batch)
    it = ds.iterate(World())
    half = (len(ds) // 2) // global_batch * global_batch
    for _ in range(half):
        next(it)
    state = ds.state_dict()
    rest = [sample_key(s) for s in it]
    start = time.perf_counter()
    resumed = read_world(make, state, global_batch, (2, 2, 2))
    took = time.perf_counter() - start
    print(f"  saved at sample {state['sample_in_epoch']} of epoch {state['epoch']}; resumed on 2 nodes x 2 ranks "
          f"x 2 workers in {took:.2f}s: the remaining {len(rest)} samples "
          f"{'are identical' if resumed == rest else 'DIFFER'}")
    if resumed != rest:
        raise SystemExit("resumed order differs")


def mix_streams(out: str, workdir: str, global_batch: int = 64) -> None:
    """Mix the dataset with a second, smaller stream: proportions moving from 90/10 to 50/50 along
    a half cosine over the first epoch, then held; up-sampling the small stream; resume mid-epoch 1
    on 2 ranks x 2 workers."""
    small = os.path.join(workdir, "small")
    columns = {"tokens": "ndarray:int32", "text": "str", "label": "int"}
    with MDSWriter(out=small, columns=columns, size_limit="1mb", exist_ok=True) as writer:
        for sample in generate(2_000, seed=7):
            writer.write(sample)
    epoch = 20_000
    schedule = WeightSchedule([(0, [0.9, 0.1]), (epoch, [0.5, 0.5])], kind="cosine")

    def make(batch_size: int) -> StreamingDataset:
        return StreamingDataset(streams=[Stream(local=out), Stream(local=small)], epoch_size="20k",
                                weight_schedule=schedule, shuffle=True, batch_size=batch_size)

    ds = make(global_batch)
    for e in range(2):
        seen = sum(1 for _ in ds.iterate(World()))
        counts = ds.stream_counts(e)
        print(f"  epoch {e}: {seen} samples ({seen - epoch} repeated to fill the last batch), per stream "
              f"{counts.tolist()} (small stream x{counts[1] / 2000:.1f}); "
              f"weights {ds.mixture_weights(0, e).round(2).tolist()} -> {ds.mixture_weights(epoch - 1, e).round(2).tolist()}")
    ds.set_epoch(1)
    it = ds.iterate(World())
    for _ in range(epoch // 2 // global_batch * global_batch):
        next(it)
    state = ds.state_dict()
    rest = [sample_key(s) for s in it]
    resumed = read_world(make, state, global_batch, (1, 2, 2))
    print(f"  resumed epoch 1 at sample {state['sample_in_epoch']} on 2 ranks x 2 workers: the remaining "
          f"{len(rest)} samples {'are identical' if resumed == rest else 'DIFFER'}")
    if resumed != rest:
        raise SystemExit("resumed mixed order differs")


def plan_at_scale() -> None:
    sizes = np.full(100_000, 10_000)  # 10**9 samples in 10**5 shards
    start = time.perf_counter()
    epoch = Plan(sizes, PlanSpec(shuffle=True, num_canonical_nodes=8)).epoch(5, 2048)
    built = time.perf_counter() - start
    start = time.perf_counter()
    ids = epoch.sample_ids(np.arange(500_000_000, 501_000_000))
    mapped = time.perf_counter() - start
    print(f"  epoch plan for 10^9 samples in 10^5 shards: built in {built * 1e3:.0f} ms, "
          f"{epoch.nbytes() / 1e6:.1f} MB; 10^6 positions in the middle mapped in {mapped * 1e3:.0f} ms "
          f"({len(np.unique(ids))} distinct samples)")


def stream_from_s3(src: str, cache: str) -> None:
    """Upload the dataset to a loopback S3 server (moto), then stream it back through a capped cache."""
    try:
        from shardstream.testing.servers import S3Server

        server = S3Server().start()
    except Exception as exc:  # moto is a test dependency
        print(f"  skipped: {exc}")
        return
    with server as s3:
        bucket = s3.make_bucket("shardstream-demo")
        s3.upload_dir(src, f"{bucket}/train")
        stored = shardstream.inspect_dataset(src)["stored_bytes"]
        limit = stored // 2
        # With a real bucket, only these two arguments change:
        #   remote="s3://your-bucket/train", storage_options={}  (your usual AWS credentials)
        ds = StreamingDataset(remote=f"{bucket}/train", local=cache, storage_options=s3.storage_options,
                              batch_size=64, cache_limit=limit)
        for label in ("cold cache", "warm cache"):
            start = time.perf_counter()
            samples = iter(ds)
            next(samples)
            first = time.perf_counter() - start
            count = 1 + sum(1 for _ in samples)
            took = time.perf_counter() - start
            print(f"  {label}: first sample after {first * 1e3:.0f} ms, {count / took:,.0f} samples/s; "
                  f"cache {ds.cache_usage / 1e6:.1f} MB (limit {limit / 1e6:.1f} MB)")
        fetched = ds._cache.fetcher
        print(f"  downloaded {fetched.files} files, {fetched.bytes / 1e6:.1f} MB, for {len(ds.shards)} shards "
              f"({stored / 1e6:.1f} MB stored); least recently used shards were evicted to stay under the limit")


def torch_job(out: str, checkpoint: str, workers: int, steps: int, resume: bool = False, save_at: int = -1):
    """Train a tiny PyTorch model on batches from a StreamingDataLoader; return the loss and a
    fingerprint of every batch. With ``save_at``, write a checkpoint (model, optimiser and loader
    state) after that many steps; with ``resume``, start from the checkpoint."""
    import torch

    from shardstream import StreamingDataLoader

    torch.manual_seed(0)
    ds = StreamingDataset(local=out, shuffle=True, shuffle_seed=7, batch_size=64)
    # batch_decode: workers decode each step at once; the variable-length token column arrives
    # as a Ragged of tensors (flat values + offsets), which is what EmbeddingBag takes
    loader = StreamingDataLoader(ds, batch_size=64, num_workers=workers, batch_decode=True,
                                 columns=["tokens", "label"])
    model = torch.nn.Sequential()
    model.add_module("embed", torch.nn.EmbeddingBag(VOCAB, 32, mode="mean"))
    model.add_module("head", torch.nn.Linear(32, 4))
    opt = torch.optim.SGD(model.parameters(), lr=2.0)
    done = 0
    if resume:
        saved = torch.load(checkpoint)
        model.load_state_dict(saved["model"])
        opt.load_state_dict(saved["optimizer"])
        loader.load_state_dict(saved["loader"])
        done = saved["step"]
    seen, loss = [], float("nan")
    for batch in loader:
        tokens, labels = batch["tokens"], batch["label"]
        logits = model.head(model.embed(tokens.values.long(), tokens.offsets[:-1]))
        loss_t = torch.nn.functional.cross_entropy(logits, labels)
        opt.zero_grad()
        loss_t.backward()
        opt.step()
        loss = loss_t.item()
        seen.append(_fingerprint(tokens.values.numpy(), labels.numpy()))
        done += 1
        if done == save_at:
            tmp = checkpoint + ".tmp"
            torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(),
                        "loader": loader.state_dict(), "step": done}, tmp)
            os.replace(tmp, checkpoint)  # a crash never leaves a half-written checkpoint
        if done == steps:
            break
    return loss, seen


def _fingerprint(*arrays) -> str:
    import hashlib

    h = hashlib.blake2b(digest_size=8)
    for a in arrays:
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()


def _crashing_job(out: str, checkpoint: str, save_at: int) -> None:
    torch_job(out, checkpoint, workers=1, steps=10**9, save_at=save_at)


def train_torch_and_resume(out: str, workdir: str, save_at: int = 40, steps: int = 80) -> None:
    """Train with 1 DataLoader worker, checkpoint, get killed with SIGKILL, resume with 2 workers;
    the batches after the resume must be exactly those of an uninterrupted run."""
    try:
        import torch  # noqa: F401
    except ImportError:
        print("  skipped: PyTorch is not installed (pip install 'shardstream[torch]')")
        return
    import multiprocessing
    import signal

    checkpoint = os.path.join(workdir, "checkpoint.pt")
    ctx = multiprocessing.get_context("spawn")
    job = ctx.Process(target=_crashing_job, args=(out, checkpoint, save_at))
    start = time.perf_counter()
    job.start()
    while not os.path.exists(checkpoint):
        if not job.is_alive():
            raise SystemExit("the training job died before its checkpoint")
        time.sleep(0.05)
    time.sleep(0.5)  # it goes on training past the checkpoint ...
    os.kill(job.pid, signal.SIGKILL)  # ... until it is killed, mid-epoch, with no chance to clean up
    job.join()
    print(f"  job 1 (1 worker) saved a checkpoint at step {save_at} and was killed with SIGKILL "
          f"({time.perf_counter() - start:.1f}s)")
    start = time.perf_counter()
    loss, resumed = torch_job(out, checkpoint, workers=2, steps=steps, resume=True)
    print(f"  job 2 (2 workers) resumed from the checkpoint and trained to step {steps} in "
          f"{time.perf_counter() - start:.1f}s; loss {loss:.3f}")
    ds = StreamingDataset(local=out, shuffle=True, shuffle_seed=7, batch_size=64)
    reference = [_fingerprint(b["tokens"].values, b["label"])
                 for _, b in zip(range(steps), ds.iterate_batches(columns=["tokens", "label"]))]
    same = reference[save_at:] == resumed
    print(f"  the {len(resumed)} batches after the resume {'are exactly' if same else 'DIFFER from'} "
          "those of an uninterrupted epoch")
    if not same:
        raise SystemExit("resumed batches differ")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", type=int, default=100_000)
    parser.add_argument("--dir", default="demo-data")
    args = parser.parse_args()
    out = os.path.join(args.dir, "train")

    print(f"shardstream {shardstream.__version__}: writing {args.samples} samples to {out}")
    took = write(out, args.samples)
    info = shardstream.inspect_dataset(out)
    print(f"  wrote {info['shards']} zstd shards, {info['stored_bytes'] / 1e6:.1f} MB stored, "
          f"{args.samples / took:,.0f} samples/s")

    report = shardstream.verify_dataset(out)
    status = "OK" if report.verified else "NOT VERIFIED (no digests)" if report.ok else report.problems
    print(f"  verify: {status}, {report.hashes_checked} digests checked")

    print("streaming from a loopback S3 server through a shared cache capped at half the dataset:")
    stream_from_s3(out, os.path.join(args.dir, "cache"))

    ds = StreamingDataset(local=out, batch_size=256)
    print(f"dataset: {len(ds)} samples; ds[0]['text'] = {ds[0]['text']!r}; ds[-1]['label'] = {ds[-1]['label']}")

    for label in ("first pass, decompresses shards", "warm"):
        start = time.perf_counter()
        count = sum(1 for _ in ds)
        took = time.perf_counter() - start
        print(f"iterate dict samples ({label}): {count / took:,.0f} samples/s")

    idx = np.random.default_rng(2).integers(0, len(ds), 50_000)
    start = time.perf_counter()
    for i in idx.tolist():
        ds[i]
    print(f"random access ds[i]:    {len(idx) / (time.perf_counter() - start):,.0f} samples/s")

    print("shuffled epochs, checkpoint and elastic resume:")
    resume_elsewhere(out)
    plan_at_scale()

    print("mixing two streams with a weight schedule:")
    mix_streams(out, args.dir)

    print("PyTorch: train, checkpoint, crash, resume on another number of workers:")
    train_torch_and_resume(out, args.dir)

    print("training a small classifier on column batches:")
    seen, took, loss = train(ds)
    print(f"trained on {seen} samples in {took:.2f}s ({seen / took:,.0f} samples/s incl. the model), "
          f"final loss {loss:.4f}")
    shutil.rmtree(args.dir, ignore_errors=True)


if __name__ == "__main__":
    main()
