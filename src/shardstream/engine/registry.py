"""The streams registry: ``Stream`` classes by name, for ``StreamingDataset(stream_name=..., stream_config=...)``.

As in mosaicml-streaming, a dataset given no ``streams=`` builds its one stream from the class
registered under ``stream_name`` (``"stream"``: :class:`~shardstream.Stream`), called with
``stream_config`` plus the dataset's own locating keywords (``remote``, ``local``, ``split``,
``download_retry``, ``download_timeout``, ``validate_hash``, ``keep_zip``)::

    @streams_registry.register("my_stream")
    class MyStream(Stream):
        def __init__(self, *, bucket, **kwargs):
            super().__init__(**kwargs)
            self.remote = f"s3://{bucket}/train"

    StreamingDataset(stream_name="my_stream", stream_config={"bucket": "data"}, local="/tmp/cache")

A registered class may set where the stream lives and its options in ``__init__``. shardstream
downloads, caches and reads shards itself, so a class that overrides mosaicml-streaming's download
or shard hooks (``_download_file``, ``get_shards`` ...) is refused rather than silently not called.
Classes published by installed packages under the entry point group ``streaming_streams_registry``
are found by name too.

:class:`TypedRegistry` is the general kind (any namespace, optional entry points), with the
behaviour of mosaicml-streaming's ``registry_utils.TypedRegistry``: registries of the same namespace
share their entries, and a name published as an entry point wins over one registered in code.
"""

from __future__ import annotations

import importlib.metadata
from typing import Any, Callable, Generic, Optional, Sequence, TypeVar

from ..errors import InvalidArgumentError
from .stream import Stream, refuse_uncalled_hooks

ENTRY_POINT_GROUP = "streaming_streams_registry"
LOCATING = ("remote", "local", "split", "download_retry", "download_timeout", "validate_hash", "keep_zip")

T = TypeVar("T")

#: every registry's entries, by namespace (registries of one namespace share them)
_ENTRIES: dict[tuple[str, ...], dict[str, Any]] = {}


def snapshot() -> dict:
    """Every registry's entries as they are now (a copy), for :func:`restore`."""
    return {namespace: dict(items) for namespace, items in _ENTRIES.items()}


def restore(saved: dict) -> None:
    """Put every registry's entries back as :func:`snapshot` saw them."""
    _ENTRIES.clear()
    _ENTRIES.update({namespace: dict(items) for namespace, items in saved.items()})


class RegistryError(InvalidArgumentError):
    """A name that is not registered, or a namespace that already exists."""


def _entry_points(group: str) -> list:
    # looked up at each call (not imported by name) so that a replaced importlib.metadata.entry_points is seen
    found = importlib.metadata.entry_points()
    if hasattr(found, "select"):
        return list(found.select(group=group))
    return list(found.get(group, []))  # a mapping group -> entry points


class TypedRegistry(Generic[T]):
    """Name -> registered object (a class, a function or any value) within a namespace."""

    def __init__(self, namespace: Sequence[str], entry_points: bool = False, description: str = "") -> None:
        if isinstance(namespace, str) or not namespace or not all(isinstance(n, str) for n in namespace):
            raise InvalidArgumentError(f"a registry's namespace is a sequence of strings, got {namespace!r}")
        self.namespace = tuple(namespace)
        self.entry_point_namespace = "_".join(self.namespace)
        self.entry_points = bool(entry_points)
        self.description = description

    @property
    def _items(self) -> dict[str, Any]:
        return _ENTRIES.setdefault(self.namespace, {})

    def register(self, name: str, *, func: Optional[Any] = None) -> Any:
        """Register ``func`` under ``name``; without ``func``, a decorator that registers what it decorates."""
        if not isinstance(name, str) or not name:
            raise InvalidArgumentError(f"{'.'.join(self.namespace)}: register under a non-empty name, got {name!r}")
        if func is None:
            return lambda f: self.register(name, func=f)
        self._items[name] = func
        return func

    register_class = register

    def __call__(self, name: str, func: Optional[Any] = None) -> Any:
        return self.register(name, func=func)

    def get(self, name: str) -> Any:
        """What is registered as ``name`` (an installed package's entry point first, when enabled)."""
        if self.entry_points:
            found = self.get_entry_point(name)
            if found is not None:
                return found
        if name in self._items:
            return self._items[name]
        raise RegistryError(f"{name!r} is not registered in {'.'.join(self.namespace)}; registered: "
                            f"{sorted(self.get_all())}. Register it with .register({name!r}, func=...)")

    def get_all(self) -> dict[str, Any]:
        return {**(self.get_entry_points() if self.entry_points else {}), **self._items}

    def get_entry_points(self) -> dict[str, Any]:
        """Objects published by installed packages under the entry point group ``<namespace joined by _>``."""
        return {ep.name: ep.load() for ep in _entry_points(self.entry_point_namespace)}

    def get_entry_point(self, name: str, default: Optional[Any] = None) -> Any:
        for ep in _entry_points(self.entry_point_namespace):
            if ep.name == name:
                return ep.load()
        return default

    def __contains__(self, name: object) -> bool:
        if name in self._items:
            return True
        return self.entry_points and any(ep.name == name for ep in _entry_points(self.entry_point_namespace))

    def unregister(self, name: str) -> None:
        """Forget ``name`` (registered in this process)."""
        self._items.pop(name, None)

    def __repr__(self) -> str:
        return f"TypedRegistry({'.'.join(self.namespace)}: {sorted(self._items)})"


def create_registry(*namespace: str, generic_type: Any = object, entry_points: bool = False,
                    description: str = "") -> TypedRegistry:
    """A new registry under ``namespace`` (e.g. ``"myproject", "streams"``); with ``entry_points=True``
    it also finds what installed packages publish under the group ``"myproject_streams"``.

    ``generic_type`` is only a type annotation, as in mosaicml-streaming. A namespace that names an
    entry of an existing registry is refused."""
    parent, leaf = tuple(namespace[:-1]), namespace[-1] if namespace else None
    if leaf is not None and leaf in _ENTRIES.get(parent, {}):
        raise RegistryError(f"Namespace already exists: {tuple(namespace)} (it is an entry of {'.'.join(parent)})")
    return TypedRegistry(namespace, entry_points=entry_points, description=description)


StreamsRegistry = TypedRegistry  # the kind of ``streams_registry``
streams_registry: TypedRegistry = create_registry(
    "streaming", "streams_registry", generic_type=type, entry_points=True,
    description="Stream classes (or functions making a Stream) by name, for StreamingDataset(stream_name=...)")
streams_registry.register("stream", func=Stream)
def stream_from_registry(stream_name: str, stream_config: Optional[dict], streams: Any,
                         locating: dict[str, Any]) -> Optional[Stream]:
    """The dataset's one stream built from the registry, or None when neither keyword asks for one
    (the default name and no config: the dataset opens ``remote``/``local`` itself)."""
    if stream_name == "stream" and stream_config is None:
        return None
    if streams is not None:
        raise InvalidArgumentError(
            "stream_name= and stream_config= build the dataset's one stream when no streams=[...] are given; "
            "with streams=, build each Stream (or your subclass) yourself and leave them out")
    if stream_config is not None and not isinstance(stream_config, dict):
        raise InvalidArgumentError(f"stream_config={stream_config!r} must be a dict of keyword arguments")
    config = dict(stream_config or {})
    clash = sorted(k for k in LOCATING if k in config and config[k] != locating[k])
    if clash:
        raise InvalidArgumentError(
            f"stream_config sets {clash}, which StreamingDataset's own keywords set (to "
            f"{[locating[k] for k in clash]}); pass them to StreamingDataset instead")
    config.update(locating)
    if not isinstance(stream_name, str):
        raise InvalidArgumentError(f"stream_name={stream_name!r} must be the name a Stream class is registered under")
    made = _construct(stream_name, streams_registry.get(stream_name), config)
    refuse_uncalled_hooks(type(made))
    return made


def _construct(name: str, maker: Callable, config: dict) -> Stream:
    if isinstance(maker, type) and not issubclass(maker, Stream):
        raise InvalidArgumentError(f"stream_name={name!r} is {maker.__name__}, not a subclass of shardstream.Stream")
    made = maker(**config)
    if not isinstance(made, Stream):
        raise InvalidArgumentError(f"stream_name={name!r} made a {type(made).__name__}, not a shardstream.Stream")
    return made
