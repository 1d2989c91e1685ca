"""``Stream``: one dataset of a mixture, with its weight and its own reading options.

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
import os
import tempfile
from typing import Optional, Sequence

import numpy as np

from ..errors import InvalidArgumentError, NotYetSupportedError, TemporaryDirectoryExistsError
from ..format.source import get_format
from ..keywords import checked_keywords
from ..plan.mix import SCHEDULE_KINDS, Schedule
from ..storage.options import StreamOptions
from ..units import parse_count


class Stream:
    """One dataset of a mixture (see the module docstring).

    ``remote``, ``local`` and ``split`` locate it as for a single dataset; ``format`` names
    its format of shards (``"mds"`` unless another one is registered, see
    :func:`~shardstream.format.source.register_format`); the reading options left as None
    take the :class:`~shardstream.StreamingDataset`'s values. After the dataset is built,
    ``dataset.streams`` holds copies with ``proportion``, ``repeat`` and ``choose`` filled in
    for epoch 0, and ``samples``, the stream's own size.
    """

    @checked_keywords()
    def __init__(self, *, remote: Optional[str] = None, local: Optional[str] = None, split: Optional[str] = None,
                 proportion: Optional[float] = None, repeat: Optional[float] = None,
                 choose: Optional[int | str] = None, download_retry: Optional[int] = None,
                 download_timeout: Optional[float] = None, validate_hash: Optional[str] = None,
                 keep_zip: Optional[bool] = None, format: Optional[str] = None,
                 columns: Optional[Sequence[str]] = None, on_bad_rows: Optional[str] = None) -> None:
        given = [name for name, v in (("proportion", proportion), ("repeat", repeat), ("choose", choose))
                 if v is not None]
        if len(given) > 1:
            raise InvalidArgumentError(
                f"a Stream takes at most one of proportion, repeat and choose; got {', '.join(given)}")
        if remote is None and local is None:
            local = _new_temporary_local(split)
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
        if format is not None:
            get_format(format)  # an unknown name is refused here, with the known ones
        self.format = format
        if isinstance(columns, str):
            raise InvalidArgumentError(f"columns={columns!r} must be a list of column names, e.g. [{columns!r}]")
        self.columns = None if columns is None else tuple(columns)
        self.on_bad_rows = on_bad_rows
        self.samples: Optional[int] = None

    def options(self, defaults: StreamOptions) -> StreamOptions:
        """This stream's reading options, each one it leaves as None taken from ``defaults`` (the dataset's)."""
        return defaults.with_overrides(split=self.split, download_retry=self.download_retry,
                                       download_timeout=self.download_timeout, validate_hash=self.validate_hash,
                                       keep_zip=self.keep_zip, format=self.format, columns=self.columns,
                                       on_bad_rows=self.on_bad_rows)

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}={v!r}" for k, v in (("remote", self.remote), ("local", self.local),
                                                     ("split", self.split), ("format", self.format),
                                                     ("proportion", self.proportion),
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


def one_stream(stream: Optional[Stream], samples: int, **where) -> list[Stream]:
    """``dataset.streams`` of a dataset read from one source, as mosaicml-streaming gives it: a copy of
    the stream the registry built (or a ``Stream(**where)`` describing the source), taking all of it."""
    s = copy.copy(stream) if stream is not None else Stream(**where)
    s.samples, s.choose, s.repeat, s.proportion = samples, samples, 1.0, 1.0
    return [s]


def _new_temporary_local(split: Optional[str]) -> str:
    """``Stream()`` with neither remote nor local: a new directory in the temporary directory (its
    ``split`` subdirectory), made now, as mosaicml-streaming does; one that exists is refused."""
    path = os.path.join(tempfile.gettempdir(), "", split or "")
    try:
        os.makedirs(path)
    except FileExistsError:
        raise TemporaryDirectoryExistsError(
            f"Could not create a temporary local directory {path} because it already exists: Stream() with no "
            "remote and no local makes a new one. Pass local= (the directory of the dataset), or delete this "
            "directory and retry") from None
    return path


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


# mosaicml-streaming's Stream methods that download or read shards: a subclass's versions would never run
UNCALLED_HOOKS = ("_download_file", "_decompress_shard_part", "_prepare_shard_part", "prepare_shard", "get_shards",
                  "set_up_local", "get_index_size", "apply_default", "_get_temporary_directory")


def refuse_uncalled_hooks(cls: type) -> None:
    """Refuse a Stream subclass that overrides a mosaicml-streaming hook shardstream never calls."""
    hooks = [h for h in UNCALLED_HOOKS if getattr(cls, h, None) is not getattr(Stream, h, None)]
    if hooks:
        raise NotYetSupportedError(
            f"{cls.__name__} overrides {hooks}, mosaicml-streaming's hooks for downloading and reading shards; "
            "shardstream downloads (through fsspec: pass storage_options=) and reads shards itself and would "
            "never call them. Point the stream at its data with remote=/local= in __init__ instead")


def check_streams(streams) -> list[Stream]:
    if isinstance(streams, (str, bytes)) or not isinstance(streams, Sequence) or not streams:
        raise InvalidArgumentError(f"streams={streams!r} must be a non-empty list of shardstream.Stream")
    bad = [i for i, s in enumerate(streams) if not isinstance(s, Stream)]
    if bad:
        raise InvalidArgumentError(
            f"streams[{bad[0]}] is a {type(streams[bad[0]]).__name__}, not a shardstream.Stream; build it with "
            "shardstream.Stream(remote=..., local=..., proportion=...)")
    for s in streams:
        refuse_uncalled_hooks(type(s))
    return list(streams)


def places(streams, remote, local, defaults: StreamOptions, mixed: bool, single: Optional[Stream] = None) -> list[tuple]:
    """``(stream or None, remote, local, options)`` of each stream to open (one without streams).
    ``single``: the one stream the streams registry built for a dataset given no ``streams``."""
    if not mixed:
        if single is not None:
            return [(single, single.remote, single.local, single.options(defaults))]
        return [(None, remote, local, defaults)]
    if streams is not None and (remote is not None or local is not None):
        raise InvalidArgumentError("give either streams=[...] or remote=/local=, not both")
    streams = check_streams(streams if streams is not None else [single or Stream(remote=remote, local=local)])
    return [(st, st.remote, st.local, st.options(defaults)) for st in streams]
