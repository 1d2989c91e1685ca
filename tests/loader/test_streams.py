"""Datasets mixed from several streams: per-epoch counts, errors, knobs, sampling, batching,
resumption and weight schedules, observed through iteration over real MDS datasets.

Every stream is written with a ``src`` column naming it, so a sample's stream is read off the
sample itself; ``id`` is the sample's index inside its stream.
"""

from __future__ import annotations

import json
import math
import os
import pickle
import warnings
from collections import Counter

import numpy as np
import pytest

import shardstream
from shardstream import InvalidArgumentError, MDSWriter, Stream, StreamingDataset, WeightSchedule, World
from shardstream.errors import HashMismatchError, IncompatibleStateError, UnsupportedFormatError
from shardstream.testing import check_resumes_identically, read_world, write_dataset

SIZES = {"a": 40, "b": 25, "c": 60}
COLUMNS = {"id": "int", "src": "str"}


def _tagged(n: int, tag: str):
    return ({"id": i, "src": tag} for i in range(n))


@pytest.fixture(scope="module")
def paths(tmp_path_factory) -> dict[str, str]:
    """Three streams ``a`` (40 samples), ``b`` (25), ``c`` (60), several shards each."""
    root = tmp_path_factory.mktemp("streams")
    out = {tag: write_dataset(str(root / tag), COLUMNS, _tagged(n, tag), size_limit=250) for tag, n in SIZES.items()}
    for tag, path in out.items():
        assert len(StreamingDataset(local=path).shards) >= 3, tag
    return out


def key(sample) -> tuple[str, int]:
    return sample["src"], int(sample["id"])


def keys(samples) -> list[tuple[str, int]]:
    return [key(s) for s in samples]


def per_stream(samples) -> Counter:
    return Counter(s["src"] for s in samples)


def occurrences(samples, tag: str) -> Counter:
    """How many times each sample of stream ``tag`` appears."""
    return Counter(int(s["id"]) for s in samples if s["src"] == tag)


def largest_remainder(total: int, weights) -> list[int]:
    """Integers summing to ``total`` in proportion to ``weights`` (ties to the lower index)."""
    w = [float(x) for x in weights]
    quotas = [x * total / sum(w) for x in w]
    out = [math.floor(q) for q in quotas]
    order = sorted(range(len(w)), key=lambda i: (-(quotas[i] - out[i]), i))
    for i in order[:total - sum(out)]:
        out[i] += 1
    return out


def check_copies(counts: Counter, n: int, want: int) -> None:
    """``want`` draws from a stream of ``n`` samples: whole copies plus a partial copy (each sample
    appears q or q+1 times, exactly ``want % n`` of them q+1 times); a subset without repeats when
    down-sampling."""
    q, r = divmod(want, n)
    assert sum(counts.values()) == want
    assert all(0 <= i < n for i in counts)
    if q == 0:
        assert max(counts.values(), default=0) <= 1, "a down-sampled stream repeats samples"
        assert len(counts) == r
        return
    full = Counter({i: counts.get(i, 0) for i in range(n)})
    assert set(full.values()) <= {q, q + 1}, sorted(Counter(full.values()).items())
    assert sum(1 for v in full.values() if v == q + 1) == r


# -- 1. per-epoch counts ---------------------------------------------------------------------------

@pytest.mark.parametrize("epoch_size,total", [(100, 100), ("1k", 1000), ("0.3k", 300), ("1_000", 1000)])
def test_proportion_shares_epoch_size(paths, epoch_size, total):
    streams = [Stream(local=paths["a"], proportion=1), Stream(local=paths["b"], proportion=3),
               Stream(local=paths["c"], proportion=0.5)]
    ds = StreamingDataset(streams=streams, epoch_size=epoch_size, shuffle=True)
    want = largest_remainder(total, [1, 3, 0.5])
    assert ds.epoch_size == total
    assert ds.stream_counts(0).tolist() == want
    samples = list(ds)
    assert len(samples) == total
    assert [per_stream(samples)[t] for t in "abc"] == want
    for tag, n in zip("abc", want):
        check_copies(occurrences(samples, tag), SIZES[tag], n)


def test_proportion_without_epoch_size_takes_the_total_size(paths):
    ds = StreamingDataset(streams=[Stream(local=paths["a"], proportion=1), Stream(local=paths["c"], proportion=1)])
    total = SIZES["a"] + SIZES["c"]
    assert ds.epoch_size == total
    samples = list(ds)
    assert [per_stream(samples)[t] for t in "ac"] == [50, 50]
    check_copies(occurrences(samples, "a"), SIZES["a"], 50)  # up
    check_copies(occurrences(samples, "c"), SIZES["c"], 50)  # down


def test_a_zero_proportion_takes_nothing(paths):
    ds = StreamingDataset(streams=[Stream(local=paths["a"], proportion=0), Stream(local=paths["b"], proportion=2)],
                          epoch_size=30)
    assert ds.stream_counts(0).tolist() == [0, 30]
    assert per_stream(ds) == Counter({"b": 30})


@pytest.mark.parametrize("repeat", [0.5, 1, 2.5])
def test_repeat(paths, repeat):
    ds = StreamingDataset(streams=[Stream(local=paths["a"], repeat=repeat), Stream(local=paths["b"], repeat=repeat)],
                          shuffle=True)
    want = [int(repeat * SIZES["a"]), int(repeat * SIZES["b"])]
    assert ds.stream_counts(0).tolist() == want and ds.epoch_size == sum(want)
    samples = list(ds)
    assert len(samples) == sum(want)
    for tag, n in zip("ab", want):
        check_copies(occurrences(samples, tag), SIZES[tag], n)


@pytest.mark.parametrize("choose", [7, 25, 63, "0.1k"])
def test_choose(paths, choose):
    n = 100 if choose == "0.1k" else choose
    ds = StreamingDataset(streams=[Stream(local=paths["b"], choose=choose), Stream(local=paths["a"])], shuffle=True)
    assert ds.stream_counts(0).tolist() == [n, SIZES["a"]]
    samples = list(ds)
    check_copies(occurrences(samples, "b"), SIZES["b"], n)
    check_copies(occurrences(samples, "a"), SIZES["a"], SIZES["a"])


def test_repeat_and_choose_together(paths):
    ds = StreamingDataset(streams=[Stream(local=paths["a"], repeat=2.5), Stream(local=paths["b"], choose=10),
                                   Stream(local=paths["c"])])
    assert ds.stream_counts(0).tolist() == [100, 10, 60] and ds.epoch_size == 170
    samples = list(ds)
    assert [per_stream(samples)[t] for t in "abc"] == [100, 10, 60]
    check_copies(occurrences(samples, "a"), SIZES["a"], 100)
    check_copies(occurrences(samples, "b"), SIZES["b"], 10)
    check_copies(occurrences(samples, "c"), SIZES["c"], 60)


def test_no_weights_takes_every_sample_once(paths):
    ds = StreamingDataset(streams=[Stream(local=paths[t]) for t in "abc"], shuffle=True)
    assert ds.epoch_size == len(ds) == sum(SIZES.values())
    assert sorted(keys(ds)) == sorted((t, i) for t, n in SIZES.items() for i in range(n))


@pytest.mark.parametrize("epoch_size", [50, 250, "0.5k"])
def test_no_weights_with_epoch_size_is_proportional_to_sizes(paths, epoch_size):
    total = 500 if epoch_size == "0.5k" else epoch_size
    ds = StreamingDataset(streams=[Stream(local=paths[t]) for t in "abc"], epoch_size=epoch_size, shuffle=True)
    want = largest_remainder(total, [SIZES[t] for t in "abc"])
    assert ds.stream_counts(0).tolist() == want
    samples = list(ds)
    assert [per_stream(samples)[t] for t in "abc"] == want
    for tag, n in zip("abc", want):
        check_copies(occurrences(samples, tag), SIZES[tag], n)


def test_counts_hold_every_epoch(paths):
    ds = StreamingDataset(streams=[Stream(local=paths["a"], proportion=2), Stream(local=paths["c"], proportion=1)],
                          epoch_size=99, shuffle=True)
    for epoch in range(3):
        samples = list(ds)
        assert [per_stream(samples)[t] for t in "ac"] == [66, 33], epoch
        check_copies(occurrences(samples, "a"), SIZES["a"], 66)
        check_copies(occurrences(samples, "c"), SIZES["c"], 33)
    assert ds.next_epoch == 3


@pytest.mark.parametrize("canonical", [1, 2, 3, 8])
@pytest.mark.parametrize("method", ["random", "per_stream"])
def test_counts_hold_with_several_canonical_nodes(paths, canonical, method):
    """Each stream's draw is read whole, whatever the number of regions its own plan could have."""
    streams = [Stream(local=paths["a"], choose=25), Stream(local=paths["b"]), Stream(local=paths["c"], choose=50)]
    ds = StreamingDataset(streams=streams, num_canonical_nodes=canonical, batching_method=method, batch_size=5,
                          shuffle=True)
    samples = list(ds)
    for tag, n in zip("abc", (25, 25, 50)):
        check_copies(occurrences(samples, tag), SIZES[tag], n)


def test_streams_taken_once_on_two_nodes_yield_each_sample(paths):
    got = []
    for node in range(2):
        ds = StreamingDataset(streams=[Stream(local=paths["a"]), Stream(local=paths["b"])], batch_size=5)
        got += keys(ds.iterate(World(num_nodes=2, node=node)))
    assert len(got) == 70  # 65 samples, then the last global batch of 10 completed from the epoch's start
    assert set(got) == {(t, i) for t in "ab" for i in range(SIZES[t])}
    assert sorted(Counter(got).values()) == [1] * 60 + [2] * 5


def test_described_streams_are_filled_copies(paths):
    given = [Stream(local=paths["a"], proportion=1), Stream(local=paths["b"], proportion=3)]
    ds = StreamingDataset(streams=given, epoch_size=100)
    assert [s is g for s, g in zip(ds.streams, given)] == [False, False]
    assert given[0].samples is None and given[0].choose is None and given[0].proportion == 1  # left alone
    a, b = ds.streams
    assert (a.samples, a.choose, b.samples, b.choose) == (40, 25, 25, 75)
    assert a.proportion == pytest.approx(0.25) and b.proportion == pytest.approx(0.75)
    assert a.repeat == pytest.approx(25 / 40) and b.repeat == pytest.approx(3.0)
    assert a.local == paths["a"] and "proportion" in repr(a)


def test_a_single_dataset_has_one_stream_and_no_mixture(paths):
    ds = StreamingDataset(local=paths["a"])
    (s,) = ds.streams
    assert (s.local, s.samples, s.choose, s.repeat, s.proportion) == (paths["a"], SIZES["a"], SIZES["a"], 1.0, 1.0)
    assert ds.stream_counts() is None and ds.mixture_weights() is None
    assert ds.epoch_size == len(ds) == SIZES["a"]


def test_random_access_reads_the_streams_end_to_end(paths):
    ds = StreamingDataset(streams=[Stream(local=paths[t], proportion=1) for t in "abc"], epoch_size=30)
    assert len(ds) == sum(SIZES.values())
    want = [(t, i) for t in "abc" for i in range(SIZES[t])]
    assert [key(ds[i]) for i in range(len(ds))] == want
    assert key(ds[-1]) == ("c", SIZES["c"] - 1)
    assert keys(ds[[40, 0, 65]]) == [("b", 0), ("a", 0), ("c", 0)]


def test_a_mixed_dataset_pickles(paths):
    ds = StreamingDataset(streams=[Stream(local=paths["a"], proportion=1), Stream(local=paths["b"], proportion=2)],
                          epoch_size=60, shuffle=True)
    ds[3]  # readers are open
    clone = pickle.loads(pickle.dumps(ds))
    assert keys(clone) == keys(ds)
    assert clone.stream_counts(1).tolist() == [20, 40]


def test_a_zero_choose_leaves_a_stream_out(paths):
    ds = StreamingDataset(streams=[Stream(local=paths["a"], choose=0), Stream(local=paths["b"], choose=8)],
                          batching_method="per_stream", batch_size=4, shuffle=True)
    got = list(ds)
    assert per_stream(got) == Counter({"b": 8}) and len(set(keys(got))) == 8


def test_a_schedule_without_epoch_size_takes_the_total_size(paths):
    ds = StreamingDataset(streams=[Stream(local=paths["a"]), Stream(local=paths["b"])],
                          weight_schedule=WeightSchedule([(0, [1, 1])]))
    assert ds.epoch_size == 65 and ds.stream_counts(0).tolist() == [33, 32]
    assert [per_stream(ds)[t] for t in "ab"] == [33, 32]


def test_pad_and_drop_tails(paths):
    def make(tail):
        streams = [Stream(local=paths["a"], proportion=1), Stream(local=paths["b"], proportion=3)]
        return StreamingDataset(streams=streams, epoch_size=100, batch_size=8, shuffle=True, epoch_tail=tail)
    padded, dropped = keys(make("pad")), keys(make("drop"))
    assert len(padded) == 104 and padded[100:] == padded[:4]  # the last global batch is completed from the start
    assert len(dropped) == 96 and dropped == padded[:96]


# -- 2. errors --------------------------------------------------------------------------------------

def _streams(paths, *weights):
    return [Stream(local=paths[t], **w) for t, w in zip("abc", weights)]


BAD_DATASETS = {
    "proportion with repeat": (lambda p: dict(streams=_streams(p, {"proportion": 1}, {"repeat": 2})),
                               "cannot be mixed"),
    "proportion with choose": (lambda p: dict(streams=_streams(p, {"choose": 5}, {"proportion": 1})),
                               "cannot be mixed"),
    "proportion on some streams only": (lambda p: dict(streams=_streams(p, {"proportion": 1}, {})),
                                        "no proportion while others do"),
    "epoch_size with repeat": (lambda p: dict(streams=_streams(p, {"repeat": 1}, {}), epoch_size=50),
                               "epoch_size"),
    "epoch_size with choose": (lambda p: dict(streams=_streams(p, {"choose": 3}, {"choose": 4}), epoch_size=50),
                               "epoch_size"),
    "streams with local": (lambda p: dict(streams=_streams(p, {}), local=p["a"]), "either streams"),
    "streams with remote": (lambda p: dict(streams=_streams(p, {}), remote="s3://bucket/x"), "either streams"),
    "a dict in streams": (lambda p: dict(streams=[Stream(local=p["a"]), {"local": p["b"]}]),
                          r"streams\[1\] is a dict, not a shardstream.Stream"),
    "a path in streams": (lambda p: dict(streams=[p["a"]]), r"streams\[0\] is a str"),
    "a lone Stream": (lambda p: dict(streams=Stream(local=p["a"])), "non-empty list"),
    "a string as streams": (lambda p: dict(streams=p["a"]), "non-empty list"),
    "empty streams": (lambda p: dict(streams=[]), "non-empty list"),
    "all proportions zero": (lambda p: dict(streams=_streams(p, {"proportion": 0}, {"proportion": 0})), "sum to 0"),
    "epoch_size word": (lambda p: dict(streams=_streams(p, {}), epoch_size="lots"), "epoch_size"),
    "epoch_size unit": (lambda p: dict(streams=_streams(p, {}), epoch_size="10q"), "epoch_size"),
    "epoch_size zero": (lambda p: dict(streams=_streams(p, {}), epoch_size=0), "epoch_size"),
    "epoch_size negative": (lambda p: dict(streams=_streams(p, {}), epoch_size=-5), "epoch_size"),
    "epoch_size bool": (lambda p: dict(streams=_streams(p, {}), epoch_size=True), "epoch_size"),
    "schedule with proportions": (lambda p: dict(streams=_streams(p, {"proportion": 1}, {"proportion": 1}),
                                                 weight_schedule=WeightSchedule([(0, [1, 1])])),
                                  "weight_schedule"),
    "schedule with repeat": (lambda p: dict(streams=_streams(p, {}, {"repeat": 2}),
                                            weight_schedule=WeightSchedule([(0, [1, 1])])), "weight_schedule"),
    "schedule with too many weights": (lambda p: dict(streams=_streams(p, {}, {}),
                                                      weight_schedule=WeightSchedule([(0, [1, 1, 1])])),
                                       "3 weights per point, but there are 2 streams"),
    "schedule with too few weights": (lambda p: dict(streams=_streams(p, {}, {}, {}),
                                                     weight_schedule=WeightSchedule([(0, [1, 1]), (10, [1, 2])])),
                                      "2 weights per point, but there are 3 streams"),
    "bad batching_method": (lambda p: dict(streams=_streams(p, {}), batching_method="zigzag"), "batching_method"),
    "bad sampling_method": (lambda p: dict(streams=_streams(p, {}), sampling_method="lucky"), "sampling_method"),
    "bad sampling_granularity": (lambda p: dict(streams=_streams(p, {}), sampling_granularity=0),
                                 "sampling_granularity"),
}


@pytest.mark.parametrize("case", list(BAD_DATASETS))
def test_bad_mixtures_are_refused(paths, case):
    make, match = BAD_DATASETS[case]
    with pytest.raises(InvalidArgumentError, match=match):
        StreamingDataset(**make(paths))


BAD_STREAMS = {
    "proportion and repeat": (dict(proportion=1, repeat=2), "at most one of proportion, repeat and choose; "
                                                            "got proportion, repeat"),
    "repeat and choose": (dict(repeat=1, choose=3), "got repeat, choose"),
    "all three": (dict(proportion=1, repeat=1, choose=1), "got proportion, repeat, choose"),
    "negative proportion": (dict(proportion=-0.5), "proportion=-0.5 must be a finite number >= 0"),
    "NaN proportion": (dict(proportion=float("nan")), "proportion=nan"),
    "infinite proportion": (dict(proportion=float("inf")), "proportion=inf"),
    "string proportion": (dict(proportion="1"), "proportion='1'"),
    "bool proportion": (dict(proportion=True), "proportion=True"),
    "negative repeat": (dict(repeat=-1), "repeat=-1"),
    "NaN repeat": (dict(repeat=float("nan")), "repeat=nan"),
    "negative choose": (dict(choose=-3), "choose=-3"),
    "bad choose string": (dict(choose="many"), "choose"),
}


@pytest.mark.parametrize("case", list(BAD_STREAMS))
def test_bad_streams_are_refused(paths, case):
    kwargs, match = BAD_STREAMS[case]
    with pytest.raises(InvalidArgumentError, match=match):
        Stream(local=paths["a"], **kwargs)


def test_a_stream_needs_a_location():
    with pytest.raises(FileExistsError, match="Could not create a temporary local directory"):
        Stream(proportion=1)  # no location: a new temporary directory, and the temporary directory exists


@pytest.mark.parametrize("points,kind,match", [
    ([(0, [1, 0])], "smooth", "kind='smooth'"),
    ([(10, [1, 0]), (5, [0, 1])], "linear", "increasing"),
    ([(0, [1, 0]), (0, [0, 1])], "linear", "increasing"),
    ([(0, [0, 0])], "step", "positive sum"),
    ([(0, [-1, 2])], "step", "non-negative"),
    ([(0, [1, 0], "extra")], "step", r"\(position, weights\)"),
    ([5], "step", r"\(position, weights\)"),
    ([], "step", "at least one"),
])
def test_bad_weight_schedules_are_refused(points, kind, match):
    with pytest.raises(InvalidArgumentError, match=match):
        WeightSchedule(points, kind=kind)


def test_a_stream_with_no_samples_is_refused(paths, tmp_path):
    with MDSWriter(out=str(tmp_path / "empty"), columns=COLUMNS):
        pass
    with pytest.raises(RuntimeError, match=r"Stream contains no samples: .*empty"):
        StreamingDataset(streams=[Stream(local=paths["a"], proportion=1), Stream(local=str(tmp_path / "empty"),
                                                                                   proportion=1)])


def test_stratified_refuses_a_stream_that_gets_no_share_of_a_batch(paths):
    ds = StreamingDataset(streams=[Stream(local=paths["a"], proportion=1), Stream(local=paths["b"], proportion=99)],
                          epoch_size=100, batch_size=4, batching_method="stratified")
    with pytest.raises(InvalidArgumentError, match=r"streams \[0\] get no sample of a global batch of 4"):
        list(ds)


# -- 3. stream knobs default from the dataset's ------------------------------------------------------

@pytest.fixture(scope="module")
def split_roots(tmp_path_factory) -> tuple[str, str]:
    """Two roots, each with ``train`` and ``val`` splits tagged ``<root>-<split>``."""
    base = tmp_path_factory.mktemp("splits")
    roots = []
    for name in ("r1", "r2"):
        for split, n in (("train", 12), ("val", 5)):
            write_dataset(str(base / name / split), COLUMNS, _tagged(n, f"{name}-{split}"), size_limit=200)
        roots.append(str(base / name))
    return roots[0], roots[1]


def test_dataset_split_applies_to_streams_without_one(split_roots):
    r1, r2 = split_roots
    ds = StreamingDataset(streams=[Stream(local=r1), Stream(local=r2)], split="val")
    assert per_stream(ds) == Counter({"r1-val": 5, "r2-val": 5})


def test_a_streams_own_split_wins(split_roots):
    r1, r2 = split_roots
    ds = StreamingDataset(streams=[Stream(local=r1), Stream(local=r2, split="val")], split="train")
    assert per_stream(ds) == Counter({"r1-train": 12, "r2-val": 5})
    ds = StreamingDataset(streams=[Stream(local=r1, split="train"), Stream(local=r2, split="val")])
    assert per_stream(ds) == Counter({"r1-train": 12, "r2-val": 5})


def test_without_any_split_the_stream_directory_is_read(split_roots, paths):
    r1, _ = split_roots
    with pytest.raises(shardstream.IndexNotFoundError):
        StreamingDataset(streams=[Stream(local=paths["a"]), Stream(local=r1)])


@pytest.fixture
def corrupt(tmp_path) -> str:
    """A stream whose shard 1 has one flipped byte, with xxh64 digests in its index."""
    out = write_dataset(str(tmp_path / "corrupt"), COLUMNS, _tagged(30, "x"), size_limit=250, hashes=["xxh64"])
    path = os.path.join(out, "shard.00001.mds")
    data = bytearray(open(path, "rb").read())
    assert data[-1:] == b"x"
    data[-1] ^= 0x01  # "x" -> "y": still decodes, but no longer matches the digest
    open(path, "wb").write(bytes(data))
    return out


def test_validate_hash_defaults_from_the_dataset(paths, corrupt):
    assert len(list(StreamingDataset(streams=[Stream(local=paths["a"]), Stream(local=corrupt)]))) == 70
    with pytest.raises(HashMismatchError, match="shard.00001.mds"):
        list(StreamingDataset(streams=[Stream(local=corrupt)], validate_hash="xxh64"))
    # the dataset's value reaches every stream: stream a was written without digests
    with pytest.raises(HashMismatchError, match="records no xxh64 digest"):
        list(StreamingDataset(streams=[Stream(local=paths["a"]), Stream(local=corrupt)], validate_hash="xxh64"))
    # a stream's own value applies to that stream only
    with pytest.raises(HashMismatchError, match="shard.00001.mds"):
        list(StreamingDataset(streams=[Stream(local=paths["a"]), Stream(local=corrupt, validate_hash="xxh64")]))


def test_a_streams_unknown_hash_is_refused(paths):
    with pytest.raises(UnsupportedFormatError, match="unknown hash 'nohash'"):
        StreamingDataset(streams=[Stream(local=paths["a"], validate_hash="nohash")])


# -- 4. balanced vs fixed sampling --------------------------------------------------------------------

def _picked(ds, epochs: int) -> list[list[int]]:
    """Per epoch, the sorted ids of stream ``a`` (down-sampled) the epoch used."""
    out = []
    for _ in range(epochs):
        got = [int(s["id"]) for s in ds if s["src"] == "a"]
        assert len(got) == len(set(got)) == 15
        out.append(sorted(got))
    return out


def _down_sampled(paths, method: str, **kwargs):
    return StreamingDataset(streams=[Stream(local=paths["a"], choose=15), Stream(local=paths["b"])],
                            sampling_method=method, shuffle=True, **kwargs)


def test_fixed_sampling_takes_the_same_samples_every_epoch(paths):
    ds = _down_sampled(paths, "fixed")
    picked = _picked(ds, 4)
    assert all(p == picked[0] for p in picked)
    ds.set_epoch(0)
    orders = [keys(ds) for _ in range(2)]
    assert orders[0] != orders[1]  # the same samples, shuffled differently


def test_balanced_sampling_takes_other_samples_each_epoch(paths):
    picked = _picked(_down_sampled(paths, "balanced"), 4)
    assert len({tuple(p) for p in picked}) == 4
    assert len(set().union(*map(set, picked))) > 15


def test_sampling_is_deterministic(paths):
    assert keys(_down_sampled(paths, "balanced")) == keys(_down_sampled(paths, "balanced"))
    assert keys(_down_sampled(paths, "balanced")) != keys(_down_sampled(paths, "balanced", shuffle_seed=1))


def test_fixed_up_sampling_repeats_the_same_partial_copy(paths):
    def extra(ds):  # the samples drawn one more time than the others
        counts = occurrences(list(ds), "b")
        return {i for i, c in counts.items() if c == 3}
    fixed = StreamingDataset(streams=[Stream(local=paths["b"], repeat=2.4)], sampling_method="fixed", shuffle=True)
    assert extra(fixed) == extra(fixed) and len(extra(fixed)) == 10
    balanced = StreamingDataset(streams=[Stream(local=paths["b"], repeat=2.4)], shuffle=True)
    assert len({frozenset(extra(balanced)) for _ in range(3)}) > 1


def test_sampling_granularity_takes_runs_of_consecutive_samples(paths):
    shard_sizes = [s.samples for s in StreamingDataset(local=paths["c"]).shards]
    starts = np.concatenate([[0], np.cumsum(shard_sizes)[:-1]])
    for g in (1, 3, 4):
        ds = StreamingDataset(streams=[Stream(local=paths["c"], choose=24)], sampling_granularity=g)
        got = sorted(int(s["id"]) for s in ds)
        assert len(got) == len(set(got)) == 24
        granules = Counter()
        for i in got:
            shard = int(np.searchsorted(starts, i, side="right") - 1)
            granules[(shard, (i - starts[shard]) // g)] += 1
        full = sum(1 for (shard, k), n in granules.items() if n == min(g, shard_sizes[shard] - k * g))
        assert len(granules) - full <= 1, (g, got)  # every granule whole, but one cut by rounding


# -- 5. batching methods, seen through iteration -----------------------------------------------------

def _mixed(paths, method, bs, epoch_size=120, weights=(1, 2), **kwargs):
    kwargs.setdefault("num_canonical_nodes", 2)

    def make(batch_size=bs):
        return StreamingDataset(streams=[Stream(local=paths[t], proportion=w) for t, w in zip("abc", weights)],
                                epoch_size=epoch_size, shuffle=True, batch_size=batch_size, batching_method=method,
                                **kwargs)
    return make


def _global_order(make, world: tuple[int, int, int]) -> list[tuple[str, int]]:
    """The (stream, id) order that ``world`` (nodes, ranks per node, workers) delivers, ranks put together."""
    g = make().batch_size * world[0] * world[1]
    return read_world(make, None, g, world, key)


def _tally(order, tag: str | None = None) -> Counter:
    """Samples per stream of an order of keys, or with ``tag``, occurrences of each of its samples."""
    if tag is None:
        return Counter(src for src, _ in order)
    return Counter(i for src, i in order if src == tag)


def _runs(batch) -> list[str]:
    """The streams of ``batch``, one entry per run of consecutive samples of one stream."""
    out = []
    for src, _ in batch:
        if not out or out[-1] != src:
            out.append(src)
    return out


@pytest.mark.parametrize("world", [(2, 1, 0), (1, 3, 2), (1, 1, 0)])
def test_stratified_global_batches_hold_each_streams_share(paths, world):
    ranks = world[0] * world[1]
    make = _mixed(paths, "stratified", 12 // ranks)
    order = _global_order(make, world)
    assert len(order) == 120
    for k in range(10):
        batch = order[k * 12:(k + 1) * 12]
        assert [src for src, _ in batch] == ["a"] * 4 + ["b"] * 8, k
    assert _tally(order) == Counter({"a": 40, "b": 80})
    assert _global_order(make, world) == order


def test_stratified_shares_round_by_largest_remainder(paths):
    make = _mixed(paths, "stratified", 5, epoch_size=100, weights=(1, 1, 2))
    order = _global_order(make, (1, 2, 0))
    for k in range(10):
        batch = order[k * 10:(k + 1) * 10]
        assert Counter(src for src, _ in batch) == Counter({"a": 3, "b": 2, "c": 5})  # 2.5, 2.5, 5
        assert _runs(batch) == ["a", "b", "c"]


def test_the_world_may_be_given_to_the_constructor(paths):
    make = _mixed(paths, "per_stream", 4, epoch_size=96, weights=(1, 2))
    order = _global_order(make, (1, 2, 0))
    ranks = []
    for rank in range(2):
        ds = StreamingDataset(streams=[Stream(local=paths["a"], proportion=1), Stream(local=paths["b"], proportion=2)],
                              epoch_size=96, shuffle=True, batch_size=4, batching_method="per_stream",
                              num_canonical_nodes=2, world=World(ranks_per_node=2, local_rank=rank))
        ranks.append(keys(ds))
    assert [k for step in range(12) for r in ranks for k in r[step * 4:step * 4 + 4]] == order


def test_stratified_epoch_is_steps_times_share(paths):
    """Shares are rounded per batch, not per epoch: 10 steps of (3, 2, 5) give 30, 20 and 50 samples
    while stream_counts() says 25, 25, 50; a stream that runs out starts its epoch's samples again."""
    ds = _mixed(paths, "stratified", 10, epoch_size=100, weights=(1, 1, 2), num_canonical_nodes=1)()
    assert ds.stream_counts(0).tolist() == [25, 25, 50]
    order = keys(ds)
    assert _tally(order) == Counter({"a": 30, "b": 20, "c": 50})
    a = [i for src, i in order if src == "a"]
    assert len(set(a[:25])) == 25 and a[25:] == a[:5]
    b = [i for src, i in order if src == "b"]
    assert len(set(b)) == 20
    check_copies(_tally(order, "c"), SIZES["c"], 50)


@pytest.mark.parametrize("kind", ["step", "linear", "cosine"])
def test_stratified_steps_under_a_schedule_take_the_weights_at_their_middle(paths, kind):
    ds = _scheduled(paths, kind, "stratified", batch_size=4)
    for epoch in range(4):
        mids = epoch * 100 + (np.arange(25) + 0.5) * 4
        shares = [largest_remainder(4, w) for w in _expected_weights(SCHEDULE_POINTS, kind, mids)]
        order = keys(ds)
        assert len(order) == 100
        for k, share in enumerate(shares):
            batch = order[k * 4:(k + 1) * 4]
            assert [src for src, _ in batch] == [t for t, n in zip("abc", share) for _ in range(n)], (epoch, k)


@pytest.mark.parametrize("world", [(2, 1, 0), (1, 2, 3), (2, 2, 1)])
def test_per_stream_global_batches_come_from_one_stream(paths, world):
    ranks = world[0] * world[1]
    g = 8
    make = _mixed(paths, "per_stream", g // ranks, epoch_size=96, weights=(1, 2))  # 32 and 64: whole batches
    order = _global_order(make, world)
    assert len(order) == 96
    batches = [order[k:k + g] for k in range(0, 96, g)]
    assert all(len(_runs(b)) == 1 for b in batches)
    assert Counter(b[0][0] for b in batches) == Counter({"a": 4, "b": 8})
    assert len(_runs([(b[0][0], 0) for b in batches])) > 2  # the streams' batches are interleaved
    check_copies(_tally(order, "b"), SIZES["b"], 64)


@pytest.mark.parametrize("world", [(1, 2, 0), (2, 2, 0), (1, 4, 2), (4, 1, 0)])
def test_device_per_stream_device_batches_come_from_one_stream(paths, world):
    bs = 4
    make = _mixed(paths, "device_per_stream", bs, epoch_size=96, weights=(1, 2))
    order = _global_order(make, world)
    assert len(order) == 96
    device = [order[k:k + bs] for k in range(0, 96, bs)]
    assert all(len(_runs(b)) == 1 for b in device)
    assert Counter(b[0][0] for b in device) == Counter({"a": 8, "b": 16})
    ranks = world[0] * world[1]
    globals_ = [order[k:k + bs * ranks] for k in range(0, 96, bs * ranks)]
    assert any(len(set(s for s, _ in b)) > 1 for b in globals_)  # a global batch may mix streams
    # the epoch is the same for any number of ranks with that device batch
    assert order == _global_order(make, (1, 1, 0))


def test_per_stream_pads_each_streams_last_batch(paths):
    make = _mixed(paths, "per_stream", 8, epoch_size=100, weights=(1, 3))  # 25 and 75 samples
    order = keys(make())
    batches = [order[k:k + 8] for k in range(0, len(order), 8)]
    assert all(len(_runs(b)) == 1 for b in batches)
    assert Counter(b[0][0] for b in batches) == Counter({"a": 4, "b": 10})  # ceil(25 / 8), ceil(75 / 8)


@pytest.mark.parametrize("shuffle", [False, True])
def test_random_batching_keeps_every_stretch_near_the_weights(paths, shuffle):
    ds = StreamingDataset(streams=[Stream(local=paths["a"], proportion=1), Stream(local=paths["b"], proportion=3)],
                          epoch_size=400, shuffle=shuffle)
    seq = [s["src"] for s in ds]
    a_so_far = np.cumsum([x == "a" for x in seq])
    expected = np.arange(1, len(seq) + 1) * 0.25
    assert np.abs(a_so_far - expected).max() <= 3


def test_random_batching_order_does_not_depend_on_the_world(paths):
    make = _mixed(paths, "random", 6, epoch_size=96, weights=(1, 2))
    one = _global_order(make, (1, 1, 0))
    assert len(one) == 96
    assert _global_order(_mixed(paths, "random", 3, epoch_size=96, weights=(1, 2)), (1, 2, 0)) == one
    assert _global_order(_mixed(paths, "random", 3, epoch_size=96, weights=(1, 2)), (2, 2, 2)) == one


# -- 6. resumption -----------------------------------------------------------------------------------

WORLDS = [(1, 1, 0), (1, 2, 0), (2, 1, 2), (1, 4, 1)]


def _resumable(paths, method="random", epoch=0, **kwargs):
    streams = kwargs.pop("streams", None) or [
        Stream(local=paths["a"], proportion=2), Stream(local=paths["b"], proportion=1),
        Stream(local=paths["c"], proportion=1)]

    def make(bs):
        ds = StreamingDataset(streams=streams, epoch_size=kwargs.get("epoch_size", 96), shuffle=True, batch_size=bs,
                              batching_method=method, shuffle_seed=kwargs.get("seed", 3),
                              sampling_method=kwargs.get("sampling", "balanced"),
                              weight_schedule=kwargs.get("schedule"))
        ds.next_epoch = epoch
        return ds
    return make


@pytest.mark.parametrize("epoch", [0, 1])
@pytest.mark.parametrize("method", ["random", "stratified", "per_stream"])
def test_resumes_identically_at_every_step(paths, method, epoch):
    report = check_resumes_identically(_resumable(paths, method, epoch), global_batch=8, worlds=WORLDS)
    assert report.steps == 12 and report.worlds == len(WORLDS)


def test_device_per_stream_resumes_identically_with_any_workers(paths):
    make = _resumable(paths, "device_per_stream", 1)
    report = check_resumes_identically(make, global_batch=8, worlds=[(1, 1, 0), (1, 1, 2), (1, 1, 3)])
    assert report.steps == 12


@pytest.mark.parametrize("sampling", ["balanced", "fixed"])
def test_up_and_down_sampled_mixture_resumes_identically(paths, sampling):
    streams = [Stream(local=paths["a"], repeat=1.3), Stream(local=paths["b"], choose=11),
               Stream(local=paths["c"], repeat=0.25)]  # 52 + 11 + 15 = 78 samples
    make = _resumable(paths, "random", 1, streams=streams, sampling=sampling, epoch_size=None)
    check_resumes_identically(make, global_batch=6, worlds=[(1, 1, 0), (1, 3, 2), (2, 1, 1)])


def test_scheduled_mixture_resumes_identically(paths):
    schedule = WeightSchedule([(0, [1, 0, 0]), (100, [0, 1, 1]), (200, [1, 1, 1])], kind="cosine")
    streams = [Stream(local=paths[t]) for t in "abc"]
    for epoch in (0, 1):
        make = _resumable(paths, "random", epoch, streams=streams, schedule=schedule)
        report = check_resumes_identically(make, global_batch=8, worlds=[(1, 1, 0), (2, 1, 2)], steps=range(0, 12, 3))
        assert report.steps == 4


def _state_after(make, bs: int, n: int, epoch: int = 0, world: World = World()) -> tuple[dict, list]:
    ds = make(bs)
    ds.set_epoch(epoch)
    it = ds.iterate(world)
    before = [key(next(it)) for _ in range(n)]
    state = ds.state_dict()
    assert json.loads(json.dumps(state)) == state
    return json.loads(json.dumps(state)), before


def test_state_is_plain_json_and_names_the_mixture(paths):
    state, _ = _state_after(_resumable(paths), 4, 12)
    assert state["sample_in_epoch"] == 12 and state["mixing_unit"] is None
    mixture = state["mixture"]
    assert mixture["streams"] == [{"samples": SIZES[t], "shards": len(StreamingDataset(local=paths[t]).shards)}
                                  for t in "abc"]
    assert mixture["weights"]["epoch_size"] == 96
    assert mixture["weights"]["proportions"] == pytest.approx([0.5, 0.25, 0.25])
    assert mixture["batching_method"] == "random" and mixture["sampling_method"] == "balanced"
    state, _ = _state_after(_resumable(paths, "per_stream"), 4, 12)
    assert state["mixing_unit"] == 4


@pytest.mark.parametrize("method", ["random", "per_stream", "device_per_stream"])
def test_state_at_epoch_boundaries_resumes_into_the_next_epoch(paths, method):
    make = _resumable(paths, method)
    ref = make(4)
    epochs = [keys(ref.iterate(World())) for _ in range(4)]
    assert all(len(e) == 96 for e in epochs) and len({tuple(e) for e in epochs}) == 4
    ds = make(4)
    assert keys(ds.iterate(World())) == epochs[0]
    for epoch in range(3):
        state = json.loads(json.dumps(ds.state_dict()))
        assert (state["epoch"], state["sample_in_epoch"]) == (epoch, 96)
        fresh = make(4)
        fresh.load_state_dict(state)
        assert fresh.next_epoch == epoch
        assert keys(fresh.iterate(World())) == epochs[epoch + 1], epoch
        assert fresh.next_epoch == epoch + 2
        ds = fresh


def test_state_mid_epoch_resumes_then_runs_the_following_epochs(paths):
    make = _resumable(paths, "stratified")
    ref = make(4)
    epochs = [keys(ref.iterate(World())) for _ in range(3)]
    state, before = _state_after(make, 4, 40, epoch=1)
    assert before == epochs[1][:40]
    rest = read_world(lambda bs: _loaded(make, bs, state), None, 4, (2, 1, 0), key)
    assert before + rest == epochs[1]
    # one of those two ranks, reused: the rest of epoch 1, then epoch 2, as its share of the global order
    ds = _loaded(make, 2, state)
    world = World(num_nodes=2, node=1)
    share = [k for step in range(24) for k in epochs[2][step * 4 + 2:step * 4 + 4]]
    assert keys(ds.iterate(world)) == [k for step in range(10, 24) for k in epochs[1][step * 4 + 2:step * 4 + 4]]
    assert ds.next_epoch == 2
    assert keys(ds.iterate(world)) == share


def _loaded(make, bs, state):
    ds = make(bs)
    ds.load_state_dict(state)
    return ds


@pytest.mark.parametrize("method", ["per_stream", "stratified"])
def test_global_batch_methods_refuse_another_global_batch(paths, method):
    make = _resumable(paths, method)
    state, before = _state_after(make, 4, 12)
    for bs, world in ((8, World()), (4, World(num_nodes=2)), (1, World(ranks_per_node=2))):
        ds = make(bs)
        ds.load_state_dict(state)
        with pytest.raises(IncompatibleStateError, match=f"batching_method='{method}'.*global batch") as info:
            ds.iterate(world)
        assert "4 samples" in str(info.value) and f"has {bs * world.world_size}" in str(info.value)
    # the same global batch over other ranks is fine
    got = read_world(lambda bs: _loaded(make, bs, state), None, 4, (1, 2, 2), key)
    assert before + got == keys(make(4).iterate(World()))


@pytest.mark.parametrize("method", ["per_stream", "stratified", "device_per_stream"])
def test_another_batch_is_accepted_at_an_epoch_boundary(paths, method):
    make = _resumable(paths, method)
    ds = make(4)
    list(ds.iterate(World()))
    state = ds.state_dict()
    other = make(8)
    other.load_state_dict(state)
    ref = make(8)
    ref.set_epoch(1)
    assert keys(other.iterate(World())) == keys(ref.iterate(World()))


@pytest.mark.parametrize("method", ["per_stream", "stratified", "device_per_stream"])
def test_a_state_at_the_start_of_an_epoch_takes_any_batch(paths, method):
    """Nothing consumed yet: the epoch starts afresh with this run's batches (device_per_stream's
    device batches included, which must each still come from one stream)."""
    start = json.loads(json.dumps(_resumable(paths, method)(4).state_dict()))
    assert start["sample_in_epoch"] == 0
    other = _resumable(paths, method)(8)
    other.load_state_dict(start)
    got = keys(other.iterate(World()))
    if method == "device_per_stream":
        assert all(len(_runs(got[k:k + 8])) == 1 for k in range(0, len(got), 8))
    assert got == keys(_resumable(paths, method)(8).iterate(World()))


def test_device_per_stream_resumes_on_other_ranks_with_the_same_batch_size(paths):
    make = _resumable(paths, "device_per_stream")
    full = keys(make(4).iterate(World()))
    state, before = _state_after(make, 4, 12)  # three device batches
    for world in ((1, 2, 0), (2, 2, 1), (1, 3, 2)):
        ranks = world[0] * world[1]
        got = read_world(lambda bs: _loaded(make, bs, state), None, 4 * ranks, world, key)
        assert before + got[:len(full) - 12] == full, world
    ds = make(2)
    ds.load_state_dict(state)
    with pytest.raises(IncompatibleStateError, match="batching_method='device_per_stream'.*device batch"):
        ds.iterate(World(num_nodes=2))


def test_random_batching_resumes_with_another_global_batch(paths):
    make = _resumable(paths)
    full = keys(make(4).iterate(World()))
    state, before = _state_after(make, 4, 12)
    ds = make(6)
    ds.load_state_dict(state)
    assert (before + keys(ds.iterate(World())))[:96] == full


def test_single_dataset_state_is_refused_by_a_mixture_and_back(paths):
    single = lambda bs: StreamingDataset(local=paths["a"], shuffle=True, batch_size=bs)  # noqa: E731
    one_stream = lambda bs: StreamingDataset(streams=[Stream(local=paths["a"])], shuffle=True,  # noqa: E731
                                             batch_size=bs)
    s_single, _ = _state_after(single, 4, 8)
    s_mixed, _ = _state_after(one_stream, 4, 8)
    with pytest.raises(IncompatibleStateError, match="read from one stream, and this dataset mixes streams"):
        one_stream(4).load_state_dict(s_single)
    with pytest.raises(IncompatibleStateError, match="mixed from streams, and this dataset reads one"):
        single(4).load_state_dict(s_mixed)
    three, _ = _state_after(_resumable(paths), 4, 8)
    with pytest.raises(IncompatibleStateError):
        single(4).load_state_dict(three)


def _three(paths, *weights, kind="proportion"):
    return [Stream(local=paths[t], **{kind: w}) for t, w in zip("abc", weights)]


OTHER_MIXTURES = {
    "other proportions": (lambda p: dict(streams=_three(p, 1, 1, 1)), "weights: state has"),
    "other epoch_size": (lambda p: dict(epoch_size=120), "weights: state has"),
    "absolute weights": (lambda p: dict(streams=_three(p, 48, 24, 24, kind="choose"), epoch_size=None),
                         "weights: state has"),
    "batching_method": (lambda p: dict(batching_method="stratified"),
                        "batching_method: state has 'random', this dataset has 'stratified'"),
    "sampling_method": (lambda p: dict(sampling_method="fixed"),
                        "sampling_method: state has 'balanced', this dataset has 'fixed'"),
    "sampling_granularity": (lambda p: dict(sampling_granularity=2),
                             "sampling_granularity: state has 1, this dataset has 2"),
}


@pytest.mark.parametrize("case", list(OTHER_MIXTURES))
def test_a_state_of_another_mixture_is_refused(paths, case):
    other, what = OTHER_MIXTURES[case]
    base = dict(streams=_three(paths, 2, 1, 1), epoch_size=96, shuffle=True, batch_size=4)
    state, _ = _state_after(lambda bs: StreamingDataset(**base), 4, 8)
    with pytest.raises(IncompatibleStateError, match="another mixture") as info:
        StreamingDataset(**{**base, **other(paths)}).load_state_dict(state)
    assert what in str(info.value)
    StreamingDataset(**base).load_state_dict(state)  # the same mixture is fine,
    StreamingDataset(**{**base, "streams": _three(paths, 4, 2, 2)}).load_state_dict(state)  # scaled alike too


# -- 7. weight schedules -----------------------------------------------------------------------------

def _ramp(kind: str, tau: np.ndarray) -> np.ndarray:
    tau = np.clip(tau, 0.0, 1.0)
    if kind == "step":
        return np.zeros_like(tau)
    if kind == "linear":
        return tau
    return (1 - np.cos(np.pi * tau)) / 2


def _expected_weights(points, kind, r: np.ndarray) -> np.ndarray:
    """The schedule's normalised weights at run positions ``r`` (all >= the first point), from its definition."""
    pos = np.array([p for p, _ in points], float)
    vec = np.array([np.asarray(w, float) / np.sum(w) for _, w in points])
    r = np.asarray(r, float)
    i = np.clip(np.searchsorted(pos, r, side="right") - 1, 0, len(pos) - 1)
    nxt = np.minimum(i + 1, len(pos) - 1)
    span = np.where(nxt > i, pos[nxt] - pos[i], 1.0)
    alpha = np.where(nxt > i, _ramp(kind, (r - pos[i]) / span), 0.0)
    return vec[i] + alpha[:, None] * (vec[nxt] - vec[i])


def _expected_counts(points, kind, epoch: int, n: int) -> list[int]:
    """``n`` samples split by the schedule's integral over ``[epoch * n, (epoch + 1) * n)`` (midpoint rule)."""
    steps = 20000
    r = epoch * n + (np.arange(steps) + 0.5) * n / steps
    area = _expected_weights(points, kind, r).sum(0) * n / steps
    return largest_remainder(n, area)


SCHEDULE = [(0, [1, 0, 1]), (150, [0, 1, 1]), ("0.3k", [0, 1, 3])]
SCHEDULE_POINTS = [(0, [1, 0, 1]), (150, [0, 1, 1]), (300, [0, 1, 3])]


def _scheduled(paths, kind, method="random", **kwargs):
    return StreamingDataset(streams=[Stream(local=paths[t]) for t in "abc"], epoch_size=100, shuffle=True,
                            weight_schedule=WeightSchedule(SCHEDULE, kind=kind), batching_method=method, **kwargs)


@pytest.mark.parametrize("kind", ["step", "linear", "cosine"])
def test_schedule_weights_move_with_the_position(paths, kind):
    ds = _scheduled(paths, kind)
    for epoch in range(5):
        for position in (0, 1, 25, 49, 50, 51, 75, 99):
            want = _expected_weights(SCHEDULE_POINTS, kind, np.array([epoch * 100 + position]))[0]
            got = ds.mixture_weights(position, epoch)
            np.testing.assert_allclose(got, want, atol=1e-12, err_msg=f"{kind} epoch {epoch} position {position}")
    # spot checks against hand-computed values
    w = ds.mixture_weights(75, 0)
    if kind == "step":
        np.testing.assert_allclose(w, [0.5, 0, 0.5])
    elif kind in ("linear", "cosine"):  # half way from the first point to the second
        np.testing.assert_allclose(w, [0.25, 0.25, 0.5])
    np.testing.assert_allclose(ds.mixture_weights(50, 1), [0, 0.5, 0.5])  # at the second point
    np.testing.assert_allclose(ds.mixture_weights(0, 3), [0, 0.25, 0.75])  # at the last point
    np.testing.assert_allclose(ds.mixture_weights(99, 40), [0, 0.25, 0.75])  # after it


def test_cosine_and_linear_differ_between_points(paths):
    lin, cos = _scheduled(paths, "linear"), _scheduled(paths, "cosine")
    assert lin.mixture_weights(25, 0)[1] == pytest.approx(0.5 * 25 / 150)
    assert cos.mixture_weights(25, 0)[1] == pytest.approx(0.5 * (1 - math.cos(math.pi * 25 / 150)) / 2)
    assert cos.mixture_weights(25, 0)[1] < lin.mixture_weights(25, 0)[1]


@pytest.mark.parametrize("kind", ["step", "linear", "cosine"])
def test_schedule_counts_follow_its_integral(paths, kind):
    ds = _scheduled(paths, kind, batch_size=4)
    for epoch in range(4):
        want = _expected_counts(SCHEDULE_POINTS, kind, epoch, 100)
        assert ds.stream_counts(epoch).tolist() == want, (kind, epoch)
        assert ds.next_epoch == epoch and ds.stream_counts().tolist() == want
        samples = list(ds)
        assert len(samples) == 100
        assert [per_stream(samples)[t] for t in "abc"] == want, (kind, epoch)
        for tag, n in zip("abc", want):
            check_copies(occurrences(samples, tag), SIZES[tag], n)


def test_schedule_counts_hand_computed(paths):
    ds = _scheduled(paths, "linear")
    # epoch 0: b's weight climbs 0 -> 1/3 of 0.5 over [0, 100): area 100 * 100 / 300 / 2 = 16.67
    assert ds.stream_counts(0).tolist() == [33, 17, 50]
    ds = _scheduled(paths, "step")
    assert ds.stream_counts(0).tolist() == [50, 0, 50]
    assert ds.stream_counts(1).tolist() == [25, 25, 50]  # [100, 150) then [150, 200)


def test_a_ramp_within_an_epoch_bunches_each_stream_where_its_weight_is_high(paths):
    schedule = WeightSchedule([(0, [1, 0]), (200, [0, 1])], kind="linear")
    ds = StreamingDataset(streams=[Stream(local=paths["a"]), Stream(local=paths["c"])], epoch_size=200,
                          weight_schedule=schedule, shuffle=True)
    seq = [s["src"] for s in ds]
    assert Counter(seq) == Counter({"a": 100, "c": 100})
    first, last = Counter(seq[:40]), Counter(seq[-40:])
    assert first["a"] >= 32 and last["c"] >= 32  # expected 36 of 40 at either end


def test_mixture_weights_follow_the_pass_in_progress(paths):
    ds = _scheduled(paths, "linear", batch_size=5)
    np.testing.assert_allclose(ds.mixture_weights(), ds.mixture_weights(0, 0))
    it = ds.iterate(World())
    for _ in range(37):
        next(it)
    np.testing.assert_allclose(ds.mixture_weights(), ds.mixture_weights(37, 0))
    list(it)
    ds2 = _scheduled(paths, "linear", batch_size=5)
    it = ds2.iterate(World(num_nodes=2))
    for _ in range(12):  # two whole global steps of 10, and a part of the third
        next(it)
    np.testing.assert_allclose(ds2.mixture_weights(), ds2.mixture_weights(20, 0))


def test_schedule_positions_accept_count_strings(paths):
    a = StreamingDataset(streams=[Stream(local=paths["a"]), Stream(local=paths["b"])], epoch_size=40,
                         weight_schedule=WeightSchedule([("0k", [1, 0]), ("0.1k", [0, 1])]))
    b = StreamingDataset(streams=[Stream(local=paths["a"]), Stream(local=paths["b"])], epoch_size=40,
                         weight_schedule=WeightSchedule([(0, [1, 0]), (100, [0, 1])]))
    assert a.stream_counts(1).tolist() == b.stream_counts(1).tolist() == [16, 24]  # b: (80^2 - 40^2) / 200
    assert keys(a) == keys(b)


def test_absolute_weights_report_constant_weights(paths):
    ds = StreamingDataset(streams=[Stream(local=paths["a"], repeat=0.5), Stream(local=paths["b"], choose=30)])
    np.testing.assert_allclose(ds.mixture_weights(), [0.4, 0.6])
    np.testing.assert_allclose(ds.mixture_weights(10, 7), [0.4, 0.6])
    assert ds.stream_counts(5).tolist() == [20, 30]


@pytest.mark.parametrize("method", ["stratified", "per_stream", "device_per_stream"])
def test_a_state_inside_a_unit_resumes_there_on_the_same_batch(paths, method):
    def make(ranks=1):
        return StreamingDataset(streams=_streams(paths, {"proportion": 1}, {"proportion": 1}), batch_size=10,
                                batching_method=method, shuffle=True, world=World(ranks_per_node=ranks))

    want = [(s["src"], s["id"]) for s in make()]
    ds = make()
    ds.load_state_dict(make().state_dict(num_samples=45))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing is read again
        got = [(s["src"], s["id"]) for s in ds]
    assert want[:45] + got == want
    if method != "device_per_stream":
        return
    # another global batch with the same device batch (two ranks) opens a new plan at a unit's start
    ds = make(2)
    ds.load_state_dict(make().state_dict(num_samples=45))
    with pytest.warns(UserWarning, match="5 samples into a unit of 10"):
        got = [(s["src"], s["id"]) for s in ds]
    assert got[:10] == want[40:50]


@pytest.mark.parametrize("method", ["stratified", "per_stream", "device_per_stream"])
def test_batch_methods_need_a_batch_size(paths, method):
    ds = StreamingDataset(streams=_streams(paths, {}, {}), batching_method=method)
    with pytest.raises(InvalidArgumentError, match="needs batch_size"):
        next(iter(ds))
