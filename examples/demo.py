"""End-to-end demo: generate a dataset, write MDS shards, stream it back into a
small training loop, and report throughput. Runs on a local directory and a loopback
S3 server it starts itself; no cloud account or download is needed. Training is plain numpy;
the S3 part needs s3fs and moto, the text part (JSON Lines tokenized and packed, see
``demo_text.py``) tokenizers (``pip install -e '.[demo]'``, which ``make demo`` does).

    python examples/demo.py [--samples 100000] [--dir demo-data]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import time

import numpy as np

import shardstream
from shardstream import BatchLoader, MDSWriter, Stream, StreamingDataset, WeightSchedule
from shardstream.plan import Plan, PlanSpec, World
from shardstream.testing import read_world, sample_key

from demo_text import TITLE as TEXT_TITLE, train_kill_resume as text_train_kill_resume

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
    with MDSWriter(out=out, columns=columns, compression="zstd", hashes=["xxh64"], size_limit="2mb",
                   exist_ok=True) as writer:
        for sample in generate(n):
            writer.write(sample)
    return time.perf_counter() - start


def sgd_step(weights: np.ndarray, tokens, labels: np.ndarray, lr: float = 20.0) -> float:
    """One plain numpy SGD step of a bag-of-tokens softmax classifier on a column batch (``weights``
    is updated in place); returns the batch's loss."""
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
    weights -= lr * feats.T @ probs / len(labels)
    return loss


def init_weights() -> np.ndarray:
    return np.random.default_rng(1).normal(0, 0.01, (VOCAB, 4)).astype(np.float32)


def train(ds: StreamingDataset, batch_size: int = 256, steps: int = 400) -> tuple[int, float, float]:
    """The classifier trained on column batches."""
    weights = init_weights()
    seen, loss = 0, float("nan")
    start = time.perf_counter()
    for step, batch in enumerate(ds.batches(batch_size, columns=["tokens", "label"])):
        if step == steps:
            break
        loss = sgd_step(weights, batch["tokens"], batch["label"])
        seen += len(batch["label"])
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


def stream_from_s3(src: str, workdir: str) -> None:
    """Upload the dataset to a loopback S3 server (moto), then stream it back: a cold pass that
    downloads every shard, a warm pass that reads them from the cache, and a pass through a cache
    capped at about half the dataset."""
    try:
        from shardstream.testing.servers import S3Server

        server = S3Server().start()
    except Exception as exc:  # moto comes with the demo's environment (pip install -e '.[demo]')
        print(f"  skipped: {exc}")
        return
    with server as s3:
        bucket = s3.make_bucket("shardstream-demo")
        s3.upload_dir(src, f"{bucket}/train")
        info = shardstream.inspect_dataset(src)

        def open_remote(cache: str, limit=None) -> StreamingDataset:
            # With a real bucket, only these two arguments change:
            #   remote="s3://your-bucket/train", storage_options={}  (your usual AWS credentials)
            return StreamingDataset(remote=f"{bucket}/train", local=os.path.join(workdir, cache),
                                    storage_options=s3.storage_options, batch_size=64, cache_limit=limit)

        ds = open_remote("cache")
        for label in ("cold cache", "warm cache"):
            timed_pass(ds, label)
        print(f"  ({info['stored_bytes'] / 1e6:.1f} MB stored on S3; the cache keeps shards decompressed, "
              f"{info['raw_bytes'] / 1e6:.1f} MB)")
        # at least four times the largest shard (raw plus compressed), as mosaicml-streaming also requires
        largest = max(s.raw_data.bytes + (s.zip_data.bytes if s.zip_data else 0) for s in ds.shards)
        limit = max(info["raw_bytes"] // 2, 4 * largest)
        timed_pass(open_remote("cache-capped", limit), f"cache capped at {limit / 1e6:.1f} MB")
        print("  the capped cache evicts the least recently used shards to stay under its limit: each pass in "
              "this order finds the shards it needs evicted and downloads them again")


def timed_pass(ds: StreamingDataset, label: str) -> None:
    """One pass over ``ds``: time to the first sample, throughput, and what it downloaded."""
    fetched = ds.table.stores[0].fetcher
    files, size = fetched.files, fetched.bytes
    start = time.perf_counter()
    samples = iter(ds)
    next(samples)
    first = time.perf_counter() - start
    count = 1 + sum(1 for _ in samples)
    took = time.perf_counter() - start
    print(f"  {label}: first sample after {first * 1e3:.0f} ms, {count / took:,.0f} samples/s; downloaded "
          f"{fetched.files - files} files, {(fetched.bytes - size) / 1e6:.1f} MB; cache {ds.cache_usage / 1e6:.1f} MB")


def numpy_job(out: str, checkpoint: str, steps: int, resume: bool = False, save_at: int = -1):
    """Train the classifier on batches from a BatchLoader; return the loss and a fingerprint of
    every batch. With ``save_at``, write a checkpoint (weights and loader state) after that many
    steps; with ``resume``, start from the checkpoint."""
    ds = StreamingDataset(local=out, shuffle=True, shuffle_seed=7, batch_size=64)
    loader = BatchLoader(ds, columns=["tokens", "label"])  # decodes ahead in a thread
    weights, done = init_weights(), 0
    if resume:
        with np.load(checkpoint) as saved:
            weights, done = saved["weights"], int(saved["step"])
            loader.load_state_dict(json.loads(str(saved["loader"])))  # the state is plain JSON
    seen, loss = [], float("nan")
    for batch in loader:
        tokens, labels = batch["tokens"], batch["label"]
        loss = sgd_step(weights, tokens, labels)
        seen.append(_fingerprint(tokens.values, labels))
        done += 1
        if done == save_at:
            tmp = checkpoint + ".tmp.npz"
            np.savez(tmp, weights=weights, step=done, loader=json.dumps(loader.state_dict()))
            os.replace(tmp, checkpoint)  # a crash never leaves a half-written checkpoint
        if done == steps:
            break
    loader.close()
    return loss, seen


def _fingerprint(*arrays) -> str:
    import hashlib

    h = hashlib.blake2b(digest_size=8)
    for a in arrays:
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()


def _crashing_job(out: str, checkpoint: str, save_at: int) -> None:
    numpy_job(out, checkpoint, steps=10**9, save_at=save_at)


def train_and_resume(out: str, workdir: str, save_at: int = 40, steps: int = 80) -> None:
    """Train in a job of its own, checkpoint, get killed with SIGKILL, resume in a new job; the
    batches after the resume must be exactly those of an uninterrupted run."""
    import multiprocessing
    import signal

    checkpoint = os.path.join(workdir, "checkpoint.npz")
    # The job shares this process's multiprocessing resource tracker; a SIGKILL leaves registered
    # what it created there. Its loader decodes in a thread and creates nothing there.
    job = multiprocessing.get_context("spawn").Process(target=_crashing_job, args=(out, checkpoint, save_at))
    start = time.perf_counter()
    job.start()
    while not os.path.exists(checkpoint):
        if not job.is_alive():
            raise SystemExit("the training job died before its checkpoint")
        time.sleep(0.05)
    time.sleep(0.5)  # it goes on training past the checkpoint ...
    os.kill(job.pid, signal.SIGKILL)  # ... until it is killed, mid-epoch, with no chance to clean up
    job.join()
    print(f"  job 1 saved a checkpoint at step {save_at} and was killed with SIGKILL "
          f"({time.perf_counter() - start:.1f}s)")
    start = time.perf_counter()
    loss, resumed = numpy_job(out, checkpoint, steps=steps, resume=True)
    print(f"  job 2 resumed from the checkpoint and trained to step {steps} in "
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

    print("streaming from a loopback S3 server through a shard cache:")
    stream_from_s3(out, args.dir)

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

    print("numpy training from a BatchLoader: train, checkpoint, crash, resume:")
    train_and_resume(out, args.dir)

    print(TEXT_TITLE)
    text_train_kill_resume(args.dir)

    print("training a small classifier on column batches:")
    seen, took, loss = train(ds)
    print(f"trained on {seen} samples in {took:.2f}s ({seen / took:,.0f} samples/s incl. the model), "
          f"final loss {loss:.4f}")
    shutil.rmtree(args.dir, ignore_errors=True)


if __name__ == "__main__":
    main()
