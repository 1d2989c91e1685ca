"""Text fixtures that need no download: English-like documents and chats generated from a seed, and a small
byte-level BPE tokenizer trained on them, for tests, benchmarks and examples.

- :func:`generated_texts` / :func:`generated_chats`: deterministic documents and conversations.
- :func:`tiny_tokenizer`: a ``tokenizers.Tokenizer`` (byte-level BPE, any text encodes and decodes back)
  with the special tokens ``<|endoftext|>`` (end of sequence), ``<pad>``, ``<|im_start|>`` and
  ``<|im_end|>``. Training takes a fraction of a second; it is done once per process and set of
  arguments, and every call returns a fresh copy (changing one changes no other).
- :func:`tiny_hf_tokenizer`: the same tokenizer as a ``transformers.PreTrainedTokenizerFast`` with its end
  and padding tokens set and the ChatML template :data:`CHATML_TEMPLATE`.

Needs the ``text`` extra (``tokenizers``); :func:`tiny_hf_tokenizer` also needs ``transformers``.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from ..errors import InvalidArgumentError, MissingDependencyError, require

EOS_TOKEN = "<|endoftext|>"
PAD_TOKEN = "<pad>"
SPECIAL_TOKENS = (EOS_TOKEN, PAD_TOKEN, "<|im_start|>", "<|im_end|>")

#: The ChatML chat template (each message ``<|im_start|>{role}\n{content}<|im_end|>\n``)
CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

_WORDS = np.array("""
the of and to in is that it was for on are as with his they at be this from have or by one had not but what
all were when we there can an your which their said if do will each about how up out them then she many some
so these would other into has more her two like him see time could no make than first been its who now people
my made over did down only way find use may water long little very after words called just where most know
get through back much before go good new write our used me man too any day same right look think also around
another came come work three word must because does part even place well such here take why things help put
years different away again off went old number great tell men say small every found still between name should
home big give air line set own under read last never us left end along while might next sound below saw
something thought both few those always looked show large often together asked house world going want school
important until form food keep children feet land side without boy once animals life enough took sometimes four
head above kind began almost live page got earth need far hand high year mother light parts country father let
night following picture being study second eyes soon times story boys since white days ever paper hard near
sentence better best across during today others however sure means knew try told young miles sun ways thing
whole hear example heard several change answer room sea against top turned learn point city play toward five
using himself usually river stream shard model token train data batch order cache
""".split())
_ENDS = np.array([".", ".", ".", "?", "!"])
_SYSTEM = ("You are a helpful assistant.", "Answer briefly.", "You explain things to children.")
_trained: dict[tuple[int, int], str] = {}
_lock = threading.Lock()


def _sentences(rng: np.random.Generator, count: int) -> list[str]:
    lengths = rng.integers(4, 16, count)
    words = _WORDS[rng.integers(0, len(_WORDS), int(lengths.sum()))].tolist()
    ends = _ENDS[rng.integers(0, len(_ENDS), count)].tolist()
    out, at = [], 0
    for n, end in zip(lengths.tolist(), ends):
        chunk = words[at:at + n]
        at += n
        out.append(chunk[0].capitalize() + " " + " ".join(chunk[1:]) + end)
    return out


def generated_texts(n: int, seed: int = 0, *, min_sentences: int = 1, max_sentences: int = 6) -> list[str]:
    """``n`` English-like documents of ``min_sentences`` to ``max_sentences`` sentences each, the same for the
    same arguments on every machine."""
    if n < 0 or not 1 <= min_sentences <= max_sentences:
        raise InvalidArgumentError(f"n={n}, min_sentences={min_sentences}, max_sentences={max_sentences}: n must "
                                   "be >= 0 and 1 <= min_sentences <= max_sentences")
    rng = np.random.default_rng([seed, 0x7e47])
    counts = rng.integers(min_sentences, max_sentences + 1, n)
    sentences = _sentences(rng, int(counts.sum()))
    bounds = np.concatenate([[0], np.cumsum(counts)]).tolist()
    return [" ".join(sentences[a:b]) for a, b in zip(bounds, bounds[1:])]


def generated_chats(n: int, seed: int = 0, *, max_turns: int = 3) -> list[list[dict]]:
    """``n`` conversations, each a list of ``{"role", "content"}`` messages: a system message in about half
    of them, then 1 to ``max_turns`` pairs of user and assistant messages."""
    if n < 0 or max_turns < 1:
        raise InvalidArgumentError(f"n={n}, max_turns={max_turns}: n must be >= 0 and max_turns >= 1")
    rng = np.random.default_rng([seed, 0xc4a7])
    turns = rng.integers(1, max_turns + 1, n).tolist()
    system = rng.integers(0, 2 * len(_SYSTEM), n).tolist()  # >= len(_SYSTEM): no system message
    texts = iter(generated_texts(2 * sum(turns), seed + 1, max_sentences=3))
    chats = []
    for k, s in zip(turns, system):
        chat = [{"role": "system", "content": _SYSTEM[s]}] if s < len(_SYSTEM) else []
        for _ in range(k):
            chat.append({"role": "user", "content": next(texts)})
            chat.append({"role": "assistant", "content": next(texts)})
        chats.append(chat)
    return chats


def _train(vocab_size: int, seed: int) -> str:
    tokenizers = require("tokenizers", "text", "tiny_tokenizer")
    from tokenizers import decoders, models, pre_tokenizers, trainers

    tok = tokenizers.Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=list(SPECIAL_TOKENS), show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    corpus = generated_texts(2000, seed) + [m["content"] for c in generated_chats(200, seed) for m in c]
    tok.train_from_iterator(corpus, trainer=trainer)
    return tok.to_str()


def tiny_tokenizer(vocab_size: int = 512, seed: int = 0) -> Any:
    """A byte-level BPE ``tokenizers.Tokenizer`` of ``vocab_size`` tokens trained on :func:`generated_texts`
    (``seed``) with :data:`SPECIAL_TOKENS`; a fresh copy of the one trained once per process."""
    if vocab_size < 256 + len(SPECIAL_TOKENS):
        raise InvalidArgumentError(f"vocab_size={vocab_size} is too small: a byte-level tokenizer needs the 256 "
                                   f"bytes and {len(SPECIAL_TOKENS)} special tokens; give at least "
                                   f"{256 + len(SPECIAL_TOKENS)}")
    tokenizers = require("tokenizers", "text", "tiny_tokenizer")
    with _lock:
        if (vocab_size, seed) not in _trained:
            _trained[vocab_size, seed] = _train(vocab_size, seed)
        return tokenizers.Tokenizer.from_str(_trained[vocab_size, seed])


def tiny_hf_tokenizer(vocab_size: int = 512, seed: int = 0) -> Any:
    """:func:`tiny_tokenizer` as a ``transformers.PreTrainedTokenizerFast`` with ``eos_token`` and
    ``pad_token`` set and ``chat_template`` :data:`CHATML_TEMPLATE`."""
    try:
        from transformers import PreTrainedTokenizerFast
    except ImportError as exc:
        raise MissingDependencyError("tiny_hf_tokenizer needs the optional package 'transformers', which is not "
                                     "installed; install it with: pip install transformers") from exc
    return PreTrainedTokenizerFast(tokenizer_object=tiny_tokenizer(vocab_size, seed), eos_token=EOS_TOKEN,
                                   pad_token=PAD_TOKEN, chat_template=CHATML_TEMPLATE)
