"""The rows of one piece of a text file (JSON Lines, JSON, text), decoded into columns when it is opened.

Each column holds the values samples give (Python scalars, ``str``, numpy arrays for lists of
numbers, dicts) and, for a numeric column, the numpy form its column batches are cut from:
a 1-D array for numbers (with the rows that are null marked), a flat array and offsets for
lists of numbers. A sample is a dict of its row's values; a column batch takes rows out of
those arrays, so batches and stacked samples agree by construction.
"""

from __future__ import annotations

import threading
from typing import Any, Iterator, Optional, Sequence

import numpy as np

from ..errors import InvalidArgumentError, SampleIndexError
from .batch import Ragged
from .files import Piece, piece_kinds
from .source import ShardRows


class Column:
    """One decoded column: ``values`` per row for samples; ``array`` (numbers, with ``nulls`` marking rows
    without a value) or ``flat`` + ``offsets`` (lists of numbers) for batches; neither for other values."""

    def __init__(self, name: str, values: list, array: Optional[np.ndarray] = None,
                 nulls: Optional[np.ndarray] = None, flat: Optional[np.ndarray] = None,
                 offsets: Optional[np.ndarray] = None) -> None:
        self.name, self.values = name, values
        self.array, self.nulls, self.flat, self.offsets = array, nulls, flat, offsets

    def batch(self, rows: np.ndarray) -> Any:
        """Rows ``rows`` (ints) as a column batch."""
        if self.array is None and self.flat is None:
            values = self.values
            return [values[i] for i in rows.tolist()]
        self._no_nulls(rows)
        if self.array is not None:
            return self.array[rows]
        return Ragged(self.flat, self.offsets).take(rows)

    def batch_range(self, lo: int, hi: int) -> Any:
        if self.array is None and self.flat is None:
            return self.values[lo:hi]
        self._no_nulls(slice(lo, hi))
        if self.array is not None:
            return self.array[lo:hi].copy()
        a, b = int(self.offsets[lo]), int(self.offsets[hi])
        return Ragged(self.flat[a:b].copy(), self.offsets[lo:hi + 1] - a)

    def _no_nulls(self, rows: Any) -> None:
        if self.nulls is not None and self.nulls[rows].any():
            raise InvalidArgumentError(
                f"column {self.name!r} has rows without a value (null or missing), which a numeric column batch "
                "cannot hold; read samples (iterate the dataset) or leave the column out with columns=[...]")


class ValueRows(ShardRows):
    """A piece whose rows are held as one list of values per column (``row_columns``): samples are dicts
    of a row's values. Subclasses give ``piece``, ``samples``, ``column_names`` and ``row_columns``."""

    piece: Piece
    row_columns: list

    def get(self, i: int) -> dict[str, Any]:
        if not 0 <= i < self.samples:
            raise SampleIndexError(f"row {i} is out of range for part {self.piece.part} of {self.piece.file} "
                                   f"({self.samples} rows)")
        return self.get_unchecked(i)

    def get_unchecked(self, i: int) -> dict[str, Any]:
        return {name: col[i] for name, col in zip(self.column_names, self.row_columns)}

    def _pairs(self, columns: Optional[Sequence[str]]) -> list[tuple[str, list]]:
        return [(n, c) for n, c in zip(self.column_names, self.row_columns) if columns is None or n in columns]

    def decoders(self, columns: Optional[Sequence[str]] = None):
        if columns is None:
            return None, self.get_unchecked
        pairs = self._pairs(columns)
        return None, lambda i: {n: c[i] for n, c in pairs}

    def iter_range(self, start: int = 0, stop: Optional[int] = None,
                   columns: Optional[Sequence[str]] = None) -> Iterator[dict[str, Any]]:
        stop = self.samples if stop is None else stop
        pairs = self._pairs(columns)
        names = [n for n, _ in pairs]
        for values in zip(*(c[start:stop] for _, c in pairs)):
            yield dict(zip(names, values))

    def rows_range(self, start: int, stop: int, columns: Optional[Sequence[str]] = None) -> list[dict[str, Any]]:
        """The rows of :meth:`iter_range`, as a list."""
        pairs = self._pairs(columns)
        names = [n for n, _ in pairs]
        return [dict(zip(names, values)) for values in zip(*(c[start:stop] for _, c in pairs))]

    def kinds(self, columns: Optional[Sequence[str]] = None) -> list[tuple[str, str, Any]]:
        return piece_kinds(self.piece, columns)


class ColumnRows(ValueRows):
    """The rows of one piece, decoded once when opened (see the module docstring)."""

    def __init__(self, piece: Piece, columns: list[Column], samples: int) -> None:
        self.piece = piece
        self.column_names = tuple(c.name for c in columns)
        self.columns = columns
        self.samples = samples
        self.row_columns = [c.values for c in columns]

    def _selected(self, columns: Optional[Sequence[str]]) -> list[Column]:
        return [c for c in self.columns if columns is None or c.name in columns]

    def batch_rows(self, rows, columns: Optional[Sequence[str]] = None) -> dict[str, Any]:
        rows = np.asarray(rows, np.int64).reshape(-1)
        return {c.name: c.batch(rows) for c in self._selected(columns)}

    def batch_range(self, lo: int, hi: int, columns: Optional[Sequence[str]] = None) -> dict[str, Any]:
        return {c.name: c.batch_range(lo, hi) for c in self._selected(columns)}


class SampleRows(ColumnRows):
    """A piece whose parsed rows already are its samples (each a dict with exactly the columns, in order,
    of the values the columns hold). A run of rows read for the first time is handed on as those dicts
    themselves, which the piece then forgets (a consumer may change what it is given): no dict is built
    per row. A row read again, or read alone (``get``), is built from the columns as in
    :class:`ColumnRows`, as are column batches."""

    def __init__(self, piece: Piece, columns: list[Column], samples: int, rows: list[dict]) -> None:
        super().__init__(piece, columns, samples)
        self.rows = rows  # None where the row was handed on
        self.given = bytearray(samples)  # 1 where the row was handed on
        self.lock = threading.Lock()

    def _take(self, start: int, stop: int) -> Optional[list[dict]]:
        """Rows ``start..stop`` themselves if none of them was handed on before (they are now), else None."""
        with self.lock:
            if self.given.find(1, start, stop) != -1:
                return None
            rows = self.rows[start:stop]
            self.rows[start:stop] = [None] * len(rows)
            self.given[start:stop] = b"\x01" * len(rows)
        return rows

    def iter_range(self, start: int = 0, stop: Optional[int] = None,
                   columns: Optional[Sequence[str]] = None) -> Iterator[dict[str, Any]]:
        rows = self._take(start, self.samples if stop is None else stop) if columns is None else None
        return iter(rows) if rows is not None else super().iter_range(start, stop, columns)

    def rows_range(self, start: int, stop: int, columns: Optional[Sequence[str]] = None) -> list[dict[str, Any]]:
        rows = self._take(start, stop) if columns is None else None
        return rows if rows is not None else super().rows_range(start, stop, columns)
