"""ir -> terms -> ir: a program inserted into a session and exported comes back unchanged."""

import numpy as np
from hypothesis import given, settings
from onnx import helper

from einsat import GraphBuilder, Op
from einsat.egraph import ABSENT, Session
from einsat.egraph.convert import to_graph
from einsat.ir.types import TensorType
from einsat.testing.programs import programs
from tests.egraph.checks import assert_consistent, canonical, same_outputs


def zoo():
    """One program touching every kind of encoding: attribute kinds, absent and variadic inputs,
    multi-output ops, arrays and protos by reference, bool and integer values."""
    b = GraphBuilder("zoo")
    x = b.input("x", (2, 4, 6, 6))
    m = b.input("m", (6, 6), dtype=np.bool_)
    w = b.weight("w", (4, 4, 3, 3))
    bias = b.weight("bias", (4,))
    y = b.conv(x, w, bias, padding=1)
    y = b.batchnorm(y, b.weight("s", np.ones(4, np.float32)), b.weight("be", (4,)), b.weight("mu", (4,)),
                    b.weight("var", np.full(4, 2.0, np.float32)), epsilon=1e-3)
    y = b.leaky_relu(b.gelu(y, approximate="tanh"), alpha=0.2)
    p = b.maxpool(b.avgpool(y, kernel=(2, 2), count_include_pad=1), kernel=(3, 3), padding=1)
    s0, s1, s2 = b.split(p, axis=1, sizes=(1, 1, 2))
    c = b.concat(s2, s0, s1, axis=1)
    g = b.global_avgpool(b.relu(c))
    r = b.reshape(g, shape=(2, 4))
    mm = b.gemm(r, b.weight("wg", (4, 3)), alpha=0.5, trans_a=0)
    t = b.transpose(b.softmax(mm, axis=0))
    k = b.constant(value=np.arange(6, dtype=np.float32).reshape(6, 1))
    wh = b.where(m, b.reduce_mean(x, axes=(0, 1), keepdims=0), b.pad(k, pads=(0, 0, 0, 5), mode="edge"))
    node = helper.make_node("Celu", ["a"], ["b"], alpha=1.5).SerializeToString()
    op = b.opaque(wh, op_type="Celu", node=node, opset=17, output_types=(TensorType((6, 6)),))
    cast = b.cast(op, dtype="float64")
    return b.build(t, cast, names=["scores", "masked"])


def roundtrip(graph):
    s = Session()
    s.add_graph(graph)
    data = s.export()
    return data, to_graph(data, name=graph.name)


def test_zoo_comes_back_exactly():
    g = zoo()
    data, back = roundtrip(g)
    assert canonical(back) == canonical(g)
    assert len(back.nodes) == len(g.nodes)
    assert {o for n in back.nodes for o in n.outputs} == {o for n in g.nodes for o in n.outputs}
    assert back.inputs == g.inputs and back.outputs == g.outputs
    assert set(back.weights) == set(g.weights)
    for k, a in g.weights.items():
        np.testing.assert_array_equal(back.weights[k], a)
    same_outputs(g, back, rtol=0, atol=0)


def test_export_fields():
    g = zoo()
    data, _ = roundtrip(g)
    assert sorted(data.classes) == list(range(len(data.classes)))
    assert data.output_names == ["scores", "masked"]
    assert data.input_types == g.input_types()
    for cls in data.classes.values():
        assert len(cls.nodes) == 1  # no rule ran: one e-node per e-class
        assert cls.type is not None
        if cls.name:
            assert g.types[cls.name] == cls.type
    gemm = next(n for c in data.classes.values() for n in c.nodes if n.op is Op.GEMM)
    assert len(gemm.children) == 2  # the absent bias is a trailing slot: left out
    assert gemm.attrs == {"alpha": 0.5, "beta": 1.0, "trans_a": 0, "trans_b": 0}
    splits = sorted(n.output for c in data.classes.values() for n in c.nodes if n.op is Op.SPLIT)
    assert splits == [0, 1, 2]
    const = next(n for c in data.classes.values() for n in c.nodes if n.op is Op.CONSTANT)
    assert isinstance(const.attrs["value"], np.ndarray) and const.attrs["value"].shape == (6, 1)
    assert assert_consistent(data, rtol=0, atol=0) == data.num_nodes()


def test_absent_inputs():
    """An absent input between present ones is ABSENT; trailing absent inputs are left out (the
    same as missing: `conv(x, w, '')` comes back as `conv(x, w)`)."""
    b = GraphBuilder("absent")
    x = b.input("x", (1, 2, 4))
    w = b.weight("w", (3, 2, 1))
    y = b.conv(x, w, None)
    z = b.fused_conv(x, w, None, b.input("z", (1, 3, 4)), activation="relu")
    g = b.build(y, z)
    data, back = roundtrip(g)
    kids = {n.op: n.children for c in data.classes.values() for n in c.nodes if n.op}
    x_id, w_id = (c.id for c in data.classes.values() if c.name in ("x", "w"))
    assert kids[Op.CONV] == (x_id, w_id)
    assert kids[Op.FUSED_CONV][:3] == (x_id, w_id, ABSENT) and len(kids[Op.FUSED_CONV]) == 4
    assert [n.inputs for n in back.nodes] == [("x", "w"), ("x", "w", "", "z")]
    same_outputs(g, back, rtol=0, atol=0)


def test_equal_nodes_are_shared():
    b = GraphBuilder("cse")
    x = b.input("x", (3,))
    g = b.build(b.relu(x), b.relu(x), names=["a", "b"])
    data, back = roundtrip(g)
    assert data.roots[0] == data.roots[1]
    assert sum(1 for n in back.nodes if n.op is Op.RELU) == 1
    same_outputs(g, back, rtol=0, atol=0)


def test_weird_names_survive():
    names = ['a"b', "back\\slash", "tab\there", "uni\u00e9\u4e2d", "/layer.0/Add_output_0", "bell\x07", "{x}"]
    b = GraphBuilder("names")
    xs = [b.input(n, (2,)) for n in names]
    out = xs[0]
    for x in xs[1:]:
        out = b.add(out, x)
    g = b.build(out, names=["out\nname"])
    data, back = roundtrip(g)
    assert set(data.input_types) == set(names)
    assert {n.leaf[1] for c in data.classes.values() for n in c.nodes if n.leaf} == set(names)
    assert back.inputs == g.inputs


@settings(max_examples=25)
@given(programs(max_nodes=6))
def test_random_programs_round_trip(g):
    data, back = roundtrip(g)
    assert canonical(back) == canonical(g)
    same_outputs(g, back, rtol=0, atol=0)


def test_extraction_rebuild_gives_the_program_back():
    """The extraction side's rebuild, on the e-graph of a program, finds that program again."""
    from einsat.cost.models import cost_model
    from einsat.extract.from_graph import selection_of_graph
    from einsat.extract.problem import Problem
    from einsat.extract.rebuild import rebuild
    g = zoo()
    data, _ = roundtrip(g)
    problem = Problem(data, cost_model("h100"), fold_constants=False)
    selection = selection_of_graph(problem, g)
    assert selection is not None
    back = rebuild(problem, selection)
    assert canonical(back) == canonical(g)
