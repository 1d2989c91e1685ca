"""The text LM workload of ``bench/bench_pipeline.py``: English-like documents and a tokenizer.

Generated once from a fixed seed and kept under the data directory (``bench/.data/pipeline/<key>``,
the key naming every parameter), so a rerun of the section reuses them:

- ``docs``: documents whose lengths in characters are lognormal (mean ~1,500, clipped to
  100..20,000): sentences of 6..28 words drawn with Zipf frequencies from ~180 common English
  words and ~20,000 made-up words of English-like syllables, capitalised, with commas, full
  stops, numbers and paragraph breaks;
- the same documents as ``--files`` JSON Lines files (``{"text": ...}`` per line) and as as many
  Parquet files (one ``text`` column, row groups of 1,000 rows);
- ``tokenizer.json``: a byte-level BPE (vocabulary 8,192, ``<|endoftext|>`` its end-of-document
  token), trained with ``tokenizers`` on the first ~8 MB of the documents; every side loads it.

Runs in the project venv (numpy, pyarrow, tokenizers).
"""

from __future__ import annotations

import json
import os
import time

import numpy as np

SEED = 20240611 + 17
FORMAT = 1  # bump when the generator changes: the data directory's key changes with it
EOS = "<|endoftext|>"
VOCAB = 8192
TRAIN_BYTES = 8_000_000
ROW_GROUP = 1000
MEAN_CHARS = 1500
SIGMA = 0.8

COMMON = ("the of and to a in is that for it as was with be by on not he this are or his from at which but have "
          "an they you were her she there been one all we their has would when if more no out so said what up its "
          "about into than them can only other new some could time these two may then do first any my now such "
          "like our over man me even most made after also did many before must through back years where much your "
          "way well down should because each just those people how too little state good very make world still "
          "own see men work long get here between both life being under never day same another know while last "
          "might us great old year off come since against go came right used take three states himself few house "
          "use during without again place around however home small found mrs thought went say part once general "
          "high upon school every does got united left number course war until always away something fact though "
          "water less public put think almost hand enough far took head yet government system better set told "
          "nothing night end why called didn't eyes find going look asked later knew").split()
ONSETS = ["", "b", "c", "d", "f", "g", "h", "j", "k", "l", "m", "n", "p", "r", "s", "t", "v", "w", "y", "z", "bl",
          "br", "ch", "cl", "cr", "dr", "fl", "fr", "gl", "gr", "pl", "pr", "sc", "sh", "sk", "sl", "sm", "sn", "sp",
          "st", "str", "sw", "th", "tr", "wh"]
NUCLEI = ["a", "e", "i", "o", "u", "ai", "ea", "ee", "ie", "oa", "oo", "ou", "ow", "y"]
CODAS = ["", "", "", "b", "ck", "d", "ft", "g", "l", "ld", "ll", "m", "n", "nd", "ng", "nk", "nt", "p", "r", "rd",
         "rn", "rt", "s", "sh", "ss", "st", "t", "th", "x"]
SUFFIXES = ["", "", "", "", "s", "ed", "ing", "er", "ly", "tion", "ment", "ness", "al", "ous"]


def vocabulary(rng: np.random.Generator, made_up: int = 20_000) -> tuple[np.ndarray, np.ndarray]:
    """Words (common English first, then made-up ones) and their Zipf probabilities."""
    seen = set(COMMON)
    words = list(COMMON)
    while len(words) < len(COMMON) + made_up:
        n = int(rng.choice(3, p=[0.45, 0.42, 0.13])) + 1
        w = "".join(ONSETS[rng.integers(len(ONSETS))] + NUCLEI[rng.integers(len(NUCLEI))]
                    + CODAS[rng.integers(len(CODAS))] for _ in range(n)) + SUFFIXES[rng.integers(len(SUFFIXES))]
        if len(w) > 1 and w not in seen:
            seen.add(w)
            words.append(w)
    p = 1.0 / (np.arange(len(words)) + 2.7) ** 1.07
    return np.array(words, dtype=object), p / p.sum()


def documents(n_docs: int, seed: int = SEED) -> list[str]:
    """``n_docs`` English-like documents (see the module docstring), the same for a seed."""
    rng = np.random.default_rng(seed)
    words, p = vocabulary(rng)
    targets = np.clip(rng.lognormal(np.log(MEAN_CHARS) - SIGMA ** 2 / 2, SIGMA, n_docs), 100, 20_000).astype(int)
    lengths = np.array([len(w) + 1 for w in words])
    stream = rng.choice(len(words), size=int(targets.sum() / 4.2) + 10_000, p=p)
    ends = np.cumsum(lengths[stream])
    out, at = [], 0
    for target in targets.tolist():
        stop = int(np.searchsorted(ends, (ends[at - 1] if at else 0) + target)) + 1
        if stop >= len(stream):
            stream = np.concatenate([stream, rng.choice(len(words), size=len(stream), p=p)])
            ends = np.cumsum(lengths[stream])
        out.append(_prose(rng, words[stream[at:stop]].tolist()))
        at = stop
    return out


def _prose(rng: np.random.Generator, ws: list[str]) -> str:
    """Words -> sentences (6..28 words, capitalised, commas, numbers), paragraphs of 3..8 sentences."""
    cuts = np.cumsum(rng.integers(6, 29, len(ws) // 6 + 2))
    sentences, start = [], 0
    for stop in cuts.tolist():
        s = ws[start:stop]
        if not s:
            break
        if len(s) > 9 and rng.random() < 0.5:
            s[len(s) // 2] += ","
        if rng.random() < 0.08:
            s.insert(int(rng.integers(len(s))), str(int(rng.integers(1, 3000))))
        sentences.append(s[0].capitalize() + (" " + " ".join(s[1:]) if len(s) > 1 else "") + ".")
        start = stop
    paras = np.cumsum(rng.integers(3, 9, len(sentences) // 3 + 2))
    parts, start = [], 0
    for stop in paras.tolist():
        if start >= len(sentences):
            break
        parts.append(" ".join(sentences[start:stop]))
        start = stop
    return "\n\n".join(parts)


def data_key(n_docs: int, n_files: int) -> str:
    return f"v{FORMAT}-docs{n_docs}-files{n_files}-seed{SEED}-vocab{VOCAB}"


def prepare(root: str, n_docs: int, n_files: int) -> dict:
    """The workload under ``root/<key>``, generated unless a complete one is there; what it holds."""
    work = os.path.join(os.path.abspath(root), data_key(n_docs, n_files))
    manifest = os.path.join(work, "manifest.json")
    if os.path.exists(manifest):
        with open(manifest) as f:
            out = json.load(f)
        out["reused"] = True
        return out
    os.makedirs(work, exist_ok=True)
    t = time.perf_counter()
    docs = documents(n_docs)
    gen_s = time.perf_counter() - t
    jsonl, parquet = _write_files(work, docs, n_files)
    t1 = time.perf_counter()
    tok_path = os.path.join(work, "tokenizer.json")
    train_tokenizer(docs, tok_path)
    expect = expected_tokens(docs, tok_path)
    chars = np.array([len(d) for d in docs])
    out = {"dir": work, "jsonl": jsonl, "parquet": parquet, "tokenizer": tok_path, "docs": n_docs, "files": n_files,
           "chars": int(chars.sum()), "mean_chars": float(chars.mean()), "median_chars": float(np.median(chars)),
           "max_chars": int(chars.max()), "jsonl_bytes": sum(os.path.getsize(p) for p in jsonl),
           "parquet_bytes": sum(os.path.getsize(p) for p in parquet), "generate_s": gen_s,
           "tokenizer_train_s": time.perf_counter() - t1, "expect": expect, "vocab": VOCAB, "eos": EOS, "seed": SEED}
    tmp = manifest + ".tmp"
    with open(tmp, "w") as f:
        json.dump(out, f, indent=1)
    os.replace(tmp, manifest)
    out["reused"] = False
    return out


def _write_files(work: str, docs: list[str], n_files: int) -> tuple[list[str], list[str]]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    for d in ("jsonl", "parquet"):
        os.makedirs(os.path.join(work, d), exist_ok=True)
    bounds = np.linspace(0, len(docs), n_files + 1).astype(int).tolist()
    jsonl, parquet = [], []
    for f in range(n_files):
        part = docs[bounds[f]:bounds[f + 1]]
        j = os.path.join(work, "jsonl", f"part-{f:05d}.jsonl")
        with open(j + ".tmp", "w", encoding="utf-8") as out:
            out.writelines(json.dumps({"text": d}) + "\n" for d in part)
        os.replace(j + ".tmp", j)
        q = os.path.join(work, "parquet", f"part-{f:05d}.parquet")
        pq.write_table(pa.table({"text": pa.array(part, pa.string())}), q + ".tmp", row_group_size=ROW_GROUP)
        os.replace(q + ".tmp", q)
        jsonl.append(j)
        parquet.append(q)
    return jsonl, parquet


def train_tokenizer(docs: list[str], path: str) -> None:
    """A byte-level BPE of ``VOCAB`` tokens trained on the first ``TRAIN_BYTES`` characters of ``docs``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    sample, size = [], 0
    for d in docs:
        sample.append(d)
        size += len(d)
        if size >= TRAIN_BYTES:
            break
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=[EOS], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(sample, trainer=trainer)
    tok.save(path + ".tmp")
    os.replace(path + ".tmp", path)


def expected_tokens(docs: list[str], tokenizer: str) -> dict:
    """What an epoch of the pipeline must carry: token count and sum of the ids, one end-of-document
    token per document included (order-free checks every side's batches are held to)."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(tokenizer)
    eos = tok.token_to_id(EOS)
    count = total = 0
    for i in range(0, len(docs), 1000):
        for e in tok.encode_batch(docs[i:i + 1000]):
            count += len(e.ids) + 1
            total += sum(e.ids) + eos
    return {"tokens": count, "token_sum": total, "eos_id": eos}
