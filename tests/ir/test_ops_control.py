"""loop and if_: body graphs with captured inputs; NumPy semantics, type checks, ONNX Loop/If."""

import numpy as np
import onnx
import pytest

import einsat
from einsat.errors import EinsatError
from einsat.ir import Graph, GraphBuilder, Node, Op, TensorType
from einsat.ir.onnx.export import to_onnx
from tests.ir.onnx_check import ort_run

F = np.float32


def cumulative():
    """out = loop(n, acc=x; acc' = acc * 2 + w[i]) with w captured."""
    body = GraphBuilder("body")
    i, acc, w = body.input("i", (), np.int64), body.input("acc", (3,)), body.input("w", (5, 3))
    row = body.access(w, i, spec=[("dselect", 0, 0)])
    two = body.const(2.0)
    g_body = body.build(body.add(body.mul(acc, two), row))
    b = GraphBuilder("outer")
    n, x, w = b.input("n", (), np.int64), b.input("x", (3,)), b.input("w", (5, 3))
    out = b.loop(n, x, w, body=g_body, n_carried=1)
    return b.build(out)


def branches():
    then = GraphBuilder("then")
    a, c = then.input("a", (2, 3)), then.input("c", (3,))
    g_then = then.build(then.add(a, c), then.relu(a))
    other = GraphBuilder("else")
    a, c = other.input("a", (2, 3)), other.input("c", (3,))
    g_else = other.build(other.sub(a, c), a)
    b = GraphBuilder("outer")
    p, a, c = b.input("p", (), np.bool_), b.input("a", (2, 3)), b.input("c", (3,))
    outs = b.if_(p, a, c, then_branch=g_then, else_branch=g_else)
    return b.build(*outs)


@pytest.mark.parametrize("n", [0, 1, 4])
def test_loop_runs_its_body_trip_count_times_and_exports(n):
    g = cumulative()
    rng = np.random.default_rng(n)
    feeds = {"n": np.array(n, np.int64), "x": rng.standard_normal(3).astype(F),
             "w": rng.standard_normal((5, 3)).astype(F)}
    want = feeds["x"].copy()
    for i in range(n):
        want = want * 2 + feeds["w"][i]
    got = einsat.run(g, feeds)[g.outputs[0]]
    np.testing.assert_array_equal(got, want)
    model = to_onnx(g)
    onnx.checker.check_model(model, full_check=True)
    np.testing.assert_allclose(ort_run(model, feeds)[0], want, rtol=1e-6)


@pytest.mark.parametrize("p", [True, False])
def test_if_takes_one_branch_and_exports(p):
    g = branches()
    rng = np.random.default_rng(0)
    feeds = {"p": np.array(p), "a": rng.standard_normal((2, 3)).astype(F), "c": rng.standard_normal(3).astype(F)}
    a, c = feeds["a"], feeds["c"]
    want = (a + c, np.maximum(a, 0)) if p else (a - c, a)
    got = einsat.run(g, feeds)
    for o, w in zip(g.outputs, want):
        np.testing.assert_array_equal(got[o], w)
    model = to_onnx(g)
    onnx.checker.check_model(model, full_check=True)
    for r, w in zip(ort_run(model, feeds), want):
        np.testing.assert_allclose(r, w, rtol=1e-6)


def test_loop_and_if_check_their_bodies_types():
    body = cumulative().nodes[0].attrs["body"]
    inputs = {"n": TensorType((), np.int64), "x": TensorType((4,)), "w": TensorType((5, 3))}
    with pytest.raises(EinsatError, match="the body takes inputs"):
        Graph([Node(Op.LOOP, ["n", "x", "w"], ["y"], {"body": body, "n_carried": 1})], inputs, ["y"])
    with pytest.raises(EinsatError, match="trip count must be a 0-d integer"):
        Graph([Node(Op.LOOP, ["x", "x", "w"], ["y"], {"body": body, "n_carried": 1})], inputs, ["y"])
    with pytest.raises(EinsatError, match="must be an einsat Graph"):
        Graph([Node(Op.LOOP, ["n", "x", "w"], ["y"], {"body": "nope", "n_carried": 1})], inputs, ["y"])
    then = branches().nodes[0].attrs["then_branch"]
    other = GraphBuilder("else")
    a, _ = other.input("a", (2, 3)), other.input("c", (3,))
    other = other.build(other.relu(a))
    inputs = {"p": TensorType((), np.bool_), "a": TensorType((2, 3)), "c": TensorType((3,))}
    with pytest.raises(EinsatError, match="return different types"):
        Graph([Node(Op.IF, ["p", "a", "c"], ["y", "z"],
                    {"then_branch": then, "else_branch": other})], inputs, ["y"])
    with pytest.raises(EinsatError, match="else_branch takes inputs"):
        Graph([Node(Op.IF, ["p", "a", "c"], ["y", "z"],
                    {"then_branch": then, "else_branch": cumulative()})], inputs, ["y"])


def test_costs_are_the_bodies():
    g = cumulative()
    (loop,) = g.nodes
    body = loop.attrs["body"]
    assert loop.definition.flops(*g.node_types(loop), loop.attrs) == body.flops() == 6
