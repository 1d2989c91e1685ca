"""Counter-based randomness: keyed permutations are bijections, element-wise,
key-dependent and close to uniform; derived keys never collide on distinct inputs."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shardstream.plan.keyed import derive, hash_index, mix, mix_int, permute, random_order, uniform_below

PROPS = settings(max_examples=60, deadline=None, derandomize=True, database=None,
                 suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def _is_bijection(y: np.ndarray, n: int) -> bool:
    if y.shape != (n,) or (n and (y.min() < 0 or y.max() >= n)):
        return False
    seen = np.zeros(n, bool)
    seen[y] = True
    return bool(seen.all())


# -- bijection -----------------------------------------------------------------------------

def test_permute_is_a_bijection_for_every_n_up_to_5000():
    for n in range(1, 5001):
        y = permute(np.arange(n), n, derive(11, n))
        assert _is_bijection(y, n), n


def test_permute_is_a_bijection_with_per_element_domains_and_keys():
    """One call, one domain and one key per element (all three code paths mixed)."""
    ns = np.arange(1, 1601)
    x = np.concatenate([np.arange(n) for n in ns])
    n = np.repeat(ns, ns)
    keys = hash_index(derive(5), n)
    y = permute(x, n, keys)
    assert ((y >= 0) & (y < n)).all()
    start = np.repeat(np.cumsum(ns) - ns, ns)
    seen = np.zeros(y.size, bool)
    seen[y + start] = True
    assert seen.all()
    # the same result as one call per domain with a scalar key
    for m in (1, 2, 16, 17, 255, 256, 257, 1000, 1600):
        sel = n == m
        assert np.array_equal(y[sel], permute(np.arange(m), m, int(keys[sel][0]))), m


@pytest.mark.parametrize("n", [2**31, 2**32 + 1, 2**40 + 3, 2**53 + 1, 2**62 + 5, 2**63 - 1])
def test_permute_huge_domains_stay_in_range_and_injective(n):
    rng = np.random.default_rng(n % 1000)
    x = np.unique(np.concatenate([rng.integers(0, n, 50_000, dtype=np.int64),
                                  np.arange(1000), n - 1 - np.arange(1000)]))
    for key in (0, derive(n), 2**64 - 1):
        y = permute(x, n, key)
        assert y.dtype == np.int64
        assert y.min() >= 0 and y.max() < n
        assert np.unique(y).size == x.size


def test_permute_edge_shapes():
    assert permute(0, 1, 123).tolist() == 0
    assert permute(np.zeros(7, np.int64), 1, 5).tolist() == [0] * 7
    empty = permute(np.zeros((0, 3), np.int64), 10, 1)
    assert empty.shape == (0, 3) and empty.dtype == np.int64
    # x, n and key broadcast against each other
    x = np.arange(12).reshape(3, 4)
    n = np.array([[20], [300], [5000]])
    keys = np.array([1, 2, 3, 4], np.uint64)
    y = permute(x, n, keys)
    assert y.shape == (3, 4)
    for i, j in itertools.product(range(3), range(4)):
        assert y[i, j] == permute(x[i, j], n[i, 0], int(keys[j]))


# -- element independence -------------------------------------------------------------------

_domain = st.one_of(st.integers(1, 16), st.integers(17, 256), st.integers(257, 10**6), st.integers(10**6, 2**62))


@st.composite
def _triples(draw):
    items = draw(st.lists(st.tuples(_domain, st.integers(0, 2**64 - 1), st.floats(0, 1, exclude_max=True)),
                          min_size=1, max_size=40))
    return [(int(f * n), n, k) for n, k, f in items]


@PROPS
@given(triples=_triples(), perm_seed=st.integers(0, 2**32 - 1))
def test_result_of_an_element_does_not_depend_on_the_others(triples, perm_seed):
    x = np.array([t[0] for t in triples], np.int64)
    n = np.array([t[1] for t in triples], np.int64)
    k = np.array([t[2] for t in triples], np.uint64)
    batch = permute(x, n, k)
    singles = np.array([permute(xi, ni, int(ki)) for xi, ni, ki in zip(x, n, k)])
    assert np.array_equal(batch, singles)
    order = np.random.default_rng(perm_seed).permutation(x.size)
    assert np.array_equal(permute(x[order], n[order], k[order]), batch[order])
    half = order[: max(1, x.size // 2)]
    assert np.array_equal(permute(x[half], n[half], k[half]), batch[half])
    # padding the batch with unrelated domains changes nothing either
    extra = np.array([3, 100, 5000, 2**40], np.int64)
    padded = permute(np.concatenate([x, extra - 1]), np.concatenate([n, extra]),
                     np.concatenate([k, np.array([9, 9, 9, 9], np.uint64)]))
    assert np.array_equal(padded[: x.size], batch)


# -- keys -------------------------------------------------------------------------------------

@pytest.mark.parametrize("n", [10, 16, 17, 100, 256, 257, 5000])
def test_different_keys_give_different_permutations(n):
    perms = {tuple(permute(np.arange(n), n, derive(3, key))) for key in range(64)}
    assert len(perms) == 64


def test_tiny_domains_use_every_permutation():
    for n in (2, 3, 4):
        seen = {tuple(permute(np.arange(n), n, derive(4, key))) for key in range(400)}
        assert len(seen) == math.factorial(n)


def _chi_square(counts: np.ndarray, expected: float) -> float:
    return float(((counts - expected) ** 2 / expected).sum())


@pytest.mark.parametrize("n,keys", [(3, 20000), (10, 20000), (17, 20000), (100, 4000), (300, 2000)])
def test_each_value_lands_in_each_slot_about_equally_often(n, keys):
    k = np.repeat(hash_index(derive(7, n), np.arange(keys)), n)
    x = np.tile(np.arange(n), keys)
    y = permute(x, n, k)
    counts = np.bincount(x * n + y, minlength=n * n)
    df = (n - 1) ** 2
    stat = _chi_square(counts, keys / n)
    # a loose bound: about six standard deviations of the chi-square distribution
    assert stat < df + 6 * math.sqrt(2 * df), (stat, df)
    if keys / n >= 50:
        assert counts.min() > 0


@pytest.mark.parametrize("n", [3, 4])
def test_tiny_domains_are_uniform_over_all_permutations(n):
    keys = 24000
    k = np.repeat(hash_index(derive(8, n), np.arange(keys)), n)
    y = permute(np.tile(np.arange(n), keys), n, k).reshape(keys, n)
    code = (y * n ** np.arange(n)).sum(axis=1)
    _, counts = np.unique(code, return_counts=True)
    total = math.factorial(n)
    assert counts.size == total
    df = total - 1
    assert _chi_square(counts, keys / total) < df + 6 * math.sqrt(2 * df)


# -- derive and hashes -------------------------------------------------------------------------

_VALUES = [0, 1, 2, 3, 0xFFFF, 2**32, 2**63 - 1, 2**63, 2**64 - 2, 2**64 - 1, 2**64, 2**64 + 1, 2**65,
           2**80 - 1, 2**128, 2**128 + 1, 3 * 2**64 + 7, -1, -2, -0xFFFF, -(2**63), -(2**64), -(2**64) - 1,
           -(2**80), -(2**128)]


def test_derive_is_distinct_for_distinct_inputs():
    inputs = [()]
    for length in (1, 2, 3):
        inputs += list(itertools.product(_VALUES if length < 3 else _VALUES[:12], repeat=length))
    keys = {}
    for parts in inputs:
        k = derive(*parts)
        assert 0 <= k < 2**64
        assert k not in keys, f"derive{parts} == derive{keys.get(k)}"
        keys[k] = parts


@PROPS
@given(a=st.lists(st.integers(-(2**200), 2**200), max_size=4), b=st.lists(st.integers(-(2**200), 2**200), max_size=4))
def test_derive_distinct_on_arbitrary_ints(a, b):
    assert derive(*a) == derive(*a)
    assert (derive(*a) == derive(*b)) == (a == b)


def test_derive_accepts_numpy_ints_and_order_matters():
    assert derive(np.int64(5), np.uint8(3)) == derive(5, 3)
    assert derive(1, 2) != derive(2, 1)
    assert derive(1) != derive(1, 0) != derive(0, 1)


def test_mix_matches_scalar_and_hashes_are_keyed():
    xs = [0, 1, 2**63, 2**64 - 1, 123456789]
    assert mix(np.array(xs, np.uint64)).tolist() == [mix_int(x) for x in xs]
    idx = np.arange(1000)
    assert np.unique(hash_index(5, idx)).size == 1000
    assert not np.array_equal(hash_index(5, idx), hash_index(6, idx))
    u = uniform_below(9, idx, 7)
    assert u.min() >= 0 and u.max() < 7 and np.unique(u).size == 7
    assert sorted(random_order(100, 4).tolist()) == list(range(100))
    assert not np.array_equal(random_order(100, 4), random_order(100, 5))
    assert random_order(0, 4).size == 0


def _parity(perm) -> int:
    seen = np.zeros(len(perm), bool)
    swaps = 0
    for i in range(len(perm)):
        j, length = i, 0
        while not seen[j]:
            seen[j] = True
            j = perm[j]
            length += 1
        swaps += max(length - 1, 0)
    return swaps % 2


@pytest.mark.parametrize("n,spread", [(2, 0.1), (5, 0.1), (8, 0.1), (13, 0.1), (16, 0.1), (17, 0.2), (20, 0.2),
                                      (100, 0.2)])
def test_odd_and_even_permutations_both_occur(n, spread):
    """Up to 16 elements every permutation is equally likely, so half of them are odd."""
    keys = 400
    k = np.repeat(hash_index(derive(9, n), np.arange(keys)), n)
    y = permute(np.tile(np.arange(n), keys), n, k).reshape(keys, n)
    odd = np.mean([_parity(row) for row in y])
    assert abs(odd - 0.5) < spread, odd
