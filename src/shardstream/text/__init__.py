"""Text processing: tokenization, chat templates and sequence packing.

- :class:`Tokenize`: a text column to ``int32`` token arrays, for ``map`` (batched or not) and per-row
  transforms of sharded sources.
- :class:`ChatTemplateTransform`: conversations rendered with a chat template and tokenized, with the
  loss mask of supervised fine-tuning (1 on the assistant's tokens); :class:`TemplateLimits` is the budget
  of one rendering of its template.
- :class:`Pack`: token rows packed into rows of a fixed length (``ds.pack(seq_len)``).
- :func:`as_tokenizer` / :class:`TokenizerAdapter`: a ``tokenizers.Tokenizer`` or a ``transformers``
  tokenizer (or a path to either) behind one interface.

Importing this package imports neither ``tokenizers``, ``transformers`` nor ``jinja2``.
"""

from .chat import ChatTemplateTransform
from .pack import Pack
from .sandbox import TemplateLimits
from .tokenize import Tokenize
from .tokenizers import TokenizerAdapter, as_tokenizer, load_tokenizer

__all__ = ["ChatTemplateTransform", "Pack", "TemplateLimits", "Tokenize", "TokenizerAdapter", "as_tokenizer",
           "load_tokenizer"]
