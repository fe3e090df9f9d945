"""Hypothesis strategies of whole programs (re-exported by `einsat.testing.strategies`).

    from hypothesis import given
    from einsat.testing import strategies as es

    @given(es.programs(max_nodes=4))
    def test_my_pass_keeps_outputs(graph):
        assert equivalent(graph, my_pass(graph))

Everything shrinks: a program is drawn (`st.composite`) as a list of steps — an op, the value it
applies to, its attributes and any weights it needs — so hypothesis reduces a failing program to
fewer steps, earlier ops in the op list, smaller shapes and default attributes; each step applies
to the k-th latest value with k shrinking to 0, so failing chains stay chains as steps go. Nodes
the outputs do not depend on are dropped.

  attrs_for(op, types)                   valid attributes of an op for its input types
  programs(ops, max_nodes, ...)          random well-typed programs over the registry
  multilinear_programs(...)              programs of PET's multi-linear ops (MLTPs) only
  chains(...)                            element-wise, broadcast and reduction chains (what fusion
                                         merges into one eOperator: softmax, norms, GELU, ...)
  mutant_pairs(families)                 (original, mutant, regions where they differ): mutants.py
  program_inputs(graph)                  input arrays for a program

`ELEMENTWISE`, `MULTILINEAR` and `ALL_OPS` are the op lists the strategies draw from by default;
pass `ops=[...]` to draw from others (in order of preference: shrinking moves to the first). They
are derived, not listed: each op a program can apply registers how (`@builds`, in order of
preference; `NOT_DRAWN` says why an op has none), and the registry's flags pick the lists
(element-wise; multi-linear or affine over the field, PET's MLTPs; `CHAIN_OPS`: chain_fusable).
"""

from __future__ import annotations

from typing import Callable

import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from einsat.errors import AttributeValueError, ShapeError
from einsat.ir.builder import GraphBuilder
from einsat.ir.graph import Graph
from einsat.ir.registry import REGISTRY, Op
from einsat.runtime import random_inputs
from einsat.testing.attrs import attrs_for

__all__ = ["ALL_OPS", "CHAIN_OPS", "ELEMENTWISE", "MULTILINEAR", "chains", "input_arrays", "multilinear_programs",
           "program_inputs", "programs"]



def _shapes(min_rank: int = 1, max_rank: int = 4, min_side: int = 1, max_side: int = 5) -> st.SearchStrategy:
    return st.lists(st.integers(min_side, max_side), min_size=min_rank, max_size=max_rank).map(tuple)


def program_inputs(graph, seed: int = 0) -> dict[str, np.ndarray]:
    """Seeded standard-normal inputs for `graph` (a plain function: use it inside a test)."""
    return random_inputs(graph, seed)


def input_arrays(graph) -> st.SearchStrategy:
    """A strategy of input dicts for `graph`: finite floats in [-2, 2]."""
    elems = st.floats(-2, 2, width=32, allow_nan=False)
    return st.fixed_dictionaries({n: hnp.arrays(graph.types[n].dtype, graph.types[n].shape, elements=elems)
                                  for n in graph.inputs})


def _weight(b, shape, positive=False):
    w = b.weight(None, tuple(shape))
    if positive:  # keep divisors and variances away from zero
        b._weights[w.name] = np.abs(b._weights[w.name]) + np.float32(0.5)
    return w


def _other(draw, b, x, pool, op):
    """The second operand of a binary op: x itself, a value of the same shape, or a weight that
    broadcasts (a suffix of x's shape with some dims set to 1)."""
    same = [t for t in pool if t.shape == x.shape]
    kind = draw(st.integers(0, 2))
    if op is Op.DIV or kind == 2 or not same:
        k = draw(st.integers(0, x.type.rank))
        shape = [n if draw(st.booleans()) else 1 for n in x.shape[k:]]
        return _weight(b, shape, positive=op is Op.DIV)
    return x if kind == 0 else draw(st.sampled_from(same))


# -- builders: how a program applies each op it can draw, registered per op ------------------------

BUILDERS: dict[Op, Callable] = {}


def builds(*ops: Op) -> Callable:
    """Register the decorated function as the way `programs` applies `ops`:
    `fn(draw, b, op, x, pool, pad_modes)` -> the op's outputs, or None where it does not apply to x.
    Registration order is the order of preference (shrinking moves towards the first)."""
    def register(fn):
        for op in ops:
            BUILDERS[op] = fn
        return fn
    return register


def _make(draw, b, op: Op, x, pool, pad_modes):
    """Apply `op` to `x` (drawing what else it needs); None when it does not apply to x."""
    build = BUILDERS.get(op)
    return None if build is None else build(draw, b, op, x, pool, pad_modes)


@builds(Op.ADD)
def _binary(draw, b, op, x, pool, pad_modes):
    return [b.op(op, x, _other(draw, b, x, pool, op))]


@builds(Op.RELU)
def _unary(draw, b, op, x, pool, pad_modes):
    return [b.op(op, x, **draw(attrs_for(op, [x.type])))]


builds(Op.MUL, Op.SUB)(_binary)
builds(Op.SIGMOID, Op.TANH)(_unary)
builds(Op.DIV)(_binary)
builds(Op.GELU, Op.LEAKY_RELU, Op.NEG)(_unary)


@builds(Op.TRANSPOSE, Op.RESHAPE)
def _by_attrs(draw, b, op, x, pool, pad_modes):
    if x.type.rank < 1 or op is Op.SQUEEZE and 1 not in x.shape or op is Op.SPLIT and max(x.shape, default=0) < 2 \
            or op is Op.EXPAND and 1 not in x.shape:
        return None
    out = b.op(op, x, **draw(attrs_for(op, [x.type], pad_modes=pad_modes)))
    return list(out) if isinstance(out, tuple) else [out]


@builds(Op.MATMUL)
def _matmul(draw, b, op, x, pool, pad_modes):
    if x.type.rank < 1:
        return None
    return [b.matmul(x, _weight(b, (x.shape[-1], draw(st.integers(1, 4)))))]


@builds(Op.CONV)
def _conv(draw, b, op, x, pool, pad_modes):
    shape = x.shape
    if x.type.rank not in (3, 4):
        return None
    c = shape[1]
    g = draw(st.sampled_from([d for d in range(1, c + 1) if c % d == 0]))
    f = g * draw(st.integers(1, 2))
    kernel = tuple(draw(st.integers(1, 3)) for _ in shape[2:])
    wshape = (f, c // g) + kernel if op is Op.CONV else (c, f // g) + kernel
    w = _weight(b, wshape)
    attrs = draw(attrs_for(op, [x.type, w.type]))
    bias = _weight(b, (f,)) if draw(st.booleans()) else None
    return [b.op(op, x, w, bias, groups=g, **attrs)] if bias is not None else [b.op(op, x, w, groups=g, **attrs)]


@builds(Op.CONCAT)
def _concat(draw, b, op, x, pool, pad_modes):
    shape, r = x.shape, x.type.rank
    if r < 1:
        return None
    a = draw(attrs_for(op, [x.type]))
    same = [t for t in pool if t.shape[:a["axis"]] == shape[:a["axis"]] and t.type.rank == r
            and t.shape[a["axis"] + 1:] == shape[a["axis"] + 1:]]
    return [b.concat(x, draw(st.sampled_from(same)), **a)]


builds(Op.SPLIT, Op.SLICE, Op.PAD)(_by_attrs)


@builds(Op.AVGPOOL)
def _pool(draw, b, op, x, pool, pad_modes):
    return [b.op(op, x, **draw(attrs_for(op, [x.type])))] if x.type.rank in (3, 4) else None


builds(Op.REDUCE_SUM, Op.REDUCE_MEAN)(_by_attrs)
builds(Op.GLOBAL_AVGPOOL)(_pool)
builds(Op.FLATTEN, Op.UNSQUEEZE, Op.SQUEEZE, Op.EXPAND)(_by_attrs)


@builds(Op.BATCHMATMUL)
def _batchmatmul(draw, b, op, x, pool, pad_modes):
    shape = x.shape
    if x.type.rank != 3:
        return None
    return [b.batchmatmul(x, _weight(b, (shape[0], shape[2], draw(st.integers(1, 4)))))]


@builds(Op.GEMM)
def _gemm(draw, b, op, x, pool, pad_modes):
    if x.type.rank != 2:
        return None
    a = draw(attrs_for(op, [x.type]))
    k = x.shape[0] if a["trans_a"] else x.shape[1]
    n = draw(st.integers(1, 4))
    w = _weight(b, (n, k) if a["trans_b"] else (k, n))
    c = _weight(b, (n,)) if draw(st.booleans()) else None
    return [b.gemm(x, w, c, **a)] if c is not None else [b.gemm(x, w, **a)]


@builds(Op.BATCHNORM)
def _batchnorm(draw, b, op, x, pool, pad_modes):
    if x.type.rank < 2:
        return None
    c = x.shape[1]
    params = [_weight(b, (c,)), _weight(b, (c,)), _weight(b, (c,)), _weight(b, (c,), positive=True)]
    return [b.batchnorm(x, *params)]


@builds(Op.GATHER)
def _gather(draw, b, op, x, pool, pad_modes):
    if x.type.rank < 1:
        return None
    a = draw(attrs_for(op, [x.type]))
    n = x.shape[a["axis"]]
    idx = draw(st.lists(st.integers(-n, n - 1), min_size=1, max_size=3))
    return [b.gather(x, b.weight(None, np.array(idx, dtype=np.int64)), **a)]


builds(Op.CONV_TRANSPOSE)(_conv)
builds(Op.SOFTMAX)(_by_attrs)
builds(Op.MAXPOOL)(_pool)


@builds(Op.LAYERNORM)
def _layernorm(draw, b, op, x, pool, pad_modes):
    if x.type.rank < 1:
        return None
    a = draw(attrs_for(op, [x.type]))
    return [b.layernorm(x, _weight(b, x.shape[a["axis"]:]), **a)]


@builds(Op.RMSNORM)
def _rmsnorm(draw, b, op, x, pool, pad_modes):
    if x.type.rank < 1:
        return None
    a = draw(attrs_for(op, [x.type]))
    return [b.rmsnorm(x, _weight(b, x.shape[a["axis"]:]), **a)]


builds(Op.IDENTITY)(_unary)

# op -> why a program cannot draw it yet (`tests/testing/test_strategies.py` checks that every op
# exact over the field is drawn or has a reason here)
NOT_DRAWN: dict[Op, str] = {}


def not_drawn(op: Op, reason: str) -> None:
    NOT_DRAWN[op] = reason


not_drawn(Op.G2BMM, "a banded product needs two [batch, m, k] operands of one shape and a width that fits")
not_drawn(Op.GBMM, "a banded product needs a [batch, m, 2w+1] band and a [batch, m, n] operand")
not_drawn(Op.ACCESS, "a functionalization view: the frontend makes it from imperative code")
not_drawn(Op.CONSTANT, "a source: programs draw inputs and weights instead")
not_drawn(Op.CORRECT, "a PET correction: `mutant_pairs` and the corrector make them")
not_drawn(Op.EOP, "an eOperator: derivations and fusion make them from drawn programs")


def _exact_over_field(op: Op) -> bool:
    from einsat.verify.field.table import AFFINE  # the field rules' affine ops (PET §3)
    return REGISTRY[op].multilinear or op in AFFINE


# the op lists the strategies draw from, in the builders' order (first = preferred): element-wise
# ops, the ops exact over the field (PET's multi-linear and affine ops: MLTPs), every op drawn
ELEMENTWISE = [op for op in BUILDERS if REGISTRY[op].elementwise]
MULTILINEAR = [op for op in BUILDERS if _exact_over_field(op)]
ALL_OPS = ELEMENTWISE + [op for op in BUILDERS if op not in ELEMENTWISE]


@st.composite
def programs(draw, ops=None, max_nodes: int = 5, max_inputs: int = 2, min_rank: int = 1, max_rank: int = 4,
             max_side: int = 5, max_size: int = 2048, pad_modes=("constant", "reflect", "edge"),
             constant_tails: bool = False):
    """A random well-typed program: up to `max_nodes` ops from `ops` (default `ALL_OPS`) over
    1..`max_inputs` float32 inputs; weights are seeded normals. Its outputs are the last value
    and, sometimes, one earlier value. `constant_tails`: sometimes the last value v ends in a
    constant behind a commutative op, mul(relu(v - v), v) or minimum(relu(v - v), relu(v)), its
    operands in either order (0 on every input: a verification must look behind it)."""
    ops = list(ops or ALL_OPS)
    b = GraphBuilder("random", seed=draw(st.integers(0, 2**16)))
    pool = []
    for k in range(draw(st.integers(1, max_inputs))):
        pool.append(b.input(f"x{k}", draw(_shapes(min_rank, max_rank, 1, max_side))))
    inputs = list(pool)
    made = []
    for _ in range(draw(st.integers(1, max_nodes))):
        op = draw(st.sampled_from(ops))
        x = pool[-1 - draw(st.integers(0, len(pool) - 1))]  # shrinks towards the latest value: chains
        try:
            outs = _make(draw, b, op, x, pool, pad_modes)
        except (ShapeError, AttributeValueError):
            outs = None  # the drawn attributes do not fit: this step adds nothing
        if outs and all(o.type.size <= max_size and o.type.size > 0 for o in outs):
            pool.extend(outs)
            made.append(outs[0])
    for op in ops if not made else ():  # at least one op: the first in the list that applies
        try:
            outs = _make(draw, b, op, inputs[0], pool, pad_modes)
        except (ShapeError, AttributeValueError):
            outs = None
        if outs:
            made.append(outs[0])
            break
    if not made:  # none of `ops` applies to the input: a rename
        made.append(b.identity(inputs[0]))
    if constant_tails and draw(st.integers(0, 3)) == 3:  # shrinks to no tail
        made.append(_constant_tail(draw, b, made[-1]))
    results = [made[-1]]
    if len(made) > 1 and draw(st.booleans()):
        results.insert(0, draw(st.sampled_from(made[:-1])))
    return live(b.build(*results))


def _constant_tail(draw, b, v):
    """0 on every input, computed by a commutative op from values that vary: mul(relu(v - v), v)
    or minimum(relu(v - v), relu(v)), the operands in a drawn order."""
    zero = b.relu(b.sub(v, v))
    op = draw(st.sampled_from([Op.MUL, Op.MINIMUM]))
    other = v if op is Op.MUL else b.relu(v)
    return b.op(op, other, zero) if draw(st.booleans()) else b.op(op, zero, other)


# -- chains: ops combined the way norms, softmax and GELU are written out --------------------------

CHAIN_BUILDERS: dict[Op, Callable] = {}


def chain_builds(*ops: Op) -> Callable:
    """Register how a chain applies `ops` (`fn(draw, b, op, x, pool)` -> a value or None); an op
    without one is applied as `programs` applies it."""
    def register(fn):
        for op in ops:
            CHAIN_BUILDERS[op] = fn
        return fn
    return register


@chain_builds(Op.ERF)
def _erf(draw, b, op, x, pool):
    return b.erf(x)


@chain_builds(Op.POW)
def _pow(draw, b, op, x, pool):
    return b.pow(x, b.const(draw(st.sampled_from([2.0, 3.0]))))


@chain_builds(Op.SOFTMAX)
def _softmax(draw, b, op, x, pool):
    return b.softmax(x, axis=draw(st.integers(0, x.type.rank - 1)))


@chain_builds(Op.MAXIMUM)
def _maximum(draw, b, op, x, pool):
    return b.maximum(x, _other(draw, b, x, pool, op))


@chain_builds(Op.REDUCE_MEAN, Op.REDUCE_SUM)
def _statistic(draw, b, op, x, pool):
    """A reduction combined with `x` at once: centring, scaling by a row statistic."""
    r = x.type.rank
    stat = b.op(op, x, axes=(r - 1,), keepdims=1)
    if draw(st.booleans()):  # a root-mean-square: x / sqrt(mean(x * x) + eps)
        stat = b.sqrt(b.add(b.op(op, b.mul(x, x), axes=(r - 1,), keepdims=1), b.const(0.5)))
        return b.div(x, stat)
    return b.op(draw(st.sampled_from([Op.SUB, Op.MUL])), x, stat)


def _chain_step(draw, b, op: Op, x, pool):
    """One op of a chain applied to `x`."""
    if op in CHAIN_BUILDERS:
        return CHAIN_BUILDERS[op](draw, b, op, x, pool)
    outs = _make(draw, b, op, x, pool, ("constant",))
    return outs[0] if outs else None


# the ops a chain draws: those fusion merges into one eOperator (the registry's chain_fusable)
CHAIN_OPS = [op for op in dict.fromkeys([*BUILDERS, *CHAIN_BUILDERS]) if REGISTRY[op].chain_fusable]


@st.composite
def chains(draw, ops=None, max_nodes: int = 6, max_rank: int = 3, max_side: int = 5):
    """A random chain of element-wise, broadcast and reduction ops (default `CHAIN_OPS`) over one
    or two float32 inputs: each step applies to the latest value or the one before (so values
    fan out and join, as a GELU's input does), binary ops take a broadcast weight, a value of the
    same shape or the value itself. The programs fusion merges into one eOperator."""
    ops = list(ops or CHAIN_OPS)
    b = GraphBuilder("chain", seed=draw(st.integers(0, 2**16)))
    shape = draw(_shapes(1, max_rank, 1, max_side))
    pool = [b.input(f"x{k}", shape) for k in range(draw(st.integers(1, 2)))]
    made = []
    for _ in range(draw(st.integers(1, max_nodes))):
        op = draw(st.sampled_from(ops))
        x = pool[-1 - draw(st.integers(0, min(1, len(pool) - 1)))]
        try:
            out = _chain_step(draw, b, op, x, pool)
        except (ShapeError, AttributeValueError):
            out = None
        if out is not None and out.type.size > 0:
            pool.append(out)
            made.append(out)
    if not made:
        made.append(b.relu(pool[-1]))
    return live(b.build(made[-1]))


def live(g: Graph) -> Graph:
    """`g` without the nodes its outputs do not depend on."""
    needed, keep = set(g.outputs), []
    for node in reversed(g.nodes):
        if needed & set(node.outputs):
            keep.append(node)
            needed |= {i for i in node.inputs if i}
    weights = {k: v for k, v in g.weights.items() if k in needed}
    return Graph(list(reversed(keep)), g.input_types(), g.outputs, weights, g.name)


def multilinear_programs(ops=None, **kwargs) -> st.SearchStrategy:
    """Programs of multi-linear (and affine) ops only: PET's MLTPs, testable over the field."""
    kwargs.setdefault("pad_modes", ("constant", "reflect", "edge"))
    return programs(ops=ops or MULTILINEAR, **kwargs)
