import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from einsat.errors import VerificationError
from einsat.verify.field import (
    P,
    Source,
    dot_mod,
    embed,
    embed_constant,
    hash_rows,
    inverse,
    matmul_mod,
    random_at,
    unique,
)

residues = st.integers(0, P - 1)


def exact_matmul(a, b):
    """The reference: Python integers, reduced at the end."""
    return (np.matmul(np.asarray(a, dtype=object), np.asarray(b, dtype=object)) % P).astype(np.int64)


def test_embed_is_exact_on_dyadic_rationals():
    assert embed(np.array(1.0)) == 1
    assert embed(np.array(-1.0)) == P - 1
    half = int(embed(np.array(0.5)))
    assert half * 2 % P == 1
    assert int(embed(np.array(0.375))) * 8 % P == 3
    assert embed(np.array(0.0)) == 0 and embed(np.array(-0.0)) == 0
    assert np.array_equal(embed(np.array([3, -2], dtype=np.int64)), [3, P - 2])
    assert np.array_equal(embed(np.array([True, False])), [1, 0])


dyadic = st.builds(lambda m, e: np.float64(m) * 2.0**e, st.integers(-2**20, 2**20), st.integers(-10, 10))


@given(dyadic, dyadic)
def test_embed_is_a_ring_homomorphism(a, b):
    # 20-bit mantissas within 2^±30: float64 sums and products are exact, the same rationals
    assert embed(a + b) == (int(embed(a)) + int(embed(b))) % P
    assert embed(a * b) == int(embed(a)) * int(embed(b)) % P


def test_embed_rejects_non_finite_values():
    with pytest.raises(VerificationError, match="non-finite"):
        embed(np.array([1.0, np.nan]))


@given(st.lists(st.integers(1, P - 1), min_size=1, max_size=20))
def test_inverse(values):
    a = np.array(values, dtype=np.int64)
    assert np.all(inverse(a) * a % P == 1)


def test_inverse_of_zero_is_an_error():
    with pytest.raises(VerificationError, match="division by zero"):
        inverse(np.array([3, P]))


@given(st.integers(1, 5), st.integers(1, 3000), st.integers(1, 5), st.integers(0, 2**31))
def test_matmul_mod_matches_python_integers(m, k, n, seed):
    rng = np.random.default_rng(seed)
    a, b = rng.integers(0, P, (m, k)), rng.integers(0, P, (k, n))
    assert np.array_equal(matmul_mod(a, b), exact_matmul(a, b))


def test_matmul_mod_extremes_and_batches():
    a, b = np.full((2, 5000), P - 1), np.full((5000, 3), P - 1)  # the largest residues, long sums
    assert np.array_equal(matmul_mod(a, b), exact_matmul(a, b))
    rng = np.random.default_rng(0)
    a, b = rng.integers(0, P, (4, 1, 2, 5)), rng.integers(0, P, (3, 5, 2))  # broadcast batches
    assert np.array_equal(matmul_mod(a, b), exact_matmul(a, b))
    a, b = rng.integers(0, P, (2, 70)), rng.integers(0, P, (70, 300))  # the left side is the smaller
    assert np.array_equal(matmul_mod(a, b), exact_matmul(a, b))


@given(st.lists(st.tuples(residues, residues), min_size=1, max_size=50))
def test_dot_mod(pairs):
    a = np.array([p[0] for p in pairs], dtype=np.int64)
    b = np.array([p[1] for p in pairs], dtype=np.int64)
    assert dot_mod(a, b) == sum(int(x) * int(y) for x, y in pairs) % P


def test_random_values_are_a_function_of_key_and_position():
    flat = np.array([5, 0, 5, 1_000_000])
    v = random_at(7, flat)
    assert v[0] == v[2] and np.all((v >= 0) & (v < P))
    assert np.array_equal(random_at(7, flat[::-1]), v[::-1])
    assert not np.array_equal(random_at(8, flat), v)
    many = random_at(1, np.arange(20000))
    assert len(np.unique(many)) == 20000  # no visible collisions
    assert abs(many.mean() / P - 0.5) < 0.01


def test_source_adds_a_constant_to_its_random_part():
    delta = np.zeros((2, 3), np.int64)
    delta[1, 2] = 5
    s, base = Source(key=3, const=delta), Source(key=3)
    d = (s.dense((2, 3), 0) - base.dense((2, 3), 0)) % P
    assert np.array_equal(d, delta)
    assert s.degree == 1 and Source(const=delta).degree == 0
    assert not np.array_equal(base.dense((2, 3), 0), base.dense((2, 3), 1))  # tests differ


def test_unique_and_hash_rows():
    assert np.array_equal(unique(np.array([3, 1, 3, -1, 2])), [-1, 1, 2, 3])
    rows = np.array([[1.0, 2.0], [1.0, 2.0], [2.0, 1.0]])
    h = hash_rows(rows)
    assert h[0] == h[1] != h[2] and np.all(h >= 0)


def test_embed_constant_reads_a_rounded_float_as_the_fraction_it_stands_for():
    ninth = int(inverse(np.int64(9)))
    assert embed_constant(np.float32(1 / 9)) == ninth
    assert embed_constant(np.float64(1 / 9)) == ninth
    assert embed(np.float32(1 / 9)) != ninth  # the dyadic value of float32(1/9) is not 1/9
    third = embed_constant(np.full((2, 3), 2 / 3, np.float32))
    assert third.shape == (2, 3) and np.all(third == 2 * int(inverse(np.int64(3))) % P)
    # dyadic values keep their value, signs too; integers are embedded as they are
    np.testing.assert_array_equal(embed_constant(np.array([0.5, -0.25, 3.0], np.float32)),
                                  embed(np.array([0.5, -0.25, 3.0])))
    np.testing.assert_array_equal(embed_constant(np.array([7, -2])), embed(np.array([7, -2])))


def test_embed_constant_leaves_tensors_of_many_values_dyadic():
    many = np.random.default_rng(0).standard_normal(200).astype(np.float32)
    np.testing.assert_array_equal(embed_constant(many), embed(many))
