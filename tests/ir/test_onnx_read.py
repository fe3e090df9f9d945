"""What the import refuses, clearly, and what it recovers (einsat/ir/onnx/read.py, onnx.importer.py).

Refused with an `OnnxError` naming the model and the value: element types einsat does not compute
with, a version conversion that changes the model's inputs, an opaque node whose subgraph reads
the enclosing graph. Recovered: an opaque node's output type that ONNX lost on the way is
inferred again from einsat's static input types; CastLike is a cast, Reciprocal a division of 1.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import einsat
from einsat.errors import OnnxError
from einsat.ir import Op
from einsat.ir.onnx.read import outer_names
from tests.ir.test_onnx_import import check_against_ort, make, ort_outputs, x


@pytest.mark.parametrize("elem, text", [(TensorProto.STRING, "string"), (TensorProto.FLOAT8E4M3FN, "float8e4m3fn"),
                                        (TensorProto.INT4, "int4"), (TensorProto.COMPLEX64, "complex64")])
def test_element_types_einsat_does_not_compute_with_are_refused(elem, text):
    m = make([helper.make_node("Cast", ["a"], ["c"], to=elem), helper.make_node("Cast", ["c"], ["y"], to=1)],
             [("a", [2])], [("y", [2])], opset=21)
    with pytest.raises(OnnxError, match=rf"model 'm': 'c' has type tensor\({text}\); einsat computes tensors of"):
        einsat.load_onnx(m)


def test_a_version_conversion_that_changes_the_inputs_is_refused():
    """Scan before opset 9 had a batch dim; onnx.version_converter drops it from the model's inputs."""
    body = helper.make_graph(
        [helper.make_node("Add", ["s", "v"], ["s2"]), helper.make_node("Identity", ["s2"], ["o"])], "body",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2]) for n in ("s", "v")],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2]) for n in ("s2", "o")])
    scan = helper.make_node("Scan", ["", "init", "xs"], ["total", "partial"], num_scan_inputs=1, body=body)
    m = make([scan], [("init", [1, 2]), ("xs", [1, 3, 2])], [("total", [1, 2]), ("partial", [1, 3, 2])], opset=8)
    with pytest.raises(OnnxError, match=r"opset 8; converted to 13.*change: 'init' tensor\(float\)\[1, 2\] -> "
                                        r"tensor\(float\)\[2\]"):
        einsat.load_onnx(m)


def test_an_opaque_node_whose_subgraph_reads_the_enclosing_graph_is_refused():
    then = helper.make_graph([helper.make_node("Relu", ["a"], ["r"])], "then", [],
                             [helper.make_tensor_value_info("r", TensorProto.FLOAT, [2])])
    other = helper.make_graph([helper.make_node("Neg", ["a"], ["e"])], "else", [],
                              [helper.make_tensor_value_info("e", TensorProto.FLOAT, [2])])
    node = helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other)
    assert outer_names(node) == {"a"}
    m = make([node], [("c", [], TensorProto.BOOL), ("a", [2])], [("y", [2])])
    with pytest.raises(OnnxError, match=r"'y' \(If\).*subgraph reads \['a'\] from the enclosing graph"):
        einsat.load_onnx(m)


def test_an_opaque_output_type_lost_by_onnx_is_inferred_from_einsat_types():
    """ONNX cannot follow the mask's length through Shape -> Squeeze -> Range (a symbolic dim);
    einsat folds it, and the opaque IsNaN after it gets its type from einsat's [1, n] input."""
    nodes = [helper.make_node("Shape", ["a"], ["s"], start=1, end=2),
             helper.make_node("Squeeze", ["s"], ["n"]),
             helper.make_node("Range", ["zero", "n", "one"], ["r"]),
             helper.make_node("Cast", ["r"], ["rf"], to=TensorProto.FLOAT),
             helper.make_node("Mul", ["a", "rf"], ["m"]),
             helper.make_node("IsNaN", ["m"], ["nan"]),
             helper.make_node("Where", ["nan", "a", "m"], ["y"])]
    m = make(nodes, [("a", [1, "n"])], [("y", [1, "n"])], inits=[("zero", np.int64(0)), ("one", np.int64(1))])
    g = einsat.load_onnx(m, input_shapes={"a": (1, 6)})
    opaque = [n for n in g.nodes if n.op is Op.OPAQUE]
    assert all(g.types[o].shape == (1, 6) for n in opaque for o in n.outputs)
    a = x(1, 6)
    a[0, 2] = np.inf  # inf * 2 stays inf; the test is the type, the value is NumPy's
    np.testing.assert_array_equal(einsat.run(g, {"a": a})["y"], a * np.arange(6, dtype=np.float32))


def test_cast_like_imports_as_a_cast():
    m = make([helper.make_node("CastLike", ["a", "like"], ["y"])], [("a", [2, 3]), ("like", [1], TensorProto.INT32)],
             [("y", [2, 3], TensorProto.INT32)])
    g = check_against_ort(m, {"a": x(2, 3) * 10, "like": np.zeros(1, np.int32)})
    assert [n.op for n in g.nodes] == [Op.CAST] and g.nodes[0].attrs["dtype"] == "int32"


@pytest.mark.filterwarnings("ignore:divide by zero:RuntimeWarning")  # 1/0 on purpose
@pytest.mark.parametrize("elem, dtype", [(TensorProto.FLOAT, np.float32), (TensorProto.DOUBLE, np.float64),
                                         (TensorProto.FLOAT16, np.float16)])
def test_reciprocal_imports_as_a_division_of_one(elem, dtype):
    m = make([helper.make_node("Reciprocal", ["a"], ["y"])], [("a", [3, 4], elem)], [("y", [3, 4], elem)])
    a = (x(3, 4) * 4).astype(dtype)
    a[0, :3] = [0.0, -0.0, np.inf]  # IEEE: 1/0 = inf, 1/-0 = -inf, 1/inf = 0, as onnxruntime computes them
    g = check_against_ort(m, {"a": a})
    (node,) = g.nodes
    assert node.op is Op.DIV and node.inputs[1] == "a"
    one = g.weights[node.inputs[0]]
    assert one.shape == () and one.dtype == dtype and one == 1
    assert einsat.run(g, {"a": a})["y"].dtype == dtype
    from einsat.ir.onnx.export import to_onnx
    saved = to_onnx(g)  # exported back as a Div of a scalar 1
    assert [n.op_type for n in saved.graph.node] == ["Div"]
    np.testing.assert_array_equal(ort_outputs(saved, {"a": a})[0], ort_outputs(m, {"a": a})[0])
