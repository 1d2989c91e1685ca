"""Sequence packing: the packer's layout rules, and the pack stage's exact resume and redistribution."""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardstream.errors import DocumentTooLongError, IncompatibleStateError, InvalidArgumentError
from shardstream.engine.stage import ReaderContext, Stage
from shardstream.text.pack import Pack
from shardstream.text.packstage import PackStage

BASE = 1_000_000  # token t of document d is BASE + 1000 * d + t: every token says where it came from


def doc(d: int, n: int, mask: bool = False) -> dict:
    row = {"input_ids": BASE + 1000 * d + np.arange(n, dtype=np.int64), "text": f"document {d}"}
    if mask:
        row["loss_mask"] = (np.arange(n) % 3 != 0).astype(np.int8)
    return row


def docs(lengths, mask=False) -> list[dict]:
    return [doc(d, n, mask and d % 2 == 0) for d, n in enumerate(lengths)]


def tokens(rows) -> list[int]:
    """The real (non-pad) tokens of packed rows, in order."""
    return [int(t) for r in rows for t in r["input_ids"][r["segment_ids"] > 0]]


def all_tokens(rows_in, limit=None) -> list[int]:
    return [int(t) for r in rows_in for t in r["input_ids"][:limit]]


class ListSource(Stage):
    """A root stage over ``rows`` (every key's row), reading the keys ``order`` in turn."""

    def __init__(self, rows: dict, order: list) -> None:
        super().__init__(None, ReaderContext())
        self.rows, self.order, self.pos = rows, list(order), 0

    def next(self):
        if self.pos >= len(self.order):
            raise StopIteration
        self.pos += 1
        key = self.order[self.pos - 1]
        return key, self.rows[key]

    def get_state(self) -> dict:
        return {"pos": self.pos}

    def reset(self, state=None) -> None:
        self.pos = state["pos"] if state else 0

    def recreate(self, keys: list) -> list:
        return [self.rows[k] for k in keys]

    def locate(self, key) -> str:
        return f"row {key!r} of the list"

    def close(self) -> None:
        pass


def keyed(rows: list, tuple_keys: bool = False) -> dict:
    return {(("m", (i,), 0) if tuple_keys else i): row for i, row in enumerate(rows)}


def chain(rows: dict, pack: Pack, order=None) -> PackStage:
    stage = PackStage(ListSource(rows, list(rows) if order is None else order), ReaderContext(), pack)
    stage.reset()
    return stage


def _items(stage: Stage):
    while True:
        try:
            yield stage.next()
        except StopIteration:
            return


def drain(stage: Stage) -> list:
    return list(_items(stage))


def documents_of(rows) -> list[list[int]]:
    """The documents each packed row holds tokens of, in order."""
    return [sorted({(t - BASE) // 1000 for t in tokens([r])}) for r in rows]


def assert_rows_equal(got: list, want: list) -> None:
    assert len(got) == len(want)
    for (gk, gv), (wk, wv) in zip(got, want):
        assert gk == wk
        assert gv.keys() == wv.keys()
        for name in wv:
            assert gv[name].dtype == wv[name].dtype and np.array_equal(gv[name], wv[name]), name


# --- layout ------------------------------------------------------------------------------------

def test_greedy_with_remainder_is_concatenate_and_chunk():
    rng = np.random.default_rng(0)
    lengths = rng.integers(1, 300, 200)
    rows = list(Pack(128)(docs(lengths)))
    flat = np.concatenate([d["input_ids"] for d in docs(lengths)])
    assert len(rows) == -(-len(flat) // 128)
    got = np.stack([r["input_ids"] for r in rows]).ravel()
    assert np.array_equal(got[:len(flat)], flat) and (got[len(flat):] == 0).all()
    assert all((r["segment_ids"] > 0).all() for r in rows[:-1])  # every row full but the last


def test_segments_positions_and_loss_mask_of_one_row():
    rows = [{"input_ids": [5, 6, 7], "loss_mask": [0, 1, 1]}, {"input_ids": np.array([8, 9], np.int32)},
            {"input_ids": [10, 11, 12, 13], "loss_mask": np.array([True, False, True, True])}]
    first, second = Pack(6, pad_id=-1)(rows)
    assert first["input_ids"].tolist() == [5, 6, 7, 8, 9, 10]
    assert first["segment_ids"].tolist() == [1, 1, 1, 2, 2, 3]
    assert first["position_ids"].tolist() == [0, 1, 2, 0, 1, 0]
    assert first["loss_mask"].tolist() == [0, 1, 1, 1, 1, 1]  # the second document has no mask: all 1
    assert second["input_ids"].tolist() == [11, 12, 13, -1, -1, -1]
    assert second["segment_ids"].tolist() == [1, 1, 1, 0, 0, 0]
    assert second["position_ids"].tolist() == [0, 1, 2, 0, 0, 0]
    assert second["loss_mask"].tolist() == [0, 1, 1, 0, 0, 0]  # the remainder keeps its own mask
    assert set(first) == {"input_ids", "segment_ids", "position_ids", "loss_mask"}  # "text" etc. not carried
    for row in (first, second):
        assert [(row[c].shape, row[c].dtype.name) for c in ("input_ids", "segment_ids", "position_ids", "loss_mask")] \
            == [((6,), "int32")] * 3 + [((6,), "int8")]
    bounded = next(Pack(6, mask_boundary=True)(rows))
    assert bounded["loss_mask"].tolist() == [0, 1, 1, 0, 1, 0]


def test_a_row_of_one_token_documents_numbers_every_segment():
    (row,) = Pack(3)([{"input_ids": [7]}] * 3)
    assert row["segment_ids"].tolist() == [1, 2, 3] and row["position_ids"].tolist() == [0, 0, 0]


def test_loss_mask_of_the_input_is_ignored_when_not_an_extra_column():
    rows = [{"input_ids": [1, 2, 3], "loss_mask": [0, 0, 1]}]
    assert next(Pack(4, extra_columns=())(rows))["loss_mask"].tolist() == [1, 1, 1, 0]


def test_extra_columns_are_sliced_like_the_tokens():
    rows = [{"input_ids": [1, 2, 3], "labels": [-100, 2, 3]}, {"input_ids": [4, 5], "labels": [4, -100]}]
    out = list(Pack(4, extra_columns=("labels", "loss_mask"))(rows))
    assert [r["labels"].tolist() for r in out] == [[-100, 2, 3, 4], [-100, 0, 0, 0]]
    assert out[0]["labels"].dtype == np.int32


def test_first_fit_places_each_document_in_the_first_bin_with_room():
    rows = docs([6, 5, 3, 4, 7, 2])
    out = list(Pack(10, strategy="first_fit", num_bins=2)(rows))
    # 6 -> A; 5 -> B; 3 -> A (9); 4 -> B (9); 7 fits nowhere: the fullest (A, first of equals) goes, 7 opens C;
    # 2 -> C; at the end B then C
    assert documents_of(out) == [[0, 2], [1, 3], [4, 5]]
    assert [int((r["segment_ids"] > 0).sum()) for r in out] == [9, 9, 9]


def test_first_fit_long_documents_make_rows_of_their_own_and_keep_the_bins_open():
    rows = docs([3, 25, 4])
    out = list(Pack(10, strategy="first_fit")(rows))
    assert documents_of(out) == [[1], [1], [0, 1], [2]]
    assert tokens(out[:2]) == list(rows[1]["input_ids"][:20])  # two full chunks of the long one, at once
    assert tokens(out[2:3]) == all_tokens([rows[0]]) + list(rows[1]["input_ids"][20:])  # its tail fits first
    cut = list(Pack(10, strategy="first_fit", keep_remainder=False, truncate=True)(rows))
    assert sorted(tokens(cut)) == sorted(all_tokens(rows, 10))


def test_greedy_without_remainder_closes_the_bin_and_truncates():
    rows = docs([6, 5, 3, 4, 12])
    packer_rows = list(Pack(10, keep_remainder=False, truncate=True)(rows))
    assert documents_of(packer_rows) == [[0], [1, 2], [3], [4]]
    assert tokens(packer_rows[-1:]) == list(rows[4]["input_ids"][:10])
    stage = chain(keyed(rows), Pack(10, keep_remainder=False, truncate=True))
    drain(stage)
    assert stage.stats == {"tokens": 28, "slots": 40, "packs": 4, "dropped": 2}
    assert stage.efficiency == pytest.approx(28 / 40)


def test_a_document_too_long_to_keep_whole_is_a_typed_error():
    for strategy in ("greedy", "first_fit"):
        stage = chain(keyed(docs([4, 13])), Pack(10, strategy=strategy, keep_remainder=False))
        with pytest.raises(DocumentTooLongError, match=r"row 1 .* 13 tokens.*seq_len=10.*truncate=True") as err:
            drain(stage)
        assert isinstance(err.value, ValueError)


def test_end_of_input_empty_documents_and_dropping_the_remainder():
    rows = docs([4, 0, 3])
    assert len(list(Pack(10, strategy="first_fit")(rows))) == 1
    stage = chain(keyed(rows), Pack(10, drop_remainder_at_end=True))
    assert drain(stage) == [] and stage.stats["dropped"] == 7
    assert list(Pack(5)([])) == []


def test_first_fit_is_more_efficient_than_closing_bins():
    lengths = np.random.default_rng(1).integers(1, 512, 400)
    eff = {}
    for name, pack in {"greedy": Pack(512, keep_remainder=False), "first_fit": Pack(512, strategy="first_fit",
                                                                                   keep_remainder=False)}.items():
        stage = chain(keyed(docs(lengths)), pack)
        drain(stage)
        eff[name] = stage.efficiency
    assert eff["first_fit"] > eff["greedy"] + 0.1


@settings(max_examples=60, deadline=None)
@given(lengths=st.lists(st.integers(0, 40), max_size=30), seq_len=st.integers(1, 24),
       strategy=st.sampled_from(["greedy", "first_fit"]), keep=st.booleans(), num_bins=st.integers(1, 4))
def test_every_token_once_in_rows_of_fixed_shape(lengths, seq_len, strategy, keep, num_bins):
    rows = docs(lengths, mask=True)
    out = list(Pack(seq_len, strategy=strategy, keep_remainder=keep, truncate=not keep, num_bins=num_bins)(rows))
    want = all_tokens(rows, None if keep else seq_len)
    assert sorted(tokens(out)) == sorted(want)
    for r in out:
        seg, pos, ids = r["segment_ids"], r["position_ids"], r["input_ids"]
        assert all(v.shape == (seq_len,) for v in r.values())
        n = int((seg > 0).sum())
        assert n > 0 and (seg[:n] > 0).all() and (seg[n:] == 0).all() and (pos[n:] == 0).all()
        assert (np.diff(seg[:n]) >= 0).all() and seg[0] == 1 and len(np.unique(seg[:n])) == seg[n - 1]
        starts = np.flatnonzero(np.diff(seg[:n], prepend=0))
        for a, b in zip(starts, list(starts[1:]) + [n]):
            assert (pos[a:b] == np.arange(b - a)).all()
            assert (np.diff(ids[a:b]) == 1).all()  # a piece is a run of one document's tokens
            d, t = divmod(int(ids[a]) - BASE, 1000)
            want_mask = rows[d].get("loss_mask", np.ones(1000, np.int8))[t:t + b - a]
            assert (r["loss_mask"][a:b] == want_mask).all()


@pytest.mark.parametrize("options", [dict(seq_len=0), dict(seq_len=True), dict(seq_len=8, strategy="best"),
                                     dict(seq_len=8, truncate=True), dict(seq_len=8, num_bins=0),
                                     dict(seq_len=8, extra_columns=("input_ids",)), dict(seq_len=8, pad_id=0.5),
                                     dict(seq_len=8, keep_remainder="yes"),
                                     dict(seq_len=8, extra_columns=("a", "a"))])
def test_options_are_checked(options):
    with pytest.raises(InvalidArgumentError):
        Pack(**options)


@pytest.mark.parametrize("row, message", [
    ({"text": "hi"}, r"no column 'input_ids'.*\['text'\].*tokenize first"),
    ({"input_ids": [[1, 2], [3, 4]]}, r"shape \(2, 2\).*pack before batching"),
    ({"input_ids": [1.5, 2.0]}, r"dtype float64"),
    ({"input_ids": [1, 2], "loss_mask": [1]}, r"'loss_mask'.*one per token of 'input_ids' \(2\)"),
])
def test_bad_rows_are_typed_errors_naming_the_item(row, message):
    with pytest.raises(InvalidArgumentError, match=message):
        drain(chain({"k": row}, Pack(8)))


def test_an_extra_column_other_than_loss_mask_must_be_there():
    with pytest.raises(InvalidArgumentError, match="no column 'labels'.*remove it from extra_columns"):
        list(Pack(8, extra_columns=("labels",))([{"input_ids": [1]}]))


# --- the stage -----------------------------------------------------------------------------------

CONFIGS = [Pack(16), Pack(16, keep_remainder=False, truncate=True, mask_boundary=True),
           Pack(16, strategy="first_fit", num_bins=3), Pack(16, strategy="first_fit", keep_remainder=False,
                                                            truncate=True, drop_remainder_at_end=True)]


@pytest.mark.parametrize("tuple_keys", [False, True])
@pytest.mark.parametrize("pack", CONFIGS, ids=lambda p: f"{p.strategy}-{p.keep_remainder}")
def test_resume_from_every_step_continues_with_the_same_rows(pack, tuple_keys):
    lengths = np.random.default_rng(2).integers(0, 40, 50)
    rows = keyed(docs(lengths, mask=True), tuple_keys)
    stage = chain(rows, pack)
    states, items = [(stage.source.get_state(), json.loads(json.dumps(stage.get_state())))], []
    for item in _items(stage):
        items.append(item)
        states.append((stage.source.get_state(), json.loads(json.dumps(stage.get_state()))))
    assert len(items) > 20
    for i, (source_state, state) in enumerate(states):
        resumed = chain(rows, pack)
        resumed.source.reset(source_state)
        resumed.reset(state)
        assert_rows_equal(drain(resumed), items[i:])
        assert resumed.stats == stage.stats  # the counters continue too
    held = max((s for _, s in states), key=lambda s: len(json.dumps(s)))
    numbers = [x for x in json.dumps(held).replace("[", " ").replace("]", " ").replace(",", " ").split()
               if x.lstrip("-").isdigit()]
    assert held["pending"] or held["bins"]
    assert all(int(x) < BASE for x in numbers)  # keys, ranges and counters: never a token value


def test_recreate_rebuilds_emitted_rows_from_their_keys():
    rows = keyed(docs(np.random.default_rng(3).integers(1, 60, 40), mask=True), tuple_keys=True)
    for pack in CONFIGS:
        items = drain(chain(rows, pack))
        assert_rows_equal(list(zip([k for k, _ in items], chain(rows, pack).recreate([k for k, _ in items]))), items)


@pytest.mark.parametrize("old, new", [(1, 1), (1, 3), (2, 1), (3, 2), (2, 3), (3, 3)])
@pytest.mark.parametrize("pack", CONFIGS, ids=lambda p: f"{p.strategy}-{p.keep_remainder}")
def test_redistribute_among_readers_loses_and_repeats_nothing(pack, old, new):
    rng = np.random.default_rng(old * 10 + new)
    rows = keyed(docs(rng.integers(0, 40, 90)))
    readers = [chain(rows, pack, order=list(rows)[r::old]) for r in range(old)]
    emitted = []
    for reader in readers:
        for _, (_, row) in zip(range(int(rng.integers(0, 8))), _items(reader)):
            emitted.append(row)
    states = [json.loads(json.dumps(r.get_state())) for r in readers]
    left = [k for r in readers for k in r.source.order[r.source.pos:]]
    new_states = PackStage.redistribute(states, new)
    assert len(new_states) == new
    total = {}
    for j, state in enumerate(new_states):
        reader = chain(rows, pack, order=left[j::new])
        reader.reset(json.loads(json.dumps(state)))
        emitted += [row for _, row in drain(reader)]
        total = Counter(total) + Counter(reader.stats)
    got = tokens(emitted)
    if pack.drop_remainder_at_end:  # what the last bins held is dropped, and counted
        assert set(got) <= set(all_tokens(rows.values(), pack.seq_len)) and len(got) == len(set(got))
    else:
        assert sorted(got) == sorted(all_tokens(rows.values(), None if pack.keep_remainder else pack.seq_len))
    assert total["packs"] == len(emitted) and total["tokens"] == len(got)
    assert len(got) + total["dropped"] == len(all_tokens(rows.values()))


def test_bins_dealt_beyond_the_open_ones_are_placed_again():
    rows = keyed(docs([5, 6, 7, 9]))
    states = [{"version": 1, "bins": [[[0, 0, 5]], [[2, 0, 7]]], "pending": [], "packs": 1},
              {"version": 1, "bins": [[[1, 0, 6]], [[3, 0, 9]]], "pending": [], "packs": 2}]
    (merged,) = PackStage.redistribute(states, 1)
    assert merged["bins"] == [[[0, 0, 5]], [[2, 0, 7]], [[1, 0, 6]], [[3, 0, 9]]] and merged["packs"] == 3
    four = chain(rows, Pack(20, strategy="first_fit", num_bins=4), order=[])
    four.reset(merged)
    assert four.get_state() == merged  # every bin stays open
    three = chain(rows, Pack(20, strategy="first_fit", num_bins=3), order=[])
    three.reset(merged)
    assert three.get_state()["bins"] == merged["bins"][:3] and three.get_state()["pending"] == [[3, 0, 9]]
    assert documents_of(row for _, row in drain(three)) == [[0, 3], [2], [1]]  # 9 goes into the first bin with room
    greedy = chain(rows, Pack(20), order=[])
    greedy.reset(merged)
    assert len(greedy.get_state()["bins"]) == 1 and len(greedy.get_state()["pending"]) == 3


def test_bad_states_are_refused():
    rows = keyed(docs([5, 6]))
    stage = chain(rows, Pack(8))
    with pytest.raises(IncompatibleStateError, match="version"):
        stage.reset({"version": 99, "bins": []})
    with pytest.raises(IncompatibleStateError, match="tokens 2:9 of the item at row 1"):
        stage.reset({"version": 1, "bins": [[[1, 2, 9]]], "pending": []})
    with pytest.raises(IncompatibleStateError, match="open bin of 8 tokens"):
        stage.reset({"version": 1, "bins": [[[0, 0, 5], [1, 0, 3]]], "pending": []})
    with pytest.raises(IncompatibleStateError, match="not the key of a packed row"):
        stage.recreate([3])
    with pytest.raises(InvalidArgumentError, match="Pack"):
        PackStage(stage.source, ReaderContext(), {"seq_len": 8})


def test_describe_is_json_and_names_every_option():
    a, b = chain({}, Pack(8)).describe(), chain({}, Pack(8, strategy="first_fit")).describe()
    assert json.loads(json.dumps(a)) == a and a != b and a["stage"] == "pack" and a["seq_len"] == 8
