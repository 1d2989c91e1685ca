"""Chat templates: rendering a conversation with a Jinja template, and finding the characters of the
messages a model learns from (for the loss mask of :class:`~.chat.ChatTemplateTransform`).

Templates run in Jinja's immutable sandbox with the settings and helpers of ``transformers``'
``apply_chat_template`` (``trim_blocks``, ``lstrip_blocks``, loop controls, ``raise_exception``,
``strftime_now``, a ``tojson`` that keeps non-ASCII text, and ``{% generation %}`` blocks, rendered as their
body), so a template written for ``transformers`` renders the same text here. A rendering has a budget of
loop iterations and characters (:mod:`.sandbox`): a hostile template is refused, quickly, with a
:class:`~shardstream.errors.ChatTemplateError` naming the limit.

Where the learned messages are (:func:`learned_spans`): the conversation is rendered a second time with
each learned message's content between two marker characters (from Unicode's private use planes); the
markers give the content's characters once they are taken out, and the text without them must equal the
plain rendering, or the markers changed what the template wrote. Then (templates that trim or otherwise
test their content) each learned message is looked for between the renderings of the conversation
before it and up to it: its content, or its content without surrounding whitespace, last found there.
The span then runs on over whitespace and the special token right after the content, if any (the end of
the turn, e.g. ``<|im_end|>``, ``<|eot_id|>`` or ``</s>``).
"""

from __future__ import annotations

import functools
import json
import re
from datetime import datetime
from typing import Any, Optional, Sequence

from ..errors import ChatTemplateError, require
from . import sandbox
from .sandbox import TemplateLimits

OPEN, CLOSE = "\U0010fff0", "\U0010fff1"
_MARKERS = re.compile(f"([{OPEN}{CLOSE}])")


def _jinja():
    return require("jinja2", "text", "chat templates")


@functools.lru_cache(maxsize=32)
def compile_template(source: str) -> Any:
    """The compiled template of ``source`` (cached per process; compiled templates are not pickled), in the
    sandbox with the budget of :mod:`.sandbox`."""
    jinja2 = _jinja()
    from jinja2.ext import Extension, loopcontrols

    from .jinjaenv import BoundedEnvironment

    class Generation(Extension):  # transformers' assistant-tracking tag: here, its body as it is
        tags = {"generation"}

        def parse(self, parser):
            next(parser.stream)
            return parser.parse_statements(("name:endgeneration",), drop_needle=True)

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    env = BoundedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[Generation, loopcontrols])
    env.filters["tojson"] = env.guard_filter("tojson", tojson)
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    try:
        return env.compile_bounded(source)
    except jinja2.exceptions.TemplateSyntaxError as exc:
        raise ChatTemplateError(f"the chat template does not compile: {exc.message} (line {exc.lineno}); "
                                "fix the template given as chat_template=") from exc


class Renderer:
    """Renders conversations with one template and the tokenizer's special-token variables."""

    def __init__(self, source: str, variables: dict, special_tokens: Sequence[str],
                 limits: Optional[TemplateLimits] = None) -> None:
        self.source, self.variables = source, dict(variables)
        self.limits = TemplateLimits() if limits is None else limits
        compile_template(source)  # fails now on a template that does not compile
        self._end = re.compile(r"\s*(?:" + "|".join(map(re.escape, special_tokens)) + ")") if special_tokens \
            else None

    def render(self, messages: list, add_generation_prompt: bool = False, where: str = "the conversation") -> str:
        jinja2 = _jinja()
        token = sandbox.start(self.limits)
        try:
            pieces = compile_template(self.source).generate(messages=messages,
                                                            add_generation_prompt=add_generation_prompt,
                                                            **self.variables)
            return _joined(pieces, self.limits.max_chars)
        except sandbox.LimitExceeded as exc:
            raise ChatTemplateError(f"the chat template {exc} (on {where}); a template that needs more than "
                                    "its limits is most likely hostile or broken: check it") from None
        except RecursionError:
            raise ChatTemplateError(f"the chat template recurses too deeply on {where}; fix the template") from None
        except jinja2.exceptions.TemplateError as exc:
            raise ChatTemplateError(f"the chat template fails on {where}: {exc}; fix the conversation or give "
                                    "another chat_template=") from exc
        except (TypeError, ValueError, KeyError, AttributeError) as exc:
            raise ChatTemplateError(f"the chat template fails on {where}: {type(exc).__name__}: {exc}; check its "
                                    "messages ({'role': str, 'content': str}) or give another chat_template=") from exc
        finally:
            sandbox.end(token)

    def learned_spans(self, messages: list, learned: Sequence[int], add_generation_prompt: bool,
                      where: str) -> tuple[str, list[tuple[int, int]]]:
        """The rendered conversation and the character spans of the messages numbered ``learned`` (each
        with the end of its turn), in order (see the module docstring)."""
        text = self.render(messages, add_generation_prompt, where)
        if not learned:
            return text, []
        spans = self._marked_spans(messages, learned, add_generation_prompt, text, where)
        if spans is None:
            spans = self._prefix_spans(messages, learned, text, where)
        return text, [(a, self._turn_end(text, b)) for a, b in spans]

    def _marked_spans(self, messages: list, learned: Sequence[int], add_generation_prompt: bool, text: str,
                      where: str) -> Optional[list[tuple[int, int]]]:
        if any(OPEN in messages[i]["content"] or CLOSE in messages[i]["content"] for i in learned):
            return None
        marked = list(messages)
        for i in learned:
            marked[i] = {**messages[i], "content": OPEN + messages[i]["content"] + CLOSE}
        parts = _MARKERS.split(self.render(marked, add_generation_prompt, where))
        plain, spans, at, start = [], [], 0, None
        for part in parts:
            if part == OPEN:
                if start is not None:
                    return None
                start = at
            elif part == CLOSE:
                if start is None:
                    return None
                spans.append((start, at))
                start = None
            else:
                plain.append(part)
                at += len(part)
        if start is not None or len(spans) != len(learned) or "".join(plain) != text:
            return None
        return spans

    def _prefix_spans(self, messages: list, learned: Sequence[int], text: str,
                      where: str) -> list[tuple[int, int]]:
        spans = []
        for i in learned:
            lo = _common_prefix(self._render_prefix(messages[:i]), text)
            hi = _common_prefix(self.render(messages[:i + 1], False, where), text)
            content = messages[i]["content"]
            for wanted in (content, content.strip()):
                k = text.rfind(wanted, lo, max(hi, lo)) if wanted else -1
                if k >= 0:
                    spans.append((k, k + len(wanted)))
                    break
            else:
                raise ChatTemplateError(
                    f"the chat template changes the content of message {i} ({messages[i]['role']}) of {where}, so "
                    "its tokens cannot be found for the loss mask; give a chat_template= that writes each "
                    "message's content as it is, or mask=None to learn from every token")
        return spans

    def _render_prefix(self, messages: list) -> str:
        if not messages:
            return ""
        try:
            return self.render(messages)
        except ChatTemplateError:  # e.g. a template that refuses a conversation ending with a user message
            return ""

    def _turn_end(self, text: str, end: int) -> int:
        """``end`` moved past whitespace and the special token right after it, if there is one."""
        found = self._end.match(text, end) if self._end is not None else None
        return found.end() if found else end


def _joined(pieces, cap: int) -> str:
    """The rendered pieces joined, refused as soon as they pass ``cap`` characters."""
    out, total = [], 0
    for piece in pieces:
        total += len(piece)
        if total > cap:
            sandbox.too_long(cap)
        out.append(piece)
    return "".join(out)


def _common_prefix(a: str, b: str) -> int:
    """The length of the longest common prefix of ``a`` and ``b`` (a binary search of C comparisons)."""
    if b.startswith(a):
        return len(a)
    lo, hi = 0, min(len(a), len(b))
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo
