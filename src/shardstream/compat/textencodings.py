"""``streaming.base.format.json.encodings`` and ``streaming.base.format.xsv.encodings``: the column
encodings of JSON and XSV (CSV, TSV) shards, ``str``, ``int`` and ``float``, by name.

They check values with the rule the JSON, CSV, TSV and XSV writers apply (:mod:`shardstream.format.textshards`:
``isinstance`` of the column's type; a wrong value is a ``ColumnTypeError``, also an ``AttributeError``
as in mosaicml-streaming), and an XSV field is ``str(value)`` on the way in and parsed on the way out.
"""

from __future__ import annotations

from typing import Any

from ..errors import ShardstreamError
from ..format.textshards import check_value, decode_xsv_field

__all__ = ["is_json_encoded", "is_json_encoding", "is_xsv_encoding", "xsv_encode", "xsv_decode",
           "Str", "Int", "Float", "UnknownTextEncodingError"]

_NAMES = ("str", "int", "float")


class UnknownTextEncodingError(ShardstreamError, KeyError):
    """An encoding name that JSON and XSV shards do not have; a ``KeyError``, as mosaicml-streaming raises."""

    def __str__(self) -> str:  # KeyError would print the repr of the message
        return str(self.args[0])


def _known(encoding: str) -> str:
    if encoding not in _NAMES:
        raise UnknownTextEncodingError(f"{encoding!r} is not an encoding of JSON or XSV shards; they hold "
                                       f"{', '.join(_NAMES)} (use MDSWriter for other types)")
    return encoding


class _Column:
    """One encoding, as a class with mosaicml-streaming's classmethods."""

    name = ""

    @classmethod
    def is_encoded(cls, obj: Any) -> bool:
        """True if ``obj`` has this type; ColumnTypeError (an AttributeError) if not."""
        check_value(cls.name, obj, f"<{cls.name}>")
        return True

    @classmethod
    def encode(cls, obj: Any) -> str:
        """The XSV text of ``obj``."""
        return str(check_value(cls.name, obj, f"<{cls.name}>"))

    @classmethod
    def decode(cls, obj: str) -> Any:
        return decode_xsv_field(cls.name, obj)


class Str(_Column):
    name = "str"


class Int(_Column):
    name = "int"


class Float(_Column):
    name = "float"


_CLASSES = {"str": Str, "int": Int, "float": Float}


def is_json_encoding(encoding: str) -> bool:
    """Whether JSON shards have a column encoding ``encoding``."""
    return encoding in _NAMES


def is_json_encoded(encoding: str, value: Any) -> bool:
    """True when ``value`` fits a JSON shard column of ``encoding``; ColumnTypeError (an AttributeError) if not."""
    return _CLASSES[_known(encoding)].is_encoded(value)


def is_xsv_encoding(encoding: str) -> bool:
    """Whether XSV (CSV, TSV) shards have a column encoding ``encoding``."""
    return encoding in _NAMES


def xsv_encode(encoding: str, value: Any) -> str:
    """``value`` as the text of an XSV field (``27`` -> ``"27"``); ColumnTypeError if of the wrong type."""
    return _CLASSES[_known(encoding)].encode(value)


def xsv_decode(encoding: str, value: str) -> Any:
    """An XSV field's text as the column's value (``"27"`` -> ``27``)."""
    return _CLASSES[_known(encoding)].decode(value)
