"""The stages that need no user function: ``shuffle`` (a buffer), ``take`` / ``skip``, ``batch``,
column operations and ``with_format``.

``shuffle(seed, buffer_size)`` is HF's buffer: it fills ``buffer_size`` items, then for each
new item hands on a uniformly drawn buffered one and puts the new one in its place; at the
end it hands on the rest in random order. Draws come from a PCG64 stream seeded by
``(seed, resume generation, reader, epoch)``, so every epoch draws another order (set by
``set_epoch``, or the next one when the chain is iterated again, as the dataset's plan does);
its state is the number of draws, so restoring it is one ``advance``. The buffer's state is
its items' keys in slot order (plan positions for a buffer next to the source); on resume the
items are read again by position.

``take(n)`` / ``skip(n)`` count per rank, like HF on a split dataset: a rank's DataLoader
workers (or threads) share its ``n`` evenly.

With loader stats on, ``batch``'s grouping of rows counts as the ``collate`` stage (once per
batch); the other stages here do no work worth a stage of their own.
"""

from __future__ import annotations

from operator import itemgetter
from typing import Any, Callable, Optional, Sequence

import numpy as np

from ..errors import InvalidArgumentError
from ..stats import record
from .keys import decode_all, encode_all
from .stage import ReaderContext, Stage, deal, pull, pull_each

_DRAWS = 1024


def reader_seed(seed: int, ctx: ReaderContext, purpose: int) -> np.random.SeedSequence:
    """The seed of a reader's random stream for ``purpose``: a function of the seed, the resume generation,
    the reader and the epoch alone (epoch 0 keeps the stream it had before epochs entered it)."""
    words = [int(seed) & ((1 << 63) - 1), purpose, ctx.generation, ctx.reader]
    return np.random.SeedSequence(words + [ctx.epoch] if ctx.epoch else words)


class ShuffleStage(Stage):
    name = "shuffle"

    def __init__(self, source: Stage, ctx: ReaderContext, spec: "ShuffleSpec") -> None:
        super().__init__(source, ctx)
        self.size = spec.buffer_size
        self.seed = spec.seed
        self.reset(None)

    def _rng(self, draws: int) -> None:
        self.bitgen = np.random.PCG64(reader_seed(self.seed, self.ctx, 1))
        if draws:
            self.bitgen.advance(draws)
        self.gen = np.random.Generator(self.bitgen)
        self.array = self.gen.random(_DRAWS)
        self.block = self.array.tolist()
        self.drawn = draws  # draws taken before this block
        self.at = 0

    def _refill(self) -> None:
        self.drawn += _DRAWS
        self.array = self.gen.random(_DRAWS)
        self.block = self.array.tolist()
        self.at = 0

    def _draw(self) -> float:
        if self.at == _DRAWS:
            self._refill()
        u = self.block[self.at]
        self.at += 1
        return u

    def next(self) -> tuple[Any, Any]:
        keys, values, size = self.keys, self.values, self.size
        if not self.ended and len(keys) <= size:
            nxt = self.source.next
            try:
                while len(keys) < size:
                    k, v = nxt()
                    keys.append(k)
                    values.append(v)
                k, v = nxt()
            except StopIteration:
                self.ended = True
            else:
                i = int(self._draw() * size)
                out = keys[i], values[i]
                keys[i], values[i] = k, v
                return out
        if not keys:
            raise StopIteration
        i = int(self._draw() * len(keys))
        out = keys[i], values[i]
        keys[i], values[i] = keys[-1], values[-1]
        keys.pop()
        values.pop()
        return out

    def next_run(self, n: int) -> tuple[list, list]:
        """As many ``next`` calls: a run of new items from the source, each swapped into the buffer at one
        draw (the same draws, in the same order); filling, draining and an over-full buffer item by item."""
        keys, values, size = self.keys, self.values, self.size
        if self.ended or len(keys) >= size:
            if self.ended or len(keys) > size:
                return pull_each(self, n)
        else:
            more_keys, more_values = pull(self.source, size - len(keys))
            keys += more_keys
            values += more_values
            if len(keys) < size:
                self.ended = True
                return pull_each(self, n)
        new_keys, new_values = self.source.next_run(n)
        if not new_keys:
            self.ended = True
            return pull_each(self, n)
        return self._swap(new_keys, new_values)

    def _swap(self, new_keys: list, new_values: list) -> tuple[list, list]:
        """Each new item put into the buffer in place of a drawn one, which is handed on (one item after
        another; a run that is not short is done at once by :func:`swap_plan`, with the same result)."""
        keys, values = self.keys, self.values
        slots = self._slots(len(new_keys))
        if len(slots) > 1 and len(slots) * 16 >= len(keys) > 1:
            after, out = swap_plan(slots, len(keys))
            all_keys, all_values = keys + new_keys, values + new_values
            self.keys, self.values = list(after(all_keys)), list(after(all_values))
            return list(out(all_keys)), list(out(all_values))
        out_keys, out_values = [], []
        for i, k, v in zip(slots.tolist(), new_keys, new_values):
            out_keys.append(keys[i])
            out_values.append(values[i])
            keys[i] = k
            values[i] = v
        return out_keys, out_values

    def _slots(self, n: int) -> np.ndarray:
        """The buffer slots of the next ``n`` draws (``int(draw * size)``, as ``next`` computes each)."""
        parts = []
        while n:
            if self.at == _DRAWS:
                self._refill()
            k = min(n, _DRAWS - self.at)
            parts.append(self.array[self.at:self.at + k])
            self.at += k
            n -= k
        u = parts[0] if len(parts) == 1 else np.concatenate(parts)
        return (u * float(self.size)).astype(np.int64)

    def get_state(self) -> dict:
        return {"keys": encode_all(self.keys), "draws": self.drawn + self.at}

    def reset(self, state: Optional[dict] = None) -> None:
        self.ended = False
        if not state:
            self.keys, self.values = [], []
            self._rng(0)
            return
        self.keys = decode_all(state["keys"])  # more than buffer_size after a resume on fewer readers
        self.values = list(self.source.recreate(self.keys))
        self._rng(int(state.get("draws", 0)))

    @staticmethod
    def redistribute(states: list[dict], n: int) -> list[dict]:
        keys = [k for s in states for k in s.get("keys", [])]
        return [{"keys": share, "draws": 0} for share in deal(keys, n)]

    @classmethod
    def held_keys(cls, state: dict) -> list:
        return decode_all(state.get("keys", []))


class ShuffleSpec:
    keeps_count = True  # every item it takes, it hands on

    def __init__(self, seed: Optional[int], buffer_size: int) -> None:
        if isinstance(buffer_size, bool) or not isinstance(buffer_size, int) or buffer_size < 1:
            raise InvalidArgumentError(f"shuffle(buffer_size={buffer_size!r}) must be an int >= 1")
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, (int, np.integer))):
            raise InvalidArgumentError(f"shuffle(seed={seed!r}) must be an int or None")
        self.seed, self.buffer_size = (0 if seed is None else int(seed)), buffer_size

    def build(self, source: Stage, ctx: ReaderContext) -> Stage:
        return ShuffleStage(source, ctx, self)

    stage = ShuffleStage

    def describe(self) -> dict:
        return {"op": "shuffle", "seed": self.seed, "buffer_size": self.buffer_size}


class CountStage(Stage):
    """``take(n)`` (hand on the first ``n``) or ``skip(n)`` (drop them), per rank."""

    def __init__(self, source: Stage, ctx: ReaderContext, spec: "CountSpec") -> None:
        super().__init__(source, ctx)
        self.take = spec.op == "take"
        per_rank = max(ctx.readers // max(ctx.ranks, 1), 1)
        worker = ctx.reader % per_rank
        self.limit = spec.n // per_rank + (worker < spec.n % per_rank)
        self.count = 0

    def next(self) -> tuple[Any, Any]:
        if self.take:
            if self.count >= self.limit:
                raise StopIteration
            self.count += 1
            return self.source.next()
        while self.count < self.limit:
            self.source.next()
            self.count += 1
        return self.source.next()

    def get_state(self) -> dict:
        return {"count": self.count, "limit": self.limit}

    def reset(self, state: Optional[dict] = None) -> None:
        if state:
            self.count = int(state.get("count", 0))
            self.limit = int(state.get("limit", self.limit))
        else:
            self.count = 0

    @staticmethod
    def redistribute(states: list[dict], n: int) -> list[dict]:
        left = sum(max(int(s.get("limit", 0)) - int(s.get("count", 0)), 0) for s in states)
        return [{"count": 0, "limit": left // n + (i < left % n)} for i in range(n)]


class CountSpec:
    keeps_count = True  # per rank: every rank's readers share the same n alike

    def __init__(self, op: str, n: int) -> None:
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0:
            raise InvalidArgumentError(f"{op}(n={n!r}) must be an int >= 0")
        self.op, self.n = op, int(n)

    stage = CountStage

    def build(self, source: Stage, ctx: ReaderContext) -> Stage:
        return CountStage(source, ctx, self)

    def describe(self) -> dict:
        return {"op": self.op, "n": self.n}


class BatchStage(Stage):
    """``batch(batch_size, drop_last_batch)``: rows into HF's batched form, column -> list."""

    def __init__(self, source: Stage, ctx: ReaderContext, spec: "BatchSpec") -> None:
        super().__init__(source, ctx)
        self.spec = spec

    def next(self) -> tuple[Any, Any]:
        keys, rows = pull(self.source, self.spec.batch_size)
        if not keys or (len(keys) < self.spec.batch_size and self.spec.drop_last_batch):
            raise StopIteration
        if record.ON:
            with record.timed("collate"):
                return ("b", tuple(keys)), collate(rows)
        return ("b", tuple(keys)), collate(rows)

    def recreate(self, keys: list) -> list:
        return [collate(self.source.recreate(list(k[1]))) for k in keys]


def collate(rows: list[dict]) -> dict:
    """Rows as HF's batch: column -> list of the rows' values (``with_format("numpy")`` stacks them)."""
    return {c: [r[c] for r in rows] for c in rows[0]}


class BatchSpec:
    keeps_count = True  # one batch per batch_size items of a reader, on every reader alike

    def __init__(self, batch_size: int, drop_last_batch: bool) -> None:
        if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) or batch_size < 1:
            raise InvalidArgumentError(f"batch(batch_size={batch_size!r}) must be an int >= 1")
        self.batch_size, self.drop_last_batch = int(batch_size), bool(drop_last_batch)

    stage = BatchStage

    def build(self, source: Stage, ctx: ReaderContext) -> Stage:
        return BatchStage(source, ctx, self)

    def describe(self) -> dict:
        return {"op": "batch", "batch_size": self.batch_size, "drop_last_batch": self.drop_last_batch}


class RowStage(Stage):
    """A stateless function of each value (column operations, ``with_format``)."""

    def __init__(self, source: Stage, ctx: ReaderContext, spec: "RowSpec") -> None:
        super().__init__(source, ctx)
        self.fn = spec.fn

    def next(self) -> tuple[Any, Any]:
        k, v = self.source.next()
        return k, self.fn(v)

    def recreate(self, keys: list) -> list:
        return [self.fn(v) for v in self.source.recreate(keys)]


class RowSpec:
    keeps_count = True  # one value per value

    def __init__(self, desc: dict, fn) -> None:
        self.desc, self.fn = desc, fn

    stage = RowStage

    def build(self, source: Stage, ctx: ReaderContext) -> Stage:
        return RowStage(source, ctx, self)

    def describe(self) -> dict:
        return self.desc


def rename(mapping: dict) -> RowSpec:
    for old, new in mapping.items():
        if not isinstance(old, str) or not isinstance(new, str):
            raise InvalidArgumentError(f"rename_columns needs str -> str, got {old!r} -> {new!r}")

    def fn(row):
        missing = [c for c in mapping if c not in row]
        if missing:
            raise InvalidArgumentError(f"rename: columns {missing} are not in the rows (they have {list(row)})")
        return {mapping.get(c, c): v for c, v in row.items()}
    return RowSpec({"op": "rename", "mapping": dict(mapping)}, fn)


def select(columns: Sequence[str], keep: bool) -> RowSpec:
    if isinstance(columns, str):
        columns = [columns]
    cols = list(columns)

    def fn(row):
        missing = [c for c in cols if c not in row]
        if missing:
            raise InvalidArgumentError(f"{'select_columns' if keep else 'remove_columns'}: columns {missing} are "
                                       f"not in the rows (they have {list(row)})")
        if keep:
            return {c: row[c] for c in cols}
        return {c: v for c, v in row.items() if c not in cols}
    return RowSpec({"op": "select" if keep else "remove", "columns": cols}, fn)


def swap_plan(slots: np.ndarray, size: int) -> tuple[Callable, Callable]:
    """Putting new item ``j`` into slot ``slots[j]`` of a buffer of ``size``, one after another, each handing on
    what the slot held (a slot drawn again in the run hands on the new item an earlier draw put there), as two
    getters of ``buffer + new``: the buffer after, and the items handed on (``len(slots) >= 2``). The draws
    sorted by slot (stably) tell each draw's item and each slot's last new item."""
    order = np.argsort(slots, kind="stable")
    ranked = slots[order]
    again = ranked[1:] == ranked[:-1]  # the draw order[k + 1] finds what the draw order[k] put there
    source = slots.copy()
    source[order[1:][again]] = size + order[:-1][again]
    last = np.flatnonzero(np.append(~again, True))  # each slot's last draw, in slot order
    after = np.arange(size)
    after[ranked[last]] = size + order[last]
    return itemgetter(*after.tolist()), itemgetter(*source.tolist())


def swap_runs(buffer: list, new: list, slots: np.ndarray) -> tuple[list, list]:
    """``(buffer after, items handed on)`` of :func:`swap_plan`."""
    after, out = swap_plan(slots, len(buffer))
    both = buffer + new
    return list(after(both)), list(out(both))
