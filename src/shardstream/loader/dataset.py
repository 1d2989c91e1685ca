"""``StreamingDataset``: the samples of an MDS dataset, by index, in epoch order, or in batches.

The constructor takes mosaicml-streaming's keywords so existing code moves over by
changing the import. Iteration follows the epoch plan (:mod:`shardstream.plan`):
the same global order for any number of nodes, ranks and workers, shuffled with
download locality, resumable at any position through ``state_dict`` /
``load_state_dict``. With a ``remote``, shards are downloaded ahead of use into a
cache directory shared by every process on the machine (:mod:`shardstream.storage`),
optionally capped by ``cache_limit``. With ``streams=[Stream(...), ...]`` (or an
``epoch_size``) the epoch is mixed from several datasets by weight (see
:mod:`shardstream.loader.stream` and :mod:`shardstream.plan.mixed`).
"""

from __future__ import annotations

import dataclasses
import warnings
from bisect import bisect_right
from typing import Any, Iterator, Optional, Sequence

import numpy as np
import xxhash

from ..errors import InvalidArgumentError, SampleIndexError, UnsafeEncodingError
from ..format.index import ShardInfo
from ..format.reader import ShardReader, open_shard
from ..keywords import checked_keywords
from ..plan import World
from ..units import parse_bytes, parse_count
from .caller import warn_caller
from .options import DatasetOptions
from .mixorder import mix_order
from .order import Order
from .indexbatches import IndexBatches
from .passes import PassReading
from .prefetch import default_predownload
from .stream import (Stream, WeightSchedule, check_streams, described, open_source, open_sources, shard_set,
                     source_cache)
from .world import detect_world, rank_world
from ..integrations.torchenv import die_with_parent, register_iterable


_HELD_SHARDS = 8  # shards of a remote dataset kept pinned for random access (fewer if cache_limit needs)
_ONE_PER_STEP = ("each step holds 1 sample per rank (DataLoader workers take turns by steps, so a DataLoader "
                 "batch of several samples is not a run of the plan)")


class StreamingDataset(PassReading, IndexBatches):
    """An MDS dataset read from ``local`` (optionally its ``split`` subdirectory).

    Samples are dicts of column -> value. ``len(ds)`` is the number of samples;
    ``ds[i]`` accepts ints (negative too), slices, lists and numpy integer arrays
    (indices are the dataset's own order); iteration yields this reader's share of
    the next epoch in plan order; :meth:`batches` yields column arrays in index order.
    """

    @checked_keywords()
    def __init__(
        self,
        *,
        streams: Optional[Sequence[Any]] = None,
        remote: Optional[str] = None,
        local: Optional[str] = None,
        split: Optional[str] = None,
        download_retry: int = 2,
        download_timeout: float = 60,
        validate_hash: Optional[str] = None,
        keep_zip: bool = False,
        epoch_size: Optional[int | str] = None,
        predownload: Optional[int] = None,
        cache_limit: Optional[int | str] = None,
        sampling_method: str = "balanced",
        sampling_granularity: int = 1,
        partition_algo: str = "relaxed",
        num_canonical_nodes: Optional[int] = None,
        batch_size: Optional[int] = None,
        shuffle: bool = False,
        shuffle_algo: str = "py1e",
        shuffle_seed: int = 9176,
        shuffle_block_size: Optional[int] = None,
        batching_method: str = "random",
        allow_unsafe_types: bool = False,
        replication: Optional[int] = None,
        stream_name: str = "stream",
        stream_config: Optional[dict] = None,
        epoch_tail: str = "pad",
        storage_options: Optional[dict] = None,
        download_threads: int = 4,
        world: Optional[World] = None,
        weight_schedule: Optional[WeightSchedule] = None,
    ) -> None:
        self.options = DatasetOptions(
            download_retry=download_retry, download_timeout=download_timeout, validate_hash=validate_hash,
            keep_zip=keep_zip, predownload=predownload, sampling_method=sampling_method,
            sampling_granularity=sampling_granularity, partition_algo=partition_algo,
            num_canonical_nodes=num_canonical_nodes, batch_size=batch_size, shuffle=shuffle,
            shuffle_algo=shuffle_algo, shuffle_seed=shuffle_seed, shuffle_block_size=shuffle_block_size,
            batching_method=batching_method, allow_unsafe_types=allow_unsafe_types, replication=replication,
            epoch_tail=epoch_tail,
        )
        if isinstance(download_threads, bool) or not isinstance(download_threads, int) or download_threads < 1:
            raise InvalidArgumentError(f"download_threads={download_threads!r} must be an int >= 1")
        self.download_threads = download_threads
        if world is not None and not isinstance(world, World):
            raise InvalidArgumentError(f"world={world!r} must be a shardstream.plan.World or None")
        self.world = world
        self._parent_world: Optional[World] = None  # the ranks of the process that pickled this copy
        register_iterable(type(self))
        # a subclass that overrides get_item (mosaicml-streaming's hook for transforms) is called by ds[i]
        self._inline_get = type(self).get_item is StreamingDataset.get_item
        self.split = split
        self.batch_size = batch_size
        self.shuffle = shuffle
        limit = None if cache_limit is None else parse_bytes(cache_limit, "cache_limit")
        self.cache_limit = limit
        self._mixed = streams is not None or epoch_size is not None or weight_schedule is not None
        knobs = {"split": split, "download_retry": download_retry, "download_timeout": download_timeout,
                 "validate_hash": validate_hash, "keep_zip": keep_zip}
        if self._mixed:
            if streams is not None and (remote is not None or local is not None):
                raise InvalidArgumentError("give either streams=[...] or remote=/local=, not both")
            streams = check_streams(streams if streams is not None else [Stream(remote=remote, local=local)])
            self._sources = open_sources(streams, knobs, storage_options)
            self.remote = next((src.remote for src in self._sources if src.remote is not None), None)
            self.local = self.dirname = self._sources[0].dirname
            self.shards: list[ShardInfo] = [s for src in self._sources for s in src.shards]
            self._cache = shard_set(self._sources, limit)
            if limit is not None and self.remote is None:
                warnings.warn(f"cache_limit={cache_limit!r} has no effect: no stream has a remote, so the local "
                              "directories hold the only copies of the shards, which are never evicted", stacklevel=2)
        else:
            src = open_source(remote, local, knobs, storage_options)
            self.remote, self.local, self.dirname, self.shards = src.remote, src.local, src.dirname, src.shards
            if limit is not None and self.remote is None:
                warnings.warn(f"cache_limit={cache_limit!r} has no effect: with no remote, {self.dirname} holds "
                              "the only copy of the shards, which are never evicted", stacklevel=2)
            self._cache = source_cache(src, limit)
        if not allow_unsafe_types:
            _refuse_unsafe(self.shards)
        sizes = [s.samples for s in self.shards]
        self.shard_sizes = np.asarray(sizes, np.int64)
        self._ends = np.cumsum(sizes).tolist()  # plain ints: bisect on a list is the fastest lookup
        self._starts = [0] + self._ends[:-1]
        self._ends_array = np.asarray(self._ends, np.int64)  # for vectorised lookups
        self._starts_array = np.asarray(self._starts, np.int64)
        self.num_samples = self._ends[-1] if self._ends else 0
        self._readers: list[Optional[ShardReader]] = [None] * len(self.shards)
        self._getters: list = [None] * len(self.shards)  # per shard: sample index -> dict
        fingerprint = xxhash.xxh64(self.shard_sizes.astype("<i8").tobytes()).hexdigest()
        if self._mixed:
            count = None if epoch_size is None else parse_count(epoch_size, "epoch_size")
            if count is not None and count < 1:
                raise InvalidArgumentError(f"epoch_size={epoch_size!r} must be at least 1 sample")
            self._order = mix_order(self._sources, self.options, fingerprint, count, weight_schedule)
            self.streams = described([src.stream for src in self._sources], self._order.stream_samples,
                                     self._order.counts(0))
        else:
            self._order = Order(self.shard_sizes, self.options, fingerprint)
            self.streams = None
        self._default_predownload = predownload is None
        self.predownload = predownload if predownload is not None else default_predownload(batch_size, self._average)

    @property
    def _average(self) -> float:
        return self.num_samples / max(len(self.shards), 1)

    def _adopt_batch_size(self, batch_size: int) -> None:
        """Take a loader's per-device ``batch_size`` when the dataset was built without one (with a warning)."""
        self.batch_size = batch_size
        self.options = dataclasses.replace(self.options, batch_size=batch_size)
        self._order.options = self.options
        if self._default_predownload:
            self.predownload = default_predownload(batch_size, self._average)
        self._warn_unset_batch_size(f"it takes the loader's batch_size={batch_size}")

    def _warn_unset_batch_size(self, what: str, world: Optional[World] = None) -> None:
        """Say once what a dataset built without ``batch_size`` does where it matters: several ranks or
        DataLoader workers, or a loader's batch adopted (mosaicml-streaming refuses such a dataset)."""
        if self.__dict__.get("_warned_batch_size"):
            return
        self._warned_batch_size = True
        ranks = (world or self.detect_world()).readers
        per, size, tail = self.batch_size or 1, self.epoch_size, self.options.epoch_tail
        steps = -(-size // (per * ranks)) if tail == "pad" else size // (per * ranks)
        warn_caller(
            f"StreamingDataset was built without batch_size, so {what}: the epoch is planned in global steps of "
            f"{per} sample(s) per rank x {ranks} rank(s), and with epoch_tail={tail!r} an epoch of {size} "
            f"samples is read as {steps * per * ranks} (whole global steps). mosaicml-streaming refuses a "
            "dataset without batch_size; pass StreamingDataset(..., batch_size=N), the per-device batch of your "
            "training loop, to plan the epoch and its checkpoints in the steps you train with")

    # -- sizes ----------------------------------------------------------------------
    @property
    def size(self) -> int:
        """Number of samples in the dataset."""
        return self.num_samples

    def __len__(self) -> int:
        return self.num_samples

    @property
    def epoch_size(self) -> int:
        """Samples in an epoch: ``epoch_size`` or the streams' weighted counts; else the dataset's size."""
        return self._order.epoch_size if self._mixed else self.num_samples

    def stream_counts(self, epoch: Optional[int] = None) -> Optional[np.ndarray]:
        """Samples drawn from each stream for ``epoch`` (default: the next); None with no streams.

        ``random`` batching yields exactly these. ``per_stream`` and ``device_per_stream`` round each
        stream to whole batches (up with ``epoch_tail='pad'``, down with ``'drop'``); ``stratified``
        yields steps x each stream's rounded share of a batch (see :mod:`shardstream.plan.mixed`).
        """
        if not self._mixed:
            return None
        return self._order.counts(self._order.next_epoch if epoch is None else epoch)

    def mixture_weights(self, position: Optional[int] = None, epoch: Optional[int] = None) -> Optional[np.ndarray]:
        """The streams' weights in effect at global ``position`` of ``epoch`` (a weight schedule moves them).

        By default: where this process's pass in progress is (counting whole global steps),
        else the start of the next pass. None for a dataset with no streams.
        """
        return self._order.weights_at(position, epoch) if self._mixed else None

    @property
    def column_names(self) -> tuple[str, ...]:
        return self.shards[0].column_names if self.shards else ()

    # -- shards ---------------------------------------------------------------------
    def reader(self, shard: int) -> ShardReader:
        """The open reader of shard ``shard`` (downloaded, decompressed and opened on first use)."""
        if self.remote is not None:
            return self._cache.hold(shard, _HELD_SHARDS)
        r = self._readers[shard]
        if r is None:
            if self._mixed:  # each stream's own directory and knobs
                r = self._cache.reader(shard)
            else:  # keep_zip: with no remote, the compressed files are the only copy; never delete them.
                r = open_shard(self.dirname, self.shards[shard], self.options.validate_hash, keep_zip=True)
            self._readers[shard] = r
        return r

    def _open_getter(self, shard: int):
        get = self.reader(shard).get_unchecked
        if self.remote is None:  # remote shards stay cached in `reader` only while held
            self._getters[shard] = get
        return get

    # -- random access --------------------------------------------------------------
    def get_item(self, sample_id: int, retry: int = 7) -> dict[str, Any]:
        """Sample ``sample_id`` (negative counts from the end)."""
        i = sample_id
        if i < 0:
            i += self.num_samples
        if not 0 <= i < self.num_samples:
            raise SampleIndexError(f"sample index {sample_id} is out of range for a dataset of {self.num_samples} samples")
        shard = bisect_right(self._ends, i)
        get = self._getters[shard] or self._open_getter(shard)
        return get(i - self._starts[shard])

    def __getitem__(self, key):
        if type(key) is int and 0 <= key < self.num_samples and self._inline_get:  # the hot path, inlined
            shard = bisect_right(self._ends, key)
            get = self._getters[shard] or self._open_getter(shard)
            return get(key - self._starts[shard])
        if isinstance(key, (int, np.integer)):
            return self.get_item(int(key))
        if isinstance(key, slice):
            return [self.get_item(i) for i in range(*key.indices(self.num_samples))]
        arr = np.asarray(key)
        if arr.dtype == bool:
            if arr.shape != (self.num_samples,):
                raise SampleIndexError(f"a boolean mask must have shape ({self.num_samples},), got {arr.shape}")
            arr = np.flatnonzero(arr)
        if arr.ndim != 1 or (arr.size and arr.dtype.kind not in "iu"):
            raise InvalidArgumentError(
                f"index with an int, a slice, or a 1-D sequence of ints; got {type(key).__name__} {arr.dtype}"
            )
        return [self.get_item(int(i)) for i in arr.tolist()]

    # -- iteration in epoch order ----------------------------------------------------
    def __iter__(self) -> Iterator[dict[str, Any]]:
        return self.iterate()

    def detect_world(self) -> World:
        """The world this process reads as (see :mod:`shardstream.loader.world`)."""
        return detect_world(self.options.replication, explicit=self.world, parent=self._parent_world)

    def iterate(self, world: Optional[World] = None,
                columns: Optional[Sequence[str]] = None) -> Iterator[dict[str, Any]]:
        """Start the next pass and return an iterator over this reader's share of it.

        ``world`` defaults to :meth:`detect_world`. The pass is the pending resumption
        point if :meth:`load_state_dict` was called, else the next epoch from its start.
        Samples come in global steps of ``batch_size * ranks``; this reader yields its
        ``batch_size`` slice of each. ``columns``: decode only these. A subclass that
        overrides ``__getitem__`` or ``get_item`` (to transform samples) has each sample
        fetched through it (``columns`` then keeps those keys of its samples).
        """
        self._check_columns(columns)
        die_with_parent()
        current = self._begin(world)
        if self._overridden_getitem():
            return self._custom_samples(current, columns)
        if self.remote is not None:
            return self._cached_samples(current, columns)
        return self._local_samples(current, columns)

    def iterate_batches(self, world: Optional[World] = None,
                        columns: Optional[Sequence[str]] = None) -> Iterator[dict[str, Any]]:
        """Like :meth:`iterate`, but yield each step's ``batch_size`` samples as one column batch.

        Batches are decoded with the vectorised batch decoder (:mod:`shardstream.format.batch`):
        numeric columns become arrays, fixed-shape arrays ``(batch, *shape)`` arrays,
        variable-length arrays :class:`~shardstream.Ragged`, other columns lists.
        """
        self._check_batchable(columns)  # before the pass begins, so a refused call leaves a pending resume alone
        die_with_parent()
        current = self._begin(world)
        if self.remote is not None:
            return self._cached_batches(current, columns)
        return self._local_batches(current, columns)

    def _begin(self, world: Optional[World]):
        """Start the next pass for ``world`` (default: :meth:`detect_world`)."""
        world = world or self.detect_world()
        if self.batch_size is None and (world.readers > 1 or world.workers > 1):
            self._warn_unset_batch_size(_ONE_PER_STEP, world)
        return self._order.begin(world)

    def _check_batchable(self, columns: Optional[Sequence[str]]) -> None:
        """Refuse column batches that would be wrong: unknown columns, or a subclass whose samples
        are made by its own ``__getitem__`` / ``get_item`` (decoding raw columns would skip it)."""
        layouts = self._stream_layouts()
        if len(layouts) > 1:
            raise InvalidArgumentError(
                f"the streams have different columns or encodings ({sorted(layouts)}), so their samples cannot "
                "share column batches; iterate samples and collate them yourself (a collate_fn)")
        self._check_columns(columns)
        if self._overridden_getitem():
            raise InvalidArgumentError(
                f"{type(self).__name__} overrides __getitem__ or get_item, which column batches would bypass; "
                "iterate samples instead (iter(ds), or StreamingDataLoader with batch_decode=False)"
            )

    def _check_columns(self, columns: Optional[Sequence[str]]) -> None:
        if columns is None:
            return
        if isinstance(columns, str):
            raise InvalidArgumentError(f"columns={columns!r} must be a list of column names, e.g. [{columns!r}]")
        unknown = sorted(set(columns) - set(self.column_names))
        if unknown:
            raise InvalidArgumentError(f"columns {unknown} are not in this dataset (it has {list(self.column_names)})")

    def _stream_layouts(self) -> set:
        """The distinct (columns, encodings) of the streams (one entry without streams)."""
        if not self._mixed:
            return {()}
        return {(tuple(src.shards[0].column_names), tuple(e.name for e in src.shards[0].encodings))
                for src in self._sources if src.shards}

    def _overridden_getitem(self) -> bool:
        cls = type(self)
        return cls.__getitem__ is not StreamingDataset.__getitem__ or cls.get_item is not StreamingDataset.get_item

    def _custom_samples(self, current, columns=None) -> Iterator[Any]:
        """Plan order through the subclass's ``__getitem__`` or ``get_item`` (shards still fetched ahead)."""
        cls = type(self)
        made = self.__getitem__ if cls.__getitem__ is not StreamingDataset.__getitem__ else self.get_item
        fetch = made if columns is None else (lambda i: _only(made(i), columns))
        if self.remote is None:
            for _, ids in current.plan.iter_worker(current.world, current.start):
                for i in ids.ravel().tolist():
                    current.yielded += 1
                    yield fetch(i)
            return
        for chunk, _ in self._prefetched(current):
            for i in chunk.flat.tolist():
                current.yielded += 1
                yield fetch(i)

    # -- the shard cache (datasets with a remote) -------------------------------------------
    @property
    def cache_usage(self) -> int:
        """Bytes the cache directory holds for this dataset (shards, downloads in progress, index)."""
        return self._cache.usage()

    def prepare_shard(self, shard_id: int, blocking: bool = True) -> bool:
        """Download shard ``shard_id`` unless it is present; with ``blocking=False`` return
        False at once if another process is downloading it. Safe across threads and processes;
        with a ``cache_limit`` it may evict the least recently used shards first."""
        self._check_shard(shard_id)
        if not self._cache.pin(shard_id, must=True, blocking=blocking):
            return False
        self._cache.unpin(shard_id)
        return True

    def evict_shard(self, shard_id: int) -> bool:
        """Delete shard ``shard_id`` from the cache unless a process is using it; True if it is gone."""
        self._check_shard(shard_id)
        self._cache.release_held()
        return self._cache.evict(shard_id)

    def evict_coldest_shard(self) -> Optional[int]:
        """Evict the least recently used shard that no process is using; its index, or None if none is."""
        self._cache.release_held()
        return self._cache.evict_coldest()

    def _check_shard(self, shard_id: int) -> None:
        if isinstance(shard_id, bool) or not isinstance(shard_id, (int, np.integer)) or not (
                0 <= shard_id < len(self.shards)):
            raise SampleIndexError(f"shard_id={shard_id!r} is not a shard of this dataset (0..{len(self.shards) - 1})")

    @property
    def next_epoch(self) -> int:
        """The epoch the next pass runs (unless a loaded state says otherwise)."""
        return self._order.next_epoch

    @next_epoch.setter
    def next_epoch(self, epoch: int) -> None:
        self.set_epoch(epoch)

    def set_epoch(self, epoch: int) -> None:
        """Make the next pass run ``epoch`` from its start (like ``DistributedSampler.set_epoch``)."""
        if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 0:
            raise InvalidArgumentError(f"set_epoch({epoch!r}): the epoch must be an int >= 0")
        self._order.next_epoch = epoch
        self._order.pending = None
        self._order.current = None

    def epoch_plan(self, epoch: Optional[int] = None, world: Optional[World] = None):
        """The :class:`~shardstream.plan.EpochPlan` of ``epoch`` (default: the next) for ``world``."""
        return self._order.epoch_plan(epoch, world or self.detect_world())

    # -- resumption -------------------------------------------------------------------
    def state_dict(self, num_samples: Optional[int] = None, from_beginning: bool = True) -> dict[str, Any]:
        """A plain-JSON dict that resumes the epoch after ``num_samples`` consumed samples.

        ``num_samples`` counts the samples the whole job consumed this epoch (all ranks),
        from the epoch's start (``from_beginning=True``) or from where this run resumed.
        Leave it out when iterating in this process with no DataLoader workers: the
        samples this process yielded are counted (whole global steps when there are
        several ranks).
        """
        return self._order.state_dict(num_samples, from_beginning, self._world_now())

    def load_state_dict(self, obj: dict[str, Any]) -> None:
        """Resume from a :meth:`state_dict` at the next pass, on any world size.

        Refused with :class:`~shardstream.errors.IncompatibleStateError` if the state
        belongs to another dataset or to other order settings (the message says which).
        """
        self._order.load_state_dict(obj, self._world_now())

    def _world_now(self) -> World:
        cur = self._order.current
        return cur.world if cur is not None else self.detect_world()

    # -- pickling (DataLoader workers re-open shards on their side) ------------------
    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state["_readers"] = [None] * len(self.shards)
        state["_getters"] = [None] * len(self.shards)
        if self.world is None and self._parent_world is None:
            # DataLoader workers read as the rank that handed them this copy, even when the
            # rank's world came from a process group the workers cannot see
            try:
                state["_parent_world"] = rank_world(self.options.replication)
            except InvalidArgumentError:
                state["_parent_world"] = None
        return state


register_iterable(StreamingDataset)



def _only(sample: Any, columns: Sequence[str]) -> Any:
    """The ``columns`` of a sample a subclass made (as it is, if it is not a dict)."""
    return {k: v for k, v in sample.items() if k in columns} if isinstance(sample, dict) else sample


def _refuse_unsafe(shards: list[ShardInfo]) -> None:
    for i, s in enumerate(shards):
        for name, enc in zip(s.column_names, s.encodings):
            if not enc.safe:
                raise UnsafeEncodingError(
                    f"column {name!r} (shard {i}) uses encoding {enc.name!r}, which can run arbitrary code "
                    "when read; pass allow_unsafe_types=True only if you trust who wrote this dataset"
                )
