"""The in-region shuffles: region-local position -> virtual index, one algorithm each.

Each function maps positions ``t`` in ``[0, L_c)`` of regions ``c`` (arrays of equal
length) to virtual indices in ``[region_bounds[c], region_bounds[c + 1])``, as a
bijection per region, in O(1) per position and without materialising anything
larger than the layout. What each algorithm guarantees:

- ``naive``: one keyed permutation of the whole epoch; no locality at all.
- ``py1s``: samples are shuffled within each piece (a shard's part of a region);
  the region reads one shard at a time, in the epoch's shard order.
- ``py2s``: samples are shuffled within pairs of consecutive pieces, so each
  stretch of the order mixes two shards.
- ``py1b``: samples are shuffled within fixed blocks of ``block_size`` positions
  of the region; a sample moves less than ``block_size`` from its virtual place.
- ``py1br``: as ``py1b`` with block boundaries jittered by up to a quarter block,
  so block sizes vary in ``[block_size/2, 3*block_size/2]`` and the nodes'
  download bursts do not line up.
- ``py1e`` (default): the region is cut into pieces of ``m`` samples and piece
  ``i`` is spread evenly over a window of ``k*m ~ block_size`` positions that
  starts ``i*m`` positions in (row-wise interleave, random order within each row
  and within each piece). Exactly one new piece starts being read every ``m``
  positions, so downloads are spread evenly instead of arriving in bursts at
  block boundaries, and a sample moves at most one window from its virtual place.
"""

from __future__ import annotations

import numpy as np

from .keyed import derive, hash_index, mix, permute, uniform_below
from .layout import EpochLayout

_U = np.uint64


def _key2(base: int, a, b) -> np.ndarray:
    """A key per (a, b) pair under ``base`` (a, b integer arrays)."""
    with np.errstate(over="ignore"):
        return mix(hash_index(base, a) + np.asarray(b).astype(_U) * _U(0xD6E8FEB86659FD93))


def shuffle_region(algo: str, layout: EpochLayout, c: np.ndarray, t: np.ndarray, key: int,
                   block_size: int) -> np.ndarray:
    """Virtual indices of region-local positions ``t`` of regions ``c`` under ``algo``."""
    bounds = layout.run.region_bounds
    lo = bounds[c]
    length = bounds[c + 1] - lo
    if algo == "py1s":
        return _within_pieces(layout, lo + t, key, pair=False)
    if algo == "py2s":
        return _within_pieces(layout, lo + t, key, pair=True)
    if algo == "py1b":
        return lo + _blocks(c, t, length, key, block_size)
    if algo == "py1br":
        return lo + _jittered_blocks(c, t, length, key, block_size)
    if algo == "py1e":
        return lo + _interleave(c, t, length, key, block_size)
    raise ValueError(f"unknown in-region shuffle {algo!r}")  # naive is global and handled by the caller


def _within_pieces(layout: EpochLayout, v: np.ndarray, key: int, pair: bool) -> np.ndarray:
    j = layout.piece_of(v)
    if pair:
        region = layout.piece_region[j]
        first = layout.region_first_piece[region]
        last = layout.region_first_piece[region + 1]  # one past the region's last piece
        j = j - (j - first) % 2
        end = np.minimum(j + 2, last)
    else:
        end = j + 1
    lo = layout.piece_start[j]
    hi = layout.piece_start[end]
    return lo + permute(v - lo, hi - lo, _key2(key, j, pair))


def _blocks(c, t, length, key, block_size):
    b = t // block_size
    lo = b * block_size
    hi = np.minimum(lo + block_size, length)
    return lo + permute(t - lo, hi - lo, _key2(key, c, b))


def _jittered_blocks(c, t, length, key, block_size):
    quarter = block_size // 4

    def bound(j):  # start of block j (block 0 starts at 0)
        jit = uniform_below(_key2(key, c, j), 0, 2 * quarter + 1) - quarter
        return np.where(j > 0, j * block_size + jit, 0)

    j = (t + quarter) // block_size
    j = np.where(bound(j) > t, j - 1, j)
    lo = bound(j)
    hi = np.minimum(bound(j + 1), length)
    return lo + permute(t - lo, hi - lo, _key2(key ^ 0x1B, c, j))


def interleave_shape(block_size: int) -> tuple[int, int]:
    """``(k, g)`` of py1e: k pieces of ``m = k*g`` samples are interleaved in each row."""
    k = max(1, min(16, int(np.sqrt(block_size))))
    return k, max(1, block_size // (k * k))


def _interleave(c, t, length, key, block_size):
    k, g = interleave_shape(block_size)
    m = k * g
    n = length // m  # whole pieces in the region
    out = np.empty_like(t)
    small = n < k  # region shorter than one window: one keyed permutation
    tail = ~small & (t >= n * m)  # the last length % m samples: one keyed permutation
    body = ~small & ~tail
    if small.any():
        out[small] = permute(t[small], length[small], _key2(key ^ 0x5, c[small], 0))
    if tail.any():
        base = n[tail] * m
        out[tail] = base + permute(t[tail] - base, length[tail] - base, _key2(key ^ 0x7, c[tail], 0))
    if body.any():
        out[body] = _interleave_body(c[body], t[body], n[body], k, g, key)
    return out


def _ramp(t: np.ndarray, g: int):
    """Stage, row-in-stage and slot of position ``t`` in a ramp whose stage s has s+1 slots per row."""
    s = np.floor((np.sqrt(8.0 * t / g + 1.0) - 1.0) / 2.0).astype(np.int64)
    s = np.where(g * s * (s + 1) // 2 > t, s - 1, s)
    s = np.where(g * (s + 1) * (s + 2) // 2 <= t, s + 1, s)
    off = t - g * s * (s + 1) // 2
    return s, off // (s + 1), off % (s + 1)


def _interleave_body(c, t, n, k, g, key):
    m = k * g
    up = g * k * (k - 1) // 2  # positions in the ramp-up (and in the ramp-down)
    down = n * m - up  # where the ramp-down starts
    # steady part: k pieces active in every row
    ts = t - up
    q = (k - 1) * g + ts // k
    slot = ts % k
    width = np.full_like(t, k)
    ramp_up = t < up
    ramp_down = t >= down
    if ramp_up.any():  # stage s has pieces 0..s active
        s, r, sl = _ramp(t[ramp_up], g)
        q[ramp_up], slot[ramp_up], width[ramp_up] = s * g + r, sl, s + 1
    if ramp_down.any():  # the mirror image of the ramp-up
        s, r, sl = _ramp(n[ramp_down] * m - 1 - t[ramp_down], g)
        q[ramp_down] = (n[ramp_down] + k - 1) * g - 1 - (s * g + r)
        slot[ramp_down], width[ramp_down] = sl, s + 1
    first = np.maximum(q // g - k + 1, 0)  # first active piece of the row
    piece = first + _row_order(slot, width, _key2(key ^ 0x3, c, q))
    j = q - piece * g  # which of the piece's m samples this row takes
    return piece * m + permute(j, m, _key2(key ^ 0x9, c, piece))


def _units_table(size: int) -> tuple[np.ndarray, np.ndarray]:
    """For each width w <= size: the multipliers coprime to w, and how many there are."""
    table = np.zeros((size + 1, size), np.int64)
    count = np.ones(size + 1, np.int64)
    for w in range(1, size + 1):
        units = [a for a in range(1, w + 1) if np.gcd(a, w) == 1]
        table[w, :len(units)] = units
        count[w] = len(units)
    return table, count


_UNITS, _NUNITS = _units_table(16)


def _row_order(slot, width, keys):
    """A keyed affine bijection ``slot -> (a*slot + b) % width`` per row (a coprime to width).

    A whole row goes to the same batch in all but its edge rows, so the order inside
    a row matters little; an affine map is enough and costs a few integer operations.
    """
    h = hash_index(keys, 0)
    a = _UNITS[width, (h % _NUNITS[width].astype(_U)).astype(np.int64)]
    b = ((h >> _U(32)) % width.astype(_U)).astype(np.int64)
    return (a * slot + b) % width


def naive(v: np.ndarray, num_samples: int, key: int) -> np.ndarray:
    """Global sample ids under one keyed permutation of the whole dataset."""
    return permute(v, num_samples, derive(key, 0x4E))
