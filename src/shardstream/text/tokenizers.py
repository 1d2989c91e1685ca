"""One interface over the tokenizers people have: a ``tokenizers.Tokenizer``, a Hugging Face ``transformers``
tokenizer (fast, backed by ``tokenizers``, or a Python one), or a path to either on disk.

:func:`as_tokenizer` wraps any of them in a :class:`TokenizerAdapter`, which gives what the text transforms
need and nothing more: a batch encode that is one call into the tokenizer (``tokenizers``'
``encode_batch_fast`` / ``encode_batch``, ``transformers``' ``__call__`` on a list; both release the GIL and
run in Rust), encoding with character offsets (for the chat loss mask), the ids of the end-of-sequence,
beginning-of-sequence and padding tokens, the tokenizer's chat template, and :meth:`~TokenizerAdapter.describe`:
a description that is the same in every process for the same vocabulary, merges, normalizer and
special tokens, and changes when any of them changes (it enters a pipeline's fingerprint).

A ``tokenizers.Tokenizer`` does not know which of its tokens ends a sequence: the adapter takes the first
special token among the usual names (``<|endoftext|>``, ``</s>``, ``<eos>``, ``<|end_of_text|>``; for
padding ``<pad>``, ``[PAD]``, ``<|pad|>``, ``<|padding|>``; for the beginning ``<s>``, ``<bos>``,
``<|begin_of_text|>``, ``<|startoftext|>``), or the one given as ``eos_token=`` (``pad_token=``,
``bos_token=``). A ``transformers`` tokenizer says it itself.

``tokenizers`` and ``transformers`` are imported only when a path is loaded: wrapping an object needs
neither import (objects are recognised by the module their class comes from).
"""

from __future__ import annotations

import json
import os
from typing import Any, Optional, Sequence

import numpy as np
import xxhash

from ..errors import InvalidArgumentError, MissingDependencyError, require

_GUESSES = {
    "eos": ("<|endoftext|>", "</s>", "<eos>", "<|end_of_text|>"),
    "bos": ("<s>", "<bos>", "<|begin_of_text|>", "<|startoftext|>"),
    "pad": ("<pad>", "[PAD]", "<|pad|>", "<|padding|>"),
}
_TEMPLATE_TOKENS = ("bos_token", "eos_token", "pad_token", "unk_token", "sep_token", "cls_token", "mask_token")


def _library(obj: Any) -> Optional[str]:
    """``"tokenizers"`` or ``"transformers"`` when ``obj``'s class (or a base) comes from that package."""
    for cls in type(obj).__mro__:
        top = (cls.__module__ or "").split(".")[0]
        if top in ("tokenizers", "transformers"):
            return top
    return None


def load_tokenizer(path: str | os.PathLike) -> Any:
    """The tokenizer saved at ``path``: a ``tokenizer.json`` file (a ``tokenizers.Tokenizer``), or a
    directory saved by ``transformers`` (``AutoTokenizer.from_pretrained``, local files only)."""
    path = os.fspath(path)
    if os.path.isfile(path):
        tokenizers = require("tokenizers", "text", "loading a tokenizer.json")
        try:
            return tokenizers.Tokenizer.from_file(path)
        except Exception as exc:
            raise InvalidArgumentError(f"{path} is not a tokenizer.json that tokenizers can read ({exc}); give the "
                                       "tokenizer.json saved by Tokenizer.save or a tokenizer directory") from exc
    if os.path.isdir(path):
        try:
            import transformers
        except ImportError as exc:
            raise MissingDependencyError(
                f"loading the tokenizer directory {path} needs the optional package 'transformers', which is not "
                "installed; install it with: pip install transformers (or give the directory's tokenizer.json)"
            ) from exc
        return transformers.AutoTokenizer.from_pretrained(path, local_files_only=True)
    raise InvalidArgumentError(f"tokenizer={path!r} is neither a file nor a directory; give a tokenizer.json, a "
                               "saved tokenizer directory, or a tokenizer object")


def as_tokenizer(tokenizer: Any, *, eos_token: Optional[str] = None, bos_token: Optional[str] = None,
                 pad_token: Optional[str] = None) -> "TokenizerAdapter":
    """``tokenizer`` as a :class:`TokenizerAdapter` (an adapter is returned as it is when no token is given)."""
    if isinstance(tokenizer, TokenizerAdapter):
        if eos_token is bos_token is pad_token is None:
            return tokenizer
        tokenizer = tokenizer.tokenizer
    return TokenizerAdapter(tokenizer, eos_token=eos_token, bos_token=bos_token, pad_token=pad_token)


class TokenizerAdapter:
    """A ``tokenizers.Tokenizer`` or a ``transformers`` tokenizer behind one interface (see the module
    docstring). ``kind`` is ``"tokenizers"``, ``"transformers-fast"`` or ``"transformers"`` (a Python
    tokenizer: no character offsets, see :attr:`has_offsets`)."""

    def __init__(self, tokenizer: Any, *, eos_token: Optional[str] = None, bos_token: Optional[str] = None,
                 pad_token: Optional[str] = None) -> None:
        if isinstance(tokenizer, (str, os.PathLike)):
            tokenizer = load_tokenizer(tokenizer)
        library = _library(tokenizer)
        if library == "tokenizers" and hasattr(tokenizer, "encode_batch") and hasattr(tokenizer, "to_str"):
            self.kind = "tokenizers"
        elif library == "transformers" and callable(tokenizer) and hasattr(tokenizer, "convert_tokens_to_ids"):
            fast = getattr(tokenizer, "backend_tokenizer", None) is not None
            self.kind = "transformers-fast" if fast else "transformers"
        else:
            raise InvalidArgumentError(
                f"tokenizer={type(tokenizer).__module__}.{type(tokenizer).__name__} is not a tokenizer this library "
                "reads; give a tokenizers.Tokenizer (Tokenizer.from_file('tokenizer.json')), a transformers "
                "tokenizer (AutoTokenizer.from_pretrained(...)) or a path to either")
        self.tokenizer = tokenizer
        self._description: Optional[dict] = None
        self.special_tokens = self._special_tokens()
        given = {"eos": eos_token, "bos": bos_token, "pad": pad_token}
        for role in ("eos", "bos", "pad"):
            token = self._token_for(role, given[role])
            setattr(self, f"{role}_token", token)
            setattr(self, f"{role}_id", None if token is None else self._id_of(token, f"{role}_token"))

    # -- what the tokenizer is ------------------------------------------------------------------
    def _special_tokens(self) -> tuple[str, ...]:
        """The strings of the tokenizer's special tokens, longest first."""
        if self.kind == "tokenizers":
            found = [t.content for t in self.tokenizer.get_added_tokens_decoder().values() if t.special]
        else:
            found = list(self.tokenizer.all_special_tokens)
            decoder = getattr(self.tokenizer, "added_tokens_decoder", {}) or {}
            found += [t.content for t in decoder.values() if getattr(t, "special", False)]
        return tuple(sorted(set(found), key=lambda s: (-len(s), s)))

    def _token_for(self, role: str, given: Optional[str]) -> Optional[str]:
        if given is not None:
            if not isinstance(given, str) or not given:
                raise InvalidArgumentError(f"{role}_token={given!r} must be a non-empty string (a token of the "
                                           "tokenizer's vocabulary)")
            return given
        if self.kind != "tokenizers":
            token = getattr(self.tokenizer, f"{role}_token", None)
            return token if isinstance(token, str) and token else None
        return next((t for t in _GUESSES[role] if t in self.special_tokens), None)

    def _id_of(self, token: str, name: str) -> int:
        if self.kind == "tokenizers":
            found = self.tokenizer.token_to_id(token)
        else:
            found = self.tokenizer.convert_tokens_to_ids(token)
            unk = getattr(self.tokenizer, "unk_token_id", None)
            found = None if found is None or (found == unk and token != getattr(self.tokenizer, "unk_token", None)) \
                else found
        if found is None:
            raise InvalidArgumentError(f"{name}={token!r} is not in the tokenizer's vocabulary; give one of its "
                                       f"tokens (its special tokens: {', '.join(self.special_tokens) or 'none'})")
        return int(found)

    @property
    def chat_template(self) -> Optional[str]:
        """The tokenizer's own chat template (``transformers`` tokenizers carry one; None otherwise)."""
        template = getattr(self.tokenizer, "chat_template", None) if self.kind != "tokenizers" else None
        if isinstance(template, dict):  # named templates: the default one
            template = template.get("default")
        return template if isinstance(template, str) and template else None

    @property
    def has_offsets(self) -> bool:
        """Whether :meth:`encode_with_offsets` is available (not for ``transformers``' Python tokenizers)."""
        return self.kind != "transformers"

    def template_variables(self) -> dict:
        """The special-token strings a chat template may read (``bos_token``, ``eos_token`` ...)."""
        if self.kind == "tokenizers":
            found = {f"{r}_token": getattr(self, f"{r}_token") for r in ("bos", "eos", "pad")}
        else:
            found = {name: getattr(self.tokenizer, name, None) for name in _TEMPLATE_TOKENS}
            found.update({f"{r}_token": getattr(self, f"{r}_token") for r in ("bos", "eos", "pad")})
        return {k: v for k, v in found.items() if isinstance(v, str)}

    # -- encoding -------------------------------------------------------------------------------
    def encode_lists(self, texts: Sequence[str], add_special_tokens: bool = True) -> list[list[int]]:
        """The token ids of each text, as lists, from one batch call into the tokenizer."""
        texts = texts if isinstance(texts, list) else list(texts)
        if not texts:
            return []
        if self.kind == "tokenizers":
            encode = getattr(self.tokenizer, "encode_batch_fast", None) or self.tokenizer.encode_batch
            return [e.ids for e in encode(texts, add_special_tokens=add_special_tokens)]
        out = self.tokenizer(texts, add_special_tokens=add_special_tokens, return_attention_mask=False,
                             return_token_type_ids=False, verbose=False)
        return out["input_ids"]

    def encode_batch(self, texts: Sequence[str], add_special_tokens: bool = True) -> list[np.ndarray]:
        """The token ids of each text as an ``int32`` array (one batch call into the tokenizer)."""
        return [np.asarray(ids, dtype=np.int32) for ids in self.encode_lists(texts, add_special_tokens)]

    def encode_with_offsets(self, texts: Sequence[str]) -> list[tuple[list[int], list[tuple[int, int]]]]:
        """``(ids, offsets)`` of each text, without added special tokens: ``offsets[i]`` is the span of
        characters of token ``i`` in its text. Only when :attr:`has_offsets`."""
        texts = texts if isinstance(texts, list) else list(texts)
        if not texts:
            return []
        if self.kind == "tokenizers":
            return [(e.ids, e.offsets) for e in self.tokenizer.encode_batch(texts, add_special_tokens=False)]
        if self.kind == "transformers":
            raise InvalidArgumentError(f"{type(self.tokenizer).__name__} is a Python tokenizer: it gives no "
                                       "character offsets; load the fast tokenizer (use_fast=True)")
        out = self.tokenizer(texts, add_special_tokens=False, return_offsets_mapping=True,
                             return_attention_mask=False, return_token_type_ids=False, verbose=False)
        return list(zip(out["input_ids"], out["offset_mapping"]))

    def decode(self, ids: Any, skip_special_tokens: bool = False) -> str:
        """The text of ``ids`` (special tokens kept unless ``skip_special_tokens``)."""
        ids = [int(i) for i in np.asarray(ids).reshape(-1)]
        return self.tokenizer.decode(ids, skip_special_tokens=skip_special_tokens)

    # -- description ----------------------------------------------------------------------------
    def describe(self) -> dict:
        """What the tokenizer is, as JSON-able data: its kind, class, the special ids and a hash of its
        vocabulary, merges, normalizer, pre-tokenizer and post-processor (computed once per adapter)."""
        if self._description is None:
            self._description = {"kind": self.kind, "class": type(self.tokenizer).__name__,
                                 "hash": self._content_hash(), "eos_id": self.eos_id, "bos_id": self.bos_id,
                                 "pad_id": self.pad_id}
        return dict(self._description)

    def _content_hash(self) -> str:
        if self.kind == "tokenizers":  # its truncation and padding settings change what encode returns: kept
            return xxhash.xxh3_64_hexdigest(self.tokenizer.to_str().encode())
        if self.kind == "transformers-fast":  # transformers sets truncation and padding at each call: left out
            content = json.loads(self.tokenizer.backend_tokenizer.to_str())
            content.pop("truncation", None)
            content.pop("padding", None)
        else:
            content = {"vocab": sorted(self.tokenizer.get_vocab().items(), key=lambda kv: kv[1])}
        content["special_tokens"] = self.template_variables()
        return xxhash.xxh3_64_hexdigest(json.dumps(content, sort_keys=True).encode())

    def __repr__(self) -> str:
        return (f"TokenizerAdapter({self.kind}: {type(self.tokenizer).__name__}, eos={self.eos_token!r}, "
                f"pad={self.pad_token!r}, bos={self.bos_token!r})")
