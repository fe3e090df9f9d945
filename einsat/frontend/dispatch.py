"""The NumPy functions traced arrays answer (`__array_function__`): one table, filled with
`@implements(np.f)` by `functions.py` (views, copies, reductions, in-place updates) and
`creation.py` (constructors); `tensor.py` imports both before dispatching."""

from __future__ import annotations

import numpy as np

from einsat.frontend.tracer import Traced, fail

FUNCTIONS = {}
DATA_DEPENDENT = {np.nonzero, np.flatnonzero, np.argwhere, np.unique, np.compress, np.extract}


def implements(*funcs):
    def deco(fn):
        for f in funcs:
            FUNCTIONS[f] = fn
        return fn
    return deco


def array_function(func, args, kwargs):
    if func in DATA_DEPENDENT:
        raise fail(f"np.{func.__name__} has a data-dependent output shape, which a static program "
                   "cannot express; use masks (np.where) instead")
    impl = FUNCTIONS.get(func)
    if impl is None:
        known = _known_arguments(args, kwargs)
        if known is not None:  # untraced function, arguments known at trace time: NumPy's result
            return func(*known[0], **known[1])
        raise fail(f"np.{func.__name__} is not supported by einsat's tracer")
    return impl(*args, **kwargs)


def _known_arguments(args, kwargs):
    """`args` and `kwargs` with every traced array replaced by its known contents, or None when
    one is not known at trace time (see `Trace.known`)."""
    def value(x):
        if not isinstance(x, Traced):
            return x
        known = x._trace.known_value(x._name)
        if known is None:
            raise LookupError
        return known
    try:
        return [value(a) for a in args], {k: value(v) for k, v in kwargs.items()}
    except LookupError:
        return None
