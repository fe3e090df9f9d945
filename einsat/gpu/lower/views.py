"""TensorSSA's `access` and `assign` on the device.

access is the view itself (no kernel) unless a reshape step needs a copy; assign copies the
base once and writes the source through the same view of the copy with one strided kernel.
A `dselect` index is read back to the host (a synchronization).
"""

from __future__ import annotations

import numpy as np

from einsat.errors import ExecutionError
from einsat.gpu.kernels.elementwise import Step, elementwise_kernel
from einsat.gpu.lower.common import implements, materialize, operand, reshape, view_strides
from einsat.ir.ops.views import slice_key


def apply_spec(dev, x, spec, indices, writable: bool = False):
    """The view x[spec] on the device; with `writable`, NotImplementedError when a reshape
    step would need a copy (the result must alias x)."""
    for step in spec:
        kind = step[0]
        if kind == "slice":
            _, axis, start, stride, count = step
            x = x[(slice(None),) * axis + (slice_key(start, stride, count),)]
        elif kind == "select":
            x = x[(slice(None),) * step[1] + (step[2], Ellipsis)]  # Ellipsis: a 0-d view, never a scalar
        elif kind == "dselect":
            axis = step[1]
            i = int(np.asarray(dev.download(indices[step[2]])).reshape(()))
            if not -x.shape[axis] <= i < x.shape[axis]:
                raise ExecutionError(f"index {i} is out of bounds for axis {axis} with size {x.shape[axis]}")
            x = x[(slice(None),) * axis + (i, Ellipsis)]
        elif kind == "reshape":
            if writable and view_strides(x.shape, x.strides, x.dtype.itemsize, step[1]) is None:
                raise NotImplementedError("assign through a reshape that needs a copy")
            x = reshape(dev, x, step[1])
        elif kind == "transpose":
            x = x.transpose(tuple(step[1]))
        else:
            x = dev.xp.broadcast_to(x, tuple(step[1]))
    return x


@implements("access")
def access(dev, node, args, out_types):
    return [apply_spec(dev, args[0], node.attrs["spec"], args[1:])]


@implements("assign")
def assign(dev, node, args, out_types):
    x, w = args[0], args[1]
    out = materialize(dev, x)
    region = apply_spec(dev, out, node.attrs["spec"], args[2:], writable=True)
    item = region.dtype.itemsize
    k = elementwise_kernel(region.shape, [operand(w)], [Step("identity", (0,), region.dtype)],
                           out_strides=tuple(s // item for s in region.strides))
    dev.launch(k, [w, region])
    return [out]

