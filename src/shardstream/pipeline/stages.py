"""The stages of a pipeline made from their configs: the tokenizer and its map, packing, the loader."""

from __future__ import annotations

import os
from typing import Any

from ..errors import ConfigError, InvalidArgumentError
from .config import LoadStageConfig, PackStageConfig, TokenizeStageConfig


def load_tokenizer(path: str) -> Any:
    """The tokenizer at ``path``: a ``tokenizer.json`` (read by ``tokenizers``) or a Hugging Face tokenizer
    directory (read by ``transformers``, with its special tokens and chat template)."""
    from ..text import load_tokenizer as load

    path = os.path.expanduser(os.fspath(path))
    if not os.path.exists(path):
        raise ConfigError(f"pipeline.tokenize.tokenizer: {path!r} does not exist; give the path of a tokenizer.json "
                          "or of a local Hugging Face tokenizer directory (one saved with save_pretrained)")
    try:
        return load(path)
    except InvalidArgumentError as exc:
        raise ConfigError(f"pipeline.tokenize.tokenizer: {exc}") from None


def template_text(template: Any) -> Any:
    """A chat template given as a file is read; a template string is kept as it is."""
    if template is None or "{" in template:
        return template
    path = os.path.expanduser(template)
    if os.path.isfile(path):
        with open(path, encoding="utf-8") as f:
            return f.read()
    raise ConfigError(f"pipeline.tokenize.chat_template: {template!r} is neither a Jinja template nor a file "
                      "holding one; give the template text or its path")


def tokenized(dataset: Any, config: TokenizeStageConfig) -> Any:
    """``dataset`` with the tokenize stage: each row's text (or chat) becomes ``input_ids`` (and, for a chat,
    ``loss_mask``); the column it was made from is removed."""
    from ..text import ChatTemplateTransform, Tokenize

    tokenizer = load_tokenizer(config.tokenizer)
    if config.messages_field is not None:
        fn = ChatTemplateTransform(tokenizer, messages_field=config.messages_field,
                                   chat_template=template_text(config.chat_template),
                                   max_length=config.max_length, truncation=config.truncation)
        column = config.messages_field
    else:
        fn = Tokenize(tokenizer, column=config.column, max_length=config.max_length, truncation=config.truncation,
                      add_special_tokens=config.add_special_tokens, append_eos=config.append_eos)
        column = config.column
    return dataset.map(fn, batched=True, batch_size=config.batch_size, remove_columns=[column])


def packed(dataset: Any, config: PackStageConfig) -> Any:
    return dataset.pack(config.seq_len, strategy=config.strategy, pad_id=config.pad_id,
                        keep_remainder=config.keep_remainder, truncate=config.truncate)


def shuffled(dataset: Any, config: LoadStageConfig, seed: int) -> Any:
    return dataset.shuffle(seed=seed + config.seed, buffer_size=config.shuffle_buffer_size)


def loader(dataset: Any, config: LoadStageConfig, seed: int) -> Any:
    """The ``AsyncDataLoader`` of the load stage (its shuffle buffer is placed earlier, by :func:`shuffled`)."""
    from ..loaders.asyncloader import AsyncDataLoader

    return AsyncDataLoader(dataset, batch_size=config.batch_size, prefetch_enabled=config.prefetch_enabled,
                           prefetch_workers=config.prefetch_workers,
                           prefetch_buffer_size=config.prefetch_buffer_size, shuffle_buffer_size=None,
                           seed=seed + config.seed, drop_last=config.drop_last)
