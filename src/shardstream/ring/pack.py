"""A batch written into a ring slot, and read back from it without a copy.

A batch is any nesting of dicts, lists and tuples (named tuples too) whose leaves are
numpy arrays, :class:`~shardstream.format.batch.Ragged` columns, other values (strings,
images, ...) or values of a registered leaf type (torch tensors, registered by the torch
integration). :func:`pack` copies every numeric array into the slot, each at an aligned
offset, and leaves a *skeleton*: the batch with each array replaced by a placeholder.
What crosses to the training process is a :class:`Packed` (the ring's key, the slot and
the skeleton: a few hundred bytes for a column batch); unpickling it there rebuilds the
batch with arrays that view the slot, and the slot goes back to its worker when the last
of them is gone.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

import numpy as np

from ..format.batch import Ragged
from .memory import ALIGN, Ring, find, round_up

#: type -> (to_array(value) -> (array, tag) or None, from_array(array, tag) -> value)
LEAF_TYPES: dict[type, tuple[Callable, Callable]] = {}


def register_leaf(cls: type, to_array: Callable, from_array: Callable) -> None:
    """Let values of ``cls`` cross as arrays: ``to_array(value)`` gives ``(numpy array, tag)`` (None to
    leave the value in the skeleton) and ``from_array(array, tag)`` makes the value again."""
    LEAF_TYPES[cls] = (to_array, from_array)


class _Leaf:
    """The place of an array in a skeleton: its offset, size, dtype and shape in the slot, and its leaf type."""

    __slots__ = ("offset", "nbytes", "dtype", "shape", "kind", "tag")

    def __init__(self, offset: int, nbytes: int, dtype: str, shape: tuple, kind: Optional[type], tag: Any) -> None:
        self.offset, self.nbytes, self.dtype, self.shape, self.kind, self.tag = offset, nbytes, dtype, shape, kind, tag

    def __reduce__(self):
        return (_Leaf, (self.offset, self.nbytes, self.dtype, self.shape, self.kind, self.tag))


class Packed:
    """A batch in ring ``key``'s ``slot`` (its first ``nbytes``), as it crosses to the training process."""

    __slots__ = ("key", "slot", "nbytes", "skeleton")

    def __init__(self, key: str, slot: int, nbytes: int, skeleton: Any) -> None:
        self.key, self.slot, self.nbytes, self.skeleton = key, slot, nbytes, skeleton

    def __reduce__(self):
        return (received, (self.key, self.slot, self.nbytes, self.skeleton))


def received(key: str, slot: int, nbytes: int, skeleton: Any) -> Any:
    """The batch of a :class:`Packed`, in the process that owns the ring (unpickling calls this)."""
    buf = find(key).lease(slot, nbytes)
    return _fill(skeleton, buf)


def pack(ring: Ring, worker: int, batch: Any) -> tuple[Optional[Packed], int]:
    """``(packed, bytes)``: ``batch`` written into a free slot of ``worker``'s, or ``(None, bytes)`` when
    no slot is free or the arrays (``bytes`` in all, aligned) do not fit in one."""
    leaves: list = []
    skeleton = _strip(batch, leaves)
    total = 0
    for leaf, _ in leaves:
        leaf.offset = total
        total = round_up(total + leaf.nbytes, ALIGN)
    if total > ring.slot_bytes or not leaves:
        return None, total
    slot = ring.acquire(worker)
    if slot is None:
        return None, total
    buf = ring.view(slot)
    for leaf, array in leaves:
        dst = _at(buf, leaf)
        np.copyto(dst, array, casting="no")
    return Packed(ring.key, slot, total, skeleton), total


def _at(buf: np.ndarray, leaf: _Leaf) -> np.ndarray:
    return buf[leaf.offset:leaf.offset + leaf.nbytes].view(leaf.dtype).reshape(leaf.shape)


def _packable(a: np.ndarray) -> bool:
    return a.dtype.kind in "biufcmM" and a.dtype.fields is None


def _strip(obj: Any, leaves: list) -> Any:
    """``obj`` with its arrays replaced by :class:`_Leaf` placeholders (appended with the array to
    ``leaves``); a container holding some becomes a :class:`_Node`, one holding none stays as it is."""
    cls = type(obj)
    if cls is np.ndarray:
        if not _packable(obj):
            return obj
        leaf = _Leaf(0, obj.nbytes, obj.dtype.str, obj.shape, None, None)
        leaves.append((leaf, obj))
        return leaf
    before = len(leaves)
    if cls is dict:
        items: Any = {k: _strip(v, leaves) for k, v in obj.items()}
    elif cls is list or cls is tuple or (isinstance(obj, tuple) and hasattr(cls, "_fields")):  # named tuples too
        items = [_strip(v, leaves) for v in obj]
    elif cls is Ragged:
        items = [_strip(obj.values, leaves), _strip(np.asarray(obj.offsets), leaves), obj.shapes]
    else:
        kind = LEAF_TYPES.get(cls)
        made = None if kind is None else kind[0](obj)
        if made is None:
            return obj
        array, tag = made
        leaf = _Leaf(0, array.nbytes, array.dtype.str, array.shape, cls, tag)
        leaves.append((leaf, array))
        return leaf
    return obj if len(leaves) == before else _Node(cls, items)


class _Node:
    """A container of the batch that holds arrays: its type and its items, stripped."""

    __slots__ = ("cls", "items")

    def __init__(self, cls: type, items: Any) -> None:
        self.cls, self.items = cls, items

    def __reduce__(self):
        return (_Node, (self.cls, self.items))


def _fill(skeleton: Any, buf: np.ndarray) -> Any:
    """The skeleton with each placeholder replaced by its array, viewing ``buf``."""
    cls = type(skeleton)
    if cls is _Leaf:
        array = _at(buf, skeleton)
        return array if skeleton.kind is None else LEAF_TYPES[skeleton.kind][1](array, skeleton.tag)
    if cls is not _Node:
        return skeleton
    kind, items = skeleton.cls, skeleton.items
    if kind is dict:
        return {k: _fill(v, buf) for k, v in items.items()}
    if kind is list:
        return [_fill(v, buf) for v in items]
    if kind is tuple:
        return tuple(_fill(v, buf) for v in items)
    if kind is Ragged:
        return Ragged(_fill(items[0], buf), _fill(items[1], buf), items[2])
    return kind(*(_fill(v, buf) for v in items))  # a named tuple
