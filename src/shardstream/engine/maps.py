"""``map`` and ``filter``: a function over rows, one at a time or in batches (HF semantics).

A row is a dict of column -> value. ``batched=True`` hands the function a batch as a dict
of column -> list of ``batch_size`` values (fewer at the end of the reader's pass) and
expects the same form back. A map's returned columns update the row (``remove_columns``
are removed from the input first); a batched map may return another number of rows,
which then replace the input rows (their input columns go). ``input_columns`` passes
those columns as positional arguments instead of the row. A filter returns a bool (a
list of bools when batched). An ``async def`` function's coroutines are awaited, a group
of rows at a time (see :mod:`.awaiting`), for ``map`` and ``filter`` alike, as in HF.

A function that raises is re-raised as :class:`~shardstream.errors.TransformError` naming
the source sample (plan position, dataset, shard, row) and holding the original traceback,
in the process that consumes the data; ``skip_errors=True`` drops the failing rows (whole
batches, when batched) and counts them in the stage's state.

State: the keys of the rows of a batch not yet handed on (the batch is made again from
them on resume) and the counters. A batched map is assumed row-wise when it keeps the
number of rows: a row is made again from its own input alone.

With loader stats on, the function's seconds count as the ``transform`` stage, timed once
per group of rows (a batch, or :data:`_GROUP` rows of a row-at-a-time function), also in
the lookahead thread, where they overlap the stages after the map.
"""

from __future__ import annotations

import inspect
import traceback
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from itertools import compress
from operator import itemgetter
from time import perf_counter
from typing import Any, Callable, Optional, Sequence

from ..errors import InvalidArgumentError, TransformError
from ..stats import record
from .awaiting import Awaiter, is_async
from .describe import describe_callable
from .keys import decode_all, encode_all
from .stage import ReaderContext, Stage, deal, pull


def to_batch(rows: list[dict]) -> dict[str, list]:
    """Rows as HF's batched form: column -> list (columns of the first row)."""
    if not rows:
        return {}
    return {c: list(map(itemgetter(c), rows)) for c in rows[0]}


def to_rows(batch: dict, n: Optional[int] = None) -> list[dict]:
    cols = list(batch)
    if n is None:
        n = len(batch[cols[0]]) if cols else 0
    values = [batch[c] for c in cols]
    return [dict(zip(cols, vals)) for vals in zip(*values)] if cols else [{} for _ in range(n)]


def _rows_in(batch: Any, where: str) -> int:
    if not isinstance(batch, dict):
        raise InvalidArgumentError(f"{where} must return a dict of column -> list of values, got {type(batch).__name__}")
    lengths = {len(v) for v in batch.values()}
    if len(lengths) > 1:
        raise InvalidArgumentError(f"{where} returned columns of different lengths "
                                   f"({ {c: len(v) for c, v in batch.items()} }); every column needs one value per row")
    return lengths.pop() if lengths else 0


class _Applies(Stage):
    """What map and filter share: calling the function, errors with the sample's place, batches.

    Rows are pulled in groups (``batch_size`` when batched, else :data:`_GROUP`); a group's rows
    not yet handed on are the state, as the group's input keys and how many were handed on."""

    def __init__(self, source: Stage, ctx: ReaderContext, spec: "MapSpec") -> None:
        super().__init__(source, ctx)
        self.spec = spec
        self.fn = spec.function
        self.pull = spec.batch_size if spec.batched else _GROUP
        self.errors = 0
        self.out_keys: list = []  # the current group's rows still to hand on (reversed)
        self.out_rows: list = []
        self.group: list = []  # the current group's input keys (what makes it again)
        self.cut = 0  # rows of the current group already handed on
        self.later: list = []  # more partial groups, given to this reader by a resume on another world
        self.ahead: deque = deque()  # (input keys, future of (out keys, out rows)) of groups pulled ahead
        self.pool: Optional[ThreadPoolExecutor] = None
        self.awaiter: Optional[Awaiter] = None

    def call(self, arg: Any, keys: list) -> Any:
        spec = self.spec
        try:
            if spec.input_columns is not None:
                return self.fn(*[arg[c] for c in spec.input_columns])
            return self.fn(arg)
        except Exception as exc:
            return self.failed(exc, arg, keys)

    def failed(self, exc: Exception, arg: Any, keys: list) -> Any:
        """What the function raising ``exc`` on ``arg`` gives: :data:`_SKIPPED` with ``skip_errors``, else a
        :class:`TransformError` naming the row (its traceback kept)."""
        if self.spec.skip_errors:
            return _SKIPPED
        hint = ""
        if isinstance(exc, KeyError) and isinstance(arg, dict):
            hint = f"\n(column {exc} is missing? the rows have the columns {list(arg)})"
        raise self._error(keys, "".join(traceback.format_exception(exc)).rstrip() + hint) from exc

    def results(self, args: list, keys: list, each: bool) -> list:
        """The function's result on each of ``args``: rows (``each``: ``keys`` holds each row's key), or one
        batch (``keys``: its rows' keys); an async function's coroutines are awaited together (see
        :mod:`.awaiting`)."""
        def keys_of(i: int) -> list:
            return [keys[i]] if each else keys

        out = self._plain_calls(args, keys_of)
        if out is None:
            out = [self.call(a, keys_of(i)) for i, a in enumerate(args)]
        if out and (self.spec.is_async or inspect.isawaitable(out[0]) or inspect.isawaitable(out[-1])):
            at = [i for i, v in enumerate(out) if inspect.isawaitable(v)]
            if self.awaiter is None:
                self.awaiter = Awaiter(self.spec.op)
            for i, (ok, v) in zip(at, self.awaiter.outcomes([out[i] for i in at])):
                out[i] = v if ok else self.failed(v, args[i], keys_of(i))
        return out

    def _plain_calls(self, args: list, keys_of: Callable[[int], list]) -> Optional[list]:
        """The function called on each of ``args`` in one loop (None when it takes ``input_columns``): a
        failure is handled as :meth:`call` does, and the loop goes on after it."""
        if self.spec.input_columns is not None:
            return None
        fn, out, i = self.fn, [], 0
        while i < len(args):
            try:
                out.extend(map(fn, args[i:] if i else args))  # keeps the results made before a failure
            except Exception as exc:
                i = len(out)
                out.append(self.failed(exc, args[i], keys_of(i)))
                i += 1
            else:
                break
        return out

    def _error(self, keys: list, what: str) -> TransformError:
        spec = self.spec
        where = self.locate(keys[0]) if keys else "an empty batch"
        span = f" (the batch of {len(keys)} rows starting at {where})" if spec.batched else f" ({where})"
        return TransformError(f"the function given to {spec.op} ({describe_callable(self.fn)['callable']}) raised "
                              f"on {'a batch' if spec.batched else 'a row'}{span}:\n{what}")

    def pull_batch(self) -> tuple[list, list]:
        return pull(self.source, self.pull)

    def apply(self, keys: list, rows: list) -> tuple[list, list]:
        """:meth:`process` a group, its seconds counted as ``transform`` when loader stats are on."""
        if not record.ON:
            return self.process(keys, rows)
        t0 = perf_counter()
        try:
            return self.process(keys, rows)
        finally:
            record.add_time("transform", perf_counter() - t0)

    def start(self, keys: list, rows: list, cut: int = 0) -> None:
        self.adopt(keys, *self.apply(keys, rows), cut)

    def adopt(self, keys: list, out_keys: list, out_rows: list, cut: int = 0) -> None:
        """Make the group of input ``keys`` (made into ``out_keys``/``out_rows``) the current one."""
        self.group, self.cut = keys, cut
        self.out_keys, self.out_rows = out_keys[cut:][::-1], out_rows[cut:][::-1]

    def get_state(self) -> dict:
        state = {"errors": self.errors}
        if not self.out_keys:
            current = []
        elif _made(self.out_keys[0]):  # rows made from the whole group: the group makes them again
            current = [[encode_all(self.group), self.cut]]
        else:  # one row per input row: the rows still to hand on are made again from their own inputs
            current = [[encode_all(self.out_keys[::-1]), 0]]
        groups = current + self.later + [[encode_all(keys), 0] for keys, _ in self.ahead]
        if groups:
            state["groups"] = groups
        return state

    def reset(self, state: Optional[dict] = None) -> None:
        self.out_keys, self.out_rows, self.group, self.cut, self.later = [], [], [], 0, []
        self.ahead.clear()
        self.errors = 0 if not state else int(state.get("errors", 0))
        self.later = [list(g) for g in (state or {}).get("groups", [])]
        self._next_group()

    def _next_group(self) -> bool:
        """Make the first of the groups a resume handed over current; False if there is none."""
        while self.later:
            keys, cut = self.later.pop(0)
            keys = decode_all(keys)
            self.start(keys, self.source.recreate(keys), int(cut))
            if self.out_keys:
                return True
        return False

    def _refill(self) -> None:
        """Make the next group that hands on rows current (StopIteration at the end of the pass)."""
        while not self.out_keys:
            if self.later and self._next_group():
                break
            if self.ahead:
                keys, made = self.ahead.popleft()
                self.adopt(keys, *made.result())
            else:
                keys, rows = self.pull_batch()
                if not keys:
                    raise StopIteration
                self.start(keys, rows)
            self._look_ahead()

    def next(self) -> tuple[Any, Any]:
        if not self.out_keys:
            self._refill()
        self.cut += 1
        return self.out_keys.pop(), self.out_rows.pop()

    def next_run(self, n: int) -> tuple[list, list]:
        """The current group's next rows, up to ``n`` (a group of rows is handed on as runs)."""
        out_keys, out_rows = self.out_keys, self.out_rows
        if not out_keys:
            try:
                self._refill()
            except StopIteration:
                return [], []
            out_keys, out_rows = self.out_keys, self.out_rows
        k = min(n, len(out_keys))
        keys, rows = out_keys[-k:], out_rows[-k:]
        del out_keys[-k:], out_rows[-k:]
        self.cut += k
        keys.reverse()
        rows.reverse()
        return keys, rows

    def give_back(self, keys: list, rows: list) -> None:
        """Take back the last rows of the run :meth:`next_run` handed on (the consumer did not use them):
        they are handed on again, and the state counts them as not handed on."""
        self.out_keys.extend(reversed(keys))
        self.out_rows.extend(reversed(rows))
        self.cut -= len(keys)

    def _look_ahead(self) -> None:
        """Pull the next groups now and have a thread apply the function to them while the current group
        is handed on (for functions that release the GIL, such as tokenizers)."""
        while len(self.ahead) < self.spec.lookahead:
            keys, rows = self.pull_batch()
            if not keys:
                return
            if self.pool is None:
                self.pool = ThreadPoolExecutor(1, thread_name_prefix="shardstream-map")
            self.ahead.append((keys, self.pool.submit(self.apply, keys, rows)))

    def close(self) -> None:
        pool, self.pool = self.pool, None
        self.ahead.clear()
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)
        if self.awaiter is not None:
            self.awaiter.close()
        super().close()

    @staticmethod
    def redistribute(states: list[dict], n: int) -> list[dict]:
        # each partial group goes whole to one new reader, which finishes it before pulling more
        out = [{"errors": 0} for _ in range(n)]
        out[0]["errors"] = sum(int(s.get("errors", 0)) for s in states)
        groups = [g for s in states for g in s.get("groups", [])]
        for i, share in enumerate(deal(groups, n)):
            if share:
                out[i]["groups"] = share
        return out

    @classmethod
    def held_keys(cls, state: dict) -> list:
        """The input keys of the rows not handed on (one row per input: a map that keeps the count)."""
        return [k for keys, cut in state.get("groups", []) for k in decode_all(keys)[int(cut):]]


_GROUP = 32  # rows a row-at-a-time function pulls at once


def _made(key) -> bool:
    """Whether ``key`` names a row a batched map made from its whole group (not from one input row)."""
    return type(key) is tuple and len(key) == 3 and key[0] == "m"
_SKIPPED = object()


class MapStage(_Applies):
    name = "map"

    def process(self, keys: list, rows: list) -> tuple[list, list]:
        spec = self.spec
        if not spec.batched:
            out = []
            for k, row, made in zip(keys, rows, self.results(rows, keys, True)):
                if made is _SKIPPED:
                    self.errors += 1
                    continue
                out.append((k, spec.merge(row, made)))
            return [k for k, _ in out], [r for _, r in out]
        made = self.results([to_batch(rows)], keys, False)[0]
        if made is _SKIPPED:
            self.errors += len(keys)
            return [], []
        n = _rows_in(made, f"the function given to map ({describe_callable(self.fn)['callable']})")
        if n == len(rows):
            return list(keys), spec.merge_columns(rows, made)
        group = tuple(keys)
        return [("m", group, i) for i in range(n)], to_rows(made, n)

    def recreate(self, keys: list) -> list:
        plain = [k for k in keys if not (isinstance(k, tuple) and k[0] == "m")]
        made: dict = {}
        if plain:
            inputs = self.source.recreate(plain)
            _, rows = self.apply(plain, inputs) if self.spec.batched else (None, [
                self.spec.merge(r, m) for r, m in zip(inputs, self.results(inputs, plain, True))])
            made.update(zip(plain, rows))
        for group in {k[1] for k in keys if isinstance(k, tuple) and k[0] == "m"}:
            inputs = list(group)
            out_keys, rows = self.apply(inputs, self.source.recreate(inputs))
            made.update(zip(out_keys, rows))
        return [made[k] for k in keys]


class FilterStage(_Applies):
    name = "filter"

    def __init__(self, source: Stage, ctx: ReaderContext, spec: "MapSpec") -> None:
        super().__init__(source, ctx, spec)
        self.kept = self.dropped = 0

    def process(self, keys: list, rows: list) -> tuple[list, list]:
        if self.spec.batched:
            verdicts = self.results([to_batch(rows)], keys, False)[0]
            if verdicts is _SKIPPED:
                self.errors += len(keys)
                return [], []
            verdicts = list(verdicts)
            if len(verdicts) != len(rows):
                raise InvalidArgumentError(f"a batched filter function must return one bool per row: got "
                                           f"{len(verdicts)} for {len(rows)} rows")
        else:
            verdicts = self.results(rows, keys, True)
            if self.spec.skip_errors:
                skipped = sum(v is _SKIPPED for v in verdicts)
                if skipped:
                    self.errors += skipped
                    verdicts = [False if v is _SKIPPED else v for v in verdicts]
        return list(compress(keys, verdicts)), list(compress(rows, verdicts))

    def adopt(self, keys: list, out_keys: list, out_rows: list, cut: int = 0) -> None:
        super().adopt(keys, out_keys, out_rows, cut)
        if not cut:
            self.kept += len(self.out_keys)
            self.dropped += len(keys) - len(self.out_keys)

    def get_state(self) -> dict:
        return super().get_state() | {"kept": self.kept, "dropped": self.dropped}

    def reset(self, state: Optional[dict] = None) -> None:
        super().reset(state)
        self.kept = 0 if not state else int(state.get("kept", 0))
        self.dropped = 0 if not state else int(state.get("dropped", 0))

    def recreate(self, keys: list) -> list:
        return self.source.recreate(keys)  # rows it handed on passed it: they are the source's rows


class MapSpec:
    """A ``map`` or ``filter`` of a chain (see the module docstring)."""

    def __init__(self, op: str, function: Callable, batched: bool, batch_size: Optional[int],
                 input_columns: Optional[Sequence[str]], remove_columns: Optional[Sequence[str]] = None,
                 skip_errors: bool = False, lookahead: Optional[int] = None) -> None:
        if function is None and op == "map":
            function = _identity
        if not callable(function):
            raise InvalidArgumentError(f"{op}(function={function!r}): the function must be callable")
        if inspect.isasyncgenfunction(function):
            raise InvalidArgumentError(f"{op}(function={function!r}) is an async generator (async def with yield); "
                                       f"give a function, or an async def function that returns its result")
        if batched and (batch_size is None or batch_size <= 0):
            raise InvalidArgumentError(f"{op}(batched=True) needs batch_size >= 1 on a stream (got {batch_size!r})")
        if isinstance(input_columns, str):
            input_columns = [input_columns]
        if isinstance(remove_columns, str):
            remove_columns = [remove_columns]
        self.op, self.function, self.batched = op, function, bool(batched)
        self.is_async = is_async(function)
        self.batch_size = int(batch_size) if batched else 1
        self.input_columns = None if input_columns is None else list(input_columns)
        self.remove_columns = tuple(remove_columns or ())
        self.skip_errors = bool(skip_errors)
        if lookahead is None:  # functions that release the GIL (tokenizers) run a group ahead in a thread
            lookahead = 1 if self.batched and getattr(function, "releases_gil", False) else 0
        if isinstance(lookahead, bool) or not isinstance(lookahead, int) or lookahead < 0:
            raise InvalidArgumentError(f"{op}(lookahead={lookahead!r}) must be an int >= 0")
        self.lookahead = lookahead
        self.stage = MapStage if op == "map" else FilterStage

    @property
    def keeps_count(self) -> bool:
        """One row out per row in: a row-at-a-time ``map`` that skips no errors (a batched function may
        return another number of rows; a filter drops rows)."""
        return self.op == "map" and not self.batched and not self.skip_errors

    def merge(self, row: dict, made: Any) -> dict:
        if made is None:
            made = {}
        if not isinstance(made, dict):
            raise InvalidArgumentError(f"the function given to map must return a dict (or None), "
                                       f"got {type(made).__name__}")
        if self.remove_columns:
            out = {c: v for c, v in row.items() if c not in self.remove_columns}
        else:
            out = dict(row)
        out.update(made)
        return out

    def merge_columns(self, rows: list[dict], made: dict) -> list[dict]:
        """:meth:`merge` of each row with its values of the batch ``made`` (column -> one value per row)."""
        if self.remove_columns:
            gone = self.remove_columns
            out = [{c: v for c, v in row.items() if c not in gone} for row in rows]
        else:  # a copy with the keys set after is {**row, name: value, ...}, made faster
            out = list(map(dict, rows))
        if len(made) == 1:
            (name, values), = made.items()
            for row, v in zip(out, values):
                row[name] = v
            return out
        names = list(made)
        for row, vs in zip(out, zip(*made.values())):
            row.update(zip(names, vs))
        return out

    def build(self, source: Stage, ctx: ReaderContext) -> Stage:
        return self.stage(source, ctx, self)

    def describe(self) -> dict:
        return {"op": self.op, "function": describe_callable(self.function), "batched": self.batched,
                "batch_size": self.batch_size, "input_columns": self.input_columns,
                "remove_columns": list(self.remove_columns), "skip_errors": self.skip_errors}


def _identity(row):
    return None
