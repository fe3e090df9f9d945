"""access and assign (TensorSSA's immutable views): NumPy's view semantics, onnxruntime, laws."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from einsat.errors import EinsatError
from einsat.ir import Graph, Node, Op, TensorType
from einsat.ir.onnx.export import to_onnx
from einsat.ir.ops.views import apply_spec, spec_shapes
from einsat.testing.strategies import arrays, seeds
from tests.ir.onnx_check import check_op


@st.composite
def view_specs(draw, writable=False):
    """(shape, spec, dynamic index values): a valid chain of 1-4 view steps."""
    shape = draw(st.lists(st.integers(1, 5), min_size=1, max_size=3).map(tuple))
    spec, dyn, s = [], [], shape
    for _ in range(draw(st.integers(1, 4))):
        kinds = ["reshape", "transpose"] + (["expand"] if not writable else [])
        if s:
            kinds += ["slice", "select", "dselect"]
        kind = draw(st.sampled_from(kinds))
        if kind in ("slice", "select", "dselect"):
            axis = draw(st.integers(0, len(s) - 1))
            d = s[axis]
            if kind == "slice":
                step = draw(st.sampled_from([1, 2, -1, -2]))
                start = draw(st.integers(0, d - 1))
                most = start // -step + 1 if step < 0 else (d - 1 - start) // step + 1
                spec.append(("slice", axis, start, step, draw(st.integers(1, most))))
            elif kind == "select":
                spec.append(("select", axis, draw(st.integers(0, d - 1))))
            else:
                spec.append(("dselect", axis, len(dyn)))
                dyn.append(np.array(draw(st.integers(-d, d - 1)), np.int64))
        elif kind == "reshape":
            spec.append(("reshape", tuple(np.random.default_rng(len(spec)).permutation(
                [int(np.prod(s))] + [1] * draw(st.integers(0, 1))))))
        elif kind == "transpose":
            spec.append(("transpose", tuple(draw(st.permutations(range(len(s)))))))
        else:
            spec.append(("expand", (draw(st.integers(1, 3)),) + s))
        s = spec_shapes(shape, spec)[-1]
    return shape, tuple(spec), dyn


@given(view_specs(), seeds)
def test_access_matches_numpy_views_and_onnxruntime(case, seed):
    shape, spec, dyn = case
    (x,) = arrays(seed, shape)
    g = check_op(Op.ACCESS, [x, *dyn], {"spec": spec})
    assert g.types[g.outputs[0]].shape == apply_spec(x, spec, dyn).shape


@given(view_specs(writable=True), seeds, st.booleans())
def test_assign_writes_exactly_the_viewed_region(case, seed, scalar):
    shape, spec, dyn = case
    (x,) = arrays(seed, shape)
    region = spec_shapes(shape, spec)[-1]
    w = np.full((), 7.5, np.float32) if scalar else arrays(seed + 1, region)[0]
    g = check_op(Op.ASSIGN, [x, w, *dyn], {"spec": spec})
    want = x.copy()
    view = apply_spec(want, spec, dyn)
    if np.shares_memory(view, want) or view.size == 0:  # NumPy's own write through the view
        view[...] = w
        from einsat import run
        got = run(g, {f"x{k}": a for k, a in enumerate([x, w, *dyn])})[g.outputs[0]]
        np.testing.assert_array_equal(got, want)


def test_assign_then_access_reads_the_source():
    x = np.arange(24, dtype=np.float32).reshape(4, 6)
    spec = (("transpose", (1, 0)), ("slice", 0, 5, -2, 3), ("select", 1, 2))
    from einsat.ir.registry import opdef
    y = opdef(Op.ASSIGN).numpy([x, np.array([1, 2, 3], np.float32)], {"spec": spec})[0]
    np.testing.assert_array_equal(opdef(Op.ACCESS).numpy([y], {"spec": spec})[0], [1, 2, 3])
    assert (y != x).sum() == 3


@pytest.mark.parametrize("op, shapes, attrs, reason", [
    (Op.ACCESS, [(2, 3)], {"spec": [("slice", 1, 1, 1, 3)]}, "leaves axis 1 of size 3"),
    (Op.ACCESS, [(2, 3)], {"spec": [("select", 2, 0)]}, "names axis 2"),
    (Op.ACCESS, [(2, 3)], {"spec": [("dselect", 0, 0)]}, "reads 1 dynamic indices, the node passes 0"),
    (Op.ACCESS, [(2, 3)], {"spec": [("bogus", 1)]}, "invalid view spec"),
    (Op.ACCESS, [(2, 3)], {"spec": [("reshape", (4,))]}, "cannot reshape"),
    (Op.ASSIGN, [(2, 3), (2,)], {"spec": [("select", 0, 1)]}, "does not broadcast to the region"),
    (Op.ASSIGN, [(2, 3), (3,)], {"spec": [("expand", (2, 2, 3))]}, "read-only"),
])
def test_bad_views_name_the_node_and_reason(op, shapes, attrs, reason):
    inputs = {f"x{k}": TensorType(s, np.float32) for k, s in enumerate(shapes)}
    with pytest.raises(EinsatError, match=reason) as e:
        Graph([Node(op, list(inputs), ["y"], attrs, name="bad")], inputs, ["y"])
    assert "'bad'" in str(e.value)


def test_dynamic_index_out_of_range_fails_at_run_time():
    import einsat
    from einsat.errors import ExecutionError
    g = Graph([Node(Op.ACCESS, ["x", "i"], ["y"], {"spec": [("dselect", 0, 0)]})],
              {"x": TensorType((3,)), "i": TensorType((), np.int64)}, ["y"])
    assert einsat.run(g, {"x": np.arange(3, dtype=np.float32), "i": np.array(-3)})["y"] == 0
    with pytest.raises(ExecutionError, match="out of bounds"):
        einsat.run(g, {"x": np.arange(3, dtype=np.float32), "i": np.array(3)})


@st.composite
def box_specs(draw):
    """(shape, spec): unit-stride slices and constant selects, the writes that export as Slice/Concat."""
    shape = draw(st.lists(st.integers(1, 5), min_size=1, max_size=3).map(tuple))
    spec, s = [], shape
    for _ in range(draw(st.integers(1, 3))):
        if not s:
            break
        axis = draw(st.integers(0, len(s) - 1))
        start = draw(st.integers(0, s[axis] - 1))
        if draw(st.booleans()):
            spec.append(("slice", axis, start, 1, draw(st.integers(1, s[axis] - start))))
        else:
            spec.append(("select", axis, start))
        s = spec_shapes(shape, spec)[-1]
    return shape, tuple(spec)


@given(box_specs(), seeds)
def test_box_assign_exports_as_slice_and_concat(case, seed):
    """onnxruntime runs the Slice/Concat form (check_op compares it to NumPy's write)."""
    shape, spec = case
    (x,) = arrays(seed, shape)
    w = arrays(seed + 1, spec_shapes(shape, spec)[-1])[0]
    g = check_op(Op.ASSIGN, [x, w], {"spec": spec})
    ops = {n.op_type for n in to_onnx(g).graph.node}
    assert "ScatterND" not in ops and "Range" not in ops


def assign_graph(shape, spec, region):
    x, w = TensorType(shape, np.float32), TensorType(region, np.float32)
    return Graph([Node(Op.ASSIGN, ["x", "w"], ["y"], {"spec": spec})], {"x": x, "w": w}, ["y"])


def test_a_slice_write_into_a_large_buffer_exports_no_index_table():
    """The issue's case: out[:, :1024] = w on a [1024, 2048] buffer was a 16.7 MB int64 table."""
    g = assign_graph((1024, 2048), (("slice", 1, 0, 1, 1024),), (1024, 1024))
    model = to_onnx(g)
    assert model.ByteSize() < 10_000
    # the kept part of x and w, joined (w's slice over its whole extent is not written: `tidy`)
    assert [n.op_type for n in model.graph.node if n.op_type in ("Slice", "Concat", "ScatterND")] == \
        ["Slice", "Concat"]
    x = np.random.default_rng(0).standard_normal((1024, 2048)).astype(np.float32)
    w = np.random.default_rng(1).standard_normal((1024, 1024)).astype(np.float32)
    import onnxruntime as ort
    (got,) = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x, "w": w})
    want = x.copy()
    want[:, :1024] = w
    np.testing.assert_array_equal(got, want)


def test_a_strided_write_is_a_scatter_over_positions_computed_at_run_time():
    g = assign_graph((512, 256), (("slice", 0, 1, 2, 256),), (256, 256))
    model = to_onnx(g)
    assert model.ByteSize() < 10_000
    assert {"Range", "ScatterND"} <= {n.op_type for n in model.graph.node}
    x = np.random.default_rng(0).standard_normal((512, 256)).astype(np.float32)
    w = np.ones((256, 256), np.float32)
    import onnxruntime as ort
    (got,) = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x, "w": w})
    want = x.copy()
    want[1::2] = w
    np.testing.assert_array_equal(got, want)
