"""Layout kernels that are not plain views: pad, concat, the gathers, and PET's `correct` (alone and
fused into the reshape/transpose chain after it).

(Transpose, slice, expand, split, squeeze and contiguous reshapes are strided views and cost
no kernel; `elementwise.copy_kernel` materializes a view when a consumer needs one.)
Every kernel here writes a contiguous output, one thread per output element, and reads its
inputs through baked strides.
"""

from __future__ import annotations

from typing import Sequence

from einsat.errors import ExecutionError
from einsat.gpu.kernels.codegen import (
    Kernel,
    Param,
    contiguous_strides,
    ctype,
    decompose,
    dot,
    extent,
    grid_stride,
    make_kernel,
    memoize,
    numel,
)
from einsat.gpu.kernels.elementwise import Operand


@memoize
def pad_kernel(src: Operand, pads: Sequence[int], mode: str = "constant", value: float = 0.0) -> Kernel:
    """out = np.pad(src, pads) with ONNX pads (begins, then ends; negative crops).

    `reflect` mirrors without repeating the edge (period 2(n-1), as NumPy does for any pad
    width), `edge` repeats the border element, `constant` writes `value`.
    """
    r = len(src.shape)
    if len(pads) != 2 * r:
        raise ExecutionError(f"pad needs {2 * r} pads for a rank-{r} input, got {list(pads)}")
    if mode not in ("constant", "reflect", "edge"):
        raise ExecutionError(f"pad mode {mode!r} is not one of constant, reflect, edge")
    out_shape = tuple(d + pads[k] + pads[r + k] for k, d in enumerate(src.shape))
    if any(d < 0 for d in out_shape):
        raise ExecutionError(f"pads {list(pads)} crop more than the input {list(src.shape)}")
    if mode != "constant" and any(d == 0 for d in src.shape) and numel(out_shape):
        raise ExecutionError(f"pad mode {mode!r} cannot extend an empty dim of {list(src.shape)}")
    ct = ctype(src.dtype)
    lines = [decompose("i", out_shape), "        bool inside = true; idx_t off = 0;"]
    for k, n in enumerate(src.shape):
        pb = pads[k]
        lines.append(f"        {{ idx_t s = c{k} - ({pb}LL);")
        if mode == "constant":
            lines.append(f"          if (s < 0 || s >= {n}LL) inside = false;")
        elif mode == "edge":
            lines.append(f"          s = s < 0 ? 0 : (s >= {n}LL ? {n - 1}LL : s);")
        elif n == 1:
            lines.append("          s = 0;")
        else:
            p = 2 * (n - 1)
            lines.append(f"          s %= {p}LL; if (s < 0) s += {p}LL; if (s >= {n}LL) s = {p}LL - s;")
        lines.append(f"          off += s * {src.strides[k]}LL; }}")
    load = ct.load("in0[off]")
    lines.append(f"        out[i] = inside ? {ct.save(load)} : {ct.save(ct.literal(value))};")
    work = numel(out_shape)
    params = [Param("in0", "in", src.dtype), Param("out", "out", src.dtype)]
    return make_kernel("pad", params, grid_stride("\n".join(lines), work), work,
                       span=extent(src.shape, src.strides))


@memoize
def concat_kernel(inputs: Sequence[Operand], axis: int) -> Kernel:
    """out = np.concatenate(inputs, axis) in one pass: each output element picks its input."""
    if not inputs:
        raise ExecutionError("concat needs at least one input")
    base = inputs[0].shape
    r = len(base)
    for op in inputs:
        if len(op.shape) != r or any(op.shape[k] != base[k] for k in range(r) if k != axis):
            raise ExecutionError(f"concat on axis {axis}: shapes {[list(o.shape) for o in inputs]} differ "
                                 "outside the axis")
    dt = inputs[0].dtype
    out_shape = tuple(sum(o.shape[axis] for o in inputs) if k == axis else d for k, d in enumerate(base))
    ct = ctype(dt)
    lines = [decompose("i", out_shape)]
    start = 0
    first = True
    for k, op in enumerate(inputs):
        if op.shape[axis] == 0:
            continue
        end = start + op.shape[axis]
        coords = [f"(c{axis} - {start}LL)" if d == axis else f"c{d}" for d in range(r)]
        cond = f"if (c{axis} < {end}LL)" if first else f"else if (c{axis} < {end}LL)"
        lines.append(f"        {cond} out[i] = {ct.save(ct.load(f'in{k}[{dot(coords, op.strides)}]'))};")
        first = False
        start = end
    work = numel(out_shape)
    params = [Param(f"in{k}", "in", o.dtype) for k, o in enumerate(inputs)] + [Param("out", "out", dt)]
    return make_kernel("concat", params, grid_stride("\n".join(lines), work), work,
                       span=max(extent(o.shape, o.strides) for o in inputs))


@memoize
def gather_kernel(data: Operand, indices: Operand, axis: int) -> Kernel:
    """out = np.take(data, indices, axis): negative indices count from the end; out-of-range
    indices are clamped (a kernel cannot raise; the registry rejects them on the host)."""
    if indices.dtype.kind not in "iu":
        raise ExecutionError(f"gather indices must be integers, got {indices.dtype}")
    r, ri = len(data.shape), len(indices.shape)
    d_axis = data.shape[axis]
    out_shape = data.shape[:axis] + indices.shape + data.shape[axis + 1:]
    ct = ctype(data.dtype)
    c = [f"c{k}" for k in range(len(out_shape))]
    ind_off = dot(c[axis:axis + ri], indices.strides)
    data_coords = c[:axis] + ["j"] + c[axis + ri:]
    lines = [decompose("i", out_shape) if out_shape else "",
             f"        idx_t j = (idx_t)ind[{ind_off}];",
             f"        if (j < 0) j += {d_axis}LL;",
             f"        j = j < 0 ? 0 : (j >= {d_axis}LL ? {d_axis - 1}LL : j);",
             f"        out[i] = {ct.save(ct.load(f'in0[{dot(data_coords, data.strides)}]'))};"]
    work = numel(out_shape)
    if r == 0:
        raise ExecutionError("gather needs data of rank >= 1")
    params = [Param("in0", "in", data.dtype), Param("ind", "in", indices.dtype), Param("out", "out", data.dtype)]
    span = max(extent(data.shape, data.strides), extent(indices.shape, indices.strides))
    return make_kernel("gather", params, grid_stride("\n".join(x for x in lines if x), work), work, span=span)


def _index(var: str, load: str, dim: int) -> list[str]:
    """C lines reading index `load` into `var`: negative counts from the end, out of range is
    clamped (a kernel cannot raise; the registry's NumPy rejects such indices on the host)."""
    return [f"        idx_t {var} = (idx_t){load};",
            f"        if ({var} < 0) {var} += {dim}LL;",
            f"        {var} = {var} < 0 ? 0 : ({var} >= {dim}LL ? {dim - 1}LL : {var});"]


def _gather_params(data: Operand, indices: Operand) -> list[Param]:
    if indices.dtype.kind not in "iu":
        raise ExecutionError(f"gather indices must be integers, got {indices.dtype}")
    return [Param("in0", "in", data.dtype), Param("ind", "in", indices.dtype), Param("out", "out", data.dtype)]


@memoize
def gather_elements_kernel(data: Operand, indices: Operand, axis: int) -> Kernel:
    """out = np.take_along_axis(data, indices, axis); out has the indices' shape."""
    params = _gather_params(data, indices)
    if data.shape[axis] == 0:
        raise ExecutionError(f"gather_elements from the empty axis {axis} of {list(data.shape)}")
    ct = ctype(data.dtype)
    c = [f"c{k}" for k in range(len(indices.shape))]
    coords = ["j" if k == axis else ck for k, ck in enumerate(c)]
    lines = [decompose("i", indices.shape), *_index("j", f"ind[{dot(c, indices.strides)}]", data.shape[axis]),
             f"        out[i] = {ct.save(ct.load(f'in0[{dot(coords, data.strides)}]'))};"]
    work = numel(indices.shape)
    span = max(extent(data.shape, data.strides), extent(indices.shape, indices.strides))
    return make_kernel("gather_elements", params, grid_stride("\n".join(x for x in lines if x), work), work,
                       span=span)


@memoize
def gather_nd_kernel(data: Operand, indices: Operand, batch_dims: int) -> Kernel:
    """out[b.., i.., s..] = data[b.., *indices[b.., i.., :], s..] (ONNX GatherND)."""
    params = _gather_params(data, indices)
    b, q, m = batch_dims, len(indices.shape), indices.shape[-1]
    out_shape = indices.shape[:-1] + data.shape[b + m:]
    ct = ctype(data.dtype)
    c = [f"c{k}" for k in range(len(out_shape))]
    lines = [decompose("i", out_shape)]
    picked = []
    for j in range(m):
        at = dot(c[:q - 1], indices.strides[:q - 1], 0)
        lines += _index(f"j{j}", f"ind[{at} + {j * indices.strides[-1]}LL]", data.shape[b + j])
        picked.append(f"j{j}")
    coords = c[:b] + picked + c[q - 1:]
    lines.append(f"        out[i] = {ct.save(ct.load(f'in0[{dot(coords, data.strides)}]'))};")
    work = numel(out_shape)
    span = max(extent(data.shape, data.strides), extent(indices.shape, indices.strides))
    return make_kernel("gather_nd", params, grid_stride("\n".join(x for x in lines if x), work), work, span=span)


def _check_region(op: str, mutant: Operand, fix: Operand, starts: Sequence[int], ends: Sequence[int]) -> None:
    """A correction's region matches the mutant's rank and the fix fills it exactly."""
    r = len(mutant.shape)
    if len(starts) != r or len(ends) != r:
        raise ExecutionError(f"{op}: region {list(starts)}..{list(ends)} does not match rank {r}")
    box = tuple(e - s for s, e in zip(starts, ends))
    if tuple(fix.shape) != box:
        raise ExecutionError(f"{op}: fix {list(fix.shape)} does not fill region {list(box)}")


@memoize
def correct_kernel(mutant: Operand, fix: Operand, starts: Sequence[int], ends: Sequence[int]) -> Kernel:
    """PET's correction in one pass: out = mutant, except out[starts:ends] = fix."""
    r = len(mutant.shape)
    _check_region("correct", mutant, fix, starts, ends)
    ct = ctype(mutant.dtype)
    c = [f"c{k}" for k in range(r)]
    inside = " && ".join(f"c{k} >= {s}LL && c{k} < {e}LL" for k, (s, e) in enumerate(zip(starts, ends))) or "true"
    fix_coords = [f"(c{k} - {s}LL)" for k, s in enumerate(starts)]
    fval = ct.load(f"fix[{dot(fix_coords, fix.strides)}]")
    mval = ct.load(f"in0[{dot(c, mutant.strides)}]")
    lines = [decompose("i", mutant.shape) if r else "",
             f"        out[i] = ({inside}) ? {ct.save(fval)} : {ct.save(mval)};"]
    work = numel(mutant.shape)
    params = [Param("in0", "in", mutant.dtype), Param("fix", "in", fix.dtype), Param("out", "out", mutant.dtype)]
    span = max(extent(mutant.shape, mutant.strides), extent(fix.shape, fix.strides))
    return make_kernel("correct", params, grid_stride("\n".join(x for x in lines if x), work), work, span=span)


@memoize
def fused_correct_kernel(mutant: Operand, fix: Operand, starts: Sequence[int], ends: Sequence[int],
                         view: Sequence[int], perm: Sequence[int]) -> Kernel:
    """PET's correction and the reshape/transpose chain after it in one pass: the output is the
    row-major data of transpose(reshape(correct(mutant, fix), view), perm) (a final reshape moves no
    data). Each output element finds its position in the view (through the inverse permutation),
    then in the corrected tensor, and reads the fix there inside the region, else the mutant."""
    r = len(mutant.shape)
    _check_region("fused_correct", mutant, fix, starts, ends)
    vshape = tuple(view) or tuple(mutant.shape)
    if numel(vshape) != numel(mutant.shape):
        raise ExecutionError(f"fused_correct: view {list(vshape)} does not hold {list(mutant.shape)}")
    perm = tuple(perm) or tuple(range(len(vshape)))
    tshape = tuple(vshape[p] for p in perm)
    coords = [""] * len(vshape)
    for k, p in enumerate(perm):  # transposed dim k is view dim perm[k]
        coords[p] = f"t{k}"
    ct = ctype(mutant.dtype)
    inside = " && ".join(f"c{k} >= {s}LL && c{k} < {e}LL" for k, (s, e) in enumerate(zip(starts, ends))) or "true"
    fval = ct.load(f"fix[{dot([f'(c{k} - {s}LL)' for k, s in enumerate(starts)], fix.strides)}]")
    mval = ct.load(f"in0[{dot([f'c{k}' for k in range(r)], mutant.strides)}]")
    lines = [decompose("i", tshape, prefix="t") if tshape else "",
             f"        const idx_t j = {dot(coords, contiguous_strides(vshape))};" if vshape else
             "        const idx_t j = 0;",
             decompose("j", mutant.shape) if r else "",
             f"        out[i] = ({inside}) ? {ct.save(fval)} : {ct.save(mval)};"]
    work = numel(mutant.shape)
    params = [Param("in0", "in", mutant.dtype), Param("fix", "in", fix.dtype), Param("out", "out", mutant.dtype)]
    span = max(extent(mutant.shape, mutant.strides), extent(fix.shape, fix.strides))
    return make_kernel("fused_correct", params, grid_stride("\n".join(x for x in lines if x), work), work,
                       span=span)


def out_shape_of_pad(shape: Sequence[int], pads: Sequence[int]) -> tuple[int, ...]:
    r = len(shape)
    return tuple(d + pads[k] + pads[r + k] for k, d in enumerate(shape))


__all__ = ["concat_kernel", "contiguous_strides", "correct_kernel", "fused_correct_kernel", "gather_kernel",
           "out_shape_of_pad", "pad_kernel"]
