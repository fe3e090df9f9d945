"""`functionalize(fn, example_inputs) -> Graph`: an imperative NumPy function as a pure program.

    def decode(p):                      # also runs on np.ndarray: that run is the oracle
        p = p.copy()
        p[..., :2] = 1 / (1 + np.exp(-p[..., :2]))
        np.exp(p[..., 2:4], out=p[..., 2:4])
        return p

    g = einsat.functionalize(decode, (pred,))      # inputs named after fn's parameters
    einsat.run(g, {"p": pred})["out"]              # == decode(pred.copy())

The pipeline is TensorSSA's (DAC'24, §4.1): trace (views and in-place updates recorded as an
imperative program), alias analysis, RewriteMutation (pass-up / pass-down), BlockPropagation,
renaming, dead-code elimination, lowering to `ir.Graph`; then, unless `fuse=False`, the vertical
fusion of Access / Assign chains (`fuse.fuse_views`).

Array arguments become graph inputs named like the parameters; other arguments (ints, shapes,
flags) are fixed at trace time. Outputs: `out` for one returned array, `out0`, `out1`, ... for
a tuple or list, the keys of a returned dict; an input the function updates in place gets an
extra output `<input>_out` holding its final value.
"""

from __future__ import annotations

import inspect

import numpy as np

from einsat.errors import FrontendError
from einsat.frontend import emit
from einsat.frontend.alias import analyze
from einsat.frontend.creation import numpy_constructors
from einsat.frontend.dce import eliminate_dead_code
from einsat.frontend.lower import to_graph
from einsat.frontend.program import Program
from einsat.frontend.propagate import block_propagation, rename
from einsat.frontend.rewrite import rewrite_mutations
from einsat.frontend.tensor import TracedArray
from einsat.frontend.tracer import Trace
from einsat.ir.graph import Graph
from einsat.ir.types import TensorType


def _parameter_names(fn, n: int) -> list[str]:
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        params = []
    names = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if any(p.kind is p.VAR_POSITIONAL for p in params) or len(names) < n:
        names += [f"arg{k}" for k in range(len(names), n)]
    return names[:n]


def _flatten(result) -> list[tuple[str, object]]:
    if result is None:
        return []
    if isinstance(result, dict):
        return [(str(k), v) for k, v in result.items()]
    if isinstance(result, (tuple, list)):
        return [(f"out{k}", v) for k, v in enumerate(result)]
    return [("out", result)]


def trace(fn, example_inputs, name: str | None = None) -> Program:
    """Run `fn` on traced arrays shaped like `example_inputs`: the imperative program it executes."""
    example_inputs = tuple(example_inputs)
    tr = Trace(name or getattr(fn, "__name__", "function"), TracedArray)
    args = []
    for pname, x in zip(_parameter_names(fn, len(example_inputs)), example_inputs):
        if isinstance(x, np.ndarray):
            tr.inputs.append(tr.new_value(pname, TensorType.of(x), exact=True))
            args.append(emit.wrap(tr, pname))
        else:
            args.append(x)
    with tr, numpy_constructors():
        try:
            result = fn(*args)
        except Exception as e:
            if tr.error is not None and e is not tr.error:  # NumPy replaced our error by its own
                raise tr.error from e
            raise
        if tr.error is not None:  # raised, swallowed, and the function went on
            raise tr.error
        outputs, names = [], []
        for label, value in _flatten(result):
            if isinstance(value, (tuple, list, dict)):
                raise FrontendError(f"{tr.name}: output {label!r} is a nested {type(value).__name__}; "
                                    "return arrays, or a flat tuple or dict of them")
            outputs.append(emit.lift(tr, value))
            names.append(label)
    return tr.program(outputs, names)


def functionalize_program(program: Program) -> Program:
    """TensorSSA conversion of a traced program, in place: no view, mutation or update remains."""
    alias = analyze(program)
    for x in program.inputs:  # inputs updated in place come back as extra outputs
        tree = alias.trees.get(x)
        if tree is not None and tree.mutations:
            program.outputs.append(x)
            program.output_names.append(f"{x}_out")
    rewrite_mutations(program, alias)
    block_propagation(program)
    rename(program)
    return eliminate_dead_code(program)


def functionalize(fn, example_inputs, fuse: bool = True, name: str | None = None) -> Graph:
    """The pure `ir.Graph` computing what `fn` computes on arrays like `example_inputs`.

    Raises `FrontendError` naming the source line for what cannot be functionalized: a
    data-dependent shape, Python control flow on a tensor value, an opaque call.
    """
    program = functionalize_program(trace(fn, example_inputs, name))
    graph = to_graph(program)
    if fuse:
        from einsat.frontend.fuse import fuse_views
        graph = fuse_views(graph)
    return graph
