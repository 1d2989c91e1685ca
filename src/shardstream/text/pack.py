"""Sequence packing: documents of token ids of any length into rows of exactly ``seq_len`` tokens.

:class:`Pack` holds the options (validated once); :class:`Packer` runs them over keyed documents
and holds its open bins as *pieces* ``(key, start, stop)``: the document's item key and the range of
its tokens in the bin. Its state is those pieces and a few counters, never token values, so a
checkpoint stays small and a resumed packer rebuilds its bins by reading the documents again
(see :mod:`.packstage`).

Input: rows with a 1-D integer array in ``column`` and, optionally, per-token integer columns of
the same length named in ``extra_columns``, sliced the same way. Every output row has, each of
shape ``(seq_len,)``:

- ``column`` (``input_ids``), ``int32``: the tokens of the pieces one after the other, then ``pad_id``;
- ``segment_ids``, ``int32``: 1, 2, 3 ... for the pieces of the row in order, 0 on padding;
- ``position_ids``, ``int32``: 0, 1, 2 ... restarting at each piece, 0 on padding;
- ``loss_mask``, ``int8``: the row's ``loss_mask`` where the document has one (and ``loss_mask`` is
  among ``extra_columns``), else 1 on every token; 0 on padding. With ``mask_boundary=True`` it is
  also 0 on the first token of every piece, the token a causal model would otherwise learn to
  predict from the end of the document before it;
- every other extra column, ``int32``, padded with 0.

Other columns of the input are not carried. A piece is a whole document, or a part of one that
``keep_remainder`` split; either way it is one segment with positions from 0.

Strategies:

- ``greedy``: one open bin, documents in arrival order. A document that does not fit: with
  ``keep_remainder=True`` fills the bin and its remainder continues in the next one ("concatenate
  and chunk": every row full but the last); with ``keep_remainder=False`` the bin is emitted
  (padded) and the document starts the next.
- ``first_fit``: up to ``num_bins`` open bins, in the order they opened. A document goes into the
  first bin with room; when none has room and ``num_bins`` are open, the fullest is emitted (the
  earliest opened of equally full ones) and the document opens a new bin. A document of
  ``seq_len`` tokens or more makes rows of its own at once (its chunks with ``keep_remainder``,
  else its first ``seq_len`` tokens), leaving the open bins as they are.

A bin that becomes exactly full is emitted at once. With ``keep_remainder=False`` a document longer
than ``seq_len`` is cut to its first ``seq_len`` tokens if ``truncate=True``, otherwise it raises
:class:`~shardstream.errors.DocumentTooLongError`. Empty documents are skipped. At the end of the
input the open bins are emitted, padded, in the order they opened, unless
``drop_remainder_at_end=True`` drops them. Tokens cut or dropped are counted in ``dropped``;
``efficiency`` is real tokens over the slots of the rows emitted so far.
"""

from __future__ import annotations

from collections import deque
from dataclasses import asdict, dataclass
from typing import Any, Callable, Iterable, Iterator, Mapping, Optional

import numpy as np

from ..errors import DocumentTooLongError, IncompatibleStateError, InvalidArgumentError

STRATEGIES = ("greedy", "first_fit")
COUNTERS = ("tokens", "slots", "packs", "dropped")


def _check_int(name: str, value: Any, low: Optional[int] = None) -> None:
    if type(value) is bool or not isinstance(value, (int, np.integer)):
        raise InvalidArgumentError(f"{name}={value!r} must be an integer")
    if low is not None and value < low:
        raise InvalidArgumentError(f"{name}={value} must be at least {low}")


def _check_bool(name: str, value: Any) -> None:
    if not isinstance(value, (bool, np.bool_)):
        raise InvalidArgumentError(f"{name}={value!r} must be True or False")


@dataclass(frozen=True)
class Pack:
    """How to pack documents into rows of ``seq_len`` tokens (see the module docstring).

    Calling it on an iterable of rows packs them: ``for row in Pack(1024)(rows): ...``.
    """

    seq_len: int
    strategy: str = "greedy"
    pad_id: int = 0
    keep_remainder: bool = True
    truncate: bool = False
    column: str = "input_ids"
    extra_columns: tuple = ("loss_mask",)
    num_bins: int = 8
    drop_remainder_at_end: bool = False
    mask_boundary: bool = False

    def __post_init__(self) -> None:
        _check_int("seq_len", self.seq_len, 1)
        _check_int("pad_id", self.pad_id)
        _check_int("num_bins", self.num_bins, 1)
        for name in ("seq_len", "pad_id", "num_bins"):
            object.__setattr__(self, name, int(getattr(self, name)))
        for name in ("keep_remainder", "truncate", "drop_remainder_at_end", "mask_boundary"):
            _check_bool(name, getattr(self, name))
        if self.strategy not in STRATEGIES:
            raise InvalidArgumentError(f"strategy={self.strategy!r} is not a packing strategy; use one of "
                                       f"{', '.join(map(repr, STRATEGIES))}")
        if self.truncate and self.keep_remainder:
            raise InvalidArgumentError("truncate=True cuts documents longer than seq_len, but keep_remainder=True "
                                       "carries their remainder into the next rows instead; pass "
                                       "keep_remainder=False to truncate")
        if not isinstance(self.column, str) or not self.column:
            raise InvalidArgumentError(f"column={self.column!r} must name the column of token ids")
        extra = (self.extra_columns,) if isinstance(self.extra_columns, str) else tuple(self.extra_columns)
        object.__setattr__(self, "extra_columns", extra)
        for name in extra:
            if not isinstance(name, str) or name == self.column or name in ("segment_ids", "position_ids"):
                raise InvalidArgumentError(f"extra_columns names {name!r}: each must be another per-token column "
                                           f"of the rows, not {self.column!r}, 'segment_ids' or 'position_ids'")
        if len(set(extra)) != len(extra):
            raise InvalidArgumentError(f"extra_columns={list(extra)} names a column twice")

    def describe(self) -> dict:
        """The options as JSON-able data (for fingerprints)."""
        out = asdict(self)
        out["extra_columns"] = list(self.extra_columns)
        return out

    def __call__(self, rows: Iterable[Mapping]) -> Iterator[dict]:
        """The packed rows of ``rows`` (keyed by their index), in order."""
        packer = Packer(self)
        for i, row in enumerate(rows):
            packer.add(i, row)
            while (out := packer.next_pack()) is not None:
                yield out[1]
        while (out := packer.next_pack(final=True)) is not None:
            yield out[1]


class Packer:
    """Packs keyed documents by :class:`Pack`'s rules; holds open bins and pending pieces.

    Feed it with :meth:`add`, then take rows with :meth:`next_pack` until it returns None (it needs
    another document); at the end of the input, ``next_pack(final=True)`` empties the open bins.
    A piece held is ``(key, start, stop, columns)``: ``columns`` are the document's arrays
    (token ids first, then the extra columns in order, None for a missing ``loss_mask``).
    ``locate(key)`` names an item in error messages.
    """

    def __init__(self, pack: Pack, locate: Optional[Callable[[Any], str]] = None) -> None:
        self.pack = pack
        self._locate = locate or (lambda key: f"key {key!r}")
        self._capacity = 1 if pack.strategy == "greedy" else pack.num_bins
        self._clear()
        self._arange = np.arange(pack.seq_len + 1, dtype=np.int32)  # positions, and segment numbers from 1
        self._ones = np.ones(pack.seq_len, dtype=np.int8)
        extra = pack.extra_columns
        self._mask_at = extra.index("loss_mask") + 1 if "loss_mask" in extra else None
        self._others = [(name, i + 1) for i, name in enumerate(extra) if name != "loss_mask"]

    def _clear(self) -> None:
        self._bins: list[list[tuple]] = []
        self._fills: list[int] = []
        self._pending: deque = deque()
        self.tokens = self.slots = self.packs = self.dropped = 0

    @property
    def efficiency(self) -> float:
        """Real tokens over the slots of the rows emitted so far (0.0 before the first)."""
        return self.tokens / self.slots if self.slots else 0.0

    def add(self, key: Any, row: Mapping) -> None:
        """Queue one document (``row``, the item with ``key``)."""
        cols = self.columns(key, row)
        if len(cols[0]):
            self._pending.append((key, 0, len(cols[0]), cols))

    def next_pack(self, final: bool = False) -> Optional[tuple[Any, dict]]:
        """The next row as ``(key, row)``, or None when another document is needed (or, with
        ``final=True``, when nothing is left). The key is ``("p", ((key, start, stop), ...))``."""
        while self._pending:
            out = self._place()
            if out is not None:
                return out
        if final and self._bins:
            if not self.pack.drop_remainder_at_end:
                return self._emit(0)
            self.dropped += sum(self._fills)
            self._bins.clear()
            self._fills.clear()
        return None

    # placing ---------------------------------------------------------------------------------

    def _place(self) -> Optional[tuple[Any, dict]]:
        """Place the first pending piece, or the part of it that goes now; a row if one is complete."""
        key, start, stop, cols = self._pending[0]
        size = self.pack.seq_len
        if stop - start > size and not self.pack.keep_remainder:
            if not self.pack.truncate:
                raise DocumentTooLongError(
                    f"the document at {self._locate(key)} has {stop - start} tokens, more than seq_len={size}, "
                    "and keep_remainder=False keeps documents whole; pass truncate=True to keep its first "
                    f"{size} tokens, keep_remainder=True to carry the rest into the next rows, or a larger seq_len")
            self.dropped += stop - start - size
            stop = start + size
            self._pending[0] = (key, start, stop, cols)
        if self.pack.strategy == "greedy":
            return self._place_greedy(key, start, stop, cols)
        return self._place_first_fit(key, start, stop, cols)

    def _place_greedy(self, key, start, stop, cols) -> Optional[tuple[Any, dict]]:
        room = self.pack.seq_len - (self._fills[0] if self._bins else 0)
        if stop - start <= room:
            self._pending.popleft()
            self._put(0, (key, start, stop, cols))
            return self._emit(0) if stop - start == room else None
        if self.pack.keep_remainder:
            self._pending[0] = (key, start + room, stop, cols)
            self._put(0, (key, start, start + room, cols))
        return self._emit(0)

    def _place_first_fit(self, key, start, stop, cols) -> Optional[tuple[Any, dict]]:
        size = self.pack.seq_len
        n = stop - start
        if n >= size:  # rows of its own
            if n > size:
                self._pending[0] = (key, start + size, stop, cols)
            else:
                self._pending.popleft()
            return self._emit_pieces([(key, start, start + size, cols)])
        for i, fill in enumerate(self._fills):
            if fill + n <= size:
                self._pending.popleft()
                self._put(i, (key, start, stop, cols))
                return self._emit(i) if fill + n == size else None
        if len(self._bins) < self._capacity:
            self._pending.popleft()
            self._put(len(self._bins), (key, start, stop, cols))
            return None
        fullest = max(range(len(self._fills)), key=self._fills.__getitem__)  # the first of the fullest
        return self._emit(fullest)

    def _put(self, i: int, piece: tuple) -> None:
        if i == len(self._bins):
            self._bins.append([])
            self._fills.append(0)
        self._bins[i].append(piece)
        self._fills[i] += piece[2] - piece[1]

    def _emit(self, i: int) -> tuple[Any, dict]:
        self._fills.pop(i)
        return self._emit_pieces(self._bins.pop(i))

    def _emit_pieces(self, pieces: list) -> tuple[Any, dict]:
        row = self.build(pieces)
        self.tokens += sum(p[2] - p[1] for p in pieces)
        self.slots += self.pack.seq_len
        self.packs += 1
        return ("p", tuple((k, s, e) for k, s, e, _ in pieces)), row

    # rows ------------------------------------------------------------------------------------

    def columns(self, key: Any, row: Mapping) -> tuple:
        """The arrays of ``row`` that packing uses: token ids, then the extra columns (checked)."""
        name = self.pack.column
        try:
            ids = row[name]
        except (KeyError, TypeError, IndexError):
            have = list(row) if isinstance(row, Mapping) else type(row).__name__
            raise InvalidArgumentError(f"the item at {self._locate(key)} has no column {name!r} of token ids "
                                       f"(it has {have}); tokenize first, or pass column= the token column")
        ids = ids if type(ids) is np.ndarray else np.asarray(ids)
        if ids.ndim != 1 or (ids.dtype.kind not in "iu" and ids.size):
            raise InvalidArgumentError(
                f"column {name!r} of the item at {self._locate(key)} is an array of shape {ids.shape} and dtype "
                f"{ids.dtype}; packing takes one 1-D array of integer token ids per row (pack before batching)")
        out = [ids]
        for extra in self.pack.extra_columns:
            values = row.get(extra)
            if values is None:
                if extra != "loss_mask":
                    raise InvalidArgumentError(f"the item at {self._locate(key)} has no column {extra!r} named in "
                                               f"extra_columns (it has {list(row)}); remove it from extra_columns")
            else:
                values = values if type(values) is np.ndarray else np.asarray(values)
                if values.shape != ids.shape or values.dtype.kind not in "biu":
                    raise InvalidArgumentError(
                        f"column {extra!r} of the item at {self._locate(key)} has shape {values.shape} and dtype "
                        f"{values.dtype}; a per-token column must be integers, one per token of {name!r} "
                        f"({len(ids)})")
            out.append(values)
        return tuple(out)

    def build(self, pieces: list) -> dict:
        """The row made of ``pieces`` ``(key, start, stop, columns)``, in order."""
        size = self.pack.seq_len
        lengths = [e - s for _, s, e, _ in pieces]
        n = sum(lengths)
        ids = np.empty(size, np.int32)
        _concat([c[0][s:e] for _, s, e, c in pieces], ids[:n])
        ids[n:] = self.pack.pad_id
        seg = np.zeros(size, np.int32)
        pos = np.zeros(size, np.int32)
        if len(pieces) == 1:
            seg[:n] = 1
            pos[:n] = self._arange[:n]
            starts = np.zeros(1, np.intp)
        else:
            counts = np.array(lengths)
            starts = np.cumsum(counts) - counts
            seg[:n] = np.repeat(self._arange[1:len(pieces) + 1], counts)
            pos[:n] = self._arange[:n] - np.repeat(starts, counts)
        row = {self.pack.column: ids, "segment_ids": seg, "position_ids": pos, "loss_mask": self._mask(pieces, n)}
        if self.pack.mask_boundary:
            row["loss_mask"][starts] = 0
        for name, j in self._others:
            values = np.zeros(size, np.int32)
            _concat([c[j][s:e] for _, s, e, c in pieces], values[:n])
            row[name] = values
        return row

    def _mask(self, pieces: list, n: int) -> np.ndarray:
        mask = np.zeros(self.pack.seq_len, np.int8)
        j = self._mask_at
        if j is None or all(c[j] is None for _, _, _, c in pieces):
            mask[:n] = 1
        else:
            _concat([self._ones[:e - s] if c[j] is None else c[j][s:e] for _, s, e, c in pieces], mask[:n])
        return mask

    # state -----------------------------------------------------------------------------------

    def state(self) -> dict:
        """Open bins and pending pieces as ``(key, start, stop)``, and the counters (no token values)."""
        return {"bins": [[(k, s, e) for k, s, e, _ in b] for b in self._bins],
                "pending": [(k, s, e) for k, s, e, _ in self._pending],
                **{name: getattr(self, name) for name in COUNTERS}}

    @staticmethod
    def keys(state: dict) -> list:
        """The distinct item keys a :meth:`state` holds, in order: what :meth:`restore` needs rows for."""
        pieces = [p for b in state.get("bins", ()) for p in b] + list(state.get("pending", ()))
        return list(dict.fromkeys(p[0] for p in pieces))

    def restore(self, state: dict, rows: Mapping) -> None:
        """Take up ``state`` (a :meth:`state`, possibly dealt among readers) with ``rows`` by key.

        Bins beyond this strategy's number of open bins give their pieces back to be placed again,
        after the pending ones."""
        cols = {key: self.columns(key, rows[key]) for key in self.keys(state)}
        self._clear()
        excess = []
        for pieces in state.get("bins", ()):
            bin_ = [self.piece(p, cols) for p in pieces]
            fill = sum(e - s for _, s, e, _ in bin_)
            if not 0 < fill < self.pack.seq_len:
                raise IncompatibleStateError(f"the state holds an open bin of {fill} tokens, which a packer of "
                                             f"seq_len={self.pack.seq_len} cannot hold; was it made with other "
                                             "packing options?")
            if len(self._bins) < self._capacity:
                self._bins.append(bin_)
                self._fills.append(fill)
            else:
                excess += bin_
        self._pending.extend([self.piece(p, cols) for p in state.get("pending", ())] + excess)
        for name in COUNTERS:
            value = state.get(name, 0)
            if type(value) is not int or value < 0:
                raise IncompatibleStateError(f"the state's {name} counter is {value!r}, not a count")
            setattr(self, name, value)

    def piece(self, piece: tuple, cols: Mapping) -> tuple:
        """``(key, start, stop, columns)`` from a held ``(key, start, stop)``, its range checked."""
        try:
            key, start, stop = piece
        except (TypeError, ValueError):
            raise IncompatibleStateError(f"the state holds {piece!r} where a piece (key, start, stop) belongs")
        n = len(cols[key][0])
        if type(start) is not int or type(stop) is not int or not 0 <= start < stop <= n:
            raise IncompatibleStateError(f"the state holds tokens {start}:{stop} of the item at {self._locate(key)}, "
                                         f"which has {n}; was it made from other data?")
        return key, start, stop, cols[key]


def _concat(parts: list, out: np.ndarray) -> None:
    if len(parts) == 1:
        out[...] = parts[0]
    else:
        np.concatenate(parts, out=out, casting="unsafe")
