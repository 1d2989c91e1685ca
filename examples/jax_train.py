"""Feed a pure-JAX training step from shardstream, with a checkpoint and a resume.

    python examples/jax_train.py [--samples 20000] [--dir jax-demo]

Writes a small dataset (16 float features, a label from a hidden linear rule), then
trains a logistic regression with ``jax.jit`` on batches from ``JaxLoader``. Batches
become global ``jax.Array``s sharded over the local devices (one CPU device here; on
several hosts each host feeds its part). Halfway through, the loader state is saved and
the rest of the epoch is read by a new loader from that state: the batches are the same.
Without JAX installed, the same loop runs on numpy batches from ``BatchLoader``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile

import numpy as np

from shardstream import BatchLoader, MDSWriter, StreamingDataset

FEATURES = 16


def write(out: str, n: int) -> None:
    rng = np.random.default_rng(0)
    w_true = rng.normal(size=FEATURES).astype(np.float32)
    with MDSWriter(out=out, columns={"x": f"ndarray:float32:{FEATURES}", "label": "int32"},
                   size_limit="256kb", exist_ok=True) as writer:
        for _ in range(n):
            x = rng.normal(size=FEATURES).astype(np.float32)
            writer.write({"x": x, "label": int(x @ w_true > 0)})


def make_loader(out: str, state=None):
    ds = StreamingDataset(local=out, shuffle=True, shuffle_seed=3, batch_size=128)
    try:
        import jax
        from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

        from shardstream.integrations.jax import JaxLoader

        mesh = Mesh(np.array(jax.devices()), ("data",))
        loader = JaxLoader(ds, sharding=NamedSharding(mesh, P("data")), columns=["x", "label"])
    except ImportError:
        loader = BatchLoader(ds, columns=["x", "label"])
    if state is not None:
        loader.load_state_dict(state)
    return loader


def train(out: str) -> tuple[float, float, bool]:
    try:
        import jax
        import jax.numpy as jnp
    except ImportError:
        jax, jnp = None, np

    def loss_fn(w, x, y):
        logits = x @ w
        return jnp.mean(jnp.logaddexp(0.0, logits) - y * logits)

    if jax is not None:
        step = jax.jit(lambda w, x, y: w - 0.5 * jax.grad(loss_fn)(w, x, y))
    else:  # plain numpy: the gradient of the logistic loss by hand
        def step(w, x, y):
            p = 1 / (1 + np.exp(-(x @ w)))
            return w - 0.5 * x.T @ (p - y) / len(y)

    w = jnp.zeros(FEATURES, jnp.float32)
    loader = make_loader(out)
    half = len(loader) // 2
    first_loss = None
    seen, state = [], None
    for i, batch in enumerate(loader):
        x, y = batch["x"], batch["label"].astype(jnp.float32)
        if first_loss is None:
            first_loss = float(loss_fn(w, x, y))
        w = step(w, x, y)
        seen.append(np.asarray(batch["label"]).copy())
        if i + 1 == half:
            state = loader.state_dict()  # plain JSON: store it with the model checkpoint
            break
    resumed = make_loader(out, state)  # e.g. after a restart, on another number of hosts
    rest = []
    for batch in resumed:
        x, y = batch["x"], batch["label"].astype(jnp.float32)
        w = step(w, x, y)
        rest.append(np.asarray(batch["label"]).copy())
    last_loss = float(loss_fn(w, x, y))
    reference = [np.asarray(b["label"]) for b in make_loader(out)]
    same = all(np.array_equal(a, b) for a, b in zip(seen + rest, reference)) and len(seen + rest) == len(reference)
    return first_loss, last_loss, same


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", type=int, default=20_000)
    parser.add_argument("--dir", default=None)
    args = parser.parse_args()
    root = args.dir or tempfile.mkdtemp(prefix="shardstream-jax-")
    out = os.path.join(root, "train")
    try:
        write(out, args.samples)
        first, last, same = train(out)
        print(f"loss {first:.3f} -> {last:.3f}; resumed mid-epoch from a saved state: batches "
              f"{'identical to' if same else 'DIFFERENT from'} an uninterrupted epoch")
        if not same or not last < first:
            raise SystemExit(1)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
