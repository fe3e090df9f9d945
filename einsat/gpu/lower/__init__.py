"""Lowering: each registry op as device work (views, generated kernels, cuBLAS, cuDNN).

An implementation is `fn(dev, node, args, out_types) -> list[array]`, registered under the
op's name with `@implements("conv")`. It may return views of its inputs (layout ops), and
allocates everything else with `dev.empty`, so that a `CompiledProgram` can trace and replay
its memory. Ops with no implementation here run on the host (`HOST_OPS` says which are
meant to: opaque ONNX nodes).
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from einsat.gpu.kernels.elementwise import Operand, copy_kernel
from einsat.ir.types import TensorType

Impl = Callable[[Any, Any, list, Sequence[TensorType]], list]
IMPLS: dict[str, Impl] = {}
HOST_OPS = frozenset({"opaque"})


def implements(*names: str):
    def deco(fn: Impl) -> Impl:
        for n in names:
            IMPLS[n] = fn
        return fn
    return deco


def operand(a) -> Operand:
    return Operand.of(a)


def run_kernel(dev, kernel, inputs: list, out_shape, out_dtype):
    out = dev.empty(out_shape, out_dtype)
    dev.launch(kernel, list(inputs) + [out])
    return out


def materialize(dev, a):
    """A contiguous copy of any view (one generated copy kernel)."""
    return run_kernel(dev, copy_kernel(operand(a)), [a], a.shape, a.dtype)


def is_contiguous(a) -> bool:
    expect = a.dtype.itemsize
    for d, s in zip(reversed(a.shape), reversed(a.strides)):
        if d != 1 and s != expect:
            return False
        expect *= d
    return True


def contiguous(dev, a):
    return a if is_contiguous(a) else materialize(dev, a)


def view_strides(shape, strides, itemsize: int, new_shape) -> tuple[int, ...] | None:
    """Byte strides of `new_shape` viewing the same elements as (shape, strides), or None
    when a reshape of that layout needs a copy (NumPy's rule, computed on metadata only)."""
    if int(np.prod(shape)) == 0:
        return tuple(itemsize for _ in new_shape)
    fake = np.lib.stride_tricks.as_strided(np.zeros(1, dtype=f"V{itemsize}"), shape, strides)
    try:
        return np.reshape(fake, tuple(new_shape), copy=False).strides
    except ValueError:
        return None


def reshape(dev, a, new_shape):
    """A view of `a` with `new_shape` when the layout allows it, else a contiguous copy."""
    new_shape = tuple(int(d) for d in new_shape)
    if tuple(a.shape) == new_shape:
        return a
    st = view_strides(a.shape, a.strides, a.dtype.itemsize, new_shape)
    if st is None:
        a = materialize(dev, a)
        st = view_strides(a.shape, a.strides, a.dtype.itemsize, new_shape)
    return dev.xp.lib.stride_tricks.as_strided(a, new_shape, st)


def lower(dev, node, args, out_types) -> list:
    """Run `node` on `dev`; KeyError if the op has no device implementation."""
    return IMPLS[node.op.value](dev, node, args, out_types)


def run_node(dev, node, args, out_types, host_fallbacks: dict | None = None) -> list:
    """Lower one node on `dev`, or run its NumPy reference on the host when no device lowering
    takes it (the op has none, or raised NotImplementedError for this case)."""
    name = node.op.value
    if name in IMPLS:
        try:
            return IMPLS[name](dev, node, args, out_types)
        except NotImplementedError:
            pass
    if host_fallbacks is not None:
        host_fallbacks[name] = host_fallbacks.get(name, 0) + 1
    host_args = [dev.download(a) if a is not None else None for a in args]
    outs = node.definition.numpy(host_args, node.attrs)
    return [dev.upload(np.asarray(o, dtype=t.dtype)) for o, t in zip(outs, out_types)]


def run_graph(dev, graph, args: list, host_fallbacks: dict | None = None) -> list:
    """Run a whole graph on `dev` (loop bodies, if branches): inputs in order, outputs in order."""
    env = dict(zip(graph.inputs, args))
    env.update({n: dev.constant(a) for n, a in graph.weights.items()})
    for node in graph.nodes:
        outs = run_node(dev, node, [env[i] if i else None for i in node.inputs],
                        [graph.types[o] for o in node.outputs], host_fallbacks)
        env.update(zip(node.outputs, outs))
    return [env[o] for o in graph.outputs]


def implemented() -> frozenset[str]:
    return frozenset(IMPLS)


from einsat.gpu.lower import banded, control, conv, elementwise, eop, fused, layout, linear, reduce, views  # noqa: E402,F401,I001
