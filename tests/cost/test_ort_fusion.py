"""onnxruntime's fusion groups: which nodes form a unit, and that each unit's fused op computes
what its nodes compute (NumPy, random inputs)."""

from __future__ import annotations

import numpy as np

from einsat.cost.ort_fusion import ort_units
from einsat.ir.builder import GraphBuilder
from einsat.ir.registry import Op, opdef
from einsat.runtime import random_inputs, run


def conv_bias_relu():
    b = GraphBuilder("cbr")
    x = b.input("x", (1, 3, 8, 8))
    y = b.conv(x, b.weight("w", (4, 3, 3, 3)), padding=(1, 1, 1, 1))
    y = b.relu(b.add(y, b.weight("bias", (1, 4, 1, 1))))
    return b.build(b.relu(b.conv(y, b.weight("w2", (4, 4, 1, 1)))))


def unit_matches_its_nodes(graph, unit, seed=0):
    """The unit's fused op on the group's inputs equals the group's nodes run as a program."""
    from einsat.ir.graph import Graph
    names = {i for n in unit.nodes for i in n.inputs if i} - {o for n in unit.nodes for o in n.outputs}
    sub = Graph(unit.nodes, {n: graph.types[n] for n in sorted(names) if n not in graph.weights},
                [unit.nodes[-1].outputs[0]], {n: graph.weights[n] for n in names if n in graph.weights})
    feeds = random_inputs(sub, seed)
    want = run(sub, feeds)[unit.nodes[-1].outputs[0]]
    env = {**feeds, **sub.weights}
    head = unit.nodes[0]
    args = [env[i] for i in head.inputs if i]
    if len(unit.ins) > 2 and unit.ins[2] is not None and len(args) < 3:  # a bias the Add supplied
        add = unit.nodes[1]
        args.append(np.reshape(env[add.inputs[1] if add.inputs[0] == head.outputs[0] else add.inputs[0]],
                               unit.ins[2].shape))
    if len(unit.ins) > 3:
        add = unit.nodes[1]
        args += [None] * (3 - len(args)) + [env[add.inputs[1] if add.inputs[0] == head.outputs[0] else add.inputs[0]]]
    got = opdef(unit.op).numpy(args, unit.attrs)[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_conv_with_constant_bias_and_relu_is_one_unit():
    g = conv_bias_relu()
    units = ort_units(g)
    assert [u.op for u in units] == [Op.FUSED_CONV, Op.FUSED_CONV]
    first, second = units
    assert [n.op for n in first.nodes] == [Op.CONV, Op.ADD, Op.RELU] and first.attrs["activation"] == "relu"
    assert first.ins[2].shape == (4,) and [n.op for n in second.nodes] == [Op.CONV, Op.RELU]
    assert sum(len(u.nodes) for u in units) == len(g.nodes)
    unit_matches_its_nodes(g, first)
    unit_matches_its_nodes(g, second)


def test_matmul_bias_and_residual_groups():
    b = GraphBuilder("mm")
    x = b.input("x", (8, 16))
    h = b.tanh(b.add(b.matmul(x, b.weight("w", (16, 16))), b.weight("bias", (16,))))
    out = b.add(b.matmul(h, b.weight("w2", (16, 16))), x)  # a residual of the output's shape
    g = b.build(out)
    units = ort_units(g)
    assert [u.op for u in units] == [Op.FUSED_MATMUL, Op.FUSED_MATMUL]
    assert units[0].attrs["activation"] == "tanh" and units[0].ins[2].shape == (16,)
    assert units[1].ins[3].shape == (8, 16) and units[1].ins[2] is None
    unit_matches_its_nodes(g, units[0])
    unit_matches_its_nodes(g, units[1])


def test_a_value_read_twice_or_returned_ends_the_group():
    b = GraphBuilder("shared")
    x = b.input("x", (1, 3, 8, 8))
    y = b.conv(x, b.weight("w", (4, 3, 1, 1)))
    g = b.build(b.relu(y), b.sigmoid(y))  # y is read twice: onnxruntime keeps it
    assert [u.op for u in ort_units(g)] == [Op.CONV, Op.RELU, Op.SIGMOID]
    b = GraphBuilder("returned")
    x = b.input("x", (1, 3, 8, 8))
    y = b.conv(x, b.weight("w", (4, 3, 1, 1)))
    g = b.build(y, b.relu(y))
    assert [u.op for u in ort_units(g)] == [Op.CONV, Op.RELU]


def test_a_layout_of_weights_is_a_constant_unit():
    b = GraphBuilder("laid")
    x = b.input("x", (1, 4, 8, 8))
    w = b.pad(b.weight("w", (4, 4, 1, 1)), pads=(0, 0, 1, 1, 0, 0, 1, 1))
    g = b.build(b.conv(x, w, padding=(1, 1, 1, 1)))
    units = ort_units(g)
    assert [(u.op, u.constant) for u in units] == [(Op.PAD, True), (Op.CONV, False)]


def test_constant_batchnorm_and_per_channel_scale_fold_into_the_conv():
    """Inception v2's conv -> batchnorm -> mul -> add -> relu is one unit, as onnxruntime runs it."""
    b = GraphBuilder("bn")
    x = b.input("x", (1, 3, 8, 8))
    y = b.conv(x, b.weight("w", (4, 3, 3, 3)), padding=(1, 1, 1, 1))
    y = b.batchnorm(y, *(b.weight(n, (4,)) for n in ("scale", "shift", "mean")),
                    b.weight("var", np.ones(4, np.float32)))
    y = b.add(b.mul(y, b.weight("s", (1, 4, 1, 1))), b.weight("t", (1, 4, 1, 1)))
    g = b.build(b.relu(y))
    (unit,) = ort_units(g)
    assert [n.op for n in unit.nodes] == [Op.CONV, Op.BATCHNORM, Op.MUL, Op.ADD, Op.RELU]
    assert unit.op is Op.FUSED_CONV and unit.ins[2].shape == (4,) and unit.attrs["activation"] == "relu"
    b = GraphBuilder("data")  # a Mul by data is no constant: it stays
    x = b.input("x", (1, 3, 8, 8))
    g = b.build(b.mul(b.conv(x, b.weight("w", (4, 3, 1, 1))), b.input("m", (1, 4, 8, 8))))
    assert [u.op for u in ort_units(g)] == [Op.CONV, Op.MUL]


def test_an_add_of_two_convolutions_joins_one_group():
    """A projection shortcut: conv(x) + conv(y), each conv with a batchnorm. The Add (and the
    ReLU after it) join the first conv's group only; the shortcut conv keeps its batchnorm and
    no residual: every node in exactly one unit."""
    b = GraphBuilder("shortcut")
    x = b.input("x", (1, 8, 8, 8))

    def conv_bn(t, name):
        c = b.conv(t, b.weight(name, (16, 8, 1, 1)))
        return b.batchnorm(c, *(b.weight(f"{name}_{k}", (16,)) for k in "somv"))

    g = b.build(b.relu(b.add(conv_bn(x, "main"), conv_bn(x, "proj"))))
    units = ort_units(g)
    assert sorted(id(n) for u in units for n in u.nodes) == sorted(id(n) for n in g.nodes)
    assert [[n.op for n in u.nodes] for u in units] == [[Op.CONV, Op.BATCHNORM, Op.ADD, Op.RELU],
                                                       [Op.CONV, Op.BATCHNORM]]
    assert len(units[0].ins) == 4 and len(units[1].ins) == 3  # a residual, and a bias from the batchnorm
