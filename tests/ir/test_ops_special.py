"""constant, identity, correct, fused_correct: NumPy semantics against onnxruntime (correct through its
Slice/Concat expansion), region checks, import forms."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from onnx import helper

from einsat.errors import AttributeValueError, ShapeError
from einsat.ir import GraphBuilder, Op
from einsat.ir.onnx.export import to_onnx
from einsat.testing.strategies import arrays, seeds, shapes
from tests.ir.onnx_check import check_op, import_node


@given(shapes(0, 3), st.sampled_from([np.float32, np.int64, np.bool_]), seeds)
def test_constant(shape, dtype, seed):
    value = (arrays(seed, shape)[0] * 3).astype(dtype)
    g = check_op(Op.CONSTANT, [], {"value": value})
    assert g.types[g.outputs[0]].dtype == np.dtype(dtype)


@given(shapes(0, 3), seeds)
def test_identity(shape, seed):
    check_op(Op.IDENTITY, arrays(seed, shape))


@st.composite
def correct_cases(draw):
    shape = draw(shapes(1, 4, 1, 5))
    starts, ends = [], []
    for d in shape:
        s = draw(st.integers(0, d))
        starts.append(s)
        ends.append(draw(st.integers(s, d)))
    return shape, tuple(starts + ends)


@given(correct_cases(), seeds)
def test_correct(case, seed):
    shape, region = case
    r = len(shape)
    box = tuple(e - s for s, e in zip(region[:r], region[r:]))
    mutant, fix = arrays(seed, shape, box)
    g = check_op(Op.CORRECT, [mutant, fix], {"region": region})
    import einsat
    out = einsat.run(g, {"x0": mutant, "x1": fix})[g.outputs[0]]
    inside = tuple(slice(s, e) for s, e in zip(region[:r], region[r:]))
    np.testing.assert_array_equal(out[inside], fix)
    outside = np.ones(shape, bool)
    outside[inside] = False
    np.testing.assert_array_equal(out[outside], mutant[outside])


@st.composite
def fused_correct_cases(draw):
    """A correct case, then an optional view (the flat or the reversed shape), an optional
    transpose and an optional final reshape (flat, or the shape with its first two dims merged)."""
    shape, region = draw(correct_cases())
    view = draw(st.sampled_from([(), tuple(reversed(shape)), (int(np.prod(shape)),)]))
    cur = view or shape
    perm = draw(st.sampled_from([(), tuple(draw(st.permutations(range(len(cur)))))]))
    cur = tuple(cur[p] for p in perm) if perm else cur
    merged = (cur[0] * cur[1],) + cur[2:] if len(cur) > 1 else cur
    final = draw(st.sampled_from([(), (int(np.prod(cur)),), merged]))
    return shape, region, view, perm, final


@given(fused_correct_cases(), seeds)
def test_fused_correct_is_the_correct_then_its_layout_chain(case, seed):
    shape, region, view, perm, final = case
    r = len(shape)
    box = tuple(e - s for s, e in zip(region[:r], region[r:]))
    mutant, fix = arrays(seed, shape, box)
    g = check_op(Op.FUSED_CORRECT, [mutant, fix], {"region": region, "view": view, "perm": perm, "shape": final})
    import einsat
    out = einsat.run(g, {"x0": mutant, "x1": fix})[g.outputs[0]]
    want = mutant.copy()
    want[tuple(slice(s, e) for s, e in zip(region[:r], region[r:]))] = fix
    want = want.reshape(view) if view else want
    want = np.transpose(want, perm) if perm else want
    want = want.reshape(final) if final else want
    np.testing.assert_array_equal(out, want)


def test_fused_correct_errors():
    b = GraphBuilder()
    m, f = b.input("m", (4, 5)), b.input("f", (2, 2))
    with pytest.raises(ShapeError, match=r"view \(3, 7\) cannot reshape \[4, 5\]"):
        b.fused_correct(m, f, region=(0, 0, 2, 2), view=(3, 7))
    with pytest.raises(ShapeError, match=r"perm \(0, 0\) is not a permutation"):
        b.fused_correct(m, f, region=(0, 0, 2, 2), perm=(0, 0))
    with pytest.raises(ShapeError, match=r"fix \[2, 2\] f32 must have the region's shape \[2, 3\]"):
        b.fused_correct(m, f, region=(0, 0, 2, 3), perm=(1, 0))


def test_correct_exports_only_standard_ops():
    b = GraphBuilder()
    m = b.input("m", (4, 5, 6))
    f = b.input("f", (2, 5, 3))
    model = to_onnx(b.build(b.correct(m, f, region=(1, 0, 2, 3, 5, 5))))
    assert {n.op_type for n in model.graph.node} == {"Slice", "Concat"}
    assert all(n.domain == "" for n in model.graph.node)
    # axes 0 and 2 are cut: two slices (before/after) per cut axis, one concat per cut axis
    assert sum(n.op_type == "Slice" for n in model.graph.node) == 4


def test_correct_errors():
    b = GraphBuilder()
    m = b.input("m", (4, 5))
    with pytest.raises(ShapeError, match=r"fix \[2, 2\] f32 must have the region's shape \[2, 3\]"):
        b.correct(m, b.input("f", (2, 2)), region=(0, 0, 2, 3))
    with pytest.raises(ShapeError, match="dim 1 needs 0 <= start 3 <= end 2 <= 5"):
        b.correct(m, b.input("g", (2, 0)), region=(0, 3, 2, 2))
    with pytest.raises(ShapeError, match="needs 4 values"):
        b.correct(m, b.input("h", (2, 2)), region=(0, 0, 2))
    with pytest.raises(AttributeValueError, match="region"):
        b.correct(m, b.input("k", (2, 2)), region=(0, -1, 2, 1))


@pytest.mark.parametrize("attr, value, want", [
    ("value_float", 2.5, np.array(2.5, np.float32)),
    ("value_ints", [1, 2, 3], np.array([1, 2, 3], np.int64)),
    ("value_int", 7, np.array(7, np.int64)),
])
def test_constant_imports_scalar_forms(attr, value, want):
    op, ins, attrs = import_node(helper.make_node("Constant", [], ["c"], **{attr: value}), {},
                                 out_dtype=want.dtype)
    assert op is Op.CONSTANT and ins == []
    np.testing.assert_array_equal(attrs["value"], want)
    assert attrs["value"].dtype == want.dtype
