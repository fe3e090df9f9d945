import numpy as np
import pytest

import einsat
from einsat.cost.model import RooflineCost
from einsat.egraph.data import EClass, EGraphData, ENode
from einsat.errors import ExtractionError
from einsat.extract import Problem, egraph_data_from_graph, extract, greedy_tree, rebuild
from einsat.ir import GraphBuilder, Op, TensorType
from tests.work_bounded import BY_WORK, ended_by_work


def mlp():
    b = GraphBuilder("mlp", seed=1)
    x = b.input("x", (8, 16))
    h = b.relu(b.matmul(x, b.weight("w1", (16, 32))))
    y = b.add(b.matmul(h, b.weight("w2", (32, 16))), x)
    return b.build(y, h, names=["y", "hidden"])


def feed(graph, seed=0):
    rng = np.random.default_rng(seed)
    return {n: rng.standard_normal(graph.types[n].shape).astype(graph.types[n].dtype) for n in graph.inputs}


@pytest.mark.parametrize("method", ["greedy-tree", "greedy", "ilp"])
def test_round_trip_gives_the_same_program(method):
    g = mlp()
    out = extract(egraph_data_from_graph(g), "h100", method=method, start=g).graph
    assert out.inputs == g.inputs and out.outputs == g.outputs
    assert out.op_counts() == g.op_counts()
    assert set(out.weights) == set(g.weights)
    x = feed(g)
    for name, value in einsat.run(g, x).items():
        np.testing.assert_array_equal(einsat.run(out, x)[name], value)


def test_split_outputs_come_from_one_node():
    b = GraphBuilder("split")
    x = b.input("x", (4, 10))
    p, q, r = b.split(x, axis=1, sizes=(3, 3, 4))
    g = b.build(b.add(p, q), b.relu(r), names=["pq", "r"])
    out = extract(egraph_data_from_graph(g), "h100", start=g).graph
    assert out.op_counts()["split"] == 1
    x = feed(g)
    for name, value in einsat.run(g, x).items():
        np.testing.assert_array_equal(einsat.run(out, x)[name], value)


def test_weight_only_subgraphs_are_folded_into_weights():
    b = GraphBuilder("fold", seed=2)
    x = b.input("x", (8, 16))
    w = b.weight("w", (32, 16))
    g = b.build(b.matmul(x, b.transpose(b.mul(w, b.const(2.0)), perm=(1, 0)), name="y"))
    result = extract(egraph_data_from_graph(g), "h100", start=g)
    out = result.graph
    assert out.op_counts() == {"matmul": 1}
    (folded,) = out.weights.values()
    np.testing.assert_array_equal(folded, (g.weights["w"] * 2.0).T)
    np.testing.assert_array_equal(einsat.run(out, feed(g))["y"], einsat.run(g, feed(g))["y"])
    assert result.cost == einsat.extract.cost_model("h100").graph_cost(out) < \
        einsat.extract.cost_model("h100").graph_cost(g)


def hand_egraph(roots, names, weights=None):
    """x -> relu (class 1); class 2 = add(class 1, w_new), w_new a weight only the e-graph has."""
    t = TensorType((2, 3))
    classes = {0: EClass(0, [ENode(None, leaf=("input", "x"))], t),
               1: EClass(1, [ENode(Op.RELU, (0,))], t),
               3: EClass(3, [ENode(None, leaf=("weight", "w_new"))], t),
               2: EClass(2, [ENode(Op.ADD, (1, 3))], t)}
    w = {"w_new": np.ones((2, 3), np.float32)} if weights is None else weights
    return EGraphData(classes, roots, names, {"x": t}, w)


def test_outputs_keep_their_names_even_when_shared_or_inputs():
    data = hand_egraph(roots=[2, 2, 0, 1], names=["a", "b", "x", "r"])
    problem = Problem(data, einsat.extract.cost_model("h100"))
    g = rebuild(problem, greedy_tree(problem)[0], name="named")
    assert g.outputs == ("a", "b", "x", "r") and g.inputs == ("x",)
    assert "w_new" in g.weights
    x = np.arange(6, dtype=np.float32).reshape(2, 3) - 2
    outs = einsat.run(g, {"x": x})
    np.testing.assert_array_equal(outs["a"], np.maximum(x, 0) + 1)
    np.testing.assert_array_equal(outs["b"], outs["a"])
    np.testing.assert_array_equal(outs["x"], x)
    np.testing.assert_array_equal(outs["r"], np.maximum(x, 0))


def test_a_weight_without_an_array_is_an_error():
    data = hand_egraph(roots=[2], names=["a"], weights={})
    with pytest.raises(ExtractionError, match="w_new"):
        extract(data, "h100", method="greedy", fold_constants=False)


def test_an_unextractable_output_is_an_error():
    t = TensorType((2,))
    data = EGraphData({0: EClass(0, [ENode(Op.RELU, (1,))], t), 1: EClass(1, [ENode(Op.RELU, (0,))], t)},
                      [0], ["y"], {}, {})
    with pytest.raises(ExtractionError, match="no finite term"):
        extract(data, "h100")


def test_unknown_method():
    with pytest.raises(ExtractionError, match="unknown extraction method"):
        extract(egraph_data_from_graph(mlp()), method="anneal")


def test_weight_only_ops_too_costly_to_evaluate_stay_in_the_program(monkeypatch):
    import einsat.extract.problem as problem_module
    b = GraphBuilder("product", seed=3)
    x = b.input("x", (4, 32))
    w = b.matmul(b.weight("w1", (32, 32)), b.weight("w2", (32, 32)))  # 2 * 32^3 FLOPs
    g = b.build(b.matmul(x, w, name="y"))
    assert extract(egraph_data_from_graph(g), "h100", start=g).graph.op_counts() == {"matmul": 1}
    monkeypatch.setattr(problem_module, "FOLD_FLOPS", 2 * 32 ** 3 - 1)
    assert extract(egraph_data_from_graph(g), "h100", start=g).graph.op_counts() == {"matmul": 2}


@pytest.mark.parametrize("method", ["greedy-tree", "greedy", "ilp"])
def test_a_cheaper_cycle_is_never_extracted(method):
    """A = relu(x) | reshape(B), B = reshape(A): two views (0.1 µs each) are cheaper than the
    relu, but taking both is a cycle. Every method must pay for the relu."""
    a, b = TensorType((2, 3)), TensorType((6,))
    data = EGraphData({0: EClass(0, [ENode(None, leaf=("input", "x"))], a),
                       1: EClass(1, [ENode(Op.RESHAPE, (2,), {"shape": (2, 3)}), ENode(Op.RELU, (0,))], a),
                       2: EClass(2, [ENode(Op.RESHAPE, (1,), {"shape": (6,)})], b)},
                      [1, 2], ["a", "b"], {"x": a}, {})
    result = extract(data, "h100", method=method)
    assert result.graph.op_counts() == {"relu": 1, "reshape": 1}
    x = np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_array_equal(einsat.run(result.graph, {"x": x})["b"], np.maximum(x, 0).reshape(6))


def _fire():
    from einsat.ir import GraphBuilder
    b = GraphBuilder("fire")
    x = b.input("x", (1, 16, 13, 13))
    e1 = b.relu(b.conv(x, b.weight("w1", (32, 16, 1, 1)), b.weight("b1", (32,))))
    e3 = b.relu(b.conv(x, b.weight("w3", (32, 16, 3, 3)), b.weight("b3", (32,)), padding=(1, 1, 1, 1)))
    return b.build(b.concat(e1, e3, axis=1))


class _FoldsAtLoad(RooflineCost):
    """The H100 roofline for a target that folds values made from weights alone at load."""
    folds_weights_at_load = True


def test_merged_convs_keep_the_source_weights_instead_of_a_grown_one():
    """A fire module: its 1×1 and 3×3 expand convs merge into one 3×3 conv, whose kernel is the
    1×1 one zero-padded and concatenated with the other. For a target that folds weight-only
    values at load (onnxruntime), that kernel is not stored (it is 9/5 the size of the two); the
    program lays it out from the source weights."""
    import einsat
    g = _fire()
    result = einsat.optimize(g, cost=_FoldsAtLoad("h100"), **BY_WORK)
    ended_by_work(result.report)
    merged = [n for n in result.graph.nodes if n.op in (Op.CONV, Op.FUSED_CONV)]
    assert len(merged) == 1 and result.graph.types[merged[0].inputs[1]].shape == (64, 16, 3, 3)
    before = sum(a.nbytes for a in g.weights.values())
    assert sum(a.nbytes for a in result.graph.weights.values()) <= before
    assert {"pad", "concat"} <= set(result.graph.op_counts())  # the layout, from w1 and w3
    x_ = {"x": np.random.default_rng(0).standard_normal((1, 16, 13, 13)).astype(np.float32)}
    np.testing.assert_allclose(einsat.run(result.graph, x_, backend="onnxruntime")[g.outputs[0]],
                               einsat.run(g, x_)[g.outputs[0]], rtol=1e-4, atol=1e-4)


def test_merged_convs_store_the_kernel_for_a_runtime_that_runs_every_node():
    """einsat's own runtimes (the H100 roofline's) would re-lay the kernel out on every run: the
    merged kernel is stored, and the program has no layout ops left over its weights."""
    import einsat
    g = _fire()
    result = einsat.optimize(g, cost="h100", **BY_WORK)
    ended_by_work(result.report)
    merged = [n for n in result.graph.nodes if n.op in (Op.CONV, Op.FUSED_CONV)]
    assert len(merged) == 1 and merged[0].inputs[1] in result.graph.weights
    assert not {"pad", "concat"} & set(result.graph.op_counts())
    x_ = {"x": np.random.default_rng(0).standard_normal((1, 16, 13, 13)).astype(np.float32)}
    np.testing.assert_allclose(einsat.run(result.graph, x_)[g.outputs[0]], einsat.run(g, x_)[g.outputs[0]],
                               rtol=1e-4, atol=1e-4)



@pytest.mark.parametrize("op, attrs, shape", [
    (Op.GATHER, {"axis": 0}, (32, 16)),      # w's 4 rows, each 8 times
    (Op.EXPAND, {"shape": (8, 4, 16)}, (8, 4, 16)),
])
def test_a_constant_grown_from_weights_by_any_layout_op_is_laid_out(op, attrs, shape):
    """The layout plan of a constant e-class runs through every layout-only op of one output (the
    registry's layout_only; the old list of nine ops missed gather and expand): a value 8 times
    the size of its source weights is laid out from them, not stored."""
    from einsat.extract.rebuild import _Compact
    w, idx = np.ones((4, 16), np.float32), np.tile(np.arange(4, dtype=np.int64), 8)
    classes = {0: EClass(0, [ENode(None, leaf=("weight", "w"))], TensorType((4, 16))),
               1: EClass(1, [ENode(None, leaf=("weight", "idx"))], TensorType((32,), np.int64)),
               2: EClass(2, [ENode(op, (0, 1) if op is Op.GATHER else (0,), attrs)], TensorType(shape))}
    data = EGraphData(classes, [2], ["y"], {}, {"w": w, "idx": idx})
    plan = _Compact(Problem(data, RooflineCost("h100"))).plan(2)
    assert plan is not None and [n.op for _, n in plan][-1] is op


def test_layout_ops_are_the_registrys_single_output_layout_ops():
    from einsat.extract.rebuild import LAYOUT_OPS
    from einsat.ir.registry import REGISTRY
    assert LAYOUT_OPS == {op for op, d in REGISTRY.items() if d.layout_only and op is not Op.SPLIT}
