"""``IterableDataset``: lazily chained operations over a dataset's plan, HF names, exact resume.

Every operation returns a new dataset; nothing runs until it is iterated. Iteration reads
the root dataset's plan (its order: shuffled, mixed, the same on every world) as this
process's share (see :mod:`.source`), through the chain's stages (:mod:`.maps`, :mod:`.ops`,
``pack``), and ``state_dict()`` says where the chain is after the items handed out: plan
positions and what the stages hold, as keys (see :mod:`.run`). A state loads on any world.
"""

from __future__ import annotations

import json
from typing import Any, Callable, Iterator, Optional, Sequence

import xxhash

from ..errors import IncompatibleStateError, InvalidArgumentError
from ..runtime.torchenv import register_iterable
from ..format.files import Piece
from ..engine.agree import Agreed, PassEnd, agreement_for
from ..engine.maps import MapSpec
from ..engine.ops import BatchSpec, CountSpec, ShuffleSpec, rename, select
from ..engine.readahead import Prefetched
from ..engine.run import Run, plan_pass, setup
from ..engine.state import boundary_state, operations_of, read_chain_state

FORMATS = (None, "python", "numpy", "np", "torch", "pt", "jax")


class IterableDataset:
    """A chain of operations over ``root`` (a :class:`~shardstream.StreamingDataset`); see the module
    docstring. Made by the root's own methods (``ds.map(...)``, ``ds.shuffle(buffer_size=...)``)."""

    def __init__(self, root, specs: Sequence[Any] = (), fmt: Optional[str] = None, prefetch: int = 0) -> None:
        self.root = root
        self.specs = tuple(specs)
        self.format = fmt
        self._prefetch = prefetch
        self._next_epoch = 0
        self._loaded: Optional[dict] = None
        self._active = None  # (setup, run or prefetch producer, reader)
        self._agreed: Optional[PassEnd] = None  # the pass in progress, when its ranks agree where it ends
        self._fingerprint: Optional[str] = None

    def _with(self, spec=None, **changes) -> "IterableDataset":
        out = IterableDataset(self.root, self.specs + ((spec,) if spec is not None else ()),
                              changes.get("fmt", self.format), changes.get("prefetch", self._prefetch))
        return out

    # -- operations ------------------------------------------------------------------------------
    def apply(self, spec) -> "IterableDataset":
        """This chain with one more operation: ``spec`` says what it does (``describe()``, for the fingerprint)
        and builds its stage for each reader (``build(source, ctx)``); its class names the stage (``stage``, for
        ``redistribute``). How every built-in operation is added, and how a new one is (see
        :func:`register_operation` and docs/architecture.md, "Adding an operation")."""
        missing = [name for name in ("build", "describe", "stage") if not hasattr(spec, name)]
        if missing:
            raise InvalidArgumentError(f"apply({type(spec).__name__}(...)): an operation's spec needs "
                                       f"{missing}; see shardstream.engine.stage for the contract")
        return self._with(spec)

    def map(self, function: Optional[Callable] = None, with_indices: bool = False,
            input_columns: Optional[Sequence[str]] = None, batched: bool = False, batch_size: Optional[int] = 1000,
            drop_last_batch: bool = False, remove_columns: Optional[Sequence[str]] = None,
            skip_errors: bool = False, lookahead: Optional[int] = None, **kwargs) -> "IterableDataset":
        """Apply ``function`` to each row, or to batches of ``batch_size`` rows (see :mod:`.maps`).

        ``lookahead``: batches applied ahead in a background thread while the current one is handed on
        (default: 1 for functions that release the GIL, such as :class:`~shardstream.Tokenize`, else 0)."""
        _refuse(kwargs, "map", {"fn_kwargs", "features"})
        if with_indices or drop_last_batch:
            raise InvalidArgumentError("map(with_indices=True / drop_last_batch=True) is not supported on a stream: "
                                       "rows have no global index here; add one to the data if needed")
        return self._with(MapSpec("map", function, batched, batch_size, input_columns, remove_columns, skip_errors,
                                  lookahead))

    def filter(self, function: Callable, with_indices: bool = False, input_columns: Optional[Sequence[str]] = None,
               batched: bool = False, batch_size: Optional[int] = 1000, skip_errors: bool = False,
               **kwargs) -> "IterableDataset":
        """Keep the rows for which ``function`` is true (see :mod:`.maps`)."""
        _refuse(kwargs, "filter", {"fn_kwargs"})
        if with_indices:
            raise InvalidArgumentError("filter(with_indices=True) is not supported on a stream")
        return self._with(MapSpec("filter", function, batched, batch_size, input_columns, None, skip_errors))

    def shuffle(self, seed: Optional[int] = None, buffer_size: int = 1000, generator=None) -> "IterableDataset":
        """HF's shuffle buffer (see :mod:`.ops`); ``seed`` None: 0, so runs repeat (draws are per reader)."""
        if generator is not None:
            raise InvalidArgumentError("shuffle(generator=...) is not supported; pass seed=")
        return self._with(ShuffleSpec(seed, buffer_size))

    def take(self, n: int) -> "IterableDataset":
        """The first ``n`` items (per rank)."""
        return self._with(CountSpec("take", n))

    def skip(self, n: int) -> "IterableDataset":
        """All but the first ``n`` items (per rank)."""
        return self._with(CountSpec("skip", n))

    def batch(self, batch_size: int, drop_last_batch: bool = False) -> "IterableDataset":
        """Rows grouped ``batch_size`` at a time: column -> list (``with_format("numpy")`` stacks them)."""
        return self._with(BatchSpec(batch_size, drop_last_batch))

    def rename_column(self, original_column_name: str, new_column_name: str) -> "IterableDataset":
        return self._with(rename({original_column_name: new_column_name}))

    def rename_columns(self, column_mapping: dict) -> "IterableDataset":
        return self._with(rename(dict(column_mapping)))

    def select_columns(self, column_names) -> "IterableDataset":
        return self._with(select(column_names, keep=True))

    def remove_columns(self, column_names) -> "IterableDataset":
        return self._with(select(column_names, keep=False))

    def pack(self, seq_len: int, **kwargs) -> "IterableDataset":
        """Pack token rows into fixed ``seq_len`` rows (see :class:`shardstream.text.Pack`)."""
        from ..text.pack import Pack
        from ..text.packstage import PackSpec

        pack = seq_len if isinstance(seq_len, Pack) else Pack(seq_len, **kwargs)
        return self._with(PackSpec(pack))

    def with_format(self, type: Optional[str] = None) -> "IterableDataset":
        """Values as ``"numpy"`` arrays, ``"torch"`` tensors or ``"jax"`` arrays (None: as made)."""
        if type not in FORMATS:
            raise InvalidArgumentError(f"with_format({type!r}): choose one of {[f for f in FORMATS if f]} or None")
        return self._with(fmt={"np": "numpy", "pt": "torch", "python": None}.get(type, type))

    def prefetch(self, n: int) -> "IterableDataset":
        """Make ``n`` items ahead in a background thread (the state still counts only what was consumed)."""
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise InvalidArgumentError(f"prefetch({n!r}) needs an int >= 0")
        return self._with(prefetch=n)

    def iter(self, batch_size: int, drop_last_batch: bool = False) -> Iterator[Any]:
        """Iterate batches of ``batch_size`` rows (HF's ``IterableDataset.iter``)."""
        return iter(self.batch(batch_size, drop_last_batch))

    def cache(self, output: str, **kwargs):
        """Write this chain's rows once to MDS at ``output`` (a directory or any fsspec URL) with its
        fingerprint, and return a StreamingDataset over them; a later call with the same source and
        operations reuses them (see :func:`~shardstream.dataset.cache.cache_to_mds`)."""
        from .cache import cache_to_mds

        return cache_to_mds(self, output, **kwargs)

    # -- iteration -------------------------------------------------------------------------------
    def _convert(self) -> Callable[[Any], Any]:
        if self.format is None:
            return _same
        from ..runtime.tensors import converter, to_numpy

        return to_numpy if self.format == "numpy" else converter(self.format)

    def __iter__(self) -> Iterator[Any]:
        return self.run_pass(self.take_ticket())

    @property
    def ticket(self) -> tuple:
        """The pass the next iteration runs: ``(next epoch, loaded state or None)``; it changes exactly when
        that pass changes (an iteration, :meth:`set_epoch`, :meth:`load_state_dict`)."""
        return self._next_epoch, self._loaded

    def take_ticket(self) -> tuple:
        """:attr:`ticket`, taken by whoever runs that pass: a loaded state is then forgotten here."""
        ticket = self.ticket
        self._loaded = None
        return ticket

    def run_stamped(self, ticket: tuple, stamp: Callable[[Any, int, dict], Any] = lambda *s: s) -> Iterator[Any]:
        """The items of the pass ``ticket`` names (see :meth:`run_pass`, without agreeing between ranks), each
        as ``stamp(item, reader, that reader's state after it)``: what a loader running the chain in its workers
        records (``StreamingDataLoader`` over a chain, which agrees for its workers)."""
        it = self.run_pass(ticket, agree=False)
        _, run, reader = self._active
        state = run.state
        for item in it:
            yield stamp(item, reader, state())

    def run_pass(self, ticket: tuple, meter=None, agree: bool = True) -> Iterator[Any]:
        """Run the pass ``ticket`` = ``(next epoch, loaded state)`` names, as this process's reader;
        ``meter``: the prefetch thread stamps each item with its loader stats (see :mod:`.prefetch`).
        ``agree``: a chain of batches on several ranks ends its pass on every rank at the same step (see
        :mod:`.agree`); False where a loader agrees for it (``StreamingDataLoader`` over a chain)."""
        self.close()
        world = self.root.detect_world()
        made = setup(self.root, self.specs, world, *ticket)
        reader = made.reader_for(world)
        self._next_epoch = made.epoch + 1
        run = Run(self.root, self.specs, made, reader)
        convert = self._convert()
        if self._prefetch:
            it = Prefetched(run, self._prefetch, convert, meter)
            self._active = (made, it.producer, reader)  # not the iterator: dropping it stops the thread
        else:
            self._active = (made, run, reader)
            it = _items(run, convert)
        agreement = agreement_for(made, world, self.root.world is not None) if agree and self.batched else None
        if agreement is None:
            return it
        agreed = Agreed(it, agreement)
        self._agreed = agreed.end  # not the iterator either
        return agreed

    def take_pass(self, world=None):
        """Take the pass the next iteration would run (the next epoch, or the state loaded) for a loader that runs
        it in its own thread and counts what its loop consumed (:class:`.chainpass.ChainPass`); the chain then
        stands after that pass. ``world``: this process's place (default: the root's)."""
        from .chainpass import ChainPass

        self.close()
        explicit = world is not None or self.root.world is not None
        world = world if world is not None else self.root.detect_world()
        ticket, self._loaded = (self._next_epoch, self._loaded), None
        made = setup(self.root, self.specs, world, *ticket)
        self._next_epoch = made.epoch + 1
        return ChainPass(self.root, self.specs, made, world, fingerprint=self.fingerprint, convert=self._convert(),
                         agree=self.batched, explicit=explicit)

    @property
    def prefetch_depth(self) -> int:
        """Items made ahead in a background thread (``prefetch(n)``; 0: none)."""
        return self._prefetch

    @property
    def batched(self) -> bool:
        """Whether the chain hands on batches (it has a ``batch``): one training step per item."""
        return any(isinstance(spec, BatchSpec) for spec in self.specs)

    def close(self) -> None:
        """Stop the pass in progress (its threads and pins)."""
        if self._active is not None:
            self._active[1].close()
            self._active = None
        self._agreed = None

    def set_epoch(self, epoch: int) -> None:
        """Make the next iteration run ``epoch`` from its start."""
        if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 0:
            raise InvalidArgumentError(f"set_epoch({epoch!r}) needs an int >= 0")
        self.close()
        self._next_epoch, self._loaded = epoch, None

    # -- state -----------------------------------------------------------------------------------
    def fingerprint(self) -> str:
        """A digest of the source (its files' names, sizes and versions or digests, the order settings of
        its plan) and of every operation: what a state and a cache belong to."""
        if self._fingerprint is None:
            desc = {"source": source_identity(self.root), "ops": [s.describe() for s in self.specs]}
            self._fingerprint = xxhash.xxh64(json.dumps(desc, sort_keys=True, default=str).encode()).hexdigest()
        return self._fingerprint

    def operations(self) -> list[dict]:
        """Each operation's name and state version, as the chain's state records them."""
        return operations_of(self.specs)

    def state_dict(self) -> dict:
        """A plain-JSON state that resumes right after the items this process handed out.

        With several ranks each rank's state holds its own readers: save every rank's and load the
        list of them (``load_state_dict([s0, s1, ...])``) on any world."""
        fp = self.fingerprint()
        if self._agreed is not None and self._agreed.ended:  # every rank ended the pass here
            return boundary_state(fp, self._active[0].epoch, self.operations(), complete=True)
        if self._active is not None:
            made, it, reader = self._active
            state = made.full_state({reader: it.state()}, fp, self.operations())
            if made.readers == 1 and getattr(it, "done", False):
                return boundary_state(fp, made.epoch, self.operations(), complete=True)
            return state
        if self._loaded is not None:
            return self._loaded
        return boundary_state(fp, self._next_epoch, self.operations())

    def load_state_dict(self, state) -> None:
        """Resume from :meth:`state_dict` (or the list of every rank's) at the next iteration, on any world."""
        self.close()
        merged = read_chain_state(state, self.operations())
        if merged["fingerprint"] != self.fingerprint():
            raise IncompatibleStateError(
                "the state was saved by another pipeline (its source or operations differ: fingerprint "
                f"{merged['fingerprint']} vs {self.fingerprint()}); resume with the same chain of operations")
        if "grid" in merged:
            n = int(merged["grid"]["readers"])
            missing = sorted(set(range(n)) - {int(j) for j in merged["readers"]})
            if missing:
                raise IncompatibleStateError(
                    f"the state holds {n - len(missing)} of its {n} readers (missing {missing[:8]}); with several "
                    "ranks save every rank's state_dict() and load the list of them")
        self._loaded = merged
        self._next_epoch = int(merged["epoch"])

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state["_active"] = None  # a pass in progress stays with its process
        return state

    def __repr__(self) -> str:
        ops = ", ".join(s.describe().get("op", type(s).__name__) for s in self.specs)
        return f"IterableDataset(root={type(self.root).__name__}, ops=[{ops}])"


def register_operation(name: str, make_spec: Callable[..., Any]) -> None:
    """Make ``chain.name(*args, **kwargs)`` (and ``StreamingDataset(...).name(...)``) add the operation
    ``make_spec(*args, **kwargs)`` (a spec, see :meth:`IterableDataset.apply`) to a chain."""
    from .operations import Operations

    if not name.isidentifier() or name.startswith("_") or hasattr(IterableDataset, name):
        raise InvalidArgumentError(f"register_operation({name!r}): the name must be a public identifier that "
                                   "chains do not have yet")

    def operation(self, *args, **kwargs):
        return self.apply(make_spec(*args, **kwargs))

    def on_dataset(self, *args, **kwargs):
        return getattr(self.as_iterable(), name)(*args, **kwargs)

    operation.__name__ = on_dataset.__name__ = name
    operation.__doc__ = on_dataset.__doc__ = make_spec.__doc__
    setattr(IterableDataset, name, operation)
    if not hasattr(Operations, name):
        setattr(Operations, name, on_dataset)


_POSITION_KEYS = ("epoch", "sample_in_epoch", "segment_origin", "region_base", "initial_physical_nodes")


def source_identity(root) -> dict:
    """What the root's items are: its shards' files (name, size, version or digests) and the settings of
    its plan (shuffle, seed, mixing, ...), as the state of epoch 0's start shows them."""
    h = xxhash.xxh64()
    for store in root.table.stores:
        for shard in store.shards:
            if isinstance(shard, Piece):  # a piece of a data file
                h.update(f"{shard.file}|{shard.version}|{shard.start}|{shard.stop}|{shard.samples}\n".encode())
            else:
                info = store.format.resident_file(shard)
                h.update(f"{info.basename}|{info.bytes}|{sorted(info.hashes.items())}\n".encode())
    settings = {k: v for k, v in plan_pass(root, 0)[1].items() if k not in _POSITION_KEYS}
    return {"files": h.hexdigest(), "plan": settings}


def _same(v):
    return v


def _items(run: Run, convert) -> Iterator[Any]:
    try:
        if convert is _same:
            yield from run.values()
        else:
            for v in run.values():
                yield convert(v)
    finally:
        run.close()


def merge_states(state, operations: Optional[list] = None) -> dict:
    """One state from a state or the list of every rank's (see :func:`shardstream.engine.state.read_chain_state`);
    ``operations``: the chain's, to check the state against (default: the state's own)."""
    if operations is None:
        first = state[0] if isinstance(state, (list, tuple)) and state else state
        operations = first.get("operations") or [] if isinstance(first, dict) else []
    return read_chain_state(state, operations)


def _refuse(kwargs: dict, op: str, known: set) -> None:
    if kwargs:
        names = sorted(kwargs)
        raise InvalidArgumentError(f"{op}() got keywords {names} that a stream does not support"
                                   + (f" (known HF keywords not supported here: {sorted(known)})" if known else ""))


register_iterable(IterableDataset)  # a torch IterableDataset once torch is imported (torch is never imported here)
