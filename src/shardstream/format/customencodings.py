"""Column encodings that users add to the MDS format by name.

As with mosaicml-streaming (``_encodings['complex128'] = Complex128``), an encoding is a class
with ``encode(obj) -> bytes`` and ``decode(data: bytes) -> obj`` and an optional ``size`` (the fixed
encoded size in bytes, or None); it is registered under a name, and from then on ``MDSWriter``
columns may use that name and every reader in the process decodes it::

    register_encoding("complex128", Complex128)

A name with a configuration (``"name:config"``) is built with the class's ``from_str(config)``.
The built-in names cannot be replaced: their bytes are the format, shared with every other reader.
A registered encoding's ``decode`` receives ``bytes`` (not a view of the shard).
"""

from __future__ import annotations

from collections.abc import MutableMapping
from typing import Any, Iterator, Optional

from ..errors import EncodeError, InvalidArgumentError, UnsupportedFormatError
from .encodings import Encoding, builtin_encoding_names, get_encoding


class RegisteredEncoding(Encoding):
    """A user's encoding as the writer and readers see it."""

    def __init__(self, name: str, coder: Any, safe: bool) -> None:
        size = getattr(coder, "size", None)
        if size is not None and (isinstance(size, bool) or not isinstance(size, int) or size < 1):
            raise InvalidArgumentError(f"encoding {name!r}: size={size!r} must be a positive int (bytes) or None")
        self.name, self.coder, self.size, self.safe = name, coder, size, safe

    def encode(self, value: Any) -> bytes:
        data = self.coder.encode(value)
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise EncodeError(f"encoding {self.name!r}: encode() returned {type(data).__name__}, not bytes")
        return bytes(data)

    def decode(self, data: memoryview) -> Any:
        return self.coder.decode(bytes(data))


class EncodingRegistry(MutableMapping):
    """Name -> encoding class (or instance) of the encodings users registered."""

    def __init__(self) -> None:
        self._classes: dict[str, Any] = {}
        self._safe: dict[str, bool] = {}

    def register(self, name: str, encoding: Any, safe: Optional[bool] = None) -> None:
        """Register ``encoding`` (a class, or an object with ``encode``/``decode``) under ``name``.
        ``safe=False`` marks one whose decoding may run code (read only with ``allow_unsafe_types``)."""
        if not isinstance(name, str) or not name or ":" in name:
            raise InvalidArgumentError(f"an encoding name is a non-empty string without ':', got {name!r}")
        if name in builtin_encoding_names():
            raise InvalidArgumentError(
                f"{name!r} is a built-in MDS encoding; its bytes are the format every reader shares, so it cannot "
                "be replaced: register yours under a new name")
        if not (callable(getattr(encoding, "encode", None)) and callable(getattr(encoding, "decode", None))):
            raise InvalidArgumentError(
                f"encoding {name!r}: {encoding!r} has no encode() and decode(); register a class with "
                "encode(obj) -> bytes and decode(data) -> obj")
        self._classes[name] = encoding
        self._safe[name] = bool(getattr(encoding, "safe", True) if safe is None else safe)
        get_encoding.cache_clear()

    def coder(self, name: str) -> Optional[RegisteredEncoding]:
        """The encoding ``name`` (``base`` or ``base:config``) if its base name is registered, else None."""
        base, _, config = name.partition(":")
        cls = self._classes.get(base)
        if cls is None:
            return None
        if config:
            make = getattr(cls, "from_str", None)
            if make is None:
                raise UnsupportedFormatError(
                    f"encoding {name!r}: the registered {base!r} has no from_str(config) to read {config!r} with")
            coder = make(config)
        else:
            coder = cls() if isinstance(cls, type) else cls
        return RegisteredEncoding(name, coder, self._safe[base])

    def __setitem__(self, name: str, encoding: Any) -> None:
        self.register(name, encoding)

    def __getitem__(self, name: str) -> Any:
        return self._classes[name]

    def __delitem__(self, name: str) -> None:
        del self._classes[name]
        del self._safe[name]
        get_encoding.cache_clear()

    def __iter__(self) -> Iterator[str]:
        return iter(self._classes)

    def __len__(self) -> int:
        return len(self._classes)


registered_encodings = EncodingRegistry()


def register_encoding(name: str, encoding: Any, safe: Optional[bool] = None) -> None:
    """Add a column encoding named ``name`` (see the module docstring)."""
    registered_encodings.register(name, encoding, safe)
