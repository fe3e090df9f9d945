"""Control flow on tensor values: `loop` and `cond`, kept as structured Loop / If statements.

Python control flow on Python values is simply executed while tracing (a `for` over `range(3)`
unrolls). Control flow on *tensor* values goes through these two helpers, which run as plain
Python on NumPy arrays (so the function stays its own oracle) and record a structured
statement with a body block when traced:

    out = loop(n, body, *carry)     # for i in range(n): carry = body(i, *carry)
    out = cond(pred, then_fn, else_fn, *operands)   # then_fn(*operands) if pred else else_fn(...)

Bodies may read and mutate any outer array in place (`out[i] = h`, `scores *= decay`): that is
exactly the mutation across control flow that TensorSSA's block propagation turns into block
arguments and returns. Carried values are passed by value: a loop body returns the new ones
and must not update its carried parameters in place (it raises; mutate an outer array instead).
`n` may be a Python int or a 0-d integer tensor; `pred` a bool or a 0-d bool tensor. Without a
trace, `i` is a Python int; traced, it is a 0-d int64 array.
"""

from __future__ import annotations

import numpy as np

from einsat.frontend import emit
from einsat.frontend.program import Block, IfStmt, LoopStmt
from einsat.frontend.tracer import Trace, current_trace, fail, user_line
from einsat.frontend.ufuncs import call
from einsat.ir.types import TensorType


def _as_tuple(result, n: int, what: str) -> tuple:
    if n == 0:
        if result is not None and not (isinstance(result, tuple) and not result):
            raise fail(f"{what} returns a value but the loop carries none")
        return ()
    if n == 1 and not isinstance(result, tuple):
        return (result,)
    if not isinstance(result, tuple) or len(result) != n:
        raise fail(f"{what} must return {n} carried values")
    return result


def _unpack(values: tuple):
    return None if not values else values[0] if len(values) == 1 else values


def loop(n, body, *carry):
    """for i in range(n): carry = body(i, *carry); returns the final carry (None, one value, or
    a tuple). Traced, it is one Loop statement whose body is traced once."""
    tr = current_trace()
    if tr is None:
        for i in range(int(n)):
            carry = _as_tuple(body(i, *carry), len(carry), "the loop body")
        return _unpack(tuple(carry))
    return _unpack(_traced_loop(tr, n, body, carry))


def cond(pred, then_fn, else_fn, *operands):
    """then_fn(*operands) if pred else else_fn(*operands). Traced with a tensor `pred`, both
    branches are traced and kept as one If statement."""
    tr = current_trace()
    if tr is None or not emit.is_traced(pred):
        return (then_fn if pred else else_fn)(*operands)
    return _traced_cond(tr, pred, then_fn, else_fn, operands)


def _traced_loop(tr: Trace, n, body, carry) -> tuple:
    line = user_line()
    if emit.is_traced(n):
        if n.ndim != 0 or not np.issubdtype(n.dtype, np.integer):
            raise fail(f"the trip count must be a 0-d integer tensor, got {n.type}")
        trip = emit.lift(tr, n)
    else:
        trip = tr.constant(np.asarray(int(n), np.int64))
    inits = []
    for c in carry:
        if not emit.is_traced(c) and not isinstance(c, np.ndarray):
            raise fail(f"loop-carried values must be arrays, got {type(c).__name__}")
        inits.append(emit.lift(tr, c))
    block = Block()
    with tr.block(block):
        i = tr.new_value("i", TensorType((), np.int64))
        params = [tr.new_value("carry", tr.types[c]) for c in inits]
        block.params = [i, *params]
        tr.params.update(block.params)
        tr.scalars.add(i)  # NumPy's run gets a Python int
        result = _as_tuple(body(emit.wrap(tr, i), *(emit.wrap(tr, p) for p in params)),
                           len(inits), "the loop body")
        block.returns = [_returned(tr, r, tr.types[c], "the loop body") for r, c in zip(result, inits)]
    outputs = [tr.new_value("loop", tr.types[c]) for c in inits]
    tr.emit(LoopStmt(trip, inits, outputs, block, line))
    _note_aliases(tr, block, outputs)
    return tuple(emit.wrap(tr, o) for o in outputs)


def _traced_cond(tr: Trace, pred, then_fn, else_fn, operands):
    line = user_line()
    if pred.size != 1:
        raise fail(f"the condition must have one element, got {pred.type}")
    c = emit.lift(tr, pred)
    if pred.dtype != np.bool_:
        c = call(tr, np.not_equal, [pred, 0])._name
    then, other = Block(), Block()
    with tr.block(then):
        r_then = then_fn(*operands)
    with tr.block(other):
        r_else = else_fn(*operands)
    structure = (type(r_then).__name__, len(r_then) if isinstance(r_then, tuple) else None)
    if structure != (type(r_else).__name__, len(r_else) if isinstance(r_else, tuple) else None):
        raise fail("the two branches of cond return different structures")
    r_then = () if r_then is None else r_then if isinstance(r_then, tuple) else (r_then,)
    r_else = () if r_else is None else r_else if isinstance(r_else, tuple) else (r_else,)
    with tr.block(then):
        then.returns = [emit.lift(tr, r) for r in r_then]
    types = [tr.types[r] for r in then.returns]
    with tr.block(other):
        other.returns = [_returned(tr, r, t, "else_fn") for r, t in zip(r_else, types)]
    outputs = [tr.new_value("if", t) for t in types]
    tr.emit(IfStmt(c, outputs, then, other, line))
    _note_aliases(tr, then, outputs)
    _note_aliases(tr, other, outputs)
    result = tuple(emit.wrap(tr, o) for o in outputs)
    return None if structure[0] == "NoneType" else result if structure[1] is not None else result[0]


def _returned(tr: Trace, value, want: TensorType, what: str) -> str:
    name = emit.lift(tr, value)
    if tr.types[name] != want:
        raise fail(f"{what} returns {tr.types[name]} where {want} is expected (carried values and "
                   "branch results keep their shape and dtype)")
    return name


def _note_aliases(tr: Trace, block: Block, outputs: list[str]) -> None:
    """Outputs whose returned value lives in storage the block did not create alias that storage
    (NumPy returns the same object): mutating them later cannot be functionalized."""
    made = {n for n, scope in tr.scope.items() if scope == id(block)}
    for r, o in zip(block.returns, outputs):
        if tr.root[r] not in made or tr.root[r] in block.params:
            tr.aliased_outputs.add(o)
