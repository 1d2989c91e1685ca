"""Unknown keyword arguments refused with a typed error that names the closest valid keyword."""

from __future__ import annotations

import difflib
import functools
import inspect
from typing import Callable

from .errors import UnknownKeywordError


def checked_keywords(*others: Callable) -> Callable:
    """Decorate a function (an ``__init__``) so that a keyword it does not take raises
    :class:`~shardstream.errors.UnknownKeywordError` naming the closest one it does take.

    ``others``: functions that its ``**kwargs`` are passed on to, whose keywords are valid too.
    """

    def decorate(func: Callable) -> Callable:
        valid = frozenset(_keywords(func).union(*(_keywords(f) for f in others)))
        owner = func.__qualname__.removesuffix(".__init__")

        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            if not valid.issuperset(kwargs):
                _refuse(owner, sorted(set(kwargs) - valid), valid)
            return func(*args, **kwargs)

        return wrapper

    return decorate


def _keywords(func: Callable) -> set[str]:
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return {name for name, p in inspect.signature(func).parameters.items() if p.kind in kinds and name != "self"}


def _refuse(owner: str, unknown: list[str], valid: frozenset) -> None:
    name = unknown[0]
    close = difflib.get_close_matches(name, sorted(valid), n=1, cutoff=0.6)
    hint = f"did you mean {close[0]!r}?" if close else f"the keywords it takes are: {', '.join(sorted(valid))}"
    more = f" (and {unknown[1:]})" if len(unknown) > 1 else ""
    raise UnknownKeywordError(f"{owner}() got an unexpected keyword argument {name!r}{more}; {hint}")
