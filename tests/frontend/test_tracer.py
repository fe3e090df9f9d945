"""What cannot be functionalized fails with a FrontendError that names the user's source line."""

import inspect

import numpy as np
import pytest

from einsat.errors import FrontendError
from einsat.frontend import cond, functionalize, loop

X = np.arange(12, dtype=np.float32).reshape(3, 4)
ONE = np.array(1, np.int64)


def data_dependent_if(x):
    if x.sum() > 0:  # error here
        return x
    return -x


def boolean_mask_read(x):
    return x[x > 3]  # error here


def nonzero(x):
    return np.nonzero(x)  # error here


def python_number(x):
    return np.ones(int(x.max()))  # error here


def opaque_call(x):
    a = np.asarray(x)  # error here
    a[0] = 0
    return x


def write_into_numpy_buffer(x):
    buf = np.arange(4, dtype=np.float32)  # a NumPy array (np.zeros/ones/empty/full make traced buffers)
    buf[0] = x[0, 0]  # error here
    return x


def traced_slice_bound(x, i):
    return x[i:i + 2]  # error here


def unknown_function(x):
    return np.cumsum(x)  # error here


def ufunc_at(x):
    np.add.at(x, [0, 0], 1)  # error here
    return x


def broadcast_write(x):
    b = np.broadcast_to(x[0], (3, 4))
    b[0, 0] = 1  # error here
    return b


def carried_update(x):
    def body(i, h):
        h += 1  # error here
        return h
    return loop(3, body, x[0].copy())


def escaping_value(x):
    kept = []

    def body(i):
        kept.append(x[i] * 2)
    loop(2, body)
    return kept[0] + 1  # error here


def casting(x):
    y = np.zeros_like(x, dtype=np.int64)
    y += x  # error here
    return y


def mismatched_branches(x, i):
    return cond(i > 0, lambda: x, lambda: x[0])  # error here


CASES = [
    (data_dependent_if, (X,), "truth value"),
    (boolean_mask_read, (X,), "data-dependent shape"),
    (nonzero, (X,), "data-dependent output shape"),
    (python_number, (X,), "int"),
    (opaque_call, (X,), "cannot trace"),
    (write_into_numpy_buffer, (X,), "write into a NumPy array"),
    (traced_slice_bound, (X, ONE), "slice bound is a traced value"),
    (unknown_function, (X,), "np.cumsum is not supported"),
    (ufunc_at, (X,), "np.add.at is not supported"),
    (broadcast_write, (X,), "read-only"),
    (carried_update, (X,), "loop-carried value"),
    (escaping_value, (X,), "defined inside a loop or cond body"),
    (casting, (X,), "same_kind"),
    (mismatched_branches, (X, ONE), "returns"),
]


def marked_line(fn) -> int:
    lines, start = inspect.getsourcelines(fn)
    for k, line in enumerate(lines):
        if "# error here" in line:
            return start + k
    raise AssertionError(f"{fn.__name__} has no marked line")


@pytest.mark.parametrize("fn, args, reason", CASES, ids=[c[0].__name__ for c in CASES])
def test_error_names_the_source_line(fn, args, reason):
    with pytest.raises(FrontendError) as e:
        functionalize(fn, args)
    msg = str(e.value)
    assert f"test_tracer.py:{marked_line(fn)} in " in msg, msg
    assert reason in msg, msg


@pytest.mark.parametrize("fn, args", [(c[0], c[1]) for c in CASES[:2] + CASES[5:6] + CASES[8:10]],
                         ids=lambda v: getattr(v, "__name__", ""))
def test_numpy_itself_runs_or_refuses_the_same_functions(fn, args):
    """The oracle: these constructs are legal NumPy (except writing through a broadcast), which is
    why einsat must say clearly that it cannot express them."""
    copies = [a.copy() for a in args]
    if fn is broadcast_write:
        with pytest.raises(ValueError, match="read-only"):
            fn(*copies)
    else:
        fn(*copies)


def test_a_view_escaping_its_body_is_refused_too():
    def f(x):
        kept = []
        loop(2, lambda i: kept.append(x[i]))
        return kept[0][1:]  # error here

    with pytest.raises(FrontendError, match="defined inside a loop or cond body") as e:
        functionalize(f, (X,))
    assert f"test_tracer.py:{marked_line(f)} in " in str(e.value)
