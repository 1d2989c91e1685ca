"""Tokenize and the tokenizer adapter, with real tokenizers trained here (tokenizers and transformers)."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("tokenizers")
transformers = pytest.importorskip("transformers")

from shardstream import JsonShardedSource  # noqa: E402
from shardstream.errors import InvalidArgumentError, InvalidRowError, SequenceTooLongError  # noqa: E402
from shardstream.sources.base import TransformedShardedSource  # noqa: E402
from shardstream.testing.text import (  # noqa: E402
    CHATML_TEMPLATE, generated_chats, generated_texts, tiny_hf_tokenizer, tiny_tokenizer,
)
from shardstream.text import Tokenize, as_tokenizer  # noqa: E402

TEXTS = generated_texts(40, seed=3) + ["", "naïve café — ünïcødé ✓ 日本語"]


@pytest.fixture(params=["tokenizers", "transformers"])
def tok(request):
    return tiny_tokenizer() if request.param == "tokenizers" else tiny_hf_tokenizer()


def _own_ids(tok, text, add_special_tokens=True):
    """The ids the tokenizer itself gives for ``text``, one text at a time (independent of the adapter)."""
    if hasattr(tok, "encode_batch"):
        return tok.encode(text, add_special_tokens=add_special_tokens).ids
    return tok(text, add_special_tokens=add_special_tokens)["input_ids"]


def _word_level():
    """A real tokenizers.Tokenizer with no end-of-sequence token among its tokens."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    t = Tokenizer(models.WordLevel({"[UNK]": 0, "hello": 1, "world": 2}, unk_token="[UNK]"))
    t.pre_tokenizer = pre_tokenizers.Whitespace()
    return t


# -- the fixtures of shardstream.testing.text ------------------------------------------------------
def test_generated_text_is_deterministic_and_varied():
    assert generated_texts(5, seed=1) == generated_texts(5, seed=1)
    assert generated_texts(5, seed=1) != generated_texts(5, seed=2)
    assert len(set(generated_texts(50))) == 50
    chats = generated_chats(20, seed=4)
    assert chats == generated_chats(20, seed=4)
    for chat in chats:
        roles = [m["role"] for m in chat if m["role"] != "system"]
        assert roles == ["user", "assistant"] * (len(roles) // 2) and roles


def test_tiny_tokenizer_round_trips_and_is_a_fresh_copy():
    tok = tiny_tokenizer()
    assert tok.get_vocab_size() == 512
    for text in TEXTS:
        assert tok.decode(tok.encode(text).ids, skip_special_tokens=False) == text
    tok.enable_truncation(3)
    assert len(tiny_tokenizer().encode(TEXTS[0]).ids) > 3  # the cached one is unchanged
    hf = tiny_hf_tokenizer()
    assert (hf.eos_token, hf.pad_token, hf.chat_template) == ("<|endoftext|>", "<pad>", CHATML_TEMPLATE)


# -- the adapter -------------------------------------------------------------------------------
def test_adapter_reads_both_kinds_alike():
    a, b = as_tokenizer(tiny_tokenizer()), as_tokenizer(tiny_hf_tokenizer())
    assert (a.kind, b.kind) == ("tokenizers", "transformers-fast")
    assert (a.eos_id, a.pad_id, a.bos_id) == (b.eos_id, b.pad_id, b.bos_id) == (0, 1, None)
    got_a, got_b = a.encode_batch(TEXTS), b.encode_batch(TEXTS)
    for x, y, text in zip(got_a, got_b, TEXTS):
        assert x.dtype == np.int32 and x.tolist() == y.tolist() == _own_ids(a.tokenizer, text)
    assert a.chat_template is None and b.chat_template == CHATML_TEMPLATE
    assert a.encode_batch([]) == []


def test_adapter_tokens_given_and_refused():
    assert as_tokenizer(_word_level()).eos_id is None
    assert as_tokenizer(_word_level(), eos_token="world").eos_id == 2
    with pytest.raises(InvalidArgumentError, match="'<eos>' is not in the tokenizer's vocabulary"):
        as_tokenizer(_word_level(), eos_token="<eos>")
    with pytest.raises(InvalidArgumentError, match="tokenizers.Tokenizer"):
        as_tokenizer(object())


def test_adapter_loads_paths(tmp_path):
    tok = tiny_tokenizer()
    tok.save(str(tmp_path / "tokenizer.json"))
    hf = tiny_hf_tokenizer()
    hf.save_pretrained(str(tmp_path / "hf"))
    from_file, from_dir = as_tokenizer(tmp_path / "tokenizer.json"), as_tokenizer(str(tmp_path / "hf"))
    assert from_file.describe() == as_tokenizer(tok).describe()
    assert from_dir.eos_id == 0 and from_dir.chat_template == CHATML_TEMPLATE
    assert [x.tolist() for x in from_dir.encode_batch(TEXTS)] == [x.tolist() for x in from_file.encode_batch(TEXTS)]
    with pytest.raises(InvalidArgumentError, match="neither a file nor a directory"):
        as_tokenizer(str(tmp_path / "missing"))
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(InvalidArgumentError, match="not a tokenizer.json"):
        as_tokenizer(str(tmp_path / "bad.json"))


def test_a_python_tokenizer_works_too():
    slow = transformers.ByT5Tokenizer()
    adapter = as_tokenizer(slow)
    assert adapter.kind == "transformers" and not adapter.has_offsets and adapter.eos_id == 1
    out = Tokenize(slow, append_eos=True)({"text": TEXTS})
    assert [x.tolist() for x in out["input_ids"]] == [slow(t)["input_ids"] + [1] for t in TEXTS]


# -- Tokenize ----------------------------------------------------------------------------------
def test_batch_and_row_forms_agree(tok):
    t = Tokenize(tok)
    batch = t({"text": TEXTS, "id": list(range(len(TEXTS)))})
    assert set(batch) == {"id", "input_ids"} and batch["id"] == list(range(len(TEXTS)))
    for i, text in enumerate(TEXTS):
        row = t({"text": text, "id": i})
        assert set(row) == {"id", "input_ids"} and row["id"] == i
        assert row["input_ids"].dtype == batch["input_ids"][i].dtype == np.int32
        assert row["input_ids"].tolist() == batch["input_ids"][i].tolist() == _own_ids(tok, text)
    arrays = t({"text": np.array(TEXTS[:3])})["input_ids"]  # a numpy column of strings reads as a list
    assert [a.tolist() for a in arrays] == [_own_ids(tok, x) for x in TEXTS[:3]]


def test_columns_kept_and_renamed(tok):
    out = Tokenize(tok, keep_text=True, output_column="ids")({"text": TEXTS[:2]})
    assert out["text"] == TEXTS[:2] and len(out["ids"]) == 2
    out = Tokenize(tok, column="body")({"body": "hello", "text": "kept"})
    assert out["text"] == "kept" and "body" not in out


def test_append_eos(tok):
    plain, with_eos = Tokenize(tok)({"text": TEXTS}), Tokenize(tok, append_eos=True)({"text": TEXTS})
    for a, b in zip(plain["input_ids"], with_eos["input_ids"]):
        assert b.tolist() == a.tolist() + [0]
        assert b.flags.owndata  # a row held downstream holds nothing of the rest of its batch


def test_truncation(tok):
    full = Tokenize(tok)({"text": TEXTS})["input_ids"]
    cut = Tokenize(tok, max_length=7, truncation=True)({"text": TEXTS})["input_ids"]
    cut_eos = Tokenize(tok, max_length=7, truncation=True, append_eos=True)({"text": TEXTS})["input_ids"]
    assert max(len(a) for a in full) > 7
    for f, c, e in zip(full, cut, cut_eos):
        assert c.tolist() == f[:7].tolist()
        assert e.tolist() == f[:6].tolist() + [0]  # the eos is kept
    # exactly max_length is not too long
    n = len(full[0])
    assert Tokenize(tok, max_length=n)({"text": TEXTS[0]})["input_ids"].tolist() == full[0].tolist()


def test_too_long_without_truncation_says_how_to_fix(tok):
    n = len(Tokenize(tok)({"text": TEXTS[2]})["input_ids"])
    with pytest.raises(SequenceTooLongError, match=rf"row 2 of the batch .* has {n + 1} tokens, more than "
                                                   rf"max_length={n}: pass truncation=True") as info:
        Tokenize(tok, max_length=n, append_eos=True)({"text": ["Hi.", "Hello there.", TEXTS[2]]})
    assert isinstance(info.value, ValueError)


def test_bad_arguments_and_rows(tok):
    with pytest.raises(InvalidArgumentError, match="truncation=True needs max_length"):
        Tokenize(tok, truncation=True)
    with pytest.raises(InvalidArgumentError, match="max_length=0 must be a positive int"):
        Tokenize(tok, max_length=0)
    with pytest.raises(InvalidArgumentError, match="no end-of-sequence token: give it one"):
        Tokenize(_word_level(), append_eos=True)
    t = Tokenize(tok)
    with pytest.raises(InvalidRowError, match="no column 'text' to tokenize; its columns: body, id"):
        t({"body": "x", "id": 1})
    with pytest.raises(InvalidRowError, match=r"row 1 of the batch holds NoneType None in column 'text'"):
        t({"text": ["a", None]})
    with pytest.raises(InvalidRowError, match="holds a int"):
        t({"text": 3})
    with pytest.raises(InvalidRowError, match="leave input_columns out"):
        t(["a", "b"])


def test_describe_is_stable_and_follows_every_setting(tok):
    base = Tokenize(tok).describe()
    assert json.loads(json.dumps(base)) == base == Tokenize(tok).describe()
    changed = [Tokenize(tok, column="body"), Tokenize(tok, max_length=9), Tokenize(tok, max_length=9, truncation=True),
               Tokenize(tok, add_special_tokens=False), Tokenize(tok, append_eos=True),
               Tokenize(tok, output_column="ids"), Tokenize(tok, keep_text=True), Tokenize(tiny_tokenizer(600))]
    descriptions = [json.dumps(t.describe(), sort_keys=True) for t in changed]
    assert json.dumps(base, sort_keys=True) not in descriptions and len(set(descriptions)) == len(changed)


def test_describe_is_the_same_in_another_process():
    code = ("import json; from shardstream.testing.text import tiny_tokenizer, tiny_hf_tokenizer; "
            "from shardstream.text import Tokenize; "
            "print(json.dumps([Tokenize(tiny_tokenizer()).describe(), Tokenize(tiny_hf_tokenizer()).describe()]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONHASHSEED": "123"}).stdout
    assert json.loads(out) == [Tokenize(tiny_tokenizer()).describe(), Tokenize(tiny_hf_tokenizer()).describe()]


def test_describe_ignores_what_transformers_sets_per_call():
    hf = tiny_hf_tokenizer()
    before = as_tokenizer(hf).describe()
    hf(["a long text"] * 2, truncation=True, max_length=2, padding="max_length")  # leaves settings behind
    assert as_tokenizer(hf).describe() == before


def test_pickles_for_worker_processes(tok):
    t = Tokenize(tok, append_eos=True)
    t.describe()
    back = pickle.loads(pickle.dumps(t))
    assert back.describe() == t.describe()
    got, want = back({"text": TEXTS})["input_ids"], t({"text": TEXTS})["input_ids"]
    assert [x.tolist() for x in got] == [x.tolist() for x in want]


def test_per_row_transform_of_a_jsonl_source(tmp_path, tok):
    path = tmp_path / "docs.jsonl"
    path.write_text("".join(json.dumps({"id": i, "text": t}) + "\n" for i, t in enumerate(TEXTS)))
    source = TransformedShardedSource(JsonShardedSource(str(path)), Tokenize(tok, append_eos=True))
    rows = list(source)
    assert [r["id"] for r in rows] == list(range(len(TEXTS))) and all(set(r) == {"id", "input_ids"} for r in rows)
    assert [r["input_ids"].tolist() for r in rows] == [_own_ids(tok, t) + [0] for t in TEXTS]
    resumed = list(source.open_shard_at_row(source.shard_names[0], 5))
    assert [r["input_ids"].tolist() for r in resumed] == [r["input_ids"].tolist() for r in rows[5:]]


# -- in a processing chain -----------------------------------------------------------------------
@pytest.fixture(scope="module")
def jsonl_docs(tmp_path_factory):
    root = tmp_path_factory.mktemp("docs")
    for part in range(2):
        with open(root / f"part{part}.jsonl", "w") as f:
            for i in range(part * 40, part * 40 + 40):
                f.write(json.dumps({"id": i, "text": TEXTS[i % len(TEXTS)]}) + "\n")
    return str(root)


def test_batched_map_over_a_dataset(jsonl_docs, tok):
    from shardstream import StreamingDataset

    t = Tokenize(tok, append_eos=True)
    rows = list(StreamingDataset(local=jsonl_docs).map(t, batched=True, batch_size=16, remove_columns=["text"]))
    assert [r["id"] for r in rows] == list(range(80)) and all(set(r) == {"id", "input_ids"} for r in rows)
    assert [r["input_ids"].tolist() for r in rows] == [_own_ids(tok, TEXTS[i % len(TEXTS)]) + [0] for i in range(80)]
    kept = next(iter(StreamingDataset(local=jsonl_docs).map(t, batched=True, batch_size=16)))
    assert "text" in kept  # map merges what the function returns: remove_columns drops the input


def test_fingerprint_follows_the_settings(jsonl_docs):
    from shardstream import StreamingDataset

    def chain(**kwargs):
        return StreamingDataset(local=jsonl_docs).map(Tokenize(tiny_tokenizer(), **kwargs), batched=True)

    assert chain().fingerprint() == chain().fingerprint()
    assert len({chain().fingerprint(), chain(append_eos=True).fingerprint(),
                chain(max_length=8, truncation=True).fingerprint()}) == 3


def test_a_tokenizing_chain_resumes_exactly(jsonl_docs):
    from shardstream import StreamingDataset
    from shardstream.testing.chains import check_chain_resumes

    t = Tokenize(tiny_tokenizer(), append_eos=True)

    def make(world):
        return (StreamingDataset(local=jsonl_docs, world=world, shuffle=True, shuffle_seed=3)
                .map(t, batched=True, batch_size=8, remove_columns=["text"]).shuffle(seed=1, buffer_size=5))

    report = check_chain_resumes(make, worlds=[(1, 1, 0), (1, 2, 0)], atoms=lambda row: [row["id"]],
                                 steps=[0, 3, 11, 30])
    assert report.resumes == 16 and report.items_compared > 0


def test_tokenized_documents_pack_and_resume_exactly(jsonl_docs):
    from shardstream import StreamingDataset
    from shardstream.testing.chains import check_chain_resumes

    t = Tokenize(tiny_tokenizer(), append_eos=True)

    def make(world=None):
        return (StreamingDataset(local=jsonl_docs, world=world, shuffle=True, shuffle_seed=3)
                .map(t, batched=True, batch_size=16, remove_columns=["text"]).pack(64))

    packs = list(make())
    assert all(p["input_ids"].shape == (64,) and p["input_ids"].dtype == np.int32 for p in packs)
    tokens = np.concatenate([p["input_ids"][p["segment_ids"] > 0] for p in packs])
    want = np.concatenate([t({"text": TEXTS[i % len(TEXTS)]})["input_ids"] for i in range(80)])
    assert sorted(tokens.tolist()) == sorted(want.tolist()) and (tokens == 0).sum() == 80  # an eos per document
    check_chain_resumes(make, worlds=[(1, 1, 0), (1, 2, 0)], steps=[0, 4, 9],
                        atoms=lambda p: p["input_ids"][p["segment_ids"] > 0].tolist())
