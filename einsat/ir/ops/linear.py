"""Matrix products: matmul (NumPy/ONNX semantics), batchmatmul, gemm."""

from __future__ import annotations

import numpy as np

from einsat.ir.expr import Call, Const, Expr, var
from einsat.ir.expr.build import broadcast_read, epilogue, iters
from einsat.ir.expr.nodes import Read
from einsat.ir.registry import Attr, Op, OpDef, ShapeError, broadcast_shapes, one_of, register, same_dtype
from einsat.ir.types import TensorType


def matmul_shape(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    if not a or not b:
        raise ShapeError("matmul needs inputs of rank >= 1")
    a2 = (1,) + a if len(a) == 1 else a
    b2 = b + (1,) if len(b) == 1 else b
    if a2[-1] != b2[-2]:
        raise ShapeError(f"contracted dims differ: {list(a)} @ {list(b)}")
    batch = broadcast_shapes(a2[:-2], b2[:-2])
    out = batch + (a2[-2], b2[-1])
    if len(a) == 1:
        out = out[:-2] + out[-1:]
    if len(b) == 1:
        out = out[:-1]
    return out


def _matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """np.matmul in the operands' dtype (NumPy computes bfloat16 products in float32)."""
    return np.matmul(a, b).astype(a.dtype, copy=False)


def matmul_expression(a: tuple[int, ...], b: tuple[int, ...], out: tuple[int, ...]) -> Expr:
    """L_{batch,m,n} Σ_k a[batch, m, k] · b[batch, k, n] with NumPy's batch broadcasting and
    1-d promotion (a vector operand has no m or no n)."""
    loops = iters("o", out)
    k = iters("k", (a[-1],))[0]
    m = var(loops[-1 - (len(b) > 1)].name) if len(a) > 1 else None
    n = var(loops[-1].name) if len(b) > 1 else None
    nbatch = len(out) - (m is not None) - (n is not None)
    batch = loops[:nbatch]

    def operand(src, shape, tail):
        lead = broadcast_read(src, shape[:len(shape) - len(tail)], batch).idx if len(shape) > len(tail) else ()
        return Read(src, lead + tail)

    ra = operand(0, a, (m, var(k.name)) if m is not None else (var(k.name),))
    rb = operand(1, b, (var(k.name), n) if n is not None else (var(k.name),))
    return Expr(loops, (k,), Call("mul", (ra, rb)))


@register
class MatMul(OpDef):
    op = Op.MATMUL
    stacks = True
    ufunc = np.matmul
    matched = 0
    tensor_core = "gemm"
    arity = (2, 2)
    multilinear = True
    onnx_type = "MatMul"

    def infer(self, types, attrs):
        a, b = types
        return [TensorType(matmul_shape(a.shape, b.shape), same_dtype(types))]

    def numpy(self, args, attrs):
        return [_matmul(*args)]

    def expression(self, inputs, attrs):
        a, b = inputs
        return matmul_expression(a.shape, b.shape, matmul_shape(a.shape, b.shape))

    def flops(self, ins, outs, attrs):
        """2·K per output element (a multiply-add counts 2)."""
        k = ins[0].shape[-1]
        return 2 * outs[0].size * k


@register
class BatchMatMul(OpDef):
    """out[b] = a[b] @ b[b] for a [B, M, K], b [B, K, N]: matmul without broadcasting.

    Exports to ONNX MatMul; imports never produce it (`onnx_type` None: MatMul imports as matmul).
    """

    op = Op.BATCHMATMUL
    matched = 1
    tensor_core = "gemm"
    arity = (2, 2)
    multilinear = True

    def infer(self, types, attrs):
        a, b = types
        if a.rank != 3 or b.rank != 3:
            raise ShapeError(f"batchmatmul needs [B, M, K] and [B, K, N] inputs, got {a} and {b}")
        if a.shape[0] != b.shape[0]:
            raise ShapeError(f"batch dims differ: {a.shape[0]} and {b.shape[0]}")
        if a.shape[2] != b.shape[1]:
            raise ShapeError(f"contracted dims differ: {list(a.shape)} @ {list(b.shape)}")
        return [TensorType((a.shape[0], a.shape[1], b.shape[2]), same_dtype(types))]

    def numpy(self, args, attrs):
        return [_matmul(*args)]

    def expression(self, inputs, attrs):
        a, b = inputs
        return matmul_expression(a.shape, b.shape, self.infer(inputs, attrs)[0].shape)

    def flops(self, ins, outs, attrs):
        """2·B·M·N·K."""
        return 2 * outs[0].size * ins[0].shape[2]

    def to_onnx(self, ctx, node):
        ctx.node("MatMul", node.inputs, node.outputs)


_BIT = one_of(0, 1)


def _gemm_mnk(a: TensorType, b: TensorType, attrs) -> tuple[int, int, int]:
    if a.rank != 2 or b.rank != 2:
        raise ShapeError(f"gemm needs 2-d inputs, got {a} and {b}")
    m, k = a.shape[::-1] if attrs["trans_a"] else a.shape
    k2, n = b.shape[::-1] if attrs["trans_b"] else b.shape
    if k != k2:
        raise ShapeError(f"contracted dims differ: {k} (a, trans_a={attrs['trans_a']}) and "
                         f"{k2} (b, trans_b={attrs['trans_b']})")
    return m, n, k


@register
class Gemm(OpDef):
    """y = alpha · op(a) @ op(b) + beta · c, op = transpose when trans_* is 1 (ONNX Gemm).

    a, b are 2-d; c (optional) broadcasts to [M, N]. Multi-linear in a and b (c aside).
    """

    op = Op.GEMM
    packed_inputs = (1, 2)  # the weight and the bias
    tensor_core = "gemm"
    arity = (2, 3)
    multilinear = True
    onnx_type = "Gemm"
    attrs = {
        "alpha": Attr("float", 1.0),
        "beta": Attr("float", 1.0),
        "trans_a": Attr("int", 0, _BIT),
        "trans_b": Attr("int", 0, _BIT),
    }

    def infer(self, types, attrs):
        a, b = types[0], types[1]
        c = types[2] if len(types) > 2 else None
        m, n, _ = _gemm_mnk(a, b, attrs)
        fits = c is None or (c.rank <= 2 and all(d in (1, w) for d, w in zip(c.shape[::-1], (n, m))))
        if not fits:
            raise ShapeError(f"c {c} does not broadcast to [{m}, {n}]")
        return [TensorType((m, n), same_dtype(types))]

    def numpy(self, args, attrs):
        a, b = args[0], args[1]
        c = args[2] if len(args) > 2 else None
        a = a.T if attrs["trans_a"] else a
        b = b.T if attrs["trans_b"] else b
        y = a @ b
        if attrs["alpha"] != 1.0:
            y = y * np.asarray(attrs["alpha"], y.dtype)
        if c is not None:
            y = y + (c if attrs["beta"] == 1.0 else c * np.asarray(attrs["beta"], c.dtype))
        return [np.asarray(y, dtype=np.result_type(*(t for t in args if t is not None)), order="C")]

    def expression(self, inputs, attrs):
        """alpha · Σ_k op(a)[m, k] · op(b)[k, n], plus beta · c[...] (a scope) when c is given."""
        m, n, kd = _gemm_mnk(inputs[0], inputs[1], attrs)
        loops = iters("o", (m, n))
        k = iters("k", (kd,))[0]
        im, inn, ik = (var(x.name) for x in (*loops, k))
        ra = Read(0, (ik, im) if attrs["trans_a"] else (im, ik))
        rb = Read(1, (inn, ik) if attrs["trans_b"] else (ik, inn))
        body = Call("mul", (ra, rb))
        if attrs["alpha"] != 1.0:
            body = Call("mul", (Const(attrs["alpha"]), body))
        core = Expr(loops, (k,), body)
        if len(inputs) < 3 or inputs[2] is None:
            return core
        c = broadcast_read(2, inputs[2].shape, loops)
        return epilogue(core, loops, c if attrs["beta"] == 1.0 else Call("mul", (Const(attrs["beta"]), c)))

    def flops(self, ins, outs, attrs):
        """2·M·N·K, + M·N when alpha != 1, + M·N for adding c, + M·N when c is scaled (beta != 1)."""
        m, n, k = _gemm_mnk(ins[0], ins[1], attrs)
        total = 2 * m * n * k + (m * n if attrs["alpha"] != 1.0 else 0)
        if len(ins) > 2 and ins[2] is not None:
            total += m * n * (2 if attrs["beta"] != 1.0 else 1)
        return total

    def from_onnx(self, ctx, onode):
        a = ctx.attrs(onode)
        attrs = {"alpha": a.get("alpha", 1.0), "beta": a.get("beta", 1.0),
                 "trans_a": a.get("transA", 0), "trans_b": a.get("transB", 0)}
        return list(onode.input), attrs

    def to_onnx(self, ctx, node):
        a = node.attrs
        ctx.node("Gemm", node.inputs, node.outputs, alpha=a["alpha"], beta=a["beta"],
                 transA=a["trans_a"], transB=a["trans_b"])
