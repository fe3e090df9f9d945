"""Lowering: functionalized kernels are ordinary graphs that export to ONNX (Loop / If
subgraphs included) and run on onnxruntime with einsat's outputs."""

import numpy as np
import onnx
import pytest

import einsat
from benchmarks.imperative import KERNELS
from einsat.frontend import functionalize
from einsat.frontend.lower import free_values
from einsat.frontend.program import Block, OpStmt
from einsat.ir import Op
from einsat.ir.onnx.export import to_onnx
from tests.frontend.oracle import feeds_of
from tests.ir.onnx_check import ort_run


@pytest.mark.parametrize("name", list(KERNELS))
def test_kernel_exports_to_onnx_and_onnxruntime_agrees(name):
    kernel = KERNELS[name]
    args = kernel.inputs(np.random.default_rng(5))
    g = functionalize(kernel.fn, args)
    feeds = feeds_of(g, args)
    model = to_onnx(g)
    onnx.checker.check_model(model, full_check=True)
    ours = einsat.run(g, feeds)
    for out, theirs in zip(g.outputs, ort_run(model, feeds)):
        if theirs.dtype == np.bool_ or np.issubdtype(theirs.dtype, np.integer):
            np.testing.assert_array_equal(theirs, ours[out])
        else:
            np.testing.assert_allclose(theirs, ours[out], rtol=1e-5, atol=1e-5)


def test_free_values_are_what_a_body_reads_from_outside():
    body = Block(params=["i"], stmts=[OpStmt(Op.ADD, ["i", "outer"], ["t"], {}),
                                      OpStmt(Op.MUL, ["t", "const.1"], ["u"], {})], returns=["u", "other"])
    assert free_values(body, {"const.1": None}) == ["outer", "other"]
