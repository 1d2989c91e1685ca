"""Run mosaicml-streaming scripts unchanged on shardstream.

From the command line (the script's ``import streaming`` resolves to shardstream)::

    python -m shardstream.compat train.py --its --own --args
    python -m shardstream.compat --epoch-tail mosaic train.py ...   # mosaicml-streaming's epoch lengths

or in code, before the first ``import streaming``::

    import shardstream.compat; shardstream.compat.install()

Nothing is aliased unless asked: importing shardstream (or this module) never shadows an installed
mosaicml-streaming. :func:`install` puts an import hook first on ``sys.meta_path`` that answers for
``streaming`` and its public submodules (``streaming.base``, ``streaming.base.util``,
``streaming.base.format.mds.encodings``, ``streaming.base.stream``, ``streaming.base.local`` ...; see
:mod:`.modules`), each re-exporting shardstream's public names. The same modules are importable
without the alias as ``shardstream.compat.streaming...``. A name or module that shardstream does not
offer raises ImportError saying so; :func:`uninstall` removes the hook and the aliased modules.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import types
from typing import Any, Optional

from ..errors import ShardstreamError
from .modules import INTERNAL, MODULES, NOT_OFFERED, is_package

__all__ = ["install", "uninstall", "installed", "NotOfferedError"]

OWN_PREFIX = __name__ + "."  # shardstream.compat.streaming... is always answered


class NotOfferedError(ShardstreamError, ImportError):
    """A mosaicml-streaming module or name that shardstream does not offer."""


class _Aliases(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Answers imports of mosaicml-streaming's module names with shardstream's modules."""

    def __init__(self, alias: bool) -> None:
        self.alias = alias  # also answer plain ``streaming...`` (only after install())

    def _mosaic_name(self, fullname: str) -> Optional[str]:
        if fullname.startswith(OWN_PREFIX + "streaming"):
            name = fullname[len(OWN_PREFIX):]
        elif self.alias:
            name = fullname
        else:
            return None
        return name if name == "streaming" or name.startswith("streaming.") else None

    def find_spec(self, fullname: str, path: Any = None, target: Any = None):
        name = self._mosaic_name(fullname)
        if name is None:
            return None
        if name not in MODULES:
            raise NotOfferedError(f"{name} is a module of mosaicml-streaming that shardstream.compat does not offer: "
                                  f"{INTERNAL} (see docs/migrating.md)", name=fullname)
        return importlib.util.spec_from_loader(fullname, self, is_package=is_package(name))

    def create_module(self, spec):
        return None

    def exec_module(self, module: types.ModuleType) -> None:
        name = self._mosaic_name(module.__name__)
        table = MODULES[name]
        module.__all__ = [n for n in table if not n.startswith("_")]
        module.__doc__ = f"mosaicml-streaming's {name}, answered by shardstream (see shardstream.compat)."
        module.__shardstream_compat__ = True
        module.__getattr__ = _resolver(module.__name__, name, table)


def _resolver(fullname: str, name: str, table: dict[str, str]):
    def __getattr__(attr: str) -> Any:
        if attr in table:
            where, _, target = table[attr].partition(":")
            try:
                return getattr(importlib.import_module(where), target)
            except AttributeError:
                raise NotOfferedError(f"{name}.{attr} is not offered by shardstream (it has no {target}); "
                                      "see docs/migrating.md") from None
        if f"{name}.{attr}" in MODULES:
            return importlib.import_module(f"{fullname}.{attr}")
        if attr in NOT_OFFERED:
            raise NotOfferedError(f"{name}.{attr} is not offered by shardstream: {NOT_OFFERED[attr]}")
        if attr.startswith("__"):
            raise AttributeError(attr)
        raise NotOfferedError(f"{name}.{attr} is not offered by shardstream.compat; it offers "
                              f"{sorted(n for n in table if not n.startswith('_'))} (see docs/migrating.md)")

    return __getattr__


_own = _Aliases(alias=False)
if not any(isinstance(f, _Aliases) for f in sys.meta_path):
    sys.meta_path.append(_own)  # only ever answers shardstream.compat.streaming...


def installed() -> bool:
    """Whether ``import streaming`` resolves to shardstream in this process."""
    return any(isinstance(f, _Aliases) and f.alias for f in sys.meta_path)


def install(*, epoch_tail: Optional[str] = None) -> None:
    """Make ``import streaming`` (and its public submodules) resolve to shardstream from now on.

    ``epoch_tail``: the ``epoch_tail`` of its ``StreamingDataset`` when a script passes none; ``"mosaic"``
    gives mosaicml-streaming's epoch lengths, short last batch and ``drop_last`` (docs/epochs.md), None
    keeps shardstream's default. Refused with ImportError if mosaicml-streaming itself is already
    imported: call it first.
    """
    from .datasets import set_epoch_tail

    set_epoch_tail(epoch_tail)
    real = sys.modules.get("streaming")
    if real is not None and not getattr(real, "__shardstream_compat__", False):
        raise NotOfferedError(
            f"mosaicml-streaming is already imported (from {getattr(real, '__file__', '?')}); call "
            "shardstream.compat.install() before the first import of streaming, or run the script with "
            "python -m shardstream.compat script.py")
    if not installed():
        sys.meta_path.insert(0, _Aliases(alias=True))


def uninstall() -> None:
    """Undo :func:`install`: ``import streaming`` finds mosaicml-streaming again (if it is installed)."""
    sys.meta_path[:] = [f for f in sys.meta_path if not (isinstance(f, _Aliases) and f.alias)]
    for name in [n for n, m in sys.modules.items() if (n == "streaming" or n.startswith("streaming."))
                 and getattr(m, "__shardstream_compat__", False)]:
        del sys.modules[name]
