"""``streaming.base.registry_utils``: the registries scripts extend the library with.

``TypedRegistry`` and ``create_registry`` are shardstream's own (:mod:`shardstream.engine.registry`,
no dependency on the ``catalogue`` package); ``streams_registry`` is one of them. The helpers below
behave as mosaicml-streaming's: build an item from a registry, import a file of registrations, and
keep the registries as they were around a block.
"""

from __future__ import annotations

import functools
import importlib.util
import os
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any, Callable, Iterator, Optional, Union

from ..errors import InvalidArgumentError
from ..engine import registry as _registry
from ..engine.registry import TypedRegistry, create_registry

__all__ = ["TypedRegistry", "create_registry", "construct_from_registry", "import_file", "save_registry"]


def _pre_validate(name: str, made_by: Any, check: Union[Callable[[Any], None], type, None]) -> None:
    if check is None:
        return
    if isinstance(check, type):
        if not (isinstance(made_by, type) and issubclass(made_by, check)):
            raise InvalidArgumentError(f"Expected {name} to be of type {check}, but got {made_by!r} "
                                       f"({type(made_by).__name__})")
    elif callable(check):
        check(made_by)
    else:
        raise InvalidArgumentError(f"Expected pre_validation_function to be a callable or a type, but got "
                                   f"{type(check).__name__}")


def construct_from_registry(name: str, registry: TypedRegistry, partial_function: bool = True,
                            pre_validation_function: Union[Callable[[Any], None], type, None] = None,
                            post_validation_function: Optional[Callable[[Any], None]] = None,
                            kwargs: Optional[dict[str, Any]] = None) -> Any:
    """The item registered as ``name``, built: a class (or, with ``partial_function=False``, any callable)
    is called with ``kwargs``; a function is bound to ``kwargs`` with :func:`functools.partial`.

    ``pre_validation_function`` (a type the registered class must subclass, or a function that raises)
    checks what is registered; ``post_validation_function`` checks what was built. A registered value
    that is neither a class nor callable is refused with ValueError."""
    kwargs = {} if kwargs is None else kwargs
    made_by = registry.get(name)
    _pre_validate(name, made_by, pre_validation_function)
    if isinstance(made_by, type) or (callable(made_by) and not partial_function):
        built = made_by(**kwargs)
    elif callable(made_by):
        built = functools.partial(made_by, **kwargs)
    else:
        raise InvalidArgumentError(f"Expected {name} to be a class or function, but got {type(made_by).__name__} "
                                   f"({made_by!r}); register a class or a function that builds the item")
    if post_validation_function is not None:
        post_validation_function(built)
    return built


def import_file(loc: Union[str, Path]) -> ModuleType:
    """Run the Python file ``loc`` as a module (typically one that registers classes) and return it.

    FileNotFoundError when it does not exist; RuntimeError (from the error inside) when it fails."""
    if not os.path.exists(loc):
        raise FileNotFoundError(f"File {loc} does not exist.")
    spec = importlib.util.spec_from_file_location("python_code", str(loc))
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as e:
        raise RuntimeError(f"Error executing {loc}: {type(e).__name__}: {e}") from e
    return module


@contextmanager
def save_registry() -> Iterator[None]:
    """Every registry's entries are put back as they were when the block ends."""
    saved = _registry.snapshot()
    try:
        yield
    finally:
        _registry.restore(saved)
