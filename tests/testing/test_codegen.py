import numpy as np
from hypothesis import given

import einsat
from einsat.ir import GraphBuilder
from einsat.testing.codegen import builder_code, rebuild
from einsat.testing.strategies import program_inputs, programs


def assert_same_graph(g, h):
    assert h.input_types() == g.input_types()
    assert [(n.op, n.outputs, dict(n.attrs).keys()) for n in h.nodes] == \
        [(n.op, n.outputs, dict(n.attrs).keys()) for n in g.nodes]
    assert set(h.weights) == set(g.weights)
    for k, a in g.weights.items():
        assert h.weights[k].dtype == a.dtype and h.weights[k].tobytes() == a.tobytes()  # bit for bit


@given(programs(max_nodes=5))
def test_builder_code_rebuilds_the_program_exactly(g):
    h = rebuild(builder_code(g))
    assert_same_graph(g, h)
    xs = program_inputs(g)
    r1, r2 = einsat.run(g, xs), einsat.run(h, xs)
    for a, b in zip(g.outputs, h.outputs):
        np.testing.assert_array_equal(r1[a], r2[b])


def test_builder_code_reads_like_builder_calls():
    b = GraphBuilder("block")
    x = b.input("x/in:0", (1, 3, 4, 4))
    w = b.weight("w", np.arange(54, dtype=np.float32).reshape(2, 3, 3, 3))
    y = b.relu(b.conv(x, w, padding=1, name="conv"))
    parts = b.split(y, axis=1, sizes=(1, 1), name="halves")
    g = b.build(*parts)
    code = builder_code(g)
    assert "x_in_0 = b.input('x/in:0', (1, 3, 4, 4), np.float32)" in code
    assert "bytes.fromhex(" in code                      # 54 weights: written as raw bytes
    assert "padding=(1, 1, 1, 1)" in code and "name='conv'" in code
    assert "halves_0, halves_1 = b.split(" in code
    assert code.rstrip().endswith("graph = b.build(halves_0, halves_1)")
    assert_same_graph(g, rebuild(code))
