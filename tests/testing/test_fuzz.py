"""The fuzzer: it passes on einsat's transformations and finds, and shrinks, an unsound one."""

import re

import pytest

from einsat.ir import Graph, Node, Op
from einsat.testing import fuzz as fuzz_module
from einsat.testing.codegen import rebuild
from einsat.testing.fuzz import check_transform, fuzz, register_transform
from einsat.testing.strategies import programs


def swap_sub_operands(g: Graph) -> Graph:
    """Unsound: a - b becomes b - a."""
    nodes = [Node(n.op, n.inputs[::-1], n.outputs, n.attrs, n.name) if n.op is Op.SUB else n for n in g.nodes]
    return g.replace(nodes=nodes)


def fuse_transposes_wrongly(g: Graph) -> Graph:
    """Unsound: transpose(transpose(x, p), q) becomes transpose(x, r) with r[j] = q[p[j]]
    (the right composition is p[q[j]]; they differ when p and q do not commute)."""
    nodes = []
    for n in g.nodes:
        src = g.producer(n.inputs[0]) if n.inputs else None
        if n.op is Op.TRANSPOSE and src is not None and src.op is Op.TRANSPOSE:
            p, q = src.attrs["perm"], n.attrs["perm"]
            n = Node(Op.TRANSPOSE, [src.inputs[0]], n.outputs, {"perm": tuple(q[i] for i in p)}, n.name)
        nodes.append(n)
    return g.replace(nodes=nodes)


def test_the_fuzzer_finds_an_unsound_rewrite_and_shrinks_it(monkeypatch):
    monkeypatch.setattr(fuzz_module, "TARGETS", dict(fuzz_module.TARGETS))
    register_transform("swap_sub", swap_sub_operands)
    report = fuzz(budget=500, seed=0, targets=["swap_sub"])
    assert not report.ok
    (failure,) = report.failures
    assert failure.target == "swap_sub" and len(failure.case.nodes) <= 3
    assert any(n.op is Op.SUB for n in failure.case.nodes)
    # the printed builder code rebuilds the failing program, and it still fails
    assert "b.sub(" in failure.code and failure.code in str(report)
    assert check_transform(swap_sub_operands, rebuild(failure.code)) is not None


def test_a_rarer_unsound_rewrite_is_found_on_programs_of_its_ops(monkeypatch):
    monkeypatch.setattr(fuzz_module, "TARGETS", dict(fuzz_module.TARGETS))
    register_transform("transposes", fuse_transposes_wrongly,
                       strategy=lambda: programs(ops=[Op.TRANSPOSE, Op.RELU, Op.ADD], max_nodes=5, min_rank=3))
    report = fuzz(budget=100, seed=1, targets=["transposes"])
    (failure,) = report.failures
    ops = [n.op for n in failure.case.nodes]
    assert ops.count(Op.TRANSPOSE) == 2 and len(ops) <= 3
    assert check_transform(fuse_transposes_wrongly, rebuild(failure.code)) is not None


def test_unknown_targets_are_named():
    try:
        fuzz(budget=2, targets=["nope"])
    except ValueError as e:
        assert "nope" in str(e) and "onnx" in str(e)
    else:
        raise AssertionError("an unknown target was accepted")


def swap_commutative_operands(g: Graph) -> Graph:
    """Sound: mul(a, b) becomes mul(b, a) (and likewise add, minimum, maximum)."""
    swap = {Op.MUL, Op.ADD, Op.MINIMUM, Op.MAXIMUM}
    return g.replace(nodes=[Node(n.op, n.inputs[::-1], n.outputs, n.attrs, n.name) if n.op in swap else n
                            for n in g.nodes])


def test_a_sound_swap_of_commutative_operands_passes_behind_constant_outputs(monkeypatch):
    """The fuzzer's programs end, some of them, in a constant behind a commutative op
    (mul(relu(v - v), v)): exchanging the operands is right, and the verification says so
    (#27: it compared the values feeding the op position by position and failed)."""
    monkeypatch.setattr(fuzz_module, "TARGETS", dict(fuzz_module.TARGETS))
    register_transform("swap_commutative", swap_commutative_operands)
    seen = []
    strategy = fuzz_module._programs

    def recording():
        return strategy().map(lambda g: seen.append(g) or g)

    monkeypatch.setattr(fuzz_module.TARGETS["swap_commutative"], "strategy", recording)
    report = fuzz(budget=100, seed=3, targets=["swap_commutative"])
    assert report.ok, str(report)
    tails = [g for g in seen if g.producer(g.outputs[-1]).op in (Op.MUL, Op.MINIMUM)
             and any(g.producer(i) is not None and g.producer(i).op is Op.RELU
                     and g.producer(g.producer(i).inputs[0]).op is Op.SUB
                     for i in g.producer(g.outputs[-1]).inputs)]
    assert len(tails) >= 5  # the case is drawn, not just possible


def test_a_weight_inlined_into_an_eop_is_checked_numerically_only():
    """einsat fuzz --seed 11 (#27): 8x + w fuses into one eop reading w as a constant of its
    expression; over the field the input's weight is a variable and the constant is not, so only
    the numeric verdict can judge it (and a wrong constant still fails it)."""
    import numpy as np

    import einsat
    from einsat.ir import GraphBuilder

    b = GraphBuilder("random")
    x0 = b.input("x0", (1,), np.float32)
    w4 = b.weight("w4", np.array([-0.5751108527183533], dtype=np.float32))
    add1 = b.add(x0, x0, name="add1")
    add2 = b.add(add1, add1, name="add2")
    graph = b.build(b.add(b.add(add2, add2, name="add3"), w4, name="add5"))
    assert check_transform(fuzz_module.optimize_transform(einsat.optimize), graph) is None

    def wrong_constant(g: Graph) -> Graph:
        out = fuzz_module.optimize_transform(einsat.optimize)(g)
        (node,) = out.nodes
        assert node.op is Op.EOP and "-0.5751108527183533" in node.attrs["expr"]
        attrs = {**node.attrs, "expr": node.attrs["expr"].replace("-0.5751108527183533", "-0.5")}
        return out.replace(nodes=[Node(node.op, node.inputs, node.outputs, attrs, node.name)])

    assert check_transform(wrong_constant, graph) is not None


def test_a_mean_folded_into_an_eop_is_exact_over_the_field():
    """einsat fuzz --seed 2 (#27): mean(x + x) over 3 elements fuses into an eop multiplying by
    the literal 0.3333333333333333; over the field it is 1/3, as the reference's exact division
    by 3 is (a literal 0.3 is 3/10 and still differs)."""
    import numpy as np

    import einsat
    from einsat.ir import GraphBuilder

    b = GraphBuilder("random")
    x0 = b.input("x0", (3,), np.float32)
    graph = b.build(b.reduce_mean(b.add(x0, x0, name="add1"), axes=(0,), keepdims=0, name="reduce_mean2"))
    optimized = fuzz_module.optimize_transform(einsat.optimize)
    assert check_transform(optimized, graph) is None

    def wrong_mean(g: Graph) -> Graph:
        (node,) = optimized(g).nodes
        assert node.op is Op.EOP and "0.3333333333333333" in node.attrs["expr"]
        attrs = {**node.attrs, "expr": node.attrs["expr"].replace("0.3333333333333333", "0.3")}
        return g.replace(nodes=[Node(node.op, node.inputs, node.outputs, attrs, node.name)])

    message = check_transform(wrong_mean, graph)
    assert message is not None


def test_a_layernorm_over_a_constant_row_fused_into_an_eop_is_exactly_zero():
    """einsat fuzz --target fusion --seed 0, case 1849 (#29): layernorm(erf(relu(sigmoid(x - x))))
    normalizes a constant row. The reference's mean is NumPy's (a sum divided by n), and x - mean is
    exactly 0; an eop that summed x · (1/n) left it a few ulps off, 1/sqrt(eps) amplified that to
    -7e-6 against an exact 0 and verification refused a right program. The eop's mean and variance
    now round as NumPy's do: its output is the reference's, bit for bit."""
    import numpy as np

    import einsat
    from einsat.ir import GraphBuilder
    from einsat.runtime import run

    b = GraphBuilder("random")
    x0 = b.input("x0", (3,), np.float32)
    w5 = b.weight("w5", np.array([0.0726, -0.0763, 0.3697], dtype=np.float32))
    sub1 = b.sub(x0, x0, name="sub1")
    erf4 = b.erf(b.relu(b.sigmoid(sub1, name="sigmoid2"), name="relu3"), name="erf4")
    graph = b.build(b.layernorm(erf4, w5, axis=0, epsilon=1e-5, name="layernorm6"))
    optimized = einsat.optimize(graph).graph
    assert any(n.op is Op.EOP for n in optimized.nodes)
    feed = {"x0": np.array([0.25, -1.5, 3.0], dtype=np.float32)}
    (want,) = run(graph, feed).values()
    (got,) = run(optimized, feed).values()
    assert np.array_equal(got, want) and not np.any(want)


def test_a_sum_of_deviations_from_a_fused_mean_rounds_as_the_reference():
    """einsat fuzz --seed 2 (#27): Σ(2 (x - mean(x))) is 0 in exact arithmetic; the reference's
    rounding leaves 1.2e-7, and an eop whose mean summed x · (1/3) got exactly 0, which a tolerance
    relative to that tiny output refused. reduce_mean's expression now divides its sum by the count,
    as NumPy's mean does, and the fused program passes the fusion target's check."""
    import numpy as np

    import einsat
    from einsat.ir import GraphBuilder

    b = GraphBuilder("chain")
    x0 = b.input("x0", (3,), np.float32)
    sub2 = b.sub(x0, b.reduce_mean(x0, axes=(0,), name="reduce_mean1"), name="sub2")
    add3 = b.add(sub2, sub2, name="add3")
    reduce_sum5 = b.reduce_sum(add3, axes=(0,), name="reduce_sum5")
    graph = b.build(reduce_sum5, b.sub(add3, reduce_sum5, name="sub6"))
    optimized = einsat.optimize(graph, verify=False, limits=fuzz_module._greedy(), cost="h100").graph
    assert any(n.op is Op.EOP for n in optimized.nodes)  # the mean is fused
    assert check_transform(fuzz_module.fusion_transform(einsat.optimize), graph) is None


# -- the written ONNX on onnxruntime against NumPy (#37 item 5) --------------------------------
def swap_sub_in_the_written_onnx(real_to_onnx):
    """A wrong exporter: the ONNX it writes computes b - a for every a - b."""
    def to_onnx(graph, *args, **kwargs):
        model = real_to_onnx(graph, *args, **kwargs)
        for node in model.graph.node:
            if node.op_type == "Sub":
                node.input[0], node.input[1] = node.input[1], node.input[0]
        return model
    return to_onnx


def test_every_case_s_written_onnx_runs_on_onnxruntime(monkeypatch):
    calls = []
    real = fuzz_module.check_written_onnx

    def spy(graph, out, seed=0):
        calls.append(out)
        return real(graph, out, seed)

    monkeypatch.setattr(fuzz_module, "check_written_onnx", spy)
    report = fuzz(budget=3, seed=0, targets=["onnx"])
    assert report.ok, str(report)
    assert len(calls) == report.examples["onnx"] == 3


@pytest.mark.slow  # optimize, twice: ~10 s
def test_a_fused_eop_s_written_onnx_matches_numpy_on_onnxruntime():
    """The optimize target's results hold fused eOperators (a norm: its statistics and the
    normalized value, `eop_multi`); their written ONNX runs on onnxruntime against NumPy's run
    of the input, and a wrong expression in the eop is caught."""
    import numpy as np

    import einsat
    from einsat.ir import GraphBuilder, Node

    b = GraphBuilder("norm")
    x = b.input("x", (4, 8))
    centered = b.sub(x, b.reduce_mean(x, axes=(1,)))
    var = b.reduce_mean(b.mul(centered, centered), axes=(1,))
    graph = b.build(b.div(centered, b.sqrt(b.add(var, b.const(np.float32(1e-5))))), var)
    out = fuzz_module.optimize_transform(einsat.optimize)(graph)
    eops = [n for n in out.nodes if n.op in (Op.EOP, Op.EOP_MULTI)]
    assert eops, [n.op for n in out.nodes]
    assert fuzz_module.check_written_onnx(graph, out) is None
    assert check_transform(fuzz_module.optimize_transform(einsat.optimize), graph) is None
    # the same program written with a wrong constant inside an eop's expression: caught on onnxruntime
    node = next(n for n in eops if re.search(r"\d\.\d", str(n.attrs.get("expr") or n.attrs.get("exprs"))))
    key = "expr" if node.op is Op.EOP else "exprs"

    def wrong(e: str) -> str:
        return re.sub(r"(\d+\.\d+)", lambda m: repr(2 * float(m.group(1)) + 1), e, count=1)

    value = node.attrs[key]
    # with no chain (the expression route: an eop the fusion did not make); a fused eop writes its
    # chain of ops, which a wrong expression does not change (tests/rewrites/derive/test_fusion_export.py)
    attrs = {**node.attrs, key: wrong(value) if isinstance(value, str) else type(value)(wrong(e) for e in value),
             "chain": ""}
    assert attrs[key] != value
    broken = out.replace(nodes=[Node(n.op, n.inputs, n.outputs, attrs, n.name) if n is node else n
                                for n in out.nodes])
    msg = fuzz_module.check_written_onnx(graph, broken)
    assert msg is not None and "differs from NumPy's run of the input" in msg


def test_a_wrong_export_is_caught_by_the_differential_check_and_replays(monkeypatch):
    monkeypatch.setattr(fuzz_module, "TARGETS", dict(fuzz_module.TARGETS))
    register_transform("identity", lambda g: g,
                       strategy=lambda: programs(ops=[Op.SUB, Op.RELU], max_nodes=2, max_side=3))
    real = fuzz_module.to_onnx
    monkeypatch.setattr(fuzz_module, "to_onnx", swap_sub_in_the_written_onnx(real))
    report = fuzz(budget=20, seed=0, targets=["identity"])
    (failure,) = report.failures
    assert "the written ONNX on onnxruntime differs from NumPy's run of the input" in failure.message
    assert any(n.op is Op.SUB for n in failure.case.nodes) and len(failure.case.nodes) <= 2
    # the printed case replays: it fails with the wrong exporter and passes with the right one
    case = rebuild(failure.code)
    assert fuzz_module.check_written_onnx(case, case) is not None
    monkeypatch.setattr(fuzz_module, "to_onnx", real)
    assert fuzz_module.check_written_onnx(case, case) is None


def test_a_written_file_onnxruntime_refuses_fails_with_its_message(monkeypatch):
    from einsat.ir import GraphBuilder

    b = GraphBuilder("g")
    graph = b.build(b.relu(b.input("x", (2, 3))))

    def unknown_op(g, *args, **kwargs):
        model = real(g)
        model.graph.node[0].op_type = "NoSuchOp"
        return model

    real = fuzz_module.to_onnx
    monkeypatch.setattr(fuzz_module, "to_onnx", unknown_op)
    msg = fuzz_module.check_written_onnx(graph, graph)
    assert msg is not None and msg.startswith("the written ONNX does not run on onnxruntime") and "NoSuchOp" in msg
