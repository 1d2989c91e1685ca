"""Whole pipelines from configs: JSON Lines documents, a tokenizer trained here and saved as tokenizer.json,
tokenize -> pack -> load, mixing, chats, and the save stage's cache (reuse and invalidation)."""

from __future__ import annotations

import collections
import json
import logging
import os

import numpy as np
import pytest

pytest.importorskip("tokenizers")

from shardstream import CacheMismatchError, ConfigError, Pipeline, PipelineConfig  # noqa: E402
from shardstream.testing.text import EOS_TOKEN, generated_chats, generated_texts, tiny_tokenizer  # noqa: E402

SEQ = 64


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """Two JSON Lines files of generated documents, and the tokenizer saved as tokenizer.json."""
    root = tmp_path_factory.mktemp("corpus")
    texts = generated_texts(240, seed=3)
    os.makedirs(root / "docs")
    for part in range(2):
        with open(root / "docs" / f"part-{part}.jsonl", "w") as f:
            for i in range(part * 120, (part + 1) * 120):
                f.write(json.dumps({"id": i, "text": texts[i]}) + "\n")
    tok = tiny_tokenizer()
    tok.save(str(root / "tokenizer.json"))
    eos = tok.token_to_id(EOS_TOKEN)
    ids = [np.asarray(e.ids + [eos], np.int32) for e in tok.encode_batch(texts)]
    return {"root": root, "texts": texts, "ids": ids, "tokenizer": str(root / "tokenizer.json")}


def config(corpus, **stages) -> PipelineConfig:
    data = {"datasets": [{"data_files": str(corpus["root"] / "docs" / "*.jsonl"), "type": "jsonl"}],
            "tokenize": {"tokenizer": corpus["tokenizer"]}, "pack": {"seq_len": SEQ},
            "load": {"batch_size": 4, "drop_last": False}}
    data.update(stages)
    return PipelineConfig.from_dict({k: v for k, v in data.items() if v is not None})


def real_tokens(batches) -> np.ndarray:
    """Every real token of the packed batches, in order."""
    out = []
    for batch in batches:
        ids, segments = np.asarray(batch["input_ids"]), np.asarray(batch["segment_ids"])
        out.append(ids[segments != 0])
    return np.concatenate(out)


def test_source_tokenize_pack_load_gives_fixed_shape_batches_of_every_token(corpus):
    pipeline = Pipeline.from_config(config(corpus))
    loader = pipeline.source().tokenize().pack().load().build()
    batches = list(loader)
    for batch in batches[:-1]:
        assert np.asarray(batch["input_ids"]).shape == (4, SEQ)
        assert np.asarray(batch["input_ids"]).dtype == np.int32
        assert np.asarray(batch["segment_ids"]).shape == (4, SEQ)
    assert np.array_equal(real_tokens(batches), np.concatenate(corpus["ids"])), \
        "the packed tokens are not the documents' tokens, each followed by the end token, in order"


def test_the_shuffle_buffer_reorders_documents_but_keeps_every_token(corpus):
    loader = Pipeline.from_config(config(corpus, load={"batch_size": 4, "drop_last": False,
                                                       "shuffle_buffer_size": 64, "seed": 1})).build()
    tokens = real_tokens(loader)
    want = np.concatenate(corpus["ids"])
    assert not np.array_equal(tokens, want)
    assert collections.Counter(tokens.tolist()) == collections.Counter(want.tolist())


def test_drop_last_gives_only_full_batches(corpus):
    batches = list(Pipeline.from_config(config(corpus, load={"batch_size": 3, "drop_last": True})).build())
    assert batches and all(np.asarray(b["input_ids"]).shape == (3, SEQ) for b in batches)


def test_without_a_load_stage_the_dataset_of_rows_is_built(corpus):
    rows = list(Pipeline.from_config(config(corpus)).source().tokenize().build())
    assert len(rows) == 240
    for row, ids in zip(rows, corpus["ids"]):
        assert np.array_equal(row["input_ids"], ids) and "text" not in row


def test_the_loader_resumes_exactly_in_a_fresh_pipeline(corpus):
    cfg = config(corpus, load={"batch_size": 2, "shuffle_buffer_size": 32})
    full = [np.asarray(b["input_ids"]) for b in Pipeline.from_config(cfg).build()]
    first = Pipeline.from_config(cfg).build()
    it = iter(first)
    for _ in range(5):
        next(it)
    state = json.loads(json.dumps(first.state_dict()))
    first.close()
    second = Pipeline.from_config(cfg).build()
    second.load_state_dict(state)
    rest = [np.asarray(b["input_ids"]) for b in second]
    assert len(rest) == len(full) - 5
    assert all(np.array_equal(a, b) for a, b in zip(rest, full[5:]))


def test_a_text_column_of_another_name(corpus, tmp_path):
    with open(tmp_path / "other.jsonl", "w") as f:
        for i, text in enumerate(corpus["texts"][:20]):
            f.write(json.dumps({"body": text}) + "\n")
    cfg = config(corpus, datasets=[{"data_files": str(tmp_path / "other.jsonl"), "text_column": "body"}], pack=None,
                 load=None)
    rows = list(Pipeline.from_config(cfg).build())
    assert [r["input_ids"].tolist() for r in rows] == [ids.tolist() for ids in corpus["ids"][:20]]


def test_mixing_by_weights_by_name(corpus, tmp_path):
    with open(tmp_path / "other.jsonl", "w") as f:
        for i in range(50):
            f.write(json.dumps({"id": 1000 + i, "text": "other"}) + "\n")
    datasets = [{"data_files": str(corpus["root"] / "docs" / "*.jsonl"), "type": "jsonl", "name": "docs"},
                {"data_files": str(tmp_path / "other.jsonl"), "name": "other"}]
    only_docs = config(corpus, datasets=datasets, mix={"weights": {"docs": 1, "other": 0}}, tokenize=None, pack=None,
                       load=None)
    ids = [r["id"] for r in Pipeline.from_config(only_docs).build()]
    assert sorted(ids) == list(range(240))
    both = Pipeline.from_config(only_docs).mix(weights={"docs": 1, "other": 1})
    ids = [r["id"] for r in both.build()]
    assert {i >= 1000 for i in ids} == {True, False}


def test_a_chat_dataset_gets_a_loss_mask_through_packing(corpus, tmp_path):
    pytest.importorskip("transformers")
    pytest.importorskip("jinja2")
    from shardstream.testing.text import tiny_hf_tokenizer

    tiny_hf_tokenizer().save_pretrained(str(tmp_path / "tok"))
    with open(tmp_path / "chats.jsonl", "w") as f:
        for chat in generated_chats(30, seed=1):
            f.write(json.dumps({"messages": chat}) + "\n")
    cfg = config(corpus, datasets=[{"data_files": str(tmp_path / "chats.jsonl")}],
                 tokenize={"tokenizer": str(tmp_path / "tok"), "messages_field": "messages"})
    batches = list(Pipeline.from_config(cfg).build())
    masks = np.concatenate([np.asarray(b["loss_mask"]).ravel() for b in batches])
    assert set(np.unique(masks).tolist()) == {0, 1}


def test_the_save_stage_writes_once_reuses_and_is_invalidated_by_the_tokenizer_settings(corpus, tmp_path, caplog):
    out = str(tmp_path / "packed")
    cfg = config(corpus, save={"output": out, "after": "pack"}, load=None)
    rows = list(Pipeline.from_config(cfg).build())
    assert all(r["input_ids"].shape == (SEQ,) for r in rows)
    summary = Pipeline.from_config(cfg).cache_summary()
    assert summary["tokens"] == sum(len(ids) for ids in corpus["ids"])
    assert summary["rows"] == len(rows)
    stamps = {n: os.stat(os.path.join(out, n)).st_mtime_ns for n in os.listdir(out)}
    with caplog.at_level(logging.INFO, logger="shardstream.cache"):
        again = list(Pipeline.from_config(cfg).build())
    assert "reusing" in caplog.text
    assert {n: os.stat(os.path.join(out, n)).st_mtime_ns for n in os.listdir(out)} == stamps
    assert all(np.array_equal(a["input_ids"], b["input_ids"]) for a, b in zip(rows, again))

    truncated = config(corpus, save={"output": out}, load=None,
                       tokenize={"tokenizer": corpus["tokenizer"], "max_length": 8, "truncation": True})
    with pytest.raises(CacheMismatchError, match="overwrite"):
        Pipeline.from_config(truncated).build()
    rebuilt = Pipeline.from_config(truncated).configure(save={"overwrite": True})
    rebuilt.build()
    assert rebuilt.cache_summary()["tokens"] == sum(min(len(ids), 8) for ids in corpus["ids"])


def test_save_after_tokenize_then_pack_and_load_from_the_cache(corpus, tmp_path):
    out = str(tmp_path / "tokens")
    cfg = config(corpus, save={"output": out, "after": "tokenize"})
    batches = list(Pipeline.from_config(cfg).build())
    assert np.array_equal(real_tokens(batches), np.concatenate(corpus["ids"]))
    assert Pipeline.from_config(cfg).cache_summary()["rows"] == 240


def test_a_missing_tokenizer_names_the_field(corpus, tmp_path):
    cfg = config(corpus, tokenize={"tokenizer": str(tmp_path / "nope.json")})
    with pytest.raises(ConfigError, match=r"^pipeline\.tokenize\.tokenizer: .*nope\.json"):
        Pipeline.from_config(cfg).build()


def test_sources_of_every_kind_hf_directory_parquet_and_mds(corpus, tmp_path):
    """A Hub-style directory (``type: hf``, two splits), Parquet files, and an MDS dataset (the cache of an
    earlier pipeline) feed the same stages."""
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    hub = tmp_path / "hub" / "data"
    hub.mkdir(parents=True)
    texts = corpus["texts"]
    pq.write_table(pa.table({"text": texts[:100]}), str(hub / "train-00000-of-00001.parquet"))
    pq.write_table(pa.table({"text": texts[100:130]}), str(hub / "test-00000-of-00001.parquet"))
    for split, lo, hi in (("train", 0, 100), ("test", 100, 130)):
        cfg = config(corpus, datasets=[{"data_files": str(tmp_path / "hub"), "type": "hf", "split": split}],
                     pack=None, load=None)
        rows = list(Pipeline.from_config(cfg).build())
        assert [r["input_ids"].tolist() for r in rows] == [ids.tolist() for ids in corpus["ids"][lo:hi]]

    parquet = config(corpus, datasets=[{"data_files": str(hub / "train-*.parquet"), "type": "parquet"}],
                     save={"output": str(tmp_path / "tokens"), "after": "tokenize"}, pack=None, load=None)
    Pipeline.from_config(parquet).build()
    mds = config(corpus, datasets=[{"data_files": str(tmp_path / "tokens"), "type": "mds"}], tokenize=None,
                 load={"batch_size": 5, "drop_last": False})
    assert np.array_equal(real_tokens(Pipeline.from_config(mds).build()), np.concatenate(corpus["ids"][:100]))
