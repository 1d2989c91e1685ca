"""``Stream``: one dataset of a mixture, with its weight and its own download knobs.

A stream is weighted in one of three ways (or not at all):

- ``proportion``: relative; every stream then gives one, and the epoch
  (``epoch_size``, default: all samples of all streams) is shared in these proportions;
- ``repeat``: absolute; this many passes over the stream per epoch (0.5 = half of it,
  2.5 = two whole copies and half of a third);
- ``choose``: absolute; this many samples of the stream per epoch.

Relative and absolute weights cannot be mixed. Streams with no weight take all their
samples once (absolute), or, with ``epoch_size`` and no weights at all, a share in
proportion to their size. :class:`WeightSchedule` makes the proportions move with the
run's position instead.
"""

from __future__ import annotations

import copy
import math
from typing import Optional, Sequence

import numpy as np

import os

from ..errors import CacheLimitError, InvalidArgumentError, NotADatasetError
from ..format.hashing import check_hash
from ..format.index import read_index
from ..keywords import checked_keywords
from ..plan.mix import SCHEDULE_KINDS, Schedule
from ..storage.cache import ShardCache
from ..storage.claim import within
from ..storage.fetch import Fetcher
from ..storage.fs import default_local, is_remote, join, local_path
from ..storage.index import local_index
from ..storage.shardset import LocalShards, ShardSet
from ..units import parse_count

_KNOBS = ("split", "download_retry", "download_timeout", "validate_hash", "keep_zip")


class Stream:
    """One dataset of a mixture (see the module docstring).

    ``remote``, ``local`` and ``split`` locate it as for a single dataset; the download
    knobs left as None take the :class:`~shardstream.StreamingDataset`'s values. After the
    dataset is built, ``dataset.streams`` holds copies with ``proportion``, ``repeat`` and
    ``choose`` filled in for epoch 0, and ``samples``, the stream's own size.
    """

    @checked_keywords()
    def __init__(self, *, remote: Optional[str] = None, local: Optional[str] = None, split: Optional[str] = None,
                 proportion: Optional[float] = None, repeat: Optional[float] = None,
                 choose: Optional[int | str] = None, download_retry: Optional[int] = None,
                 download_timeout: Optional[float] = None, validate_hash: Optional[str] = None,
                 keep_zip: Optional[bool] = None) -> None:
        given = [name for name, v in (("proportion", proportion), ("repeat", repeat), ("choose", choose))
                 if v is not None]
        if len(given) > 1:
            raise InvalidArgumentError(
                f"a Stream takes at most one of proportion, repeat and choose; got {', '.join(given)}")
        if remote is None and local is None:
            raise InvalidArgumentError("a Stream needs remote=... or local=... (or both)")
        self.remote = remote
        self.local = local
        self.split = split
        self.proportion = _non_negative("proportion", proportion)
        self.repeat = _non_negative("repeat", repeat)
        self.choose = None if choose is None else _count("choose", choose)
        self.weighting = given[0] if given else None
        self.download_retry = download_retry
        self.download_timeout = download_timeout
        self.validate_hash = validate_hash
        self.keep_zip = keep_zip
        self.samples: Optional[int] = None

    def knobs(self, defaults: dict) -> dict:
        """This stream's download knobs, each defaulting to the dataset's."""
        return {k: defaults[k] if getattr(self, k) is None else getattr(self, k) for k in _KNOBS}

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}={v!r}" for k, v in (("remote", self.remote), ("local", self.local),
                                                     ("split", self.split), ("proportion", self.proportion),
                                                     ("repeat", self.repeat), ("choose", self.choose))
                           if v is not None)
        return f"Stream({fields})"


class WeightSchedule:
    """Stream proportions that move with the run's position (samples since the run began).

    ``points``: ``[(position, [w_0, w_1, ...]), ...]`` with increasing positions (ints or
    strings like ``"10M"``), one weight per stream. Before the first point its weights
    hold, after the last point the last. ``kind``: ``"step"`` (jump at each point),
    ``"linear"`` or ``"cosine"`` (a half cosine between consecutive points). A step is
    ``global batch`` samples, so step ``k`` is position ``k * batch_size * ranks``.
    """

    def __init__(self, points: Sequence, kind: str = "linear") -> None:
        if kind not in SCHEDULE_KINDS:
            raise InvalidArgumentError(f"kind={kind!r} is not one of {', '.join(SCHEDULE_KINDS)}")
        parsed = []
        for item in points:
            if not isinstance(item, (tuple, list)) or len(item) != 2:
                raise InvalidArgumentError(f"each schedule point is (position, weights); got {item!r}")
            parsed.append((_count("schedule position", item[0]), [float(w) for w in item[1]]))
        self.points = parsed
        self.kind = kind
        self.schedule = Schedule(parsed, kind)

    def describe(self) -> dict:
        return {"kind": self.kind, "points": [[p, list(w)] for p, w in self.points]}


def resolve_weights(streams: Sequence[Stream], samples: np.ndarray, epoch_size: Optional[int],
                    schedule: Optional[WeightSchedule]):
    """``(choose, schedule, epoch_size)`` for the plan: absolute counts, or a schedule of proportions."""
    kinds = {s.weighting for s in streams}
    if schedule is not None:
        if kinds != {None}:
            raise InvalidArgumentError(
                "with weight_schedule=..., the schedule gives the proportions; leave proportion, repeat and "
                "choose out of the streams")
        if schedule.schedule.num_streams != len(streams):
            raise InvalidArgumentError(f"weight_schedule has {schedule.schedule.num_streams} weights per point, "
                                       f"but there are {len(streams)} streams")
        return None, schedule.schedule, epoch_size
    if "proportion" in kinds:
        if kinds == {"proportion", None}:
            missing = [i for i, s in enumerate(streams) if s.weighting is None]
            raise InvalidArgumentError(
                f"streams {missing} have no proportion while others do; relative weights need one on every stream")
        if kinds != {"proportion"}:
            raise InvalidArgumentError(
                "streams weighted relatively (proportion) and absolutely (repeat, choose) cannot be mixed; "
                "give every stream a proportion, or every stream a repeat or choose (or none)")
        props = [s.proportion for s in streams]
        if sum(props) <= 0:
            raise InvalidArgumentError("the streams' proportions sum to 0; give at least one a positive proportion")
        return None, Schedule([(0, props)]), epoch_size
    if epoch_size is not None:
        if kinds != {None}:
            raise InvalidArgumentError(
                "epoch_size applies to relative weights: give every stream a proportion (or no weights, to sample "
                "in proportion to their sizes), or leave epoch_size out with repeat and choose")
        return None, Schedule([(0, samples.astype(np.float64))]), epoch_size
    choose = []
    for s, n in zip(streams, samples.tolist()):
        if s.weighting == "repeat":
            choose.append(int(s.repeat * n))
        elif s.weighting == "choose":
            choose.append(s.choose)
        else:
            choose.append(n)
    return np.asarray(choose, np.int64), None, None


def described(streams: Sequence[Stream], samples: np.ndarray, counts: np.ndarray) -> list[Stream]:
    """Copies of ``streams`` with their weights for ``counts`` filled in (as mosaicml-streaming does)."""
    total = max(int(counts.sum()), 1)
    out = []
    for s, n, c in zip(streams, samples.tolist(), counts.tolist()):
        d = copy.copy(s)
        d.samples, d.choose, d.repeat, d.proportion = n, c, c / n, c / total
        out.append(d)
    return out


def _non_negative(name: str, value) -> Optional[float]:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise InvalidArgumentError(f"{name}={value!r} must be a finite number >= 0")
    return float(value)


def _count(name: str, value) -> int:
    n = parse_count(value, name)
    if n < 0:
        raise InvalidArgumentError(f"{name}={value!r} must be >= 0")
    return n


class StreamSource:
    """An opened stream: where it lives, its shards and the knobs it reads them with."""

    def __init__(self, stream: Optional[Stream], remote: Optional[str], local: str, dirname: str, shards: list,
                 fetcher, knobs: dict):
        self.stream = stream
        self.remote = remote
        self.local = local
        self.dirname = dirname
        self.shards = shards
        self.fetcher = fetcher
        self.knobs = knobs
        self.samples = sum(s.samples for s in shards)


def check_streams(streams) -> list[Stream]:
    if isinstance(streams, (str, bytes)) or not isinstance(streams, Sequence) or not streams:
        raise InvalidArgumentError(f"streams={streams!r} must be a non-empty list of shardstream.Stream")
    bad = [i for i, s in enumerate(streams) if not isinstance(s, Stream)]
    if bad:
        raise InvalidArgumentError(
            f"streams[{bad[0]}] is a {type(streams[bad[0]]).__name__}, not a shardstream.Stream; build it with "
            "shardstream.Stream(remote=..., local=..., proportion=...)")
    return list(streams)


def open_source(remote: Optional[str], local: Optional[str], knobs: dict, storage_options: Optional[dict],
                stream: Optional[Stream] = None) -> StreamSource:
    """Locate one dataset and read its index (fetching it once per machine for a remote)."""
    if knobs["validate_hash"]:
        check_hash(knobs["validate_hash"])
    remote, local, dirname = locate(remote, local, knobs["split"])
    if remote is not None:
        if os.path.isfile(local):
            raise NotADatasetError(
                f"local={local!r} is a file; with remote= it is the directory where the shards are cached (it is "
                "created if missing): give a directory, or leave local out to cache under SHARDSTREAM_CACHE_DIR")
        fetcher = Fetcher(join(remote, knobs["split"]), storage_options, knobs["download_retry"], knobs["download_timeout"])
        shards = local_index(dirname, fetcher)
    else:
        fetcher, shards = None, read_index(dirname)
    return StreamSource(stream, remote, local, dirname, shards, fetcher, knobs)


def open_sources(streams: list[Stream], defaults: dict, storage_options: Optional[dict]) -> list[StreamSource]:
    """Every stream opened with its knobs (each defaulting to the dataset's); two streams from
    different places that would share a directory are refused before anything is opened."""
    places: list[tuple[Optional[str], str]] = []
    for st in streams:
        remote, _, dirname = locate(st.remote, st.local, st.knobs(defaults)["split"])
        for other_remote, other_dirname in places:
            if other_dirname == dirname and other_remote != remote:
                raise InvalidArgumentError(
                    f"two streams keep their shards in {dirname!r} but come from different places "
                    f"({other_remote or 'local'} and {remote or 'local'}); give each its own local directory")
        places.append((remote, dirname))
    return [open_source(st.remote, st.local, st.knobs(defaults), storage_options, st) for st in streams]


def locate(remote: Optional[str], local: Optional[str], split: Optional[str]) -> tuple[Optional[str], str, str]:
    """(remote URL or None, local directory, the directory of ``split`` in it): see :func:`locations`."""
    remote, local = locations(remote, local)
    return remote, local, os.path.join(local, split) if split else local


def source_cache(src: StreamSource, limit: Optional[int]) -> ShardCache:
    """The shard cache of one opened dataset (``limit`` only applies with a remote)."""
    k = src.knobs
    wait = k["download_timeout"] * (k["download_retry"] + 1) + 60
    return ShardCache(src.dirname, src.shards, src.fetcher, limit if src.fetcher else None, keep_zip=k["keep_zip"],
                      validate_hash=k["validate_hash"], wait=wait)


def shard_set(sources: list[StreamSource], limit: Optional[int]) -> ShardSet:
    """One store per stream; ``limit`` (bytes) is split among the streams with a remote by their size."""
    stores = [source_cache(src, None) if src.remote is not None
              else LocalShards(src.dirname, src.shards, src.knobs["validate_hash"]) for src in sources]
    caches = [(store, sum(store.footprint(i) for i in range(len(store.shards))))
              for src, store in zip(sources, stores) if src.remote is not None]
    if limit is not None and caches:
        total = max(sum(size for _, size in caches), 1)
        # the smallest limit whose share, for every stream, covers that stream's minimum
        need = max(-(-store.minimum_limit() * total // max(size, 1)) for store, size in caches)
        if limit < need:
            raise CacheLimitError(
                f"cache_limit={limit} bytes is too small for {len(caches)} streams with a remote: it is split among "
                f"them by size, and each needs room for one shard in use plus the next one arriving; raise "
                f"cache_limit to at least {need} bytes (several times that for shuffled epochs)")
        for store, size in caches:
            store.limit = max(1, limit * size // total)
    return ShardSet(stores)


def locations(remote: Optional[str], local: Optional[str]) -> tuple[Optional[str], str]:
    """(remote URL or None, local directory). A remote that is a plain path / ``file://`` URL of the
    local directory (by its real path, through links) or of a directory holding it means no remote:
    the dataset is read in place from the remote's directory. With no ``local`` a remote gets its own
    directory under the cache root."""
    if remote is not None and not isinstance(remote, str):
        raise InvalidArgumentError(f"remote={remote!r} must be a URL string such as 's3://bucket/dataset'")
    if local is not None:
        local = os.path.expanduser(str(local))
        if remote is not None and not is_remote(remote) and within(local, local_path(remote)):
            # local= is the remote's own directory (also through a link) or lies inside it: a cache there
            # would delete the only copy, so the dataset is read in place
            root = local_path(remote)
            return None, local if within(root, local) else root
    if remote is None:
        if local is None:
            raise InvalidArgumentError(
                "local=... is required without remote=...: the directory that holds index.json and the shards"
            )
        return None, local
    return remote.rstrip("/"), local if local is not None else default_local(remote)


