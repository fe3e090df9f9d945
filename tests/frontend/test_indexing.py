"""Indexing on traced arrays follows NumPy: views, scalar copies, masks, gathers, in-place writes."""

import numpy as np
import pytest

from tests.frontend.oracle import check

X = np.arange(60, dtype=np.float32).reshape(3, 4, 5)


def read(key):
    return lambda x: x[key].copy()


@pytest.mark.parametrize("key", [
    1, -1, (1, 2), (-1, -2, -3), slice(None, None, -1), (slice(1, None), slice(None, None, 2)),
    (Ellipsis, 1), (None, 0), (slice(None), None, slice(3, 0, -2)), (2, Ellipsis, None),
    (slice(-2, None), 3, slice(-1, -6, -2)), (slice(5, 9),), (slice(3, 1),), (),
    (0, 1, 2), (np.int64(1), np.int32(-2)),
])
def test_basic_reads(key):
    check(read(key), X)


def test_integer_array_index_reads_a_copy():
    def f(x, idx):
        g = x[:, idx]
        g += 100  # a copy: x does not change
        return g, x[idx[1:3]], x

    check(f, X, np.array([3, 0, -1, 3]))


def test_scalar_index_is_a_copy_but_ellipsis_keeps_a_view():
    def f(x):
        s = x[0, 1, 2]          # NumPy: a scalar copy
        v = x[0, 1, 2, ...]     # a 0-d view
        x[0, 1, 2] = -7
        return s, v

    check(f, X)


@pytest.mark.parametrize("key, value", [
    ((0,), 1.5), ((slice(None), 1), -1), ((Ellipsis, slice(None, None, -2)), 9),
    ((1, slice(1, 3)), np.arange(5, dtype=np.float32)), ((slice(None), None, 0), 4),
])
def test_writes(key, value):
    def f(x):
        x = x.copy()
        x[key] = value
        return x

    check(f, X)


def test_write_through_chains_of_views_reaches_every_live_view():
    def f(x):
        x = x.copy()
        a = x[1]                 # [4, 5]
        b = a.T                  # [5, 4]
        c = b[::2, 1:]           # [3, 3]
        d = x[:, 1:3]            # overlaps c
        c *= 10
        d[0] -= 1
        return x, a, b, c, d

    check(f, X)


def test_reshape_is_a_view_only_where_numpy_makes_one():
    def f(x):
        x = x.copy()
        flat = x.reshape(-1)        # a view
        flat[:7] = -1
        t = x.transpose(2, 0, 1)
        r = t.reshape(5, 12)        # NumPy copies: writes do not reach x
        r[0] = 99
        s = t.reshape(5, 3, 4)      # a view again (no dims merged)
        s[1, 1] = 42
        return x, flat, r, s

    check(f, X)


def test_overlapping_copy_reads_before_it_writes():
    def f(x):
        x = x.copy()
        x[:, 1:] = x[:, :-1]
        x[::-1] += x
        return x

    check(f, X)


def test_boolean_mask_writes():
    def f(x, m):
        x = x.copy()
        x[x > 30] = 0
        x[:, m] = -1
        x[..., m[0]] = 7
        np.putmask(x, x < 3, 3)
        return x

    check(f, X, np.array([[True, False, True, False, False]] * 4))


def test_views_of_functions():
    def f(x):
        x = x.copy()
        views = [np.swapaxes(x, 0, 2), np.moveaxis(x, 0, -1), np.expand_dims(x, 1), x[:, :1].squeeze(1),
                 np.flip(x, 1), x.ravel(), np.transpose(x), np.squeeze(x[None])]
        for k, v in enumerate(views):
            v[(0,) * v.ndim] = -k
        return (x, *views, np.broadcast_to(x[0, 0], (2, 5)).copy())

    check(f, X)


def test_iteration_and_len():
    def f(x):
        total = np.zeros_like(x[0])
        for row in x:            # views, one per row
            total += row
            row[...] = len(x)
        return total, x

    check(f, X.copy())


def test_in_place_through_a_view_mutates_the_base():
    def f(x):
        x = x.copy()
        v = x[0]
        v *= 2
        np.maximum(v, 20, out=v)
        np.copyto(x[2, :, 1:3], x[1, :, 0:1])
        x[1] **= 2
        return x, v

    check(f, X)


def test_a_0d_array_index_reads_a_copy_and_a_loop_index_a_view():
    from einsat.frontend import loop

    def f(x, i):
        x = x.copy()
        c = x[i]               # i is a 0-d array: NumPy's advanced indexing copies
        x[i] = -1              # and writes through it

        def body(j, acc):
            v = x[j]           # j is a Python int in NumPy's run: a view
            x[j] *= 2
            return acc + v     # the view sees the doubled row

        acc = loop(2, body, np.zeros_like(x[0]))
        return c, x, acc

    check(f, X, np.array(1))


def test_scalars_are_immutable_as_in_numpy():
    def f(x):
        s = x.sum()            # a NumPy scalar
        t = s
        s += 1                 # rebinds s; t keeps its value
        m = x[0, 0, 0]         # an item: a scalar copy
        m *= 3
        return s, t, m, x

    check(f, X)
