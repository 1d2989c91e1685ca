"""Counter-based randomness: keys, hashes and keyed permutations of ``[0, n)``.

Every random choice of the plan is a pure function of a 64-bit key and an index,
so any position can be computed on its own, in any order, by any process, with
nothing materialised. Keys are derived from integers (seed, epoch, purpose, ...)
with the SplitMix64 finaliser; the numbers do not depend on numpy's generators,
whose streams may change between numpy versions.

``permute(x, n, key)`` is a keyed bijection of ``[0, n)``: a balanced
Feistel network on the smallest even number of bits that covers ``n``, with
cycle walking (apply the network again until the value falls below ``n``). The
network's domain is less than ``4 n``, so the expected number of walks is under 4
and a value is never lost: following a permutation's cycle from ``x < n`` always
comes back below ``n``. Every argument may be an array (one domain and key per
element), which is what lets the plan map a million positions in a few numpy
passes.
"""

from __future__ import annotations

import numpy as np

MASK64 = (1 << 64) - 1
_M1 = 0xBF58476D1CE4E5B9
_M2 = 0x94D049BB133111EB
_GOLDEN = 0x9E3779B97F4A7C15

_U = np.uint64
_M1_U, _M2_U, _GOLDEN_U = _U(_M1), _U(_M2), _U(_GOLDEN)


def mix_int(x: int) -> int:
    """SplitMix64 finaliser on a Python int (taken modulo 2**64)."""
    x &= MASK64
    x = ((x ^ (x >> 30)) * _M1) & MASK64
    x = ((x ^ (x >> 27)) * _M2) & MASK64
    return x ^ (x >> 31)


def derive(*parts: int) -> int:
    """A 64-bit key from a sequence of integers (any sign or size); order matters."""
    k = 0x5EED
    for p in parts:
        p = int(p)
        # fold big or negative ints in 64-bit limbs; a part that is not a single non-negative
        # limb is then closed by a step unlike a limb's, tagged with its limb count and sign,
        # so that it never reads as a run of smaller parts and distinct inputs stay distinct
        limbs = [p & MASK64]
        rest = p >> 64
        while rest not in (0, -1):
            limbs.append(rest & MASK64)
            rest >>= 64
        for limb in limbs:
            k = mix_int(k + _GOLDEN + limb)
        if len(limbs) > 1 or p < 0:
            k = mix_int(k ^ ((2 * len(limbs) + (p < 0)) * _M1 & MASK64))
    return k


def mix(x: np.ndarray) -> np.ndarray:
    """SplitMix64 finaliser, elementwise on uint64 (wrapping arithmetic)."""
    x = np.asarray(x, dtype=_U)
    with np.errstate(over="ignore"):
        x = (x ^ (x >> _U(30))) * _M1_U
        x = (x ^ (x >> _U(27))) * _M2_U
    return x ^ (x >> _U(31))


def hash_index(key, index) -> np.ndarray:
    """Uniform 64-bit hashes of ``index`` (array) under ``key`` (int or uint64 array)."""
    with np.errstate(over="ignore"):
        return mix(np.asarray(index).astype(_U) * _GOLDEN_U + _as_u64(key))


def uniform_below(key, index, bound) -> np.ndarray:
    """Integers in ``[0, bound)`` (bound > 0), one per index; the modulo bias is < bound / 2**64."""
    return (hash_index(key, index) % np.asarray(bound).astype(_U)).astype(np.int64)


def random_order(n: int, key: int) -> np.ndarray:
    """A keyed permutation of ``range(n)`` as an array (for O(n) things such as shard order)."""
    return np.argsort(hash_index(key, np.arange(n, dtype=np.int64)), kind="stable").astype(np.int64)


def _as_u64(key) -> np.ndarray:
    if isinstance(key, (int, np.integer)):
        return _U(int(key) & MASK64)
    return np.asarray(key, dtype=_U)


def _half_bits(n: np.ndarray) -> np.ndarray:
    """Half the even bit width of the Feistel domain for each ``n`` (>= 1 bit)."""
    # bit length of n - 1 (at least 1), read from the float64 exponent; rounding up near
    # 2**53 and beyond only widens the domain, which stays correct
    exponent = (np.maximum(n - 1, 1).astype(np.float64).view(np.int64) >> 52) - 1022
    return ((exponent + 1) // 2).astype(_U)


def _feistel(x: np.ndarray, half, key, rounds: int) -> np.ndarray:
    """One pass of the network over ``x`` (consumed); ``half`` is a scalar or an array."""
    mask = (_U(1) << half) - _U(1)
    left = x >> half
    right = x & mask
    f = np.empty_like(x)
    tmp = np.empty_like(x)
    with np.errstate(over="ignore"):
        for r in range(rounds):
            np.multiply(right, _GOLDEN_U, out=f)
            f += key
            f += _U((r + 1) * _M2 & MASK64)
            _mix_inplace(f, tmp)
            f &= mask
            f ^= left
            left, right, f = right, f, left
    left <<= half
    left |= right
    return left


def _mix_inplace(x: np.ndarray, tmp: np.ndarray) -> None:
    np.right_shift(x, _U(30), out=tmp)
    x ^= tmp
    x *= _M1_U
    np.right_shift(x, _U(27), out=tmp)
    x ^= tmp
    x *= _M2_U
    np.right_shift(x, _U(31), out=tmp)
    x ^= tmp


SMALL = 16  # domains up to this size use ranks of hashes: exactly uniform, O(n) per element


def _rank_permute(x: np.ndarray, n: np.ndarray, key) -> np.ndarray:
    """pi(x) = rank of hash(x) among hash(0..n-1). (Feistel networks make only even
    permutations of their domain, which biases cycle walking on tiny domains.)"""
    x, n, key = np.broadcast_arrays(x, n, _as_u64(key))
    mine = hash_index(key, x)
    rank = np.zeros(x.shape, np.int64)
    for y in range(int(n.max()) if n.size else 0):
        other = hash_index(key, np.full(x.shape, y))
        rank += (other < mine) & (y < n)
    return rank


def permute(x, n, key) -> np.ndarray:
    """``pi(x)`` for the keyed bijection ``pi`` of ``[0, n)``; ``x``, ``n``, ``key`` broadcast.

    ``x`` must lie in ``[0, n)``. Domains of size 1 map to 0. The result for an
    element depends only on its own ``x``, ``n`` and ``key``, never on the others.
    """
    x, n, key = np.broadcast_arrays(np.asarray(x, np.int64), np.asarray(n, np.int64), _as_u64(key))
    shape = x.shape
    x, n, key = x.ravel(), n.ravel(), key.ravel()
    out = np.empty(x.size, np.int64)
    if x.size == 0:
        return out.reshape(shape)
    lo, hi = int(n.min()), int(n.max())
    if lo < 1:  # an empty domain has no bijection; cycle walking would never end
        raise ValueError(f"permute needs domains of size >= 1, got {lo}")
    if hi <= SMALL:
        out[:] = _rank_permute(x, n, key)
    elif lo > _FEW and lo == hi:  # the common case: one domain for all
        out[:] = _walk(x, np.full(1, lo), key, 4)
    else:
        for sel, rounds in ((n <= SMALL, 0), ((n > SMALL) & (n <= _FEW), 8), (n > _FEW, 4)):
            if not sel.any():
                continue
            if rounds:
                out[sel] = _walk(x[sel], n[sel], key[sel], rounds)
            else:
                out[sel] = _rank_permute(x[sel], n[sel], key[sel])
    return out.reshape(shape)


_FEW = 256  # domains up to this size get 8 rounds; 4 rounds leave a visible bias there


def _walk(x: np.ndarray, n: np.ndarray, key: np.ndarray, rounds: int) -> np.ndarray:
    """Feistel network plus cycle walking; ``n`` has one element (shared) or one per ``x``."""
    shared = n.size == 1 and x.size != 1
    half = _half_bits(n)
    half = _U(int(half[0])) if shared else half
    bound = _U(int(n[0])) if shared else n.astype(_U)
    out = _feistel(x.astype(_U), half, key, rounds)
    todo = np.flatnonzero(out >= bound)
    while todo.size:  # cycle walking, on the shrinking set that is still out of range
        h = half if shared else half[todo]
        b = bound if shared else bound[todo]
        y = _feistel(out[todo], h, key[todo], rounds)
        out[todo] = y
        todo = todo[y >= b]
    return out.view(np.int64)
