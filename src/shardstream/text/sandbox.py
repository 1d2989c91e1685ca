"""Bounds on what rendering a chat template may cost: a template from a model repository is untrusted input.

Jinja's sandbox keeps a template from reaching Python's internals, but not from running for hours or filling
the memory (``{% for i in range(10**5) %}{% for j in range(10**5) %}``, ``{{ 'x' * 10**10 }}``). Here every
rendering gets a budget (:class:`TemplateLimits`):

- ``max_iterations``: loop iterations, ``range()`` items and calls (functions, macros, methods) of one
  rendering. A loop over a sized value (a list, a ``range``) is counted whole as it starts, so nested loops
  are refused as soon as their product passes the limit, before they run;
- ``max_chars``: the characters of the rendered text, and of any one string or list the template makes.
  Each operation that can make a value much larger than its inputs is checked *before* it runs, from its
  inputs' sizes (``*``, ``**``, ``+``, ``%``, ``~``, the ``str`` methods that pad, repeat, replace, join or
  format, and the filters that do), and what it made is counted: all of one rendering's made values
  together may reach 16 x ``max_chars``.

Passing a limit raises :class:`~shardstream.errors.ChatTemplateError` naming the limit and how to raise it
(``ChatTemplateTransform(..., template_limits=TemplateLimits(...))``). The defaults are far above what a
chat template for training data needs (a rendering of 16 Mi characters is millions of tokens).
"""

from __future__ import annotations

import contextvars
import re
import string
from dataclasses import dataclass
from typing import Any, Optional

from ..errors import InvalidArgumentError

KNOB = "ChatTemplateTransform(..., template_limits=TemplateLimits({name}=...))"


@dataclass(frozen=True)
class TemplateLimits:
    """The budget of one rendering of a chat template (see the module docstring)."""

    max_chars: int = 1 << 24
    max_iterations: int = 200_000

    def __post_init__(self) -> None:
        for name in ("max_chars", "max_iterations"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InvalidArgumentError(f"TemplateLimits({name}={value!r}) must be an int >= 1")


class LimitExceeded(Exception):
    """Raised inside a rendering that passed its budget; the renderer turns it into a ChatTemplateError."""


class Budget:
    """What one rendering has spent (steps: loop iterations and calls; made: characters of values made)."""

    __slots__ = ("limits", "steps", "made")

    def __init__(self, limits: TemplateLimits) -> None:
        self.limits, self.steps, self.made = limits, 0, 0


_DEFAULT = TemplateLimits()
_current: contextvars.ContextVar[Optional[Budget]] = contextvars.ContextVar("shardstream_template_budget",
                                                                           default=None)


def start(limits: TemplateLimits) -> contextvars.Token:
    """Give the renderings of this thread (until :func:`end`) a fresh budget."""
    return _current.set(Budget(limits))


def end(token: contextvars.Token) -> None:
    _current.reset(token)


def limits() -> TemplateLimits:
    budget = _current.get()
    return _DEFAULT if budget is None else budget.limits


def _said(what: Any) -> str:
    return what() if callable(what) else what


def steps(n: int, what: Any) -> None:
    """Count ``n`` loop iterations or calls (``what``, or a function that says it, names them for the error)."""
    budget = _current.get()
    if budget is None:
        return
    budget.steps += n
    if budget.steps > budget.limits.max_iterations:
        raise LimitExceeded(f"runs more than max_iterations={budget.limits.max_iterations:,} loop iterations and "
                            f"calls ({_said(what)}); raise it with {KNOB.format(name='max_iterations')}")


def made(n: int, what: Any) -> None:
    """Refuse an operation that would make a value of about ``n`` characters or items; count it. ``what``
    (or a function that says it) names the operation for the error."""
    budget = _current.get()
    cap = (_DEFAULT if budget is None else budget.limits).max_chars
    if n > cap:
        raise LimitExceeded(f"would make a value of about {n:,} characters or items ({_said(what)}), more than "
                            f"max_chars={cap:,}; raise it with {KNOB.format(name='max_chars')}")
    if budget is not None:
        budget.made += n
        if budget.made > 16 * cap:
            raise LimitExceeded(f"makes more than 16 x max_chars={16 * cap:,} characters in all ({_said(what)}); "
                                f"raise max_chars with {KNOB.format(name='max_chars')}")


def too_long(cap: int) -> None:
    """Refuse a rendering whose text passed ``cap`` characters."""
    raise LimitExceeded(f"writes more than max_chars={cap:,} characters; raise it with {KNOB.format(name='max_chars')}")


def size(value: Any, cap: Optional[int] = None) -> int:
    """About how many characters ``str(value)`` has, counted only until it passes ``cap`` (cheap on huge
    values: a list of a million references to one long string stops at its first item)."""
    if isinstance(value, str):
        return len(value)
    if isinstance(value, bool) or value is None:
        return 5
    if isinstance(value, int):
        return value.bit_length() // 3 + 2
    if isinstance(value, (list, tuple, dict, set, frozenset)):
        cap = limits().max_chars if cap is None else cap
        total = 2
        for item in (value.items() if isinstance(value, dict) else value):
            total += 2 + size(item, cap - total)
            if total > cap:
                break
        return total
    return 32


def ints(args: tuple, kwargs: dict, what: Any) -> None:
    """Refuse an int argument (a width, a count) larger than ``max_chars``."""
    cap = limits().max_chars
    for v in (*args, *kwargs.values()):
        if isinstance(v, int) and not isinstance(v, bool) and abs(v) > cap:
            made(abs(v), what)


_PERCENT = re.compile(r"%(?:\([^)]*\))?[#0\- +]*(\d+|\*)?(?:\.(\d+|\*))?")


def percent_size(fmt: str, args: Any) -> int:
    """An upper bound of ``len(fmt % args)``."""
    values = args if isinstance(args, tuple) else tuple(args.values()) if isinstance(args, dict) else (args,)
    ints(values, {}, "a %-format's width")
    fields = _PERCENT.findall(fmt.replace("%%", ""))
    widest = max((int(n) for f in fields for n in f if n.isdigit()), default=0)
    widest = max([widest] + [v for v in values if isinstance(v, int) and not isinstance(v, bool)])
    return len(fmt) + len(fields) * (widest + max((size(v) for v in values), default=0))


def format_size(fmt: str, args: tuple, kwargs: dict) -> int:
    """An upper bound of ``len(fmt.format(*args, **kwargs))``."""
    ints(args, kwargs, "a format's width")
    fields = [spec or "" for _, name, spec, _ in string.Formatter().parse(fmt) if name is not None]
    widest = max((int(n) for spec in fields for n in re.findall(r"\d+", spec)), default=0)
    if widest > limits().max_chars:
        made(widest, "a format's width")
    values = (*args, *kwargs.values())
    return len(fmt) + len(fields) * (widest + 2 * max((size(v) for v in values), default=0))


def replace_size(s: str, old: Any, new: Any, count: Any = -1) -> int:
    """An upper bound of ``len(s.replace(old, new, count))``."""
    if not isinstance(old, str) or not isinstance(new, str):
        return len(s)
    hits = s.count(old) if old else len(s) + 1
    if isinstance(count, int) and count >= 0:
        hits = min(hits, count)
    return len(s) + hits * max(len(new) - len(old), 0)


def join_size(sep: str, items: list) -> int:
    total = len(sep) * max(len(items) - 1, 0)
    cap = limits().max_chars
    for item in items:
        total += size(item, cap - total)
        if total > cap:
            break
    return total


def str_method_size(s: str, name: str, args: tuple, kwargs: dict) -> Optional[int]:
    """An upper bound of what the ``str`` method ``name`` makes of ``s``, for those that can grow it."""
    if name in ("center", "ljust", "rjust", "zfill"):
        width = args[0] if args else kwargs.get("width", 0)
        return max(len(s), width if isinstance(width, int) else 0)
    if name == "expandtabs":
        tab = args[0] if args else kwargs.get("tabsize", 8)
        return len(s) + s.count("\t") * max(tab if isinstance(tab, int) else 8, 0)
    if name == "replace":
        return replace_size(s, *args[:3])
    if name == "translate" and args and isinstance(args[0], dict):
        longest = max((size(v) for v in args[0].values()), default=1)
        return len(s) * max(longest, 1)
    if name in ("format", "format_map"):
        if name == "format_map":
            return format_size(s, (), dict(args[0]) if args and isinstance(args[0], dict) else {})
        return format_size(s, args, kwargs)
    return None
