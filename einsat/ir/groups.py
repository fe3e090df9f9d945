"""Groups of ops, derived from the registry's flags: what a layer asks for instead of listing ops.

tinygrad keeps its op groups beside the op enum (`GroupOp.Unary`, ...); einsat derives them from
the facts each op's `OpDef` states (`einsat.ir.registry`), so that a new op joins every group its
flags put it in and no layer keeps a table of op names of its own (`tests/ir/test_op_facts.py`
scans the package for one). Each group is a frozenset of `Op`, or a tuple where order matters.
"""

from __future__ import annotations

import numpy as np

from einsat.ir import ops as _ops  # noqa: F401  (fills the registry)
from einsat.ir.registry import REGISTRY, Op, OpDef


def _with(test) -> frozenset[Op]:
    return frozenset(op for op, d in REGISTRY.items() if test(d))


def _single_output(d: OpDef) -> bool:
    return type(d).num_outputs is OpDef.num_outputs


# structured control flow: ops with subprograms (`bodies`)
CONTROL = _with(lambda d: bool(d.bodies))
# ops with no tensor inputs: their value comes from their attributes
SOURCES = _with(lambda d: d.source)
# in a pure program these launch nothing: sources, and ops that only name a value
FREE = SOURCES | _with(lambda d: d.aliases)
# the reshapes and axis permutations: every input element appears once in the output
PERMUTES = _with(lambda d: d.permutes)
# the reshapes: the input's elements in the same order (identity included)
RESHAPES = _with(lambda d: d.reshapes)
# the permutations and reshapes that change a layout (identity, which names a value, is not one)
RELAYOUTS = _with(lambda d: d.permutes and not d.aliases)
# layout ops with one output: a constant made by them from weights can be laid out at load time
LAYOUT = _with(lambda d: d.layout_only and _single_output(d))
# ops that compute nothing: sources and layout-only ops
NOT_COMPUTING = SOURCES | _with(lambda d: d.layout_only)
# multi-linear point-wise ops: element-wise ones, and the ones that only name a value
LINEAR_POINTWISE = _with(lambda d: d.multilinear and (d.elementwise or d.aliases))
# ops computing the same function at every spatial position: the flagged ones and the point-wise
PER_POSITION = _with(lambda d: d.per_position) | LINEAR_POINTWISE
# ops whose applications to inputs of one shape PET stacks into one
STACKS = _with(lambda d: d.stacks)
# the convolutions (cuDNN's): `tensor_core == "conv"`
CONVOLUTIONS = _with(lambda d: d.tensor_core == "conv")
# fused op -> its core op
FUSED_CORE: dict[Op, Op] = {op: d.fused_core for op, d in REGISTRY.items() if d.fused_core is not None}
# norm -> the op writing it of a residual sum together with the sum (`ops.skip_norm`: layernorm ->
# skip_layernorm, onnxruntime's contrib ops), read by `rewrites.algebra.skipnorm`
SKIP_NORM_OF: dict[Op, Op] = {d.norm: op for op, d in REGISTRY.items() if isinstance(d, _ops.skip_norm.SkipNorm)}
# the ops an epilogue fuses onto: the fused ops and their cores
FUSION_HEADS = frozenset(FUSED_CORE) | frozenset(FUSED_CORE.values())
# the matrix products onnxruntime runs as MatMul: matmul and the fused ops built on it
MATMULS = frozenset({Op.MATMUL}) | frozenset(op for op, core in FUSED_CORE.items() if core is Op.MATMUL)
# the ops EinNet's operator matching instantiates, in the order it prefers them on ties
MATCHED: tuple[Op, ...] = tuple(sorted((op for op, d in REGISTRY.items() if d.matched is not None),
                                       key=lambda op: REGISTRY[op].matched))
# the ops the derivation generator searches rewrites of
DERIVABLE = _with(lambda d: d.derivable)
# the ops inter-expression fusion composes with an eOperator child
EOP_FUSABLE = _with(lambda d: d.eop_fusable)
# the ops a fused chain (one eOperator) is made of
CHAIN_FUSABLE = _with(lambda d: d.chain_fusable)
# the unary element-wise ops the layout laws move through transposes and reshapes
LAYOUT_COMMUTES = _with(lambda d: d.layout_commutes)
# ops whose first two inputs can be exchanged
COMMUTATIVE = _with(lambda d: d.commutative)
# comparisons (bool results)
COMPARISONS = _with(lambda d: d.comparison)
# PET corrections
CORRECTIONS = _with(lambda d: d.correction)
# ops whose half-precision result is exactly a value of their half operands
EXACT_IN_HALF = _with(lambda d: d.exact_in_half)
# ops whose output has the first input's shape and dtype (stated, beside the element-wise unary)
SHAPE_OF_FIRST = _with(lambda d: d.shape_of_first)
# ops whose output dtype is not derived from the first input's
DTYPE_NOT_FIRST = _with(lambda d: not d.dtype_of_first)
# onnxruntime's NCHWc layout: the ops that run in it, and those that carry it on
NCHWC_BLOCKED = _with(lambda d: d.nchwc == "blocked")
NCHWC_CARRIED = _with(lambda d: d.nchwc == "carried")
# op -> the inputs the PET verifier reads as constants (indices, divisors, statistics)
PARAMETER_INPUTS: dict[Op, tuple[int, ...]] = {op: d.parameter_inputs for op, d in REGISTRY.items()
                                               if d.parameter_inputs}
# op -> the inputs a one-node onnxruntime model holds as initializers
PACKED_INPUTS: dict[Op, tuple[int, ...]] = {op: d.packed_inputs for op, d in REGISTRY.items() if d.packed_inputs}


def _ufuncs(attr: str, nin: int) -> dict[np.ufunc, Op]:
    out = {}
    for op, d in REGISTRY.items():
        fn = getattr(d, attr)
        if fn is not None and fn.nin == nin:
            out[fn] = op
    return out


# NumPy ufunc -> the op it computes, by arity (the frontend traces these)
UNARY_UFUNCS = _ufuncs("ufunc", 1)
BINARY_UFUNCS = _ufuncs("ufunc", 2)
# on bools only: the bitwise ufuncs that are boolean logic there
BOOL_UFUNCS = {**_ufuncs("bool_ufunc", 1), **_ufuncs("bool_ufunc", 2)}
# NumPy ufunc -> the reduction folding it (`np.add.reduce` is reduce_sum)
REDUCE_UFUNCS = {REGISTRY[d.reduces].ufunc: op for op, d in REGISTRY.items() if d.reduces is not None}
