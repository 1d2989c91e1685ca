"""``StreamingDataset``: the samples of an MDS dataset, by index, in epoch order, or in batches.

The constructor takes mosaicml-streaming's keywords so existing code moves over by
changing the import. Iteration follows the epoch plan (:mod:`shardstream.plan`):
the same global order for any number of nodes, ranks and workers, shuffled with
download locality, resumable at any position through ``state_dict`` /
``load_state_dict``. With a ``remote``, shards are downloaded ahead of use into a
cache directory shared by every process on the machine (:mod:`shardstream.storage`),
optionally capped by ``cache_limit``. With ``streams=[Stream(...), ...]`` (or an
``epoch_size``) the epoch is mixed from several datasets by weight (see
:mod:`shardstream.engine.stream` and :mod:`shardstream.plan.mixed`).
"""

from __future__ import annotations

import dataclasses
from bisect import bisect_right
from typing import Any, Iterator, Optional, Sequence

import numpy as np
import xxhash

from ..errors import InvalidArgumentError, SampleIndexError
from ..keywords import checked_keywords
from ..plan import World
from ..plan.settings import (DEFAULT_BATCHING_METHOD, DEFAULT_EPOCH_TAIL, DEFAULT_PARTITION_ALGO,
                             DEFAULT_SAMPLING_GRANULARITY, DEFAULT_SAMPLING_METHOD, DEFAULT_SHUFFLE_ALGO,
                             DEFAULT_SHUFFLE_SEED)
from ..storage.options import DEFAULT_DOWNLOAD_RETRY, DEFAULT_DOWNLOAD_TIMEOUT, StreamOptions
from ..storage.store import open_stores
from ..storage.streams import open_streams
from ..units import parse_bytes, parse_count
from ..engine.caller import warn_caller
from ..engine.cursor import EpochCursor
from ..engine.batchsize import ONE_PER_STEP, warn_unset_batch_size
from ..engine.indexbatches import batch_at, index_scan, scan_size
from ..engine.mixorder import mixed_order
from ..engine.notices import warn_small_predownload, warn_small_shuffle_block
from ..engine.options import DatasetOptions
from ..engine.order import SingleOrder
from ..engine.prefetch import default_predownload
from ..engine.reading import PassReader
from ..engine.stream import WeightSchedule, described, places
from ..engine.registry import stream_from_registry
from ..engine.stream import one_stream
from ..engine.table import ShardTable
from ..engine.world import detect_world, rank_world
from .operations import Operations, ShuffleFlag
from ..runtime.torchenv import prepare_worker, register_iterable


class StreamingDataset(Operations):
    """A dataset read from ``local`` (optionally its ``split`` subdirectory), or streamed from ``remote``
    through the cache ``local``: MDS shards, or data files (Parquet, Arrow, JSON Lines, CSV, text) given
    as a file, directory, glob or list, with ``format=`` taken from their names when left out;
    ``columns=`` reads only those columns of data files (pushed down into Parquet and Arrow reads),
    ``on_bad_rows=`` says what a malformed row of a text file does (``"raise"`` or ``"skip"``).

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
        download_retry: int = DEFAULT_DOWNLOAD_RETRY,
        download_timeout: float = DEFAULT_DOWNLOAD_TIMEOUT,
        validate_hash: Optional[str] = None,
        keep_zip: bool = False,
        epoch_size: Optional[int | str] = None,
        predownload: Optional[int] = None,
        cache_limit: Optional[int | str] = None,
        sampling_method: str = DEFAULT_SAMPLING_METHOD,
        sampling_granularity: int = DEFAULT_SAMPLING_GRANULARITY,
        partition_algo: str = DEFAULT_PARTITION_ALGO,
        num_canonical_nodes: Optional[int] = None,
        batch_size: Optional[int] = None,
        shuffle: bool = False,
        shuffle_algo: str = DEFAULT_SHUFFLE_ALGO,
        shuffle_seed: int = DEFAULT_SHUFFLE_SEED,
        shuffle_block_size: Optional[int] = None,
        batching_method: str = DEFAULT_BATCHING_METHOD,
        allow_unsafe_types: bool = False,
        replication: Optional[int] = None,
        stream_name: str = "stream",
        stream_config: Optional[dict] = None,
        epoch_tail: str = DEFAULT_EPOCH_TAIL,
        storage_options: Optional[dict] = None,
        download_threads: int = 4,
        world: Optional[World] = None,
        weight_schedule: Optional[WeightSchedule] = None,
        format: Optional[str] = None,
        columns: Optional[Sequence[str]] = None,
        on_bad_rows: str = "raise",
    ) -> None:
        defaults = StreamOptions(split=split, download_retry=download_retry, download_timeout=download_timeout,
                                 validate_hash=validate_hash, keep_zip=keep_zip, format=format,
                                 columns=columns, on_bad_rows=on_bad_rows)
        # stream_name / stream_config: the one stream built from the streams registry (None: the default)
        single = stream_from_registry(stream_name, stream_config, streams, dict(
            remote=remote, local=local, split=split, download_retry=download_retry,
            download_timeout=download_timeout, validate_hash=validate_hash, keep_zip=keep_zip))
        self.options = DatasetOptions(
            predownload=predownload, sampling_method=sampling_method,
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
        # what opened this dataset, for interleave_datasets to open it again as one of several streams
        self.source_args = None if streams is not None else dict(
            remote=remote, local=local, split=split, format=format, columns=columns, on_bad_rows=on_bad_rows,
            download_retry=download_retry, download_timeout=download_timeout, validate_hash=validate_hash,
            keep_zip=keep_zip)
        if single is not None and self.source_args is not None:  # where the registry's stream says it lives
            self.source_args.update(remote=single.remote, local=single.local, split=single.split)
        self.storage_options = storage_options
        self._shuffle = bool(shuffle)
        # 0, as None, sets no limit (as mosaicml-streaming reads it)
        limit = None if cache_limit is None or cache_limit == 0 else parse_bytes(cache_limit, "cache_limit")
        self.cache_limit = limit
        mixed = streams is not None or epoch_size is not None or weight_schedule is not None
        opened = open_streams(places(streams, remote, local, defaults, mixed, single), storage_options)
        self.table = ShardTable(open_stores(opened, limit))
        self.remote = next((o.remote for o in opened if o.remote is not None), None)
        self.local = opened[0].dirname if mixed else opened[0].local
        self.dirname = opened[0].dirname
        if limit is not None and self.remote is None:
            warn_caller(f"cache_limit={cache_limit!r} has no effect: " + (
                "no stream has a remote, so the local directories hold" if mixed else
                f"with no remote, {self.dirname} holds") + " the only copies of the shards, which are never evicted")
        if not allow_unsafe_types:
            self.table.refuse_unsafe()
        self.shards = self.table.shards
        self.shard_sizes = self.table.sizes
        self.num_samples = self.table.num_samples
        self._alias_table()
        fingerprint = xxhash.xxh64(self.shard_sizes.astype("<i8").tobytes()).hexdigest()
        if mixed:
            count = None if epoch_size is None else parse_count(epoch_size, "epoch_size")
            if count is not None and count < 1:
                raise InvalidArgumentError(f"epoch_size={epoch_size!r} must be at least 1 sample")
            order = mixed_order(opened, self.options, fingerprint, count, weight_schedule)
            self.streams = described([o.stream for o in opened], order.stream_samples, order.counts(0))
        else:
            order = SingleOrder(self.shard_sizes, self.options, fingerprint)
            self.streams = one_stream(single, self.num_samples, remote=remote, local=local, split=split, format=format,
                                      columns=columns)
        self._mixed = mixed
        self.cursor = EpochCursor(order)
        self._default_predownload = predownload is None
        self.predownload = predownload if predownload is not None else default_predownload(batch_size, self._average)
        warn_small_predownload(predownload, batch_size)

    def _alias_table(self) -> None:
        """The table's lookups, kept on the dataset for the random-access hot path."""
        self._ends, self._starts, self._getters = self.table.ends, self.table.starts, self.table.getters

    @property
    def _average(self) -> float:
        return self.num_samples / max(len(self.shards), 1)

    def adopt_batch_size(self, batch_size: int) -> None:
        """Take a loader's per-device ``batch_size`` when the dataset was built without one (with a warning)."""
        self.batch_size = batch_size
        self.options = dataclasses.replace(self.options, batch_size=batch_size)
        self.cursor.set_batch_size(batch_size)
        if self._default_predownload:
            self.predownload = default_predownload(batch_size, self._average)
        self._warn_batch_size(f"it takes the loader's batch_size={batch_size}")

    @property
    def shuffle(self) -> ShuffleFlag:
        """Whether the plan shuffles (mosaicml-streaming's flag); calling it adds HF's shuffle buffer:
        ``ds.shuffle(seed=0, buffer_size=10_000)`` (see :mod:`shardstream.dataset.operations`)."""
        return ShuffleFlag(self._shuffle, self)

    @shuffle.setter
    def shuffle(self, value: bool) -> None:
        self._shuffle = bool(value)

    # -- sizes ----------------------------------------------------------------------
    @property
    def size(self) -> int:
        """Number of samples in the dataset."""
        return self.num_samples

    def __len__(self) -> int:
        if self.options.epoch_tail == "mosaic":  # mosaicml-streaming's length: this rank's share of an epoch
            return -(-self.epoch_size // self.detect_world().readers)
        return self.num_samples

    @property
    def epoch_size(self) -> int:
        """Samples in an epoch: ``epoch_size`` or the streams' weighted counts; else the dataset's size."""
        return self.cursor.order.epoch_size

    def stream_counts(self, epoch: Optional[int] = None) -> Optional[np.ndarray]:
        """Samples drawn from each stream for ``epoch`` (default: the next); None with no streams.

        ``random`` batching yields exactly these. ``per_stream`` and ``device_per_stream`` round each
        stream to whole batches (up with ``epoch_tail='pad'``, down with ``'drop'``); ``stratified``
        yields steps x each stream's rounded share of a batch (see :mod:`shardstream.plan.mixed`).
        """
        if not self._mixed:
            return None
        return self.cursor.order.counts(self.cursor.next_epoch if epoch is None else epoch)

    def mixture_weights(self, position: Optional[int] = None, epoch: Optional[int] = None) -> Optional[np.ndarray]:
        """The streams' weights in effect at global ``position`` of ``epoch`` (a weight schedule moves them).

        By default: where this process's pass in progress is (counting whole global steps),
        else the start of the next pass. None for a dataset with no streams.
        """
        if not self._mixed:
            return None
        if epoch is None or position is None:
            here = self.cursor.where()
            epoch = here[0] if epoch is None else epoch
            position = here[1] if position is None else position
        return self.cursor.order.weights_at(epoch, position)

    @property
    def num_shards(self) -> int:
        """Number of shards of all streams (as mosaicml-streaming's ``num_shards``)."""
        return len(self.shards)

    @property
    def column_names(self) -> tuple[str, ...]:
        return self.table.column_names

    # -- shards ---------------------------------------------------------------------
    def reader(self, shard: int):
        """The open reader of shard ``shard`` (downloaded, decompressed and opened on first use)."""
        return self.table.random_reader(shard)

    # -- random access --------------------------------------------------------------
    def get_item(self, sample_id: int, retry: int = 7) -> dict[str, Any]:
        """Sample ``sample_id`` (negative counts from the end)."""
        i = sample_id
        if i < 0:
            i += self.num_samples
        if not 0 <= i < self.num_samples:
            raise SampleIndexError(f"sample index {sample_id} is out of range for a dataset of {self.num_samples} samples")
        shard = bisect_right(self._ends, i)
        get = self._getters[shard] or self.table.getter(shard)
        return get(i - self._starts[shard])

    def __getitem__(self, key):
        if type(key) is int and 0 <= key < self.num_samples and self._inline_get:  # the hot path, inlined
            shard = bisect_right(self._ends, key)
            get = self._getters[shard] or self.table.getter(shard)
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
        """The world this process reads as (see :mod:`shardstream.engine.world`)."""
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
        self.check_columns(columns)
        prepare_worker()
        reading = self._reading(world, columns)
        if self.makes_own_samples():
            cls = type(self)
            made = self.__getitem__ if cls.__getitem__ is not StreamingDataset.__getitem__ else self.get_item
            return reading.made(made if columns is None else (lambda i: _only(made(i), columns)))
        return reading.samples()

    def iterate_batches(self, world: Optional[World] = None,
                        columns: Optional[Sequence[str]] = None) -> Iterator[dict[str, Any]]:
        """Like :meth:`iterate`, but yield each step's ``batch_size`` samples as one column batch.

        Batches are decoded with the vectorised batch decoder (:mod:`shardstream.format.batch`):
        numeric columns become arrays, fixed-shape arrays ``(batch, *shape)`` arrays,
        variable-length arrays :class:`~shardstream.Ragged`, other columns lists.
        """
        self.check_batchable(columns)  # before the pass begins, so a refused call leaves a pending resume alone
        prepare_worker()
        return self._reading(world, columns).batches()

    def get_batch(self, indices, columns: Optional[Sequence[str]] = None) -> dict[str, Any]:
        """Decode the samples at global ``indices`` into column arrays (see :mod:`shardstream.format.batch`)."""
        return batch_at(self.table, indices, columns)

    def batches(self, batch_size: Optional[int] = None, columns: Optional[Sequence[str]] = None,
                drop_last: bool = False, start: int = 0) -> Iterator[dict[str, Any]]:
        """Batches of ``batch_size`` samples (default: the dataset's) as column arrays.

        With ``shuffle=False``: a scan of the whole dataset in index order, from sample ``start``
        (the last batch is short unless ``drop_last``). With ``shuffle=True``: the next epoch in
        plan order, this process's share, like :meth:`iterate_batches` (every batch whole; a
        ``batch_size`` must equal the dataset's, and ``start`` is refused: resume a pass with
        :meth:`load_state_dict`).
        """
        bs = scan_size(self.batch_size, batch_size, start, self._shuffle)
        if not self._shuffle:
            return index_scan(self.table, bs, columns, drop_last, int(start))
        if self.batch_size is None:
            self.adopt_batch_size(bs)
        return self.iterate_batches(columns=columns)

    def _warn_batch_size(self, what: str, world: Optional[World] = None) -> None:
        if not self.__dict__.get("_warned_batch_size"):  # once per dataset (and per worker copy)
            self._warned_batch_size = True
            warn_unset_batch_size(self, what, world)

    def _reading(self, world: Optional[World], columns) -> PassReader:
        """Start the next pass for ``world`` (default: :meth:`detect_world`) and its reader."""
        world = world or self.detect_world()
        if self.batch_size is None and (world.readers > 1 or world.workers > 1):
            self._warn_batch_size(ONE_PER_STEP, world)
        current = self.cursor.begin(world)
        if not self.__dict__.get("_block_checked"):  # once per dataset (and per worker copy)
            self._block_checked = True
            warn_small_shuffle_block(current.plan, self.shard_sizes)
        first = self.table.cached and not self.__dict__.get("_working_set_checked")
        if first:  # once per dataset (and per worker copy)
            self._working_set_checked = True
        return PassReader(self.table, current, columns, predownload=self.predownload, threads=self.download_threads,
                          limit=self.cache_limit, shuffle=self._shuffle, check_working_set=first)

    def check_batchable(self, columns: Optional[Sequence[str]] = None) -> None:
        """Refuse column batches that would be wrong: unknown columns, streams whose columns differ, or
        a subclass whose samples are made by its own ``__getitem__`` / ``get_item`` (decoding raw
        columns would skip it)."""
        layouts = self.table.layouts()
        if len(layouts) > 1:
            raise InvalidArgumentError(
                f"the streams have different columns or encodings ({sorted(layouts)}), so their samples cannot "
                "share column batches; iterate samples and collate them yourself (a collate_fn)")
        self.check_columns(columns)
        if self.makes_own_samples():
            raise InvalidArgumentError(
                f"{type(self).__name__} overrides __getitem__ or get_item, which column batches would bypass; "
                "iterate samples instead (iter(ds), or StreamingDataLoader with batch_decode=False)"
            )

    def check_columns(self, columns: Optional[Sequence[str]]) -> None:
        """Refuse ``columns`` that are not a list of this dataset's column names."""
        if columns is None:
            return
        if isinstance(columns, str):
            raise InvalidArgumentError(f"columns={columns!r} must be a list of column names, e.g. [{columns!r}]")
        unknown = sorted(set(columns) - set(self.column_names))
        if unknown:
            raise InvalidArgumentError(f"columns {unknown} are not in this dataset (it has {list(self.column_names)})")

    def makes_own_samples(self) -> bool:
        """Whether a subclass makes samples with its own ``__getitem__`` or ``get_item``."""
        cls = type(self)
        return cls.__getitem__ is not StreamingDataset.__getitem__ or cls.get_item is not StreamingDataset.get_item

    # -- the shard cache (datasets with a remote) -------------------------------------------
    @property
    def cache_usage(self) -> int:
        """Bytes the cache directory holds for this dataset (shards, downloads in progress, index)."""
        return self.table.usage()

    def prepare_shard(self, shard_id: int, blocking: bool = True) -> bool:
        """Download shard ``shard_id`` unless it is present; with ``blocking=False`` return
        False at once if another process is downloading it. Safe across threads and processes;
        with a ``cache_limit`` it may evict the least recently used shards first."""
        self._check_shard(shard_id)
        if not self.table.pin(shard_id, must=True, blocking=blocking):
            return False
        self.table.unpin(shard_id)
        return True

    def evict_shard(self, shard_id: int) -> bool:
        """Delete shard ``shard_id`` from the cache unless a process is using it; True if it is gone."""
        self._check_shard(shard_id)
        self.table.release_held()
        return self.table.evict(shard_id)

    def evict_coldest_shard(self) -> Optional[int]:
        """Evict the least recently used shard that no process is using; its index, or None if none is."""
        self.table.release_held()
        return self.table.evict_coldest()

    def _check_shard(self, shard_id: int) -> None:
        if isinstance(shard_id, bool) or not isinstance(shard_id, (int, np.integer)) or not (
                0 <= shard_id < len(self.shards)):
            raise SampleIndexError(f"shard_id={shard_id!r} is not a shard of this dataset (0..{len(self.shards) - 1})")

    @property
    def next_epoch(self) -> int:
        """The epoch the next pass runs (unless a loaded state says otherwise)."""
        return self.cursor.next_epoch

    @next_epoch.setter
    def next_epoch(self, epoch: int) -> None:
        self.set_epoch(epoch)

    def set_epoch(self, epoch: int) -> None:
        """Make the next pass run ``epoch`` from its start (like ``DistributedSampler.set_epoch``)."""
        self.cursor.set_epoch(epoch)

    def epoch_plan(self, epoch: Optional[int] = None, world: Optional[World] = None):
        """The :class:`~shardstream.plan.EpochPlan` of ``epoch`` (default: the next) for ``world``."""
        return self.cursor.epoch_plan(epoch, world or self.detect_world())

    # -- resumption -------------------------------------------------------------------
    def state_dict(self, num_samples: Optional[int] = None, from_beginning: bool = True) -> dict[str, Any]:
        """A plain-JSON dict that resumes the epoch after ``num_samples`` consumed samples.

        ``num_samples`` counts the samples the whole job consumed this epoch (all ranks),
        from the epoch's start (``from_beginning=True``) or from where this run resumed.
        Leave it out when iterating in this process with no DataLoader workers: the
        samples this process yielded are counted (whole global steps when there are
        several ranks).
        """
        return self.cursor.state_dict(num_samples, from_beginning, self._world_now())

    def load_state_dict(self, obj: dict[str, Any]) -> None:
        """Resume from a :meth:`state_dict` at the next pass, on any world size.

        Refused with :class:`~shardstream.errors.IncompatibleStateError` if the state
        belongs to another dataset or to other order settings (the message says which).
        """
        self.cursor.load_state_dict(obj, self._world_now())

    def _world_now(self) -> World:
        cur = self.cursor.current
        return cur.world if cur is not None else self.detect_world()

    # -- pickling (DataLoader workers re-open shards on their side) ------------------
    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        for alias in ("_ends", "_starts", "_getters"):
            del state[alias]
        if self.world is None and self._parent_world is None:
            # DataLoader workers read as the rank that handed them this copy, even when the
            # rank's world came from a process group the workers cannot see
            try:
                state["_parent_world"] = rank_world(self.options.replication)
            except InvalidArgumentError:
                state["_parent_world"] = None
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._alias_table()


register_iterable(StreamingDataset)


def _only(sample: Any, columns: Sequence[str]) -> Any:
    """The ``columns`` of a sample a subclass made (as it is, if it is not a dict)."""
    return {k: v for k, v in sample.items() if k in columns} if isinstance(sample, dict) else sample
