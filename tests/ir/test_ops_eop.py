"""`eop`, the eOperator: NumPy semantics from its expression, ONNX that onnxruntime runs, FLOPs from
its ranges, a canonical attribute, clear errors."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from einsat.errors import EinsatError
from einsat.ir import GraphBuilder, Op, TensorType
from einsat.ir.expr import Call, Const, Expr, Guard, Iter, fingerprint, var
from einsat.ir.expr.build import read
from einsat.ir.expr.onnx import MAX_OFFSET_TERMS, MIN_RUN, offset_sum
from einsat.ir.onnx.export import to_onnx
from einsat.ir.registry import opdef
from tests.gpu.cases import strategy
from tests.ir.onnx_check import check_op

F = np.float32


def arrays(rng, *shapes):
    return [rng.standard_normal(s).astype(F) for s in shapes]


def offset_reduce(h=5, w=6, f=3):
    """EinNet Fig. 5's E7: out[f, h, w] = Σ_{r,s} T[r, s, f, h + r, w + s] (r, s in [-1, 2))."""
    loops = (Iter("f", 0, f), Iter("h", 0, h), Iter("w", 0, w))
    sums = (Iter("r", -1, 2), Iter("s", -1, 2))
    return Expr(loops, sums, read(0, var("r") + 1, var("s") + 1, "f", var("h") + var("r"), var("w") + var("s")))


CASES = {
    "offset_reduce": (offset_reduce(), [(3, 3, 3, 5, 6)]),
    "guarded_stride": (Expr((Iter("o", 0, 7),), (Iter("i", 0, 4),),
                            Guard((var("o") - var("i") * 2 + 1).mod(2), 0, 1,
                                  Call("mul", (read(0, "i"), read(1, (var("o") - var("i") * 2 + 1).floordiv(2)))))),
                       [(4,), (3,)]),
    "max_window": (Expr((Iter("o", 0, 3),), (Iter("k", 0, 2),), read(0, var("o") * 2 + var("k")), "max"), [(6,)]),
    "reshape_divmod": (Expr((Iter("a", 0, 6), Iter("b", 0, 2)), (),
                            read(0, (var("a") * 2 + var("b")).floordiv(4), (var("a") * 2 + var("b")).mod(4))),
                       [(3, 4)]),
    "scope_with_offsets": (Expr((Iter("i", 0, 4),), (),
                                Call("relu", (read(Expr((Iter("t", -1, 5),), (),
                                                        Call("mul", (read(0, "t"), Const(-2.0)))), var("i") - 1),))),
                           [(4,)]),
    "broadcast_unused_iterator": (Expr((Iter("i", 0, 3), Iter("j", 0, 2)), (Iter("k", 0, 4),), read(0, "i")), [(3,)]),
    "transposed_offsets": (Expr((Iter("i", 0, 3), Iter("j", 0, 4)), (Iter("k", 0, 2),),
                                read(0, var("j") + var("k"), "i")), [(5, 3)]),
    "shifted_sum_5x5": (Expr((Iter("n", 0, 2), Iter("f", 0, 1), Iter("h", 0, 6), Iter("w", 0, 7)),
                             (Iter("r", 0, 5), Iter("s", 0, 5)),
                             read(0, "n", "f", "r", "s", var("h") + var("r") - 2, var("w") + var("s") - 2)),
                        [(2, 1, 5, 5, 6, 7)]),
    # a stride-2 transposed convolution's sum of taps, taps innermost (slices from a transposed copy)
    "strided_taps_innermost": (Expr((Iter("n", 0, 2), Iter("y", 0, 8), Iter("x", 0, 8)),
                                    (Iter("a", 0, 4), Iter("b", 0, 4)),
                                    read(0, "n", var("y") - var("a") * 2 + 1, var("x") - var("b") * 2 + 1, "a", "b")),
                               [(2, 4, 4, 4, 4)]),
    # a stride-2 transposed convolution's taps between the batch and channel axes, 4×4 planes
    # innermost (einnet_conv_transpose after its MatMul): the planes move outermost
    "taps_between_the_channels": (Expr((Iter("n", 0, 2), Iter("k", 0, 64), Iter("y", 0, 4), Iter("x", 0, 4)),
                                       (Iter("a", 0, 2), Iter("b", 0, 2)),
                                       read(0, "n", "a", "b", "k", var("y") - var("a") * 2 + 1,
                                            var("x") - var("b") * 2 + 1)),
                                  [(2, 2, 2, 64, 4, 4)]),
    # ReLU fused onto an offset sum (eop-fusion's form): the scope's slices, then the ReLU
    "relu_of_an_offset_sum": (Expr((Iter("y", 0, 5),), (), Call("relu", (read(
        Expr((Iter("t", 0, 5),), (Iter("k", 0, 3),), read(0, var("t") + var("k") - 1, "k")), "y"),))), [(5, 3)]),
}

ROUTE = {"strided_taps_innermost": "slices", "taps_between_the_channels": "slices",
         "relu_of_an_offset_sum": "slices", "offset_reduce": "slices",
         "max_window": "slices", "shifted_sum_5x5": "slices", "guarded_stride": "gathers",
         "reshape_divmod": "gathers", "scope_with_offsets": "gathers", "broadcast_unused_iterator": "aligned",
         "transposed_offsets": "gathers"}


def route(g) -> str:
    ops = {n.op_type for n in to_onnx(g).graph.node}
    return "gathers" if "Gather" in ops else "slices" if "Slice" in ops else "aligned"


@pytest.mark.parametrize("name", sorted(CASES))
def test_eop_runs_on_numpy_and_onnxruntime(name, rng):
    e, shapes = CASES[name]
    g = check_op(Op.EOP, arrays(rng, *shapes), {"expr": fingerprint(e)})
    assert g.types[g.outputs[0]].shape == e.shape
    assert route(g) == ROUTE[name]


@st.composite
def offset_sums(draw):
    """A random offset sum: output iterators in order with positive steps, summation iterators and
    constants that reach past either end of the input (zero-padded), sum or max."""
    rank = draw(st.integers(1, 3))
    loops = tuple(Iter(f"l{k}", lo, lo + draw(st.integers(1, 4)))
                  for k, lo in enumerate(draw(st.lists(st.integers(-1, 1), min_size=rank, max_size=rank))))
    sums = tuple(Iter(f"s{k}", lo, lo + draw(st.integers(1, 3)))
                 for k, lo in enumerate(draw(st.lists(st.integers(-2, 1), min_size=1, max_size=2))))
    if draw(st.booleans()):  # an axis taken whole, long enough that cut axes inside it move outermost
        at = draw(st.integers(0, rank))
        loops = loops[:at] + (Iter("whole", 0, draw(st.sampled_from([64, 65]))),) + loops[at:]
    subscripts, wide = [], {}
    for it in loops:
        if it.name == "whole":
            wide[len(subscripts)] = it.size
            subscripts.append(var(it.name))
            continue
        if draw(st.booleans()):  # an axis that only summation iterators and a constant reach
            subscripts.append(var(draw(st.sampled_from([s.name for s in sums]))) + draw(st.integers(0, 2)))
        sub = var(it.name) * draw(st.integers(1, 3)) + draw(st.integers(-2, 2))
        for s in sums:
            sub = sub + var(s.name) * draw(st.integers(-2, 2))
        subscripts.append(sub)
    if draw(st.booleans()):  # and one after the output's iterators
        subscripts.append(var(sums[-1].name) + draw(st.integers(-1, 1)))
    e = Expr(loops, sums, read(0, *subscripts), draw(st.sampled_from(["sum", "max"])))
    shape = tuple(wide.get(d) or draw(st.integers(1, 6)) for d in range(len(subscripts)))
    return e, shape


@settings(max_examples=40, deadline=None)
@given(offset_sums(), st.integers(0, 2**32 - 1))
def test_offset_sums_export_as_slices_and_agree_with_numpy(case, seed):
    e, shape = case
    assert offset_sum(e, [shape]) is not None
    g = check_op(Op.EOP, arrays(np.random.default_rng(seed), shape), {"expr": fingerprint(e)})
    assert route(g) == "slices"


def test_too_many_summation_points_take_the_gather_route():
    n = MAX_OFFSET_TERMS + 1
    e = Expr((Iter("i", 0, 2),), (Iter("k", 0, n),), read(0, var("i") + var("k")))
    assert offset_sum(e, [(n + 1,)]) is None
    assert offset_sum(Expr((Iter("i", 0, 2),), (Iter("k", 0, n - 1),), read(0, var("i") + var("k"))), [(n,)])


@pytest.mark.parametrize("op", ["conv", "conv_transpose", "g2bmm", "gbmm", "matmul", "avgpool", "reshape", "concat"])
def test_eop_of_an_ops_expression_is_the_op(op):
    @settings(max_examples=6)
    @given(strategy(op))
    def check(case):
        node = case.graph.nodes[-1]
        ins = [case.graph.types[i] for i in node.inputs if i]
        e = node.definition.expression(ins, node.attrs)
        if e is None:
            return
        env = dict(case.inputs)
        for n in case.graph.nodes:
            env.update(zip(n.outputs, n.definition.numpy([env[i] if i else None for i in n.inputs], n.attrs)))
        args = [env[i] for i in node.inputs if i]
        if len({a.dtype for a in args}) > 1:
            return
        check_op(Op.EOP, args, {"expr": fingerprint(e)}, rtol=1e-4, atol=1e-4)
        want = env[node.outputs[0]]
        got = opdef(Op.EOP).numpy(args, {"expr": fingerprint(e)})[0]
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * max(1.0, float(np.abs(want).max(initial=0))))

    check()


def test_the_attribute_is_canonical():
    a = fingerprint(offset_reduce())
    renamed = a.replace("s0", "tmp").replace("s1", "s0").replace("tmp", "s1")  # summations swapped
    assert renamed != a
    b = GraphBuilder("canon")
    t = b.input("t", (3, 3, 3, 5, 6))
    y1 = b.eop(t, expr=a)
    y2 = b.eop(t, expr=renamed)
    g = b.build(y1, y2)
    assert g.nodes[0].attrs["expr"] == g.nodes[1].attrs["expr"] == a


def test_flops_and_bytes_come_from_the_ranges():
    d = opdef(Op.EOP)
    e = offset_reduce()
    ins, outs = [TensorType((3, 3, 3, 5, 6))], [TensorType((3, 5, 6))]
    attrs = {"expr": fingerprint(e)}
    assert d.flops(ins, outs, attrs) == 3 * 5 * 6 * 9 * 1  # one add per grid point
    assert d.bytes(ins, outs, attrs) == 4 * (3 * 3 * 3 * 5 * 6 + 3 * 5 * 6)


def test_multilinearity_is_read_from_the_body():
    d = opdef(Op.EOP)
    mm = Expr((Iter("m", 0, 2),), (Iter("k", 0, 3),), Call("mul", (read(0, "m", "k"), read(1, "k"))))
    square = Expr((Iter("m", 0, 2),), (), Call("mul", (read(0, "m"), read(0, "m"))))
    relu = Expr((Iter("m", 0, 2),), (), Call("relu", (read(0, "m"),)))
    assert d.is_multilinear({"expr": fingerprint(mm)})
    assert not d.is_multilinear({"expr": fingerprint(square)})
    assert not d.is_multilinear({"expr": fingerprint(relu)})


def test_bad_eops_name_the_node_and_the_reason():
    b = GraphBuilder("bad")
    t = b.input("t", (3, 4))
    with pytest.raises(EinsatError, match=r"e1'? \(eop\).*reads input 0 with 1 subscripts"):
        b.eop(t, expr="(E (L 0:3) (S) (T 0 i0))", name="e1")
    with pytest.raises(EinsatError, match=r"e2'? \(eop\).*unknown iterator"):
        b.eop(t, expr="(E (L 0:3) (S) (T 0 i0 s3))", name="e2")
    with pytest.raises(EinsatError, match=r"e3'? \(eop\).*reads input 1"):
        b.eop(t, expr="(E (L 0:3) (S) (T 1 i0 i0))", name="e3")


def test_positions_past_the_output_iterators_are_moved_outermost_first(rng):
    e, shapes = CASES["strided_taps_innermost"]
    assert offset_sum(e, shapes).perm == [3, 4, 0, 1, 2]
    g = check_op(Op.EOP, arrays(rng, *shapes), {"expr": fingerprint(e)})
    assert [n.op_type for n in to_onnx(g).graph.node][:2] == ["Transpose", "Pad"]
    assert offset_sum(*CASES["shifted_sum_5x5"]).perm is None  # runs along the last axis already: no copy


def test_cut_axes_innermost_move_outermost_and_the_sum_moves_back(rng):
    e, shapes = CASES["taps_between_the_channels"]
    plan = offset_sum(e, shapes)
    assert plan.perm == [4, 5, 0, 1, 2, 3]  # the 4×4 planes first; batch, taps, channels stay in order
    assert plan.back == ([2, 3, 0, 1], [4, 4, 2, 64])
    assert plan.run >= MIN_RUN
    g = check_op(Op.EOP, arrays(rng, *shapes), {"expr": fingerprint(e)})
    written = to_onnx(g).graph.node
    ops = [n.op_type for n in written]
    # the sum squeezed and transposed back; the transpose has the output's shape and writes it
    # (the export's final Reshape to that shape is a view the file does not need: ir/onnx/tidy.py)
    assert ops[:2] == ["Transpose", "Pad"] and ops[-2:] == ["Reshape", "Transpose"]
    assert list(written[-1].output) == list(g.outputs)
    # planes of 64 elements are runs already: no copy
    wide = Expr((Iter("n", 0, 2), Iter("y", 0, 8), Iter("x", 0, 8)), (Iter("a", 0, 2),),
                read(0, "n", var("y") + var("a") - 1, "x"))
    assert offset_sum(wide, [(2, 8, 8)]).perm is None and offset_sum(wide, [(2, 8, 8)]).back is None


def test_gathers_only_exports_an_offset_sum_through_gathers_with_the_same_result(rng):
    from einsat.ir.expr.onnx import gathers_only
    e, shapes = CASES["relu_of_an_offset_sum"]
    with gathers_only():
        g = check_op(Op.EOP, arrays(rng, *shapes), {"expr": fingerprint(e)})
        assert route(g) == "gathers"
    assert route(g) == "slices"
