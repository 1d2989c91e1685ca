"""The pack stage: :class:`~.pack.Packer` in a processing chain, resumable exactly on any world.

Each item it emits is one packed row keyed ``("p", ((key, start, stop), ...))``: the pieces it
was made of (see :mod:`shardstream.engine.keys`). Its state is what the packer holds, as keys:

``{"version": 1, "bins": [[[key, start, stop], ...], ...], "pending": [[key, start, stop], ...],
"tokens": int, "slots": int, "packs": int, "dropped": int}``

``bins`` are the open bins' pieces; ``pending`` the pieces read but not placed yet (the remainder
of a document that filled a bin, or a document waiting for the bin it displaced to be emitted).
On resume the stage asks its source to make the documents of those keys again and slices them
the same way, so the rows that follow are the ones an uninterrupted run would have made.

With loader stats on, packing counts as the ``transform`` stage (the stages before it left out),
timed on one packed row in :data:`SAMPLE` and scaled: timing every row costs a clock reading per
document, about a tenth of the packer's own time.
"""

from __future__ import annotations

from typing import Any, Optional

from ..errors import IncompatibleStateError, InvalidArgumentError
from ..engine.keys import decode, encode
from ..engine.stage import OwnTime, ReaderContext, Stage, deal
from ..stats import record
from .pack import COUNTERS, Pack, Packer

STATE_VERSION = 1
SAMPLE = 16  # with loader stats on, one packed row in SAMPLE is timed


class PackStage(Stage):
    """Packs the rows of ``source`` as ``pack`` says; ``efficiency`` is real tokens over slots so far."""

    name = "pack"

    def __init__(self, source: Stage, ctx: ReaderContext, pack: Pack) -> None:
        if not isinstance(pack, Pack):
            raise InvalidArgumentError(f"PackStage takes a Pack of options, not {type(pack).__name__}; "
                                       "for example PackStage(source, ctx, Pack(seq_len=1024))")
        super().__init__(source, ctx)
        self.pack = pack
        self._packer = Packer(pack, self.locate)
        self._ended = False
        self._calls = 0  # calls of next() with loader stats on (one in SAMPLE is timed)

    @property
    def efficiency(self) -> float:
        """Real tokens over the slots of the rows emitted so far (carried across resumes)."""
        return self._packer.efficiency

    @property
    def stats(self) -> dict:
        """The counters: ``tokens`` and ``slots`` of the rows emitted, ``packs``, tokens ``dropped``."""
        return {name: getattr(self._packer, name) for name in COUNTERS}

    def next(self) -> tuple[Any, dict]:
        if not record.ON:
            return self._pack(self.source.next)
        self._calls += 1
        if self._calls % SAMPLE:
            return self._pack(self.source.next)
        clock = OwnTime(self.source.next)
        try:
            return self._pack(clock.next)
        finally:
            clock.done("transform", SAMPLE)

    def _pack(self, source_next) -> tuple[Any, dict]:
        packer = self._packer
        while True:
            out = packer.next_pack(final=self._ended)
            if out is not None:
                return out
            if self._ended:
                raise StopIteration
            try:
                key, row = source_next()
            except StopIteration:
                self._ended = True
                continue
            packer.add(key, row)

    def get_state(self) -> dict:
        state = self._packer.state()
        return {"version": STATE_VERSION,
                "bins": [[[encode(k), s, e] for k, s, e in b] for b in state["bins"]],
                "pending": [[encode(k), s, e] for k, s, e in state["pending"]],
                **{name: state[name] for name in COUNTERS}}

    def reset(self, state: Optional[dict] = None) -> None:
        self._packer = Packer(self.pack, self.locate)
        self._ended = False
        if not state:
            return
        held = _decode_state(state)
        keys = Packer.keys(held)
        rows = self.source.recreate(keys) if keys else []
        self._packer.restore(held, dict(zip(keys, rows)))

    def recreate(self, keys: list) -> list:
        layouts = [_pieces_of(key) for key in keys]
        inner = list(dict.fromkeys(k for pieces in layouts for k, _, _ in pieces))
        rows = self.source.recreate(inner) if inner else []
        cols = {key: self._packer.columns(key, row) for key, row in zip(inner, rows)}
        return [self._packer.build([self._packer.piece(p, cols) for p in pieces]) for pieces in layouts]

    def describe(self) -> dict:
        return {"stage": self.name, **self.pack.describe()}

    @staticmethod
    def redistribute(states: list[dict], n: int) -> list[dict]:
        """Pool the open bins and pending pieces of ``states`` and deal each among ``n`` readers; the
        counters go to reader 0. A reader dealt more bins than its strategy keeps open places the
        extra bins' pieces again."""
        states = [s or {} for s in states]
        for s in states:
            _check_version(s)
        bins = [b for s in states for b in s.get("bins", [])]
        pending = [p for s in states for p in s.get("pending", [])]
        totals = {name: sum(s.get(name, 0) for s in states) for name in COUNTERS}
        return [{"version": STATE_VERSION, "bins": b, "pending": p,
                 **{name: totals[name] if i == 0 else 0 for name in COUNTERS}}
                for i, (b, p) in enumerate(zip(deal(bins, n), deal(pending, n)))]


def _check_version(state: dict) -> None:
    if not isinstance(state, dict) or (state and state.get("version") != STATE_VERSION):
        raise IncompatibleStateError(f"the pack stage's state {state!r:.200} is not a version {STATE_VERSION} "
                                     "pack state; resume with the version of shardstream that saved it")


def _decode_piece(obj: Any) -> tuple:
    if not isinstance(obj, list) or len(obj) != 3:
        raise IncompatibleStateError(f"the pack stage's state holds {obj!r} where a piece [key, start, stop] belongs")
    return decode(obj[0]), obj[1], obj[2]


def _decode_state(state: dict) -> dict:
    _check_version(state)
    bins, pending = state.get("bins", []), state.get("pending", [])
    if not isinstance(bins, list) or not all(isinstance(b, list) for b in bins) or not isinstance(pending, list):
        raise IncompatibleStateError("the pack stage's state holds bins or pending pieces that are not lists; "
                                     "was it edited by hand?")
    return {"bins": [[_decode_piece(p) for p in b] for b in bins],
            "pending": [_decode_piece(p) for p in pending],
            **{name: state.get(name, 0) for name in COUNTERS}}


def _pieces_of(key: Any) -> tuple:
    if not (isinstance(key, tuple) and len(key) == 2 and key[0] == "p" and isinstance(key[1], tuple)):
        raise IncompatibleStateError(f"{key!r} is not the key of a packed row ('p', ((key, start, stop), ...))")
    return key[1]


class PackSpec:
    """``pack`` as an operation of a processing chain: builds a :class:`PackStage` for each reader."""

    stage = PackStage
    state_version = STATE_VERSION

    def __init__(self, pack: Pack) -> None:
        self.pack = pack

    def build(self, source: Stage, ctx: ReaderContext) -> PackStage:
        return PackStage(source, ctx, self.pack)

    def describe(self) -> dict:
        return {"op": "pack", **self.pack.describe()}
