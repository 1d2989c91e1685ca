"""Tokenization on the stream: :class:`Tokenize`, a callable for ``map`` (batched or per row) and for
``TransformedShardedSource``, that turns a text column into ``int32`` token arrays.

A batch is one call into the tokenizer (which runs in Rust and releases the GIL); the length check and
truncation are numpy operations on the rows' lengths, and each row's token list is copied once into its
own ``int32`` array (with the end-of-sequence token), by numpy: no Python work per token. A row's array
owns its memory, so a row held downstream (in a shuffle buffer) holds nothing of the other rows.

What comes back is the row (or batch) itself, without the text column (kept with ``keep_text=True``) and
with the new ``input_ids`` column. ``map`` merges what its function returns into the row, like Hugging Face
``datasets``: a column the function leaves out is still there, so pass ``remove_columns=["text"]`` to
``map`` to drop the text. As a per-row transform of a sharded source (``TransformedShardedSource``),
the returned row replaces the row, so the text is dropped unless ``keep_text=True``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Optional, Sequence

import numpy as np

from ..errors import InvalidArgumentError, InvalidRowError, SequenceTooLongError
from .tokenizers import TokenizerAdapter, as_tokenizer


def check_max_length(max_length: Optional[int], truncation: bool) -> None:
    """Refuse a ``max_length`` that is not a positive int, and ``truncation`` without one."""
    if max_length is not None and (isinstance(max_length, bool) or not isinstance(max_length, (int, np.integer))
                                   or max_length < 1):
        raise InvalidArgumentError(f"max_length={max_length!r} must be a positive int (tokens), or None")
    if truncation and max_length is None:
        raise InvalidArgumentError("truncation=True needs max_length=: the number of tokens to keep of each row")


def too_long(length: int, max_length: int, where: str) -> SequenceTooLongError:
    return SequenceTooLongError(
        f"{where} has {length} tokens, more than max_length={max_length}: pass truncation=True to cut it, raise "
        "max_length, or leave max_length=None and let pack() split long documents")


def token_arrays(lists: Sequence[Sequence[int]], keep: np.ndarray, end: Optional[int]) -> list[np.ndarray]:
    """Each token list as its own ``int32`` array: its first ``keep[i]`` tokens, then ``end`` if not None."""
    extra = end is not None
    out = []
    for ids, n in zip(lists, keep.tolist()):
        row = np.empty(n + extra, dtype=np.int32)
        row[:n] = ids if len(ids) == n else ids[:n]
        if extra:
            row[n] = end
        out.append(row)
    return out


class Tokenize:
    """Tokenizes ``column`` into ``output_column`` (an ``int32`` array per row); see the module docstring.

    ``ds.map(Tokenize(tok), batched=True, batch_size=1000, remove_columns=["text"])``

    - ``tokenizer``: a ``tokenizers.Tokenizer``, a ``transformers`` tokenizer, a path to either, or a
      :class:`~.tokenizers.TokenizerAdapter`.
    - ``add_special_tokens``: the tokenizer's own post-processing (e.g. a leading ``<s>``).
    - ``append_eos``: append the end-of-sequence token to each row (after truncation: it is kept).
    - ``max_length``: with ``truncation=True``, keep the first ``max_length`` tokens of each row; with
      ``truncation=False``, a longer row raises :class:`~shardstream.errors.SequenceTooLongError`. Without
      ``max_length`` rows keep every token (``pack`` splits long documents).
    - ``keep_text``: keep ``column`` in the returned row.

    Takes a row (``column`` holds a ``str``) and returns a row, or a batch (``column`` holds a list of
    ``str``) and returns a batch. :meth:`describe` names the tokenizer and every setting.
    """

    releases_gil = True  # a batched map runs it a group ahead in a thread (the tokenizer releases the GIL)

    def __init__(self, tokenizer: Any, column: str = "text", max_length: Optional[int] = None,
                 truncation: bool = False, add_special_tokens: bool = True, append_eos: bool = False,
                 output_column: str = "input_ids", keep_text: bool = False) -> None:
        self.tokenizer: TokenizerAdapter = as_tokenizer(tokenizer)
        for name, value in (("column", column), ("output_column", output_column)):
            if not isinstance(value, str) or not value:
                raise InvalidArgumentError(f"{name}={value!r} must be a column name (a non-empty str)")
        if keep_text and output_column == column:
            raise InvalidArgumentError(f"keep_text=True keeps {column!r}, which output_column={output_column!r} "
                                       "would overwrite; give another output_column")
        check_max_length(max_length, truncation)
        if append_eos and self.tokenizer.eos_id is None:
            raise InvalidArgumentError(
                f"append_eos=True, but the tokenizer has no end-of-sequence token: give it one (a transformers "
                f"tokenizer: tokenizer.eos_token = '...'; a tokenizers.Tokenizer: Tokenize(as_tokenizer(tok, "
                f"eos_token='...'), ...)); its special tokens: {', '.join(self.tokenizer.special_tokens) or 'none'}")
        if max_length is not None and truncation and append_eos and max_length < 2:
            raise InvalidArgumentError(f"max_length={max_length} leaves no token besides the appended eos; give 2 "
                                       "or more")
        self.column, self.output_column = column, output_column
        self.max_length = None if max_length is None else int(max_length)
        self.truncation, self.add_special_tokens = bool(truncation), bool(add_special_tokens)
        self.append_eos, self.keep_text = bool(append_eos), bool(keep_text)

    def __call__(self, batch: Mapping) -> dict:
        value = column_of(batch, self.column, "Tokenize", "to tokenize", "column")
        if isinstance(value, str):
            return self._output(batch, self.tokenize([value])[0])
        if isinstance(value, np.ndarray):
            value = value.tolist()
        if not isinstance(value, (list, tuple)):
            raise InvalidRowError(f"column {self.column!r} holds a {type(value).__name__}; Tokenize reads a str "
                                  "(a row) or a list of str (a batch)")
        return self._output(batch, self.tokenize(value))

    def _output(self, batch: Mapping, ids: Any) -> dict:
        out = {k: v for k, v in batch.items() if self.keep_text or k != self.column}
        out[self.output_column] = ids
        return out

    def tokenize(self, texts: Sequence[str]) -> list[np.ndarray]:
        """The ``int32`` token array of each text, with this transform's settings."""
        texts = texts if isinstance(texts, list) else list(texts)
        try:
            lists = self.tokenizer.encode_lists(texts, self.add_special_tokens)
        except (TypeError, ValueError) as exc:
            bad = next((i for i, t in enumerate(texts) if not isinstance(t, str)), None)
            if bad is None:
                raise
            raise InvalidRowError(f"row {bad} of the batch holds {type(texts[bad]).__name__} "
                                  f"{texts[bad]!r:.80} in column {self.column!r}, where a str belongs; "
                                  "filter such rows out first") from exc
        lengths = np.fromiter(map(len, lists), dtype=np.int64, count=len(lists))
        eos = int(self.append_eos)
        keep = lengths
        if self.max_length is not None:
            if self.truncation:
                keep = np.minimum(lengths, self.max_length - eos)
            elif (lengths + eos > self.max_length).any():
                i = int(np.argmax(lengths + eos > self.max_length))
                where = f"row {i} of the batch" if len(texts) > 1 else "the row"
                raise too_long(int(lengths[i]) + eos, self.max_length, f"{where} ({texts[i]!r:.60})")
        return token_arrays(lists, keep, self.tokenizer.eos_id if eos else None)

    def describe(self) -> dict:
        """What this transform does, as JSON-able data (for a pipeline's fingerprint)."""
        return {"op": "Tokenize", "tokenizer": self.tokenizer.describe(), "column": self.column,
                "max_length": self.max_length, "truncation": self.truncation,
                "add_special_tokens": self.add_special_tokens, "append_eos": self.append_eos,
                "output_column": self.output_column, "keep_text": self.keep_text}

    def __repr__(self) -> str:
        return (f"Tokenize({self.tokenizer!r}, column={self.column!r}, max_length={self.max_length}, "
                f"truncation={self.truncation}, append_eos={self.append_eos})")


def column_of(batch, column: str, who: str, what: str, keyword: str):
    """``batch[column]`` of a row or batch given to ``who``, refused with a typed error saying the fix."""
    if not isinstance(batch, Mapping):
        raise InvalidRowError(f"{who} takes a row or a batch (a dict of columns), not a "
                              f"{type(batch).__name__}; with map(), leave input_columns out")
    if column not in batch:
        raise InvalidRowError(f"the row has no column {column!r} {what}; its columns: "
                              f"{', '.join(map(str, batch)) or 'none'}; give {keyword}=")
    return batch[column]
