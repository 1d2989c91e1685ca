"""The text LM input pipeline on Grain: the peer venv's child of ``bench/bench_pipeline.py``.

    .venv-peers/bin/python bench/bench_pipeline_peers.py CONFIG.json

Grain reads random-access sources (ArrayRecord, or any sequence in memory), not JSON Lines, so
the documents are read with pyarrow into a list of strings first (timed: ``load_s``), then::

    grain.MapDataset.source(texts).shuffle(seed=0)        # a global shuffle: an index permutation
      .batch(1000, batch_fn=list).map(tokenize_batch)      # ``CONFIG['tokenize'] == 'batched'``
      .to_iter_dataset()                                   # Grain's default ReadOptions (16 threads)
    -> FlatMapIterDataset (back to documents) -> ConcatThenSplitIterDataset(length_struct={"input_ids": 1024})
    -> .batch(8)

or, with ``tokenize == 'per_row'``, ``.map`` tokenizes one document at a time (``Tokenizer.encode``)
and there is no flat map. The end-of-document token is appended to each document as on the other
sides; ``ConcatThenSplitIterDataset`` pads the last row and marks real tokens with segment ids > 0.
"""

from __future__ import annotations

import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)
import bench_pipeline_sides as sides  # noqa: E402
import common  # noqa: E402


def load_texts(files: list[str], fmt: str) -> list[str]:
    import pyarrow.json as pj
    import pyarrow.parquet as pq

    out: list[str] = []
    for f in files:
        table = pj.read_json(f) if fmt == "json" else pq.read_table(f, columns=["text"])
        out.extend(table.column("text").to_pylist())
    return out


def pipeline(texts: list[str], tokenizer: str, how: str, threads: int | None = None):
    import grain
    import grain.experimental as ge
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(tokenizer)
    read = grain.ReadOptions(num_threads=threads) if threads else None
    eos = tok.token_to_id("<|endoftext|>")
    ds = grain.MapDataset.source(texts).shuffle(seed=sides.SEED)
    if how == "batched":
        def tokenize_batch(batch: list[str]) -> list[np.ndarray]:
            return [np.asarray(e.ids + [eos], np.int32) for e in tok.encode_batch(batch)]

        class Unbatch(ge.FlatMapTransform):
            max_fan_out = sides.MAP_BATCH

            def flat_map(self, element):
                return [{"input_ids": ids} for ids in element]

        it = ds.batch(sides.MAP_BATCH, batch_fn=list).map(tokenize_batch).to_iter_dataset(read)
        it = ge.FlatMapIterDataset(it, Unbatch())
    else:
        it = ds.map(lambda t: {"input_ids": np.asarray(tok.encode(t).ids + [eos], np.int32)}).to_iter_dataset(read)
    it = ge.ConcatThenSplitIterDataset(it, length_struct={"input_ids": sides.SEQ_LEN})
    return it.batch(sides.BATCH)


class GrainSide(sides.Side):
    def __init__(self, cfg: dict) -> None:
        self.cfg = cfg
        self.load_s = 0.0

    def make(self):
        t = time.perf_counter()
        texts = load_texts(self.cfg["files"], self.cfg["format"])
        self.load_s = time.perf_counter() - t
        return pipeline(texts, self.cfg["tokenizer"], self.cfg["tokenize"], self.cfg.get("threads"))

    def batches(self, p):
        return iter(p)


def main() -> None:
    cfg = sides.load_config(sys.argv[1])
    cpus = sides.pin(cfg)
    t = time.perf_counter()
    import grain
    import tokenizers

    out = sides.info("grain", getattr(grain, "__version__", "?"), import_s=time.perf_counter() - t,
                     tokenize=cfg["tokenize"], tokenizers=tokenizers.__version__)
    side = GrainSide(cfg)
    if cfg["task"] != "throughput":
        raise SystemExit(f"unknown task {cfg['task']!r}")
    out.update(sides.throughput(side, cfg))
    out.update(load_s=side.load_s, cpus=cpus)
    common.emit(out, cfg["out"])


if __name__ == "__main__":
    main()
