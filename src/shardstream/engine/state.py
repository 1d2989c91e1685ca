"""Resumption state: a small, versioned, plain-JSON dict, validated before use.

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
