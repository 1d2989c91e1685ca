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

from ..engine.chainpass import same
from ..engine.cursor import ChainCursor
from ..engine.maps import MapSpec
from ..engine.ops import BatchSpec, CountSpec, ShuffleSpec, rename, select
from ..engine.run import plan_pass
from ..engine.state import read_chain_state
from ..errors import InvalidArgumentError
from ..format.files import Piece
from ..runtime.torchenv import register_iterable

FORMATS = (None, "python", "numpy", "np", "torch", "pt", "jax")


class IterableDataset:
    """A chain of operations over ``root`` (a :class:`~shardstream.StreamingDataset`); see the module
    docstring. Made by the root's own methods (``ds.map(...)``, ``ds.shuffle(buffer_size=...)``)."""

    def __init__(self, root, specs: Sequence[Any] = (), fmt: Optional[str] = None, prefetch: int = 0) -> None:
        self.root = root
        self.specs = tuple(specs)
        self.format = fmt
        self._prefetch = prefetch
        self._fingerprint: Optional[str] = None
        self.cursor = ChainCursor(root, self.specs, self.fingerprint)  # where the chain is (engine/cursor.py)

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
            return same
        from ..runtime.tensors import converter, to_numpy

        return to_numpy if self.format == "numpy" else converter(self.format)

    def __iter__(self) -> Iterator[Any]:
        return self.run_pass(self.take_ticket())

    @property
    def ticket(self) -> tuple:
        """The pass the next iteration runs: ``(next epoch, loaded state or None)``; it changes exactly when
        that pass changes (an iteration, :meth:`set_epoch`, :meth:`load_state_dict`)."""
        return self.cursor.ticket

    def take_ticket(self) -> tuple:
        """:attr:`ticket`, taken by whoever runs that pass: a loaded state is then forgotten here."""
        return self.cursor.take_ticket()

    def _begin(self, ticket: Optional[tuple], world=None, agree: bool = True):
        explicit = world is not None or self.root.world is not None
        world = world if world is not None else self.root.detect_world()
        return self.cursor.begin(world, ticket, convert=self._convert(), agree=agree and self.batched,
                                 explicit=explicit)

    def run_stamped(self, ticket: tuple, stamp: Callable[[Any, int, dict], Any] = lambda *s: s) -> Iterator[Any]:
        """The items of the pass ``ticket`` names (see :meth:`run_pass`, without agreeing between ranks), each
        as ``stamp(item, reader, that reader's state after it)``: what a loader running the chain in its workers
        records (``StreamingDataLoader`` over a chain, which agrees for its workers)."""
        return self._begin(ticket, agree=False).stamped(stamp, self._prefetch)

    def run_pass(self, ticket: tuple, meter=None, agree: bool = True) -> Iterator[Any]:
        """Run the pass ``ticket`` = ``(next epoch, loaded state)`` names, as this process's reader;
        ``meter``: the prefetch thread stamps each item with its loader stats (see :mod:`.readahead`).
        ``agree``: a chain of batches on several ranks ends its pass on every rank at the same step (see
        :mod:`.agree`); False where a loader agrees for it (``StreamingDataLoader`` over a chain)."""
        chain_pass = self._begin(ticket, agree=agree)
        return chain_pass.agreed(chain_pass.items(self._prefetch, meter))

    def take_pass(self, world=None):
        """Take the pass the next iteration would run (the next epoch, or the state loaded) for a loader that runs
        it in its own thread and counts what its loop consumed (:class:`~shardstream.engine.chainpass.ChainPass`);
        the chain then stands after that pass. ``world``: this process's place (default: the root's)."""
        self._begin(None, world)
        return self.cursor.hand_over()

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
        self.cursor.close()

    def set_epoch(self, epoch: int) -> None:
        """Make the next iteration run ``epoch`` from its start."""
        self.cursor.set_epoch(epoch)

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
        return self.cursor.operations

    def state_dict(self) -> dict:
        """A plain-JSON state that resumes right after the items this process handed out.

        With several ranks each rank's state holds its own readers: save every rank's and load the
        list of them (``load_state_dict([s0, s1, ...])``) on any world."""
        return self.cursor.state()

    def load_state_dict(self, state) -> None:
        """Resume from :meth:`state_dict` (or the list of every rank's) at the next iteration, on any world."""
        self.cursor.load(state)

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
