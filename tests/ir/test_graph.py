import numpy as np
import pytest

import einsat
from einsat.errors import AttributeValueError, GraphError, InputError, ShapeError
from einsat.ir import Graph, GraphBuilder, Node, Op, TensorType


def small_graph():
    b = GraphBuilder("small")
    x = b.input("x", (2, 4))
    w = b.weight("w", np.arange(12, dtype=np.float32).reshape(4, 3))
    return b.build(b.relu(b.matmul(x, w)))


def test_builder_infers_types_and_runs():
    g = small_graph()
    assert g.types[g.outputs[0]] == TensorType((2, 3))
    x = np.linspace(-1, 1, 8, dtype=np.float32).reshape(2, 4)
    out = einsat.run(g, {"x": x})[g.outputs[0]]
    np.testing.assert_allclose(out, np.maximum(x @ np.arange(12, dtype=np.float32).reshape(4, 3), 0))


def test_nodes_are_put_in_topological_order():
    t = TensorType((3,))
    later = Node(Op.RELU, ["a"], ["b"])
    first = Node(Op.ADD, ["x", "x"], ["a"])
    g = Graph([later, first], {"x": t}, ["b"])
    assert [n.outputs[0] for n in g.nodes] == ["a", "b"]


def test_cycle_is_an_error_naming_its_nodes():
    t = TensorType((3,))
    nodes = [Node(Op.ADD, ["x", "c"], ["a"]), Node(Op.RELU, ["a"], ["b"]), Node(Op.RELU, ["b"], ["c"])]
    with pytest.raises(GraphError, match="cycle") as e:
        Graph(nodes, {"x": t}, ["c"])
    assert "'a'" in str(e.value) and "'b'" in str(e.value) and "'c'" in str(e.value)


def test_undefined_and_duplicate_values():
    t = TensorType((3,))
    with pytest.raises(GraphError, match="'nope'"):
        Graph([Node(Op.RELU, ["nope"], ["y"])], {"x": t}, ["y"])
    with pytest.raises(GraphError, match="defined twice"):
        Graph([Node(Op.RELU, ["x"], ["y"]), Node(Op.TANH, ["x"], ["y"])], {"x": t}, ["y"])


def test_shape_mismatch_names_node_op_and_shapes():
    b = GraphBuilder()
    x = b.input("x", (2, 4))
    w = b.weight("w", (5, 3))
    with pytest.raises(ShapeError) as e:
        b.matmul(x, w, name="proj")
    msg = str(e.value)
    assert "'proj'" in msg and "matmul" in msg and "[2, 4]" in msg and "[5, 3]" in msg


def test_bad_attribute_values():
    b = GraphBuilder()
    x = b.input("x", (1, 4, 8, 8))
    w = b.weight("w", (4, 4, 3, 3))
    with pytest.raises(AttributeValueError, match="stride"):
        b.conv(x, w, stride=0)
    with pytest.raises(AttributeValueError, match="unknown attribute"):
        b.conv(x, w, strides=2)
    with pytest.raises(ShapeError, match="groups"):
        b.conv(x, w, groups=3)


def test_run_checks_inputs():
    g = small_graph()
    with pytest.raises(InputError, match="missing input"):
        einsat.run(g, {})
    with pytest.raises(InputError, match=r"must be \[2, 4\] f32"):
        einsat.run(g, {"x": np.zeros((2, 5), np.float32)})
    with pytest.raises(InputError, match="f64"):
        einsat.run(g, {"x": np.zeros((2, 4))})
    with pytest.raises(InputError, match="unknown input"):
        einsat.run(g, {"x": np.zeros((2, 4), np.float32), "z": 1})


def test_graph_is_immutable():
    g = small_graph()
    with pytest.raises(ValueError):
        g.weights["w"][0, 0] = 1.0
    with pytest.raises(TypeError):
        g.nodes[0].attrs["x"] = 1


def test_printer_lists_every_node():
    g = small_graph()
    text = str(g)
    assert "matmul(x, w)" in text and "relu(" in text and "return" in text
