"""ChatTemplateTransform: rendering, the SFT loss mask, both forms, errors, and a JSONL source of chats."""

from __future__ import annotations

import json
import pickle

import numpy as np
import pytest

pytest.importorskip("tokenizers")
pytest.importorskip("jinja2")
transformers = pytest.importorskip("transformers")

from shardstream import JsonShardedSource  # noqa: E402
from shardstream.errors import (  # noqa: E402
    ChatTemplateError, InvalidArgumentError, InvalidRowError, SequenceTooLongError,
)
from shardstream.sources.base import TransformedShardedSource  # noqa: E402
from shardstream.testing.text import CHATML_TEMPLATE, generated_chats, tiny_hf_tokenizer, tiny_tokenizer  # noqa: E402
from shardstream.text import ChatTemplateTransform, as_tokenizer  # noqa: E402
from shardstream.text.chat import token_mask  # noqa: E402

CHATS = generated_chats(12, seed=5) + [[{"role": "user", "content": "Hi ✓"}, {"role": "assistant", "content": ""}]]

# transformers' way of marking what the assistant writes: {% generation %} blocks
GENERATION_TEMPLATE = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' }}"
    "{% if message['role'] == 'assistant' %}{% generation %}{{ message['content'] + '<|im_end|>' }}{% endgeneration %}"
    "{% else %}{{ message['content'] + '<|im_end|>' }}{% endif %}{{ '\n' }}{% endfor %}")
TRIM_TEMPLATE = CHATML_TEMPLATE.replace("message['content']", "(message['content'] | trim)")
EOS_TEMPLATE = ("{% for message in messages %}{% if message['role'] == 'assistant' %}"
                "{{ ' ' + message['content'] + ' ' + eos_token }}"
                "{% else %}{{ '[' + message['role'] + '] ' + message['content'] }}{% endif %}{% endfor %}")


@pytest.fixture(params=["tokenizers", "transformers"])
def tok(request):
    return tiny_tokenizer() if request.param == "tokenizers" else tiny_hf_tokenizer()


def _runs(mask):
    """``(start, stop)`` of each run of ones in ``mask``."""
    edges = np.flatnonzero(np.diff(np.concatenate([[0], mask, [0]])))
    return list(zip(edges[::2], edges[1::2]))


def _learned_texts(tok, out):
    adapter = as_tokenizer(tok)
    return [adapter.decode(out["input_ids"][a:b]) for a, b in _runs(out["loss_mask"])]


def _assistant(chat, end="<|im_end|>"):
    return [m["content"] + end for m in chat if m["role"] == "assistant"]


def test_mask_is_exactly_the_assistant_turns_and_their_end(tok):
    t = ChatTemplateTransform(tok, chat_template=CHATML_TEMPLATE)
    for chat in CHATS:
        out = t({"messages": chat})
        assert out["input_ids"].dtype == np.int32 and out["loss_mask"].dtype == np.int8
        assert out["input_ids"].shape == out["loss_mask"].shape
        assert _learned_texts(tok, out) == _assistant(chat)
        text = as_tokenizer(tok).decode(out["input_ids"])
        rendered = ChatTemplateTransform(tok, chat_template=CHATML_TEMPLATE, tokenize=False)({"messages": chat})
        assert text == rendered["text"]


def test_same_text_ids_and_mask_as_transformers():
    hf = tiny_hf_tokenizer()
    ours = ChatTemplateTransform(hf, chat_template=GENERATION_TEMPLATE)
    for chat in CHATS:
        want = hf.apply_chat_template(chat, chat_template=GENERATION_TEMPLATE, tokenize=True, return_dict=True,
                                      return_assistant_tokens_mask=True)
        got = ours({"messages": chat})
        assert got["input_ids"].tolist() == list(want["input_ids"])
        assert got["loss_mask"].tolist() == list(want["assistant_masks"])
        text = ChatTemplateTransform(hf, tokenize=False, add_generation_prompt=True)({"messages": chat})["text"]
        assert text == hf.apply_chat_template(chat, tokenize=False, add_generation_prompt=True)


def test_batch_and_row_forms_agree(tok):
    t = ChatTemplateTransform(tok, chat_template=CHATML_TEMPLATE)
    batch = t({"messages": CHATS, "id": list(range(len(CHATS)))})
    assert set(batch) == {"id", "input_ids", "loss_mask"} and batch["id"] == list(range(len(CHATS)))
    for i, chat in enumerate(CHATS):
        row = t({"messages": chat, "id": i})
        assert set(row) == {"id", "input_ids", "loss_mask"} and row["id"] == i
        assert row["input_ids"].tolist() == batch["input_ids"][i].tolist()
        assert row["loss_mask"].tolist() == batch["loss_mask"][i].tolist()
    texts = ChatTemplateTransform(tok, chat_template=CHATML_TEMPLATE, tokenize=False)({"messages": CHATS})["text"]
    assert texts[0].startswith("<|im_start|>") and len(texts) == len(CHATS)


def test_generation_prompt_and_other_roles(tok):
    chat = CHATS[0]
    out = ChatTemplateTransform(tok, chat_template=CHATML_TEMPLATE, add_generation_prompt=True)({"messages": chat})
    assert as_tokenizer(tok).decode(out["input_ids"]).endswith("<|im_end|>\n<|im_start|>assistant\n")
    assert _learned_texts(tok, out) == _assistant(chat)
    both = ChatTemplateTransform(tok, chat_template=CHATML_TEMPLATE, mask=["user", "assistant"])({"messages": chat})
    assert _learned_texts(tok, both) == [m["content"] + "<|im_end|>" for m in chat if m["role"] != "system"]
    assert both["loss_mask"].sum() > out["loss_mask"].sum()
    plain = ChatTemplateTransform(tok, chat_template=CHATML_TEMPLATE, mask=None)({"messages": chat})
    assert set(plain) == {"input_ids"}
    assert plain["input_ids"].tolist() == out["input_ids"][:len(plain["input_ids"])].tolist()


def test_a_template_that_trims_content_is_located_by_prefixes(tok):
    chats = [[{"role": "user", "content": "  Hello  "}, {"role": "assistant", "content": "  Hi there.  "},
              {"role": "user", "content": "More?"}, {"role": "assistant", "content": "Yes, more.\n"}]]
    out = ChatTemplateTransform(tok, chat_template=TRIM_TEMPLATE)({"messages": chats})
    assert _learned_texts(tok, {k: v[0] for k, v in out.items()}) == ["Hi there.<|im_end|>", "Yes, more.<|im_end|>"]


def test_end_of_turn_after_whitespace(tok):
    chat = CHATS[1]
    out = ChatTemplateTransform(tok, chat_template=EOS_TEMPLATE)({"messages": chat})
    # the token of the space before the content holds a character of the content too: it is learned
    assert _learned_texts(tok, out) == [" " + c for c in _assistant(chat, " <|endoftext|>")]


def test_python_tokenizer_masks_by_pieces():
    slow = transformers.ByT5Tokenizer()  # bytes as tokens, no character offsets
    template = "{% for m in messages %}{{ m['role'] + ': ' + m['content'] + eos_token }}{% endfor %}"
    t = ChatTemplateTransform(slow, chat_template=template)
    for chat in CHATS[:4]:
        out = t({"messages": chat})
        text = "".join(f"{m['role']}: {m['content']}</s>" for m in chat)
        assert out["input_ids"].tolist() == slow(text, add_special_tokens=False)["input_ids"]
        assert [slow.decode(out["input_ids"][a:b]) for a, b in _runs(out["loss_mask"])] == _assistant(chat, "</s>")


def test_max_length(tok):
    row = {"messages": CHATS[0]}
    full = ChatTemplateTransform(tok, chat_template=CHATML_TEMPLATE)(row)
    cut = ChatTemplateTransform(tok, chat_template=CHATML_TEMPLATE, max_length=20, truncation=True)(row)
    assert cut["input_ids"].tolist() == full["input_ids"][:20].tolist()
    assert cut["loss_mask"].tolist() == full["loss_mask"][:20].tolist()
    n = len(full["input_ids"])
    with pytest.raises(SequenceTooLongError, match=f"has {n} tokens, more than max_length=20"):
        ChatTemplateTransform(tok, chat_template=CHATML_TEMPLATE, max_length=20)({"messages": CHATS[0]})
    with pytest.raises(InvalidArgumentError, match="with tokenize=False there are none"):
        ChatTemplateTransform(tok, chat_template=CHATML_TEMPLATE, max_length=20, tokenize=False)


def test_template_errors(tok):
    with pytest.raises(ChatTemplateError, match="the tokenizer has no chat template: pass chat_template="):
        ChatTemplateTransform(tiny_tokenizer())
    assert ChatTemplateTransform(tiny_hf_tokenizer()).chat_template == CHATML_TEMPLATE  # the tokenizer's own
    with pytest.raises(ChatTemplateError, match="does not compile"):
        ChatTemplateTransform(tok, chat_template="{% for m in messages %}")
    strict = "{% if messages[0]['role'] != 'user' %}{{ raise_exception('start with a user') }}{% endif %}"
    batch = {"messages": [CHATS[-1], [{"role": "assistant", "content": "x"}]]}
    with pytest.raises(ChatTemplateError, match="fails on conversation 1 of the batch: start with a user"):
        ChatTemplateTransform(tok, chat_template=strict + CHATML_TEMPLATE)(batch)
    clipped = CHATML_TEMPLATE.replace("message['content']", "message['content'][1:]")
    chat = [{"role": "user", "content": "Hello"}, {"role": "assistant", "content": "Hi there."}]
    with pytest.raises(ChatTemplateError, match="changes the content of message 1 .*mask=None"):
        ChatTemplateTransform(tok, chat_template=clipped)({"messages": chat})
    assert "input_ids" in ChatTemplateTransform(tok, chat_template=clipped, mask=None)({"messages": chat})


def test_content_the_template_rewrites_whole_is_found(tok):
    upper = CHATML_TEMPLATE.replace("message['content']", "(message['content'] | upper)")
    out = ChatTemplateTransform(tok, chat_template=upper)({"messages": CHATS[0]})
    assert _learned_texts(tok, out) == [c.upper() + "<|im_end|>" for c in _assistant(CHATS[0], "")]


def test_sandboxed():
    escape = "{{ messages.__class__.__mro__ }}"
    with pytest.raises(ChatTemplateError):
        ChatTemplateTransform(tiny_tokenizer(), chat_template=escape, tokenize=False)({"messages": CHATS[0]})


def test_bad_rows(tok):
    t = ChatTemplateTransform(tok, chat_template=CHATML_TEMPLATE)
    with pytest.raises(InvalidRowError, match="no column 'messages' of messages; its columns: conversation, id"):
        t({"conversation": CHATS[0], "id": 3})
    with pytest.raises(InvalidRowError, match="message 1 of the conversation .* a str 'role' and a str 'content'"):
        t({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant"}]})
    with pytest.raises(InvalidRowError, match="message 0 of conversation 1 of the batch"):
        t({"messages": [CHATS[0], [{"content": "no role"}]]})
    with pytest.raises(InvalidRowError, match="must hold a conversation"):
        t({"messages": "hello"})
    with pytest.raises(InvalidRowError, match="must hold a conversation"):
        t({"messages": []})
    with pytest.raises(InvalidArgumentError, match="mask=3"):
        ChatTemplateTransform(tok, chat_template=CHATML_TEMPLATE, mask=3)


def test_describe_and_pickle(tok):
    t = ChatTemplateTransform(tok, chat_template=CHATML_TEMPLATE)
    base = json.dumps(t.describe(), sort_keys=True)
    assert base == json.dumps(ChatTemplateTransform(tok, chat_template=CHATML_TEMPLATE).describe(), sort_keys=True)
    others = [ChatTemplateTransform(tok, chat_template=TRIM_TEMPLATE), ChatTemplateTransform(tok, chat_template=
              CHATML_TEMPLATE, mask=None), ChatTemplateTransform(tok, chat_template=CHATML_TEMPLATE, tokenize=False),
              ChatTemplateTransform(tok, chat_template=CHATML_TEMPLATE, add_generation_prompt=True),
              ChatTemplateTransform(tok, chat_template=CHATML_TEMPLATE, messages_field="chat"),
              ChatTemplateTransform(tok, chat_template=CHATML_TEMPLATE, max_length=64, truncation=True),
              ChatTemplateTransform(tiny_tokenizer(600), chat_template=CHATML_TEMPLATE)]
    described = {json.dumps(o.describe(), sort_keys=True) for o in others}
    assert base not in described and len(described) == len(others)
    back = pickle.loads(pickle.dumps(t))
    want, got = t({"messages": CHATS}), back({"messages": CHATS})
    assert [x.tolist() for x in got["loss_mask"]] == [x.tolist() for x in want["loss_mask"]]


def test_token_mask_counts_overlapping_tokens():
    offsets = [(0, 3), (3, 5), (5, 9), (9, 9), (9, 12)]
    assert token_mask(12, [(4, 6)], offsets).tolist() == [0, 1, 1, 0, 0]
    assert token_mask(12, [(0, 3), (9, 12)], offsets).tolist() == [1, 0, 0, 0, 1]
    assert token_mask(12, [], offsets).tolist() == [0] * 5


def test_per_row_transform_of_a_jsonl_source_of_chats(tmp_path, tok):
    path = tmp_path / "chats.jsonl"
    path.write_text("".join(json.dumps({"id": i, "messages": c}) + "\n" for i, c in enumerate(CHATS)))
    t = ChatTemplateTransform(tok, chat_template=CHATML_TEMPLATE, max_length=512, truncation=True)
    rows = list(TransformedShardedSource(JsonShardedSource(str(path)), t))
    assert [r["id"] for r in rows] == list(range(len(CHATS)))
    for row, chat in zip(rows, CHATS):
        assert set(row) == {"id", "input_ids", "loss_mask"}
        assert _learned_texts(tok, row) == _assistant(chat)


def test_batched_map_over_a_dataset_of_chats_resumes_exactly(tmp_path):
    from shardstream import StreamingDataset
    from shardstream.testing.chains import check_chain_resumes

    chats = generated_chats(60, seed=8)
    with open(tmp_path / "chats.jsonl", "w") as f:
        f.writelines(json.dumps({"id": i, "messages": c}) + "\n" for i, c in enumerate(chats))
    tok = tiny_hf_tokenizer()
    t = ChatTemplateTransform(tok)

    def make(world=None):
        return (StreamingDataset(local=str(tmp_path), world=world, shuffle=True, shuffle_seed=2)
                .map(t, batched=True, batch_size=8, remove_columns=["messages"]))

    rows = list(make())
    assert sorted(r["id"] for r in rows) == list(range(60))
    for row in rows:
        assert set(row) == {"id", "input_ids", "loss_mask"}
        assert _learned_texts(tok, row) == _assistant(chats[row["id"]])
    check_chain_resumes(make, worlds=[(1, 1, 0), (1, 2, 0)], atoms=lambda row: [row["id"]], steps=[0, 5, 17])


def test_packed_chats_keep_their_loss_mask(tmp_path):
    from shardstream import StreamingDataset

    chats = generated_chats(30, seed=9)
    with open(tmp_path / "chats.jsonl", "w") as f:
        f.writelines(json.dumps({"messages": c}) + "\n" for c in chats)
    tok = tiny_hf_tokenizer()
    ds = StreamingDataset(local=str(tmp_path)).map(ChatTemplateTransform(tok), batched=True, batch_size=8,
                                                    remove_columns=["messages"])
    packs = list(ds.pack(1024, strategy="first_fit", keep_remainder=False))
    learned = [tok.decode(p["input_ids"][(p["segment_ids"] == s) & (p["loss_mask"] == 1)].tolist())
               for p in packs for s in range(1, int(p["segment_ids"].max()) + 1)]
    assert sorted(learned) == sorted("".join(_assistant(c)) for c in chats)
