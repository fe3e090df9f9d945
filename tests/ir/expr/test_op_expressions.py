"""Every registry op that is tensor algebra has an expression, and it computes what the op does.

The cases are the per-op strategies of the GPU tests (`tests.gpu.cases.strategy`: strided,
dilated, padded, grouped windows, broadcasting, every layout op): each node of a case graph is
evaluated both by its NumPy semantics and by `evaluate(opdef.expression(...))`.
"""

import numpy as np
import pytest
from hypothesis import given, settings

from einsat.gpu.interpreter import run
from einsat.ir.expr import evaluate, fingerprint, parse
from einsat.ir.registry import REGISTRY, Op, opdef
from einsat.ir.types import TensorType
from tests.gpu.cases import strategy

# the ops whose semantics is a tensor-algebra expression (for some attributes at least)
EXPRESSED = sorted(op.value for op in (
    Op.ADD, Op.SUB, Op.MUL, Op.DIV, Op.MAXIMUM, Op.MINIMUM, Op.RELU, Op.SIGMOID, Op.TANH, Op.ERF, Op.GELU,
    Op.EXP, Op.LOG, Op.SQRT, Op.NEG, Op.ABS, Op.FLOOR, Op.POW, Op.SOFTMAX, Op.LAYERNORM, Op.RMSNORM,
    Op.MATMUL, Op.BATCHMATMUL, Op.GEMM, Op.G2BMM, Op.GBMM, Op.CONV, Op.CONV_TRANSPOSE, Op.FUSED_CONV,
    Op.FUSED_MATMUL, Op.AVGPOOL, Op.MAXPOOL, Op.GLOBAL_AVGPOOL, Op.REDUCE_SUM, Op.REDUCE_MEAN,
    Op.TRANSPOSE, Op.RESHAPE, Op.FLATTEN, Op.SQUEEZE, Op.UNSQUEEZE, Op.EXPAND, Op.CONCAT, Op.SLICE, Op.PAD,
    Op.IDENTITY, Op.CORRECT))


def check_nodes(case) -> int:
    """Compare every node of the case graph that has an expression; returns how many had one."""
    values = dict(case.inputs)
    values.update(run(case.graph, case.inputs))
    env = dict(case.inputs)
    checked = 0
    for node in case.graph.nodes:
        outs = node.definition.numpy([env[i] if i else None for i in node.inputs], node.attrs)
        env.update(zip(node.outputs, outs))
        ins = [case.graph.types[i] if i else None for i in node.inputs]
        e = node.definition.expression(ins, node.attrs)
        if e is None:
            continue
        args = [env[i] if i else np.zeros(0, np.float32) for i in node.inputs]
        got = evaluate(e, args, dtype=outs[0].dtype)
        want = outs[0]
        assert got.shape == want.shape, (node, e.shape, want.shape)
        scale = max(1.0, float(np.abs(want).max(initial=0)))
        tol = 1e-5 if want.dtype == np.float32 else 1e-10
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol * scale, err_msg=f"{node.op_name} {dict(node.attrs)}")
        assert parse(fingerprint(e)) is not None
        checked += 1
    return checked


@pytest.mark.parametrize("op", EXPRESSED)
def test_expression_equals_the_ops_numpy_semantics(op):
    seen = []

    @settings(max_examples=15)
    @given(strategy(op))
    def check(case):
        seen.append(check_nodes(case))

    check()
    assert sum(seen) > 0, f"{op}: no drawn case had an expression"


def test_ops_without_an_expression_say_none():
    t = TensorType((2, 3))
    for op, d in REGISTRY.items():
        if op.value in EXPRESSED:
            continue
        try:
            e = d.expression([t, t], {k: a.default for k, a in d.attrs.items()})
        except Exception:  # invalid default attributes for these types: the op is not asked
            continue
        assert e is None, op


def test_maxpool_with_padding_has_no_expression():
    # an expression pads with 0, maxpool with -inf: the two differ at a negative border
    d = opdef(Op.MAXPOOL)
    t = TensorType((1, 1, 4, 4))
    attrs = {"kernel": (3, 3), "stride": (1, 1), "padding": (1, 1, 1, 1), "dilation": (1, 1), "ceil_mode": 0}
    assert d.expression([t], attrs) is None
    assert d.expression([t], dict(attrs, padding=(0, 0, 0, 0))) is not None
