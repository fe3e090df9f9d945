"""The oracle: a function's eager NumPy run, compared exactly with its functionalized graph."""

from __future__ import annotations

import numpy as np

import einsat
from einsat.frontend import functionalize


def copies(args):
    return [a.copy() if isinstance(a, np.ndarray) else a for a in args]


def as_list(result) -> list[np.ndarray]:
    if result is None:
        return []
    if isinstance(result, dict):
        return [np.asarray(v) for v in result.values()]
    if isinstance(result, (tuple, list)):
        return [np.asarray(v) for v in result]
    return [np.asarray(result)]


def feeds_of(graph, args) -> dict:
    return dict(zip(graph.inputs, (a for a in args if isinstance(a, np.ndarray))))


def assert_same(got, want, what: str = "output") -> None:
    assert len(got) == len(want), f"{len(got)} {what}s, NumPy gives {len(want)}"
    for k, (a, b) in enumerate(zip(got, want)):
        assert a.dtype == b.dtype, f"{what} {k}: dtype {a.dtype}, NumPy gives {b.dtype}"
        assert a.shape == b.shape, f"{what} {k}: shape {a.shape}, NumPy gives {b.shape}"
        assert np.array_equal(a, b, equal_nan=True), f"{what} {k} differs from NumPy:\n{a}\n{b}"


def check(fn, *args, run_args=None, fuse=True):
    """functionalize(fn, args), run on `run_args` (default: args): outputs and final inputs
    equal fn's eager run exactly. Returns the graph."""
    g = functionalize(fn, args, fuse=fuse)
    run_args = args if run_args is None else run_args
    arrays = copies(run_args)
    want = as_list(fn(*arrays))
    out = einsat.run(g, feeds_of(g, run_args))
    got = [out[o] for o in g.outputs]
    assert_same(got[:len(want)], want)
    mutated = {o[:-len("_out")]: out[o] for o in g.outputs[len(want):]}
    for name, a, final in zip(g.inputs, (a for a in run_args if isinstance(a, np.ndarray)),
                              (a for a in arrays if isinstance(a, np.ndarray))):
        if name in mutated:
            assert_same([mutated[name]], [final], f"final value of input {name}")
        else:
            assert np.array_equal(final, a, equal_nan=True), f"NumPy updated input {name}, the graph does not say so"
    return g
