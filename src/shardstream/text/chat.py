"""Chat rows to training rows: :class:`ChatTemplateTransform` renders a conversation (a list of
``{"role", "content"}`` messages) with a chat template and tokenizes it, with the loss mask of supervised
fine-tuning: 1 on the tokens of the assistant's messages and the token that ends each of them, 0 on the
system and user messages and on what the template adds around messages.

The mask is made from characters: the rendered text's characters of each assistant message are found
(:mod:`.template` says how), the text is tokenized once with each token's span of characters (the
tokenizer's offsets), and a token is learned when its span overlaps those characters (numpy: a prefix
sum over the characters, one subtraction per token). Tokenizers that give no offsets (``transformers``'
Python tokenizers) tokenize the learned and the other pieces of the text separately, in one batch call,
so token boundaries fall where the pieces meet.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Optional, Sequence

import numpy as np
import xxhash

from ..errors import ChatTemplateError, InvalidArgumentError, InvalidRowError
from .sandbox import TemplateLimits
from .template import Renderer
from .tokenize import check_max_length, column_of, too_long
from .tokenizers import TokenizerAdapter, as_tokenizer


def _roles(mask: Any) -> Optional[tuple[str, ...]]:
    if mask is None:
        return None
    roles = (mask,) if isinstance(mask, str) else tuple(mask) if isinstance(mask, (list, tuple)) else None
    if not roles or not all(isinstance(r, str) and r for r in roles):
        raise InvalidArgumentError(f"mask={mask!r} must be a role (e.g. 'assistant'), a list of roles whose "
                                   "messages the model learns from, or None (no loss_mask column)")
    return roles


def token_mask(length: int, spans: Sequence[tuple[int, int]], offsets: Any) -> np.ndarray:
    """1 on the tokens (``offsets``: each token's ``(start, stop)`` characters) overlapping ``spans`` of a text
    of ``length`` characters, else 0, as ``int8``."""
    offsets = np.asarray(offsets, dtype=np.int64).reshape(-1, 2)
    if not spans or offsets.size == 0:
        return np.zeros(len(offsets), dtype=np.int8)
    edges = np.zeros(length + 1, dtype=np.int32)
    for a, b in spans:
        edges[a] += 1
        edges[b] -= 1
    inside = np.concatenate([[0], np.cumsum(np.cumsum(edges[:length]) > 0)])
    return (inside[offsets[:, 1]] > inside[offsets[:, 0]]).astype(np.int8)


class ChatTemplateTransform:
    """Renders ``messages_field`` with the chat template and tokenizes it (see the module docstring).

    ``ds.map(ChatTemplateTransform(tok), batched=True, remove_columns=["messages"])``

    - ``tokenizer``: a ``transformers`` tokenizer, a ``tokenizers.Tokenizer``, a path to either, or a
      :class:`~.tokenizers.TokenizerAdapter`; ``chat_template``: a Jinja template string, by default the
      tokenizer's own (a ``tokenizers.Tokenizer`` has none: give one).
    - ``tokenize=True``: the row gets ``input_ids`` (``int32``) and, unless ``mask=None``, ``loss_mask``
      (``int8``, 1 on the messages of the roles in ``mask``, ``"assistant"`` by default, and their ends of
      turn); ``tokenize=False``: the row gets ``text``, the rendered conversation.
    - ``max_length``: with ``truncation=True`` both arrays keep their first ``max_length`` tokens; without, a
      longer conversation raises :class:`~shardstream.errors.SequenceTooLongError`.
    - ``add_generation_prompt``: end with the template's prompt for the assistant's next message.
    - ``template_limits``: the budget of one rendering (:class:`~.sandbox.TemplateLimits`: loop iterations,
      characters); a template that passes it raises :class:`~shardstream.errors.ChatTemplateError`.

    Takes a row (``messages_field`` holds a list of messages) and returns a row, or a batch (it holds a
    list of such lists) and returns a batch; ``messages_field`` is left out of what it returns, the other
    columns are kept (``map`` merges: pass ``remove_columns=[messages_field]`` there).
    """

    def __init__(self, tokenizer: Any, messages_field: str = "messages", chat_template: Optional[str] = None,
                 add_generation_prompt: bool = False, tokenize: bool = True, max_length: Optional[int] = None,
                 truncation: bool = False, mask: Any = "assistant",
                 template_limits: Optional[TemplateLimits] = None) -> None:
        self.tokenizer: TokenizerAdapter = as_tokenizer(tokenizer)
        if not isinstance(messages_field, str) or not messages_field:
            raise InvalidArgumentError(f"messages_field={messages_field!r} must be a column name (a non-empty str)")
        template = self.tokenizer.chat_template if chat_template is None else chat_template
        if not isinstance(template, str) or not template.strip():
            raise ChatTemplateError(
                f"{'the tokenizer has no chat template' if chat_template is None else 'chat_template= is empty'}: "
                "pass chat_template='...' (a Jinja template, e.g. shardstream.testing.text.CHATML_TEMPLATE, or "
                "the chat_template of the model's tokenizer_config.json)")
        check_max_length(max_length, truncation)
        if max_length is not None and not tokenize:
            raise InvalidArgumentError("max_length= counts tokens; with tokenize=False there are none: leave it out")
        self.messages_field, self.chat_template = messages_field, template
        self.add_generation_prompt, self.tokenize = bool(add_generation_prompt), bool(tokenize)
        self.max_length = None if max_length is None else int(max_length)
        self.truncation, self.mask = bool(truncation), _roles(mask)
        if template_limits is not None and not isinstance(template_limits, TemplateLimits):
            raise InvalidArgumentError(f"template_limits={template_limits!r} must be a shardstream.text.TemplateLimits "
                                       "(or None: the defaults)")
        self.renderer = Renderer(template, self.tokenizer.template_variables(), self.tokenizer.special_tokens,
                                 template_limits)

    # -- rows and batches -----------------------------------------------------------------------
    def __call__(self, batch: Mapping) -> dict:
        value = column_of(batch, self.messages_field, "ChatTemplateTransform", "of messages", "messages_field")
        if isinstance(value, np.ndarray):
            value = value.tolist()
        if not isinstance(value, (list, tuple)) or not value:
            raise InvalidRowError(f"column {self.messages_field!r} holds {value!r:.80}; it must hold a conversation "
                                  "(a non-empty list of {'role': ..., 'content': ...}) or a batch of them")
        single = isinstance(value[0], Mapping)
        out = self.apply([value] if single else value)
        rest = {k: v for k, v in batch.items() if k != self.messages_field}
        return {**rest, **({k: v[0] for k, v in out.items()} if single else out)}

    def apply(self, conversations: Sequence[Any]) -> dict[str, list]:
        """The new columns of a batch of ``conversations``: ``{"text": [...]}``, or ``{"input_ids": [...],
        "loss_mask": [...]}`` (without ``loss_mask`` when ``mask=None``)."""
        rendered = [self._render(c, i, len(conversations)) for i, c in enumerate(conversations)]
        if not self.tokenize:
            return {"text": [text for text, _ in rendered]}
        if self.mask is None:
            ids = self.tokenizer.encode_batch([text for text, _ in rendered], add_special_tokens=False)
            return {"input_ids": self._limit(ids, list(ids), rendered)[0]}
        if self.tokenizer.has_offsets:
            ids, masks = self._with_offsets(rendered)
        else:
            ids, masks = self._by_pieces(rendered)
        ids, masks = self._limit(ids, masks, rendered)
        return {"input_ids": ids, "loss_mask": masks}

    def _render(self, messages: Any, i: int, n: int) -> tuple[str, list]:
        where = "the conversation" if n == 1 else f"conversation {i} of the batch"
        messages = _checked(messages, where, self.messages_field)
        learned = [k for k, m in enumerate(messages) if m["role"] in self.mask] if self.mask and self.tokenize else []
        return self.renderer.learned_spans(messages, learned, self.add_generation_prompt, where)

    # -- tokens and the mask --------------------------------------------------------------------
    def _with_offsets(self, rendered: list) -> tuple[list, list]:
        encoded = self.tokenizer.encode_with_offsets([text for text, _ in rendered])
        ids = [np.asarray(t, dtype=np.int32) for t, _ in encoded]
        masks = [token_mask(len(text), spans, offsets) for (text, spans), (_, offsets) in zip(rendered, encoded)]
        return ids, masks

    def _by_pieces(self, rendered: list) -> tuple[list, list]:
        pieces, learned, counts = [], [], []
        for text, spans in rendered:
            cuts = sorted({0, len(text), *(c for span in spans for c in span)})
            inside = [any(a <= lo and hi <= b for a, b in spans) for lo, hi in zip(cuts, cuts[1:])]
            pieces += [text[lo:hi] for lo, hi in zip(cuts, cuts[1:])]
            learned += inside
            counts.append(len(inside))
        lists = self.tokenizer.encode_lists(pieces, add_special_tokens=False)
        ids, masks, at = [], [], 0
        for count in counts:
            part = lists[at:at + count]
            flags = learned[at:at + count]
            at += count
            ids.append(np.fromiter((t for p in part for t in p), dtype=np.int32))
            masks.append(np.repeat(np.array(flags, dtype=np.int8), [len(p) for p in part]))
        return ids, masks

    def _limit(self, ids: list, masks: list, rendered: list) -> tuple[list, list]:
        if self.max_length is None:
            return ids, masks
        for i, row in enumerate(ids):
            if len(row) > self.max_length:
                if not self.truncation:
                    where = "the conversation" if len(ids) == 1 else f"conversation {i} of the batch"
                    raise too_long(len(row), self.max_length, f"{where} ({rendered[i][0]!r:.60})")
                ids[i], masks[i] = row[:self.max_length], masks[i][:self.max_length]
        return ids, masks

    def describe(self) -> dict:
        """What this transform does, as JSON-able data (for a pipeline's fingerprint)."""
        return {"op": "ChatTemplateTransform", "tokenizer": self.tokenizer.describe(),
                "template": xxhash.xxh3_64_hexdigest(self.chat_template.encode()),
                "messages_field": self.messages_field, "add_generation_prompt": self.add_generation_prompt,
                "tokenize": self.tokenize, "max_length": self.max_length, "truncation": self.truncation,
                "mask": None if self.mask is None else list(self.mask)}

    def __repr__(self) -> str:
        return (f"ChatTemplateTransform({self.tokenizer!r}, messages_field={self.messages_field!r}, "
                f"tokenize={self.tokenize}, mask={self.mask})")


def _checked(messages: Any, where: str, field: str) -> list:
    """``messages`` as a list of message dicts, or a typed error naming the first bad one."""
    if not isinstance(messages, (list, tuple)) or not messages:
        raise InvalidRowError(f"{where} in column {field!r} is {messages!r:.80}; a conversation is a non-empty list "
                              "of {'role': ..., 'content': ...}")
    for k, m in enumerate(messages):
        if not isinstance(m, Mapping) or not isinstance(m.get("role"), str) or not isinstance(m.get("content"), str):
            raise InvalidRowError(
                f"message {k} of {where} in column {field!r} is {m!r:.80}; each message must be a dict with a str "
                "'role' and a str 'content' (e.g. {'role': 'user', 'content': 'Hi'})")
    return messages if isinstance(messages, list) else list(messages)
