"""TensorSSA's immutable view ops: `access` (read through a view) and `assign` (write through one).

A view spec is a static tuple of steps, applied left to right to the base tensor's shape:

    ("slice", axis, start, step, count)   elements start, start+step, ... (count of them); step != 0
    ("select", axis, index)               drop `axis`, keep position `index` (0 <= index < dim)
    ("dselect", axis, k)                  the same with the index read from dynamic input k
                                          (a 0-d integer tensor; negative counts from the end)
    ("reshape", shape)                    row-major reshape (explicit dims)
    ("transpose", perm)                   axis permutation
    ("expand", shape)                     broadcast to `shape` (read-only: access only)

Laws (TensorSSA §3.2): `access(x, s)` is a new tensor holding the data NumPy's view `x[s]` would
show; `assign(x, w, s)` is a new tensor equal to `x` except that the region `access(x, s)`
reads now holds `w` (broadcast to that region's shape). So `access(assign(x, w, s), s) = w` and
chains compose: `access(access(x, s), t) = access(x, s + t)` and
`assign(x, assign(access(x, s), w, t), s) = assign(x, w, s + t)`.

Inputs: access (x, *indices), assign (x, w, *indices); the dynamic indices of `dselect` steps.
ONNX: access becomes the chain Slice / Gather / Reshape / Transpose / Expand; assign of a box
(unit-stride slices and selects) becomes Slice / Concat around the written block, any other
assign a ScatterND whose indices are that same chain applied to the flat positions of x
(computed by `Range`: no table the size of x in the file; see `assign_onnx`).
"""

from __future__ import annotations

from math import prod

import numpy as np

from einsat.ir.ops.assign_onnx import assign_box_to_onnx, box_of, flat_positions
from einsat.ir.ops.onnx_args import int64s
from einsat.ir.registry import Attr, Op, OpDef, ShapeError, register
from einsat.ir.types import TensorType

_STEP_KINDS = {"slice": 4, "select": 2, "dselect": 2, "reshape": 1, "transpose": 1, "expand": 1}


def _spec_kind(v):
    """Canonical form: a tuple of tuples whose shape arguments are tuples of ints."""
    steps = []
    for step in v:
        step = tuple(step)
        if not step or step[0] not in _STEP_KINDS or len(step) != 1 + _STEP_KINDS[step[0]]:
            raise TypeError(f"bad view step {step!r}; steps are {sorted(_STEP_KINDS)}")
        kind, args = step[0], step[1:]
        if kind in ("reshape", "transpose", "expand"):
            steps.append((kind, tuple(int(d) for d in args[0])))
        else:
            steps.append((kind, *(int(a) for a in args)))
    return tuple(steps)


def spec_shapes(shape: tuple[int, ...], spec) -> list[tuple[int, ...]]:
    """The shape after each step (the first entry is `shape`); raises ShapeError on a bad step."""
    shapes = [tuple(shape)]
    for step in spec:
        s, kind = shapes[-1], step[0]
        if kind in ("slice", "select", "dselect") and not 0 <= step[1] < len(s):
            raise ShapeError(f"view step {step} names axis {step[1]} of a rank-{len(s)} tensor")
        if kind == "slice":
            _, axis, start, stride, count = step
            last = start + stride * (count - 1)
            if stride == 0 or count < 0 or (count and not (0 <= start < s[axis] and 0 <= last < s[axis])):
                raise ShapeError(f"view step {step} leaves axis {axis} of size {s[axis]}")
            s = s[:axis] + (count,) + s[axis + 1:]
        elif kind == "select":
            if not 0 <= step[2] < s[step[1]]:
                raise ShapeError(f"view step {step}: index out of range for size {s[step[1]]}")
            s = s[:step[1]] + s[step[1] + 1:]
        elif kind == "dselect":
            s = s[:step[1]] + s[step[1] + 1:]
        elif kind == "reshape":
            if prod(step[1]) != prod(s) or any(d < 0 for d in step[1]):
                raise ShapeError(f"view step {step} cannot reshape {list(s)}")
            s = step[1]
        elif kind == "transpose":
            if sorted(step[1]) != list(range(len(s))):
                raise ShapeError(f"view step {step} is no permutation of {len(s)} axes")
            s = tuple(s[p] for p in step[1])
        elif kind == "expand":
            if not _broadcasts_to(s, step[1]):
                raise ShapeError(f"view step {step} cannot broadcast {list(s)}")
            s = step[1]
        shapes.append(s)
    return shapes


def dynamic_count(spec) -> int:
    return max((step[2] + 1 for step in spec if step[0] == "dselect"), default=0)


def slice_key(start: int, stride: int, count: int) -> slice:
    """The Python slice of a `slice` step: `count` elements from `start`, `stride` apart (a
    negative stride that reaches index 0 ends below 0, which Python reads from the end: None)."""
    stop = start + stride * count
    return slice(start, stop if stop >= 0 else None, stride) if count else slice(0, 0)


def apply_spec(x: np.ndarray, spec, indices) -> np.ndarray:
    """NumPy's view `x[spec]` (a view where NumPy gives one); `indices` feed the dselect steps."""
    for step in spec:
        kind = step[0]
        if kind == "slice":
            _, axis, start, stride, count = step
            x = x[(slice(None),) * axis + (slice_key(start, stride, count),)]
        elif kind == "select":  # the trailing `...` keeps a 0-d result an array (a view)
            x = x[(slice(None),) * step[1] + (step[2], Ellipsis)]
        elif kind == "dselect":
            axis, i = step[1], int(np.asarray(indices[step[2]]))
            if not -x.shape[axis] <= i < x.shape[axis]:
                raise IndexError(f"index {i} is out of bounds for axis {axis} with size {x.shape[axis]}")
            x = x[(slice(None),) * axis + (i, Ellipsis)]
        elif kind == "reshape":
            x = x.reshape(step[1])
        elif kind == "transpose":
            x = x.transpose(step[1])
        else:
            x = np.broadcast_to(x, step[1])
    return x


class _ViewOp(OpDef):
    attrs = {"spec": Attr("any", (), doc="the view: a tuple of steps (see the module docstring)")}
    layout_only = True
    n_data = 1  # tensor inputs before the dynamic indices

    def normalize(self, attrs, types):
        try:
            attrs["spec"] = _spec_kind(attrs["spec"])
        except (TypeError, ValueError, IndexError) as e:
            raise ValueError(f"invalid view spec {attrs['spec']!r}: {e}") from None
        n_dyn = len(types) - self.n_data
        if dynamic_count(attrs["spec"]) != n_dyn:
            raise ShapeError(f"the spec reads {dynamic_count(attrs['spec'])} dynamic indices, "
                             f"the node passes {n_dyn}")
        for k, t in enumerate(types[self.n_data:]):
            if t is not None and (t.rank != 0 or not np.issubdtype(t.dtype, np.integer)):
                raise ShapeError(f"dynamic index {k} must be a 0-d integer tensor, got {t}")
        return attrs

    def flops(self, ins, outs, attrs):
        return 0

    def _chain_to_onnx(self, ctx, x: str, spec, indices) -> str:
        """Emit the ONNX chain computing access(x, spec); returns its output name."""
        for step in spec:
            kind, out = step[0], ctx.fresh(step[0])
            if kind == "slice":
                _, axis, start, stride, count = step
                end = start + stride * count
                if stride < 0 and end < 0:
                    end = -(2 ** 62)  # clamps to "before index 0"
                if not count:
                    start = end = 0
                ctx.node("Slice", [x, int64s(ctx, [start], "starts"), int64s(ctx, [end], "ends"),
                                   int64s(ctx, [axis], "axes"), int64s(ctx, [stride], "steps")], [out])
            elif kind in ("select", "dselect"):
                index = (ctx.constant(np.asarray(step[2], np.int64), "index") if kind == "select"
                         else _int64(ctx, indices[step[2]]))
                ctx.node("Gather", [x, index], [out], axis=step[1])
            elif kind == "reshape":
                ctx.node("Reshape", [x, int64s(ctx, step[1], "shape")], [out])
            elif kind == "transpose":
                ctx.node("Transpose", [x], [out], perm=step[1])
            else:
                ctx.node("Expand", [x, int64s(ctx, step[1], "shape")], [out])
            x = out
        return x


def _int64(ctx, name: str) -> str:
    if ctx.type(name).dtype == np.int64:
        return name
    out = ctx.fresh("index64")
    ctx.node("Cast", [name], [out], to=7)  # TensorProto.INT64
    return out


@register
class Access(_ViewOp):
    """out = x[spec] as a new tensor (TensorSSA's Access)."""

    op = Op.ACCESS
    exact_in_half = True
    arity = (1, None)
    multilinear = True  # linear in x (the indices only select)

    def infer(self, types, attrs):
        x = types[0]
        return [TensorType(spec_shapes(x.shape, attrs["spec"])[-1], x.dtype)]

    def numpy(self, args, attrs):
        return [np.array(apply_spec(args[0], attrs["spec"], args[1:]), order="C")]

    def bytes(self, ins, outs, attrs):
        """Reads what it writes: 2 × the output's bytes (+ the indices)."""
        return 2 * outs[0].nbytes + sum(t.nbytes for t in ins[1:])

    def to_onnx(self, ctx, node):
        last = self._chain_to_onnx(ctx, node.inputs[0], node.attrs["spec"], node.inputs[1:])
        ctx.node("Identity", [last], [node.outputs[0]])


@register
class Assign(_ViewOp):
    """out = x with the region x[spec] replaced by w, broadcast to it (TensorSSA's Assign)."""

    op = Op.ASSIGN
    exact_in_half = True
    arity = (2, None)
    n_data = 2

    def normalize(self, attrs, types):
        attrs = super().normalize(attrs, types)
        if any(step[0] == "expand" for step in attrs["spec"]):
            raise ShapeError("assign cannot write through an expand step (a broadcast view is read-only)")
        return attrs

    def infer(self, types, attrs):
        x, w = types[0], types[1]
        region = spec_shapes(x.shape, attrs["spec"])[-1]
        if not _broadcasts_to(w.shape, region):
            raise ShapeError(f"the source {w} does not broadcast to the region {list(region)}")
        if w.dtype != x.dtype:
            raise ShapeError(f"the source's dtype {w.dtype} differs from the base's {x.dtype}")
        return [x]

    def numpy(self, args, attrs):
        x, w = args[0], args[1]
        out = x.copy()
        flat = out.reshape(-1)
        positions = apply_spec(np.arange(x.size).reshape(x.shape), attrs["spec"], args[2:])
        flat[positions.reshape(-1)] = np.broadcast_to(w, positions.shape).reshape(-1)
        return [out]

    def bytes(self, ins, outs, attrs):
        """Copies x and writes the region: 2 × x's bytes + the source's."""
        return 2 * outs[0].nbytes + ins[1].nbytes

    def to_onnx(self, ctx, node):
        x, w = node.inputs[0], node.inputs[1]
        t = ctx.type(x)
        spec = node.attrs["spec"]
        region = spec_shapes(t.shape, spec)[-1]
        box = box_of(t.shape, spec)
        if box is not None:
            assign_box_to_onnx(ctx, x, w, node.outputs[0], box, region)
            return
        positions = self._chain_to_onnx(ctx, flat_positions(ctx, t.shape), spec, node.inputs[2:])
        idx, data, upd, full, scattered = (ctx.fresh(h) for h in ("idx", "flat", "upd", "full", "scat"))
        ctx.node("Reshape", [positions, int64s(ctx, [-1, 1], "shape")], [idx])
        ctx.node("Reshape", [x, int64s(ctx, [-1], "shape")], [data])
        ctx.node("Expand", [w, int64s(ctx, region, "shape")], [full])
        ctx.node("Reshape", [full, int64s(ctx, [-1], "shape")], [upd])
        ctx.node("ScatterND", [data, idx, upd], [scattered])
        ctx.node("Reshape", [scattered, int64s(ctx, t.shape, "shape")], [node.outputs[0]])


def _broadcasts_to(shape, target) -> bool:
    try:
        return tuple(np.broadcast_shapes(shape, target)) == tuple(target)
    except ValueError:
        return False
