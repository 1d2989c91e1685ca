"""Unknown keyword arguments refused with a typed error that names the closest valid keyword."""

from __future__ import annotations

import difflib
import functools
import inspect
from typing import Callable

from .errors import UnknownKeywordError


def checked_keywords(*others: Callable, kind: str = "") -> Callable:
    """Decorate a function (an ``__init__``) so that a keyword it does not take raises
    :class:`~shardstream.errors.UnknownKeywordError` (a ``TypeError`` and a ``ValueError``) naming
    the closest one it does take.

    ``others``: functions that its ``**kwargs`` are passed on to, whose keywords are valid too.
    ``kind``: opens the message with ``Invalid <kind> argument(s): [...]``, mosaicml-streaming's
    words for the same mistake (its writers say ``kind="Writer"``).
    """

    def decorate(func: Callable) -> Callable:
        valid = frozenset(_keywords(func).union(*(_keywords(f) for f in others)))
        owner = func.__qualname__.removesuffix(".__init__")

        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            if not valid.issuperset(kwargs):  # an __init__ names the class being built (a subclass too)
                name = type(args[0]).__name__ if args and func.__name__ == "__init__" else owner
                _refuse(name, sorted(set(kwargs) - valid), valid, kind)
            return func(*args, **kwargs)

        return wrapper

    return decorate


def _keywords(func: Callable) -> set[str]:
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return {name for name, p in inspect.signature(func).parameters.items() if p.kind in kinds and name != "self"}


def _refuse(owner: str, unknown: list[str], valid: frozenset, kind: str = "") -> None:
    name = unknown[0]
    close = difflib.get_close_matches(name, sorted(valid), n=1, cutoff=0.6)
    hint = f"did you mean {close[0]!r}?" if close else f"the keywords it takes are: {', '.join(sorted(valid))}"
    more = f" (and {unknown[1:]})" if len(unknown) > 1 else ""
    opening = f"Invalid {kind} argument(s): {unknown}; " if kind else ""
    raise UnknownKeywordError(f"{opening}{owner}() got an unexpected keyword argument {name!r}{more}; {hint}")
