"""``streaming.base.format.mds.encodings``: the MDS column encodings by name, and registering new ones.

``_encodings`` is the registry users add their own encodings to (``_encodings["complex128"] =
Complex128``); the built-in names are always there and cannot be replaced.
"""

from __future__ import annotations

from typing import Any, Optional

from ..format.customencodings import registered_encodings
from ..format.encodings import Encoding, encoding_names, get_encoding

_encodings = registered_encodings

__all__ = ["Encoding", "_encodings", "get_mds_encodings", "is_mds_encoding", "is_mds_encoding_safe", "mds_encode",
           "mds_decode", "get_mds_encoded_size"]


def get_mds_encodings() -> set[str]:
    """The encoding names (built-in and registered)."""
    return set(encoding_names())


def is_mds_encoding(encoding: str) -> bool:
    try:
        get_encoding(encoding)
    except ValueError:
        return False
    return True


def is_mds_encoding_safe(encoding: str) -> bool:
    """False for encodings whose decoding may run code (``pkl``)."""
    return get_encoding(encoding).safe if is_mds_encoding(encoding) else True


def mds_encode(encoding: str, obj: Any) -> bytes:
    """``obj`` encoded as column type ``encoding`` (bytes pass through as they are)."""
    return obj if isinstance(obj, bytes) else get_encoding(encoding).encode(obj)


def mds_decode(encoding: str, data: bytes) -> Any:
    return get_encoding(encoding).decode(memoryview(data))


def get_mds_encoded_size(encoding: str) -> Optional[int]:
    """The fixed encoded size in bytes, or None for variable-size encodings."""
    return get_encoding(encoding).size
