"""`eop`: EinNet's eOperator (§5.2), a node that carries its tensor-algebra expression.

    eop(x0, x1, ...; expr="(E (L 0:4 0:8) (S -1:2) (T 0 i0 (+ i1 s0)))")

`expr` is the canonical print of an `einsat.ir.expr.Expr` whose reads name the node's inputs by
position (normalization canonicalizes it, so equal expressions are equal attributes and
hash-cons in the e-graph). Everything about the node follows from the expression:
- semantics: `einsat.ir.expr.evaluate` (masked gathers and sums, vectorized);
- shape: the traversal ranges; dtype: the inputs';
- FLOPs: every grid point's arithmetic (`measure.flops`); bytes: the registry's default, inputs
  read once and the output written once, so a memory-bound eOperator is charged its bytes;
- ONNX: the chain of registry ops it was fused from, when the fusion generator made it (its
  `chain` attribute, `ops.eop_chain`: LayerNormalization, Softmax, Gelu, Add, ... as onnxruntime
  and other runtimes know them); otherwise an expansion into Range, Gather, element-wise ops and
  a reduction (`expr.onnx`);
- multi-linear when its body is (PET's verifier evaluates it over the field: `verify`).
"""

from __future__ import annotations

import functools

from einsat.errors import AttributeValueError
from einsat.ir.expr import Expr, parse
from einsat.ir.expr import onnx as expr_onnx
from einsat.ir.expr.measure import flops, is_multilinear
from einsat.ir.expr.nodes import reads
from einsat.ir.expr.printer import fingerprint
from einsat.ir.expr.semantics import evaluate
from einsat.ir.ops import eop_chain
from einsat.ir.registry import Attr, Op, OpDef, ShapeError, register, same_dtype
from einsat.ir.types import TensorType


@functools.lru_cache(maxsize=4096)
def expression_of(text: str) -> Expr:
    """The expression of an eop's `expr` attribute (parsed once per distinct text)."""
    return parse(text)


def _input_ranks(e: Expr, ranks: dict[int, int]) -> None:
    for r in reads(e.body):
        if isinstance(r.src, int):
            ranks.setdefault(r.src, len(r.idx))
            if ranks[r.src] != len(r.idx):
                raise ShapeError(f"input {r.src} is read with {ranks[r.src]} and with {len(r.idx)} subscripts")
        else:
            if len(r.idx) != len(r.src.loops):
                raise ShapeError(f"a scope of rank {len(r.src.loops)} is read with {len(r.idx)} subscripts")
            _input_ranks(r.src, ranks)


CHAIN = Attr("str", "", provenance=True,
             doc="the chain of registry ops it was fused from, which its export writes (`ops.eop_chain`); "
                 "empty: none")


@register
class Eop(OpDef):
    """An eOperator: out = the expression `expr` over the inputs (EinNet §5.2)."""

    op = Op.EOP
    eop_fusable = True
    chain_fusable = True
    arity = (1, None)
    attrs = {"expr": Attr("str", doc="the canonical print of its expression (einsat.ir.expr)"),
             "chain": CHAIN}
    doc = "EinNet's eOperator: a node computing its tensor-algebra expression"

    def normalize(self, attrs, types):
        try:
            attrs["expr"] = fingerprint(expression_of(attrs["expr"]))
        except AttributeValueError as e:  # normalize_attrs names the node for a ValueError
            raise ValueError(str(e)) from None
        eop_chain.check(attrs["chain"], len(types), 1)
        return attrs

    def is_multilinear(self, attrs):
        return is_multilinear(expression_of(attrs["expr"]))

    def infer(self, types, attrs):
        e = expression_of(attrs["expr"])
        ranks: dict[int, int] = {}
        _input_ranks(e, ranks)
        for k, rank in sorted(ranks.items()):
            if k >= len(types):
                raise ShapeError(f"the expression reads input {k}, the node has {len(types)} inputs")
            if types[k].rank != rank:
                raise ShapeError(f"the expression reads input {k} with {rank} subscripts, but it is {types[k]}")
        return [TensorType(e.shape, same_dtype(types))]

    def numpy(self, args, attrs):
        dtype = same_dtype([TensorType.of(a) for a in args])
        return [evaluate(expression_of(attrs["expr"]), args, dtype)]

    def expression(self, inputs, attrs):
        return expression_of(attrs["expr"])

    def flops(self, ins, outs, attrs):
        """Every grid point's arithmetic (scopes included)."""
        return flops(expression_of(attrs["expr"]))

    def to_onnx(self, ctx, node):
        if node.attrs.get("chain"):
            eop_chain.write(ctx, node.attrs["chain"], node)
            return
        e = expression_of(node.attrs["expr"])
        expr_onnx.export(ctx, e, list(node.inputs), node.outputs[0], ctx.type(node.outputs[0]).dtype)


SEPARATOR = " ; "


@functools.lru_cache(maxsize=4096)
def expressions_of(text: str) -> tuple[Expr, ...]:
    """The expressions of an `eop_multi`'s `exprs` attribute, one per output (parsed once)."""
    return tuple(parse(part) for part in text.split(";"))


def join_expressions(exprs) -> str:
    """The `exprs` attribute of an `eop_multi` computing `exprs` (canonical prints)."""
    return SEPARATOR.join(fingerprint(e) for e in exprs)


@register
class EopMulti(OpDef):
    """A fused eOperator with several outputs over one set of inputs: output k is the expression
    `exprs[k]` (the canonical prints, ' ; '-separated). What the fusion generator makes of a
    chain one of whose values is also read outside it: GPT-2's residual sum feeds the layernorm
    and the next residual add, so the norm's kernel also writes the sum it computes (one launch,
    the sum's round trip saved). All outputs have the first output's dtype (the inputs')."""

    op = Op.EOP_MULTI
    arity = (1, None)
    attrs = {"exprs": Attr("str", doc="the canonical prints of its outputs' expressions, ' ; '-separated"),
             "chain": CHAIN}
    doc = "a fused eOperator writing several outputs, each its own expression over the same inputs"

    def normalize(self, attrs, types):
        try:
            attrs["exprs"] = join_expressions(expressions_of(attrs["exprs"]))
        except AttributeValueError as e:
            raise ValueError(str(e)) from None
        eop_chain.check(attrs["chain"], len(types), len(expressions_of(attrs["exprs"])))
        return attrs

    def num_outputs(self, attrs):
        return len(expressions_of(attrs["exprs"]))

    def infer(self, types, attrs):
        ranks: dict[int, int] = {}
        exprs = expressions_of(attrs["exprs"])
        for e in exprs:
            _input_ranks(e, ranks)
        for k, rank in sorted(ranks.items()):
            if k >= len(types):
                raise ShapeError(f"an expression reads input {k}, the node has {len(types)} inputs")
            if types[k].rank != rank:
                raise ShapeError(f"an expression reads input {k} with {rank} subscripts, but it is {types[k]}")
        dtype = same_dtype(types)
        return [TensorType(e.shape, dtype) for e in exprs]

    def numpy(self, args, attrs):
        dtype = same_dtype([TensorType.of(a) for a in args])
        return [evaluate(e, args, dtype) for e in expressions_of(attrs["exprs"])]

    def flops(self, ins, outs, attrs):
        """Every output's grid points' arithmetic (scopes included)."""
        return sum(flops(e) for e in expressions_of(attrs["exprs"]))

    def to_onnx(self, ctx, node):
        """The chain it was fused from, else each output as its own expansion (`expr.onnx`)."""
        if node.attrs.get("chain"):
            eop_chain.write(ctx, node.attrs["chain"], node)
            return
        dtype = ctx.type(node.outputs[0]).dtype
        for e, out in zip(expressions_of(node.attrs["exprs"]), node.outputs):
            expr_onnx.export(ctx, e, list(node.inputs), out, dtype)
