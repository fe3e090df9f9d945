"""The NumPy functions traced arrays answer (`__array_function__`): one table, filled with
`@implements(np.f)` by `functions.py` (views, copies, reductions, in-place updates) and
`creation.py` (constructors); `tensor.py` imports both before dispatching."""

from __future__ import annotations

import numpy as np

from einsat.frontend.tracer import fail

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
        raise fail(f"np.{func.__name__} is not supported by einsat's tracer")
    return impl(*args, **kwargs)
