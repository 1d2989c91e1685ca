"""What a checkpoint holds: small, versioned, plain-JSON dicts, validated before use.

A dataset is a chain with no operations, so every checkpoint is one of two views of one envelope:

- **the source's position** (:func:`make_state`, :func:`parse_state`): the epoch and the global plan
  position consumed, with the order settings and the dataset's identity. A ``StreamingDataset`` (a chain
  with no operations, at a step boundary) saves exactly this; its keys are mosaicml-streaming's.
- **a chain's state** (:func:`chain_state`, :func:`boundary_state`, :func:`read_chain_state`): kind,
  version, the chain's fingerprint, the epoch, the source's position at the start of the pass's plan
  segment (the view above), how the segment is dealt among the readers (the grid: a fresh pass's
  :class:`~shardstream.plan.partition.Grid`, or after a resume on another world the
  :class:`~shardstream.plan.compact.CompactGrid` of the positions left), each reader's frontier,
  what each operation's stage holds (as item keys) and the items made but not consumed, and the name and
  state version of every operation. With several ranks each saves its own readers and the list of them
  loads on any world (:func:`read_chain_state` unites it).

The keys of mosaicml-streaming's checkpoints (``epoch``, ``sample_in_epoch``,
``shuffle_seed``, ``num_canonical_nodes``, ``initial_physical_nodes``) are kept with
their meaning; the rest say which segment of the epoch the position lies in (so the
world size and the global batch may change on resume) and which dataset and
settings the order was built from (so a state is never applied to the wrong ones).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from ..errors import IncompatibleStateError, InvalidArgumentError

STATE_VERSION = 1
CHAIN_KIND = "shardstream.pipeline"
# 2: each operation's name and state version ("operations"); 3: the grid of a resume on another world deals
# the unread positions evenly (plan/compact.py: "deal", "extra", "pads") and says whether its readers began
# with equal work ("even"); 1 and 2 still load
CHAIN_STATE_VERSION = 3

# settings that change the order of an epoch: a state is refused if any differs
ORDER_SETTINGS = ("shuffle", "shuffle_algo", "shuffle_seed", "shuffle_block_size", "num_canonical_nodes",
                  "epoch_tail")
DATASET_KEYS = ("num_samples", "num_shards", "shard_sizes_xxh64")
_LIMIT = 1 << 62  # positions, counts and epochs stay far inside int64 arithmetic
_INT_KEYS = ("epoch", "sample_in_epoch", "global_batch_size", "segment_origin", "initial_physical_nodes")


@dataclass(frozen=True)
class ResumePoint:
    """A validated state: where to continue, and the segment the position belongs to."""

    epoch: int
    position: int
    global_batch: int
    origin: int
    base: list[int] | None
    initial_physical_nodes: int
    raw: dict


def make_state(*, epoch: int, position: int, global_batch: int, origin: int, base, settings: dict,
               dataset: dict, initial_physical_nodes: int) -> dict[str, Any]:
    """The state dict for global ``position`` of ``epoch`` (see the module docstring)."""
    base_list = [int(b) for b in base] if base is not None and any(int(b) for b in base) else None
    state = {
        "version": STATE_VERSION,
        "epoch": int(epoch),
        "sample_in_epoch": int(position),
        "shuffle_seed": settings["shuffle_seed"],
        "num_canonical_nodes": settings["num_canonical_nodes"],
        "initial_physical_nodes": int(initial_physical_nodes),
        "global_batch_size": int(global_batch),
        "segment_origin": int(origin),
        "region_base": base_list,
    }
    for key in ORDER_SETTINGS:
        state.setdefault(key, settings[key])
    state.update(dataset)
    return state


def decode_state(obj) -> dict:
    """The state as a dict: as given, or parsed from JSON text."""
    if isinstance(obj, (str, bytes)):
        try:
            obj = json.loads(obj)
        except ValueError as exc:
            raise InvalidArgumentError(f"the state is not valid JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise InvalidArgumentError(f"load_state_dict expects the dict made by state_dict(), got {type(obj).__name__}")
    return obj


def parse_state(obj: dict, settings: dict, dataset: dict) -> ResumePoint:
    """Validate the state dict ``obj`` against this dataset and its order settings; raise on any mismatch."""
    if "version" not in obj:
        raise IncompatibleStateError(
            "the state has no 'version' key, so it was not made by shardstream's state_dict(); the order of "
            "another library's epoch cannot be continued exactly. Start the epoch afresh instead: ds.set_epoch(epoch)"
        )
    if obj["version"] != STATE_VERSION:
        raise IncompatibleStateError(
            f"state version {obj['version']!r} is not supported (this shardstream reads version {STATE_VERSION})"
        )
    missing = [k for k in (*_INT_KEYS, *ORDER_SETTINGS, *DATASET_KEYS, "region_base") if k not in obj]
    if missing:
        raise IncompatibleStateError(f"the state lacks the keys {missing}; was it edited by hand?")
    for key in _INT_KEYS:
        value = obj[key]
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < _LIMIT:
            raise IncompatibleStateError(f"state key {key!r} must be an int in [0, 2**62), got {value!r}")
    if obj["global_batch_size"] < 1 or obj["initial_physical_nodes"] < 1:
        raise IncompatibleStateError("state keys 'global_batch_size' and 'initial_physical_nodes' must be >= 1")
    _compare(obj, dataset, DATASET_KEYS, "the state was saved for another dataset",
             "resume with the dataset the state was saved for")
    # without shuffling, the seed, the algorithm and the block size do not change the order
    keys = ORDER_SETTINGS if settings["shuffle"] or obj["shuffle"] else tuple(
        k for k in ORDER_SETTINGS if k not in ("shuffle_seed", "shuffle_algo", "shuffle_block_size"))
    _compare(obj, settings, keys, "the state was saved with other order settings",
             "construct the dataset with the state's values to resume")
    if obj["segment_origin"] > obj["sample_in_epoch"]:
        raise IncompatibleStateError("state key 'segment_origin' lies after 'sample_in_epoch'")
    base = obj["region_base"]
    if base is not None and (not isinstance(base, list) or not all(
            isinstance(b, int) and not isinstance(b, bool) and 0 <= b < _LIMIT for b in base)):
        raise IncompatibleStateError("state key 'region_base' must be null or a list of ints in [0, 2**62)")
    return ResumePoint(obj["epoch"], obj["sample_in_epoch"], obj["global_batch_size"], obj["segment_origin"],
                       base, obj["initial_physical_nodes"], dict(obj))


def _compare(obj: dict, expected: dict, keys, what: str, fix: str) -> None:
    diffs = [f"{k}: state has {obj[k]!r}, this dataset has {expected[k]!r}" for k in keys if obj[k] != expected[k]]
    if diffs:
        raise IncompatibleStateError(f"{what} ({'; '.join(diffs)}); {fix}")


# -- a chain's state --------------------------------------------------------------------------------------------
def operations_of(specs) -> list[dict]:
    """Each operation's name and the version of its stage's state (``state_version``, default 1)."""
    return [{"op": spec.describe().get("op", type(spec).__name__), "version": int(getattr(spec, "state_version", 1))}
            for spec in specs]


def chain_state(*, fingerprint: str, epoch: int, source: dict, grid: dict, readers: dict, ranks: int,
                turns: dict, operations: list) -> dict:
    """The state of a chain inside a pass (see the module docstring)."""
    return {"version": CHAIN_STATE_VERSION, "kind": CHAIN_KIND, "fingerprint": fingerprint, "epoch": int(epoch),
            "source": source, "grid": grid, "readers": readers, "ranks": int(ranks), "turns": turns,
            "operations": operations}


def boundary_state(fingerprint: str, epoch: int, operations: list, complete: bool = False) -> dict:
    """The state of a chain between passes: ``epoch`` runs next from its start, or (``complete``) is done."""
    return {"version": CHAIN_STATE_VERSION, "kind": CHAIN_KIND, "fingerprint": fingerprint, "epoch": int(epoch),
            "complete": complete, "operations": operations}


def read_chain_state(state, operations: list) -> dict:
    """One chain state from a state, its JSON text, or the list of every rank's (their readers united), checked
    against this chain's ``operations`` (:func:`operations_of`)."""
    if isinstance(state, (str, bytes)):
        state = decode_state(state)
    parts = list(state) if isinstance(state, (list, tuple)) else [state]
    if not parts:
        raise InvalidArgumentError("load_state_dict got an empty list of states")
    for p in parts:
        _check_chain_part(p, operations)
    first = dict(parts[0])
    if len(parts) == 1:
        return first
    for p in parts[1:]:
        for key in ("fingerprint", "epoch", "source", "grid", "complete"):
            if p.get(key) != first.get(key):
                raise IncompatibleStateError(f"the ranks' states differ in {key!r}: were they saved at the same step?")
    readers, turns = {}, {}
    for p in parts:
        readers.update(p.get("readers", {}))
        turns.update(p.get("turns", {}))
    first["readers"], first["turns"] = readers, turns
    return first


def _check_chain_part(p, operations: list) -> None:
    if not isinstance(p, dict) or p.get("kind") != CHAIN_KIND:
        raise IncompatibleStateError(
            "this is not a pipeline state (a chain's, made by IterableDataset.state_dict()); a StreamingDataset's own "
            "state loads with StreamingDataset.load_state_dict")
    if p.get("version") not in (1, 2, CHAIN_STATE_VERSION):
        raise IncompatibleStateError(f"chain state version {p.get('version')!r} is not supported (this shardstream "
                                     f"reads versions 1 to {CHAIN_STATE_VERSION}); save it again with this version")
    saved = p.get("operations")
    if saved is None:  # version 1: every stage's state was at version 1
        return
    names = [o.get("op") for o in saved]
    if names != [o["op"] for o in operations]:
        raise IncompatibleStateError(f"the state was saved by a chain of the operations {names}, and this chain "
                                     f"has {[o['op'] for o in operations]}; resume with the same chain")
    for i, (was, now) in enumerate(zip(saved, operations)):
        if was.get("version") != now["version"]:
            raise IncompatibleStateError(
                f"operation {i} ({now['op']}) saved its state at version {was.get('version')!r} and this "
                f"shardstream reads version {now['version']}; resume with the shardstream that saved it")
