"""Indexing by tensors of indices: gather_elements and gather_nd (ONNX GatherElements, GatherND).

Both move data and compute nothing (`layout_only`); like `gather` they are linear in `data`,
but are not flagged multi-linear: the corrector (`einsat/verify`) has no rule for them.
Indices are int32 or int64, negative ones count from the end of their dim, and an index out
of range is an error when the op runs (NumPy's IndexError), never a silent clamp.

    gather_elements(data, indices, axis): out[i, j, k] = data[i, indices[i, j, k], k]  (axis 1)
    gather_nd(data, indices, batch_dims b): out[B.., I..] = data[B.., *indices[B.., I.., :]]
"""

from __future__ import annotations

from math import prod

import numpy as np

from einsat.ir.ops.slicing import _axis
from einsat.ir.registry import Attr, Op, OpDef, ShapeError, non_negative, register
from einsat.ir.types import TensorType


def _check_indices(t: TensorType) -> None:
    if t.dtype not in (np.dtype(np.int32), np.dtype(np.int64)):
        raise ShapeError(f"indices must be int32 or int64, not {t.dtype}")


class _Indexing(OpDef):
    arity = (2, 2)
    layout_only = True

    def flops(self, ins, outs, attrs):
        return 0

    def bytes(self, ins, outs, attrs):
        """Reads the indices and only the gathered data."""
        return ins[1].nbytes + 2 * outs[0].nbytes


@register
class GatherElements(_Indexing):
    """out[..., i, ...] = data[..., indices[..., i, ...], ...] along `axis`: the output has the
    indices' shape, which matches data's except along the axis (np.take_along_axis)."""

    op = Op.GATHER_ELEMENTS
    exact_in_half = True
    onnx_type = "GatherElements"
    attrs = {"axis": Attr("int", 0)}

    def normalize(self, attrs, types):
        return _axis(attrs, types)

    def infer(self, types, attrs):
        data, idx = types
        _check_indices(idx)
        axis = attrs["axis"]
        if idx.rank != data.rank or any(i > d for k, (i, d) in enumerate(zip(idx.shape, data.shape)) if k != axis):
            raise ShapeError(f"indices {list(idx.shape)} must have data's rank and fit in {list(data.shape)} "
                             f"outside axis {axis}")
        if data.shape[axis] == 0 and idx.size:
            raise ShapeError(f"cannot gather from the empty axis {axis} of {list(data.shape)}")
        return [TensorType(idx.shape, data.dtype)]

    def numpy(self, args, attrs):
        data, idx = args
        axis = attrs["axis"]
        inside = tuple(slice(0, n) if k != axis else slice(None) for k, n in enumerate(idx.shape))
        return [np.take_along_axis(data[inside], idx.astype(np.int64), axis=axis)]


@register
class GatherND(_Indexing):
    """out[b.., i..] = data[b.., *indices[b.., i.., :]]: the last dim of the indices (m) picks an
    element or slice of data after its first `batch_dims` dims, which both share.
    Output shape: indices.shape[:-1] + data.shape[batch_dims + m:]."""

    op = Op.GATHER_ND
    exact_in_half = True
    onnx_type = "GatherND"
    attrs = {"batch_dims": Attr("int", 0, non_negative)}

    def infer(self, types, attrs):
        data, idx = types
        _check_indices(idx)
        b = attrs["batch_dims"]
        if idx.rank < 1 or b >= min(data.rank, idx.rank) or data.shape[:b] != idx.shape[:b]:
            raise ShapeError(f"indices {list(idx.shape)} and data {list(data.shape)} must share their first "
                             f"batch_dims={b} dims, and indices need one more")
        m = idx.shape[-1]
        if m > data.rank - b:
            raise ShapeError(f"index tuples of length {m} are longer than data's {data.rank - b} indexed dims")
        return [TensorType(idx.shape[:-1] + data.shape[b + m:], data.dtype)]

    def numpy(self, args, attrs):
        data, idx = args
        b, m = attrs["batch_dims"], idx.shape[-1]
        batch = prod(data.shape[:b])
        d = data.reshape((batch,) + data.shape[b:])
        ix = idx.astype(np.int64).reshape((batch, -1, m))
        rows = np.arange(batch)[:, None]
        out = d[(rows, *(ix[..., j] for j in range(m)))]
        return [out.reshape(idx.shape[:-1] + data.shape[b + m:])]

    def to_onnx(self, ctx, node):
        """ONNX GatherND takes int64 indices only (GatherElements takes both): int32 ones are cast."""
        from onnx import TensorProto  # exporting: onnx is loaded anyway (`import einsat` does not load it)

        data, idx = node.inputs
        if ctx.type(idx).dtype != np.int64:
            (idx,) = ctx.node("Cast", [idx], [ctx.fresh("indices64")], to=TensorProto.INT64)
        ctx.node("GatherND", [data, idx], node.outputs, batch_dims=node.attrs["batch_dims"])
