"""Convolutions on cuDNN: conv (forward) and conv_transpose (backward data), any groups,
strides, dilations and (asymmetric) paddings; the bias is one broadcast add after.

1-D convolutions run as 2-D with a unit height; more than 3 spatial dims have no cuDNN
kernel and are left to the host (NotImplementedError).
"""

from __future__ import annotations

from einsat.gpu.kernels import cudnn
from einsat.gpu.kernels.elementwise import Operand, Step, elementwise_kernel
from einsat.gpu.kernels.layout import pad_kernel
from einsat.gpu.lower.common import contiguous, implements, operand, run_kernel


def _lifted(dev, a, shape):
    """`a` seen with the plan's (possibly lifted) shape."""
    if tuple(a.shape) == tuple(shape):
        return a
    strides = cudnn.lift_strides(a.strides, a.shape)
    return dev.xp.lib.stride_tricks.as_strided(a, tuple(shape), strides)


def add_bias(dev, y, bias, out_t):
    """out = y + bias[None, :, None, ...] in one kernel."""
    rank = len(out_t.shape)
    item = bias.dtype.itemsize
    b = Operand(bias.dtype, (bias.shape[0],) + (1,) * (rank - 2), (bias.strides[0] // item,) + (0,) * (rank - 2))
    k = elementwise_kernel(out_t.shape, [operand(y), b], [Step("add", (0, 1), out_t.dtype)])
    return run_kernel(dev, k, [y, bias], out_t.shape, out_t.dtype)


def _operands(args, out_t):
    """(x, w, bias or None) of a conv or conv_transpose that cuDNN can run."""
    x, w = args[0], args[1]
    bias = args[2] if len(args) > 2 else None
    if not cudnn.supported(out_t.dtype):
        raise NotImplementedError(f"cuDNN convolutions do not take {out_t.dtype}")
    if len(w.shape) - 2 > cudnn.MAX_SPATIAL:
        raise NotImplementedError("more than 3 spatial dims")
    return x, w, bias


def _run_plan(dev, plan, x, w, y):
    """Run a cuDNN plan on packed x, w and the output buffer y, each seen with the plan's shape."""
    dev.conv(plan, _lifted(dev, x, plan.x_shape), _lifted(dev, w, plan.w_shape), _lifted(dev, y, plan.y_shape))


@implements("conv")
def conv(dev, node, args, out_types):
    out_t = out_types[0]
    x, w, bias = _operands(args, out_t)
    at = node.attrs
    plan = cudnn.plan_conv(x.shape, w.shape, at["stride"], at["padding"], at["dilation"], at["groups"])
    if plan.pre_pad is not None:
        k = pad_kernel(operand(x), plan.pre_pad)
        x = run_kernel(dev, k, [x], plan.x_shape[:2] + plan.x_shape[-(len(w.shape) - 2):], x.dtype)
    else:  # cuDNN takes strided tensors, but not every algorithm does: give it a packed one
        x = contiguous(dev, x)
    w = contiguous(dev, w)
    y = dev.empty(out_t.shape, out_t.dtype)
    _run_plan(dev, plan, x, w, y)
    return [y if bias is None else add_bias(dev, y, bias, out_t)]


@implements("conv_transpose")
def conv_transpose(dev, node, args, out_types):
    out_t = out_types[0]
    x, w, bias = _operands(args, out_t)
    at = node.attrs
    plan = cudnn.plan_conv_transpose(x.shape, w.shape, out_t.shape, at["stride"], at["padding"], at["dilation"],
                                     at["groups"], at.get("output_padding", ()))
    x = contiguous(dev, x)
    w = contiguous(dev, w)
    nsp = len(w.shape) - 2
    core_shape = plan.y_shape[:2] + plan.y_shape[-nsp:]
    y = dev.empty(core_shape, out_t.dtype)
    _run_plan(dev, plan, x, w, y)
    if plan.post_pad is not None:
        y = run_kernel(dev, pad_kernel(operand(y), plan.post_pad), [y], out_t.shape, out_t.dtype)
    return [y if bias is None else add_bias(dev, y, bias, out_t)]
